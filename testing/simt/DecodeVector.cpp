//===- DecodeVector.cpp - decoding of vector ops --------------------------===//
//
// Vector ops other than memory accesses (those are in DecodeMemory.cpp):
// constant vectors (step, constant_mask) become initializers, shape_cast a
// renaming, broadcasts a lane table, extract/insert a position table.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::optional<llvm::Error> Decoder::decodeVectorOp(Operation &op) {
  Operation *o = &op;

  // Constants: hoisted into per-launch initializers.
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

  Instr instr;
  instr.op = o;

  if (auto broadcast = dyn_cast<vector::BroadcastOp>(o)) {
    auto resultType = broadcast.getResultVectorType();
    auto resultShape = resultType.getShape();
    llvm::SmallVector<int64_t> sourceShape;
    if (auto sourceType = dyn_cast<VectorType>(broadcast.getSourceType()))
      sourceShape.assign(sourceType.getShape().begin(), sourceType.getShape().end());
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
    if (llvm::Error err = decodePosition(o, extract.getMixedPosition(), sourceType.getShape(),
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
    if (llvm::Error err = decodePosition(o, insert.getMixedPosition(), destType.getShape(),
                                         lanes(insert.getValueToStore()), instr.aux))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  // A struct of one scalar type (the wgmma accumulators) lives as a vector:
  // llvm.extractvalue / insertvalue [i] move lane i.
  if (auto extract = dyn_cast<LLVM::ExtractValueOp>(o)) {
    auto info = analyzeType(extract.getContainer().getType());
    if (!info || info->kind != TypeInfo::Vector || extract.getPosition().size() != 1)
      return unsupported(o, "llvm.extractvalue (only one position in a struct of one scalar type)");
    instr.opc = Opc::Extract;
    instr.ty = instr.rty = info->elem;
    instr.a = use(extract.getContainer());
    if (llvm::Error err = defineResult(instr))
      return err;
    instr.lanes = 1;
    OpFoldResult position = Builder(o->getContext()).getIndexAttr(extract.getPosition()[0]);
    if (llvm::Error err = decodePosition(o, position, info->shape, 1, instr.aux))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  if (auto insert = dyn_cast<LLVM::InsertValueOp>(o)) {
    auto info = analyzeType(insert.getContainer().getType());
    if (!info || info->kind != TypeInfo::Vector || insert.getPosition().size() != 1)
      return unsupported(o, "llvm.insertvalue (only one position in a struct of one scalar type)");
    instr.opc = Opc::Insert;
    instr.ty = instr.rty = info->elem;
    instr.a = use(insert.getValue());
    instr.b = use(insert.getContainer());
    instr.lanes = info->lanes;
    if (llvm::Error err = defineResult(instr))
      return err;
    OpFoldResult position = Builder(o->getContext()).getIndexAttr(insert.getPosition()[0]);
    if (llvm::Error err = decodePosition(o, position, info->shape, 1, instr.aux))
      return err;
    emit(instr);
    return llvm::Error::success();
  }
  // An empty side-effecting asm whose outputs are tied to its inputs
  // ("=f,...,0,1,..."): the wgmma accumulator fence, an identity on values
  // (the order it imposes is the compiler's concern).
  if (auto fence = dyn_cast<LLVM::InlineAsmOp>(o)) {
    // Both forms are identities on their operands: defines the result, emits.
    auto emitFence = [&]() -> llvm::Error {
      auto res = define(fence.getRes(), o);
      if (!res)
        return res.takeError();
      instr.res = *res;
      emit(instr);
      return llvm::Error::success();
    };
    // The one-register form ("=r,0" on an i32): an opaque copy of an
    // integer (opaqueThreadIdx), which keeps LLVM from hoisting.
    if (fence.getConstraints() == "=r,0") {
      if (!llvm::StringRef(fence.getAsmString()).trim().empty() || !fence.getHasSideEffects() ||
          fence.getNumOperands() != 1 || !fence.getRes() ||
          !fence.getOperand(0).getType().isInteger(32) || !fence.getRes().getType().isInteger(32))
        return unsupported(o, "llvm.inline_asm (\"=r,0\": only the empty fence of one i32)");
      instr.opc = Opc::IntCastU;
      instr.ty = instr.rty = ElementType::I32;
      instr.width = 32;
      instr.lanes = 1;
      instr.a = use(fence.getOperand(0));
      return emitFence();
    }
    const unsigned n = fence.getNumOperands();
    std::string expected;
    for (unsigned i = 0; i < n; ++i)
      expected += (i ? ",=f" : "=f");
    for (unsigned i = 0; i < n; ++i)
      expected += "," + std::to_string(i);
    auto info = fence.getRes() ? analyzeType(fence.getRes().getType()) : std::nullopt;
    if (!llvm::StringRef(fence.getAsmString()).trim().empty() || !fence.getHasSideEffects() ||
        fence.getConstraints() != expected || !info || info->kind != TypeInfo::Vector ||
        info->lanes != n || info->elem != ElementType::F32)
      return unsupported(o, "llvm.inline_asm (only the empty register fence \"=f,...,0,...\" "
                            "over a struct of f32)");
    instr.opc = Opc::FromElements;
    instr.ty = instr.rty = ElementType::F32;
    instr.lanes = n;
    instr.aux = pushSlots(fence.getOperands());
    return emitFence();
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

  return std::nullopt;
}

llvm::Error Decoder::decodePosition(Operation *op, llvm::ArrayRef<OpFoldResult> pos,
                                    llvm::ArrayRef<int64_t> shape, uint32_t chunk,
                                    uint32_t &index) {
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
