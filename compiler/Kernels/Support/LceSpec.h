//===- LceSpec.h - what a linear-cross-entropy kernel is specialized on -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LCESPEC_H
#define LOSSJIT_COMPILER_KERNELS_LCESPEC_H

#include "compiler/Kernels/Support/LaunchPlan.h"
#include "dialects/Loss/LossOps.h"

#include <vector>

namespace lossjit {

/// The compile-time facts of one fused-op variant. Shapes (N, V, D) are not
/// here: kernels read them at run time.
struct LceSpec {
  mlir::Type storage;   ///< f16, bf16, f32 or f64 element type of x, w, b.
  /// The arithmetic's type: f32, or f64 for f64 storage (the op's
  /// `compute`). Row outputs, saved statistics, adjoints and workspaces
  /// are of this type.
  mlir::Type compute;
  mlir::Type labelType; ///< i32 or i64.
  bool hasBias = false;
  int64_t ignoreIndex = -100;
  loss::Reduction reduction = loss::Reduction::mean;
  /// Logit transforms: z = softcap(logitScale · raw), raw = x·w (+ b);
  /// softcap = 0 means none (see emitLogit).
  double logitScale = 1.0;
  double softcap = 0.0;

  /// Backward only: which gradients, which schedule, how much scratch.
  bool gradient = false;
  /// Fused forward+backward: loss, lse and the gradients of grad_loss = 1
  /// in one chunked pass (the caller rescales them by the real grad_loss).
  bool fusedForward = false;
  bool needsGradX = true;
  bool needsGradW = true;
  /// Backward: a per-row gradient of lse is given ("grad_lse", [N] f32):
  /// dZ = (g·(p − onehot) + a·p) · ∂z/∂raw (emitLogitGrad).
  bool hasGradLse = false;
  /// "chunked", "vocab_chunked" (with vocabChunks, the backward) or
  /// "recompute" (resolved).
  std::string strategy = "chunked";

  /// A vocabulary reduction (loss.vocab_reduce / _grad): the statistics it
  /// yields, in result order. Empty for the cross-entropy ops, which are
  /// the statistics {lse, label_logit} followed by the row rule and the
  /// reduction (their kernels write a loss, not the statistics).
  std::vector<loss::Statistic> statistics;
  /// Labels are an operand (always for the cross-entropy ops; for a
  /// reduction, when label_logit reads them).
  bool hasLabels = true;
  /// Class weights c [V] (f32), read by logit_sum: Σ_j c_j z_j.
  bool hasClassWeights = false;
  /// Class-probability targets t [N, V] (f32 or the storage type), read by
  /// target_logit_sum: Σ_j c_j t_j z_j. Null without.
  mlir::Type targetsType;
  bool hasTargets() const { return static_cast<bool>(targetsType); }
  /// A teacher stream u = teacherScale · (x'·w'ᵀ + b') (x' [N, T], w' [V, T];
  /// T is a runtime dim), read by the teacher statistics; never differentiated.
  bool hasTeacher = false;
  bool hasTeacherBias = false;
  double teacherScale = 1.0;
  /// β of the mixture M = β·q + (1 − β)·p of jsd and mixture_kl.
  double jsdBeta = 0.5;
  /// K labels per row (labels [N, K], label_logit [N, K]: a top-K gather);
  /// 0 for labels [N].
  int64_t labelsPerRow = 0;
  /// Labels (and label logits) per row: K, or 1 for labels [N].
  int64_t labelCount() const { return labelsPerRow > 0 ? labelsPerRow : 1; }
  /// Chunked schedules: chunks cut the vocabulary instead of the rows (host
  /// only): no V×D f32 dW accumulator, an N×D f32 dX one instead.
  bool vocabChunks = false;
  int64_t workspaceBytes = 64ll << 20;

  static LceSpec fromOp(loss::LinearCrossEntropyOp op);
  static LceSpec fromOp(loss::LinearCrossEntropyGradOp op);
  static LceSpec fromOp(loss::LinearCrossEntropyWithGradOp op);
  static LceSpec fromOp(loss::VocabReduceOp op);
  static LceSpec fromOp(loss::VocabReduceGradOp op);

  bool isVocabReduce() const { return !statistics.empty(); }
  /// The kernels read class weights (a reduction's logit_sum weights).
  bool readsClassWeights() const { return isVocabReduce() && hasClassWeights; }
  bool hasStatistic(loss::Statistic kind) const;
  /// The backward of a reduction reads lse (the softmax p is in some
  /// adjoint: lse's or entropy's).
  bool gradientReadsLse() const {
    return hasStatistic(loss::Statistic::lse) || hasStatistic(loss::Statistic::entropy) ||
           gradientReadsTeacher();
  }
  /// The backward of a reduction reads the teacher (a cross-entropy's
  /// adjoint has the teacher's softmax q in it).
  bool gradientReadsTeacher() const {
    return hasStatistic(loss::Statistic::cross_entropy) ||
           hasStatistic(loss::Statistic::reverse_cross_entropy) ||
           hasStatistic(loss::Statistic::jsd) || hasStatistic(loss::Statistic::mixture_kl);
  }
  /// The backward of a reduction reads the saved statistic `kind` (an
  /// adjoint rule has it in: lse, entropy, teacher_lse, reverse
  /// cross-entropy, mixture_kl, mixture_p2), so its plan and entry take it
  /// by name.
  bool gradientReadsSaved(loss::Statistic kind) const {
    switch (kind) {
    case loss::Statistic::lse:
      return gradientReadsLse();
    case loss::Statistic::teacher_lse:
      return gradientReadsTeacher();
    case loss::Statistic::mixture_kl:
      return hasStatistic(loss::Statistic::jsd) || hasStatistic(kind);
    case loss::Statistic::mixture_p2:
      return hasStatistic(loss::Statistic::mixture_kl);
    case loss::Statistic::entropy:
    case loss::Statistic::reverse_cross_entropy:
      return hasStatistic(kind);
    default:
      return false;
    }
  }
  /// The reduction yields a dependent sum of the mixture (jsd, mixture_kl):
  /// the forward sweeps the vocabulary a second time with both streams'
  /// finished lse.
  bool hasMixtureStatistics() const {
    return hasStatistic(loss::Statistic::jsd) || hasStatistic(loss::Statistic::mixture_kl) ||
           hasStatistic(loss::Statistic::mixture_p2);
  }
  /// The runtime dims: N, V, D, and T (the teacher's hidden size) with a teacher.
  std::vector<std::string> dims() const;

  /// Storage is the compute type: gradients accumulate in place, x is read
  /// without widening.
  bool storesCompute() const { return storage == compute; }
  /// The compute type as plans spell it ("f32" or "f64").
  std::string computeName() const { return loss::storageTypeName(compute).str(); }
  /// Bytes per compute element (4 or 8).
  int64_t computeBytes() const { return compute.getIntOrFloatBitWidth() / 8; }
  bool needsGradBias() const { return gradient && hasBias && needsGradW; }
  bool hasLogitTransform() const { return logitScale != 1.0 || softcap != 0.0; }

  /// The op's buffers in calling order: x, w, labels, [bias], then loss, lse
  /// (forward) or lse, grad_loss, [grad_lse], [grad_x], [grad_w], [grad_bias]
  /// (backward). A reduction: x, w, [labels], [bias], [class_weights], then
  /// one [N] f32 output per statistic, named after it (forward), or the
  /// saved lse and entropy it reads, grad_<statistic> per statistic,
  /// [grad_x], [grad_w], [grad_bias] (backward).
  std::vector<PlanParam> planParams() const;
  /// dtype, label_type, bias, ignore_index, reduction as manifest strings
  /// (plus logit_scale and softcap, each only when not the default, in
  /// loss::formatF64's spelling).
  std::map<std::string, std::string> planOptions() const;
  /// Name of the buffer holding per-row losses: the `loss` output itself for
  /// reduction = none, else a workspace the reduction kernel reads.
  llvm::StringRef rowLossBuffer() const {
    return reduction == loss::Reduction::none ? "loss" : "loss_rows";
  }
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LCESPEC_H
