//===- FloatFormatsTest.cpp - f16/bf16 rounding against llvm::APFloat -----===//

#include "testing/simt/FloatFormats.h"

#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace lossjit::simt;

namespace {

uint16_t apfloatBits(double x, const llvm::fltSemantics &sem) {
  llvm::APFloat f(x);
  bool lost;
  f.convert(sem, llvm::APFloat::rmNearestTiesToEven, &lost);
  return uint16_t(f.bitcastToAPInt().getZExtValue());
}

double apfloatValue(uint16_t bits, const llvm::fltSemantics &sem) {
  llvm::APFloat f(sem, llvm::APInt(16, bits));
  bool lost;
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &lost);
  return f.convertToDouble();
}

TEST(FloatFormats, HalfDecodeAllEncodings) {
  for (uint32_t b = 0; b < 65536; ++b) {
    double want = apfloatValue(uint16_t(b), llvm::APFloat::IEEEhalf());
    double got = halfBitsToFloat(uint16_t(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    ASSERT_EQ(want, got) << "bits " << b;
    ASSERT_EQ(std::signbit(want), std::signbit(got)) << "bits " << b;
    ASSERT_EQ(uint16_t(b), doubleToHalfBits(got)) << "round trip " << b;
  }
}

TEST(FloatFormats, BFloat16DecodeAllEncodings) {
  for (uint32_t b = 0; b < 65536; ++b) {
    double want = apfloatValue(uint16_t(b), llvm::APFloat::BFloat());
    double got = bfloat16BitsToFloat(uint16_t(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    ASSERT_EQ(want, got) << "bits " << b;
    ASSERT_EQ(uint16_t(b), doubleToBFloat16Bits(got)) << "round trip " << b;
  }
}

TEST(FloatFormats, RoundingMatchesAPFloat) {
  // Midpoints between neighbours (ties), values just off them, subnormals,
  // overflow boundaries and random values, for both formats.
  std::vector<double> inputs = {0.0,
                                -0.0,
                                65504.0,
                                65519.99,
                                65520.0,
                                65536.0,
                                1e-8,
                                2.98e-8,
                                2.99e-8,
                                5.9604644775390625e-8,
                                6.1e-5,
                                1.0 + 0x1p-11,
                                1.0 + 3 * 0x1p-11,
                                1.0 + 0x1p-8,
                                1.0 + 3 * 0x1p-8,
                                3.4e38,
                                3.39e38,
                                -1e40,
                                1e-40,
                                INFINITY,
                                -INFINITY};
  for (uint32_t b = 0; b < 65535; ++b) {
    double lo = halfBitsToFloat(uint16_t(b)),
           hi = halfBitsToFloat(uint16_t(b + 1));
    if (std::isfinite(lo) && std::isfinite(hi) && (b & 0x7fff) != 0x7fff) {
      double mid = (lo + hi) / 2;
      inputs.push_back(mid);
      inputs.push_back(std::nextafter(mid, INFINITY));
      inputs.push_back(std::nextafter(mid, -INFINITY));
    }
  }
  for (uint32_t b = 0; b < 65535; b += 7) {
    double lo = bfloat16BitsToFloat(uint16_t(b)),
           hi = bfloat16BitsToFloat(uint16_t(b + 1));
    if (std::isfinite(lo) && std::isfinite(hi) && (b & 0x7fff) != 0x7fff) {
      double mid = (lo + hi) / 2;
      inputs.push_back(mid);
      inputs.push_back(std::nextafter(mid, INFINITY));
      inputs.push_back(std::nextafter(mid, -INFINITY));
    }
  }
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < 20000; ++i)
    inputs.push_back(u(rng) * std::ldexp(1.0, int(rng() % 80) - 40));
  for (double x : inputs) {
    ASSERT_EQ(apfloatBits(x, llvm::APFloat::IEEEhalf()), doubleToHalfBits(x))
        << "f16 of " << x;
    ASSERT_EQ(apfloatBits(x, llvm::APFloat::BFloat()), doubleToBFloat16Bits(x))
        << "bf16 of " << x;
  }
}

TEST(FloatFormats, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(halfBitsToFloat(doubleToHalfBits(NAN))));
  EXPECT_TRUE(std::isnan(bfloat16BitsToFloat(doubleToBFloat16Bits(NAN))));
  EXPECT_TRUE(std::isnan(roundToHalf(NAN)));
}

} // namespace
