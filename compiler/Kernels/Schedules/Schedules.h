//===- Schedules.h - a fused-loss variant's kernels and launch plan -*- C++ -*-===//
//
// The only entry points the lowering passes call. A schedule decides the
// kernel boundaries, grids, chunking and the plan, written once per backend
// against the tile-matmul strategy (Matmul/) and the row statistics
// (RowStats/):
//   forward            partial statistics per (row block, vocabulary split),
//                      a fixed-order combine, the fixed-order reduction;
//   backward chunked   dZ of a row chunk into a bounded workspace, dX and dW
//                      from it, chunks in order (f32 dW accumulators);
//   backward recompute the logits recomputed tile by tile, no [C, V] memory;
//   forward+backward   raw logits of a chunk → statistics → dZ in place →
//                      the chunked dX and dW, and the reduction.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_SCHEDULES_SCHEDULES_H
#define LOSSJIT_COMPILER_KERNELS_SCHEDULES_SCHEDULES_H

#include "compiler/Kernels/Support/LaunchPlan.h"
#include "compiler/Kernels/Support/LceSpec.h"
#include "compiler/Kernels/Support/TileConfig.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Error.h"

namespace lossjit {

/// Builds, before the builder's insertion point, one gpu.module per kernel
/// (`<prefix>_<kernel>`, one PTX file each) for `spec`, and fills `plan`.
llvm::Error buildGpuSchedule(mlir::OpBuilder &builder, mlir::Location loc, llvm::StringRef prefix,
                             const LceSpec &spec, const TileConfig &tile, LaunchPlan &plan);

/// Builds, at the end of the builder's block (a builtin.module body named
/// `moduleName`), the host kernels of `spec`, and fills `plan`.
llvm::Error buildCpuSchedule(mlir::OpBuilder &builder, mlir::Location loc,
                             llvm::StringRef moduleName, const LceSpec &spec,
                             const CpuTileConfig &tile, LaunchPlan &plan);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SCHEDULES_SCHEDULES_H
