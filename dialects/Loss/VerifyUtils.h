//===- VerifyUtils.h - checks the `loss` op verifiers share ----*- C++ -*-===//
//
// Operand and result checks several ops state the same way (ranks, matching
// dimensions, the linear operands, the logit transforms, gradient results),
// each with a diagnostic that names the operand and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_DIALECTS_LOSS_VERIFYUTILS_H
#define LOSSJIT_DIALECTS_LOSS_VERIFYUTILS_H

#include "dialects/Loss/LossDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <string>

namespace lossjit::loss::detail {

/// Two dimensions agree unless both are static and differ.
bool dimsCompatible(int64_t a, int64_t b);
/// "?" for a dynamic dimension, else its value.
std::string dimString(int64_t d);
/// The ranked tensor type of `v` (the ops take ranked tensors only).
mlir::RankedTensorType rankedType(mlir::Value v);
/// Checks `value` has `rank`; `what` names the operand in the diagnostic.
mlir::LogicalResult expectRank(mlir::Operation *op, mlir::Value value, int64_t rank,
                               llvm::StringRef what);
/// Checks two dimensions agree; `what` says which.
mlir::LogicalResult expectDim(mlir::Operation *op, int64_t a, int64_t b, llvm::StringRef what);
/// x [N,D], w [V,D], optional b [V] of one storage type (linear and fused ops).
mlir::LogicalResult verifyLinearOperands(mlir::Operation *op, mlir::Value input,
                                         mlir::Value weight, mlir::Value bias);
/// NLL-style ops: scores [N,V], labels [N], the result shaped by `reduction`.
mlir::LogicalResult verifyNllLike(mlir::Operation *op, mlir::Value scores,
                                  llvm::StringRef scoresWhat, mlir::Value labels,
                                  mlir::Value result, Reduction reduction);
/// The logit transforms of the fused ops: z = softcap(logit_scale · raw).
mlir::LogicalResult verifyLogitTransforms(mlir::Operation *op, double logitScale,
                                          double softcap);
/// Element-wise ops keep their operand's type exactly.
mlir::LogicalResult verifySameType(mlir::Operation *op, mlir::Value input, mlir::Value result);
/// Results of the gradient ops, in order: grad_input (if needed),
/// grad_weight (if needed), grad_bias (with a bias and grad_weight); each of
/// the input's storage type and the shape of what it differentiates.
mlir::LogicalResult verifyGradientResults(mlir::Operation *op, mlir::Value input,
                                          mlir::Value weight, mlir::Value bias,
                                          mlir::Type storage, bool needsInput, bool needsWeight,
                                          mlir::ValueRange gradients);
/// The storage attribute of a fused op: f16, bf16 or f32 and the element
/// type of its input; and its compute attribute: f32.
mlir::LogicalResult verifyStorageAndCompute(mlir::Operation *op, mlir::Type storage,
                                            mlir::Type compute, mlir::Value input);

} // namespace lossjit::loss::detail

#endif // LOSSJIT_DIALECTS_LOSS_VERIFYUTILS_H
