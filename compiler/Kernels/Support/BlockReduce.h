//===- BlockReduce.h - fixed-order reductions across threads ----*- C++ -*-===//
//
// Every cross-thread sum of the kernels has one order, fixed by the code,
// never by timing: a GPU block reduces through a shared-memory tree, and
// the host reduction simulates the same lanes and tree so both backends sum
// per-row losses identically.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_SUPPORT_BLOCKREDUCE_H
#define LOSSJIT_COMPILER_KERNELS_SUPPORT_BLOCKREDUCE_H

#include "compiler/Kernels/Support/KernelEmitter.h"

namespace lossjit {

/// gpu.thread_id x, or the id `e` was given (KernelEmitter::withThreadId).
mlir::Value gpuThreadIdx(KernelEmitter &e);
/// gpu.thread_id x through an empty side-effecting asm ("=r,0"): the same
/// value, but opaque to LLVM, so what is derived from it in a loop body is
/// not hoisted out of the loop (where it would stay live through the whole
/// loop; see TileSweep::pinThread).
mlir::Value opaqueThreadIdx(KernelEmitter &e);
/// `value` (an index below 2^32) through the same empty asm: what a loop
/// body derives from it stays in the body.
mlir::Value opaqueIndex(KernelEmitter &e, mlir::Value value);
/// gpu.block_id / gpu.grid_dim along x (0), y (1).
mlir::Value gpuBlockIdx(KernelEmitter &e, unsigned dim);
mlir::Value gpuGridDim(KernelEmitter &e, unsigned dim);
/// gpu.barrier.
void gpuBarrier(KernelEmitter &e);

/// Tree reduction over `threads` shared slots: for halving strides, thread
/// t < stride merges slot t+stride into slot t, then all threads barrier.
/// The merge order is fixed by the tree, so results are bitwise stable.
void emitBlockTree(
    KernelEmitter &e, mlir::Value tid, int64_t threads,
    const std::function<void(KernelEmitter &, mlir::Value dst, mlir::Value src)> &mergeSlots);

/// The same tree run by one host thread over `lanes` slots.
void emitCpuTree(
    KernelEmitter &e, int64_t lanes,
    const std::function<void(KernelEmitter &, mlir::Value dst, mlir::Value src)> &mergeSlots);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SUPPORT_BLOCKREDUCE_H
