//===- GpuKernelSupport.cpp -----------------------------------------------===//

#include "compiler/Kernels/GpuKernelSupport.h"

using namespace mlir;
using namespace lossjit;

MemRefType lossjit::gpuFlat(Type elem) {
  return MemRefType::get({ShapedType::kDynamic}, elem);
}

MemRefType lossjit::gpuShared(MLIRContext *ctx, int64_t count, Type elem) {
  auto space = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  return MemRefType::get({count}, elem, MemRefLayoutAttrInterface{}, space);
}

gpu::GPUFuncOp lossjit::makeGpuKernel(OpBuilder &b, Location loc, StringRef name,
                          TypeRange args, TypeRange workgroup,
                          int64_t threads) {
  auto fn = gpu::GPUFuncOp::create(b, loc, name, b.getFunctionType(args, {}),
                                   workgroup, TypeRange{});
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({static_cast<int32_t>(threads), 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  return fn;
}

Value lossjit::gpuThreadIdx(OpBuilder &b, Location loc) {
  return gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
}

void lossjit::emitBlockTree(KernelEmitter &e, Value tid, int64_t threads,
               const std::function<void(KernelEmitter &, Value dst, Value src)> &mergeSlots) {
  for (int64_t stride = threads / 2; stride >= 1; stride /= 2) {
    Value active = e.cmpI(arith::CmpIPredicate::ult, tid, e.index(stride));
    e.ifThen(active, [&](KernelEmitter &in) {
      mergeSlots(in, tid, in.add(tid, in.index(stride)));
    });
    gpu::BarrierOp::create(e.builder(), e.location());
  }
}

