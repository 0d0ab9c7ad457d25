//===- DecodeMemory.cpp - decoding of memref ops and vector accesses ------===//
//
// Loads and stores (memref and vector, transfer ops included) become
// MemAccess entries; allocas and subviews get a per-thread descriptor block
// (a "producer"); casts are renamings. Every memref value is traced back to
// the parameter it views where possible, so that buffers bound only to
// read-only parameters need no race records.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::optional<llvm::Error> Decoder::decodeMemoryOp(Operation &op) {
  Operation *o = &op;

  // Pure renamings.
  if (auto cast = dyn_cast<memref::CastOp>(o)) {
    alias(cast.getResult(), cast.getSource());
    propagateParam(cast.getResult(), cast.getSource());
    return llvm::Error::success();
  }
  if (auto assume = dyn_cast<memref::AssumeAlignmentOp>(o)) {
    alias(assume.getResult(), assume.getMemref());
    propagateParam(assume.getResult(), assume.getMemref());
    return llvm::Error::success();
  }

  if (auto base = dyn_cast<gpu::DynamicSharedMemoryOp>(o))
    return decodeDynamicSharedMemory(base);
  if (auto view = dyn_cast<memref::ViewOp>(o))
    return decodeDynamicSharedView(view);

  Instr instr;
  instr.op = o;

  if (auto load = dyn_cast<memref::LoadOp>(o)) {
    MemAccess access;
    if (llvm::Error err = decodeMemAccess(o, load.getMemref(), load.getIndices(), access))
      return err;
    instr.ty = instr.rty = *getElementType(load.getType());
    if (llvm::Error err = defineResult(instr))
      return err;
    access.value = instr.res;
    return emitAccess(instr, Opc::Load, access);
  }
  if (auto store = dyn_cast<memref::StoreOp>(o)) {
    MemAccess access;
    if (llvm::Error err = decodeMemAccess(o, store.getMemref(), store.getIndices(), access))
      return err;
    instr.ty = *getElementType(store.getValueToStore().getType());
    access.value = use(store.getValueToStore());
    noteWrite(store.getMemref());
    return emitAccess(instr, Opc::Store, access);
  }
  if (auto load = dyn_cast<vector::LoadOp>(o)) {
    if (load.getVectorType().getRank() != 1 || load.getMemRefType().getRank() < 1)
      return unsupported(o, "vector.load form (only 1-D vectors)");
    MemAccess access;
    if (llvm::Error err = decodeMemAccess(o, load.getBase(), load.getIndices(), access))
      return err;
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.ty = instr.rty = *getElementType(load.getVectorType().getElementType());
    access.value = instr.res;
    access.lanes = uint32_t(load.getVectorType().getNumElements());
    return emitAccess(instr, Opc::Load, access);
  }
  if (auto store = dyn_cast<vector::StoreOp>(o)) {
    if (store.getVectorType().getRank() != 1 || store.getMemRefType().getRank() < 1)
      return unsupported(o, "vector.store form (only 1-D vectors)");
    MemAccess access;
    if (llvm::Error err = decodeMemAccess(o, store.getBase(), store.getIndices(), access))
      return err;
    instr.ty = *getElementType(store.getVectorType().getElementType());
    access.value = use(store.getValueToStore());
    access.lanes = uint32_t(store.getVectorType().getNumElements());
    noteWrite(store.getBase());
    return emitAccess(instr, Opc::Store, access);
  }
  if (auto read = dyn_cast<vector::TransferReadOp>(o)) {
    if (read.getVectorType().getRank() != 1 || !isa<MemRefType>(read.getBase().getType()) ||
        !read.getPermutationMap().isMinorIdentity() ||
        read.getPermutationMap().getNumResults() != 1)
      return unsupported(o, "vector.transfer_read form (only 1-D minor identity on memrefs)");
    MemAccess access;
    if (llvm::Error err = decodeMemAccess(o, read.getBase(), read.getIndices(), access))
      return err;
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.ty = instr.rty = *getElementType(read.getVectorType().getElementType());
    access.value = instr.res;
    access.lanes = uint32_t(read.getVectorType().getNumElements());
    access.pad = use(read.getPadding());
    if (read.getMask())
      access.mask = use(read.getMask());
    access.inBounds = read.getInBoundsValues()[0];
    return emitAccess(instr, Opc::TransferRead, access);
  }
  if (auto write = dyn_cast<vector::TransferWriteOp>(o)) {
    if (write.getVectorType().getRank() != 1 || !isa<MemRefType>(write.getBase().getType()) ||
        !write.getPermutationMap().isMinorIdentity() ||
        write.getPermutationMap().getNumResults() != 1)
      return unsupported(o, "vector.transfer_write form (only 1-D minor identity on memrefs)");
    MemAccess access;
    if (llvm::Error err = decodeMemAccess(o, write.getBase(), write.getIndices(), access))
      return err;
    instr.ty = *getElementType(write.getVectorType().getElementType());
    access.value = use(write.getVector());
    access.lanes = uint32_t(write.getVectorType().getNumElements());
    if (write.getMask())
      access.mask = use(write.getMask());
    access.inBounds = write.getInBoundsValues()[0];
    noteWrite(write.getBase());
    return emitAccess(instr, Opc::TransferWrite, access);
  }
  if (auto alloca = dyn_cast<memref::AllocaOp>(o)) {
    instr.opc = Opc::Alloca;
    std::string loc;
    llvm::raw_string_ostream os(loc);
    o->getLoc().print(os);
    if (llvm::Error err = decodeAlloca(o, alloca.getType(), alloca.getDynamicSizes(),
                                       alloca.getResult(), "memref.alloca at " + loc, instr.aux))
      return err;
    instr.res = use(alloca.getResult());
    emit(instr);
    return llvm::Error::success();
  }
  if (auto subview = dyn_cast<memref::SubViewOp>(o)) {
    SubviewInfo info;
    info.source = use(subview.getSource());
    info.sourceRank = uint8_t(subview.getSourceType().getRank());
    info.resultRank = uint8_t(subview.getType().getRank());
    if (!analyzeType(subview.getType()) || !analyzeType(subview.getSourceType()))
      return unsupportedType(o, subview.getType());
    auto offsets = subview.getMixedOffsets(), sizes = subview.getMixedSizes(),
         strides = subview.getMixedStrides();
    llvm::SmallBitVector dropped = subview.getDroppedDims();
    for (unsigned d = 0; d < info.sourceRank; ++d) {
      auto off = mixed(offsets[d], o), size = mixed(sizes[d], o), stride = mixed(strides[d], o);
      if (!off)
        return off.takeError();
      if (!size)
        return size.takeError();
      if (!stride)
        return stride.takeError();
      info.offsets[d] = *off;
      info.sizes[d] = *size;
      info.strides[d] = *stride;
      info.dropped[d] = dropped.test(d);
    }
    info.producer = prog.numProducers++;
    propagateParam(subview.getResult(), subview.getSource());
    instr.opc = Opc::Subview;
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.aux = uint32_t(prog.subviews.size());
    prog.subviews.push_back(info);
    emit(instr);
    return llvm::Error::success();
  }
  if (auto pointer = dyn_cast<memref::ExtractAlignedPointerAsIndexOp>(o)) {
    // Only dynamic shared memory has an address in the model (the wgmma
    // descriptors are built from it).
    if (!isWorkgroupMemref(pointer.getSource().getType()))
      return unsupported(o, "memref.extract_aligned_pointer_as_index source (only views of "
                            "dynamic shared memory have an address here)");
    instr.opc = Opc::SharedAddress;
    instr.a = use(pointer.getSource());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto dim = dyn_cast<memref::DimOp>(o)) {
    instr.opc = Opc::Dim;
    instr.a = use(dim.getSource());
    instr.b = use(dim.getIndex());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }

  return std::nullopt;
}

void Decoder::noteWrite(Value memref) {
  auto it = paramOf.find(memref);
  if (it != paramOf.end()) {
    prog.memrefParamWritten[it->second] = true;
    return;
  }
  // Not traceable to one parameter (e.g. a memref yielded by scf.if):
  // assume it may be any of them, unless it is local memory.
  if (isa_and_nonnull<memref::AllocaOp>(memref.getDefiningOp()))
    return;
  if (auto arg = dyn_cast<BlockArgument>(memref))
    if (isa<gpu::GPUFuncOp>(arg.getOwner()->getParentOp()))
      return; // an attribution
  prog.memrefParamWritten.assign(prog.memrefParamWritten.size(), true);
}

llvm::Error Decoder::decodeMemAccess(Operation *op, Value memref, ValueRange indices,
                                     MemAccess &access) {
  auto type = dyn_cast<MemRefType>(memref.getType());
  if (!type)
    return unsupportedType(op, memref.getType());
  if (!analyzeType(type))
    return unsupportedType(op, type);
  if (indices.size() != size_t(type.getRank()))
    return unsupported(op, "index count");
  access.memref = use(memref);
  access.rank = uint8_t(type.getRank());
  access.indices = pushSlots(indices);
  return llvm::Error::success();
}

llvm::Error Decoder::decodeAlloca(Operation *op, MemRefType type, ValueRange dynamicSizes,
                                  Value result, std::string name, uint32_t &allocaIndex) {
  auto info = analyzeType(type);
  if (!info || !type.getLayout().isIdentity())
    return unsupportedType(op, type);
  AllocaInfo alloca;
  alloca.type = info->elem;
  alloca.rank = uint8_t(type.getRank());
  unsigned dynamicIndex = 0;
  for (unsigned d = 0; d < alloca.rank; ++d) {
    if (type.isDynamicDim(d))
      alloca.sizes[d].slot = use(dynamicSizes[dynamicIndex++]);
    else
      alloca.sizes[d].value = type.getDimSize(d);
  }
  alloca.producer = prog.numProducers++;
  alloca.name = std::move(name);
  auto slot = define(result, op);
  if (!slot)
    return slot.takeError();
  alloca.slot = *slot;
  allocaIndex = uint32_t(prog.allocas.size());
  prog.allocas.push_back(std::move(alloca));
  return llvm::Error::success();
}

llvm::Error Decoder::emitAccess(Instr &instr, Opc opc, const MemAccess &access) {
  instr.opc = opc;
  instr.aux = uint32_t(prog.accesses.size());
  prog.accesses.push_back(access);
  emit(instr);
  return llvm::Error::success();
}

// Dynamic shared memory is modeled through its views only: each
// memref.view at a constant byte offset becomes a shared buffer of its own,
// placed (for alignment checks) where it lies in a 16-byte aligned base, and
// checked against the bytes the launch provides (SimtOptions). Views must
// not overlap; no other use of the base is modeled.
llvm::Error Decoder::decodeDynamicSharedMemory(gpu::DynamicSharedMemoryOp base) {
  for (Operation *user : base->getUsers()) {
    auto view = dyn_cast<memref::ViewOp>(user);
    if (!view || !getConstantIntValue(view.getByteShift()) || !view.getSizes().empty())
      return unsupported(user, "use of gpu.dynamic_shared_memory (only memref.view at a "
                               "constant byte offset to a static shape)");
  }
  dynamicBases.insert(base.getResult());
  return llvm::Error::success();
}

llvm::Error Decoder::decodeDynamicSharedView(memref::ViewOp view) {
  if (!dynamicBases.contains(view.getSource()))
    return unsupported(view, "memref.view source (only gpu.dynamic_shared_memory)");
  MemRefType type = view.getType();
  if (!type.hasStaticShape() || !type.getLayout().isIdentity() || !analyzeType(type))
    return unsupportedType(view, type);
  int64_t offset = *getConstantIntValue(view.getByteShift());
  std::optional<ElementType> elem = getElementType(type.getElementType());
  int64_t bytes = type.getNumElements() * int64_t((getBitWidth(*elem) + 7) / 8);
  if (offset < 0)
    return unsupported(view, "negative byte offset");
  for (auto [begin, end] : dynamicRanges)
    if (offset < end && begin < offset + bytes)
      return unsupported(view, llvm::formatv("overlap of dynamic shared views [{0}, {1}) and "
                                             "[{2}, {3})",
                                             begin, end, offset, offset + bytes));
  dynamicRanges.push_back({offset, offset + bytes});
  auto slot = define(view.getResult(), view);
  if (!slot)
    return slot.takeError();
  MemrefParam param{*slot, *elem, uint8_t(type.getRank()), {}};
  for (unsigned d = 0; d < param.rank; ++d)
    param.shape[d] = type.getDimSize(d);
  // The base is 16-byte aligned (loss-extern-dynamic-shared-memory); a view
  // is as aligned as its offset allows.
  param.align = offset == 0 ? prog.dynamicSharedAlign
                            : std::min<int64_t>(prog.dynamicSharedAlign, offset & -offset);
  param.dynamicOffset = offset;
  prog.workgroup.push_back(param);
  return llvm::Error::success();
}
