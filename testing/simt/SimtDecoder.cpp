//===- SimtDecoder.cpp - gpu.func → interpreter instructions --------------===//
//
// Decoding resolves everything that does not depend on thread data once per
// kernel: SSA values become register slots, constants are hoisted into
// per-launch initializers, structured regions become instruction ranges,
// static shapes and lane permutations become tables. Every op and type the
// executor cannot run is rejected here, before any thread runs.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInterpreter.h"
#include "testing/simt/SimtProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::string lossjit::simt::detail::describeOp(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << op->getName() << "' at ";
  op->getLoc().print(os);
  return text;
}

namespace {

/// What a value of some type occupies in the register file.
struct TypeInfo {
  enum Kind { Scalar, Vector, Memref, Token } kind = Scalar;
  ElementType elem = ElementType::I1;
  uint32_t lanes = 1;
  llvm::SmallVector<int64_t, 4> shape; // vector or memref shape
};

std::optional<TypeInfo> analyzeType(Type type) {
  TypeInfo info;
  if (auto vector = dyn_cast<VectorType>(type)) {
    if (vector.isScalable())
      return std::nullopt;
    auto elem = getElementType(vector.getElementType());
    if (!elem)
      return std::nullopt;
    info.kind = TypeInfo::Vector;
    info.elem = *elem;
    info.lanes = uint32_t(vector.getNumElements());
    info.shape.assign(vector.getShape().begin(), vector.getShape().end());
    return info;
  }
  if (auto memref = dyn_cast<MemRefType>(type)) {
    auto elem = getElementType(memref.getElementType());
    if (!elem || memref.getRank() > int64_t(kMaxRank))
      return std::nullopt;
    info.kind = TypeInfo::Memref;
    info.elem = *elem;
    info.shape.assign(memref.getShape().begin(), memref.getShape().end());
    return info;
  }
  if (isa<nvgpu::DeviceAsyncTokenType>(type)) {
    info.kind = TypeInfo::Token;
    return info;
  }
  auto elem = getElementType(type);
  if (!elem)
    return std::nullopt;
  info.elem = *elem;
  return info;
}

bool isWorkgroupMemref(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  if (!memref)
    return false;
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(memref.getMemorySpace());
  if (space)
    return space.getValue() == gpu::AddressSpace::Workgroup;
  auto intSpace = dyn_cast_or_null<IntegerAttr>(memref.getMemorySpace());
  return intSpace && intSpace.getInt() == 3; // NVVM's shared address space
}

/// Elementwise ops that map one-to-one onto an opcode.
const llvm::StringMap<Opc> &elementwiseOps() {
  static const llvm::StringMap<Opc> table = {
      {"arith.addi", Opc::AddI},
      {"arith.subi", Opc::SubI},
      {"arith.muli", Opc::MulI},
      {"arith.divsi", Opc::DivSI},
      {"arith.divui", Opc::DivUI},
      {"arith.remsi", Opc::RemSI},
      {"arith.remui", Opc::RemUI},
      {"arith.ceildivsi", Opc::CeilDivSI},
      {"arith.ceildivui", Opc::CeilDivUI},
      {"arith.floordivsi", Opc::FloorDivSI},
      {"arith.andi", Opc::AndI},
      {"arith.ori", Opc::OrI},
      {"arith.xori", Opc::XOrI},
      {"arith.shli", Opc::ShLI},
      {"arith.shrsi", Opc::ShRSI},
      {"arith.shrui", Opc::ShRUI},
      {"arith.minsi", Opc::MinSI},
      {"arith.maxsi", Opc::MaxSI},
      {"arith.minui", Opc::MinUI},
      {"arith.maxui", Opc::MaxUI},
      {"math.absi", Opc::AbsI},
      {"arith.addf", Opc::AddF},
      {"arith.subf", Opc::SubF},
      {"arith.mulf", Opc::MulF},
      {"arith.divf", Opc::DivF},
      {"arith.remf", Opc::RemF},
      {"arith.maximumf", Opc::MaximumF},
      {"arith.minimumf", Opc::MinimumF},
      {"arith.maxnumf", Opc::MaxNumF},
      {"arith.minnumf", Opc::MinNumF},
      {"math.powf", Opc::PowF},
      {"math.copysign", Opc::CopySign},
      {"arith.negf", Opc::NegF},
      {"math.absf", Opc::AbsF},
      {"math.sqrt", Opc::Sqrt},
      {"math.rsqrt", Opc::Rsqrt},
      {"math.exp", Opc::Exp},
      {"math.exp2", Opc::Exp2},
      {"math.expm1", Opc::ExpM1},
      {"math.log", Opc::Log},
      {"math.log2", Opc::Log2},
      {"math.log1p", Opc::Log1p},
      {"math.tanh", Opc::Tanh},
      {"math.sin", Opc::Sin},
      {"math.cos", Opc::Cos},
      {"math.erf", Opc::Erf},
      {"math.floor", Opc::Floor},
      {"math.ceil", Opc::Ceil},
      {"math.round", Opc::Round},
      {"math.roundeven", Opc::RoundEven},
      {"math.trunc", Opc::Trunc},
      {"math.fma", Opc::Fma},
      {"vector.fma", Opc::Fma},
      {"arith.extsi", Opc::IntCastS},
      {"arith.trunci", Opc::IntCastS},
      {"arith.index_cast", Opc::IntCastS},
      {"arith.extui", Opc::IntCastU},
      {"arith.index_castui", Opc::IntCastU},
      {"arith.sitofp", Opc::SIToFP},
      {"arith.uitofp", Opc::UIToFP},
      {"arith.fptosi", Opc::FPToSI},
      {"arith.fptoui", Opc::FPToUI},
      {"arith.extf", Opc::FloatCast},
      {"arith.truncf", Opc::FloatCast},
      {"arith.bitcast", Opc::Bitcast},
  };
  return table;
}

class Decoder {
public:
  explicit Decoder(Program &prog) : prog(prog) {}

  llvm::Error decodeFunc(gpu::GPUFuncOp func);

private:
  Program &prog;
  llvm::DenseMap<Value, uint32_t> slotOf;
  llvm::DenseMap<Value, uint32_t> lanesOf;
  /// The memref parameter a memref value views (through casts, subviews).
  llvm::DenseMap<Value, uint32_t> paramOf;
  unsigned depth = 0;

  /// Records that the kernel may write through `memref`.
  void noteWrite(Value memref) {
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
  void propagateParam(Value result, Value source) {
    auto it = paramOf.find(source);
    if (it != paramOf.end())
      paramOf[result] = it->second;
  }

  llvm::Error unsupportedOp(Operation *op) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    op->getLoc().print(os);
    return llvm::createStringError("unsupported op '" +
                                   op->getName().getStringRef().str() +
                                   "' at " + loc);
  }
  llvm::Error unsupported(Operation *op, const llvm::Twine &what) {
    return llvm::createStringError("unsupported " + what.str() + " in " +
                                   describeOp(op));
  }
  llvm::Error unsupportedType(Operation *op, Type type) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << type;
    return unsupported(op, "type '" + text + "'");
  }

  /// Allocates slots for `value`.
  llvm::Expected<uint32_t> define(Value value, Operation *owner) {
    auto info = analyzeType(value.getType());
    if (!info)
      return unsupportedType(owner, value.getType());
    uint32_t lanes =
        info->kind == TypeInfo::Scalar || info->kind == TypeInfo::Vector
            ? info->lanes
            : 1;
    uint32_t slot = prog.numSlots;
    prog.numSlots += lanes;
    slotOf[value] = slot;
    lanesOf[value] = lanes;
    return slot;
  }
  void alias(Value value, Value existing) {
    slotOf[value] = slotOf.lookup(existing);
    lanesOf[value] = lanesOf.lookup(existing);
  }
  uint32_t use(Value value) {
    auto it = slotOf.find(value);
    assert(it != slotOf.end() && "use before definition");
    return it->second;
  }
  uint32_t lanes(Value value) { return lanesOf.lookup(value); }

  uint32_t emit(const Instr &instr) {
    prog.instrs.push_back(instr);
    prog.instrs.back().next = uint32_t(prog.instrs.size());
    return uint32_t(prog.instrs.size() - 1);
  }
  void finishNested(uint32_t index) {
    prog.instrs[index].next = uint32_t(prog.instrs.size());
  }

  uint32_t pushSlots(ValueRange values) {
    uint32_t begin = uint32_t(prog.slots.size());
    for (Value v : values)
      prog.slots.push_back(use(v));
    return begin;
  }

  uint32_t makeCopySet(ValueRange sources, llvm::ArrayRef<uint32_t> dsts);
  llvm::Expected<MixedInt> mixed(OpFoldResult value, Operation *op);
  llvm::Error decodeBlockBody(Block &block);
  llvm::Error decodeRegion(Region &region, llvm::ArrayRef<uint32_t> yieldDsts,
                           InstrRange &range);
  llvm::Error decodeOp(Operation &op);
  llvm::Error decodeElementwise(Operation &op, Opc opc);
  llvm::Error decodeConstant(Operation &op, Attribute attr);
  llvm::Error decodeMemAccess(Operation *op, Value memref, ValueRange indices,
                              MemAccess &access);
  llvm::Error decodeAlloca(Operation *op, MemRefType type,
                           ValueRange dynamicSizes, Value result,
                           std::string name, uint32_t &allocaIndex);
  llvm::Error decodeFor(scf::ForOp op);
  llvm::Error decodeIf(scf::IfOp op);
  llvm::Error decodeWhile(scf::WhileOp op);
  llvm::Error decodePosition(Operation *op, llvm::ArrayRef<OpFoldResult> pos,
                             llvm::ArrayRef<int64_t> shape, uint32_t chunk,
                             uint32_t &index);
  llvm::Error decodeMma(nvgpu::MmaSyncOp op);
};

uint32_t Decoder::makeCopySet(ValueRange sources,
                              llvm::ArrayRef<uint32_t> dsts) {
  CopySet set;
  set.begin = uint32_t(prog.copies.size());
  uint32_t totalLanes = 0;
  for (auto [src, dst] : llvm::zip_equal(sources, dsts)) {
    uint32_t s = use(src);
    if (s == dst)
      continue; // the value already lives in its destination
    prog.copies.push_back({s, dst, lanes(src)});
    totalLanes += lanes(src);
  }
  set.count = uint32_t(prog.copies.size()) - set.begin;
  // Copies happen simultaneously (scf.yield %b, %a swaps): when a source
  // range overlaps a destination range, stage every source first.
  for (uint32_t i = 0; i < set.count && !set.viaTemp; ++i)
    for (uint32_t j = 0; j < set.count; ++j) {
      const Copy &a = prog.copies[set.begin + i];
      const Copy &b = prog.copies[set.begin + j];
      if (i != j && a.src < b.dst + b.lanes && b.dst < a.src + a.lanes) {
        set.viaTemp = true;
        break;
      }
    }
  prog.maxCopyLanes = std::max(prog.maxCopyLanes, totalLanes);
  prog.copySets.push_back(set);
  return uint32_t(prog.copySets.size() - 1);
}

llvm::Expected<MixedInt> Decoder::mixed(OpFoldResult value, Operation *op) {
  MixedInt result;
  if (auto attr = dyn_cast<Attribute>(value)) {
    auto intAttr = dyn_cast<IntegerAttr>(attr);
    if (!intAttr)
      return unsupported(op, "non-integer static operand");
    result.value = intAttr.getInt();
  } else {
    result.slot = use(cast<Value>(value));
  }
  return result;
}

llvm::Error Decoder::decodeBlockBody(Block &block) {
  for (Operation &op : block.without_terminator())
    if (llvm::Error err = decodeOp(op))
      return err;
  return llvm::Error::success();
}

llvm::Error Decoder::decodeRegion(Region &region,
                                  llvm::ArrayRef<uint32_t> yieldDsts,
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

llvm::Error Decoder::decodeElementwise(Operation &op, Opc opc) {
  if (op.getNumResults() != 1 || op.getNumOperands() < 1 ||
      op.getNumOperands() > 3)
    return unsupportedOp(&op);
  auto resultInfo = analyzeType(op.getResult(0).getType());
  auto operandInfo = analyzeType(op.getOperand(0).getType());
  if (!resultInfo || resultInfo->kind > TypeInfo::Vector)
    return unsupportedType(&op, op.getResult(0).getType());
  if (!operandInfo || operandInfo->kind > TypeInfo::Vector)
    return unsupportedType(&op, op.getOperand(0).getType());
  Instr instr;
  instr.opc = opc;
  instr.op = &op;
  instr.ty = operandInfo->elem;
  instr.rty = resultInfo->elem;
  instr.width = uint8_t(getBitWidth(instr.ty));
  instr.lanes = resultInfo->lanes;
  bool isFloatOp = opc >= Opc::AddF && opc <= Opc::Fma;
  if (isFloatOp && !isFloatType(instr.ty))
    return unsupportedType(&op, op.getOperand(0).getType());
  bool isIntOp = opc >= Opc::AddI && opc <= Opc::AbsI;
  if (isIntOp && isFloatType(instr.ty))
    return unsupportedType(&op, op.getOperand(0).getType());
  if (auto truncf = dyn_cast<arith::TruncFOp>(op))
    if (auto mode = truncf.getRoundingmode();
        mode && *mode != arith::RoundingMode::to_nearest_even)
      return unsupported(&op, "rounding mode");
  if (opc == Opc::Bitcast && getBitWidth(instr.ty) != getBitWidth(instr.rty))
    return unsupportedType(&op, op.getResult(0).getType());
  Value operands[3];
  for (unsigned i = 0; i < op.getNumOperands(); ++i)
    operands[i] = op.getOperand(i);
  instr.a = use(operands[0]);
  if (op.getNumOperands() > 1)
    instr.b = use(operands[1]);
  if (op.getNumOperands() > 2)
    instr.c = use(operands[2]);
  auto res = define(op.getResult(0), &op);
  if (!res)
    return res.takeError();
  instr.res = *res;
  emit(instr);
  return llvm::Error::success();
}

llvm::Error Decoder::decodeConstant(Operation &op, Attribute attr) {
  Value result = op.getResult(0);
  auto info = analyzeType(result.getType());
  if (!info || info->kind > TypeInfo::Vector)
    return unsupportedType(&op, result.getType());
  auto slot = define(result, &op);
  if (!slot)
    return slot.takeError();
  ElementType elem = info->elem;
  auto word = [&](Attribute a) -> std::optional<uint64_t> {
    if (auto i = dyn_cast<IntegerAttr>(a))
      return i.getValue().getZExtValue() & widthMask(getBitWidth(elem));
    if (auto f = dyn_cast<FloatAttr>(a))
      return makeFloatWord(elem, f.getValue().convertToDouble());
    if (auto b = dyn_cast<BoolAttr>(a))
      return uint64_t(b.getValue());
    return std::nullopt;
  };
  if (info->kind == TypeInfo::Scalar) {
    auto w = word(attr);
    if (!w)
      return unsupported(&op, "constant attribute");
    prog.constants.push_back({*slot, *w});
    return llvm::Error::success();
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return unsupported(&op, "constant attribute");
  if (dense.isSplat()) {
    auto w = word(dense.getSplatValue<Attribute>());
    if (!w)
      return unsupported(&op, "constant attribute");
    for (uint32_t l = 0; l < info->lanes; ++l)
      prog.constants.push_back({*slot + l, *w});
    return llvm::Error::success();
  }
  uint32_t l = 0;
  for (Attribute element : dense.getValues<Attribute>()) {
    auto w = word(element);
    if (!w)
      return unsupported(&op, "constant attribute");
    prog.constants.push_back({*slot + l++, *w});
  }
  return llvm::Error::success();
}

llvm::Error Decoder::decodeMemAccess(Operation *op, Value memref,
                                     ValueRange indices, MemAccess &access) {
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

llvm::Error Decoder::decodeAlloca(Operation *op, MemRefType type,
                                  ValueRange dynamicSizes, Value result,
                                  std::string name, uint32_t &allocaIndex) {
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
  for (auto [arg, result] :
       llvm::zip_equal(op.getRegionIterArgs(), op.getResults())) {
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
  if (llvm::Error err =
          decodeRegion(op.getThenRegion(), resultSlots, info.thenRegion))
    return err;
  if (llvm::Error err =
          decodeRegion(op.getElseRegion(), resultSlots, info.elseRegion))
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

llvm::Error Decoder::decodePosition(Operation *op,
                                    llvm::ArrayRef<OpFoldResult> pos,
                                    llvm::ArrayRef<int64_t> shape,
                                    uint32_t chunk, uint32_t &index) {
  PositionInfo info;
  if (pos.size() > kMaxRank || pos.size() > shape.size())
    return unsupported(op, "position");
  info.count = uint8_t(pos.size());
  info.chunk = chunk;
  for (size_t d = 0; d < pos.size(); ++d) {
    auto m = mixed(pos[d], op);
    if (!m)
      return m.takeError();
    if (m->slot == kNoSlot && (m->value < 0 || m->value >= shape[d]))
      return unsupported(op, "out-of-range or poison position");
    info.positions[d] = *m;
    info.dims[d] = shape[d];
    int64_t stride = 1;
    for (size_t e = d + 1; e < shape.size(); ++e)
      stride *= shape[e];
    info.strides[d] = stride;
  }
  index = uint32_t(prog.positions.size());
  prog.positions.push_back(info);
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
      cType.getNumElements() != info.config.fragmentSizeC() ||
      op.getType() != cType)
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

llvm::Error Decoder::decodeOp(Operation &op) {
  Operation *o = &op;
  auto defineResult = [&](Instr &instr) -> llvm::Error {
    auto slot = define(o->getResult(0), o);
    if (!slot)
      return slot.takeError();
    instr.res = *slot;
    return llvm::Error::success();
  };

  // Constants: hoisted into per-launch initializers.
  if (auto constant = dyn_cast<arith::ConstantOp>(o))
    return decodeConstant(op, constant.getValue());
  if (isa<ub::PoisonOp>(o)) {
    // Poison is never observed by correct code; zero is as good as any value.
    auto info = analyzeType(o->getResult(0).getType());
    if (!info || info->kind > TypeInfo::Vector)
      return unsupportedType(o, o->getResult(0).getType());
    auto slot = define(o->getResult(0), o);
    if (!slot)
      return slot.takeError();
    for (uint32_t l = 0; l < info->lanes; ++l)
      prog.constants.push_back({*slot + l, 0});
    return llvm::Error::success();
  }
  if (auto step = dyn_cast<vector::StepOp>(o)) {
    auto slot = define(step.getResult(), o);
    if (!slot)
      return slot.takeError();
    for (int64_t l = 0; l < step.getType().getNumElements(); ++l)
      prog.constants.push_back({*slot + uint32_t(l), uint64_t(l)});
    return llvm::Error::success();
  }
  if (auto mask = dyn_cast<vector::ConstantMaskOp>(o)) {
    auto type = mask.getVectorType();
    auto sizes = mask.getMaskDimSizes();
    auto slot = define(mask.getResult(), o);
    if (!slot)
      return slot.takeError();
    auto shape = type.getShape();
    for (int64_t l = 0; l < type.getNumElements(); ++l) {
      int64_t rest = l;
      bool on = true;
      for (int d = int(shape.size()) - 1; d >= 0; --d) {
        on = on && (rest % shape[d]) < sizes[d];
        rest /= shape[d];
      }
      prog.constants.push_back({*slot + uint32_t(l), uint64_t(on)});
    }
    return llvm::Error::success();
  }

  // Pure renamings.
  if (auto shapeCast = dyn_cast<vector::ShapeCastOp>(o)) {
    alias(shapeCast.getResult(), shapeCast.getSource());
    return llvm::Error::success();
  }
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

  auto &table = elementwiseOps();
  auto it = table.find(o->getName().getStringRef());
  if (it != table.end())
    return decodeElementwise(op, it->second);

  Instr instr;
  instr.op = o;

  if (auto cmp = dyn_cast<arith::CmpIOp>(o)) {
    instr.opc = Opc::CmpI;
    instr.mode = uint8_t(cmp.getPredicate());
  } else if (auto cmp = dyn_cast<arith::CmpFOp>(o)) {
    instr.opc = Opc::CmpF;
    instr.mode = uint8_t(cmp.getPredicate());
  }
  if (instr.opc == Opc::CmpI || instr.opc == Opc::CmpF) {
    auto info = analyzeType(o->getOperand(0).getType());
    if (!info || info->kind > TypeInfo::Vector)
      return unsupportedType(o, o->getOperand(0).getType());
    instr.ty = info->elem;
    instr.rty = ElementType::I1;
    instr.width = uint8_t(getBitWidth(info->elem));
    instr.lanes = info->lanes;
    instr.a = use(o->getOperand(0));
    instr.b = use(o->getOperand(1));
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }

  if (auto select = dyn_cast<arith::SelectOp>(o)) {
    auto info = analyzeType(select.getType());
    if (!info || info->kind > TypeInfo::Vector)
      return unsupportedType(o, select.getType());
    instr.opc = Opc::Select;
    instr.ty = instr.rty = info->elem;
    instr.lanes = info->lanes;
    instr.mode = lanes(select.getCondition()) == 1 && info->lanes > 1;
    instr.a = use(select.getCondition());
    instr.b = use(select.getTrueValue());
    instr.c = use(select.getFalseValue());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }

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

  if (auto forOp = dyn_cast<scf::ForOp>(o))
    return decodeFor(forOp);
  if (auto ifOp = dyn_cast<scf::IfOp>(o))
    return decodeIf(ifOp);
  if (auto whileOp = dyn_cast<scf::WhileOp>(o))
    return decodeWhile(whileOp);

  // Memory.
  auto emitAccess = [&](Opc opc, MemAccess access) {
    instr.opc = opc;
    instr.aux = uint32_t(prog.accesses.size());
    prog.accesses.push_back(access);
    emit(instr);
    return llvm::Error::success();
  };
  if (auto load = dyn_cast<memref::LoadOp>(o)) {
    MemAccess access;
    if (llvm::Error err =
            decodeMemAccess(o, load.getMemref(), load.getIndices(), access))
      return err;
    instr.ty = instr.rty = *getElementType(load.getType());
    if (llvm::Error err = defineResult(instr))
      return err;
    access.value = instr.res;
    return emitAccess(Opc::Load, access);
  }
  if (auto store = dyn_cast<memref::StoreOp>(o)) {
    MemAccess access;
    if (llvm::Error err =
            decodeMemAccess(o, store.getMemref(), store.getIndices(), access))
      return err;
    instr.ty = *getElementType(store.getValueToStore().getType());
    access.value = use(store.getValueToStore());
    noteWrite(store.getMemref());
    return emitAccess(Opc::Store, access);
  }
  if (auto load = dyn_cast<vector::LoadOp>(o)) {
    if (load.getVectorType().getRank() != 1 ||
        load.getMemRefType().getRank() < 1)
      return unsupported(o, "vector.load form (only 1-D vectors)");
    MemAccess access;
    if (llvm::Error err =
            decodeMemAccess(o, load.getBase(), load.getIndices(), access))
      return err;
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.ty = instr.rty =
        *getElementType(load.getVectorType().getElementType());
    access.value = instr.res;
    access.lanes = uint32_t(load.getVectorType().getNumElements());
    return emitAccess(Opc::Load, access);
  }
  if (auto store = dyn_cast<vector::StoreOp>(o)) {
    if (store.getVectorType().getRank() != 1 ||
        store.getMemRefType().getRank() < 1)
      return unsupported(o, "vector.store form (only 1-D vectors)");
    MemAccess access;
    if (llvm::Error err =
            decodeMemAccess(o, store.getBase(), store.getIndices(), access))
      return err;
    instr.ty = *getElementType(store.getVectorType().getElementType());
    access.value = use(store.getValueToStore());
    access.lanes = uint32_t(store.getVectorType().getNumElements());
    noteWrite(store.getBase());
    return emitAccess(Opc::Store, access);
  }
  if (auto read = dyn_cast<vector::TransferReadOp>(o)) {
    if (read.getVectorType().getRank() != 1 ||
        !isa<MemRefType>(read.getBase().getType()) ||
        !read.getPermutationMap().isMinorIdentity() ||
        read.getPermutationMap().getNumResults() != 1)
      return unsupported(
          o, "vector.transfer_read form (only 1-D minor identity on memrefs)");
    MemAccess access;
    if (llvm::Error err =
            decodeMemAccess(o, read.getBase(), read.getIndices(), access))
      return err;
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.ty = instr.rty =
        *getElementType(read.getVectorType().getElementType());
    access.value = instr.res;
    access.lanes = uint32_t(read.getVectorType().getNumElements());
    access.pad = use(read.getPadding());
    if (read.getMask())
      access.mask = use(read.getMask());
    access.inBounds = read.getInBoundsValues()[0];
    return emitAccess(Opc::TransferRead, access);
  }
  if (auto write = dyn_cast<vector::TransferWriteOp>(o)) {
    if (write.getVectorType().getRank() != 1 ||
        !isa<MemRefType>(write.getBase().getType()) ||
        !write.getPermutationMap().isMinorIdentity() ||
        write.getPermutationMap().getNumResults() != 1)
      return unsupported(
          o, "vector.transfer_write form (only 1-D minor identity on memrefs)");
    MemAccess access;
    if (llvm::Error err =
            decodeMemAccess(o, write.getBase(), write.getIndices(), access))
      return err;
    instr.ty = *getElementType(write.getVectorType().getElementType());
    access.value = use(write.getVector());
    access.lanes = uint32_t(write.getVectorType().getNumElements());
    if (write.getMask())
      access.mask = use(write.getMask());
    access.inBounds = write.getInBoundsValues()[0];
    noteWrite(write.getBase());
    return emitAccess(Opc::TransferWrite, access);
  }
  if (auto alloca = dyn_cast<memref::AllocaOp>(o)) {
    instr.opc = Opc::Alloca;
    std::string loc;
    llvm::raw_string_ostream os(loc);
    o->getLoc().print(os);
    if (llvm::Error err = decodeAlloca(
            o, alloca.getType(), alloca.getDynamicSizes(), alloca.getResult(),
            "memref.alloca at " + loc, instr.aux))
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
    if (!analyzeType(subview.getType()) ||
        !analyzeType(subview.getSourceType()))
      return unsupportedType(o, subview.getType());
    auto offsets = subview.getMixedOffsets(), sizes = subview.getMixedSizes(),
         strides = subview.getMixedStrides();
    llvm::SmallBitVector dropped = subview.getDroppedDims();
    for (unsigned d = 0; d < info.sourceRank; ++d) {
      auto off = mixed(offsets[d], o), size = mixed(sizes[d], o),
           stride = mixed(strides[d], o);
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
  if (auto dim = dyn_cast<memref::DimOp>(o)) {
    instr.opc = Opc::Dim;
    instr.a = use(dim.getSource());
    instr.b = use(dim.getIndex());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }

  // Vectors.
  if (auto broadcast = dyn_cast<vector::BroadcastOp>(o)) {
    auto resultType = broadcast.getResultVectorType();
    auto resultShape = resultType.getShape();
    llvm::SmallVector<int64_t> sourceShape;
    if (auto sourceType = dyn_cast<VectorType>(broadcast.getSourceType()))
      sourceShape.assign(sourceType.getShape().begin(),
                         sourceType.getShape().end());
    instr.opc = Opc::LaneMap;
    instr.ty = instr.rty = *getElementType(resultType.getElementType());
    instr.lanes = uint32_t(resultType.getNumElements());
    instr.a = use(broadcast.getSource());
    instr.aux = uint32_t(prog.slots.size());
    size_t lead = resultShape.size() - sourceShape.size();
    for (int64_t l = 0; l < resultType.getNumElements(); ++l) {
      // Result multi-index → source lane (trailing dims aligned; size-1
      // source dims broadcast).
      int64_t rest = l, sourceLane = 0, sourceStride = 1;
      for (int d = int(resultShape.size()) - 1; d >= int(lead); --d) {
        int64_t idx = rest % resultShape[d];
        int64_t sd = sourceShape[d - lead];
        sourceLane += (sd == 1 ? 0 : idx) * sourceStride;
        sourceStride *= sd;
        rest /= resultShape[d];
      }
      prog.slots.push_back(uint32_t(sourceLane));
    }
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto extract = dyn_cast<vector::ExtractOp>(o)) {
    auto sourceType = extract.getSourceVectorType();
    instr.opc = Opc::Extract;
    instr.ty = instr.rty = *getElementType(sourceType.getElementType());
    instr.a = use(extract.getSource());
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.lanes = lanes(extract.getResult());
    if (llvm::Error err =
            decodePosition(o, extract.getMixedPosition(), sourceType.getShape(),
                           instr.lanes, instr.aux))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto insert = dyn_cast<vector::InsertOp>(o)) {
    auto destType = insert.getDestVectorType();
    instr.opc = Opc::Insert;
    instr.ty = instr.rty = *getElementType(destType.getElementType());
    instr.a = use(insert.getValueToStore());
    instr.b = use(insert.getDest());
    instr.lanes = uint32_t(destType.getNumElements());
    if (llvm::Error err = defineResult(instr))
      return err;
    if (llvm::Error err =
            decodePosition(o, insert.getMixedPosition(), destType.getShape(),
                           lanes(insert.getValueToStore()), instr.aux))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto from = dyn_cast<vector::FromElementsOp>(o)) {
    instr.opc = Opc::FromElements;
    instr.ty = instr.rty = *getElementType(from.getType().getElementType());
    instr.lanes = uint32_t(from.getType().getNumElements());
    instr.aux = pushSlots(from.getElements());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto reduction = dyn_cast<vector::ReductionOp>(o)) {
    auto sourceType = reduction.getSourceVectorType();
    instr.opc = Opc::Reduction;
    instr.ty = instr.rty = *getElementType(sourceType.getElementType());
    instr.width = uint8_t(getBitWidth(instr.ty));
    instr.mode = uint8_t(reduction.getKind());
    instr.lanes = uint32_t(sourceType.getNumElements());
    instr.a = use(reduction.getVector());
    if (reduction.getAcc())
      instr.b = use(reduction.getAcc());
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto mask = dyn_cast<vector::CreateMaskOp>(o)) {
    if (mask.getVectorType().getRank() != 1)
      return unsupported(o, "vector.create_mask form (only 1-D)");
    instr.opc = Opc::CreateMask;
    instr.rty = ElementType::I1;
    instr.lanes = uint32_t(mask.getVectorType().getNumElements());
    instr.a = use(mask.getOperand(0));
    if (llvm::Error err = defineResult(instr))
      return err;
    emit(instr);
    return llvm::Error::success();
  }

  // nvgpu.
  if (auto mma = dyn_cast<nvgpu::MmaSyncOp>(o))
    return decodeMma(mma);
  if (auto ld = dyn_cast<nvgpu::LdMatrixOp>(o)) {
    LdMatrixInfo info;
    if (llvm::Error err =
            decodeMemAccess(o, ld.getSrcMemref(), ld.getIndices(), info.access))
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
    if (llvm::Error err =
            decodeMemAccess(o, copy.getDst(), copy.getDstIndices(), info.dst))
      return err;
    if (llvm::Error err =
            decodeMemAccess(o, copy.getSrc(), copy.getSrcIndices(), info.src))
      return err;
    if (!isWorkgroupMemref(copy.getDst().getType()))
      return unsupported(
          o, "nvgpu.device_async_copy destination (must be workgroup memory)");
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

  return unsupportedOp(o);
}

llvm::Error Decoder::decodeFunc(gpu::GPUFuncOp func) {
  prog.name = func.getName().str();
  prog.func = func;
  Region &body = func.getBody();
  if (!body.hasOneBlock()) // unstructured control flow: name the branch
    return unsupportedOp(body.front().getTerminator());
  Block &entry = body.front();
  // The entry block also holds the attributions; the parameters come first.
  for (unsigned i = 0, e = func.getFunctionType().getNumInputs(); i < e; ++i) {
    BlockArgument arg = func.getArgument(i);
    auto info = analyzeType(arg.getType());
    if (!info || info->kind == TypeInfo::Vector ||
        info->kind == TypeInfo::Token)
      return unsupportedType(func, arg.getType());
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
      prog.scalarParams.push_back({*slot, info->elem});
    }
  }
  for (BlockArgument arg : func.getWorkgroupAttributions()) {
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type || !type.hasStaticShape() || !type.getLayout().isIdentity() ||
        !analyzeType(type))
      return unsupportedType(func, arg.getType());
    auto slot = define(arg, func);
    if (!slot)
      return slot.takeError();
    MemrefParam param{*slot,
                      *getElementType(type.getElementType()),
                      uint8_t(type.getRank()),
                      {}};
    for (unsigned d = 0; d < param.rank; ++d)
      param.shape[d] = type.getDimSize(d);
    prog.workgroup.push_back(param);
  }
  unsigned privateIndex = 0;
  for (BlockArgument arg : func.getPrivateAttributions()) {
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type || !type.hasStaticShape())
      return unsupportedType(func, arg.getType());
    uint32_t index;
    if (llvm::Error err = decodeAlloca(
            func, type, {}, arg,
            "private attribution #" + std::to_string(privateIndex++), index))
      return err;
    prog.privateAttributions.push_back(index);
  }
  if (llvm::Error err = decodeBlockBody(entry))
    return err;
  if (!isa<gpu::ReturnOp>(entry.getTerminator()))
    return unsupportedOp(entry.getTerminator());
  return llvm::Error::success();
}

} // namespace

llvm::Error lossjit::simt::detail::decodeProgram(gpu::GPUFuncOp func,
                                                 Program &program) {
  return Decoder(program).decodeFunc(func);
}
