//===- LinearCrossEntropyBackwardGPU.h - GPU gradient kernels ---*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYBACKWARDGPU_H
#define LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYBACKWARDGPU_H

#include "compiler/Kernels/LaunchPlan.h"
#include "compiler/Kernels/LceSpec.h"
#include "compiler/Kernels/TileConfig.h"

#include "mlir/IR/Builders.h"

namespace lossjit {

/// Builds the chunked GPU backward (one gpu.module per kernel, named
/// `<prefix>_<kernel>`) and fills its plan:
///   lce_bwd_scale     grid 1: count rows (mean), per-row factors g_r;
///   per chunk of C rows (C from the workspace budget):
///   lce_bwd_dz        grid (cdiv(C,BN), cdiv(V,T)): dZ tile → [C,V] workspace;
///   lce_bwd_dx        grid (cdiv(C,BN), cdiv(D,T)): dX rows = dZ · W;
///   lce_bwd_dw        grid (cdiv(V,BN), cdiv(D,T)): dW (+)= dZᵀ · X_c in f32,
///                     chunks in order;
///   lce_bwd_finish    grid cdiv(V·D,T) (16-bit storage): one rounding.
/// recompute (8·N·D·V, no [C,V] workspace): lce_bwd_scale, then
///   lce_bwd_dx_rc     grid cdiv(N,BN): per vocab tile, dZ of the block's rows
///                     in shared memory, dX (+)= dZ·W;
///   lce_bwd_dw_rc     grid cdiv(V,BN): per row tile, dZ of the block's vocab
///                     rows in shared memory, dW (+)= dZᵀ·X, db;
///   16-bit storage sums in gradient-sized f32 accumulators, rounded once.
/// Each output element is summed by one thread in a fixed order: no atomics.
/// Returns an error message, or "" on success.
std::string buildLceBackwardGpuKernels(mlir::OpBuilder &builder, mlir::Location loc,
                                       llvm::StringRef prefix, const LceSpec &spec,
                                       const TileConfig &tile, LaunchPlan &plan);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYBACKWARDGPU_H
