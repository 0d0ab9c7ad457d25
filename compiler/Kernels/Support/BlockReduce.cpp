//===- BlockReduce.cpp ----------------------------------------------------===//

#include "compiler/Kernels/Support/BlockReduce.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace lossjit;

namespace {
gpu::Dimension dimension(unsigned dim) { return dim == 0 ? gpu::Dimension::x : gpu::Dimension::y; }
} // namespace

Value lossjit::gpuThreadIdx(KernelEmitter &e) {
  if (Value fixed = e.fixedThreadId())
    return fixed;
  return gpu::ThreadIdOp::create(e.builder(), e.location(), gpu::Dimension::x);
}

Value lossjit::opaqueThreadIdx(KernelEmitter &e) {
  return opaqueIndex(e, gpu::ThreadIdOp::create(e.builder(), e.location(), gpu::Dimension::x));
}

Value lossjit::opaqueIndex(KernelEmitter &e, Value value) {
  OpBuilder &b = e.builder();
  Value word = arith::IndexCastUIOp::create(b, e.location(), b.getI32Type(), value);
  Value pinned =
      LLVM::InlineAsmOp::create(b, e.location(), b.getI32Type(), ValueRange{word}, "", "=r,0",
                                /*has_side_effects=*/true,
                                /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
                                LLVM::AsmDialectAttr(), ArrayAttr())
          .getRes();
  return arith::IndexCastUIOp::create(b, e.location(), b.getIndexType(), pinned);
}

Value lossjit::gpuBlockIdx(KernelEmitter &e, unsigned dim) {
  return gpu::BlockIdOp::create(e.builder(), e.location(), dimension(dim));
}

Value lossjit::gpuGridDim(KernelEmitter &e, unsigned dim) {
  return gpu::GridDimOp::create(e.builder(), e.location(), dimension(dim));
}

void lossjit::gpuBarrier(KernelEmitter &e) { gpu::BarrierOp::create(e.builder(), e.location()); }

void lossjit::emitBlockTree(
    KernelEmitter &e, Value tid, int64_t threads,
    const std::function<void(KernelEmitter &, Value dst, Value src)> &mergeSlots) {
  for (int64_t stride = threads / 2; stride >= 1; stride /= 2) {
    Value active = e.cmpI(arith::CmpIPredicate::ult, tid, e.index(stride));
    e.ifThen(active,
             [&](KernelEmitter &in) { mergeSlots(in, tid, in.add(tid, in.index(stride))); });
    gpuBarrier(e);
  }
}

void lossjit::emitCpuTree(
    KernelEmitter &e, int64_t lanes,
    const std::function<void(KernelEmitter &, Value dst, Value src)> &mergeSlots) {
  for (int64_t stride = lanes / 2; stride >= 1; stride /= 2)
    e.forLoop(e.index(0), e.index(stride), e.index(1), {},
              [&](KernelEmitter &te, Value t, ValueRange) {
                mergeSlots(te, t, te.add(t, te.index(stride)));
                return SmallVector<Value>{};
              });
}
