//===- VocabReduceOps.td - per-row statistics over the vocabulary -*- tablegen -*-===//
//
// The general form of a fused loss head (research: fused_loss_families §2):
// a logit stream z = maps(x · wᵀ + b) over the vocabulary, reduced per row
// into statistics of a closed set of kinds. Everything [N]-shaped after the
// statistics (masks, normalizers, per-sequence sums, pairing) is the
// caller's: in Python it stays torch, whose autograd hands the backward one
// adjoint per statistic. The backward is derived from the statistics'
// adjoints — no loss has a gradient kernel of its own.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_LOSS_VOCABREDUCEOPS
#define LOSSJIT_LOSS_VOCABREDUCEOPS

include "dialects/Loss/FusedOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Loss_StatLse : I32EnumAttrCase<"lse", 0>;
def Loss_StatLabelLogit : I32EnumAttrCase<"label_logit", 1>;
def Loss_StatLogitSum : I32EnumAttrCase<"logit_sum", 2>;
def Loss_StatEntropy : I32EnumAttrCase<"entropy", 3>;
def Loss_StatTargetLogitSum : I32EnumAttrCase<"target_logit_sum", 4>;
def Loss_StatTeacherLse : I32EnumAttrCase<"teacher_lse", 5>;
def Loss_StatTeacherEntropy : I32EnumAttrCase<"teacher_entropy", 6>;
def Loss_StatCrossEntropy : I32EnumAttrCase<"cross_entropy", 7>;
def Loss_StatReverseCrossEntropy : I32EnumAttrCase<"reverse_cross_entropy", 8>;
def Loss_StatJsd : I32EnumAttrCase<"jsd", 9>;
def Loss_StatMixtureKl : I32EnumAttrCase<"mixture_kl", 10>;
def Loss_StatMixtureP2 : I32EnumAttrCase<"mixture_p2", 11>;
def Loss_Statistic : I32EnumAttr<"Statistic",
    "a per-row statistic of the logits over the vocabulary",
    [Loss_StatLse, Loss_StatLabelLogit, Loss_StatLogitSum, Loss_StatEntropy,
     Loss_StatTargetLogitSum, Loss_StatTeacherLse, Loss_StatTeacherEntropy,
     Loss_StatCrossEntropy, Loss_StatReverseCrossEntropy, Loss_StatJsd,
     Loss_StatMixtureKl, Loss_StatMixtureP2]> {
  let cppNamespace = "::lossjit::loss";
  let genSpecializedAttr = 0;
}
def Loss_StatisticAttr : EnumAttr<Loss_Dialect, Loss_Statistic, "statistic"> {
  let assemblyFormat = "``$value";
}

def Loss_StatOp : Loss_Op<"stat", [Pure,
    ParentOneOf<["VocabReduceOp", "VocabReduceGradOp"]>]> {
  let summary = "one per-row statistic of the region's logit stream";
  let description = [{
    With z the logits of a row (after the maps), p = softmax(z), c the class
    weights (1 without them) and y the row's label:
      - `lse`: log Σ_j exp(z_j); its adjoint is p_j.
      - `label_logit`: z_y; 0 for a row whose label is `ignore_index`, NaN for
        a label outside [0, V); its adjoint is [j = y].
      - `logit_sum`: Σ_j c_j z_j (label smoothing's sum); its adjoint is c_j.
      - `entropy`: −Σ_j p_j log p_j; its adjoint is −p_j (log p_j + H).
      - `target_logit_sum`: Σ_j c_j t_j z_j with the row's targets t (a dense
        [N, V] operand: class probabilities); its adjoint is c_j t_j.
    With a teacher stream u (the region's second argument; q = softmax(u),
    never differentiated):
      - `teacher_lse` (of u) and `teacher_entropy` (−Σ q log q): adjoint 0.
      - `cross_entropy` of (u, z): −Σ_j q_j log p_j, whose adjoint is p_j − q_j
        (forward KL(q‖p) = cross_entropy − teacher_entropy).
      - `reverse_cross_entropy` of (z, u): −Σ_j p_j log q_j, whose adjoint is
        −p_j (log q_j + X), X its value (reverse KL(p‖q) = it − entropy).
    With the mixture M = β·q + (1 − β)·p (β the op's `jsd_beta`, 0 < β < 1),
    two dependent sums, which read the finished lse of both streams and so
    take a second sweep over the vocabulary (the lowering adds it):
      - `jsd` of (z, u): β·KL(q‖M) + (1 − β)·KL(p‖M)
        = Σ_j [β q_j log q_j + (1 − β) p_j log p_j − M_j log M_j] (the
        generalized Jensen-Shannon divergence of TRL's GKD and Liger); its
        adjoint is (1 − β)·p_j (log(p_j / M_j) − K), K = KL(p‖M).
      - `mixture_kl` of (z, u): K = Σ_j p_j log(p_j / M_j) (jsd's adjoint
        reads it); its adjoint is
        p_j (log(p_j / M_j) − (1 − β) p_j / M_j − K + (1 − β) S).
      - `mixture_p2` of (z, u): S = Σ_j p_j² / M_j, the row value
        mixture_kl's adjoint reads. It is saved, not differentiated (its
        own gradient would need Σ p³/M², and so on): a non-zero adjoint of
        it makes the row's gradient NaN rather than silently wrong.
    Sums are carried in a fixed order with compensation, so their error does
    not grow with V.
  }];
  let arguments = (ins Loss_StatisticAttr:$kind, Variadic<Loss_ComputeTensor>:$logits);
  let results = (outs Loss_ComputeTensor:$result);
  let assemblyFormat = "$kind $logits attr-dict `:` type($logits) `->` type($result)";
  let hasVerifier = 1;
}

def Loss_YieldOp : Loss_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["VocabReduceOp", "VocabReduceGradOp"]>]> {
  let summary = "the statistics a vocabulary reduction returns, in result order";
  let arguments = (ins Variadic<Loss_ComputeTensor>:$statistics);
  let assemblyFormat = "attr-dict ($statistics^ `:` type($statistics))?";
}

class Loss_VocabReduceBase<string mnemonic, list<Trait> traits = []>
    : Loss_Op<mnemonic, !listconcat(traits, [RecursiveMemoryEffects, SingleBlock,
                                             AttrSizedOperandSegments,
                                             DeclareOpInterfaceMethods<Loss_FusedOpInterface,
                                                 ["getKernelPass", "getGradientStrategy"]>])> {
  let regions = (region SizedRegion<1>:$body);
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  code commonDeclarations = [{
    /// The logit stream the region reduces (its first block argument).
    ::mlir::BlockArgument getLogits() { return getBody().front().getArgument(0); }
    /// Whether the op has a teacher stream (its region's second argument).
    bool hasTeacher() { return static_cast<bool>(getTeacherInput()); }
    /// The statistics the region yields, in result order.
    ::llvm::SmallVector<::lossjit::loss::Statistic> getStatisticKinds();
    /// Whether the region yields `kind`; its position in the results if so.
    std::optional<unsigned> findStatistic(::lossjit::loss::Statistic kind);
  }];
}

def Loss_VocabReduceOp : Loss_VocabReduceBase<"vocab_reduce"> {
  let summary = "per-row statistics of z = maps(x · wᵀ + b) without materialized logits";
  let description = [{
    The region's block argument stands for the logits [N, V] in `compute`,
    z = softcap(logit_scale · (x · wᵀ + b)) (softcap 0: none), computed tile
    by tile from `input` [N, D] and `weight` [V, D] stored in `storage`
    (every product, exp, log and sum in `compute`: f32, or f64 for f64
    storage) and never stored. The region holds `loss.stat` ops on it and
    yields their [N] results (of `compute`),
    one op result each. `labels` [N] are read by `label_logit` (rows equal
    to `ignore_index` give 0), `class_weights` [V] (f32) by `logit_sum` and
    `target_logit_sum`, `targets` [N, V] (f32 or the storage type: class
    probabilities) by `target_logit_sum`. A teacher (`teacher_input`
    [N, D'] with `teacher_weight` [V, D'] and an optional `teacher_bias`, in
    the storage type) adds a second stream u = teacher_scale · (x'·w'ᵀ + b'),
    the region's second argument, which the teacher statistics read; it is
    never differentiated. `jsd_beta` is the mixture weight of `jsd`,
    `mixture_kl` and `mixture_p2` (0 < β < 1; the default 0.5 when none is
    yielded).

    ```mlir
    %lse, %zy, %zs = loss.vocab_reduce %x, %w labels %y : tensor<?xi64>
        {storage = f16, compute = f32}
        : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
    ^bb0(%z: tensor<?x?xf32>):
      %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
      %1 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
      %2 = loss.stat logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
      loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
    }
    ```

    `loss.linear_cross_entropy` is the special case {lse, label_logit}
    followed by the row rule and the reduction: both lower to the same
    schedules and statistic kinds.
  }];
  let arguments = (ins Loss_FloatTensor:$input, Loss_FloatTensor:$weight,
                       Optional<Loss_FloatTensor>:$bias, Optional<Loss_LabelTensor>:$labels,
                       Optional<Loss_ComputeTensor>:$class_weights,
                       Optional<Loss_FloatTensor>:$targets,
                       Optional<Loss_FloatTensor>:$teacher_input,
                       Optional<Loss_FloatTensor>:$teacher_weight,
                       Optional<Loss_FloatTensor>:$teacher_bias,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       TypeAttr:$storage, TypeAttr:$compute,
                       DefaultValuedAttr<F64Attr, "1.0">:$logit_scale,
                       DefaultValuedAttr<F64Attr, "0.0">:$softcap,
                       DefaultValuedAttr<F64Attr, "1.0">:$teacher_scale,
                       DefaultValuedAttr<F64Attr, "0.5">:$jsd_beta);
  let results = (outs Variadic<Loss_ComputeTensor>:$statistics);
  let assemblyFormat = [{
    $input `,` $weight (`bias` $bias^ `:` type($bias))? (`labels` $labels^ `:` type($labels))?
    (`class_weights` $class_weights^ `:` type($class_weights))?
    (`targets` $targets^ `:` type($targets))?
    (`teacher` `(` $teacher_input^ `,` $teacher_weight (`bias` $teacher_bias^)? `:`
      type($teacher_input) `,` type($teacher_weight) (`,` type($teacher_bias)^)? `)`)? attr-dict `:`
    type($input) `,` type($weight) `->` type($statistics) $body
  }];
  let extraClassDeclaration = commonDeclarations;
}

def Loss_VocabReduceGradOp : Loss_VocabReduceBase<"vocab_reduce_grad"> {
  let summary = "gradients of a vocabulary reduction from per-row adjoints (derived)";
  let description = [{
    The backward of the `loss.vocab_reduce` with the same operands, options
    and region. `saved` are that op's results (the statistics, one per
    yielded value) and `adjoints` the gradient reaching each ([N] f32, in
    the same order). Per logit tile the logits are recomputed and
      dz_j = Σ_k adjoint_k · ∂stat_k/∂z_j
    formed from the statistics' adjoint rules (see `loss.stat`) and the
    saved row values, then multiplied by ∂z/∂raw, and
    returns, in this order, `grad_input` (if `needs_input`), `grad_weight` (if
    `needs_weight`) and `grad_bias` (with a bias and `needs_weight`), each in
    the storage type, accumulated in f32 and rounded once. The region must
    yield `lse` when it yields `entropy` (that adjoint reads it), `lse`,
    `teacher_lse` and `mixture_kl` when it yields `jsd`, and `lse`,
    `teacher_lse` and `mixture_p2` when it yields `mixture_kl`.
    `strategy` and `workspace_bytes` as for `loss.linear_cross_entropy_grad`.
  }];
  let arguments = (ins Loss_FloatTensor:$input, Loss_FloatTensor:$weight,
                       Optional<Loss_FloatTensor>:$bias, Optional<Loss_LabelTensor>:$labels,
                       Optional<Loss_ComputeTensor>:$class_weights,
                       Optional<Loss_FloatTensor>:$targets,
                       Optional<Loss_FloatTensor>:$teacher_input,
                       Optional<Loss_FloatTensor>:$teacher_weight,
                       Optional<Loss_FloatTensor>:$teacher_bias,
                       Variadic<Loss_ComputeTensor>:$saved, Variadic<Loss_ComputeTensor>:$adjoints,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       TypeAttr:$storage, TypeAttr:$compute,
                       DefaultValuedAttr<F64Attr, "1.0">:$logit_scale,
                       DefaultValuedAttr<F64Attr, "0.0">:$softcap,
                       DefaultValuedAttr<F64Attr, "1.0">:$teacher_scale,
                       DefaultValuedAttr<F64Attr, "0.5">:$jsd_beta,
                       DefaultValuedAttr<StrAttr, "\"auto\"">:$strategy,
                       DefaultValuedAttr<BoolAttr, "true">:$needs_input,
                       DefaultValuedAttr<BoolAttr, "true">:$needs_weight,
                       DefaultValuedAttr<I64Attr, "67108864">:$workspace_bytes);
  let results = (outs Variadic<Loss_FloatTensor>:$gradients);
  let assemblyFormat = [{
    $input `,` $weight (`bias` $bias^ `:` type($bias))? (`labels` $labels^ `:` type($labels))?
    (`class_weights` $class_weights^ `:` type($class_weights))?
    (`targets` $targets^ `:` type($targets))?
    (`teacher` `(` $teacher_input^ `,` $teacher_weight (`bias` $teacher_bias^)? `:`
      type($teacher_input) `,` type($teacher_weight) (`,` type($teacher_bias)^)? `)`)?
    `saved` `(` $saved `:` type($saved) `)` `adjoints` `(` $adjoints `:` type($adjoints) `)`
    attr-dict `:` type($input) `,` type($weight) `->` type($gradients) $body
  }];
  let extraClassDeclaration = commonDeclarations;
}

#endif // LOSSJIT_LOSS_VOCABREDUCEOPS
