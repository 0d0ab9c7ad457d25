//===- RowRules.h - what happens to a row because of its label --*- C++ -*-===//
//
// The rules every loss kernel applies per row, written once:
//   - a row whose label is ignore_index is not counted: its loss and its
//     gradient factor are 0;
//   - a label outside [0, V) gives NaN (never an out-of-bounds read), as
//     PyTorch's own op does not silently drop it either;
//   - the gradient factor g_r: grad_loss[r] (reduction none) or the shared
//     grad_loss[0] / counted rows (mean) / grad_loss[0] (sum).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_ROWSTATS_ROWRULES_H
#define LOSSJIT_COMPILER_KERNELS_ROWSTATS_ROWRULES_H

#include "compiler/Kernels/RowStats/RowStats.h"
#include "compiler/Kernels/Support/KernelEmitter.h"
#include "compiler/Kernels/Support/KernelSignature.h"
#include "compiler/Kernels/Support/LceSpec.h"

namespace lossjit {

/// i32 1 when the row with `label` counts toward the mean, else 0.
mlir::Value emitCountedI32(KernelEmitter &e, const LceSpec &spec, mlir::Value label);

/// 0 for an ignored row, NaN for a label outside [0, v), else `value(e)`.
/// With `lazy` the value is emitted inside the counted, in-range branch
/// only (it may read at the label); without, it is computed for every row
/// and selected.
mlir::Value emitRowRule(KernelEmitter &e, const LceSpec &spec, mlir::Value label, mlir::Value v,
                        const std::function<mlir::Value(KernelEmitter &)> &value, bool lazy);

/// The factor shared by all rows: grad_loss[0] / count for mean,
/// grad_loss[0] for sum (1 in place of grad_loss[0] when `gradLoss` is null);
/// null for none (each row has its own).
mlir::Value emitGradScale(KernelEmitter &e, const LceSpec &spec, mlir::Value gradLoss,
                          mlir::Value countI32);

/// g_r under the row rule: grad_loss[r] (none) or `scale`.
mlir::Value emitRowFactor(KernelEmitter &e, const LceSpec &spec, mlir::Value labels,
                          mlir::Value gradLoss, mlir::Value scale, mlir::Value row, mlir::Value v);

/// The cross-entropy row loss lse − z_target under the row rule, where
/// `targetRaw(e)` gives the raw logit at the label (called only for a
/// counted row with its label in range).
mlir::Value emitRowLoss(KernelEmitter &e, const LceSpec &spec, mlir::Value label, mlir::Value v,
                        mlir::Value lse,
                        const std::function<mlir::Value(KernelEmitter &)> &targetRaw);

/// (sum, compensation, count): Σ lossRows[r] as a compensated f32 sum and
/// the number of counted rows over r = first, first+step, … < n, in that
/// order (one lane of the fixed-order reduction). The compensation keeps
/// the mean of 2^20 rows as accurate as that of 8: a plain f32 lane sum's
/// error grows with the rows it adds.
llvm::SmallVector<mlir::Value> emitLaneLossAndCount(KernelEmitter &e, const LceSpec &spec,
                                                    mlir::Value labels, mlir::Value lossRows,
                                                    mlir::Value first, mlir::Value n,
                                                    mlir::Value step);

/// Merges lane `src`'s (sum, compensation, count) into lane `dst`'s, in
/// the buffers.
void emitMergeLossAndCount(KernelEmitter &e, mlir::Value sums, mlir::Value comps,
                           mlir::Value counts, mlir::Value dst, mlir::Value src);

/// The reduced loss from a compensated total (sum + compensation, or the
/// sum alone once it is inf or NaN): total / count (mean, NaN when nothing
/// counted) or total.
mlir::Value emitReducedLoss(KernelEmitter &e, const LceSpec &spec, mlir::Value sum,
                            mlir::Value comp, mlir::Value countI32);

/// Declares the buffers the forward's per-row outputs go to: lse and the
/// row losses (named rowLossBuffer() in the plan) for the cross-entropy
/// ops, one [N] buffer per statistic (named after it) for a reduction.
void declareRowOutputs(KernelSignature &sig, const LceSpec &spec, mlir::Type real);

/// Declares the per-row and per-column inputs the forward reads besides x,
/// w and the bias: the labels (when the op has them) and a reduction's
/// class weights and targets.
void declareRowInputs(KernelSignature &sig, const LceSpec &spec);

/// Declares the teacher's buffers and its hidden size T (teacher_x,
/// teacher_w, [teacher_bias], T) when the op has a teacher.
void declareTeacherInputs(KernelSignature &sig, const LceSpec &spec);

/// Stores `row`'s outputs (declareRowOutputs): `finish(e, what)` gives a
/// statistic of the finished sweep (lse, entropy, logit_sum) and
/// `labelRaw(e, label)` the raw logit at a label of the row (called only for
/// a counted label in range): the cross-entropy ops' lse and row loss under
/// the row rule, or a reduction's statistics (label_logit under the row
/// rule, one per label of labels [N, K]: 0 when ignored, NaN out of range).
/// `writes`, when given, picks which of a reduction's statistics this
/// kernel stores (the GPU's dependent sweep stores its own in a later
/// kernel).
void emitRowOutputs(
    KernelEmitter &e, const LceSpec &spec, const KernelArgs &a, mlir::Value row, mlir::Value v,
    const std::function<mlir::Value(KernelEmitter &, loss::Statistic)> &finish,
    const std::function<mlir::Value(KernelEmitter &, mlir::Value label)> &labelRaw,
    const std::function<bool(loss::Statistic)> &writes = {});

/// A row's statistics from its materialized raw logits raw[base + j],
/// j < v, in vocabulary order, tile by tile into a compensated state: lse into lseOut[row] and the row loss into
/// lossOut[row] (the fused forward+backward's per-chunk epilogue).
/// `foldTile`(e, begin, end) gives the state of the columns [begin, end) of
/// one tile (from the empty state); by default the logits are pushed one
/// at a time.
using RawTileFold = std::function<llvm::SmallVector<mlir::Value>(KernelEmitter &, mlir::Value,
                                                                 mlir::Value)>;
void emitRowFromRawLogits(KernelEmitter &e, const LceSpec &spec, const RowStats &stats,
                          mlir::Value raw, mlir::Value base, mlir::Value v, mlir::Value labels,
                          mlir::Value row, mlir::Value lseOut, mlir::Value lossOut,
                          const RawTileFold &foldTile = {});

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_ROWSTATS_ROWRULES_H
