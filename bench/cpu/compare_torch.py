#!/usr/bin/env python3
"""CPU forward+backward of linear cross-entropy: lossjit's CPU backend next to
PyTorch eager (F.linear + F.cross_entropy with autograd), in one run.

    python3 bench/cpu/compare_torch.py [--n 4096 --v 32000 --d 1024] [--build build]

Peak memory is the growth of the process high-water mark (VmHWM) during the
timed call, after the inputs exist; each side runs in its own process.
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from side_by_side import hwm  # noqa: E402  (bench/side_by_side.py)


def torch_side(n, v, d, repeat):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    x = torch.randn(n, d, requires_grad=True)
    w = (torch.randn(v, d) * (4.0 / d**0.5)).requires_grad_()
    y = torch.randint(0, v, (n,))
    best = 1e30
    peak = 0
    for _ in range(repeat):
        x.grad = None
        w.grad = None
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = hwm()
        start = time.perf_counter()
        loss = F.cross_entropy(F.linear(x, w).float(), y)
        loss.backward()
        best = min(best, time.perf_counter() - start)
        peak = max(peak, hwm() - before)
    print(f"torch-eager N={n} V={v} D={d} f32: fwd+bwd {best:.3f} s, extra peak RSS "
          f"{peak / 2**20:.1f} MiB, loss {loss.item():.6f}, threads {torch.get_num_threads()}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--v", type=int, default=32000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--build", default="build")
    p.add_argument("--torch-only", action="store_true")
    a = p.parse_args()
    if a.torch_only:
        torch_side(a.n, a.v, a.d, a.repeat)
        return
    bench = os.path.join(a.build, "bin", "lossjit-bench-cpu")
    for strategy in ("chunked", "recompute"):
        subprocess.run([bench, str(a.n), str(a.v), str(a.d), "--strategy", strategy,
                        "--repeat", str(a.repeat)], check=True)
        # (each run also prints the fused forward+backward once)
    subprocess.run([sys.executable, __file__, "--torch-only", "--n", str(a.n), "--v",
                    str(a.v), "--d", str(a.d), "--repeat", str(a.repeat)], check=True)


if __name__ == "__main__":
    main()
