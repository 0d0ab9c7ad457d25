//===- HalfFloat.cpp ------------------------------------------------------===//

#include "testing/reference/HalfFloat.h"

#include <cmath>

using namespace lossjit;

float lossjit::halfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float value;
  if (exp == 0)
    value = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    value = mant ? NAN : INFINITY;
  else
    value = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -value : value;
}

uint16_t lossjit::floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7fffffff;
  if (abs > 0x7f800000)
    return sign | 0x7e00; // NaN
  if (abs >= 0x477ff000) // rounds to ≥ 65520: overflow
    return sign | 0x7c00;
  if (abs < 0x38800000) { // subnormal or zero in half
    // Scale so the half ulp (2^-24) becomes 1, then round to nearest even.
    float scaled = std::fabs(f) * 16777216.0f;
    float rounded = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(rounded);
  }
  uint32_t exp = ((abs >> 23) - 112) << 10;
  uint32_t mant = abs & 0x7fffff;
  uint32_t half = exp | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half;
  return sign | static_cast<uint16_t>(half);
}

uint16_t lossjit::floatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

double lossjit::elementAsDouble(const void *data, const std::string &dtype,
                                int64_t i) {
  if (dtype == "f16")
    return halfToFloat(static_cast<const uint16_t *>(data)[i]);
  if (dtype == "bf16")
    return bfloat16ToFloat(static_cast<const uint16_t *>(data)[i]);
  if (dtype == "f32")
    return static_cast<const float *>(data)[i];
  if (dtype == "f64")
    return static_cast<const double *>(data)[i];
  if (dtype == "i32")
    return static_cast<const int32_t *>(data)[i];
  if (dtype == "i64")
    return static_cast<double>(static_cast<const int64_t *>(data)[i]);
  return NAN;
}
