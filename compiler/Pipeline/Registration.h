//===- Registration.h - dialects, passes and pipelines of lossjit -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_PIPELINE_REGISTRATION_H
#define LOSSJIT_COMPILER_PIPELINE_REGISTRATION_H

#include "mlir/IR/DialectRegistry.h"

namespace lossjit {

/// Registers the `loss` dialect, the upstream dialects the kernels use, the
/// LLVM IR translations, the NVVM target model and the ConvertToLLVM
/// interfaces (without them convert-gpu-to-nvvm leaves memref ops behind).
void registerLossJITDialects(mlir::DialectRegistry &registry);

/// Registers lossjit's passes and the `lossjit-gpu-pipeline` and
/// `lossjit-cpu-pipeline` pipelines (idempotent).
void registerLossJITPasses();

} // namespace lossjit

#endif // LOSSJIT_COMPILER_PIPELINE_REGISTRATION_H
