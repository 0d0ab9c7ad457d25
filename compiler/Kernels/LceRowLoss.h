//===- LceRowLoss.h - the per-row loss both backends emit -------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LCEROWLOSS_H
#define LOSSJIT_COMPILER_KERNELS_LCEROWLOSS_H

#include "compiler/Kernels/KernelEmitter.h"
#include "compiler/Kernels/LceSpec.h"

namespace lossjit {

/// The loss of one row given its lse: 0 for an ignored row, lse − z_target
/// for a label in [0, V) (z_target recomputed as one f32 dot product, plus
/// the bias), NaN for a label outside [0, V) — never an out-of-bounds read.
mlir::Value emitRowLoss(KernelEmitter &e, const LceSpec &spec, mlir::Value x,
                        mlir::Value w, mlir::Value bias, mlir::Value label,
                        mlir::Value row, mlir::Value lse, mlir::Value v,
                        mlir::Value d);

/// For one row whose raw logits sit at raw[base, base+V) (the fused
/// forward+backward's workspace): sums the softmax over the vocabulary in
/// order and stores lseOut[row] and lossOut[row] (0 ignored, NaN for a label
/// outside [0, V)). Both backends emit exactly this.
void emitRowFromRawLogits(KernelEmitter &e, const LceSpec &spec, mlir::Value raw,
                          mlir::Value base, mlir::Value v, mlir::Value labels,
                          mlir::Value row, mlir::Value lseOut, mlir::Value lossOut);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LCEROWLOSS_H
