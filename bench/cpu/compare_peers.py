#!/usr/bin/env python3
"""CPU forward+backward of linear cross-entropy, lossjit next to what a user
would pick instead, in one run (a benchmark, never a test):

  torch-eager     F.cross_entropy(F.linear(x, w)) with autograd (MKL GEMMs,
                  materialized logits)
  torch-native    torch's F.linear_cross_entropy(..., options=
                  torch.nn.LinearCrossEntropyOptions()) (chunked)
  torch-compile   torch.compile of the eager form
  lossjit         lossjit.linear_cross_entropy (default path)
  lossjit-fused   lossjit.linear_cross_entropy(..., fused_backward=True)

Every variant runs in its own process: one warm-up call (compilation,
caches), then the timed calls; the time is the best of --repeat, the memory
the growth of the process high-water mark (VmHWM, reset through
/proc/self/clear_refs) during a timed call, over the inputs and the
gradient buffers that exist before it.

    python3 bench/cpu/compare_peers.py [--n 4096 --v 32000 --d 1024]
        [--dtype float32|bfloat16] [--threads 2] [--only NAME,...]
        [--json out.json] [--plot out.png]

Run from the repository root after scripts/test.sh (it finds the built
extension in build/python, or set LOSSJIT_BUILD).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANTS = ["torch-eager", "torch-native", "torch-compile", "lossjit", "lossjit-fused"]


def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def run_variant(name, n, v, d, dtype_name, repeat, threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(v, d, generator=g) * (4.0 / d ** 0.5)).to(dtype).requires_grad_()
    y = torch.randint(0, v, (n,), generator=g)
    # Gradient buffers exist before the timed call, as in a training step
    # that reuses them.
    x.grad = torch.zeros_like(x)
    w.grad = torch.zeros_like(w)

    if name == "torch-eager":
        def step():
            return F.cross_entropy(F.linear(x, w).float(), y)
    elif name == "torch-native":
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
        fused = name == "lossjit-fused"

        def step():
            return lossjit.linear_cross_entropy(x, w, y, fused_backward=fused)

    def call():
        x.grad.zero_()
        w.grad.zero_()
        loss = step()
        loss.backward()
        return loss

    call()  # warm-up: compilation, caches, allocator
    best, peak = float("inf"), 0
    for _ in range(repeat):
        reset_hwm()
        before = hwm()
        start = time.perf_counter()
        loss = call()
        best = min(best, time.perf_counter() - start)
        peak = max(peak, hwm() - before)
    return {"variant": name, "seconds": best, "extra_peak_mib": peak / 2 ** 20,
            "loss": float(loss), "threads": torch.get_num_threads()}


def table(rows, baseline):
    base = next((r for r in rows if r["variant"] == baseline), None)
    lines = ["| implementation | fwd+bwd | vs torch eager | extra peak memory |",
             "|---|---|---|---|"]
    for r in rows:
        ratio = f"{base['seconds'] / r['seconds']:.2f}x" if base else "-"
        lines.append(f"| {r['variant']} | {r['seconds']:.2f} s | {ratio} | "
                     f"{r['extra_peak_mib']:.0f} MiB |")
    return "\n".join(lines)


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["variant"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.barh(names, [r["seconds"] for r in rows], color="#4c72b0")
    a.set_xlabel("forward+backward (s)")
    b.barh(names, [r["extra_peak_mib"] for r in rows], color="#dd8452")
    b.set_xlabel("extra peak memory (MiB)")
    b.set_yticks([])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--v", type=int, default=32000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", default=",".join(VARIANTS))
    p.add_argument("--json")
    p.add_argument("--plot")
    p.add_argument("--child")
    a = p.parse_args()
    if a.child:
        print(json.dumps(run_variant(a.child, a.n, a.v, a.d, a.dtype, a.repeat, a.threads)))
        return
    rows = []
    for name in a.only.split(","):
        cmd = [sys.executable, __file__, "--child", name, "--n", str(a.n), "--v", str(a.v),
               "--d", str(a.d), "--dtype", a.dtype, "--repeat", str(a.repeat),
               "--threads", str(a.threads)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{name}: {r['seconds']:.3f} s, extra peak {r['extra_peak_mib']:.1f} MiB, "
              f"loss {r['loss']:.6f}", flush=True)
    title = f"N={a.n} V={a.v} D={a.d} {a.dtype}, {a.threads} threads"
    print(f"\n{title}\n" + table(rows, "torch-eager"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": [a.n, a.v, a.d], "dtype": a.dtype, "rows": rows}, f, indent=1)
    if a.plot:
        plot(rows, a.plot, title)


if __name__ == "__main__":
    main()
