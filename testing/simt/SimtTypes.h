//===- SimtTypes.h - element types the SIMT interpreter handles -*- C++ -*-===//
//
// The interpreter keeps one 64-bit word per thread and vector lane; the
// element type says how to read it. Floats narrower than f64 are held as an
// f32 value (f16 and bf16 values are exactly representable there, and every
// operation rounds its result back to the type), f64 as a double, integers
// zero-extended from their width.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_SIMTTYPES_H
#define LOSSJIT_TESTING_SIMT_SIMTTYPES_H

#include "mlir/IR/Types.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace lossjit::simt {

/// Scalar types of registers and buffers.
enum class ElementType : uint8_t {
  I1,
  I8,
  I16,
  I32,
  I64,
  Index,
  F16,
  BF16,
  F32,
  F64
};

/// "f16", "index", ... (the MLIR spelling).
llvm::StringRef getElementTypeName(ElementType type);
/// Parses getElementTypeName's output.
std::optional<ElementType> parseElementType(llvm::StringRef name);
/// The element type of an MLIR scalar type, if the interpreter supports it.
std::optional<ElementType> getElementType(mlir::Type type);
/// Bytes per element in memory (i1 is stored as one byte, index as eight).
unsigned getElementSize(ElementType type);
/// Bits of the value (index: 64).
unsigned getBitWidth(ElementType type);
inline bool isFloatType(ElementType type) { return type >= ElementType::F16; }

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_SIMTTYPES_H
