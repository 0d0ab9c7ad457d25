//===- ToolSupportTest.cpp - .npy I/O and f16/bf16 conversions ------------===//

#include "testing/reference/HalfFloat.h"
#include "tools/support/Npy.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lossjit;

TEST(HalfFloat, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00); // rounds up to infinity
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00); // tie → even
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02); // tie → even (up)
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  for (uint32_t h = 0; h < 0x7c00; h += 7)
    EXPECT_EQ(floatToHalf(halfToFloat(h)), h);
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(floatToBfloat16(1.0f + 1.0f / 256), 0x3f80); // tie → even
}

TEST(Npy, RoundTripAndErrors) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("npytest", dir));
  std::string path = (dir + "/a.npy").str();
  NpyArray a;
  a.dtype = "f32";
  a.shape = {2, 3};
  a.bytes.resize(24);
  for (int i = 0; i < 6; ++i)
    reinterpret_cast<float *>(a.bytes.data())[i] = i * 0.5f;
  ASSERT_FALSE(static_cast<bool>(writeNpy(path, a)));
  auto b = readNpy(path);
  ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(b->dtype, "f32");
  EXPECT_EQ(b->shape, a.shape);
  EXPECT_EQ(b->bytes, a.bytes);

  NpyArray scalar;
  scalar.dtype = "i64";
  scalar.bytes.resize(8);
  ASSERT_FALSE(static_cast<bool>(writeNpy(path, scalar)));
  auto s = readNpy(path);
  ASSERT_TRUE(static_cast<bool>(s));
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->count(), 1);

  std::string bad = (dir + "/bad.npy").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(bad, ec);
    os << "not numpy";
  }
  auto e = readNpy(bad);
  ASSERT_FALSE(static_cast<bool>(e));
  EXPECT_EQ(llvm::toString(e.takeError()), bad + ": not a .npy file (missing \\x93NUMPY magic)");
  auto missing = readNpy((dir + "/none.npy").str());
  ASSERT_FALSE(static_cast<bool>(missing));
  llvm::consumeError(missing.takeError());
  llvm::sys::fs::remove_directories(dir);
}
