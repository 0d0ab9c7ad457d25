//===- WarpgroupMatrixTest.cpp - wgmma layouts against the PTX ISA --------===//
//
// The expected values are the PTX ISA's own examples ("Canonical Layouts":
// the exact layouts and LBO/SBO of its K-major and MN-major figures; the
// accumulator figure of .m64nNk16; the descriptor bit fields), written out
// here rather than computed by the functions under test.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/WarpgroupMatrix.h"

#include <gtest/gtest.h>

#include <set>

using namespace lossjit::simt;

namespace {

MatrixDescriptor descriptor(int64_t start, int64_t lbo, int64_t sbo,
                            WgmmaSwizzle swizzle = WgmmaSwizzle::None) {
  MatrixDescriptor d;
  d.startAddress = start;
  d.leadingByteOffset = lbo;
  d.strideByteOffset = sbo;
  d.swizzle = swizzle;
  return d;
}

/// The element offset of (mn, k), from the byte address.
int64_t elementAt(const MatrixDescriptor &d, bool kMajor, int bytes, int64_t mn, int64_t k) {
  std::optional<int64_t> address = wgmmaOperandAddress(d, kMajor, bytes, mn, k);
  EXPECT_TRUE(address.has_value());
  return address ? (*address - d.startAddress) / bytes : -1;
}

TEST(WarpgroupMatrix, DescriptorFieldsRoundTrip) {
  // The K-major 128-byte swizzle template: LBO field 1, SBO 1024 >> 4, mode 1.
  MatrixDescriptor d = MatrixDescriptor::decode(4611686293305360384ull);
  EXPECT_EQ(d.startAddress, 0);
  EXPECT_EQ(d.leadingByteOffset, 16);
  EXPECT_EQ(d.strideByteOffset, 1024);
  EXPECT_EQ(d.swizzle, WgmmaSwizzle::B128);
  EXPECT_EQ(d.baseOffset, 0);
  // The ISA's "Encoding of LBO in descriptor: (LBO) >> 4 = 16".
  MatrixDescriptor m = descriptor(0x2a30, 256, 128);
  uint64_t bits = m.encode();
  EXPECT_EQ((bits >> 16) & 0x3fff, 16u);
  EXPECT_EQ((bits >> 32) & 0x3fff, 8u);
  EXPECT_EQ(bits & 0x3fff, uint64_t(0x2a30 >> 4));
  MatrixDescriptor back = MatrixDescriptor::decode(bits);
  EXPECT_EQ(back.startAddress, 0x2a30);
  EXPECT_EQ(back.leadingByteOffset, 256);
  EXPECT_EQ(back.strideByteOffset, 128);
  EXPECT_EQ(back.swizzle, WgmmaSwizzle::None);
  // Bits outside the fields are ignored; the address keeps 18 bits.
  EXPECT_EQ(MatrixDescriptor::decode(bits | (uint64_t(1) << 14) | (uint64_t(1) << 47)).encode(),
            bits);
  EXPECT_EQ(descriptor(0x40000 + 0x100, 16, 16).encode() & 0x3fff, uint64_t(0x100 >> 4));
}

TEST(WarpgroupMatrix, KMajorNoSwizzleIsTheIsaExample) {
  // tf32: Swizzle<0,4,3> o ((8,2),(4,4)):((4,32),(1,64)), LBO 64·4 B, SBO 32·4 B.
  MatrixDescriptor d = descriptor(4096, 256, 128);
  for (int64_t mn = 0; mn < 16; ++mn)
    for (int64_t k = 0; k < 16; ++k)
      EXPECT_EQ(elementAt(d, true, 4, mn, k), (mn % 8) * 4 + (mn / 8) * 32 + (k % 4) + (k / 4) * 64)
          << mn << "," << k;
  // 16-bit elements: a core matrix is 8 rows of 8 contiguous elements.
  MatrixDescriptor h = descriptor(0, 1024, 128);
  EXPECT_EQ(elementAt(h, true, 2, 1, 0), 8);
  EXPECT_EQ(elementAt(h, true, 2, 0, 7), 7);
  EXPECT_EQ(elementAt(h, true, 2, 0, 8), 512);
  EXPECT_EQ(elementAt(h, true, 2, 8, 0), 64);
}

TEST(WarpgroupMatrix, KMajorSwizzledRowsAreTheIsaExample) {
  // tf32, 32-byte swizzle: ((8,2),(4,·)):((8,64),(1,4)), SBO 64·4 B, within
  // one swizzle row (8 tf32), before the XOR.
  MatrixDescriptor d = descriptor(2048, 16, 256, WgmmaSwizzle::B32);
  for (int64_t mn = 0; mn < 16; ++mn)
    for (int64_t k = 0; k < 8; ++k) {
      int64_t plain = (mn % 8) * 8 + (mn / 8) * 64 + k;
      int64_t byte = plain * 4;
      int64_t swizzled = (byte & ~int64_t(16)) | ((((byte >> 4) ^ (byte >> 7)) & 1) << 4);
      EXPECT_EQ(elementAt(d, true, 4, mn, k), swizzled / 4) << mn << "," << k;
    }
}

TEST(WarpgroupMatrix, MNMajorLayoutsAreTheIsaExamples) {
  // bf16, no swizzle: ((8,1,2),(8,2)):((1,8,64),(8,128)), LBO 128·2 B, SBO 64·2 B.
  MatrixDescriptor none = descriptor(0, 256, 128);
  // 32-byte swizzle: ((8,2,2),(8,2)):((1,8,128),(16,256)), LBO 256 B, SBO 512 B.
  MatrixDescriptor s32 = descriptor(0, 256, 512, WgmmaSwizzle::B32);
  // 64-byte swizzle: ((8,4,2),(8,2)):((1,8,256),(32,512)), LBO 512 B, SBO 1024 B.
  MatrixDescriptor s64 = descriptor(0, 512, 1024, WgmmaSwizzle::B64);
  auto xorChunks = [](int64_t element, int64_t w) {
    int64_t byte = element * 2;
    int64_t chunk = ((byte >> 4) ^ (byte >> 7)) & (w - 1);
    return ((byte & ~((w - 1) << 4)) | (chunk << 4)) / 2;
  };
  for (int64_t mn = 0; mn < 16; ++mn)
    for (int64_t k = 0; k < 16; ++k)
      EXPECT_EQ(elementAt(none, false, 2, mn, k), (mn % 8) + (mn / 8) * 64 + (k % 8) * 8 + (k / 8) * 128);
  for (int64_t mn = 0; mn < 32; ++mn)
    for (int64_t k = 0; k < 16; ++k)
      EXPECT_EQ(elementAt(s32, false, 2, mn, k),
                xorChunks((mn % 8) + ((mn / 8) % 2) * 8 + (mn / 16) * 128 + (k % 8) * 16 + (k / 8) * 256, 2));
  for (int64_t mn = 0; mn < 64; ++mn)
    for (int64_t k = 0; k < 16; ++k)
      EXPECT_EQ(elementAt(s64, false, 2, mn, k),
                xorChunks((mn % 8) + ((mn / 8) % 4) * 8 + (mn / 32) * 256 + (k % 8) * 32 + (k / 8) * 512, 4));
}

TEST(WarpgroupMatrix, SwizzlesFollowTheAbsoluteAddress) {
  // 128-byte swizzle: the pattern repeats every 1024 bytes; row r's chunk c
  // lands in chunk c ^ r.
  MatrixDescriptor d = descriptor(1024, 16, 1024, WgmmaSwizzle::B128);
  for (int64_t row = 0; row < 8; ++row)
    for (int64_t chunk = 0; chunk < 8; ++chunk)
      EXPECT_EQ(*wgmmaOperandAddress(d, true, 2, row, chunk * 8),
                1024 + row * 128 + ((chunk ^ row) * 16));
  // A K-major k16 step advances the start by 32 bytes inside the pattern:
  // the absolute address still picks the swizzle (CUTLASS's SW128 k steps).
  MatrixDescriptor step = descriptor(1024 + 32, 16, 1024, WgmmaSwizzle::B128);
  for (int64_t row = 0; row < 8; ++row)
    EXPECT_EQ(*wgmmaOperandAddress(step, true, 2, row, 0), 1024 + row * 128 + ((2 ^ row) * 16));
  MatrixDescriptor based = d;
  based.baseOffset = 1;
  EXPECT_FALSE(wgmmaOperandAddress(based, true, 2, 0, 0));
}

TEST(WarpgroupMatrix, AccumulatorFragmentIsTheIsaFigure) {
  using RC = std::pair<int, int>;
  EXPECT_EQ(wgmmaElementD(0, 0), RC(0, 0));
  EXPECT_EQ(wgmmaElementD(0, 1), RC(0, 1));
  EXPECT_EQ(wgmmaElementD(0, 2), RC(8, 0));
  EXPECT_EQ(wgmmaElementD(0, 3), RC(8, 1));
  EXPECT_EQ(wgmmaElementD(0, 4), RC(0, 8));
  EXPECT_EQ(wgmmaElementD(1, 0), RC(0, 2));
  EXPECT_EQ(wgmmaElementD(3, 5), RC(0, 15));
  EXPECT_EQ(wgmmaElementD(4, 0), RC(1, 0));
  EXPECT_EQ(wgmmaElementD(32, 0), RC(16, 0));
  EXPECT_EQ(wgmmaElementD(127, 0), RC(55, 6));
  EXPECT_EQ(wgmmaElementD(127, 3), RC(63, 7));
  EXPECT_EQ(wgmmaElementD(127, 127), RC(63, 255));
  // Every element of a 64×256 D is held exactly once.
  std::set<RC> seen;
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 128; ++i)
      EXPECT_TRUE(seen.insert(wgmmaElementD(t, i)).second);
  EXPECT_EQ(seen.size(), size_t(64 * 256));
}

} // namespace
