//===- LceGradient.h - the gradient formulas both backends emit -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LCEGRADIENT_H
#define LOSSJIT_COMPILER_KERNELS_LCEGRADIENT_H

#include "compiler/Kernels/KernelEmitter.h"
#include "compiler/Kernels/LceSpec.h"

namespace lossjit {

/// The factor shared by all rows: grad_loss[0] / count for mean,
/// grad_loss[0] for sum (1 in place of grad_loss[0] when `gradLoss` is null);
/// null for none (each row has its own).
mlir::Value emitGradScale(KernelEmitter &e, const LceSpec &spec,
                          mlir::Value gradLoss, mlir::Value countI32);

/// g_r: 0 for an ignored row, NaN for a label outside [0, V) (the forward
/// gave NaN too), else grad_loss[r] (none) or `scale`.
mlir::Value emitRowFactor(KernelEmitter &e, const LceSpec &spec,
                          mlir::Value labels, mlir::Value gradLoss,
                          mlir::Value scale, mlir::Value row, mlir::Value v);

/// The logit the softmax sees, from the raw x·w (+ b). This is the one place
/// logit transforms (scaling, softcap) are applied, so forward, target logit
/// and backward of both backends agree.
mlir::Value emitLogit(KernelEmitter &e, const LceSpec &spec, mlir::Value raw);

/// ∂loss/∂raw = g · (exp(z − lse) − [target]) · ∂z/∂raw with z = emitLogit(raw):
/// ∂z/∂raw = logitScale · (1 − tanh²(u)) with a softcap (u = z_scaled / cap),
/// logitScale without one. The bias is part of raw, so dbias uses it as is.
mlir::Value emitLogitGrad(KernelEmitter &e, const LceSpec &spec, mlir::Value raw,
                          mlir::Value lse, mlir::Value g, mlir::Value isTarget);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LCEGRADIENT_H
