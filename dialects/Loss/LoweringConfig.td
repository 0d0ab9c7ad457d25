//===- LoweringConfig.td - the compiler's decisions as IR --*- tablegen -*-===//
//
// How a fused op is lowered — the schedule, the matmul strategy, the tile —
// is an attribute on the op, `loss.lowering_config`, written by
// loss-select-lowering-config and only read by loss-lower-to-gpu/-cpu
// (IREE's lowering_config, Triton's MMA encoding). lossjit-opt shows it and
// a test or a user overrides it by writing it in the IR; its printed form
// is what the kernel cache keys on.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_LOSS_LOWERINGCONFIG
#define LOSSJIT_LOSS_LOWERINGCONFIG

include "dialects/Loss/LossDialect.td"

def Loss_ScheduleForward : I32EnumAttrCase<"forward", 0>;
def Loss_ScheduleChunked : I32EnumAttrCase<"chunked", 1>;
def Loss_ScheduleRecompute : I32EnumAttrCase<"recompute", 2>;
def Loss_ScheduleFused : I32EnumAttrCase<"fused", 3>;
def Loss_ScheduleVocabChunked : I32EnumAttrCase<"vocab_chunked", 4>;
def Loss_ScheduleFusedVocabChunked : I32EnumAttrCase<"fused_vocab_chunked", 5>;
def Loss_Schedule : I32EnumAttr<"Schedule",
    "kernel schedule: forward; backward chunked (over rows), vocab_chunked (over the "
    "vocabulary, host only) or recompute; fused forward+backward over row chunks, or a "
    "forward then vocabulary chunks (host only)",
    [Loss_ScheduleForward, Loss_ScheduleChunked, Loss_ScheduleRecompute,
     Loss_ScheduleFused, Loss_ScheduleVocabChunked, Loss_ScheduleFusedVocabChunked]> {
  let cppNamespace = "::lossjit::loss";
  let genSpecializedAttr = 0;
}

def Loss_MatmulSimt : I32EnumAttrCase<"simt", 0>;
def Loss_MatmulMmaSync : I32EnumAttrCase<"mma_sync", 1>;
def Loss_MatmulWgmma : I32EnumAttrCase<"wgmma", 2>;
def Loss_MatmulKind : I32EnumAttr<"MatmulKind", "how tile products are formed",
    [Loss_MatmulSimt, Loss_MatmulMmaSync, Loss_MatmulWgmma]> {
  let cppNamespace = "::lossjit::loss";
  let genSpecializedAttr = 0;
}

def Loss_GpuConfigAttr : AttrDef<Loss_Dialect, "GpuConfig"> {
  let mnemonic = "gpu_config";
  let summary = "How a fused op becomes GPU kernels";
  let description = [{
    `schedule` must match the op (forward for linear_cross_entropy, chunked
    or recompute for _grad, fused for _with_grad; the vocabulary-chunked
    schedules are host-only). `block_rows` rows per
    thread block (BN), `threads` per block (a power of two: block
    reductions are trees), `splits` vocabulary splits of the forward,
    `stages` of the operand pipeline (1: no pipelining; the SIMT strategy
    reads straight from memory).

    `matmul = mma_sync` (tensor cores, sm_80+, f16/bf16 storage; the
    logits X·Wᵀ of the forward, chunked and fused schedules and their
    gradient products dZ·W and dZᵀ·X; not recompute): a block computes block_rows × block_cols
    logit tiles (BM × BN, multiples of 32: one 32×32 warp tile per warp, so
    threads = BM·BN/32) over the reduction in steps of block_k (BK) through
    a ring of `stages` shared-memory buffers filled by cp.async. block_cols
    and block_k are 0 (and not printed) for simt.

    `matmul = wgmma` (Hopper tensor cores, chip sm_90a only, f16/bf16
    storage, the same products and schedules as mma_sync): block_rows 64 or
    128 (one warpgroup of 128 threads per 64 rows, so threads = 2 ·
    block_rows), block_cols a multiple of 16 up to 256 (wgmma's N), one
    wgmma.mma_async m64nNk16 per k16 step from operands staged by cp.async
    in the canonical core-matrix layout. `grad_cols` (wgmma only; 0: as
    block_cols) is the columns of the gradient products' tiles (dZ·W,
    dZᵀ·X): without an LSE epilogue they hold wider accumulator tiles in
    registers than the logit products; schedules without them (forward)
    ignore it. `tma = 1` (wgmma only) loads the logit products' operands
    (x and w, both contiguous along k) by TMA into 128-, 64- or 32-byte
    swizzled stages (block_k = 64, 32 or 16) that complete on an mbarrier
    ring, and with block_k = 64 the gradient products' too (dZ, Wᵀ, dZᵀ, Xᵀ;
    64-line boxes for the MN-major ones); the kernels take the tensor maps
    as by-value parameters and fall back to cp.async when the runtime cannot
    encode them (an unaligned base or row stride). `tma = 2` is warp
    specialization on top: the tensor-core kernels get a producer warp
    (threads + 32 threads per block; `threads` stays the consumer
    warpgroups' count and the other kernels' block) whose first thread
    issues the copies while the consumer warpgroups multiply, each stage
    released through a second mbarrier ring instead of a block barrier per
    k step. `tma = 3` (block_rows 128) makes the producer a warpgroup
    that lends its registers: the product kernels launch with 384 threads
    and nvvm.maxnreg 168, and around each sweep of tiles the producer
    keeps 40 (setmaxnreg.dec) while the two consumer warpgroups take 232
    (setmaxnreg.inc) — room for 128x256 gradient tiles (grad_cols = 256).
    `persistent = P` (tensor-core matmuls; 0: off) launches the
    gradient-side product kernels (lce_bwd_dz, lce_fused_z, and lce_bwd_dx
    and lce_bwd_dw where the gradients run on tensor cores) on at most P
    blocks, each taking tiles blockIdx.x,
    blockIdx.x + P, … of the grid a block per tile would have (row blocks
    first); with `tma = 2` one TMA ring runs through all of a block's
    tiles. P is typically the device's SM count. `band = B` (tensor-core
    matmuls; 0: off, row blocks first through the whole grid) orders the
    tiles of those kernels in bands of row blocks whose A operand (BM rows
    × the product's depth, 16-bit) takes at most B KiB (32768 for 32 MiB): each band runs
    column by column, row blocks first within a column, so a band's A rows
    stay in L2 while B streams by once per band instead of A once per
    column. The order changes no bit of any result. `cluster = 2` or `4` (wgmma
    with tma 2 or 3; 0: off) launches the products — lce_partial, and
    lce_bwd_dz / lce_fused_z, lce_bwd_dx and lce_bwd_dw where they run a
    block per tile (not persistent, no bands; dX and dW with gradient tiles
    of whole 64-column boxes per block: 128 or 256 columns for 2, 256 for
    4) — in thread-block clusters of that many row blocks that read the
    same B tiles (W; Wᵀ; Xᵀ): each block copies its share of every such
    tile and multicasts it to all (TMA .multicast::cluster), so it leaves
    L2 once per cluster; the stages are released to every block's producer
    (mbarrier arrivals on the peers through mapa). With 4, block_cols is a
    multiple of 32 (each share whole swizzle atoms of 8 lines). No bit of
    any result changes.

    Example: `#loss.gpu_config<schedule = forward, matmul = simt,
    block_rows = 4, threads = 128, splits = 8, stages = 1>`,
    `#loss.gpu_config<schedule = forward, matmul = mma_sync,
    block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64,
    block_k = 32>`
  }];
  let parameters = (ins EnumParameter<Loss_Schedule>:$schedule,
                        EnumParameter<Loss_MatmulKind>:$matmul,
                        "int64_t":$block_rows, "int64_t":$threads,
                        "int64_t":$splits, "int64_t":$stages,
                        DefaultValuedParameter<"int64_t", "0">:$block_cols,
                        DefaultValuedParameter<"int64_t", "0">:$block_k,
                        DefaultValuedParameter<"int64_t", "0">:$grad_cols,
                        DefaultValuedParameter<"int64_t", "0">:$tma,
                        DefaultValuedParameter<"int64_t", "0">:$persistent,
                        DefaultValuedParameter<"int64_t", "0">:$band,
                        DefaultValuedParameter<"int64_t", "0">:$cluster);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Loss_CpuConfigAttr : AttrDef<Loss_Dialect, "CpuConfig"> {
  let mnemonic = "cpu_config";
  let summary = "How a fused op becomes host kernels";
  let description = [{
    `block_rows` × `block_cols` the register tile of the logit products
    (rows of x × rows of w; chosen for the target's vector registers, it
    never changes a bit), `vector_width` f32 lanes of a dot product (it
    fixes the summation order, so it is the same on every host CPU), `panel_blocks` register blocks per panel of the
    vocabulary sweep, `vocab_tile` columns per sweep tile, `reduce_lanes`
    lanes of the fixed-order reduction (the GPU block size, so both backends
    sum row losses in one order).

    Example: `#loss.cpu_config<schedule = chunked, block_rows = 8,
    block_cols = 3, vector_width = 8, panel_blocks = 16, vocab_tile = 64,
    reduce_lanes = 128>`
  }];
  let parameters = (ins EnumParameter<Loss_Schedule>:$schedule,
                        "int64_t":$block_rows, "int64_t":$block_cols,
                        "int64_t":$vector_width,
                        "int64_t":$panel_blocks, "int64_t":$vocab_tile,
                        "int64_t":$reduce_lanes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // LOSSJIT_LOSS_LOWERINGCONFIG
