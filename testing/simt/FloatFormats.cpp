//===- FloatFormats.cpp - IEEE half and bfloat16 rounding -----------------===//

#include "testing/simt/FloatFormats.h"

#include <algorithm>
#include <cmath>

using namespace lossjit::simt;

double lossjit::simt::roundToFormat(double x, int precision, int minExponent,
                                    double maxFinite) {
  if (!std::isfinite(x) || x == 0.0)
    return x;
  int e;
  (void)std::frexp(x, &e); // |x| in [2^(e-1), 2^e)
  // Below the normal range the quantum stays that of the smallest normal.
  int exponent = std::max(e - 1, minExponent);
  // Scaling by powers of two is exact in f64 for every input we round (the
  // target formats' ranges are far inside f64's), so nearbyint performs the
  // only rounding, in the default round-to-nearest-even mode.
  double scaled = std::ldexp(x, precision - 1 - exponent);
  double r = std::ldexp(std::nearbyint(scaled), exponent - (precision - 1));
  if (std::fabs(r) > maxFinite)
    return std::copysign(INFINITY, x);
  return r;
}

double lossjit::simt::roundToHalf(double x) {
  return roundToFormat(x, 11, -14, 65504.0);
}

double lossjit::simt::roundToBFloat16(double x) {
  return roundToFormat(x, 8, -126, 0x1.fep127);
}

uint16_t lossjit::simt::doubleToHalfBits(double x) {
  uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (std::isnan(x))
    return sign | 0x7e00u;
  double r = roundToHalf(x);
  if (std::isinf(r))
    return sign | 0x7c00u;
  double a = std::fabs(r);
  if (a == 0.0)
    return sign;
  if (a < 0x1p-14) // subnormal: a = m * 2^-24
    return sign | uint16_t(a * 0x1p24);
  int e;
  (void)std::frexp(a, &e);
  int exponent = e - 1; // a in [2^exponent, 2^(exponent+1))
  uint16_t mantissa = uint16_t((std::ldexp(a, -exponent) - 1.0) * 1024.0);
  return sign | uint16_t((exponent + 15) << 10) | mantissa;
}

uint16_t lossjit::simt::doubleToBFloat16Bits(double x) {
  if (std::isnan(x))
    return (std::signbit(x) ? 0x8000u : 0u) | 0x7fc0u;
  // The rounded value is exact in f32, whose top half is the encoding.
  float r = float(roundToBFloat16(x));
  return uint16_t(std::bit_cast<uint32_t>(r) >> 16);
}
