//===- LossOps.td - ops of the `loss` dialect --------------*- tablegen -*-===//

#ifndef LOSSJIT_LOSS_OPS
#define LOSSJIT_LOSS_OPS

include "dialects/Loss/LossDialect.td"
include "dialects/Loss/LoweringConfig.td"
include "dialects/Loss/FusedOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

/// Storage element types: the only ones a tensor may hold in the loss graph.
def Loss_StorageFloat : AnyTypeOf<[F16, BF16, F32, F64], "f16, bf16, f32 or f64">;
def Loss_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;
/// Row values and logits in the compute type: f32, or f64 for f64 storage.
def Loss_ComputeTensor : RankedTensorOf<[F32, F64]>;
def Loss_LabelTensor : RankedTensorOf<[I32, I64]>;

def Loss_LinearOp : Loss_Op<"linear", [Pure]> {
  let summary = "y = x · wᵀ (+ b): [N,D] × [V,D] (+ [V]) → [N,V]";
  let description = [{
    A linear layer as `torch.nn.functional.linear`: the result keeps the
    storage element type of `input` (like PyTorch), accumulation precision
    is decided when the op is lowered (always f32 here).
  }];
  let arguments = (ins Loss_FloatTensor:$input, Loss_FloatTensor:$weight,
                       Optional<Loss_FloatTensor>:$bias);
  let results = (outs Loss_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,` type($weight)
    (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loss_CastOp : Loss_Op<"cast", [Pure]> {
  let summary = "explicit element-type change (the only op that changes one)";
  let arguments = (ins Loss_FloatTensor:$input);
  let results = (outs Loss_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Loss_ScaleOp : Loss_Op<"scale", [Pure]> {
  let summary = "element-wise z · factor of the logits (temperature, muP scaling)";
  let description = [{
    Multiplies every element by the constant `factor` (finite, nonzero). On
    the softmax path it computes in f32 like `loss.log_softmax`: the
    precision pass widens a 16-bit operand first.
  }];
  let arguments = (ins Loss_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Loss_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Loss_SoftcapOp : Loss_Op<"softcap", [Pure]> {
  let summary = "element-wise tanh soft-capping cap · tanh(z / cap) of the logits";
  let description = [{
    Squashes every element smoothly into (−cap, cap) (Gemma-style logit
    soft-capping); `cap` is positive and finite. Computes in f32 like
    `loss.log_softmax`.
  }];
  let arguments = (ins Loss_FloatTensor:$input, F64Attr:$cap);
  let results = (outs Loss_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Loss_LogSoftmaxOp : Loss_Op<"log_softmax", [Pure]> {
  let summary = "log-softmax over the last axis";
  let arguments = (ins Loss_FloatTensor:$input);
  let results = (outs Loss_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Loss_LogSumExpOp : Loss_Op<"logsumexp", [Pure]> {
  let summary = "log Σ exp over the last axis: [..., V] → [...]";
  let arguments = (ins Loss_FloatTensor:$input);
  let results = (outs Loss_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Loss_NllOp : Loss_Op<"nll", [Pure]> {
  let summary = "negative log-likelihood of log-probabilities [N,V] at labels [N]";
  let description = [{
    Rows whose label equals `ignore_index` contribute 0 and are not counted.
    `reduction = none` gives a [N] f32 tensor; `mean` and `sum` a 0-d f32
    tensor (`mean` over zero counted rows is NaN, like PyTorch).
  }];
  let arguments = (ins Loss_FloatTensor:$logp, Loss_LabelTensor:$labels,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Loss_ReductionAttr,
                           "::lossjit::loss::Reduction::mean">:$reduction);
  let results = (outs Loss_ComputeTensor:$result);
  let assemblyFormat = [{
    $logp `,` $labels attr-dict `:` type($logp) `,` type($labels) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loss_CrossEntropyOp : Loss_Op<"cross_entropy", [Pure]> {
  let summary = "cross-entropy of logits [N,V] at labels [N] (sugar)";
  let description = [{
    Canonicalizes into `loss.log_softmax` + `loss.nll` with the same options.
  }];
  let arguments = (ins Loss_FloatTensor:$logits, Loss_LabelTensor:$labels,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Loss_ReductionAttr,
                           "::lossjit::loss::Reduction::mean">:$reduction);
  let results = (outs Loss_ComputeTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Loss_LinearCrossEntropyOp : Loss_Op<"linear_cross_entropy", [Pure,
    DeclareOpInterfaceMethods<Loss_FusedOpInterface, ["getKernelPass", "getGradientStrategy"]>]> {
  let summary = "fused linear → log-softmax → NLL without materialized logits";
  let description = [{
    `loss`, `lse` = CE(z, labels) with the logits
    z = softcap(logit_scale · (x · wᵀ (+ b))), where softcap(u) =
    c · tanh(u / c) for `softcap` = c > 0 and the identity for c = 0 (the
    default; `logit_scale` defaults to 1). Tensors are stored in `storage`
    (f16, bf16, f32 or f64); every product, exp, log, max and sum runs in
    `compute` (f32; f64 for f64 storage). `lse` is the per-row log-sum-exp
    in `compute`, kept for the backward pass.
  }];
  let arguments = (ins Loss_FloatTensor:$input, Loss_FloatTensor:$weight,
                       Loss_LabelTensor:$labels, Optional<Loss_FloatTensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Loss_ReductionAttr,
                           "::lossjit::loss::Reduction::mean">:$reduction,
                       TypeAttr:$storage, TypeAttr:$compute,
                       DefaultValuedAttr<F64Attr, "1.0">:$logit_scale,
                       DefaultValuedAttr<F64Attr, "0.0">:$softcap);
  let results = (outs Loss_ComputeTensor:$loss, Loss_ComputeTensor:$lse);
  let assemblyFormat = [{
    $input `,` $weight `,` $labels (`,` $bias^)? attr-dict `:` type($input) `,`
    type($weight) `,` type($labels) (`,` type($bias)^)? `->` type($loss) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def Loss_LinearCrossEntropyGradOp : Loss_Op<"linear_cross_entropy_grad",
    [Pure, AttrSizedOperandSegments,
     DeclareOpInterfaceMethods<Loss_FusedOpInterface, ["getKernelPass", "getGradientStrategy"]>]> {
  let summary = "gradients of the fused loss without materialized [N,V] logits";
  let description = [{
    Given the forward's per-row `lse` and the loss gradient `grad_loss`
    (0-d for mean/sum, [N] for none), computes
    dZ = g_row · (softmax(z) − onehot(label)) · ∂z/∂raw tile by tile, where
    z = softcap(logit_scale · raw) and raw = x · wᵀ (+ b) exactly as in the
    forward op (so the bias gradient uses the same ∂loss/∂raw), and returns, in
    this order, `grad_input` (if `needs_input`), `grad_weight` (if
    `needs_weight`) and `grad_bias` (if a bias is given and `needs_weight`),
    each in the storage type, accumulated in f32 and rounded once.
    With `grad_lse` ([N] f32, the gradient reaching the returned lse, e.g.
    from a z-loss), dZ gains a_row · softmax(z) · ∂z/∂raw: lse is
    differentiable like the loss (∂lse/∂z = softmax(z)).
    `strategy` picks the schedule: "chunked" keeps a bounded [C,V] dZ
    workspace of row chunks (6·N·D·V flops, an f32 V×D dW accumulator for
    16-bit storage), "vocab_chunked" a bounded [N,C] dZ workspace of
    vocabulary chunks (6·N·D·V, each dW row formed once over all rows: for
    16-bit storage an f32 N×D dX accumulator instead), "recompute" recomputes logit tiles
    (8·N·D·V, O(D) extra memory per thread), "auto" lets the lowering choose
    within `workspace_bytes`.
  }];
  let arguments = (ins Loss_FloatTensor:$input, Loss_FloatTensor:$weight,
                       Loss_LabelTensor:$labels, Optional<Loss_FloatTensor>:$bias,
                       Loss_ComputeTensor:$lse, Loss_ComputeTensor:$grad_loss,
                       Optional<Loss_ComputeTensor>:$grad_lse,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Loss_ReductionAttr,
                           "::lossjit::loss::Reduction::mean">:$reduction,
                       TypeAttr:$storage, TypeAttr:$compute,
                       DefaultValuedAttr<StrAttr, "\"auto\"">:$strategy,
                       DefaultValuedAttr<BoolAttr, "true">:$needs_input,
                       DefaultValuedAttr<BoolAttr, "true">:$needs_weight,
                       DefaultValuedAttr<I64Attr, "67108864">:$workspace_bytes,
                       DefaultValuedAttr<F64Attr, "1.0">:$logit_scale,
                       DefaultValuedAttr<F64Attr, "0.0">:$softcap);
  let results = (outs Variadic<Loss_FloatTensor>:$gradients);
  // The optional bias comes last, behind a keyword, so it can never be
  // mistaken for lse.
  let assemblyFormat = [{
    $input `,` $weight `,` $labels `,` $lse `,` $grad_loss (`bias` $bias^)?
    (`grad_lse` $grad_lse^ `:` type($grad_lse))? attr-dict `:`
    type($input) `,` type($weight) `,` type($labels) `,` type($lse) `,`
    type($grad_loss) (`,` type($bias)^)? `->` type($gradients)
  }];
  let hasVerifier = 1;
}

def Loss_LinearCrossEntropyWithGradOp : Loss_Op<"linear_cross_entropy_with_grad", [Pure,
    DeclareOpInterfaceMethods<Loss_FusedOpInterface, ["getKernelPass", "getGradientStrategy"]>]> {
  let summary = "fused loss and its gradients for grad_loss = 1, in one pass";
  let description = [{
    Returns `loss` (0-d), `lse` ([N]) and, as `loss.linear_cross_entropy_grad`
    would for a loss gradient of 1: `grad_input` (if `needs_input`),
    `grad_weight` (if `needs_weight`), `grad_bias` (with a bias and
    `needs_weight`). The logits are computed once per row chunk (6·N·D·V
    flops in all) in a workspace bounded by `workspace_bytes`. Only for
    `mean` and `sum`, whose gradient is a scalar multiple of these: the
    caller rescales them by the real grad_loss later. (With `none`, every
    row has its own factor and dW cannot be rescaled after the fact.)
    `strategy` picks the schedule: "chunked" the row chunks above (for
    16-bit storage with an f32 V×D dW accumulator), "vocab_chunked" the
    forward's statistics first (lse of every row: 2·N·D·V more flops),
    then the backward in vocabulary chunks (each dW row formed once over
    all rows: no V×D accumulator), "auto" lets the lowering choose.
  }];
  let arguments = (ins Loss_FloatTensor:$input, Loss_FloatTensor:$weight,
                       Loss_LabelTensor:$labels, Optional<Loss_FloatTensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Loss_ReductionAttr,
                           "::lossjit::loss::Reduction::mean">:$reduction,
                       TypeAttr:$storage, TypeAttr:$compute,
                       DefaultValuedAttr<StrAttr, "\"auto\"">:$strategy,
                       DefaultValuedAttr<BoolAttr, "true">:$needs_input,
                       DefaultValuedAttr<BoolAttr, "true">:$needs_weight,
                       DefaultValuedAttr<I64Attr, "67108864">:$workspace_bytes,
                       DefaultValuedAttr<F64Attr, "1.0">:$logit_scale,
                       DefaultValuedAttr<F64Attr, "0.0">:$softcap);
  let results = (outs Loss_ComputeTensor:$loss, Loss_ComputeTensor:$lse,
                      Variadic<Loss_FloatTensor>:$gradients);
  let assemblyFormat = [{
    $input `,` $weight `,` $labels (`,` $bias^)? attr-dict `:` type($input) `,`
    type($weight) `,` type($labels) (`,` type($bias)^)? `->` type($loss) `,`
    type($lse) (`,` type($gradients)^)?
  }];
  let hasVerifier = 1;
}

include "dialects/Loss/VocabReduceOps.td"

#endif // LOSSJIT_LOSS_OPS
