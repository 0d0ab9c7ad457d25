#!/usr/bin/env python3
"""Prebuilt kernels for running this suite's CUDA tests on a runtime-only build.

A GPU machine without MLIR builds `_lossjit` with LOSSJIT_ENABLE_COMPILER=OFF;
its CUDA path then looks kernels up in LOSSJIT_KERNEL_PATH by their manifest
options. This makes, with lossjit-aot from a compiler build, every variant the
suite's CUDA tests use (forward and backward bundles for each, for 16-bit
storage also the backward in vocabulary chunks the package asks for when
N <= V, and for mean/sum the fused forward+backward of fused_backward=True,
pass "forward_backward"):

    python3 tests/python/make_cuda_bundles.py --aot build/bin/lossjit-aot \\
        --arch sm_90,sm_90a --jobs 2 -o out/cuda-bundles  # ~65 MB per arch

and on the GPU machine:

    cmake -G Ninja -B build-rt -DLOSSJIT_ENABLE_COMPILER=OFF -DLOSSJIT_ENABLE_PYTHON=ON \\
        -DLOSSJIT_ENABLE_TESTS=OFF && ninja -C build-rt _lossjit
    LOSSJIT_KERNEL_PATH=$PWD/out/cuda-bundles PYTHONPATH=python:build-rt/python \\
        python3 -m pytest tests/python -k cuda
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import subprocess
import sys
import time

DTYPES = ["f32", "f16", "bf16"]
LABELS = ["i64", "i32"]
REDUCTIONS = ["mean", "sum", "none"]
IGNORE_INDEX = [-100, 5, 2]  # the suite's ignore_index values

#: The logit transforms the suite uses (test_logit_transforms.py, test_jit.py):
#: (dtype, label type, bias, reduction, logit_scale, softcap; 0.0 = none).
#: Manifests spell them as Python's repr() does, so any float matches.
TRANSFORMED = [
    *[(dtype, "i64", True, reduction, scale, cap) for dtype in DTYPES
      for reduction in REDUCTIONS for scale, cap in ((1 / 0.7, 0.0), (1.0, 10.0),
                                                     (-0.5, 30.0))],
    ("f16", "i64", False, "none", 1 / 3, 0.0),
    ("f32", "i64", True, "sum", 0.5, 15.0),
    ("bf16", "i64", True, "mean", 2.0, 10.0),
    *[("f32", "i64", True, reduction, 0.5, 5.0) for reduction in REDUCTIONS],
    ("f32", "i64", False, "mean", 0.25, 4.0),
    ("f32", "i64", False, "mean", 0.5, 8.0),
    # @lossjit.jit losses of test_jit.py
    ("f32", "i64", False, "mean", 1.0, 30.0),
    ("f16", "i64", False, "mean", 1.0, 30.0),
    ("bf16", "i64", True, "sum", 0.7, 10.0),
    ("f32", "i64", True, "mean", 0.5 / 0.8, 0.0),
    ("f32", "i64", False, "mean", 0.5, 0.0),
    ("f32", "i64", False, "mean", 1.0, 20.0),
    ("f32", "i64", False, "mean", 1.0, 2.0),
    *[("f32", "i64", False, "sum", scale, cap) for scale, cap in (
        (1.0, 30.0), (1.0, 1.0), (0.5, 5.0), (-2.0, 15.0), (-0.5, 0.0), (3.0, 0.0))],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aot", default="build/bin/lossjit-aot", help="lossjit-aot binary")
    # sm_90a: what a Hopper runs by default (wgmma); sm_90 its mma.sync path.
    parser.add_argument("--arch", default="sm_90,sm_90a",
                        help="comma-separated, e.g. sm_80 or sm_90,sm_90a")
    parser.add_argument("-o", "--output", required=True, help="bundle directory")
    parser.add_argument("--jobs", type=int, default=1, help="lossjit-aot runs at a time")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    start = time.time()
    variants = [(*v, 1.0, 0.0) for v in itertools.product(
        DTYPES, LABELS, [False, True], REDUCTIONS, IGNORE_INDEX)]
    variants += [(dtype, label, bias, reduction, -100, scale, cap)
                 for dtype, label, bias, reduction, scale, cap in TRANSFORMED]
    commands = []
    for dtype, label, bias, reduction, ignore, scale, cap in variants:
        # --no-c-api: the kernel path reads the bundles alone (and parallel
        # runs would rewrite one C API file).
        cmd = [args.aot, "--preset", "linear-cross-entropy", "--quiet", "--no-c-api", "--dtype", dtype,
               "--label-type", label, "--reduction", reduction, f"--ignore-index={ignore}",
               "--arch", args.arch, "-o", args.output]
        if bias:
            cmd.append("--bias")
        if reduction != "none":
            cmd.append("--fused")
        if scale != 1.0:
            cmd.append(f"--logit-scale={scale!r}")
        if cap != 0.0:
            cmd.append(f"--softcap={cap!r}")
        commands.append(cmd)
        # The package's CUDA backward and fused op for N <= V with 16-bit
        # storage (lossjit._kernels.backward_strategy): vocabulary chunks
        # (a build without the compiler keeps them even where the rows fit
        # one row chunk).
        if dtype in ("f16", "bf16"):
            commands.append(cmd + ["--strategy", "vocab_chunked"])
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for cmd, result in zip(commands, pool.map(
                lambda c: subprocess.run(c, capture_output=True, text=True), commands)):
            if result.returncode:
                sys.exit(f"make_cuda_bundles: {' '.join(cmd)} failed:\n{result.stderr}")
    count = len(commands)
    print(f"make_cuda_bundles: {count} variants for {args.arch} in {args.output} "
          f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
