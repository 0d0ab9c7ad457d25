//===- Passes.td - graph-level passes on the `loss` dialect -*- tablegen -*-===//

#ifndef LOSSJIT_COMPILER_TRANSFORMS_PASSES
#define LOSSJIT_COMPILER_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def LossMakePrecisionExplicit : Pass<"loss-make-precision-explicit"> {
  let summary = "Insert loss.cast so that softmax, logsumexp, logit transforms and NLL compute in f32";
  let description = [{
    Every transcendental, reduction and logit-transform op
    (`loss.log_softmax`, `loss.logsumexp`, `loss.scale`, `loss.softcap`,
    `loss.nll`, `loss.cross_entropy`) whose operand is
    stored in f16 or bf16 gets an explicit `loss.cast` to f32 in front of it;
    its result becomes f32. Tensors keep their storage type everywhere else,
    so the only precision changes in the graph are visible casts.
  }];
  let dependentDialects = ["::lossjit::loss::LossDialect"];
}

def LossVerifyPrecision : Pass<"loss-verify-precision"> {
  let summary = "Reject f16/bf16 math on the softmax path";
  let description = [{
    Fails with a diagnostic on every `loss.log_softmax`, `loss.logsumexp`,
    `loss.scale`, `loss.softcap`, `loss.nll` or `loss.cross_entropy` that
    would compute in a 16-bit type,
    and on every fused op whose compute type is not f32.
  }];
}

def LossFuseLinearCrossEntropy : Pass<"loss-fuse-linear-cross-entropy"> {
  let summary = "Fuse linear → [scale] → [softcap] → log_softmax → nll into loss.linear_cross_entropy";
  let description = [{
    Expands `loss.cross_entropy`, then matches
    `nll(log_softmax([cast]([softcap]([scale]([cast](linear(x, w [, b])))))), y)`
    (casts anywhere; consecutive scales multiply) and replaces it by one
    `loss.linear_cross_entropy` with `logit_scale` and `softcap` attributes
    that never materializes the [N,V] logits. Scaling must come before the
    soft-cap (the order of `softcap(z * s)`); a scale after it is not fused.
    A chain it cannot fuse stays as it is, with a remark saying why (for
    example: the logits have another user, so they must exist anyway).
  }];
  let dependentDialects = ["::lossjit::loss::LossDialect"];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"true",
           "Emit a remark on each NLL that could not be fused">,
  ];
}

def LossSelectLoweringConfig : Pass<"loss-select-lowering-config", "::mlir::ModuleOp"> {
  let summary = "Decide how each fused op is lowered and record it as its loss.lowering_config";
  let description = [{
    The compiler's choices become IR that the lowerings only read (like
    IREE's lowering_config): for every fused op this pass attaches
    `loss.lowering_config`, a `#loss.gpu_config` (target=gpu) or
    `#loss.cpu_config` (target=cpu) holding the schedule (forward; chunked or
    recompute from a _grad op's strategy, auto meaning chunked; fused for
    _with_grad), the matmul strategy and the tile.

    A config already on the op (written in the input IR) is kept and only
    the options given here replace its fields; an op without one starts
    from the target's defaults. Options left unset (-1, or empty) keep what
    is there. An invalid tile is an error naming the rule it breaks.

    Example (target=gpu, chip=sm_90):
      %l, %lse = loss.linear_cross_entropy ... {loss.lowering_config =
        #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4,
                         threads = 128, splits = 8, stages = 1>, ...}
  }];
  let dependentDialects = ["::lossjit::loss::LossDialect"];
  let options = [
    Option<"target", "target", "std::string", "\"gpu\"", "gpu or cpu">,
    Option<"chip", "chip", "std::string", "\"sm_80\"",
           "GPU the defaults are chosen for (target=gpu)">,
    Option<"matmul", "matmul", "std::string", "\"\"",
           "tile-product strategy (gpu): simt, mma_sync, wgmma (sm_90a), or auto (per op: "
           "for f16/bf16 on sm_80+ except the recompute schedule wgmma's default tile on "
           "sm_90a (128 logit columns for the cross-entropy ops, but 64 for a forward "
           "with both a bias and a softcap, and there x and w by TMA, k 64, 3 stages; "
           "tma=0 keeps the cp.async ring) "
           "and mma_sync's elsewhere, else simt; what the JIT and lossjit-aot use)">,
    Option<"blockRows", "block-rows", "int64_t", "-1", "rows per block / register block">,
    Option<"threads", "threads", "int64_t", "-1", "threads per block (gpu)">,
    Option<"splits", "splits", "int64_t", "-1", "vocabulary splits of the forward (gpu)">,
    Option<"stages", "stages", "int64_t", "-1", "operand pipeline stages (gpu)">,
    Option<"blockCols", "block-cols", "int64_t", "-1",
           "columns of the register tile (cpu) / of the block tile (gpu, mma_sync)">,
    Option<"blockK", "block-k", "int64_t", "-1", "reduction step of the block tile (gpu, mma_sync)">,
    Option<"gradCols", "grad-cols", "int64_t", "-1",
           "columns of the gradient products' block tile (gpu, wgmma; 0: block-cols)">,
    Option<"tma", "tma", "int64_t", "-1",
           "1: the logit products (and with block-k 64 the gradient products) load their "
           "operands by TMA into swizzled stages (gpu, wgmma); 2: the same copies issued by "
           "a producer warp while the consumer warpgroups multiply; 3: by a producer warpgroup "
           "that lends the two consumer warpgroups its registers (setmaxnreg)">,
    Option<"persistent", "persistent", "int64_t", "-1",
           "the most blocks the gradient-side product kernels launch, each sweeping "
           "several tiles (gpu, tensor cores; 0: a block per tile)">,
    Option<"band", "band", "int64_t", "-1",
           "the KiB of A rows a band of the product kernels' tiles keeps in L2: bands of row "
           "blocks, each run column by column (gpu, tensor cores; 0: row blocks first through "
           "the grid)">,
    Option<"cluster", "cluster", "int64_t", "-1",
           "2 or 4: the products (lce_partial; lce_bwd_dz, lce_fused_z, lce_bwd_dx and "
           "lce_bwd_dw unless persistent or banded, dX and dW where each block gets whole "
           "64-column boxes) run in clusters of that many row blocks that multicast each "
           "shared tile by TMA (gpu, wgmma with tma 2 or 3; 0: no clusters)">,
    Option<"vectorRegisters", "vector-registers", "int64_t", "-1",
           "vector registers of the target CPU, holding a vector<vector-width x f32> each "
           "(cpu: 32 with AVX-512, 16 with AVX, 8 with SSE); sizes the register tile">,
    Option<"vectorWidth", "vector-width", "int64_t", "-1", "f32 lanes of a dot product (cpu)">,
    Option<"panelBlocks", "panel-blocks", "int64_t", "-1",
           "register blocks per vocabulary-sweep panel (cpu)">,
    Option<"vocabTile", "vocab-tile", "int64_t", "-1", "columns per sweep tile (cpu)">,
    Option<"reduceLanes", "reduce-lanes", "int64_t", "-1",
           "lanes of the fixed-order reduction (cpu)">,
  ];
}

#endif // LOSSJIT_COMPILER_TRANSFORMS_PASSES
