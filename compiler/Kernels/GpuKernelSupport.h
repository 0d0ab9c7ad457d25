//===- GpuKernelSupport.h - pieces every GPU kernel builder uses -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_GPUKERNELSUPPORT_H
#define LOSSJIT_COMPILER_KERNELS_GPUKERNELSUPPORT_H

#include "compiler/Kernels/KernelEmitter.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace lossjit {

/// memref<?xT>: every kernel buffer is flat, sized at run time.
mlir::MemRefType gpuFlat(mlir::Type elem);

/// Static workgroup (shared) memory of `count` elements.
mlir::MemRefType gpuShared(mlir::MLIRContext *ctx, int64_t count, mlir::Type elem);

/// Creates an empty `gpu.func` kernel (known block size `threads`) and moves
/// `b` into its body.
mlir::gpu::GPUFuncOp makeGpuKernel(mlir::OpBuilder &b, mlir::Location loc,
                                   llvm::StringRef name, mlir::TypeRange args,
                                   mlir::TypeRange workgroup, int64_t threads);

/// gpu.thread_id x.
mlir::Value gpuThreadIdx(mlir::OpBuilder &b, mlir::Location loc);

/// Tree reduction over `threads` shared slots: for halving strides, thread
/// t < stride merges slot t+stride into slot t, then all threads barrier.
/// The merge order is fixed by the tree, so results are bitwise stable.
void emitBlockTree(KernelEmitter &e, mlir::Value tid, int64_t threads,
                   const std::function<void(KernelEmitter &, mlir::Value dst,
                                            mlir::Value src)> &mergeSlots);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_GPUKERNELSUPPORT_H
