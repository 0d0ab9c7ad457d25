//===- FusedFunction.h - functions the lowering passes accept ---*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_CONVERSION_FUSEDFUNCTION_H
#define LOSSJIT_COMPILER_CONVERSION_FUSEDFUNCTION_H

#include "dialects/Loss/LossOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lossjit {

/// A function that is exactly one fused op on its arguments plus a return of
/// the op's results: what the lowering passes turn into a kernel module.
struct FusedFunction {
  mlir::func::FuncOp func;
  loss::LinearCrossEntropyOp op;
};

/// For each argument of the function, the plan param it feeds ("x", "w",
/// "labels", "bias") or "" when the fused op does not read it.
std::vector<std::string> argumentRoles(FusedFunction f);

/// Collects the fused functions of `module`. A function that holds a fused
/// op in any other form is reported as an error on that op; returns failure
/// if any was.
mlir::FailureOr<llvm::SmallVector<FusedFunction>>
collectFusedFunctions(mlir::ModuleOp module, llvm::StringRef passName);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_CONVERSION_FUSEDFUNCTION_H
