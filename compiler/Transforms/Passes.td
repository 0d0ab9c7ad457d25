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

#endif // LOSSJIT_COMPILER_TRANSFORMS_PASSES
