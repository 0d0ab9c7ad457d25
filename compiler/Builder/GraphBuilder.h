//===- GraphBuilder.h - build `loss` graphs from C++ ------------*- C++ -*-===//
//
// The built-in graphs (lossjit-runner/lossjit-aot --preset, the demo) and the
// seed of the builder the Python decorator drives: graphs are built with
// ops, never by formatting MLIR text.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_BUILDER_GRAPHBUILDER_H
#define LOSSJIT_COMPILER_BUILDER_GRAPHBUILDER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace lossjit {

/// Options of the linear-cross-entropy preset.
struct LceGraphOptions {
  std::string name = "lce";       ///< function name.
  std::string dtype = "f16";      ///< storage of x, w, b: f16, bf16, f32.
  std::string labelType = "i64";  ///< i32 or i64.
  bool bias = false;
  int64_t ignoreIndex = -100;
  std::string reduction = "mean"; ///< none, mean, sum.
  /// Logit transforms, z = softcap(logitScale · (x·w + b)): logitScale must
  /// be finite and nonzero, softcap 0 (none) or positive and finite. Used by
  /// the forward graph (loss.scale / loss.softcap ops) and the gradient op.
  double logitScale = 1.0;
  double softcap = 0.0;

  /// Build the gradient function instead of the loss:
  /// `@name(x, w, labels[, bias], lse, grad_loss[, grad_lse]) -> (grad_x?, grad_w?,
  /// grad_bias?)`.
  bool gradient = false;
  /// With `gradient`: also take grad_lse, the gradient reaching lse ([N] f32).
  bool gradLse = false;
  /// With `gradient`: build the fused forward+backward instead,
  /// `@name(x, w, labels[, bias]) -> (loss, lse, grad_x?, grad_w?, grad_bias?)`
  /// with the gradients of grad_loss = 1 (mean and sum only).
  bool fusedForward = false;
  std::string strategy = "auto"; ///< auto, chunked, vocab_chunked, recompute (not fused).
  bool needsGradX = true;
  bool needsGradW = true;
  int64_t workspaceBytes = 64ll << 20; ///< scratch budget of the backward.
};

/// The storage element type spelled `dtype` ("f16", "bf16", "f32"), or an
/// error naming the accepted spellings.
llvm::Expected<mlir::Type> storageTypeNamed(mlir::MLIRContext &context, llvm::StringRef dtype);

/// Builds the unfused graph `nll(log_softmax(cast_f32(linear(x, w[, b]))), y)`
/// — what `F.cross_entropy(F.linear(x, w, b).float(), y)` says — with
/// `loss.scale` / `loss.softcap` after the cast when requested, as
/// `func.func @name(x, w, labels[, bias]) -> loss` with dynamic shapes.
/// Bad options give an error naming the option and the accepted values.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildLinearCrossEntropyGraph(mlir::MLIRContext &context,
                             const LceGraphOptions &options);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_BUILDER_GRAPHBUILDER_H
