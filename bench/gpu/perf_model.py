#!/usr/bin/env python3
"""A performance MODEL of lossjit's GPU kernels (not a measurement).

    python3 bench/gpu/perf_model.py [--build build] [--chips sm_80,sm_90]
        [--card h200|h100] [--json out.json] [--markdown out.md]

No GPU is needed or used. For every kernel of every variant below, for each
chip, the script

1. generates the PTX with the project's own tools: `lossjit-opt graph.mlir
   --lossjit-gpu-pipeline="chip=... <options>"`, then
   `tests/lit/extract-ptx.py` (one .ptx per kernel) — so the model always
   describes the kernels the compiler emits today, and the launch plan the
   pipeline prints gives the tile, grids, constants and chunk formula;
2. runs `ptxas -v -arch=<chip>` and reads registers, spill bytes and static
   shared memory, and from them the theoretical occupancy;
3. counts the PTX instructions that decide which unit does the multiply-adds
   (mma.sync, ldmatrix, cp.async, fma.rn.f32, ex2.approx), in the whole
   kernel and in its hot loop (the innermost natural loop of the CFG that
   holds the products);
4. models FLOPs, DRAM bytes, shared-memory bytes and a roofline time at the
   headline shape N=4096, D=4096, V=128256 and the CPU benchmark's shape
   N=4096, D=1024, V=32000, for an A100 SXM (sm_80) and an H200 (sm_90).

Variants (f16 and bf16 each): forward with matmul=simt (the default tile),
forward with matmul=mma_sync (the 64x64x32 3-stage 128-thread default tile,
and a 32x32 one-warp tile), the chunked and the recompute backward, and the
fused forward+backward (SIMT, and on mma_sync: all three products on tensor
cores, dZ stored in the 16-bit storage type); for chip sm_90a, the same
forward, chunked backward and fused op on matmul=wgmma (Hopper's warpgroup
MMA, 128x64x32 tile, two warpgroups per block).

The time model, per kernel (all of it is stated again in the printed notes):

    t_est   = max(t_flop / f_issue, t_dram, t_smem) / f_occ + launches * t_launch
    t_l2    = max(t_flop / f_issue, t_dram_floor, t_l2tiles, t_smem) / f_occ + ...
    t_order = max(t_flop / f_issue, t_dram_order, t_l2tiles, t_smem) / f_occ + ...
    t_floor = max(t_flop, t_dram_floor)                       (ideal roofline)

t_flop = matmul FLOPs / peak of the unit the PTX multiplies on; t_dram = DRAM
bytes of unique tile loads (no reuse between blocks) / bandwidth; t_l2 is
the same with those tile loads served by L2 at its bandwidth and only the
compulsory traffic from DRAM; t_dram_order is the tensor-core product
kernels' DRAM traffic in their tile order (bench/gpu/tile_order.py; tile
band) plus the rest of their floor; f_occ and f_issue are defined in
`occupancy_factor` and `issue_factor`. It is a model: it ignores L1 hits,
uncoalesced-access waste, bank conflicts, tail effects inside a block and
ptxas's own scheduling, and it reads instruction mixes from PTX, not SASS.
"""

import argparse
import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

LABEL = "model, not a measurement"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXTRACT_PTX = os.path.join(REPO, "tests", "lit", "extract-ptx.py")

# --------------------------------------------------------------------------
# Machines. Limits are the CUDA occupancy calculator's for compute
# capability 8.0 / 9.0; peaks are the vendor's dense numbers except where a
# practical ceiling is known (DESIGN §7: ~788 TFLOP/s bf16 sustained on an
# H200 here). L2 bandwidth is a literature figure, not measured here.
# --------------------------------------------------------------------------
CHIPS = {
    "sm_80": {
        "card": "A100 SXM (sm_80)",
        "sms": 108,
        "clock_ghz": 1.41,
        "regs_per_sm": 65536,
        "max_regs_per_thread": 255,
        "reg_granularity_per_warp": 256,
        "max_threads_per_sm": 2048,
        "max_warps_per_sm": 64,
        "max_blocks_per_sm": 32,
        "smem_per_sm": 164 * 1024,
        "smem_reserved_per_block": 1024,  # the driver keeps 1 KiB per block on sm_80+
        "fp32_lanes_per_sm": 64,          # FFMA lanes: 2 warp-FMAs per clock per SM
        "tc_peak": 312e12,                # dense f16/bf16 -> f32
        "tc_practical": 312e12,           # no sustained figure measured: the peak
        "fma_peak": 19.5e12,
        "dram_bw": 2.0e12,
        "l2_bw": 5.0e12,                  # assumption (published microbenchmarks)
        "l2_bytes": 40 * 2**20,
    },
    "sm_90": {
        "card": "H200 (sm_90)",
        "sms": 132,
        "clock_ghz": 1.83,                # the clock the 989 TFLOP/s dense figure assumes
        "regs_per_sm": 65536,
        "max_regs_per_thread": 255,
        "reg_granularity_per_warp": 256,
        "max_threads_per_sm": 2048,
        "max_warps_per_sm": 64,
        "max_blocks_per_sm": 32,
        "smem_per_sm": 228 * 1024,
        "smem_reserved_per_block": 1024,
        "fp32_lanes_per_sm": 128,         # 4 warp-FMAs per clock per SM
        "tc_peak": 989e12,
        "tc_practical": 788e12,           # DESIGN §7, measured bf16 matmul on an H200
        "fma_peak": 67e12,
        "dram_bw": 4.8e12,
        "l2_bw": 10.0e12,                 # assumption (published microbenchmarks)
        "l2_bytes": 50 * 2**20,
    },
}
# sm_90a: the same H200, with the arch-specific instructions (wgmma).
CHIPS["sm_90a"] = dict(CHIPS["sm_90"], card="H200 (sm_90a)")

# The Hopper cards a lease may be (--card): sm_90/sm_90a describe the H200
# above; an H100 SXM (80 GB HBM3) has the same SMs, clock, shared memory
# and L2 (50 MiB), and 3.35 TB/s of DRAM instead of 4.8. Its sustained
# tensor-core rate is taken to be the H200's 788 TFLOP/s (the same SMs at
# the same power): not measured.
HOPPER_CARDS = {
    "h200": {},
    "h100": {"card_name": "H100 SXM", "dram_bw": 3.35e12},
}


def hopper_chips(card):
    """CHIPS with sm_90/sm_90a describing `card` (a HOPPER_CARDS key)."""
    chips = dict(CHIPS)
    override = dict(HOPPER_CARDS[card])
    name = override.pop("card_name", None)
    for chip in ("sm_90", "sm_90a"):
        chips[chip] = dict(CHIPS[chip], **override)
        if name:
            chips[chip]["card"] = "%s (%s)" % (name, chip)
    return chips

SHAPES = [
    {"name": "headline", "N": 4096, "D": 4096, "V": 128256},
    {"name": "cpu-like", "N": 4096, "D": 1024, "V": 32000},
]

# Warps per SM that keep a unit busy (f_occ = min(1, warps / W_sat)):
# mma.sync kernels with a cp.async ring hide latency with few warps (CUTLASS's
# sm_80 GEMMs run at 4-8 warps per SM); SIMT FMA and streaming kernels need
# about half occupancy to cover global-memory latency (Little's law).
W_SAT_TENSOR = 8
W_SAT_SIMT = 32
ISSUE_PER_CLOCK = 4      # warp instructions per clock per SM (4 schedulers)
MMA_FLOPS = 2 * 16 * 8 * 16  # one mma.sync m16n8k16
# One wgmma m64nNk16 is 2·64·N·16 FLOPs for the warpgroup: each of its four
# warps issues the instruction, so a warp instruction counts a quarter.
WGMMA_FLOPS_PER_N = 2 * 64 * 16 // 4
T_LAUNCH = 3e-6          # seconds a launch costs at least (driver + ramp)

# The graphs, written as the lit tests write them (tests/lit/ptx/*.mlir);
# @DT@ is the storage type.
GRAPHS = {
    "forward": """
func.func @lce(%x: tensor<?x?x@DT@>, %w: tensor<?x?x@DT@>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?x@DT@>, tensor<?x?x@DT@> -> tensor<?x?x@DT@>
  %lp = loss.log_softmax %z : tensor<?x?x@DT@> -> tensor<?x?x@DT@>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?x@DT@>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
""",
    "backward": """
func.func @grad(%x: tensor<?x?x@DT@>, %w: tensor<?x?x@DT@>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?x@DT@>, tensor<?x?x@DT@>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = @DT@, compute = f32@STRATEGY@} : tensor<?x?x@DT@>, tensor<?x?x@DT@>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?x@DT@>, tensor<?x?x@DT@>
  return %dx, %dw : tensor<?x?x@DT@>, tensor<?x?x@DT@>
}
""",
    "fused": """
func.func @fused(%x: tensor<?x?x@DT@>, %w: tensor<?x?x@DT@>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?x@DT@>, tensor<?x?x@DT@>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = @DT@, compute = f32@STRATEGY@} : tensor<?x?x@DT@>, tensor<?x?x@DT@>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?x@DT@>, tensor<?x?x@DT@>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?x@DT@>, tensor<?x?x@DT@>
}
""",
}

# name, graph, strategy attribute, pipeline options, pass.
VARIANTS = [
    ("fwd-simt", "forward", "", "", "forward"),
    ("fwd-mma64", "forward", "", "matmul=mma_sync", "forward"),
    ("fwd-mma32", "forward", "",
     "matmul=mma_sync block-rows=32 block-cols=32 threads=32 block-k=16 stages=2", "forward"),
    ("bwd-chunked", "backward", "", "", "backward"),
    ("bwd-recompute", "backward", ', strategy = "recompute"', "", "backward"),
    ("fused", "fused", "", "", "fused"),
    # Tensor cores for all three products of the backward (the JIT's
    # default for f16/bf16 on sm_80+: tile auto).
    ("bwd-chunked-mma64", "backward", "", "matmul=mma_sync", "backward"),
    ("fused-mma64", "fused", "", "matmul=mma_sync", "fused"),
    # The same with a 1 GiB workspace budget (the default is 64 MiB): chunks
    # of ~4096 rows instead of ~260, so the f32 dW accumulator crosses DRAM
    # 16x less often (QuACK's chunking).
    ("bwd-chunked-mma64-ws1g", "backward", ", workspace_bytes = 1073741824 : i64",
     "matmul=mma_sync", "backward"),
    # Hopper's warpgroup MMA (sm_90a only): every product on wgmma, operands
    # staged by cp.async (no TMA or warp specialization yet); the logit
    # products in 128x64 tiles, dZ·W and dZᵀ·X in 128x128 (grad_cols).
    ("fwd-wgmma128", "forward", "", "matmul=wgmma", "forward"),
    ("bwd-chunked-wgmma128", "backward", "", "matmul=wgmma", "backward"),
    ("fused-wgmma128", "fused", "", "matmul=wgmma", "fused"),
    ("bwd-chunked-wgmma128-ws1g", "backward", ", workspace_bytes = 1073741824 : i64",
     "matmul=wgmma", "backward"),
    # The Python package's CUDA default budget (256 MiB, the issue's
    # allowance next to dX and dW): what the JIT runs on a Hopper.
    ("bwd-chunked-mma64-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=mma_sync", "backward"),
    ("fused-mma64-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=mma_sync", "fused"),
    ("bwd-chunked-wgmma128-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma", "backward"),
    ("fused-wgmma128-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma", "fused"),
    # What the JIT builds on a Hopper for these graphs (no bias, no softcap):
    # matmul=auto on sm_90a widens the logit tiles to 128x128 as well.
    ("fwd-wgmma-auto", "forward", "", "matmul=auto", "forward"),
    ("bwd-chunked-wgmma-auto-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=auto", "backward"),
    ("fused-wgmma-auto-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=auto", "fused"),
    # tma=1 (what auto now takes for these ops; listed on its own to keep
    # the comparison): the logit products load x and w by TMA boxes into
    # 128-byte swizzled stages on an mbarrier ring (k tiles of 64, 3
    # stages), on auto's 128x128 logit tiles; dZ·W and dZᵀ·X keep cp.async.
    ("fwd-wgmma-tma", "forward", "",
     "matmul=wgmma block-cols=128 block-k=64 stages=3 tma=1", "forward"),
    ("bwd-chunked-wgmma-tma-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 block-k=64 stages=3 tma=1", "backward"),
    ("fused-wgmma-tma-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 block-k=64 stages=3 tma=1", "fused"),
    # tma=2 (opt-in): the same TMA boxes from a producer warp, the consumer
    # warpgroups releasing stages on a second mbarrier ring (288 threads, at
    # most 168 registers: a launch counts 9 warps as 12); auto's 128x128
    # logit tiles, which ptxas takes without spills there with 2 stages.
    ("fwd-wgmma-spec", "forward", "",
     "matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2", "forward"),
    ("bwd-chunked-wgmma-spec-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2", "backward"),
    ("fused-wgmma-spec-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2", "fused"),
    # persistent=132 (opt-in): the gradient-side products (dZ, dX, dW,
    # lce_fused_z) on one block per SM of an H200, each sweeping its tiles;
    # on auto's tiles (128x128 logits) and with the producer warp (one TMA
    # ring through a block's tiles). The model has no overlap: it sees the
    # grid, not the ring that no longer drains between tiles.
    ("bwd-chunked-wgmma-persist-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 persistent=132", "backward"),
    ("fused-wgmma-persist-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 persistent=132", "fused"),
    ("bwd-chunked-wgmma-spec-persist-ws256m", "backward",
     ", workspace_bytes = 268435456 : i64",
     "matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 persistent=132", "backward"),
    # Vocabulary chunks (strategy vocab_chunked) on auto's tiles at the
    # 256 MiB budget: no f32 V x D dW accumulator (its zeroing, per-chunk
    # read-modify-write and rounding); dX is what is read and written back
    # per chunk. The forward is auto's, listed again to pair with it.
    ("fwd-wgmma-auto-vocab", "forward", "", "matmul=auto", "forward"),
    ("bwd-vocab-wgmma-auto-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64', "matmul=auto",
     "backward"),
    ("bwd-vocab-mma64-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64', "matmul=mma_sync",
     "backward"),
    # tma=3 (opt-in): a producer warpgroup copies by TMA and lends the two
    # consumer warpgroups its registers around each sweep (setmaxnreg 40 /
    # 232 of 168), which lets the gradient products take 128x256 tiles;
    # the vocabulary chunks at 256 MiB. And the same tiles by TMA alone
    # (tma=1: 256 threads have 255 registers, no producer).
    ("fwd-wgmma-lend", "forward", "",
     "matmul=wgmma block-cols=128 block-k=64 stages=3 grad-cols=256 tma=3", "forward"),
    ("bwd-vocab-wgmma-lend-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=128 block-k=64 stages=3 grad-cols=256 tma=3", "backward"),
    ("bwd-vocab-wgmma-wide-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=128 block-k=64 stages=3 grad-cols=256 tma=1", "backward"),
    # Tile band (opt-in): auto's tiles in the vocabulary chunks, the product
    # kernels' tiles in 32 MiB bands of row blocks (bench/gpu/tile_order.py);
    # the forward (whose lce_partial sweeps its own columns) is auto's.
    ("fwd-wgmma-band", "forward", "", "matmul=auto", "forward"),
    ("bwd-vocab-wgmma-band-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=auto band=32768", "backward"),
    # The row chunks in bands: their dW re-reads dZᵀ once per column block
    # row blocks first.
    ("bwd-chunked-wgmma-band-ws256m", "backward", ", workspace_bytes = 268435456 : i64",
     "matmul=auto band=32768", "backward"),
    ("fused-wgmma-band-ws256m", "fused", ", workspace_bytes = 268435456 : i64",
     "matmul=auto band=32768", "fused"),
    # The fused op in vocabulary chunks (what the Python package runs on
    # CUDA for 16-bit storage with fused_backward=True): the forward's
    # statistics, then the backward's chunks; 8·N·D·V against the row
    # chunks' 6, but no f32 V x D dW accumulator. On auto's tiles and in
    # bands.
    ("fused-vocab-wgmma-auto-ws256m", "fused",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64', "matmul=auto",
     "fused"),
    ("fused-vocab-wgmma-band-ws256m", "fused",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=auto band=32768", "fused"),
    # 128x256 logit tiles (opt-in) on the producer warpgroup (tma=3, k 64,
    # 4 stages): whole tiles fold without column masks (foldColumns), so
    # lce_partial and dZ hold 128 accumulators a thread without spills (but
    # lce_partial with a bias, 4 bytes); X and W are read once per 256
    # columns instead of 128.
    ("fwd-wgmma-wide256", "forward", "",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3", "forward"),
    ("bwd-vocab-wgmma-wide256-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3", "backward"),
    ("fused-vocab-wgmma-wide256-ws256m", "fused",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3", "fused"),
    # Clusters (opt-in, cluster=2): the products' row blocks in pairs, each
    # copying half of every shared tile (W; dX's Wᵀ, dW's Xᵀ) for both by
    # TMA multicast, so it crosses the L2 once per pair; on the producer
    # warp's 128-column tile (k 64, 2 stages), backward in vocabulary chunks.
    ("fwd-wgmma-cluster", "forward", "",
     "matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 cluster=2", "forward"),
    ("bwd-vocab-wgmma-cluster-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 cluster=2", "backward"),
    # Clusters on wide256's 128x256 tiles: every product (lce_partial, dZ,
    # dX, dW) pairs its row blocks, each block multicasting half of the
    # shared 256-line tile.
    ("fwd-wgmma-wide256-cluster", "forward", "",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2", "forward"),
    ("bwd-vocab-wgmma-wide256-cluster-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2", "backward"),
    ("fused-vocab-wgmma-wide256-cluster-ws256m", "fused",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2", "fused"),
    # Clusters of four on those tiles: each shared tile leaves L2 once per
    # four row blocks (each block copies a quarter: 64 W rows, one
    # 64-line box of Wᵀ or Xᵀ).
    ("fwd-wgmma-wide256-cluster4", "forward", "",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=4", "forward"),
    ("bwd-vocab-wgmma-wide256-cluster4-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=4", "backward"),
    # Clusters of two on a persistent grid (132 blocks: 66 clusters, each
    # sweeping groups of two row blocks on one ring); lce_partial keeps a
    # block per row block.
    ("fwd-wgmma-wide256-cluster-persist", "forward", "",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2 persistent=132",
     "forward"),
    ("bwd-vocab-wgmma-wide256-cluster-persist-ws256m", "backward",
     ', strategy = "vocab_chunked", workspace_bytes = 268435456 : i64',
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2 persistent=132",
     "backward"),
    # The same tiles in the fused op's row chunks (6·N·D·V: the logits once,
    # with an f32 V x D dW accumulator and the chunks' f32 raw logits and
    # 16-bit dZ, 6 bytes an element): what memory beyond the 256 MiB buys.
    # 1 GiB: 3 chunks; 2 GiB: 2; 6 GiB: all of N=4096 in one.
    ("fused-wgmma-wide256-cluster-ws1g", "fused", ", workspace_bytes = 1073741824 : i64",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2", "fused"),
    ("fused-wgmma-wide256-cluster-ws2g", "fused", ", workspace_bytes = 2147483648 : i64",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2", "fused"),
    ("fused-wgmma-wide256-cluster-ws6g", "fused", ", workspace_bytes = 6442450944 : i64",
     "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2", "fused"),
]
# The chips a variant compiles for: wgmma exists on sm_90a only, and sm_90a
# adds nothing to the other variants that sm_90 does not show.
def variant_chips(variant):
    return ("sm_90a",) if "wgmma" in variant[0] else ("sm_80", "sm_90")
DTYPES = ["f16", "bf16"]
# The forward+backward estimate of a forward variant adds the chunked
# backward on the same strategy (strategy auto -> chunked).
# The tensor-core forwards pair with the backward at the Python package's
# CUDA workspace budget (256 MiB): what the JIT runs.
PAIRED_BACKWARD = {"fwd-simt": "bwd-chunked", "fwd-mma64": "bwd-chunked-mma64-ws256m",
                   "fwd-mma32": "bwd-chunked-mma64-ws256m",
                   "fwd-wgmma128": "bwd-chunked-wgmma128-ws256m",
                   "fwd-wgmma-auto": "bwd-chunked-wgmma-auto-ws256m",
                   "fwd-wgmma-tma": "bwd-chunked-wgmma-tma-ws256m",
                   "fwd-wgmma-spec": "bwd-chunked-wgmma-spec-ws256m",
                   "fwd-wgmma-auto-vocab": "bwd-vocab-wgmma-auto-ws256m",
                   "fwd-wgmma-lend": "bwd-vocab-wgmma-lend-ws256m",
                   "fwd-wgmma-band": "bwd-vocab-wgmma-band-ws256m",
                   "fwd-wgmma-wide256": "bwd-vocab-wgmma-wide256-ws256m",
                   "fwd-wgmma-cluster": "bwd-vocab-wgmma-cluster-ws256m",
                   "fwd-wgmma-wide256-cluster": "bwd-vocab-wgmma-wide256-cluster-ws256m",
                   "fwd-wgmma-wide256-cluster4": "bwd-vocab-wgmma-wide256-cluster4-ws256m",
                   "fwd-wgmma-wide256-cluster-persist":
                       "bwd-vocab-wgmma-wide256-cluster-persist-ws256m"}


class ModelError(Exception):
    """A failure the user can act on (missing tool, failed compile)."""


# --------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------
def find_tools(build):
    """Paths of lossjit-opt and ptxas, or a ModelError saying what is missing."""
    opt = os.path.join(build, "bin", "lossjit-opt")
    if not (os.path.isfile(opt) and os.access(opt, os.X_OK)):
        raise ModelError("lossjit-opt not found at %s: build the compiler first "
                         "(cmake -G Ninja -B %s && ninja -C %s) or pass --build DIR"
                         % (opt, build, build))
    candidates = [shutil.which("ptxas")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "ptxas"))
    candidates.append("/usr/local/cuda/bin/ptxas")
    ptxas = next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)),
                 None)
    if not ptxas:
        raise ModelError("ptxas not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin: "
                         "install the CUDA toolkit (only ptxas is needed, no GPU)")
    if not os.path.isfile(EXTRACT_PTX):
        raise ModelError("missing %s" % EXTRACT_PTX)
    return opt, ptxas


def run(cmd, what):
    """Runs `cmd`; returns stdout+stderr, raising ModelError on failure."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-6:])
        raise ModelError("%s failed (exit %d): %s\n%s" % (what, proc.returncode,
                                                          " ".join(cmd), tail))
    return proc.stdout


# --------------------------------------------------------------------------
# Launch plan (printed by lossjit-opt as the module's loss.launch_plans)
# --------------------------------------------------------------------------
def parse_plan(mlir_text):
    """The launch plan: tile, constants, derived symbols and kernels.

    Only the fields the model needs are read, each by its own pattern, so a
    reordering of the attribute dictionary does not break the parser.
    """
    start = mlir_text.find("loss.launch_plans")
    if start < 0:
        raise ModelError("no loss.launch_plans in lossjit-opt output")
    end = mlir_text.find("gpu.binary", start)
    text = mlir_text[start:end if end > 0 else len(mlir_text)]
    plan = {"tile": {}, "constants": {}, "derived": [], "kernels": []}
    m = re.search(r'tile = "([^"]*)"', text)
    if m:
        for item in m.group(1).split(","):
            key, _, value = item.partition("=")
            plan["tile"][key.strip()] = int(value) if value.strip().lstrip("-").isdigit() \
                else value.strip()
    m = re.search(r"constants = \{([^}]*)\}", text)
    if m:
        for name, value in re.findall(r"(\w+) = (-?\d+) : i64", m.group(1)):
            plan["constants"][name] = int(value)
    m = re.search(r'chunk_dim = "(\w+)"', text)
    plan["chunk_dim"] = m.group(1) if m else "N"
    m = re.search(r"derived = \[(.*?)\]\], ", text) or re.search(r"derived = \[(.*?)\]\]", text)
    if m:
        plan["derived"] = re.findall(r'\["(\w+)", "([^"]*)"', m.group(1) + "]")
    # Each kernel dictionary starts with "{args = [" in the printed plan.
    pieces = text.split("{args = [")[1:]
    for piece in pieces:
        k = {}
        m = re.search(r'\bname = "([^"]+)"', piece)
        k["name"] = m.group(1) if m else "?"
        m = re.search(r'\bmodule = "([^"]+)"', piece)
        k["module"] = m.group(1) if m else "?"
        m = re.search(r"\bblock = \[(\d+), (\d+), (\d+)\]", piece)
        k["block"] = [int(x) for x in m.groups()] if m else [1, 1, 1]
        m = re.search(r'\bgrid = \[("[^"]*"), ("[^"]*"), ("[^"]*")\]', piece)
        k["grid"] = [g.strip('"') for g in m.groups()] if m else ["1", "1", "1"]
        m = re.search(r"\bper_chunk = (true|false)", piece)
        k["per_chunk"] = bool(m and m.group(1) == "true")
        m = re.search(r"\bshared_bytes = (\d+)", piece)
        k["dynamic_smem"] = int(m.group(1)) if m else 0
        plan["kernels"].append(k)
    if not plan["kernels"]:
        raise ModelError("the launch plan lists no kernels")
    return plan


_ALLOWED = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv,
            ast.Call, ast.Name, ast.Load, ast.Constant)


def evaluate(formula, env):
    """Evaluates a plan formula ("cdiv(N,4)", "max(1,min(N,(WB-N*4)/(V*4)))")
    with the runtime's integer semantics (/ floors, as runtime::Formula)."""
    tree = ast.parse(formula, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ModelError("unexpected syntax in plan formula %r" % formula)

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return int(node.value)
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ModelError("plan formula %r uses unknown symbol %s" % (formula, node.id))
            return env[node.id]
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            return a // b
        fn = node.func.id
        args = [ev(a) for a in node.args]
        if fn == "cdiv":
            return -(-args[0] // args[1])
        if fn == "max":
            return max(args)
        if fn == "min":
            return min(args)
        raise ModelError("unknown function %s in plan formula %r" % (fn, formula))

    return ev(tree)


# --------------------------------------------------------------------------
# PTX: instruction counts and the hot loop
# --------------------------------------------------------------------------
COUNTED = {
    "mma.sync": re.compile(r"^mma\.sync\b"),
    "wgmma": re.compile(r"^wgmma\.mma_async\b"),
    "ldmatrix": re.compile(r"^ldmatrix\b"),
    "cp.async": re.compile(r"^cp\.async\.c[ag]\b"),   # the copies, not commit/wait
    "tma": re.compile(r"^cp\.async\.bulk\.tensor\b"),  # TMA box copies (one thread)
    "fma.rn.f32": re.compile(r"^fma\.rn\.f32\b"),
    "ex2.approx": re.compile(r"^ex2\.approx\b"),
}
_LABEL = re.compile(r"^(\$?[\w$]+):$")
_BRANCH = re.compile(r"^(@!?%?\w+\s+)?bra(\.uni)?\s+(\$?[\w$]+);")


def ptx_instructions(ptx):
    """(entry name, list of ('label', name) / ('insn', text)) of the .entry.

    Labels of nested { } scopes (inline asm: every mbarrier wait loop has
    its own LAB_WAIT and DONE) are renamed per scope, with the branches in
    that scope that target them.
    """
    m = re.search(r"\.entry\s+([\w$]+)\s*\(", ptx)
    if not m:
        raise ModelError("no .entry in PTX")
    name = m.group(1)
    body = ptx[ptx.index("{", ptx.index(")", m.end())):]
    items, pending = [], ""
    scopes, next_scope = [], 0  # open scopes below the entry's own
    depth = 0
    for raw in body.splitlines():
        line = raw.split("//")[0].strip()
        if pending:
            # An instruction continues until its ';' (mma.sync spreads its
            # operand lists over several lines).
            pending += " " + line
            if pending.endswith(";"):
                items.append(("insn", pending, tuple(scopes)))
                pending = ""
            continue
        if line == "{":
            depth += 1
            if depth > 1:
                next_scope += 1
                scopes.append(next_scope)
            continue
        if line == "}":
            depth -= 1
            if scopes and depth >= 1:
                scopes.pop()
            continue
        if not line:
            continue
        lm = _LABEL.match(line)
        if lm:
            items.append(("label", lm.group(1), tuple(scopes)))
        elif line.startswith("."):
            continue
        elif line.endswith(";"):
            items.append(("insn", line, tuple(scopes)))
        else:
            pending = line
    # Scoped names: a label defined in a nested scope is "name@scope", and a
    # branch resolves its target in its innermost scope that defines it.
    defined = {(text, sc[-1]) for kind, text, sc in items if kind == "label" and sc}
    out = []
    for kind, text, sc in items:
        if kind == "label":
            out.append(("label", text + "@%d" % sc[-1] if sc else text))
            continue
        bm = _BRANCH.match(text)
        if bm:
            for scope in reversed(sc):
                if (bm.group(3), scope) in defined:
                    text = text[:bm.start(3)] + bm.group(3) + "@%d" % scope + text[bm.end(3):]
                    break
        out.append(("insn", text))
    return name, out


def basic_blocks(items):
    """Blocks (list of instruction lists), successor lists, label -> index."""
    blocks, labels = [[]], {}
    for kind, text in items:
        if kind == "label":
            if blocks[-1]:
                blocks.append([])
            labels[text] = len(blocks) - 1
            continue
        blocks[-1].append(text)
        if _BRANCH.match(text) or text.startswith("ret") or text.startswith("exit"):
            blocks.append([])
    succs = []
    for i, block in enumerate(blocks):
        last = block[-1] if block else ""
        bm = _BRANCH.match(last)
        out = []
        if bm:
            out.append(labels[bm.group(3)])
            if bm.group(1):                      # predicated: may fall through
                out.append(i + 1)
        elif not (last.startswith("ret") or last.startswith("exit")):
            out.append(i + 1)
        succs.append([s for s in out if s < len(blocks)])
    return blocks, succs, labels


def dominators(succs):
    """Dominator sets by the iterative data-flow algorithm (entry = block 0)."""
    n = len(succs)
    preds = [[] for _ in range(n)]
    for u, ss in enumerate(succs):
        for s in ss:
            preds[s].append(u)
    full = set(range(n))
    dom = [full.copy() for _ in range(n)]
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for v in range(1, n):
            ps = [dom[p] for p in preds[v]]
            new = (set.intersection(*ps) if ps else set()) | {v}
            if new != dom[v]:
                dom[v], changed = new, True
    return dom, preds


def natural_loops(succs):
    """Natural loops as (header, latch set, block set), merged per header."""
    dom, preds = dominators(succs)
    loops = {}
    for u, ss in enumerate(succs):
        for h in ss:
            if h in dom[u]:                       # back edge u -> h
                # Walk back from the latch; the header stops the walk.
                body = {h}
                stack = [u] if u != h else []
                body.add(u)
                while stack:
                    v = stack.pop()
                    for p in preds[v]:
                        if p not in body:
                            body.add(p)
                            stack.append(p)
                hdr = loops.setdefault(h, (set(), set()))
                hdr[0].add(u)
                hdr[1].update(body)
    return [(h, latches, body) for h, (latches, body) in loops.items()], dom


def count(insns):
    """Counts of the instructions in COUNTED among `insns`."""
    out = {k: 0 for k in COUNTED}
    for text in insns:
        for key, pattern in COUNTED.items():
            if pattern.match(text):
                out[key] += 1
    return out


def analyze_ptx(ptx):
    """Instruction counts of the kernel and of its hot loop.

    The hot loop is the innermost natural loop holding the kernel's products
    (mma.sync if it has any, else fma.rn.f32). Its per-iteration instruction
    count takes the blocks that run every iteration (those dominating a
    latch) plus the blocks that issue cp.async (the ring fill is guarded by
    "k tile in range", true on all but the last stages − 1 steps); an
    unaligned-D fallback path is left out. A kernel with TMA copies (tile
    tma=1) is modeled on its TMA loop: its cp.async ring is the fallback for
    tensor maps the runtime cannot encode.
    """
    name, items = ptx_instructions(ptx)
    blocks, succs, _ = basic_blocks(items)
    insns = [t for b in blocks for t in b]
    total = count(insns)
    total["instructions"] = len(insns)
    product = ("wgmma" if total["wgmma"] else "mma.sync" if total["mma.sync"]
               else "fma.rn.f32")
    loops, dom = natural_loops(succs)
    best = None
    for header, latches, body in loops:
        n_products = sum(count(blocks[b])[product] for b in body)
        if not n_products:
            continue
        if total["tma"] and any(count(blocks[b])["cp.async"] for b in body):
            continue
        key = (len(body), -n_products)
        if best is None or key < best[0]:
            best = (key, header, latches, body)
    hot = None
    if best:
        _, header, latches, body = best
        every = {b for b in body if all(b in dom[l] for l in latches)}
        per_iter = [t for b in sorted(body)
                    if b in every or count(blocks[b])["cp.async"] or count(blocks[b])["tma"]
                    for t in blocks[b]]
        all_body = [t for b in sorted(body) for t in blocks[b]]
        hot = count(all_body)
        hot["per_iteration"] = count(per_iter)
        if not hot["per_iteration"][product]:
            # Every product sits in a conditional block: take the whole body.
            per_iter = all_body
            hot["per_iteration"] = hot.copy()
        hot["instructions"] = len(per_iter)
        hot["blocks"] = len(body)
    n = re.search(r"wgmma\.mma_async\S*\.m64n(\d+)k16", ptx)
    return {"entry": name, "total": total, "hot_loop": hot, "product": product
            if total[product] else None, "wgmma_n": int(n.group(1)) if n else 0}


# --------------------------------------------------------------------------
# ptxas
# --------------------------------------------------------------------------
def ptxas_info(ptxas, ptx_path, chip):
    """Registers, spills, stack and static shared memory from `ptxas -v`."""
    out = run([ptxas, "-v", "-arch=" + chip, ptx_path, "-o", ptx_path + ".cubin"],
              "ptxas " + os.path.basename(ptx_path))
    info = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0, "smem": 0,
            "warnings": [l.strip() for l in out.splitlines() if "warning" in l.lower()]}
    m = re.search(r"Used (\d+) registers", out)
    if m:
        info["registers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                  out)
    if m:
        info["stack"], info["spill_stores"], info["spill_loads"] = map(int, m.groups())
    m = re.search(r"(\d+) bytes smem", out)
    if m:
        info["smem"] = int(m.group(1))
    return info


def occupancy(chip, regs, smem_per_block, threads):
    """Theoretical blocks and warps per SM, with the limiting resource."""
    c = CHIPS[chip]
    warps = -(-threads // 32)
    g = c["reg_granularity_per_warp"]
    regs_per_warp = -(-max(regs, 1) * 32 // g) * g
    # As the hardware checks a launch (cuda_occupancy.h): the block's warps
    # count rounded up to the 4 sub-partitions, whose register files are a
    # quarter of the SM's each. 288 threads at 224 registers assembled but
    # never launched on an H200 (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES).
    partitions = 4
    if regs_per_warp * (-(-warps // partitions) * partitions) > c["regs_per_sm"]:
        raise ValueError(f"a block of {threads} threads at {regs} registers cannot launch: "
                         f"{warps} warps count as {-(-warps // partitions) * partitions}")
    limits = {
        "threads": c["max_threads_per_sm"] // (warps * 32),
        "blocks": c["max_blocks_per_sm"],
        "registers": (c["regs_per_sm"] // partitions // regs_per_warp) * partitions // warps,
        "smem": c["smem_per_sm"] // (smem_per_block + c["smem_reserved_per_block"]),
    }
    blocks = min(limits.values())
    limiter = min(limits, key=lambda k: (limits[k], k != "registers"))
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / c["max_warps_per_sm"], "limiter": limiter}


# --------------------------------------------------------------------------
# The per-kernel work model
# --------------------------------------------------------------------------
def cdiv(a, b):
    return -(-a // b)


def kernel_work(kind, shape, tile, env, chunks, e, vocab=False):
    """FLOPs (matmul), DRAM bytes (tile loads and compulsory floor) and
    shared-memory bytes of one kernel summed over all its launches.

    `e` is the storage element size; f32 workspaces are 4 bytes. "Tile
    loads" count what every block loads for its tiles, with no reuse
    between blocks (the pessimistic DRAM model); the floor is what must
    cross DRAM at least (inputs once, outputs once, and whatever cannot stay
    in L2 between launches, e.g. W once per row chunk). Formulas follow the
    kernel builders in compiler/Kernels/Schedules/GPU/{Forward,Backward}.cpp.
    """
    N, D, V = shape["N"], shape["D"], shape["V"]
    # lce_bwd_dw_single: lce_bwd_dw over the one chunk of every row, rounded
    # straight into the storage type (no f32 accumulator).
    single = kind == "lce_bwd_dw_single"
    if single:
        kind = "lce_bwd_dw"
    BR = tile.get("block_rows", 4)
    T = tile.get("threads", 128)
    S = tile.get("splits", 8)
    mma = tile.get("matmul") in ("mma_sync", "wgmma")
    wgmma = tile.get("matmul") == "wgmma"
    BC = tile.get("block_cols", 0) or T
    if wgmma and kind in ("lce_bwd_dx", "lce_bwd_dw") and tile.get("grad_cols"):
        BC = tile["grad_cols"]  # the gradient products' own columns
    products = ("lce_partial", "lce_bwd_dz", "lce_fused_z", "lce_bwd_dx", "lce_bwd_dw")
    # With tensor cores the gradient products read a 16-bit dZ.
    z_elem = e if mma and kind in ("lce_bwd_dz", "lce_bwd_dx", "lce_bwd_dw") else 4
    dz16 = mma  # lce_fused_dz writes a 16-bit dZ next to the raw logits
    # On tensor-core tiles lce_fused_z folds each tile's row statistics
    # and stores one state (max, sum) per row, tile and warp column
    # (wgmma: one; mma_sync: BC / 32), which lce_fused_lse merges.
    mma_logits = mma
    tile_states = 0
    if mma and kind in ("lce_fused_z", "lce_fused_lse"):
        logit_cols = tile.get("block_cols", 0) or T
        groups = 1 if wgmma else max(1, logit_cols // 32)
        tile_states = N * cdiv(V, logit_cols) * groups * 2 * 4
    if mma and kind not in products:
        # The kernels the tensor-core strategy does not build run on the SIMT
        # tile next to it (GpuSchedule::simtTile): 4 rows per thread, the
        # configured threads, one column per thread.
        BR, mma, BC = 4, False, T
    C = env.get("C", N)
    f = 4
    x_bytes, w_bytes, z_bytes = N * D * e, V * D * e, N * V * z_elem
    wm, wn = BR // 32, BC // 32
    if wgmma:
        # Each warpgroup reads its 64 rows of A and all of B from shared
        # memory once per k step.
        wm, wn = BR // 64, 1
    # cp.async writes each staged element once; ldmatrix reads the A rows
    # once per warp column and the B rows once per warp row.
    def mma_smem(blocks, k):
        return blocks * k * e * (BR * (1 + wn) + BC * (1 + wm))
    r = {"flops": 0, "tile_bytes": 0, "floor_bytes": 0, "smem_bytes": 0}
    # Clusters (tile cluster=2 or 4 with a producer; a block per tile,
    # persistent or banded): the logits products' row blocks in clusters of
    # `cl` (2 or 4) that load each W tile once.
    cl = tile.get("cluster", 0)
    paired = wgmma and cl > 1 and tile.get("tma", 0) >= 2 and (
        kind in ("lce_partial", "lce_bwd_dz", "lce_fused_z"))

    # The gradient products pair row blocks of a column block the same way
    # where each block can copy whole 64-line boxes of the shared MN-major
    # B tile (GpuSchedule::gradientCluster): B is read once per cluster.
    grad_paired = wgmma and cl > 1 and tile.get("tma", 0) >= 2 and (
        kind in ("lce_bwd_dx", "lce_bwd_dw") and tile.get("block_k") == 64
        and BC % (64 * cl) == 0)

    def b_reads(row_blocks):
        """Row blocks that each read a gradient product's B tile."""
        return cdiv(row_blocks, cl) if grad_paired else row_blocks

    def pair_bytes(row_blocks, col_tiles, depth):
        """Tile loads of row_blocks x col_tiles logits tiles over `depth`."""
        if paired:
            return (row_blocks * BR + cdiv(row_blocks, cl) * BC) * col_tiles * depth * e
        return row_blocks * col_tiles * (BR + BC) * depth * e

    if vocab and kind in ("lce_bwd_dz", "lce_bwd_dx", "lce_bwd_dw"):
        # Vocabulary chunks (strategy vocab_chunked): per chunk of C
        # columns, every row's dZ of them; dX += dZ·W[chunk] (k = C) read
        # and written back in f32 per chunk; dW[chunk] = dZᵀ·X (k = N)
        # stored once in the storage type.
        rb, dt, ct = cdiv(N, BR), cdiv(D, BC), cdiv(C, BC)
        r["flops"] = 2 * N * D * V
        if kind == "lce_bwd_dz":
            r["tile_bytes"] = chunks * pair_bytes(rb, ct, D) + z_bytes
            r["floor_bytes"] = chunks * x_bytes + w_bytes + z_bytes
            if mma:
                r["smem_bytes"] = mma_smem(chunks * rb * ct, D)
        elif kind == "lce_bwd_dx":
            acc = chunks * 2 * N * D * f
            r["tile_bytes"] = z_bytes * dt + chunks * b_reads(rb) * C * D * e + acc
            r["floor_bytes"] = z_bytes + w_bytes + acc
            if mma:
                r["smem_bytes"] = mma_smem(chunks * rb * dt, C)
        else:
            vb = chunks * cdiv(C, BR)
            r["tile_bytes"] = z_bytes * dt + chunks * b_reads(cdiv(C, BR)) * N * D * e + V * D * e
            r["floor_bytes"] = z_bytes + chunks * x_bytes + V * D * e
            if mma:
                r["smem_bytes"] = mma_smem(vb * dt, N)
        r["tile_bytes"] = max(r["tile_bytes"], r["floor_bytes"])
        return r
    if kind == "lce_partial":
        rb = cdiv(N, BR)
        tiles = S * cdiv(cdiv(V, S), BC)            # vocabulary tiles per row block
        out = 2 * S * N * f                         # part_max, part_sum
        r["flops"] = 2 * N * D * V
        r["tile_bytes"] = pair_bytes(rb, tiles, D) + out
        r["floor_bytes"] = x_bytes + w_bytes + out
        if mma:
            r["smem_bytes"] = mma_smem(rb * tiles, D)
        else:
            r["smem_bytes"] = rb * S * 2 * 2 * BR * T * f   # the row-merge trees
    elif kind == "lce_combine":
        b = N * (S * 2 * f + 2 * D * e + 8 + 2 * f)  # partials, x row + W[label], label, out
        r.update(flops=2 * N * D, tile_bytes=b, floor_bytes=b)
    elif kind in ("lce_reduce", "lce_bwd_scale"):
        b = N * (8 + f) * (2 if kind == "lce_bwd_scale" else 1)
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind in ("lce_bwd_dz", "lce_fused_z"):
        # Per chunk: blocks of BR rows x BC columns (SIMT: T) over all of D.
        per_chunk = cdiv(C, BR) if chunks else cdiv(N, BR)
        rb = chunks * per_chunk if chunks else per_chunk
        vt = cdiv(V, BC)
        r["flops"] = 2 * N * D * V
        r["tile_bytes"] = max(chunks, 1) * pair_bytes(per_chunk, vt, D) + z_bytes + tile_states
        if mma:
            r["smem_bytes"] = mma_smem(rb * vt, D)
        r["floor_bytes"] = x_bytes + chunks * w_bytes + z_bytes + tile_states
    elif kind == "lce_fused_lse":
        if mma_logits:
            # The tiles' row states lce_fused_z stored (2 fields each) and
            # the label's raw logit (a 32-byte sector) per row.
            b = tile_states + N * (3 * f + 32)
        else:
            b = z_bytes + N * 3 * f
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind == "lce_fused_dz":
        # Reads the f32 raw logits; writes dZ in place (f32) or, on tensor
        # cores, a 16-bit copy.
        b = z_bytes + N * V * (e if dz16 else f) + N * 3 * f
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind == "lce_bwd_dx":
        # Blocks of BR rows x BC columns of D, k over V: dZ rows re-read per
        # D tile, W re-read per row block.
        rb, dt = chunks * cdiv(C, BR), cdiv(D, BC)
        r["flops"] = 2 * N * D * V
        r["tile_bytes"] = z_bytes * dt + chunks * b_reads(cdiv(C, BR)) * V * D * e + x_bytes
        r["floor_bytes"] = z_bytes + chunks * w_bytes + x_bytes
        if mma:
            r["smem_bytes"] = mma_smem(rb * dt, V)
    elif kind == "lce_bwd_dw":
        # Per chunk, blocks of BR vocab rows x BC columns of D, k over the
        # chunk's rows; the f32 accumulator is read back after chunk 0
        # (single: dW written once in storage).
        acc = V * D * e if single else (2 * chunks - 1) * V * D * f
        vb, dt = cdiv(V, BR), cdiv(D, BC)
        r["flops"] = 2 * N * D * V
        r["tile_bytes"] = z_bytes * dt + b_reads(vb) * N * D * e + acc
        r["floor_bytes"] = z_bytes + x_bytes + acc
        if mma:
            r["smem_bytes"] = mma_smem(vb * dt, N)
    elif kind == "lce_bwd_zero":
        # dW (and db) accumulators set to 0; its grid is empty but for N = 0
        # (lce_bwd_dw starts the sums at the first chunk).
        b = V * D * f + V * f
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind == "lce_bwd_finish":
        b = V * D * (f + e)
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind == "lce_bwd_zero_dx":
        b = N * D * f                               # the dX accumulator set to 0
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind == "lce_bwd_finish_dx":
        b = N * D * (f + e)
        r.update(tile_bytes=b, floor_bytes=b)
    elif kind == "lce_bwd_dx_rc":
        # Per row block, per vocabulary tile of T: logits (W tile, x rows),
        # then dX += dZ·W_tile (the W tile again) into the f32 accumulator.
        rb, vt = cdiv(N, BR), cdiv(V, T)
        warps = cdiv(T, 32)
        r["flops"] = 4 * N * D * V
        r["tile_bytes"] = rb * vt * (2 * T * D * e + BR * D * e + 2 * BR * D * f) + N * D * (f + e)
        r["floor_bytes"] = x_bytes + w_bytes + N * D * (3 * f + e)
        r["smem_bytes"] = rb * vt * BR * T * f * (1 + warps * cdiv(D, T))
    elif kind == "lce_bwd_dw_rc":
        vb, nt = cdiv(V, BR), cdiv(N, T)
        warps = cdiv(T, 32)
        r["flops"] = 4 * N * D * V
        r["tile_bytes"] = vb * nt * (2 * T * D * e + BR * D * e + 2 * BR * D * f) + V * D * (f + e)
        r["floor_bytes"] = x_bytes + w_bytes + V * D * (3 * f + e)
        r["smem_bytes"] = vb * nt * BR * T * f * (1 + warps * cdiv(D, T))
    else:
        raise ModelError("no work model for kernel %s" % kind)
    r["tile_bytes"] = max(r["tile_bytes"], r["floor_bytes"])
    return r


def issue_factor(chip, unit, hot):
    """Fraction of the unit's peak the hot loop's instruction mix allows.

    A SM issues ISSUE_PER_CLOCK warp instructions per clock. FMA: a warp
    FFMA occupies fp32_lanes/32 of the SM's FMA issue per clock, so with I
    instructions per F FMAs the FMA pipe runs at most
    min(1, ISSUE_PER_CLOCK·F / (I·lanes/32)). Tensor cores: the unit needs
    peak / (SMs·clock·4096) mma.sync per clock per SM, so I instructions per
    M mma allow min(1, ISSUE_PER_CLOCK·M / (I·that rate)). PTX, not SASS:
    ptxas folds some address arithmetic, so this is a rough bound.
    """
    if not hot or unit == "memory":
        return 1.0
    c = CHIPS[chip]
    per = hot["per_iteration"]
    insns = max(hot["instructions"], 1)
    if unit == "tensor core" and per["wgmma"]:
        flops = WGMMA_FLOPS_PER_N * max(hot.get("wgmma_n", 0), 8)
        rate = c["tc_practical"] / (c["sms"] * c["clock_ghz"] * 1e9 * flops)
        return min(1.0, ISSUE_PER_CLOCK * per["wgmma"] / (insns * rate))
    if unit == "tensor core":
        rate = c["tc_practical"] / (c["sms"] * c["clock_ghz"] * 1e9 * MMA_FLOPS)
        return min(1.0, ISSUE_PER_CLOCK * per["mma.sync"] / (insns * rate))
    fma_rate = c["fp32_lanes_per_sm"] / 32
    return min(1.0, ISSUE_PER_CLOCK * per["fma.rn.f32"] / (insns * fma_rate))


def occupancy_factor(chip, unit, occ, blocks, warps_per_block, persistent=0):
    """f_occ = min(1, W_avg / W_sat).

    W_avg is the average number of warps resident per SM while the grid
    runs: blocks·warps / (waves·SMs), capped by the theoretical occupancy,
    with waves = ceil(blocks / (SMs·blocks per SM)). It folds occupancy and
    grid fill into one number: a grid smaller than the machine (one block,
    one thread per row of a small chunk) leaves SMs idle or nearly so, and
    the model says so. W_sat is W_SAT_TENSOR warps for tensor-core kernels
    and W_SAT_SIMT for the rest. A persistent kernel (`persistent` = P
    blocks, `blocks` its tiles) runs its tiles in waves of at most P: the
    busiest block takes ceil(tiles / P) of them, which a grid of one wave
    does not show.
    """
    c = CHIPS[chip]
    if occ["blocks_per_sm"] == 0:
        return 0.0
    sat = W_SAT_TENSOR if unit == "tensor core" else W_SAT_SIMT
    concurrent = c["sms"] * occ["blocks_per_sm"]
    if persistent:
        concurrent = min(concurrent, persistent)
    waves = cdiv(blocks, concurrent)
    avg = min(occ["warps_per_sm"], blocks * warps_per_block / (waves * c["sms"]))
    return min(1.0, avg / sat)


# The tensor-core product kernels whose tiles GpuSchedule::tileOrder orders
# (tile band): their DRAM traffic under that order comes from
# bench/gpu/tile_order.py's wave-and-L2 model.
ORDERED_PRODUCTS = ("lce_bwd_dz", "lce_fused_z", "lce_bwd_dx", "lce_bwd_dw")


@functools.lru_cache(maxsize=None)
def _tile_order():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tile_order.py")
    spec = importlib.util.spec_from_file_location("tile_order", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unguarded(formula):
    """A grid formula without its trailing 0/1 factor ('(g)*SINGLE' or
    '(g)*(1-SINGLE)': kernels launched only in some calls) -> 'g'."""
    m = re.fullmatch(r"\((.*)\)\*(?:SINGLE|\(1-SINGLE\))", formula)
    return m.group(1) if m else formula


def cluster_groups(formula):
    """A product kernel's grid.x in clusters ('2*cdiv(C,256)',
    '4*min(...,33)': GpuSchedule::productLaunch) -> (blocks per cluster,
    the groups of row blocks' formula); else (1, formula)."""
    m = re.fullmatch(r"(\d+)\*((?:cdiv|min)\(.*\))", formula)
    return (int(m.group(1)), m.group(2)) if m else (1, formula)


def split_product(formula):
    """'a*b' at the top level (outside parentheses) -> ('a', 'b')."""
    depth = 0
    for i, ch in enumerate(formula):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "*" and depth == 0:
            return formula[:i], formula[i + 1:]
    raise ModelError("no top-level product in %r" % formula)


def ordered_operand_bytes(chip, kernel, tile, env, grid_env, vocab, concurrent, e):
    """(DRAM bytes of one launch's operand slabs in the kernel's tile order
    (tile band, or row blocks first), those of every slab once), or None
    for a kernel it does not order. A = BM rows × the depth, B = the tile's
    columns × the depth."""
    name = kernel["name"].removesuffix("_single")
    if name not in ORDERED_PRODUCTS or tile.get("matmul") not in ("mma_sync", "wgmma"):
        return None
    # In clusters the tiles go in groups of `group` row blocks that read
    # one B slab (multicast) and a group's A rows: the order's rows.
    group, grid_x = cluster_groups(unguarded(kernel["grid"][0]))
    swept = re.fullmatch(r"min\((.*),(\d+)\)", grid_x)
    if tile.get("persistent") and swept:
        rows_f, cols_f = split_product(swept.group(1))
    else:
        rows_f, cols_f = grid_x, kernel["grid"][1]
    rows, cols = evaluate(rows_f, grid_env), evaluate(cols_f, grid_env)
    concurrent = max(1, concurrent // group) if concurrent else concurrent
    bm = tile.get("block_rows", 128) * group
    bn = tile.get("block_cols", 64)
    if name in ("lce_bwd_dx", "lce_bwd_dw") and tile.get("grad_cols"):
        bn = tile["grad_cols"]
    depth = {"lce_bwd_dz": env["D"], "lce_fused_z": env["D"],
             "lce_bwd_dx": env["C"] if vocab else env["V"],
             "lce_bwd_dw": env["N"] if vocab else env["C"]}[name]
    machine = {"sms": CHIPS[chip]["sms"], "l2_bytes": CHIPS[chip]["l2_bytes"]}
    slab_a, slab_b = bm * depth * e, bn * depth * e
    ordered = _tile_order().dram_bytes(rows, cols, slab_a, slab_b, tile.get("band", 0) << 10,
                                       machine, concurrent)
    return ordered, rows * slab_a + cols * slab_b


def model_kernel(chip, shape, plan, kernel, ptx, info, e):
    """Everything the tables show for one kernel at one shape."""
    c = CHIPS[chip]
    N, D, V = shape["N"], shape["D"], shape["V"]
    env = {"N": N, "D": D, "V": V}
    env.update(plan["constants"])
    for name, formula in plan["derived"]:
        env[name] = evaluate(formula, env)
    vocab = plan.get("chunk_dim") == "V"
    chunks = cdiv(V if vocab else N, env["C"]) if "C" in env else 1
    launches = chunks if kernel["per_chunk"] else 1
    grid_env = dict(env)
    if kernel["per_chunk"]:
        grid_env["C"] = env["C"]          # the full chunk (the last may be smaller)
    blocks = 1
    for g in kernel["grid"]:
        blocks *= evaluate(g, grid_env)
    # Tile persistent=P: grid.x is min(tiles, P) and each block sweeps
    # tiles; the waves are the tiles'.
    # In clusters (GpuSchedule::productLaunch) whole clusters of `group`
    # blocks sweep groups of `group` row blocks.
    tiles, persistent = blocks, 0
    group, grid_x = cluster_groups(unguarded(kernel["grid"][0]))
    swept = re.fullmatch(r"min\((.*),(\d+)\)", grid_x)
    if plan["tile"].get("persistent") and swept:
        persistent = group * int(swept.group(2))
        tiles = group * evaluate(swept.group(1), grid_env)
    threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
    smem = info["smem"] + kernel["dynamic_smem"]
    occ = occupancy(chip, info["registers"], smem, threads)

    hot = ptx["hot_loop"]
    if hot is not None:
        hot = dict(hot, wgmma_n=ptx.get("wgmma_n", 0))
    if ptx["total"]["mma.sync"] or ptx["total"]["wgmma"]:
        unit = "tensor core"
    elif hot is not None:
        unit = "FMA"
    else:
        unit = "memory"
    w = kernel_work(kernel["name"], shape, plan["tile"], env,
                    chunks if "C" in env else 0, e, vocab)
    if blocks == 0:
        # An empty grid (lce_bwd_zero with rows): the launcher skips it.
        w = dict(w, flops=0, tile_bytes=0, floor_bytes=0, smem_bytes=0)
        launches = 0
    peak = {"tensor core": c["tc_practical"], "FMA": c["fma_peak"]}.get(unit)
    smem_bw = c["sms"] * 128 * c["clock_ghz"] * 1e9
    t_flop = w["flops"] / peak if peak else 0.0
    t_dram = w["tile_bytes"] / c["dram_bw"]
    t_floor_dram = w["floor_bytes"] / c["dram_bw"]
    t_l2 = w["tile_bytes"] / c["l2_bw"]
    t_smem = w["smem_bytes"] / smem_bw
    f_issue = issue_factor(chip, unit, hot)
    f_occ = occupancy_factor(chip, unit, occ, tiles, cdiv(threads, 32), persistent) if blocks else 1.0
    overhead = launches * T_LAUNCH
    # The tile order's DRAM traffic: the operand slabs as the waves of
    # concurrent tiles and the L2 let them through, plus what the kernel
    # writes or reads besides its operands (the floor's rest); the tile
    # loads still cross the L2 (t_l2), as in the L2-reuse estimate.
    concurrent = occ["blocks_per_sm"] * c["sms"]
    if persistent:
        concurrent = min(concurrent, persistent)
    ordered = ordered_operand_bytes(chip, kernel, plan["tile"], env, grid_env, vocab,
                                    max(1, concurrent), e)
    order_bytes = w["tile_bytes"]
    if ordered is not None:
        slabs, once = ordered
        order_bytes = launches * slabs + max(0, w["floor_bytes"] - launches * once)
    t_order_dram = order_bytes / c["dram_bw"]
    if f_occ > 0:
        t_est = max(t_flop / f_issue, t_dram, t_smem) / f_occ + overhead
        t_l2r = max(t_flop / f_issue, t_floor_dram, t_l2, t_smem) / f_occ + overhead
        t_order = max(t_flop / f_issue, t_order_dram, t_l2, t_smem) / f_occ + overhead
    else:
        t_est = t_l2r = t_order = float("inf")
    t_floor = max(t_flop, t_floor_dram)
    bound = max((("flop", t_flop / f_issue), ("dram", t_dram), ("smem", t_smem)),
                key=lambda kv: kv[1])[0] if blocks else "empty grid"
    return {
        "kernel": kernel["name"], "launches": launches, "blocks_per_launch": blocks,
        "threads": threads, "unit": unit, "ptxas": info, "smem_per_block": smem,
        "occupancy": occ, "ptx": ptx, "flops": w["flops"], "dram_tile_bytes": w["tile_bytes"],
        "dram_floor_bytes": w["floor_bytes"], "smem_bytes": w["smem_bytes"],
        "f_issue": f_issue, "f_occ": f_occ, "t_flop_s": t_flop, "t_dram_s": t_dram,
        "t_smem_s": t_smem, "t_l2_s": t_l2, "t_est_s": t_est, "t_l2reuse_s": t_l2r,
        "t_order_s": t_order, "dram_order_bytes": order_bytes,
        "t_floor_s": t_floor, "bound": bound,
    }


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------
def compile_variant(opt, ptxas, workdir, chip, variant, dtype):
    """Compiles one variant for one chip; returns its plan and kernels."""
    name, graph, strategy, options, _ = variant
    tag = "%s-%s-%s" % (name, dtype, chip)
    src = os.path.join(workdir, tag + ".mlir")
    with open(src, "w") as fh:
        fh.write(GRAPHS[graph].replace("@DT@", dtype).replace("@STRATEGY@", strategy))
    out = os.path.join(workdir, tag + ".out.mlir")
    pipeline = "chip=%s%s" % (chip, (" " + options) if options else "")
    run([opt, src, "--lossjit-gpu-pipeline=" + pipeline, "-o", out], "lossjit-opt " + tag)
    with open(out) as fh:
        text = fh.read()
    plan = parse_plan(text)
    ptxdir = os.path.join(workdir, tag)
    listing = run([sys.executable, EXTRACT_PTX, out, ptxdir], "extract-ptx " + tag)
    files = {}
    for line in listing.split():
        if line.endswith(".ptx"):
            files[line[:-4]] = os.path.join(ptxdir, line)
    kernels = []
    for k in plan["kernels"]:
        path = files.get(k["module"])
        if not path:
            raise ModelError("%s: no PTX for kernel module %s" % (tag, k["module"]))
        with open(path) as fh:
            ptx = analyze_ptx(fh.read())
        kernels.append((k, ptx, ptxas_info(ptxas, path, chip)))
    return {"pipeline": pipeline, "plan": plan, "kernels": kernels}


def build_model(opt, ptxas, chips, workdir):
    """All variants × dtypes × chips × shapes."""
    results = {"label": LABEL, "chips": {}, "errors": []}
    for chip in chips:
        per_chip = {"card": CHIPS[chip]["card"], "variants": {}}
        for variant in VARIANTS:
            if chip not in variant_chips(variant):
                continue
            for dtype in DTYPES:
                key = "%s/%s" % (variant[0], dtype)
                try:
                    compiled = compile_variant(opt, ptxas, workdir, chip, variant, dtype)
                except ModelError as err:
                    results["errors"].append("%s %s: %s" % (chip, key, err))
                    continue
                entry = {"variant": variant[0], "dtype": dtype, "pass": variant[4],
                         "pipeline": compiled["pipeline"], "tile": compiled["plan"]["tile"],
                         "constants": compiled["plan"]["constants"], "shapes": {}}
                for shape in SHAPES:
                    rows = [model_kernel(chip, shape, compiled["plan"], k, ptx, info, 2)
                            for k, ptx, info in compiled["kernels"]]
                    entry["shapes"][shape["name"]] = {
                        "shape": shape, "kernels": rows,
                        "t_est_s": sum(r["t_est_s"] for r in rows),
                        "t_l2reuse_s": sum(r["t_l2reuse_s"] for r in rows),
                        "t_order_s": sum(r["t_order_s"] for r in rows),
                        "t_floor_s": sum(r["t_floor_s"] for r in rows),
                        "flops": sum(r["flops"] for r in rows)}
                per_chip["variants"][key] = entry
        results["chips"][chip] = per_chip
    return results


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------
def ms(seconds):
    if seconds == float("inf"):
        return "∞"
    return ("%.3g" % (seconds * 1e3)) if seconds < 1e-2 else ("%.1f" % (seconds * 1e3))


def gb(n):
    return "%.3g" % (n / 1e9)


def hot_summary(row):
    hot = row["ptx"]["hot_loop"]
    if not hot:
        return "—"
    parts = ["%s %d" % (k.split(".")[0], hot[k]) for k in COUNTED if hot[k]]
    return "%s / %d insn" % (", ".join(parts), hot["instructions"])


def summaries(per_chip, shape_name):
    """Per variant/dtype: forward and forward+backward estimates."""
    out = []
    v = per_chip["variants"]
    for key, entry in v.items():
        s = entry["shapes"][shape_name]
        sh = s["shape"]
        ndv = sh["N"] * sh["D"] * sh["V"]
        row = {"variant": key, "pass": entry["pass"]}
        if entry["pass"] == "forward":
            row["fwd"] = (s["t_est_s"], s["t_l2reuse_s"], s["t_floor_s"])
            paired = PAIRED_BACKWARD.get(key.split("/")[0], "bwd-chunked")
            bwd = v.get("%s/%s" % (paired, entry["dtype"]))
            if bwd:
                b = bwd["shapes"][shape_name]
                row["fwdbwd"] = (s["t_est_s"] + b["t_est_s"], s["t_l2reuse_s"] + b["t_l2reuse_s"],
                                 s["t_floor_s"] + b["t_floor_s"])
                row["fwdbwd_note"] = "+ " + paired
                row["order_fwdbwd"] = s["t_order_s"] + b["t_order_s"]
        elif entry["pass"] == "fused":
            row["fwdbwd"] = (s["t_est_s"], s["t_l2reuse_s"], s["t_floor_s"])
            row["fwdbwd_note"] = "one fused op"
            row["order_fwdbwd"] = s["t_order_s"]
        else:
            row["bwd"] = (s["t_est_s"], s["t_l2reuse_s"], s["t_floor_s"])
            row["order_bwd"] = s["t_order_s"]
        if "fwdbwd" in row:
            row["tflops_6ndv"] = tuple(6 * ndv / t if t else 0 for t in row["fwdbwd"])
        out.append(row)
    return out


def triple(t):
    return "%s / %s / %s" % (ms(t[0]), ms(t[1]), ms(t[2]))


def render_markdown(results, command):
    """The tables (each says it is a model) and the notes."""
    lines = []
    head = SHAPES[0]
    for chip, per_chip in results["chips"].items():
        c = CHIPS[chip]
        lines.append("### %s — %s" % (per_chip["card"], LABEL))
        lines.append("")
        lines.append("Peaks used: tensor core %.0f TFLOP/s, FP32 FMA %.1f TFLOP/s, DRAM %.1f TB/s, "
                     "L2 %.1f TB/s, shared memory %.1f TB/s; %d SMs."
                     % (c["tc_practical"] / 1e12, c["fma_peak"] / 1e12, c["dram_bw"] / 1e12,
                        c["l2_bw"] / 1e12, c["sms"] * 128 * c["clock_ghz"] * 1e9 / 1e12,
                        c["sms"]))
        lines.append("")
        for shape in SHAPES:
            lines.append("Summary at N=%d, D=%d, V=%d (%s), ms as est (no L2 reuse) / "
                         "L2 reuse / ideal floor:" % (shape["N"], shape["D"], shape["V"], LABEL))
            lines.append("")
            lines.append("| variant | forward ms | backward ms | fwd+bwd ms | fwd+bwd TFLOP/s at 6·N·D·V |")
            lines.append("|---|---|---|---|---|")
            for row in summaries(per_chip, shape["name"]):
                fb = triple(row["fwdbwd"]) + " (%s)" % row["fwdbwd_note"] if "fwdbwd" in row else ""
                tf = ("%.0f / %.0f / %.0f" % tuple(x / 1e12 for x in row["tflops_6ndv"])
                      if "tflops_6ndv" in row else "")
                lines.append("| %s | %s | %s | %s | %s |" % (
                    row["variant"], triple(row["fwd"]) if "fwd" in row else "",
                    triple(row["bwd"]) if "bwd" in row else "", fb, tf))
            lines.append("")
            ordered = [row for row in summaries(per_chip, shape["name"])
                       if "mma" in row["variant"] and ("order_bwd" in row or "order_fwdbwd" in row)]
            if ordered:
                lines.append("The tensor-core variants with the tile order's DRAM traffic "
                             "(bench/gpu/tile_order.py: waves of concurrent tiles, an LRU L2 of "
                             "whole slabs; tile band, or row blocks first), ms (%s):" % LABEL)
                lines.append("")
                lines.append("| variant | backward ms | fwd+bwd ms |")
                lines.append("|---|---|---|")
                for row in ordered:
                    lines.append("| %s | %s | %s |" % (
                        row["variant"], ms(row["order_bwd"]) if "order_bwd" in row else "",
                        ms(row["order_fwdbwd"]) if "order_fwdbwd" in row else ""))
                lines.append("")
        lines.append("Kernels at N=%d, D=%d, V=%d (%s):" % (head["N"], head["D"], head["V"],
                                                            LABEL))
        lines.append("")
        lines.append("| variant | kernel | launches × blocks | unit | regs | spill B | smem B/block "
                     "| blocks/SM (limit) | occupancy | hot loop (PTX) | GFLOP | DRAM GB tiles / "
                     "floor | smem GB | f_issue | f_occ | bound | est ms | L2-reuse ms | floor ms |")
        lines.append("|" + "---|" * 19)
        for key, entry in per_chip["variants"].items():
            for r in entry["shapes"][head["name"]]["kernels"]:
                p, o = r["ptxas"], r["occupancy"]
                lines.append("| %s | %s | %d × %d | %s | %d | %d | %d | %d (%s) | %.0f%% | %s | %s "
                             "| %s / %s | %s | %.2f | %.2f | %s | %s | %s | %s |" % (
                                 key, r["kernel"], r["launches"], r["blocks_per_launch"], r["unit"],
                                 p["registers"], p["spill_stores"] + p["spill_loads"],
                                 r["smem_per_block"], o["blocks_per_sm"], o["limiter"],
                                 100 * o["occupancy"], hot_summary(r), gb(r["flops"]),
                                 gb(r["dram_tile_bytes"]), gb(r["dram_floor_bytes"]),
                                 gb(r["smem_bytes"]), r["f_issue"], r["f_occ"], r["bound"],
                                 ms(r["t_est_s"]), ms(r["t_l2reuse_s"]), ms(r["t_floor_s"])))
        lines.append("")
    lines.append("How to read it (%s):" % LABEL)
    lines.append("")
    lines.append("- est = max(FLOPs / (peak · f_issue), DRAM tile bytes / DRAM BW, smem bytes / "
                 "smem BW) / f_occ + %g µs per launch. DRAM tile bytes count every block's tile "
                 "loads with no reuse between blocks (SIMT: each block of block_rows rows "
                 "re-reads W; mma_sync: X re-read per vocabulary tile, W per row block), never "
                 "below the compulsory traffic." % (T_LAUNCH * 1e6))
    lines.append("- L2 reuse = the same with those tile loads served by L2 (at its bandwidth) and "
                 "only the compulsory floor from DRAM; the truth for a well-ordered grid lies "
                 "between the two. floor = max(FLOPs / peak, compulsory bytes / DRAM BW).")
    lines.append("- The tile order's table: the L2-reuse estimate with the DRAM term replaced by "
                 "what the product kernels' tile order lets through (bench/gpu/tile_order.py: "
                 "waves of the concurrent tiles read each slab they share once, an LRU L2 of "
                 "whole slabs between waves; row blocks first, or bands of tile band KiB).")
    lines.append("- f_occ = min(1, W_avg / W_sat): W_avg = average warps resident per SM while "
                 "the grid runs (blocks·warps / (waves·SMs), capped by the theoretical "
                 "occupancy), so small grids are penalized; W_sat = %d "
                 "warps (tensor core) or %d (FMA, memory); occupancy from ptxas registers "
                 "(256-register warp granularity), static + dynamic shared memory (+1 KiB per "
                 "block), threads and the 32-block limit." % (W_SAT_TENSOR, W_SAT_SIMT))
    lines.append("- f_issue = what the hot loop's PTX instruction mix allows the unit: "
                 "%d warp instructions issue per clock per SM; FMA needs lanes/32 FFMA per clock, "
                 "tensor cores peak/(SMs·clock·4096) mma.sync per clock. hot loop = the innermost "
                 "CFG loop holding the products; 'insn' = instructions per iteration." %
                 ISSUE_PER_CLOCK)
    lines.append("- FLOPs: 2·N·D·V per logits product, dX and dW product each (DESIGN §3: chunked "
                 "backward 6·N·D·V, recompute 8·N·D·V, fused forward+backward 6·N·D·V); "
                 "elementwise kernels count as memory only.")
    lines.append("- Forward variants' fwd+bwd adds the chunked backward on the same strategy "
                 "(fwd-simt + bwd-chunked; fwd-mma* + bwd-chunked-mma64, whose logits, dZ·W and "
                 "dZᵀ·X all run on tensor cores: with fwd-mma64 the JIT's default for f16/bf16 "
                 "on sm_80+). H200 mma.sync: Hopper's full rate needs wgmma, so the mma_sync "
                 "rows there are optimistic. sm_90a rows are the wgmma variants (128x64 tile, one "
                 "warpgroup per 64 rows, operands staged by cp.async, one wgmma group kept in flight; "
                 "*-tma: the logit products' operands by TMA boxes on an mbarrier ring instead, "
                 "modeled on that loop; *-spec and *-lend: warp-specialized, modeled on the "
                 "consumers' loop, without overlap): the same 788 TFLOP/s ceiling, "
                 "the wgmma issue rate taken per warp instruction (a quarter of the warpgroup's "
                 "FLOPs).")
    lines.append("")
    lines.append("Command: `%s`" % command)
    if results.get("warnings"):
        lines.append("")
        lines.append("Warnings (from ptxas and the PTX, not from the model):")
        for w in results["warnings"]:
            lines.append("- " + w)
    if results["errors"]:
        lines.append("")
        lines.append("Variants that failed to compile:")
        for err in results["errors"]:
            lines.append("- " + err.splitlines()[0])
    return "\n".join(lines) + "\n"


def sanity_warnings(results):
    """Things a reader must know: spills, FMA loops in tensor-core kernels."""
    warn = []
    for chip, per_chip in results["chips"].items():
        for key, entry in per_chip["variants"].items():
            for r in entry["shapes"][SHAPES[0]["name"]]["kernels"]:
                p = r["ptxas"]
                if p["spill_stores"] or p["spill_loads"] or p["stack"]:
                    warn.append("%s %s %s: ptxas spills (%d B stores, %d B loads, %d B stack)" % (
                        chip, key, r["kernel"], p["spill_stores"], p["spill_loads"], p["stack"]))
                hot = r["ptx"]["hot_loop"]
                if r["unit"] == "tensor core" and hot and hot["fma.rn.f32"]:
                    warn.append("%s %s %s: %d fma.rn.f32 in the tensor-core loop" % (
                        chip, key, r["kernel"], hot["fma.rn.f32"]))
                if r["occupancy"]["blocks_per_sm"] == 0:
                    warn.append("%s %s %s: does not fit on an SM" % (chip, key, r["kernel"]))
                for w in p["warnings"]:
                    warn.append("%s %s %s: ptxas: %s" % (chip, key, r["kernel"], w))
    return warn


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"),
                        help="build directory holding bin/lossjit-opt (default: build)")
    parser.add_argument("--chips", default="sm_80,sm_90",
                        help="comma-separated: sm_80,sm_90,sm_90a (sm_90a: the wgmma variants)")
    parser.add_argument("--card", default="h200", choices=sorted(HOPPER_CARDS),
                        help="the Hopper card sm_90/sm_90a model (default: h200)")
    parser.add_argument("--json", help="write everything as JSON here")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--keep", help="keep the generated MLIR/PTX in this directory")
    args = parser.parse_args(argv)
    # (The script's one table of machines, set once before the model reads it.)
    CHIPS.update(hopper_chips(args.card))
    chips = [c.strip() for c in args.chips.split(",") if c.strip()]
    for chip in chips:
        if chip not in CHIPS:
            parser.error("unknown chip %s (the model knows %s)" % (chip, ", ".join(CHIPS)))
    try:
        opt, ptxas = find_tools(os.path.abspath(args.build))
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            results = build_model(opt, ptxas, chips, args.keep)
        else:
            with tempfile.TemporaryDirectory(prefix="lossjit-perf-model-") as tmp:
                results = build_model(opt, ptxas, chips, tmp)
    except ModelError as err:
        sys.stderr.write("perf_model: error: %s\n" % err)
        return 2
    command = "python3 bench/gpu/perf_model.py" + "".join(
        " " + a for a in (argv if argv is not None else sys.argv[1:]))
    results["warnings"] = sanity_warnings(results)
    text = render_markdown(results, command)
    print(text, end="")
    for e in results["errors"]:
        sys.stderr.write("perf_model: %s\n" % e)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
