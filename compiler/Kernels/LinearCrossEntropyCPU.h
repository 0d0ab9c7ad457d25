//===- LinearCrossEntropyCPU.h - host kernels of the fused loss -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYCPU_H
#define LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYCPU_H

#include "compiler/Kernels/LaunchPlan.h"
#include "compiler/Kernels/LceSpec.h"

#include "mlir/IR/Builders.h"

namespace lossjit {

/// Options of the host kernels.
struct CpuTileConfig {
  int64_t blockRows = 8;   ///< rows sharing each loaded weight row.
  int64_t vectorWidth = 8; ///< f32 lanes of the dot product.
  /// Register blocks per panel: the forward sweeps the vocabulary in tiles
  /// for a panel of blockRows·panelBlocks rows, so each W tile is read once
  /// per panel.
  int64_t panelBlocks = 16;
  /// Vocabulary columns per tile (the W rows kept hot in cache).
  int64_t vocabTile = 64;
  /// Lanes of the fixed-order reduction; equal to the GPU block size so the
  /// two backends sum per-row losses in the same order.
  int64_t reduceLanes = 128;
  std::string str() const;
};

/// Builds, at `builder`'s insertion point (a builtin.module body), the host
/// kernels and returns their plan:
///   lce_rows(x, w, [b], labels, lse, loss_rows, row_begin, row_end, V, D)
///     online log-sum-exp over the whole vocabulary for rows in
///     [row_begin, row_end), vectorized f32 dot products; the host may call
///     it on disjoint row ranges from several threads;
///   lce_reduce(labels, loss_rows, loss, N) (mean/sum only): the GPU
///     reduction's lane/tree order, run sequentially.
void buildLceCpuKernels(mlir::OpBuilder &builder, mlir::Location loc,
                        llvm::StringRef moduleName, const LceSpec &spec, const CpuTileConfig &tile,
                        LaunchPlan &plan);

/// Builds, at `builder`'s insertion point, the host reduction
/// `lce_reduce(labels, loss_rows, loss, N)` in the GPU reduction's lane and
/// tree order; the forward and the fused forward+backward share it.
void buildLceReduceCpuKernel(mlir::OpBuilder &builder, mlir::Location loc,
                             const LceSpec &spec, const CpuTileConfig &tile);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LINEARCROSSENTROPYCPU_H
