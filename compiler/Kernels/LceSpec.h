//===- LceSpec.h - what a linear-cross-entropy kernel is specialized on -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LCESPEC_H
#define LOSSJIT_COMPILER_KERNELS_LCESPEC_H

#include "compiler/Kernels/LaunchPlan.h"
#include "dialects/Loss/LossOps.h"

namespace lossjit {

/// The compile-time facts of one fused-op variant. Shapes (N, V, D) are not
/// here: kernels read them at run time.
struct LceSpec {
  mlir::Type storage;   ///< f16, bf16 or f32 element type of x, w, b.
  mlir::Type labelType; ///< i32 or i64.
  bool hasBias = false;
  int64_t ignoreIndex = -100;
  loss::Reduction reduction = loss::Reduction::mean;

  /// Backward only: which gradients, which schedule, how much scratch.
  bool gradient = false;
  bool needsGradX = true;
  bool needsGradW = true;
  std::string strategy = "chunked"; ///< "chunked" or "recompute" (resolved).
  int64_t workspaceBytes = 256ll << 20;

  static LceSpec fromOp(loss::LinearCrossEntropyOp op);
  static LceSpec fromOp(loss::LinearCrossEntropyGradOp op);

  bool storesF32() const { return storage.isF32(); }
  bool needsGradBias() const { return gradient && hasBias && needsGradW; }

  /// The op's buffers in calling order: x, w, labels, [bias], then loss, lse
  /// (forward) or lse, grad_loss, [grad_x], [grad_w], [grad_bias] (backward).
  std::vector<PlanParam> planParams() const;
  /// dtype, label_type, bias, ignore_index, reduction as manifest strings.
  std::map<std::string, std::string> planOptions() const;
  /// Name of the buffer holding per-row losses: the `loss` output itself for
  /// reduction = none, else a workspace the reduction kernel reads.
  llvm::StringRef rowLossBuffer() const {
    return reduction == loss::Reduction::none ? "loss" : "loss_rows";
  }
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LCESPEC_H
