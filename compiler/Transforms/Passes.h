//===- Passes.h - graph-level passes on the `loss` dialect ------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_TRANSFORMS_PASSES_H
#define LOSSJIT_COMPILER_TRANSFORMS_PASSES_H

#include "dialects/Loss/LossOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace lossjit {

#define GEN_PASS_DECL
#include "compiler/Transforms/Passes.h.inc"

/// Adds the patterns that fuse linear → [cast] → log_softmax → nll.
void populateFuseLinearCrossEntropyPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "compiler/Transforms/Passes.h.inc"

} // namespace lossjit

#endif // LOSSJIT_COMPILER_TRANSFORMS_PASSES_H
