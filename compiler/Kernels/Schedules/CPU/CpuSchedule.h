//===- CpuSchedule.h - shared state of the host schedules ------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_SCHEDULES_CPU_CPUSCHEDULE_H
#define LOSSJIT_COMPILER_KERNELS_SCHEDULES_CPU_CPUSCHEDULE_H

#include "compiler/Kernels/Matmul/CpuVector.h"
#include "compiler/Kernels/RowStats/RowStats.h"
#include "compiler/Kernels/Support/KernelSignature.h"
#include "compiler/Kernels/Support/LceSpec.h"

namespace lossjit {

/// What every host kernel builder of one variant reads.
struct CpuSchedule {
  CpuKernelSink &sink;
  const LceSpec &spec;
  const CpuTileConfig &tile;
  CpuVector matmul;
  /// The statistics the vocabulary sweep carries.
  RowStats stats{{StatKind::LogSumExp}};

  mlir::Type storage() const { return spec.storage; }
  mlir::Type f32() const { return sink.builder().getF32Type(); }
  mlir::Type index() const { return sink.builder().getIndexType(); }
  mlir::MemRefType flat(mlir::Type t) const { return KernelSink::flat(t); }
};

/// Columns [lo, hi) in blocks of `cols` (the register tile's width), then
/// the remainder one column at a time, in ascending order, threading
/// `iters` through: body(e, firstColumn, columnsInBlock, iters) → iters.
llvm::SmallVector<mlir::Value> forColumnBlocks(
    KernelEmitter &e, mlir::Value lo, mlir::Value hi, int64_t cols, mlir::ValueRange iters,
    const std::function<llvm::SmallVector<mlir::Value>(KernelEmitter &, mlir::Value, int64_t,
                                                       mlir::ValueRange)> &body);

/// lce_rows (+ lce_reduce), and the forward plan.
void buildCpuForward(CpuSchedule &s);
/// lce_reduce(labels, loss_rows, loss, N): the GPU reduction's lanes and
/// tree, run sequentially (the forward and the fused op share it).
void buildCpuReduceKernel(CpuSchedule &s);
/// The backward (chunked or recompute) or fused forward+backward, and plan.
llvm::Error buildCpuBackward(CpuSchedule &s);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SCHEDULES_CPU_CPUSCHEDULE_H
