//===- Adjoints.h - dZ from the per-row adjoints of the statistics -*- C++ -*-===//
//
// The backward of every loss is one formula per logit (fused_loss_families
// §2.3): dz_j = Σ_k ḡ_k · ∂stat_k/∂z_j, with ḡ_k the gradient reaching row
// statistic k and the adjoint rules
//   lse          p_j                      (p = softmax(z) = exp(z − lse))
//   label_logit  [j = y]                  (one term per label of the row)
//   logit_sum    c_j                      (the column's class weight, or 1)
//   target_logit_sum  c_j t_j             (t: the row's targets)
//   cross_entropy       p_j − q_j          (q = softmax of the teacher's u)
//   reverse_cross_entropy  −p_j (log q_j + X)  (X its value)
//   teacher_lse, teacher_entropy  0        (the teacher is not differentiated)
//   entropy      −p_j (log p_j + H)
//   jsd          (1 − β) p_j (log p_j − log M_j − K)  (M = β q + (1 − β) p,
//                K = KL(p‖M), the saved mixture_kl)
//   mixture_kl   p_j (log p_j − log M_j − (1 − β) p_j / M_j − K + (1 − β) S)
//                (S = Σ p²/M, the saved mixture_p2)
//   mixture_p2   saved, not differentiated: a non-zero adjoint poisons the
//                row with NaN
// then times ∂z/∂raw. Every backward kernel (dZ into a chunk, recomputed
// tiles, both backends, every matmul strategy) reads a row's values once
// (loadRowAdjoint) and forms each element with emitRawGrad, so a new
// statistic is one rule here. The cross-entropy ops are the special case
// ḡ_lse = g + a, ḡ_label = −g, written g·(p − [j = y]) + a·p as their
// kernels always have (emitLogitGrad), which keeps their bits.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_ROWSTATS_ADJOINTS_H
#define LOSSJIT_COMPILER_KERNELS_ROWSTATS_ADJOINTS_H

#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/Support/KernelEmitter.h"
#include "compiler/Kernels/Support/KernelSignature.h"
#include "compiler/Kernels/Support/LceSpec.h"

namespace lossjit {

/// What the derived backward reads of one row (null where not read).
struct RowAdjoint {
  mlir::Value lse;
  /// The row's labels: one, or K for labels [N, K] (a top-K gather).
  llvm::SmallVector<mlir::Value> labels;
  /// Cross-entropy ops: g_r (the "grow" workspace) and the lse gradient a_r.
  mlir::Value g, lseGrad;
  /// Reductions: the adjoint of each statistic the region yields (of
  /// label_logit one per label), and the saved entropy H (read by
  /// entropy's rule).
  mlir::Value gLse, gSum, gEntropy, entropy;
  llvm::SmallVector<mlir::Value> gLabels;
  /// target_logit_sum: its adjoint, the targets and the row's first one.
  mlir::Value gTargetSum, targets, targetBase;
  /// The teacher: the cross-entropies' adjoints, the saved teacher lse and
  /// reverse cross-entropy, and what its logit at a column is made from.
  mlir::Value gCross, gReverse, teacherLse, reverseValue;
  /// jsd's and mixture_kl's adjoints, the saved K = mixture_kl and
  /// S = mixture_p2, and mixture_p2's adjoint.
  mlir::Value gJsd, gMixtureKl, mixtureKl, mixtureP2, gMixtureP2;
  mlir::Value row, teacherX, teacherW, teacherBias, teacherDim;
  /// How the teacher's logit is formed (empty: the scalar chain), or, when
  /// set, the logit itself at a column (a kernel that formed it already).
  DotProduct teacherDot;
  std::function<mlir::Value(KernelEmitter &, mlir::Value col)> teacherAt;
  /// When set, the sum of the label adjoints at a column (a kernel that
  /// scattered them already), instead of comparing it with each label.
  std::function<mlir::Value(KernelEmitter &, mlir::Value col)> labelAt;
};

/// Declares on `sig` the per-row (and per-column) buffers dZ reads:
/// labels, lse, grow, [grad_lse] for the cross-entropy ops; [labels],
/// [lse], [entropy], grad_<statistic> per statistic and [class_weights]
/// for a reduction ([targets] too; its kernels declare V).
void declareAdjointInputs(KernelSignature &sig, const LceSpec &spec, mlir::Type real);

/// The values of `row` (a kernel with declareAdjointInputs' arguments);
/// without `labels`, not its labels and their adjoints (the caller sets
/// labelAt).
RowAdjoint loadRowAdjoint(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a,
                          mlir::Value row, bool labels = true);

/// Whether the row's gradient can be nonzero (some adjoint is not 0): a
/// kernel may skip the products of a row where it is false.
mlir::Value emitRowActive(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row);

/// The f32 class weight of column `col` when dZ reads one, else null.
mlir::Value loadColumnWeight(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a,
                             mlir::Value col);

/// ∂L/∂raw at (row, col) from the raw logit x·w (+ b) there; `colWeight`
/// from loadColumnWeight.
mlir::Value emitRawGrad(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row,
                        mlir::Value raw, mlir::Value col, mlir::Value colWeight);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_ROWSTATS_ADJOINTS_H
