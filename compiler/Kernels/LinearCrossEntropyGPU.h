//===- LinearCrossEntropyGPU.h - GPU kernels of the fused loss ---*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYGPU_H
#define LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYGPU_H

#include "compiler/Kernels/LaunchPlan.h"
#include "compiler/Kernels/LceSpec.h"
#include "compiler/Kernels/TileConfig.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace lossjit {

/// Builds, at `builder`'s insertion point, one gpu.module per forward kernel
/// of DESIGN §3 (named `<prefix>_<kernel>`, so each becomes its own PTX file)
/// and fills the plan that launches them:
///   lce_partial  grid (cdiv(N,BN), S): per row block and vocab split, the
///                SIMT f32 logit tile and its online (max, sum);
///   lce_combine  grid cdiv(N,T): fixed-order merge over splits → lse,
///                target logit, per-row loss (ignored rows 0);
///   lce_reduce   grid 1 (mean/sum only): fixed-order tree over rows.
void buildLceGpuKernels(mlir::OpBuilder &builder,
                                    mlir::Location loc, llvm::StringRef prefix,
                                    const LceSpec &spec,
                                    const TileConfig &tile, LaunchPlan &plan);

/// Builds, at `builder`'s insertion point (a gpu.module body), the
/// fixed-order reduction kernel `lce_reduce(labels, loss_rows, loss, N)`
/// (one block; thread t sums rows t, t+T, …; then a tree). The forward and
/// the fused forward+backward share it.
void buildLceReduceGpuKernel(mlir::OpBuilder &builder, mlir::Location loc,
                             const LceSpec &spec, const TileConfig &tile);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYGPU_H
