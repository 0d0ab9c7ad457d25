//===- SimtTypes.cpp - element types the SIMT interpreter handles ---------===//

#include "testing/simt/SimtTypes.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace lossjit::simt;

llvm::StringRef lossjit::simt::getElementTypeName(ElementType type) {
  switch (type) {
  case ElementType::I1:
    return "i1";
  case ElementType::I8:
    return "i8";
  case ElementType::I16:
    return "i16";
  case ElementType::I32:
    return "i32";
  case ElementType::I64:
    return "i64";
  case ElementType::Index:
    return "index";
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F32:
    return "f32";
  case ElementType::F64:
    return "f64";
  }
  return "?";
}

std::optional<ElementType>
lossjit::simt::parseElementType(llvm::StringRef name) {
  for (ElementType t :
       {ElementType::I1, ElementType::I8, ElementType::I16, ElementType::I32,
        ElementType::I64, ElementType::Index, ElementType::F16,
        ElementType::BF16, ElementType::F32, ElementType::F64})
    if (getElementTypeName(t) == name)
      return t;
  return std::nullopt;
}

std::optional<ElementType> lossjit::simt::getElementType(mlir::Type type) {
  if (type.isIndex())
    return ElementType::Index;
  if (auto intType = llvm::dyn_cast<mlir::IntegerType>(type)) {
    switch (intType.getWidth()) {
    case 1:
      return ElementType::I1;
    case 8:
      return ElementType::I8;
    case 16:
      return ElementType::I16;
    case 32:
      return ElementType::I32;
    case 64:
      return ElementType::I64;
    default:
      return std::nullopt;
    }
  }
  if (type.isF16())
    return ElementType::F16;
  if (type.isBF16())
    return ElementType::BF16;
  if (type.isF32())
    return ElementType::F32;
  if (type.isF64())
    return ElementType::F64;
  return std::nullopt;
}

unsigned lossjit::simt::getElementSize(ElementType type) {
  switch (type) {
  case ElementType::I1:
  case ElementType::I8:
    return 1;
  case ElementType::I16:
  case ElementType::F16:
  case ElementType::BF16:
    return 2;
  case ElementType::I32:
  case ElementType::F32:
    return 4;
  case ElementType::I64:
  case ElementType::Index:
  case ElementType::F64:
    return 8;
  }
  return 8;
}

unsigned lossjit::simt::getBitWidth(ElementType type) {
  switch (type) {
  case ElementType::I1:
    return 1;
  case ElementType::I8:
    return 8;
  default:
    return getElementSize(type) * 8;
  }
}
