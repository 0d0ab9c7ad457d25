#!/usr/bin/env python3
"""Whether every kernel can be launched at all: `ptxas -v` output on stdin,
the PTX files it assembled as arguments.

    ptxas -v -arch=sm_90a k/*.ptx -o a.cubin 2>&1 | launch-fits.py k/*.ptx

For each .entry it takes the block size from .maxntid (or .reqntid) and the
registers ptxas used, and applies the check the hardware makes at launch
(CUDA's cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit): registers go to
warps in units of 256, and the block's warps are counted rounded up to the 4
sub-partitions of an SM, whose register files are 16384 registers each. So
288 threads (9 warps, counted as 12) get at most 168 registers per thread,
not 65536 / 288 = 227: a kernel ptxas accepted with more fails every launch
with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (seen on an H200, 2026-12-04, with
nvvm.maxnreg 224 on 288 threads).

Prints one line per kernel ("NAME: T threads x R registers: fits (registers
for B blocks per SM)" or "... DOES NOT LAUNCH: ..."); exits 1 when one does not fit or
cannot be matched. Sizes are those of compute capability 7.0 through 9.0.
"""

import re
import sys

REGS_PER_SM = 65536
REGS_PER_BLOCK = 65536
ALLOCATION_UNIT = 256  # registers, per warp
SUB_PARTITIONS = 4
WARP = 32
MAX_REGS_PER_THREAD = 255


def round_up(value, multiple):
    return (value + multiple - 1) // multiple * multiple


def block_sizes(paths):
    """entry name -> threads per block, from .maxntid / .reqntid."""
    sizes = {}
    for path in paths:
        with open(path) as f:
            text = f.read()
        for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)([^{]*)\{", text):
            name, directives = m.group(1), m.group(3)
            d = re.search(r"\.(?:maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?",
                          directives)
            if not d:
                sizes[name] = None
                continue
            threads = 1
            for g in d.groups():
                threads *= int(g) if g else 1
            sizes[name] = threads
    return sizes


def registers(ptxas_output):
    """entry name -> registers per thread, from `ptxas -v`."""
    used, current = {}, None
    for line in ptxas_output.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(\w+)'?", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            used[current] = int(m.group(1))
    return used


def check(name, threads, regs):
    """(fits, line)."""
    warps = (threads + WARP - 1) // WARP
    per_warp = round_up(max(regs, 1) * WARP, ALLOCATION_UNIT)
    assumed = per_warp * round_up(warps, SUB_PARTITIONS)
    head = f"{name}: {threads} threads x {regs} registers"
    if regs > MAX_REGS_PER_THREAD:
        return False, f"{head}: DOES NOT LAUNCH: over {MAX_REGS_PER_THREAD} registers per thread"
    if assumed > REGS_PER_BLOCK or per_warp * warps > REGS_PER_BLOCK:
        cap = REGS_PER_BLOCK // (round_up(warps, SUB_PARTITIONS) * WARP) // 8 * 8
        return False, (f"{head}: DOES NOT LAUNCH: {warps} warps count as "
                       f"{round_up(warps, SUB_PARTITIONS)} and need {assumed} registers; "
                       f"a block gets {REGS_PER_BLOCK} (at most {cap} per thread)")
    blocks = (REGS_PER_SM // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS // warps
    return True, f"{head}: fits (registers for {blocks} blocks per SM)"


def main():
    if len(sys.argv) < 2:
        print("usage: ptxas -v ... 2>&1 | launch-fits.py KERNEL.ptx...", file=sys.stderr)
        return 2
    sizes = block_sizes(sys.argv[1:])
    used = registers(sys.stdin.read())
    ok = bool(sizes)
    if not sizes:
        print("launch-fits: no .entry in " + " ".join(sys.argv[1:]))
    for name in sorted(sizes):
        threads = sizes[name]
        if threads is None:
            print(f"{name}: no .maxntid or .reqntid: the block size is unknown")
            ok = False
        elif name not in used:
            print(f"{name}: not in the ptxas -v output")
            ok = False
        else:
            fits, line = check(name, threads, used[name])
            print(line)
            ok = ok and fits
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
