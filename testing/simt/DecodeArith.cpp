//===- DecodeArith.cpp - decoding of arith, math and ub ops ---------------===//
//
// Elementwise ops decode by name through SimtOps.def's table; constants and
// ub.poison / llvm.mlir.zero become per-launch initializers; comparisons and selects get their
// predicate and broadcast mode here.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::optional<llvm::Error> Decoder::decodeArithOp(Operation &op) {
  Operation *o = &op;

  // Constants: hoisted into per-launch initializers.
  if (auto constant = dyn_cast<arith::ConstantOp>(o))
    return decodeConstant(op, constant.getValue());
  if (isa<ub::PoisonOp, LLVM::ZeroOp>(o)) {
    // Poison is never observed by correct code; zero is as good as any value.
    // llvm.mlir.zero is zero (the wgmma accumulators start from it).
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

  if (std::optional<Opc> opc = lookupElementwiseOp(o->getName().getStringRef()))
    return decodeElementwise(op, *opc);

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

  return std::nullopt;
}

llvm::Error Decoder::decodeElementwise(Operation &op, Opc opc) {
  if (op.getNumResults() != 1 || op.getNumOperands() < 1 || op.getNumOperands() > 3)
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
  bool isFloatOp = getOpFamily(opc) == OpFamily::Float;
  if (isFloatOp && !isFloatType(instr.ty))
    return unsupportedType(&op, op.getOperand(0).getType());
  bool isIntOp = getOpFamily(opc) == OpFamily::Int;
  if (isIntOp && isFloatType(instr.ty))
    return unsupportedType(&op, op.getOperand(0).getType());
  if (auto truncf = dyn_cast<arith::TruncFOp>(op))
    if (auto mode = truncf.getRoundingmode(); mode && *mode != arith::RoundingMode::to_nearest_even)
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
