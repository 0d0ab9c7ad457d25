//===- HalfFloat.h - f16/bf16 <-> f32 conversions on the host ---*- C++ -*-===//
//
// Host-side storage conversions for tools and tests (inputs are generated in
// f32 and rounded once to the storage type, round-to-nearest-even).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_REFERENCE_HALFFLOAT_H
#define LOSSJIT_TESTING_REFERENCE_HALFFLOAT_H

#include <cstdint>
#include <cstring>
#include <string>

namespace lossjit {

/// IEEE binary16 bits → float (exact).
float halfToFloat(uint16_t h);
/// float → IEEE binary16 bits, round to nearest even, overflow to ±inf.
uint16_t floatToHalf(float f);
/// bfloat16 bits → float (exact).
inline float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
/// float → bfloat16 bits, round to nearest even (NaN stays NaN).
uint16_t floatToBfloat16(float f);

/// Element `i` of a host buffer of `dtype` (f16, bf16, f32, f64, i32, i64)
/// as a double.
double elementAsDouble(const void *data, const std::string &dtype, int64_t i);

} // namespace lossjit

#endif // LOSSJIT_TESTING_REFERENCE_HALFFLOAT_H
