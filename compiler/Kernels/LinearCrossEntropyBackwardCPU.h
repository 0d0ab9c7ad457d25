//===- LinearCrossEntropyBackwardCPU.h - host gradient kernels --*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYBACKWARDCPU_H
#define LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYBACKWARDCPU_H

#include "compiler/Kernels/LinearCrossEntropyCPU.h"

namespace lossjit {

/// Builds the host gradient kernels of `spec` (spec.gradient) and fills the
/// plan. Both schedules share lce_bwd_scale (the per-row factor g_r: 0 for
/// ignored rows, grad_loss/count for mean, NaN for a label outside [0, V)):
///   recompute  lce_bwd_dx (rows) and lce_bwd_dw (vocab) each recompute the
///              logits they need: 8·N·D·V flops, O(D) scratch per thread;
///   chunked    per chunk of C rows (C from the workspace budget):
///              lce_bwd_dz (rows) writes dZ = g·(softmax − onehot) into a
///              [C,V] f32 workspace, lce_bwd_dx_chunk (rows) and
///              lce_bwd_dw_chunk (vocab) multiply it out, dW accumulating in
///              f32 over chunks in order; lce_bwd_finish rounds once.
/// Every output element is summed by one call in a fixed order, so results
/// are bitwise reproducible and independent of the thread split.
void buildLceBackwardCpuKernels(mlir::OpBuilder &builder, mlir::Location loc,
                                llvm::StringRef moduleName, const LceSpec &spec,
                                const CpuTileConfig &tile, LaunchPlan &plan);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYBACKWARDCPU_H
