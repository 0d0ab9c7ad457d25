#!/usr/bin/env python3
"""CPU forward+backward of the loss families (issue 14), lossjit next to
their eager torch form and torch's native chunked op where it applies, in
one run (a benchmark, never a test):

  families   ce-smooth-weights  F.cross_entropy(..., weight=, label_smoothing=0.1)
             logprob-entropy    per-token log-prob + entropy bonus (a GRPO objective)
             z-loss             cross-entropy + 1e-4·lse²
             topk-kd            KL to a teacher's stored top-32 log-probs
             kl                 forward KL to a teacher head (its own [V, D] weight)
             jsd                generalized JSD (β = 0.5) to a teacher head, written as
                                TRL's GKD trainer writes it
  variants   eager              the loss written in plain torch (materialized logits)
             native             torch's F.linear_cross_entropy with
                                LinearCrossEntropyOptions (ce-smooth-weights only)
             lossjit            the lossjit function (linear_cross_entropy,
                                linear_log_prob, linear_topk_distill, linear_kl_div,
                                linear_jsd)
             lossjit-jit        the eager form under @lossjit.jit, unedited

Every (family, variant) runs in its own process: one warm-up call, then the
timed calls; the time is the best of --repeat, the memory the growth of the
process high-water mark (VmHWM, reset through /proc/self/clear_refs) during
a timed call, over the inputs and the gradient buffers that exist before it.

    python3 bench/python/compare_families.py [--n 4096 --v 32000 --d 1024]
        [--dtype float32|bfloat16] [--threads 2] [--only FAMILY,...]
        [--json out.json] [--markdown out.md]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from side_by_side import best_of, head_inputs  # noqa: E402  (bench/side_by_side.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAMILIES = ["ce-smooth-weights", "logprob-entropy", "z-loss", "topk-kd", "kl", "jsd"]
#: Families the decorator cannot trace yet (no row for them, not a failure).
JIT_UNSUPPORTED = set()
VARIANTS = ["eager", "native", "lossjit", "lossjit-jit"]
TOP_K = 32


def losses(F, torch, lossjit, v):
    """family -> (eager(x, w, y, extra), lossjit(x, w, y, extra), native or None)."""

    def ce_eager(x, w, y, e):
        return F.cross_entropy(F.linear(x, w).float(), y, weight=e["cw"], label_smoothing=0.1)

    def ce_lossjit(x, w, y, e):
        return lossjit.linear_cross_entropy(x, w, y, weight=e["cw"], label_smoothing=0.1)

    def ce_native(x, w, y, e):
        return F.linear_cross_entropy(x, w, y, weight=e["cw"].to(x.dtype), label_smoothing=0.1,
                                      options=torch.nn.LinearCrossEntropyOptions())

    def lp_eager(x, w, y, e):
        logp = torch.log_softmax(F.linear(x, w).float() / 0.7, dim=-1)
        token = logp.gather(-1, y[:, None])[:, 0]
        entropy = -(logp.exp() * logp).sum(-1)
        return -(token * e["adv"]).mean() - 0.01 * entropy.mean()

    def lp_lossjit(x, w, y, e):
        token, entropy = lossjit.linear_log_prob(x, w, y, temperature=0.7, return_entropy=True)
        return -(token * e["adv"]).mean() - 0.01 * entropy.mean()

    def z_eager(x, w, y, e):
        logits = F.linear(x, w).float()
        return F.cross_entropy(logits, y) + 1e-4 * torch.logsumexp(logits, -1).square().mean()

    def z_lossjit(x, w, y, e):
        loss, lse = lossjit.linear_cross_entropy(x, w, y, return_lse=True)
        return loss + 1e-4 * lse.square().mean()

    def kd_eager(x, w, y, e):
        logp = F.log_softmax(F.linear(x, w).float(), dim=-1)
        student = logp.gather(-1, e["idx"])
        q = e["tlogp"].exp()
        return (q * (e["tlogp"] - student)).sum(-1).mean()

    def kd_lossjit(x, w, y, e):
        return lossjit.linear_topk_distill(x, w, e["idx"], e["tlogp"])

    def kl_eager(x, w, y, e):
        student = F.log_softmax(F.linear(x, w).float(), dim=-1)
        teacher = F.log_softmax(F.linear(e["tx"], e["tw"]).float(), dim=-1)
        return F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1).mean()

    def kl_lossjit(x, w, y, e):
        return lossjit.linear_kl_div(x, w, e["tx"], e["tw"])

    def jsd_eager(x, w, y, e, beta=0.5):
        # TRL's GKDTrainer.generalized_jsd_loss, reduction "batchmean".
        student_log_probs = F.log_softmax(F.linear(x, w).float(), dim=-1)
        teacher_log_probs = F.log_softmax(F.linear(e["tx"], e["tw"]).float(), dim=-1)
        beta = torch.tensor(beta, dtype=student_log_probs.dtype)
        mixture_log_probs = torch.logsumexp(
            torch.stack([student_log_probs + torch.log(1 - beta),
                         teacher_log_probs + torch.log(beta)]), dim=0)
        kl_teacher = F.kl_div(mixture_log_probs, teacher_log_probs, reduction="none",
                              log_target=True)
        kl_student = F.kl_div(mixture_log_probs, student_log_probs, reduction="none",
                              log_target=True)
        jsd = beta * kl_teacher + (1 - beta) * kl_student
        return jsd.sum() / jsd.size(0)

    def jsd_lossjit(x, w, y, e):
        return lossjit.linear_jsd(x, w, e["tx"], e["tw"], beta=0.5)

    return {"ce-smooth-weights": (ce_eager, ce_lossjit, ce_native),
            "logprob-entropy": (lp_eager, lp_lossjit, None),
            "z-loss": (z_eager, z_lossjit, None),
            "topk-kd": (kd_eager, kd_lossjit, None),
            "kl": (kl_eager, kl_lossjit, None),
            "jsd": (jsd_eager, jsd_lossjit, None)}


def run_variant(family, variant, n, v, d, dtype_name, repeat, threads):
    import torch
    import torch.nn.functional as F

    sys.path[:0] = [os.path.join(ROOT, "python"),
                    os.path.join(os.environ.get("LOSSJIT_BUILD", os.path.join(ROOT, "build")),
                                 "python")]
    import lossjit

    torch.set_num_threads(threads)
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    x, w, y = head_inputs(torch, n, v, d, dtype_name, g)
    extra = {"cw": torch.rand(v, generator=g) + 0.5,
             "adv": torch.randn(n, generator=g),
             "idx": torch.randint(0, v, (n, TOP_K), generator=g)}
    extra["tlogp"] = torch.log_softmax(torch.randn(n, TOP_K, generator=g), -1) - 1.0
    if family in ("kl", "jsd"):  # the teacher head: inputs, never differentiated
        extra["tx"] = torch.randn(n, d, generator=g).to(dtype)
        extra["tw"] = (torch.randn(v, d, generator=g) * (4.0 / d ** 0.5)).to(dtype)
    eager, fused, native = losses(F, torch, lossjit, v)[family]
    if variant == "eager":
        fn = eager
    elif variant == "native":
        if native is None:
            return None
        fn = native
    elif variant == "lossjit":
        fn = fused
    else:
        if family in JIT_UNSUPPORTED:
            return None
        fn = lossjit.jit(eager)

    def step():
        loss = fn(x, w, y, extra)
        loss.backward()
        return loss

    best, peak, _ = best_of(step, repeat)
    return {"seconds": best, "extra_peak_bytes": peak}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--v", type=int, default=32000)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", default="")
    parser.add_argument("--json", default="")
    parser.add_argument("--markdown", default="")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        family, variant = args.child.split(":")
        result = run_variant(family, variant, args.n, args.v, args.d, args.dtype, args.repeat,
                             args.threads)
        print(json.dumps(result))
        return
    families = [f for f in FAMILIES if not args.only or f in args.only.split(",")]
    rows = []
    for family in families:
        for variant in VARIANTS:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{family}:{variant}",
                   "--n", str(args.n), "--v", str(args.v), "--d", str(args.d), "--dtype",
                   args.dtype, "--threads", str(args.threads), "--repeat", str(args.repeat)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{family} {variant}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result is None:
                continue
            rows.append({"family": family, "variant": variant, **result})
            print(f"{family:18s} {variant:12s} {result['seconds']:8.2f} s "
                  f"{result['extra_peak_bytes'] / 2**20:9.1f} MiB", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": [args.n, args.v, args.d], "dtype": args.dtype,
                       "threads": args.threads, "rows": rows}, f, indent=1)
    if args.markdown:
        lines = ["| family | variant | time (s) | vs eager | extra peak (MiB) | vs eager |",
                 "|---|---|---|---|---|---|"]
        for row in rows:
            eager = next(r for r in rows if r["family"] == row["family"]
                         and r["variant"] == "eager")
            lines.append(
                f"| {row['family']} | {row['variant']} | {row['seconds']:.2f} | "
                f"{row['seconds'] / eager['seconds']:.2f}× | "
                f"{row['extra_peak_bytes'] / 2**20:.0f} | "
                f"{row['extra_peak_bytes'] / max(eager['extra_peak_bytes'], 1):.2f}× |")
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
