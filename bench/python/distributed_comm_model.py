#!/usr/bin/env python3
"""Bytes each rank sends per training step (forward + backward) for the
vocabulary-parallel loss: lossjit.distributed against Megatron-LM's
vocab_parallel_cross_entropy. A model computed from the collectives each
scheme issues, not a measurement.

Ring algorithms (what NCCL and gloo use for large messages): an all-reduce of
S bytes sends 2·(W−1)/W·S per rank, an all-gather of c bytes per rank sends
(W−1)·c, an all-to-all of S bytes sends (W−1)/W·S.

lossjit (python/lossjit/distributed.py):
  layout   all_gather of 6 int64 per rank
  forward  all_gather of the [blocks + 3, N] float32 row statistics
  backward all_to_all of the float32 dX partial [N, D], all_gather of the
           summed slices in the storage dtype
Megatron-LM (tensor_parallel/cross_entropy.py and the ColumnParallelLinear
LM head, without sequence parallelism):
  forward  three all-reduces of [N] float32 (max, target logit, sum of exp)
  backward all-reduce of dX [N, D] in the storage dtype

Usage: python3 bench/python/distributed_comm_model.py [--n 4096 --d 4096
       --v 128256 --block 8192 --bytes 2]   (prints a markdown table)
"""

from __future__ import annotations

import argparse


def shard_range(v: int, rank: int, world: int):
    base, extra = divmod(v, world)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def blocks(start: int, size: int, block: int) -> int:
    """How many fixed vocabulary blocks the shard [start, start+size) touches
    (lossjit.distributed._blocks_of)."""
    count, lo, end = 0, start, start + size
    while lo < end:
        lo = min((lo // block + 1) * block, end)
        count += 1
    return count


def lossjit_bytes(n: int, d: int, v: int, world: int, block: int, storage: int):
    slots = max(blocks(*shard_range(v, r, world), block) for r in range(world))
    layout = (world - 1) * 6 * 8
    forward = (world - 1) * (slots + 3) * 4 * n
    rows = -(-n // world)  # the largest dX row slice (all_gather pads to it)
    backward = (world - 1) * rows * d * 4 + (world - 1) * rows * d * storage
    return layout + forward, backward, slots


def megatron_bytes(n: int, d: int, world: int, storage: int):
    ring = 2 * (world - 1) / world
    return ring * 3 * 4 * n, ring * n * d * storage


def mib(x: float) -> str:
    return f"{x / 2**20:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="tokens per step")
    parser.add_argument("--d", type=int, default=4096, help="hidden size")
    parser.add_argument("--v", type=int, default=128256, help="vocabulary size")
    parser.add_argument("--block", type=int, default=8192, help="lossjit vocab_block")
    parser.add_argument("--bytes", type=int, default=2, help="storage bytes (bf16: 2)")
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    print(f"N={args.n}, D={args.d}, V={args.v}, storage {args.bytes} bytes, "
          f"vocab_block={args.block}; MiB sent per rank per step (model, not a measurement)\n")
    print("| ranks | lossjit fwd | lossjit bwd | lossjit total | Megatron fwd | Megatron bwd "
          "| Megatron total | lossjit / Megatron |")
    print("|---|---|---|---|---|---|---|---|")
    for world in args.worlds:
        lf, lb, _slots = lossjit_bytes(args.n, args.d, args.v, world, args.block, args.bytes)
        mf, mb = megatron_bytes(args.n, args.d, world, args.bytes)
        print(f"| {world} | {mib(lf)} | {mib(lb)} | {mib(lf + lb)} | {mib(mf)} | {mib(mb)} "
              f"| {mib(mf + mb)} | {(lf + lb) / (mf + mb):.2f}x |")


if __name__ == "__main__":
    main()
