//===- DecodeControl.cpp - decoding of gpu.func, regions, ids, barriers ---===//
//
// The kernel's structure: parameters and attributions, single-block regions
// laid out inline after the scf op that owns them, scf.yield as copies into
// the owner's result slots; plus the gpu id ops and gpu.barrier. Unstructured
// control flow (more than one block) is rejected by naming its branch.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::optional<llvm::Error> Decoder::decodeControlOp(Operation &op) {
  Operation *o = &op;
  Instr instr;
  instr.op = o;

  // GPU ids.
  auto idOp = [&](Opc opc, gpu::Dimension dim) -> llvm::Error {
    instr.opc = opc;
    instr.mode = uint8_t(dim);
    instr.rty = ElementType::Index;
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  };
  if (auto id = dyn_cast<gpu::ThreadIdOp>(o))
    return idOp(Opc::ThreadId, id.getDimension());
  if (auto id = dyn_cast<gpu::BlockIdOp>(o))
    return idOp(Opc::BlockId, id.getDimension());
  if (auto id = dyn_cast<gpu::BlockDimOp>(o))
    return idOp(Opc::BlockDim, id.getDimension());
  if (auto id = dyn_cast<gpu::GridDimOp>(o))
    return idOp(Opc::GridDim, id.getDimension());
  if (auto id = dyn_cast<gpu::GlobalIdOp>(o))
    return idOp(Opc::GlobalId, id.getDimension());
  if (auto id = dyn_cast<gpu::ClusterIdOp>(o))
    return idOp(Opc::ClusterId, id.getDimension());
  if (auto id = dyn_cast<gpu::ClusterDimOp>(o))
    return idOp(Opc::ClusterDim, id.getDimension());
  if (auto id = dyn_cast<gpu::ClusterBlockIdOp>(o))
    return idOp(Opc::ClusterBlockId, id.getDimension());
  if (auto id = dyn_cast<gpu::ClusterDimBlocksOp>(o))
    return idOp(Opc::ClusterDimBlocks, id.getDimension());
  if (isa<gpu::LaneIdOp>(o))
    return idOp(Opc::LaneId, gpu::Dimension::x);
  if (isa<gpu::SubgroupIdOp>(o))
    return idOp(Opc::SubgroupId, gpu::Dimension::x);
  if (isa<gpu::NumSubgroupsOp>(o))
    return idOp(Opc::NumSubgroups, gpu::Dimension::x);
  if (auto size = dyn_cast<gpu::SubgroupSizeOp>(o)) {
    auto slot = define(size.getResult(), o);
    if (!slot)
      return slot.takeError();
    prog.constants.push_back({*slot, 32});
    return llvm::Error::success();
  }

  if (isa<gpu::BarrierOp>(o)) {
    instr.opc = Opc::Barrier;
    emit(instr);
    return llvm::Error::success();
  }

  if (auto forOp = dyn_cast<scf::ForOp>(o))
    return decodeFor(forOp);
  if (auto ifOp = dyn_cast<scf::IfOp>(o))
    return decodeIf(ifOp);
  if (auto whileOp = dyn_cast<scf::WhileOp>(o))
    return decodeWhile(whileOp);

  return std::nullopt;
}

llvm::Error Decoder::decodeBlockBody(Block &block) {
  for (Operation &op : block.without_terminator())
    if (llvm::Error err = decodeOp(op))
      return err;
  return llvm::Error::success();
}

llvm::Error Decoder::decodeRegion(Region &region, llvm::ArrayRef<uint32_t> yieldDsts,
                                  InstrRange &range) {
  range.begin = uint32_t(prog.instrs.size());
  if (region.empty()) {
    range.end = range.begin;
    return llvm::Error::success();
  }
  if (!region.hasOneBlock()) // unstructured control flow: name the branch
    return unsupportedOp(region.front().getTerminator());
  ++depth;
  prog.maxDepth = std::max(prog.maxDepth, depth);
  Block &block = region.front();
  if (llvm::Error err = decodeBlockBody(block))
    return err;
  Operation *terminator = block.getTerminator();
  if (auto yield = dyn_cast<scf::YieldOp>(terminator)) {
    if (yield.getNumOperands() != yieldDsts.size())
      return unsupported(terminator, "scf.yield arity");
    if (!yieldDsts.empty()) {
      Instr instr;
      instr.opc = Opc::Yield;
      instr.op = terminator;
      instr.aux = makeCopySet(yield.getOperands(), yieldDsts);
      emit(instr);
    }
  } else if (!isa<scf::ConditionOp>(terminator)) {
    return unsupportedOp(terminator);
  }
  --depth;
  range.end = uint32_t(prog.instrs.size());
  return llvm::Error::success();
}

llvm::Error Decoder::decodeFor(scf::ForOp op) {
  ForInfo info;
  info.lb = use(op.getLowerBound());
  info.ub = use(op.getUpperBound());
  info.step = use(op.getStep());
  auto ivType = getElementType(op.getInductionVar().getType());
  if (!ivType || isFloatType(*ivType))
    return unsupportedType(op, op.getInductionVar().getType());
  info.ivType = *ivType;
  info.unsignedCmp = op.getUnsignedCmp();
  auto iv = define(op.getInductionVar(), op);
  if (!iv)
    return iv.takeError();
  info.iv = *iv;
  llvm::SmallVector<uint32_t> iterSlots;
  for (auto [arg, result] : llvm::zip_equal(op.getRegionIterArgs(), op.getResults())) {
    auto slot = define(arg, op);
    if (!slot)
      return slot.takeError();
    iterSlots.push_back(*slot);
    alias(result, arg); // results live where the last iteration left them
  }
  info.init = makeCopySet(op.getInitArgs(), iterSlots);
  Instr instr;
  instr.opc = Opc::For;
  instr.op = op;
  uint32_t index = emit(instr);
  if (llvm::Error err = decodeRegion(op.getRegion(), iterSlots, info.body))
    return err;
  finishNested(index);
  prog.instrs[index].aux = uint32_t(prog.fors.size());
  prog.fors.push_back(info);
  return llvm::Error::success();
}

llvm::Error Decoder::decodeIf(scf::IfOp op) {
  IfInfo info;
  info.cond = use(op.getCondition());
  llvm::SmallVector<uint32_t> resultSlots;
  for (Value result : op.getResults()) {
    auto slot = define(result, op);
    if (!slot)
      return slot.takeError();
    resultSlots.push_back(*slot);
  }
  Instr instr;
  instr.opc = Opc::If;
  instr.op = op;
  uint32_t index = emit(instr);
  if (llvm::Error err = decodeRegion(op.getThenRegion(), resultSlots, info.thenRegion))
    return err;
  if (llvm::Error err = decodeRegion(op.getElseRegion(), resultSlots, info.elseRegion))
    return err;
  finishNested(index);
  prog.instrs[index].aux = uint32_t(prog.ifs.size());
  prog.ifs.push_back(info);
  return llvm::Error::success();
}

llvm::Error Decoder::decodeWhile(scf::WhileOp op) {
  WhileInfo info;
  llvm::SmallVector<uint32_t> beforeSlots, afterSlots, resultSlots;
  for (Value arg : op.getBeforeArguments()) {
    auto slot = define(arg, op);
    if (!slot)
      return slot.takeError();
    beforeSlots.push_back(*slot);
  }
  info.init = makeCopySet(op.getInits(), beforeSlots);
  Instr instr;
  instr.opc = Opc::While;
  instr.op = op;
  uint32_t index = emit(instr);
  if (llvm::Error err = decodeRegion(op.getBefore(), {}, info.before))
    return err;
  scf::ConditionOp condition = op.getConditionOp();
  info.cond = use(condition.getCondition());
  for (Value arg : op.getAfterArguments()) {
    auto slot = define(arg, op);
    if (!slot)
      return slot.takeError();
    afterSlots.push_back(*slot);
  }
  for (Value result : op.getResults()) {
    auto slot = define(result, op);
    if (!slot)
      return slot.takeError();
    resultSlots.push_back(*slot);
  }
  info.toAfter = makeCopySet(condition.getArgs(), afterSlots);
  info.toResult = makeCopySet(condition.getArgs(), resultSlots);
  if (llvm::Error err = decodeRegion(op.getAfter(), beforeSlots, info.after))
    return err;
  finishNested(index);
  prog.instrs[index].aux = uint32_t(prog.whiles.size());
  prog.whiles.push_back(info);
  return llvm::Error::success();
}

llvm::Error Decoder::decodeFunc(gpu::GPUFuncOp func) {
  prog.name = func.getName().str();
  prog.func = func;
  // A kernel whose dynamic shared memory needs more than 16-byte alignment
  // says so (loss.dynamic_shared_align, TMA's swizzled stages); the
  // compiler's lowering gives its base that alignment.
  if (std::optional<llvm::ArrayRef<int32_t>> cluster = func.getKnownClusterSize()) {
    if (cluster->size() != 3)
      return unsupported(func, "known_cluster_size (three dimensions)");
    prog.knownClusterSize = {(*cluster)[0], (*cluster)[1], (*cluster)[2]};
  }
  if (auto align = func->getAttrOfType<IntegerAttr>("loss.dynamic_shared_align")) {
    if (align.getInt() < kDynamicSharedBaseAlign || !llvm::isPowerOf2_64(uint64_t(align.getInt())))
      return unsupported(func, "loss.dynamic_shared_align must be a power of two of at least 16");
    prog.dynamicSharedAlign = align.getInt();
  }
  Region &body = func.getBody();
  if (!body.hasOneBlock()) // unstructured control flow: name the branch
    return unsupportedOp(body.front().getTerminator());
  Block &entry = body.front();
  // The entry block also holds the attributions; the parameters come first.
  int64_t tensorMaps = 0;
  for (unsigned i = 0, e = func.getFunctionType().getNumInputs(); i < e; ++i) {
    BlockArgument arg = func.getArgument(i);
    auto info = analyzeType(arg.getType());
    auto pointer = dyn_cast<LLVM::LLVMPointerType>(arg.getType());
    const bool tensorMap =
        info && info->kind == TypeInfo::Handle && pointer && pointer.getAddressSpace() == 0;
    if (!info || info->kind == TypeInfo::Vector || info->kind == TypeInfo::Token ||
        (info->kind == TypeInfo::Handle && !tensorMap))
      return unsupportedType(func, arg.getType());
    // A tensor map must carry the mark loss-tensor-map-grid-constant passes
    // by value (else the hardware would get a pointer, not the map).
    if (tensorMap) {
      auto align = func.getArgAttrOfType<IntegerAttr>(i, "llvm.align");
      if (!align || align.getInt() != 64)
        return unsupported(func, "tensor map parameter without llvm.align = 64 (the mark "
                                 "loss-tensor-map-grid-constant passes by value)");
      ++tensorMaps;
    }
    auto slot = define(arg, func);
    if (!slot)
      return slot.takeError();
    if (info->kind == TypeInfo::Memref) {
      auto type = cast<MemRefType>(arg.getType());
      if (!type.getLayout().isIdentity())
        return unsupportedType(func, type);
      MemrefParam param{*slot, info->elem, uint8_t(type.getRank()), {}};
      for (unsigned d = 0; d < param.rank; ++d)
        param.shape[d] = type.getDimSize(d);
      paramOf[arg] = uint32_t(prog.memrefParams.size());
      prog.args.push_back({true, uint32_t(prog.memrefParams.size())});
      prog.memrefParams.push_back(param);
      prog.memrefParamWritten.push_back(false);
    } else {
      prog.args.push_back({false, uint32_t(prog.scalarParams.size())});
      prog.scalarParams.push_back({*slot, info->elem, tensorMap});
    }
  }
  auto declared = func->getAttrOfType<IntegerAttr>("loss.tensor_maps");
  if (tensorMaps != (declared ? declared.getInt() : 0))
    return unsupported(func, llvm::formatv("tensor map count: loss.tensor_maps says {0}, the "
                                           "parameters have {1}",
                                           declared ? declared.getInt() : 0, tensorMaps));
  for (auto [index, arg] : llvm::enumerate(func.getWorkgroupAttributions())) {
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type || !type.hasStaticShape() || !type.getLayout().isIdentity() || !analyzeType(type))
      return unsupportedType(func, arg.getType());
    auto slot = define(arg, func);
    if (!slot)
      return slot.takeError();
    MemrefParam param{*slot, *getElementType(type.getElementType()), uint8_t(type.getRank()), {}};
    for (unsigned d = 0; d < param.rank; ++d)
      param.shape[d] = type.getDimSize(d);
    if (auto align = dyn_cast_or_null<IntegerAttr>(func.getWorkgroupAttributionAttr(
            static_cast<unsigned>(index), LLVM::LLVMDialect::getAlignAttrName())))
      param.align = align.getInt();
    prog.workgroup.push_back(param);
  }
  unsigned privateIndex = 0;
  for (BlockArgument arg : func.getPrivateAttributions()) {
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type || !type.hasStaticShape())
      return unsupportedType(func, arg.getType());
    uint32_t index;
    if (llvm::Error err = decodeAlloca(
            func, type, {}, arg, "private attribution #" + std::to_string(privateIndex++), index))
      return err;
    prog.privateAttributions.push_back(index);
  }
  if (llvm::Error err = decodeBlockBody(entry))
    return err;
  if (!isa<gpu::ReturnOp>(entry.getTerminator()))
    return unsupportedOp(entry.getTerminator());
  return llvm::Error::success();
}
