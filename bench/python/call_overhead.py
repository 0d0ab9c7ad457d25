#!/usr/bin/env python3
"""Python-call overhead of a cache hit, next to plain PyTorch calls.

On tiny CPU tensors (N=4 tokens, D=8, V=16, float32) the kernels do ~1k
flops, so the time per call is the cost of getting there: argument checks,
the torch.library dispatch (custom op, autograd, autocast keys), the kernel
cache lookup, the pybind11 call and the LLVM-JIT kernel launch.

    PYTHONPATH=python:build/python python3 bench/python/call_overhead.py

Prints µs per call (median of --repeat timing runs of --number calls each).
A benchmark, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import timeit

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import lossjit
except ImportError:
    sys.path[:0] = [os.path.join(_ROOT, "python"),
                    os.path.join(os.environ.get("LOSSJIT_BUILD", os.path.join(_ROOT, "build")),
                                 "python")]
    import lossjit

import torch
import torch.nn.functional as F

from lossjit import _kernels, _ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if not lossjit.has_compiler:
        sys.exit("call_overhead: this build has no compiler (no CPU backend) to time")

    torch.manual_seed(0)
    torch.set_num_threads(1)
    n, d, v = 4, 8, 16
    h = torch.randn(n, d)
    w = torch.randn(v, d)
    y = torch.randint(0, v, (n,))
    logits = F.linear(h, w)
    hg = h.clone().requires_grad_()
    wg = w.clone().requires_grad_()

    @lossjit.jit
    def jitted(hidden, weight, target):
        return F.cross_entropy(F.linear(hidden, weight), target)

    kernel = _kernels.forward_kernel(torch.float32, torch.int64, False, -100, "mean", "",
                                     h.device)
    loss_buf, lse_buf = torch.empty(()), torch.empty(n)
    tensors = {"x": h, "w": w, "labels": y, "loss": loss_buf, "lse": lse_buf}
    raw_buffers = [(tensors[k].data_ptr(), tensors[k].numel(),
                    _kernels.dtype_name(tensors[k].dtype)) for k in kernel.names]

    cases = [
        ("F.cross_entropy(logits, y)  [plain PyTorch]",
         lambda: F.cross_entropy(logits, y)),
        ("F.cross_entropy(F.linear(h, w), y)  [eager]",
         lambda: F.cross_entropy(F.linear(h, w), y)),
        ("lossjit.linear_cross_entropy(h, w, y)",
         lambda: lossjit.linear_cross_entropy(h, w, y)),
        ("torch.ops.lossjit.linear_cross_entropy (op only)",
         lambda: torch.ops.lossjit.linear_cross_entropy(h, w, y, None, -100, "mean", "")),
        ("@lossjit.jit loss (cache hit)",
         lambda: jitted(h, w, y)),
        ("  native: CpuOp.launch (pybind11 + label check + JIT kernels)",
         lambda: kernel.op.launch(raw_buffers, n, v, d, 1, True)),
        ("  python: input checks",
         lambda: _ops.check_inputs(h, w, y, None, -100, "mean")),
        ("eager, requires_grad (forward only)",
         lambda: F.cross_entropy(F.linear(hg, wg), y)),
        ("lossjit, requires_grad (forward only)",
         lambda: lossjit.linear_cross_entropy(hg, wg, y)),
    ]
    # Warm up: compile, fill caches, trace the decorated function.
    for _, fn in cases:
        for _ in range(50):
            fn()
    assert torch.equal(lossjit.linear_cross_entropy(h, w, y), jitted(h, w, y))

    results = []
    for name, fn in cases:
        runs = timeit.repeat(fn, number=args.number, repeat=args.repeat)
        us = statistics.median(runs) / args.number * 1e6
        results.append({"case": name.strip(), "us_per_call": round(us, 2)})

    info = {"torch": torch.__version__, "lossjit": lossjit.__version__,
            "shape": {"N": n, "D": d, "V": v}, "dtype": "float32", "threads": 1,
            "results": results}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"cache-hit call overhead, CPU, N={n} D={d} V={v} float32, torch "
          f"{torch.__version__}, median of {args.repeat}x{args.number} calls")
    width = max(len(name) for name, _ in cases)
    for (name, _), r in zip(cases, results):
        print(f"  {name:<{width}}  {r['us_per_call']:8.2f} µs")


if __name__ == "__main__":
    main()
