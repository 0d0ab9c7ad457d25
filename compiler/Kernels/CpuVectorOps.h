//===- CpuVectorOps.h - vectorized row operations of host kernels -*- C++ -*-===//
//
// The host kernels' inner loops over D: ⌊D/L⌋·L elements as vector<L x f32>
// operations, then a scalar tail doing the same per-element operation, so a
// result never depends on L (each element sees the same fma sequence).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_CPUVECTOROPS_H
#define LOSSJIT_COMPILER_KERNELS_CPUVECTOROPS_H

#include "compiler/Kernels/KernelEmitter.h"

namespace lossjit {

/// Σₖ a[aOff_i+k]·b[bOff+k] for every i (k < d): one row of b shared by
/// several rows of a; dMain = ⌊d/L⌋·L. Products are widened to f32.
llvm::SmallVector<mlir::Value>
emitBlockDot(KernelEmitter &e, mlir::Value a, llvm::ArrayRef<mlir::Value> aOff,
             mlir::Value b, mlir::Value bOff, mlir::Value d, mlir::Value dMain,
             int64_t lanes);

/// acc[accOff_i+k] += scale_i · src[srcOff+k] for every i (acc is f32).
void emitBlockAxpy(KernelEmitter &e, mlir::Value acc,
                   llvm::ArrayRef<mlir::Value> accOff,
                   llvm::ArrayRef<mlir::Value> scale, mlir::Value src,
                   mlir::Value srcOff, mlir::Value d, mlir::Value dMain,
                   int64_t lanes);

/// dst[dstOff+k] = src[srcOff+k] for k < d, converting f32 → dst's element
/// type (one rounding) or f32 → f32.
void emitCopyRow(KernelEmitter &e, mlir::Value src, mlir::Value srcOff,
                 mlir::Value dst, mlir::Value dstOff, mlir::Value d);

/// dst[dstOff+k] = 0 for k < d (f32).
void emitZeroRow(KernelEmitter &e, mlir::Value dst, mlir::Value dstOff,
                 mlir::Value d);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_CPUVECTOROPS_H
