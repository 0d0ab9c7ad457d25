//===- AsyncTransferModelTest.cpp - TMA maps and mbarriers, by the book ---===//
//
// The tensor-map rules are the CUDA driver API's for cuTensorMapEncodeTiled;
// the swizzles are checked against CUTLASS's Swizzle<B, 4, 3> written as
// address ^ ((address >> 3) & ((2^B − 1) << 4)); the mbarrier against the
// PTX ISA's phase rules (a phase completes when its pending arrivals and its
// transaction count are both zero; parity waits see the current or the
// previous phase).
//
//===----------------------------------------------------------------------===//

#include "testing/simt/AsyncTransferModel.h"

#include <gtest/gtest.h>

using namespace lossjit::simt;

namespace {

TensorMapDesc bf16Tile(uint32_t inner, uint32_t rows, TmaSwizzle swizzle) {
  TensorMapDesc d;
  d.type = ElementType::BF16;
  d.rank = 2;
  d.globalDim = {1000, 300};
  d.globalStrides = {2048};
  d.boxDim = {inner, rows};
  d.swizzle = swizzle;
  return d;
}

TEST(AsyncTransferModel, TensorMapRulesAreTheDriversRules) {
  EXPECT_EQ(bf16Tile(64, 64, TmaSwizzle::B128).validate(256), "");
  EXPECT_EQ(bf16Tile(64, 64, TmaSwizzle::B128).validate(8),
            "tensor map global address must be 16-byte aligned");
  EXPECT_EQ(bf16Tile(128, 64, TmaSwizzle::B128).validate(256),
            "tensor map inner box of 256 bytes exceeds the 128-byte swizzle span");
  EXPECT_EQ(bf16Tile(128, 64, TmaSwizzle::None).validate(256), "");
  EXPECT_EQ(bf16Tile(4, 64, TmaSwizzle::None).validate(256),
            "tensor map inner box (boxDim[0] x element size = 8 bytes) must be a multiple of "
            "16 bytes");
  EXPECT_EQ(bf16Tile(64, 257, TmaSwizzle::None).validate(256),
            "tensor map boxDim of dimension 1 must be in [1, 256], got 257");
  TensorMapDesc stride = bf16Tile(64, 64, TmaSwizzle::None);
  stride.globalStrides = {2008};
  EXPECT_EQ(stride.validate(256),
            "tensor map globalStrides of dimension 1 must be a multiple of 16 below 2^40 bytes, "
            "got 2008");
  stride.globalStrides = {1984};
  EXPECT_EQ(stride.validate(256),
            "tensor map globalStrides of dimension 1 (1984 bytes) is smaller than the dimension "
            "below it (2000 bytes)");
  TensorMapDesc ints = bf16Tile(64, 64, TmaSwizzle::None);
  ints.type = ElementType::I32;
  ints.globalStrides = {4096};
  ints.oobFill = TmaOobFill::Nan;
  EXPECT_EQ(ints.validate(256),
            "tensor map NaN out-of-bounds fill needs a floating-point element type");
  EXPECT_EQ(bf16Tile(64, 32, TmaSwizzle::None).boxBytes(), 64 * 32 * 2);
}

TEST(AsyncTransferModel, SwizzlesAreCutlassSwizzle_B_4_3) {
  for (TmaSwizzle s : {TmaSwizzle::None, TmaSwizzle::B32, TmaSwizzle::B64, TmaSwizzle::B128}) {
    TensorMapDesc d = bf16Tile(s == TmaSwizzle::None ? 64 : 0, 16, s);
    const int64_t span = d.swizzleSpan();
    d.boxDim[0] = uint32_t(span ? span / 2 : 64);
    const int64_t mask = span ? (span / 16 - 1) << 4 : 0;
    for (int64_t destination : {int64_t(1024), int64_t(4096)})
      for (uint32_t row = 0; row < 16; ++row)
        for (uint32_t col = 0; col < d.boxDim[0]; ++col) {
          int64_t address = destination + (int64_t(row) * d.boxDim[0] + col) * 2;
          int64_t swizzled = address ^ ((address >> 3) & mask);
          EXPECT_EQ(d.sharedOffset(destination, {col, row, 0, 0, 0}), swizzled - destination)
              << span << "-byte swizzle, row " << row << " column " << col;
        }
  }
  // The 128-byte swizzle: row r of a 1024-byte aligned box puts its chunk c
  // at chunk c ^ (r % 8).
  TensorMapDesc d = bf16Tile(64, 8, TmaSwizzle::B128);
  EXPECT_EQ(d.sharedOffset(2048, {8, 3, 0, 0, 0}), 3 * 128 + (1 ^ 3) * 16);
}

TEST(AsyncTransferModel, MbarrierPhasesCompleteOnArrivalsAndTransactions) {
  MbarrierModel m;
  EXPECT_EQ(m.arrive(), "arrive on an mbarrier that no mbarrier.init initialized");
  EXPECT_EQ(m.init(0), "mbarrier.init count must be in [1, 2^20 - 1], got 0");
  ASSERT_EQ(m.init(2), "");
  // Phase 0 is in progress: parity 0 is not complete, parity 1 (the phase
  // "before" it) is.
  EXPECT_FALSE(m.phaseComplete(false));
  EXPECT_TRUE(m.phaseComplete(true));
  EXPECT_EQ(m.arrive(), "");
  EXPECT_FALSE(m.phaseComplete(false));
  EXPECT_EQ(m.arrive(), "");
  EXPECT_TRUE(m.phaseComplete(false));
  EXPECT_FALSE(m.phaseComplete(true));
  EXPECT_EQ(m.pendingArrivals(), 2);
  // Phase 1: one arrival with expect_tx, then the copy's bytes complete it.
  EXPECT_EQ(m.arrive(8192), "");
  EXPECT_EQ(m.arrive(), "");
  EXPECT_FALSE(m.phaseComplete(true)) << "bytes outstanding";
  EXPECT_EQ(m.completeTx(4096), "");
  EXPECT_FALSE(m.phaseComplete(true));
  EXPECT_EQ(m.completeTx(4096), "");
  EXPECT_TRUE(m.phaseComplete(true));
  EXPECT_EQ(m.phases(), 2u);
  // Phase 2: the copy may land before its expect_tx (the count goes
  // negative, then back to zero).
  EXPECT_EQ(m.completeTx(512), "");
  EXPECT_EQ(m.transactionCount(), -512);
  EXPECT_EQ(m.arrive(512), "");
  EXPECT_FALSE(m.phaseComplete(false));
  EXPECT_EQ(m.arrive(), "");
  EXPECT_TRUE(m.phaseComplete(false));
  EXPECT_EQ(m.arrive(int64_t(1) << 20),
            "mbarrier transaction count out of range [-(2^20 - 1), 2^20 - 1] after expect_tx "
            "of 1048576 bytes");
}

} // namespace
