//===- FloatFormats.h - IEEE half and bfloat16 rounding ---------*- C++ -*-===//
//
// Exact conversions between f64/f32 and the 16-bit storage formats, all
// round-to-nearest-even with subnormals and overflow to infinity, written
// without relying on compiler support for _Float16 or __bf16. The
// interpreter's results are only as good as these, so they are tested
// exhaustively over all 2^16 encodings.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_FLOATFORMATS_H
#define LOSSJIT_TESTING_SIMT_FLOATFORMATS_H

#include <bit>
#include <cstdint>

namespace lossjit::simt {

/// Rounds `x` to the nearest value with `precision` significand bits
/// (implicit bit included) and minimum normal exponent `minExponent`, ties to
/// even; magnitudes that round above `maxFinite` become infinities. NaN,
/// infinities and zeros pass through. A single rounding from `x`.
double roundToFormat(double x, int precision, int minExponent,
                     double maxFinite);

/// IEEE binary16 (f16): 11 significand bits, emin -14, max 65504.
double roundToHalf(double x);
/// bfloat16: 8 significand bits, f32's exponent range.
double roundToBFloat16(double x);

/// Encodes `x` (rounded to nearest even first) as f16 bits. NaN → quiet NaN.
uint16_t doubleToHalfBits(double x);
/// Encodes `x` (rounded to nearest even first) as bf16 bits.
uint16_t doubleToBFloat16Bits(double x);

/// Decodes f16 bits (exact).
inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-24, exact in f32.
    float magnitude = float(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) |
                              (mantissa << 13));
}

/// Decodes bf16 bits (exact).
inline float bfloat16BitsToFloat(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_FLOATFORMATS_H
