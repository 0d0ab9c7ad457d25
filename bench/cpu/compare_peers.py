#!/usr/bin/env python3
"""CPU forward+backward of linear cross-entropy, lossjit next to what a user
would pick instead, in one run (a benchmark, never a test):

  torch-eager     F.cross_entropy(F.linear(x, w)) with autograd (MKL GEMMs,
                  materialized logits)
  torch-native    torch's F.linear_cross_entropy(..., options=
                  torch.nn.LinearCrossEntropyOptions()) (chunked), when this
                  torch has it
  torch-compile   torch.compile of the eager form
  lossjit         lossjit.linear_cross_entropy (default path)
  lossjit-fused   lossjit.linear_cross_entropy(..., fused_backward=True)
  lossjit-filtered, lossjit-fused-filtered
                  the same with filter_ignored=True (the kernels skip the
                  rows --ignored masks; with --ignored 0 they match the
                  unfiltered ones)

--ignored F sets the targets of the first F·N rows to -100 (a prompt that
fine-tuning masks); every variant computes the same loss over the rest.

Every variant runs in its own process: one warm-up call (compilation,
caches), then the timed calls; the time is the best of --repeat, the memory
the growth of the process high-water mark (VmHWM, reset through
/proc/self/clear_refs) during a timed call, over the inputs and the
gradient buffers that exist before it. With --rounds R the variants run R
times in turn and each keeps its fastest round. That growth includes the gradient
tensors autograd hands to the existing .grad buffers ((N + V)·D elements,
which every variant pays); the table shows it and what is left beyond it.
The load average before and after each variant is recorded: on a machine
shared with other work the times are not comparable.

    python3 bench/cpu/compare_peers.py [--n 4096 --v 32000 --d 1024]
        [--dtypes float32,bfloat16] [--threads 2] [--rounds R] [--only NAME,...]
        [--ignored F]
        [--json out.json] [--markdown out.md] [--plot-prefix docs/cpu-peers]

writes, per dtype, a table (time, ratio to torch eager, extra peak memory)
and with --plot-prefix a PNG PREFIX-f32.png / PREFIX-bf16.png (time and
memory per implementation; matplotlib). Run from the repository root after
scripts/test.sh (it finds the built extension in build/python, or set
LOSSJIT_BUILD).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from side_by_side import best_of, head_inputs  # noqa: E402  (bench/side_by_side.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANTS = ["torch-eager", "torch-native", "torch-compile", "lossjit", "lossjit-fused"]
#: Run by default where --ignored is set.
FILTERED = ["lossjit-filtered", "lossjit-fused-filtered"]
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def run_variant(name, n, v, d, dtype_name, repeat, threads, ignored=0.0):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x, w, y = head_inputs(torch, n, v, d, dtype_name, g)
    y[:round(ignored * n)] = -100

    if name == "torch-eager":
        def step():
            return F.cross_entropy(F.linear(x, w).float(), y)
    elif name == "torch-native":
        if not (hasattr(F, "linear_cross_entropy")
                and hasattr(torch.nn, "LinearCrossEntropyOptions")):
            return {"variant": name, "missing": f"torch {torch.__version__} has no "
                    "F.linear_cross_entropy with LinearCrossEntropyOptions"}
        options = torch.nn.LinearCrossEntropyOptions()

        def step():
            return F.linear_cross_entropy(x, w, y, options=options)
    elif name == "torch-compile":
        compiled = torch.compile(lambda a, b, t: F.cross_entropy(F.linear(a, b).float(), t))

        def step():
            return compiled(x, w, y)
    else:
        sys.path[:0] = [os.path.join(ROOT, "python"),
                        os.path.join(os.environ.get("LOSSJIT_BUILD", os.path.join(ROOT, "build")),
                                     "python")]
        import lossjit
        fused = name.startswith("lossjit-fused")
        filtered = name.endswith("-filtered")

        def step():
            return lossjit.linear_cross_entropy(x, w, y, fused_backward=fused,
                                                filter_ignored=filtered)

    def call():
        x.grad.zero_()
        w.grad.zero_()
        loss = step()
        loss.backward()
        return loss

    best, peak, loss = best_of(call, repeat)
    grads = (n + v) * d * x.element_size()
    return {"variant": name, "seconds": best, "extra_peak_mib": peak / 2 ** 20,
            "gradients_mib": grads / 2 ** 20, "loss": float(loss),
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def table(rows, baseline="torch-eager"):
    base = next((r for r in rows if r["variant"] == baseline and "seconds" in r), None)
    lines = ["| implementation | fwd+bwd | vs torch eager | extra peak memory | "
             "beyond the gradient tensors | load (1-min avg) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "missing" in r:
            lines.append(f"| {r['variant']} | — ({r['missing']}) | | | | |")
            continue
        ratio = f"{base['seconds'] / r['seconds']:.2f}x" if base else "-"
        beyond = r["extra_peak_mib"] - r["gradients_mib"]
        lines.append(f"| {r['variant']} | {r['seconds']:.2f} s | {ratio} | "
                     f"{r['extra_peak_mib']:.0f} MiB | {beyond:.0f} MiB | "
                     f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |")
    return "\n".join(lines)


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in rows if "seconds" in r]
    names = [r["variant"] for r in rows]
    colors = ["#dd8452" if n.startswith("lossjit") else "#4c72b0" for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.barh(names, [r["seconds"] for r in rows], color=colors)
    a.set_xlabel("forward+backward (s)")
    a.invert_yaxis()
    grads = [r["gradients_mib"] for r in rows]
    b.barh(names, grads, color="#cccccc")
    b.barh(names, [r["extra_peak_mib"] - g for r, g in zip(rows, grads)], left=grads,
           color=colors)
    b.set_xlabel("extra peak memory (MiB)")
    b.set_yticks([])
    b.invert_yaxis()
    from matplotlib.patches import Patch
    b.legend(handles=[Patch(color="#cccccc", label="gradient tensors"),
                      Patch(color="#4c72b0", label="beyond them: torch"),
                      Patch(color="#dd8452", label="beyond them: lossjit")],
             loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--v", type=int, default=32000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", help="variants (default: all, the filtered ones with --ignored)")
    p.add_argument("--ignored", type=float, default=0.0,
                   help="fraction of rows (the first ones) whose target is -100")
    p.add_argument("--json")
    p.add_argument("--markdown")
    p.add_argument("--plot-prefix")
    p.add_argument("--child")
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    a = p.parse_args()
    if not 0.0 <= a.ignored <= 1.0:
        p.error(f"--ignored must be a fraction in [0, 1], got {a.ignored}")
    if a.only is None:
        a.only = ",".join(VARIANTS + (FILTERED if a.ignored else []))
    if a.child:
        print(json.dumps(run_variant(a.child, a.n, a.v, a.d, a.dtype, a.repeat, a.threads,
                                     a.ignored)))
        return
    results, sections = {}, []
    for dtype in a.dtypes.split(","):
        best = {}
        # Rounds interleave the variants, so a burst of load on a shared
        # machine hits one round of each rather than all runs of one; each
        # variant keeps its fastest round (and that round's load).
        for _ in range(a.rounds):
            for name in a.only.split(","):
                cmd = [sys.executable, __file__, "--child", name, "--n", str(a.n),
                       "--v", str(a.v), "--d", str(a.d), "--dtype", dtype,
                       "--repeat", str(a.repeat), "--threads", str(a.threads),
                       "--ignored", str(a.ignored)]
                load_before = os.getloadavg()[0]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"{dtype} {name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                r["load"] = [load_before, os.getloadavg()[0]]
                if "missing" in r:
                    print(f"{dtype} {name}: {r['missing']}", flush=True)
                else:
                    print(f"{dtype} {name}: {r['seconds']:.3f} s, extra peak "
                          f"{r['extra_peak_mib']:.1f} MiB, loss {r['loss']:.6f}, load "
                          f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}", flush=True)
                kept = best.get(name)
                if kept is None or r.get("seconds", 0) < kept.get("seconds", float("inf")):
                    best[name] = r
        rows = [best[name] for name in a.only.split(",") if name in best]
        title = f"N={a.n} V={a.v} D={a.d} {dtype}, {a.threads} threads"
        if a.ignored:
            title += f", {a.ignored:.0%} of the targets ignored"
        results[dtype] = rows
        sections.append(f"{title}\n\n{table(rows)}")
        if a.plot_prefix:
            loads = [x for r in rows if "load" in r for x in r["load"]]
            shown = f"{title}, load {min(loads):.1f}–{max(loads):.1f}" if loads else title
            plot(rows, f"{a.plot_prefix}-{SHORT.get(dtype, dtype)}.png", shown)
    text = "\n\n".join(sections)
    print("\n" + text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": [a.n, a.v, a.d], "threads": a.threads, "ignored": a.ignored,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
