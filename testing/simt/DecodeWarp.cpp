//===- DecodeWarp.cpp - decoding of warp-level gpu and nvgpu ops ----------===//
//
// gpu.shuffle, nvgpu.mma.sync, nvgpu.ldmatrix and the nvgpu async copies;
// the sm_90a warpgroup ops nvvm.wgmma.* and the async-proxy fence.
// Fragment shapes and operand forms the executor cannot run (integer or
// sparse mma, ldmatrix of other than 16-bit elements, async copies to global
// memory) are rejected here.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::optional<llvm::Error> Decoder::decodeWarpOp(Operation &op) {
  Operation *o = &op;
  Instr instr;
  instr.op = o;

  if (auto shuffle = dyn_cast<gpu::ShuffleOp>(o)) {
    auto info = analyzeType(shuffle.getValue().getType());
    if (!info || info->kind > TypeInfo::Vector)
      return unsupportedType(o, shuffle.getValue().getType());
    instr.opc = Opc::Shuffle;
    instr.ty = instr.rty = info->elem;
    instr.lanes = info->lanes;
    instr.mode = uint8_t(shuffle.getMode());
    instr.a = use(shuffle.getValue());
    instr.b = use(shuffle.getOffset());
    instr.c = use(shuffle.getWidth());
    auto res = define(shuffle.getShuffleResult(), o);
    if (!res)
      return res.takeError();
    auto valid = define(shuffle.getValid(), o);
    if (!valid)
      return valid.takeError();
    instr.res = *res;
    instr.res2 = *valid;
    emit(instr);
    return llvm::Error::success();
  }

  if (auto mma = dyn_cast<nvgpu::MmaSyncOp>(o))
    return decodeMma(mma);
  if (auto ld = dyn_cast<nvgpu::LdMatrixOp>(o)) {
    LdMatrixInfo info;
    if (llvm::Error err = decodeMemAccess(o, ld.getSrcMemref(), ld.getIndices(), info.access))
      return err;
    if (!isWorkgroupMemref(ld.getSrcMemref().getType()))
      return unsupported(o, "nvgpu.ldmatrix source (must be workgroup memory)");
    auto resultType = ld.getRes().getType();
    auto elem = getElementType(resultType.getElementType());
    info.numTiles = int(ld.getNumTiles());
    info.transpose = ld.getTranspose();
    if (!elem || getElementSize(*elem) != 2 ||
        (info.numTiles != 1 && info.numTiles != 2 && info.numTiles != 4) ||
        resultType.getNumElements() != 2 * info.numTiles)
      return unsupported(o, "nvgpu.ldmatrix form (only .b16 x1/x2/x4)");
    instr.opc = Opc::LdMatrix;
    instr.ty = instr.rty = *elem;
    if (llvm::Error err = defineResult(instr))
      return err;
    info.access.value = instr.res;
    instr.aux = uint32_t(prog.ldmatrices.size());
    prog.ldmatrices.push_back(info);
    emit(instr);
    return llvm::Error::success();
  }
  if (auto copy = dyn_cast<nvgpu::DeviceAsyncCopyOp>(o)) {
    AsyncCopyInfo info;
    if (llvm::Error err = decodeMemAccess(o, copy.getDst(), copy.getDstIndices(), info.dst))
      return err;
    if (llvm::Error err = decodeMemAccess(o, copy.getSrc(), copy.getSrcIndices(), info.src))
      return err;
    if (!isWorkgroupMemref(copy.getDst().getType()))
      return unsupported(o, "nvgpu.device_async_copy destination (must be workgroup memory)");
    info.dstElements = copy.getDstElements().getSExtValue();
    noteWrite(copy.getDst());
    if (copy.getSrcElements())
      info.srcElements = use(copy.getSrcElements());
    instr.opc = Opc::AsyncCopy;
    instr.ty = *getElementType(copy.getDst().getType().getElementType());
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.aux = uint32_t(prog.asyncCopies.size());
    prog.asyncCopies.push_back(info);
    emit(instr);
    return llvm::Error::success();
  }
  if (isa<nvgpu::DeviceAsyncCreateGroupOp>(o)) {
    instr.opc = Opc::AsyncCreateGroup;
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto wait = dyn_cast<nvgpu::DeviceAsyncWaitOp>(o)) {
    instr.opc = Opc::AsyncWait;
    instr.imm = wait.getNumGroups() ? int64_t(*wait.getNumGroups()) : 0;
    emit(instr);
    return llvm::Error::success();
  }

  if (auto wgmma = dyn_cast<NVVM::WgmmaMmaAsyncOp>(o))
    return decodeWgmma(wgmma);
  if (std::optional<llvm::Error> transfer = decodeAsyncTransferOp(op))
    return transfer;
  if (isa<NVVM::WgmmaFenceAlignedOp>(o)) {
    instr.opc = Opc::WgmmaFence;
    emit(instr);
    return llvm::Error::success();
  }
  if (isa<NVVM::WgmmaGroupSyncAlignedOp>(o)) {
    instr.opc = Opc::WgmmaCommit;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto wait = dyn_cast<NVVM::WgmmaWaitGroupSyncOp>(o)) {
    instr.opc = Opc::WgmmaWait;
    instr.imm = int64_t(wait.getGroup());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto set = dyn_cast<NVVM::SetMaxRegisterOp>(o)) {
    // Increase and decrease are relative to the count the warpgroup holds,
    // which starts at the kernel's register limit: without one the kernel
    // cannot know it.
    auto func = o->getParentOfType<gpu::GPUFuncOp>();
    auto limit = func ? func->getAttrOfType<IntegerAttr>("nvvm.maxnreg") : IntegerAttr();
    if (!limit)
      return unsupported(o, "nvvm.setmaxregister in a kernel without nvvm.maxnreg (the "
                            "register count its warpgroups start with)");
    prog.setsMaxRegisters = true;
    prog.launchRegisters = uint32_t(limit.getInt());
    instr.opc = Opc::SetMaxRegister;
    instr.imm = int64_t(set.getRegCount());
    instr.mode = set.getAction() == NVVM::SetMaxRegisterAction::increase ? 1 : 0;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto bar = dyn_cast<NVVM::BarrierOp>(o)) {
    // The block's barrier is gpu.barrier; this is a subset's, named.
    if (!bar.getBarrierId() || !bar.getNumberOfThreads() || bar.getReductionOp() ||
        o->getNumResults() != 0)
      return unsupported(o, "nvvm.barrier without both a barrier id and a thread count, or "
                            "with a reduction (the block's barrier is gpu.barrier)");
    prog.namedBarriers = true;
    instr.opc = Opc::NamedBarrier;
    instr.a = use(bar.getBarrierId());
    instr.b = use(bar.getNumberOfThreads());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto arrive = dyn_cast<NVVM::BarrierArriveOp>(o)) {
    if (!arrive.getBarrierId())
      return unsupported(o, "nvvm.barrier.arrive without a barrier id (barrier 0 is the "
                            "block's, gpu.barrier)");
    prog.namedBarriers = true;
    instr.opc = Opc::NamedBarrier;
    instr.mode = 1;
    instr.a = use(arrive.getBarrierId());
    instr.b = use(arrive.getNumberOfThreads());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto fence = dyn_cast<NVVM::FenceProxyOp>(o)) {
    // The one proxy fence the kernels need: shared memory written by
    // ordinary stores or cp.async, read next by wgmma (the async proxy).
    if (fence.getKind() != NVVM::ProxyKind::async_shared ||
        fence.getSpace() != NVVM::SharedSpace::shared_cta)
      return unsupported(o, "nvvm.fence.proxy kind (only async.shared::cta)");
    instr.opc = Opc::ProxyFence;
    emit(instr);
    return llvm::Error::success();
  }

  return std::nullopt;
}

llvm::Error Decoder::decodeWgmma(NVVM::WgmmaMmaAsyncOp op) {
  NVVM::MMAShapeAttr shape = op.getShape();
  WgmmaInfo info;
  info.n = int(shape.getN());
  if (shape.getM() != 64 || shape.getK() != 16 || info.n < 8 || info.n > 256 || info.n % 8)
    return unsupported(op, "wgmma shape (only m64nNk16, N a multiple of 8 up to 256)");
  if (op.getTypeA() != op.getTypeB() ||
      (op.getTypeA() != NVVM::WGMMATypes::f16 && op.getTypeA() != NVVM::WGMMATypes::bf16))
    return unsupported(op, "wgmma operand types (only f16 or bf16, both alike)");
  if (op.getTypeD() != NVVM::WGMMATypes::f32)
    return unsupported(op, "wgmma accumulator type (only f32)");
  if (op.getScaleA() != NVVM::WGMMAScaleIn::one || op.getScaleB() != NVVM::WGMMAScaleIn::one ||
      op.getSatfinite())
    return unsupported(op, "wgmma scale-in (only one) or satfinite");
  info.input = op.getTypeA() == NVVM::WGMMATypes::f16 ? ElementType::F16 : ElementType::BF16;
  // PTX's imm-trans-a/b: A <row> and B <col> are K-major.
  info.aKMajor = op.getLayoutA() == NVVM::MMALayout::row;
  info.bKMajor = op.getLayoutB() == NVVM::MMALayout::col;
  info.accumulate = op.getScaleD() == NVVM::WGMMAScaleOut::one;
  auto acc = analyzeType(op.getInouts().getType());
  if (!acc || acc->kind != TypeInfo::Vector || acc->elem != ElementType::F32 ||
      acc->lanes != uint32_t(info.n / 2) || op.getResults().getType() != op.getInouts().getType())
    return unsupported(op, "wgmma accumulator (a struct of N/2 f32)");
  Instr instr;
  instr.opc = Opc::Wgmma;
  instr.op = op;
  instr.a = use(op.getDescriptorA());
  instr.b = use(op.getDescriptorB());
  instr.c = use(op.getInouts());
  instr.ty = info.input;
  instr.rty = ElementType::F32;
  instr.lanes = acc->lanes;
  auto res = define(op.getResults(), op);
  if (!res)
    return res.takeError();
  instr.res = *res;
  instr.aux = uint32_t(prog.wgmmas.size());
  prog.wgmmas.push_back(info);
  emit(instr);
  return llvm::Error::success();
}

llvm::Error Decoder::decodeMma(nvgpu::MmaSyncOp op) {
  auto shape = op.getMmaShapeAsArray();
  auto aType = cast<VectorType>(op.getMatrixA().getType());
  auto bType = cast<VectorType>(op.getMatrixB().getType());
  auto cType = cast<VectorType>(op.getMatrixC().getType());
  MmaInfo info;
  info.config.m = int(shape[0]);
  info.config.n = int(shape[1]);
  info.config.k = int(shape[2]);
  Type aElem = aType.getElementType(), cElem = cType.getElementType();
  if (aElem.isF16())
    info.config.input = MmaInputType::F16;
  else if (aElem.isBF16())
    info.config.input = MmaInputType::BF16;
  else if (aElem.isF32())
    info.config.input = MmaInputType::TF32;
  else
    return unsupported(op, "mma.sync operand type");
  if (bType.getElementType() != aElem)
    return unsupported(op, "mma.sync operand types");
  if (cElem.isF16() && info.config.input == MmaInputType::F16)
    info.f16Accumulator = true;
  else if (cElem.isF32())
    info.f16Accumulator = false;
  else
    return unsupported(op, "mma.sync accumulator type");
  auto sizeA = info.config.fragmentSizeA(), sizeB = info.config.fragmentSizeB();
  if (!sizeA || !sizeB)
    return unsupported(op, "mma.sync shape");
  if (aType.getNumElements() != *sizeA || bType.getNumElements() != *sizeB ||
      cType.getNumElements() != info.config.fragmentSizeC() || op.getType() != cType)
    return unsupported(op, "mma.sync fragment vector shapes");
  Instr instr;
  instr.opc = Opc::MmaSync;
  instr.op = op;
  instr.a = use(op.getMatrixA());
  instr.b = use(op.getMatrixB());
  instr.c = use(op.getMatrixC());
  instr.ty = *getElementType(aElem);
  instr.rty = *getElementType(cElem);
  auto res = define(op.getResult(), op);
  if (!res)
    return res.takeError();
  instr.res = *res;
  instr.aux = uint32_t(prog.mmas.size());
  prog.mmas.push_back(info);
  emit(instr);
  return llvm::Error::success();
}

std::optional<llvm::Error> Decoder::decodeAsyncTransferOp(Operation &op) {
  Operation *o = &op;
  Instr instr;
  instr.op = o;
  auto predicateOf = [&](Value predicate) {
    return int64_t(predicate ? use(predicate) : kNoSlot);
  };
  // A tensor map parameter seen as its nvgpu descriptor type.
  if (auto cast = dyn_cast<UnrealizedConversionCastOp>(o)) {
    if (cast.getNumOperands() != 1 || cast.getNumResults() != 1 ||
        !isa<LLVM::LLVMPointerType>(cast.getOperand(0).getType()) ||
        !isa<nvgpu::TensorMapDescriptorType>(cast.getResult(0).getType()))
      return unsupported(o, "unrealized_conversion_cast (only !llvm.ptr to a tensor map "
                            "descriptor)");
    alias(cast.getResult(0), cast.getOperand(0));
    return llvm::Error::success();
  }
  if (auto create = dyn_cast<nvgpu::MBarrierCreateOp>(o)) {
    auto slot = define(create.getBarriers(), o);
    if (!slot)
      return slot.takeError();
    // The group's index, the same in every thread: the barriers live in the
    // block's shared memory.
    prog.constants.push_back({*slot, uint64_t(prog.mbarrierGroups.size())});
    prog.mbarrierGroups.push_back(uint32_t(create.getBarriers().getType().getNumBarriers()));
    return llvm::Error::success();
  }
  if (auto init = dyn_cast<nvgpu::MBarrierInitOp>(o)) {
    instr.opc = Opc::MbarrierInit;
    instr.a = use(init.getBarriers());
    instr.b = use(init.getMbarId());
    instr.c = use(init.getCount());
    instr.imm = predicateOf(init.getPredicate());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto arrive = dyn_cast<nvgpu::MBarrierArriveExpectTxOp>(o)) {
    instr.opc = Opc::MbarrierArrive;
    instr.a = use(arrive.getBarriers());
    instr.b = use(arrive.getMbarId());
    instr.c = use(arrive.getTxcount());
    instr.imm = predicateOf(arrive.getPredicate());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto arrive = dyn_cast<nvgpu::MBarrierArriveOp>(o)) {
    instr.opc = Opc::MbarrierArrive;
    instr.a = use(arrive.getBarriers());
    instr.b = use(arrive.getMbarId());
    instr.imm = int64_t(kNoSlot);
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  // Clusters: the cluster barrier, and arrivals on a block's mbarrier by
  // its address (nvgpu.mbarrier.get, then llvm.inttoptr and nvvm.mapa).
  if (isa<NVVM::ClusterArriveOp>(o)) {
    prog.clusterBarriers = true;
    instr.opc = Opc::ClusterArrive;
    emit(instr);
    return llvm::Error::success();
  }
  if (isa<NVVM::ClusterArriveRelaxedOp>(o)) {
    prog.clusterBarriers = true;
    instr.opc = Opc::ClusterArrive;
    instr.mode = 1;
    emit(instr);
    return llvm::Error::success();
  }
  if (isa<NVVM::ClusterWaitOp>(o)) {
    prog.clusterBarriers = true;
    instr.opc = Opc::ClusterWait;
    emit(instr);
    return llvm::Error::success();
  }
  if (isa<NVVM::FenceMbarrierInitOp>(o)) {
    instr.opc = Opc::FenceMbarrierInit;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto get = dyn_cast<nvgpu::MBarrierGetOp>(o)) {
    instr.opc = Opc::MbarrierGet;
    instr.a = use(get.getBarriers());
    instr.b = use(get.getMbarId());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto cast = dyn_cast<LLVM::IntToPtrOp>(o)) {
    auto pointer = dyn_cast<LLVM::LLVMPointerType>(cast.getType());
    if (!pointer || pointer.getAddressSpace() != 3)
      return unsupported(o, "llvm.inttoptr (only to !llvm.ptr<3>, of an mbarrier.get address)");
    alias(cast.getResult(), cast.getArg());
    return llvm::Error::success();
  }
  if (auto mapa = dyn_cast<NVVM::MapaOp>(o)) {
    auto from = cast<LLVM::LLVMPointerType>(mapa.getA().getType());
    auto to = cast<LLVM::LLVMPointerType>(mapa.getRes().getType());
    if (from.getAddressSpace() != 3 || to.getAddressSpace() != 7)
      return unsupported(o, "nvvm.mapa (only !llvm.ptr<3> to !llvm.ptr<7>)");
    instr.opc = Opc::Mapa;
    instr.a = use(mapa.getA());
    instr.b = use(mapa.getB());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto arrive = dyn_cast<NVVM::MBarrierArriveOp>(o)) {
    auto pointer = cast<LLVM::LLVMPointerType>(arrive.getAddr().getType());
    if (pointer.getAddressSpace() != 3 && pointer.getAddressSpace() != 7)
      return unsupported(o, "nvvm.mbarrier.arrive (only on a shared or shared::cluster "
                            "address)");
    if (o->getNumResults() && !o->getResult(0).use_empty())
      return unsupported(o, "nvvm.mbarrier.arrive's state result (unused only)");
    if (arrive.getRelaxed())
      return unsupported(o, "relaxed nvvm.mbarrier.arrive (its ordering is not modeled)");
    instr.opc = Opc::PtrArrive;
    instr.a = use(arrive.getAddr());
    instr.b = arrive.getCount() ? use(arrive.getCount()) : kNoSlot;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto wait = dyn_cast<nvgpu::MBarrierTryWaitParityOp>(o)) {
    instr.opc = Opc::MbarrierWait;
    instr.a = use(wait.getBarriers());
    instr.b = use(wait.getMbarId());
    instr.c = use(wait.getPhaseParity());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto load = dyn_cast<nvgpu::TmaAsyncLoadOp>(o)) {
    auto descType = load.getTensorMapDescriptor().getType();
    MemRefType box = descType.getTensor();
    auto elem = getElementType(box.getElementType());
    if (!elem || !box.hasStaticShape() || box.getRank() > 5 ||
        descType.getInterleave() != nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE)
      return unsupported(o, "tensor map descriptor (static box of rank <= 5, no interleave)");
    if (!isWorkgroupMemref(load.getDst().getType()))
      return unsupported(o, "nvgpu.tma.async.load destination (must be workgroup memory)");
    TmaLoadInfo info;
    info.type = *elem;
    for (int64_t d = box.getRank() - 1; d >= 0; --d)
      info.box.push_back(box.getDimSize(d));
    switch (descType.getSwizzle()) {
    case nvgpu::TensorMapSwizzleKind::SWIZZLE_NONE:
      info.swizzle = int(TmaSwizzle::None);
      break;
    case nvgpu::TensorMapSwizzleKind::SWIZZLE_32B:
      info.swizzle = int(TmaSwizzle::B32);
      break;
    case nvgpu::TensorMapSwizzleKind::SWIZZLE_64B:
      info.swizzle = int(TmaSwizzle::B64);
      break;
    case nvgpu::TensorMapSwizzleKind::SWIZZLE_128B:
      info.swizzle = int(TmaSwizzle::B128);
      break;
    }
    info.nanFill = descType.getOob() == nvgpu::TensorMapOOBKind::OOB_NAN;
    if (load.getCoordinates().size() != info.box.size())
      return unsupported(o, "nvgpu.tma.async.load coordinates (one per box dimension)");
    info.coords = pushSlots(load.getCoordinates());
    info.dst.memref = use(load.getDst());
    noteWrite(load.getDst());
    if (load.getPredicate())
      info.predicate = use(load.getPredicate());
    if (load.getMulticastMask())
      info.multicast = use(load.getMulticastMask());
    instr.opc = Opc::TmaLoad;
    instr.a = use(load.getTensorMapDescriptor());
    instr.b = use(load.getBarriers());
    instr.c = use(load.getMbarId());
    instr.aux = uint32_t(prog.tmaLoads.size());
    prog.tmaLoads.push_back(info);
    emit(instr);
    return llvm::Error::success();
  }
  return std::nullopt;
}
