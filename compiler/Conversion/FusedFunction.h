//===- FusedFunction.h - functions the lowering passes accept ---*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_CONVERSION_FUSEDFUNCTION_H
#define LOSSJIT_COMPILER_CONVERSION_FUSEDFUNCTION_H

#include "compiler/Kernels/Support/LceSpec.h"
#include "dialects/Loss/LossOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lossjit {

/// A function that is exactly one fused op (forward or gradient) on its
/// arguments plus a return of the op's results: what the lowering passes
/// turn into a kernel module.
struct FusedFunction {
  mlir::func::FuncOp func;
  mlir::Operation *op; ///< LinearCrossEntropyOp or LinearCrossEntropyGradOp.
};

/// The kernel specialization of `f`'s op.
LceSpec specOf(const FusedFunction &f);

/// For each argument of the function, the plan param it feeds ("x", "w",
/// "labels", "bias", "lse", "grad_loss") or "" when the op does not read it.
std::vector<std::string> argumentRoles(const FusedFunction &f);

/// For each argument of the function, the extents its ranked tensor type
/// declares (ShapedType::kDynamic becomes -1), for LaunchPlan::entryArgExtents;
/// empty when no argument has a static extent.
std::vector<std::vector<int64_t>> argumentExtents(const FusedFunction &f);

/// For each result of the function, the output param it returns ("loss",
/// "lse", "grad_x", "grad_w", "grad_bias").
std::vector<std::string> resultRoles(const FusedFunction &f);

/// Collects the fused functions of `module`. A function that holds a fused
/// op in any other form is reported as an error on that op; returns failure
/// if any was.
mlir::FailureOr<llvm::SmallVector<FusedFunction>>
collectFusedFunctions(mlir::ModuleOp module, llvm::StringRef passName);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_CONVERSION_FUSEDFUNCTION_H
