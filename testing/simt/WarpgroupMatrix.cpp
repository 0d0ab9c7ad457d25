//===- WarpgroupMatrix.cpp - PTX layouts of wgmma operands ---------------===//

#include "testing/simt/WarpgroupMatrix.h"

using namespace lossjit::simt;

MatrixDescriptor MatrixDescriptor::decode(uint64_t bits) {
  auto field = [&](int low, int width) { return int64_t((bits >> low) & ((uint64_t(1) << width) - 1)); };
  MatrixDescriptor d;
  d.startAddress = field(0, 14) << 4;
  d.leadingByteOffset = field(16, 14) << 4;
  d.strideByteOffset = field(32, 14) << 4;
  d.baseOffset = int(field(49, 3));
  d.swizzle = WgmmaSwizzle(field(62, 2));
  return d;
}

uint64_t MatrixDescriptor::encode() const {
  // matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4.
  auto encoded = [](int64_t x) { return (uint64_t(x) & 0x3FFFF) >> 4; };
  return encoded(startAddress) | encoded(leadingByteOffset) << 16 |
         encoded(strideByteOffset) << 32 | (uint64_t(baseOffset) & 7) << 49 |
         uint64_t(swizzle) << 62;
}

int lossjit::simt::swizzleUnits(WgmmaSwizzle swizzle) {
  switch (swizzle) {
  case WgmmaSwizzle::None:
    return 1;
  case WgmmaSwizzle::B32:
    return 2;
  case WgmmaSwizzle::B64:
    return 4;
  case WgmmaSwizzle::B128:
    return 8;
  }
  return 1;
}

std::optional<int64_t> lossjit::simt::wgmmaOperandAddress(const MatrixDescriptor &desc, bool kMajor,
                                                          int elementBytes, int64_t mn, int64_t k) {
  const int64_t t = 16 / elementBytes; // elements per 128-bit element
  const int64_t w = swizzleUnits(desc.swizzle);
  const int64_t lbo = desc.leadingByteOffset, sbo = desc.strideByteOffset;
  int64_t bytes = 0;
  if (desc.swizzle == WgmmaSwizzle::None) {
    if (kMajor) // ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
      bytes = (mn % 8) * 16 + (mn / 8) * sbo + (k % t) * elementBytes + (k / t) * lbo;
    else // ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
      bytes = (mn % t) * elementBytes + (mn / t) * sbo + (k % 8) * 16 + (k / 8) * lbo;
    return desc.startAddress + bytes;
  }
  // The swizzle is a function of the absolute address (bits [7, ...) pick
  // the row of the pattern), so a start inside a pattern (K-major k steps
  // advance it by 32 bytes) needs nothing; base offset 0 says the patterns
  // start on their repeat, the only case modeled.
  if (desc.baseOffset != 0)
    return std::nullopt;
  if (kMajor) // ((8,m),(T,2k)) : ((W·T,SBO),(1,T)), k within a swizzle row
    bytes = (mn % 8) * w * 16 + (mn / 8) * sbo + k * elementBytes;
  else // ((T,W,m),(8,k)) : ((1,T,LBO),(W·T,SBO))
    bytes = (mn % t) * elementBytes + ((mn / t) % w) * 16 + (mn / (t * w)) * lbo +
            (k % 8) * w * 16 + (k / 8) * sbo;
  int64_t address = desc.startAddress + bytes;
  // Swizzle<log2 W, 4, 3>: the 16-byte chunk index within a row of W chunks
  // is XORed with the row index modulo W.
  const int64_t chunkBits = (address >> 4) & (w - 1);
  const int64_t rowBits = (address >> 7) & (w - 1);
  return (address & ~((w - 1) << 4)) | ((chunkBits ^ rowBits) << 4);
}

std::pair<int, int> lossjit::simt::wgmmaElementD(int t, int i) {
  // Figure "WGMMA .m64nNk16 register fragment layout for accumulator
  // matrix D": warp w of the warpgroup holds rows 16w .. 16w + 15; in each
  // 8-column block j, lane l holds rows l/4 and l/4 + 8 of the warp's
  // rows, columns 2·(l % 4) and + 1; registers 4j + {0, 1} and 4j + {2, 3}.
  const int warp = t / 32, lane = t % 32;
  const int row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
  const int col = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
  return {row, col};
}
