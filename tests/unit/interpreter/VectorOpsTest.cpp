//===- VectorOpsTest.cpp - vector ops against hand-computed results -------===//

#include "TestUtil.h"

#include <cmath>

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

constexpr auto F32 = ElementType::F32;

/// Runs `body` on `threads` threads with %in (16 floats, in[i] = i + 1) and
/// %out (threads * 8 floats, zeroed); returns %out.
std::vector<float> run(const std::string &body, int64_t threads = 1,
                       std::string *error = nullptr) {
  std::vector<float> in(16), out(size_t(threads) * 8, 0.0f);
  for (int i = 0; i < 16; ++i)
    in[size_t(i)] = float(i + 1);
  SimtBuffer inBuf("in", F32, in.data(), 16);
  SimtBuffer outBuf("out", F32, out.data(), int64_t(out.size()));
  std::string func =
      "gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel {\n"
      "  %t = gpu.thread_id x\n"
      "  %c0 = arith.constant 0 : index\n"
      "  %c1 = arith.constant 1 : index\n"
      "  %c8 = arith.constant 8 : index\n"
      "  %base = arith.muli %t, %c8 : index\n"
      "  %pad = arith.constant -1.0 : f32\n" +
      body + "\n  gpu.return\n}";
  std::string err =
      runKernel(func, {1, 1, 1}, {threads, 1, 1},
                {SimtArg::buffer(inBuf), SimtArg::buffer(outBuf)});
  if (error)
    *error = err;
  else
    EXPECT_EQ("", err) << func;
  return out;
}

TEST(VectorOps, LoadStoreAndElementwise) {
  auto out = run(R"(
  %v = vector.load %in[%t] : memref<?xf32>, vector<4xf32>
  %w = arith.mulf %v, %v : vector<4xf32>
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
  %f = vector.fma %v, %c, %w : vector<4xf32>
  vector.store %f, %out[%base] : memref<?xf32>, vector<4xf32>)",
                 2);
  for (int t = 0; t < 2; ++t)
    for (int l = 0; l < 4; ++l) {
      float v = float(t + l + 1);
      EXPECT_EQ(out[size_t(t * 8 + l)], v * float(l + 1) + v * v);
    }
}

TEST(VectorOps, TransferReadPadsOutOfBoundsAndMaskedLanes) {
  auto out = run(R"(
  %c14 = arith.constant 14 : index
  %v = vector.transfer_read %in[%c14], %pad : memref<?xf32>, vector<4xf32>
  vector.store %v, %out[%c0] : memref<?xf32>, vector<4xf32>
  %c2 = arith.constant 2 : index
  %m = vector.create_mask %c2 : vector<4xi1>
  %u = vector.transfer_read %in[%c0], %pad, %m {in_bounds = [true]} : memref<?xf32>, vector<4xf32>
  %c4 = arith.constant 4 : index
  vector.store %u, %out[%c4] : memref<?xf32>, vector<4xf32>)");
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 8),
            (std::vector<float>{15, 16, -1, -1, 1, 2, -1, -1}));
}

TEST(VectorOps, TransferWriteSkipsOutOfBoundsLanes) {
  auto out = run(R"(
  %c6 = arith.constant 6 : index
  %v = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
  vector.transfer_write %v, %out[%c6] : vector<4xf32>, memref<?xf32>)");
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 2}));
  std::string error;
  run(R"(
  %c6 = arith.constant 6 : index
  %v = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
  vector.transfer_write %v, %out[%c6] {in_bounds = [true]} : vector<4xf32>, memref<?xf32>)",
      1, &error);
  EXPECT_NE(
      error.find("out-of-bounds store to 'out' (global memory): index [8]"),
      std::string::npos)
      << error;
}

TEST(VectorOps, VectorLoadOutOfBounds) {
  std::string error;
  run(R"(
  %c13 = arith.constant 13 : index
  %v = vector.load %in[%c13] : memref<?xf32>, vector<4xf32>
  vector.store %v, %out[%c0] : memref<?xf32>, vector<4xf32>)",
      1, &error);
  EXPECT_NE(
      error.find("out-of-bounds load from 'in' (global memory): index [16] "
                 "outside shape [16]"),
      std::string::npos)
      << error;
}

TEST(VectorOps, BroadcastExtractInsertShapeCast) {
  auto out = run(R"(
  %s = memref.load %in[%c1] : memref<?xf32>
  %b = vector.broadcast %s : f32 to vector<2xf32>
  %row = vector.load %in[%c0] : memref<?xf32>, vector<3xf32>
  %m = vector.broadcast %row : vector<3xf32> to vector<2x3xf32>
  %e = vector.extract %m[1, 2] : f32 from vector<2x3xf32>
  %i = vector.insert %e, %b [1] : f32 into vector<2xf32>
  vector.store %i, %out[%c0] : memref<?xf32>, vector<2xf32>
  %r = vector.extract %m[0] : vector<3xf32> from vector<2x3xf32>
  %r2 = arith.addf %r, %r : vector<3xf32>
  %k = vector.insert %r2, %m [1] : vector<3xf32> into vector<2x3xf32>
  %flat = vector.shape_cast %k : vector<2x3xf32> to vector<6xf32>
  %c2 = arith.constant 2 : index
  vector.store %flat, %out[%c2] : memref<?xf32>, vector<6xf32>)");
  EXPECT_EQ(out, (std::vector<float>{2, 3, 1, 2, 3, 2, 4, 6}));
}

TEST(VectorOps, ExtractInsertDynamicPositions) {
  auto out = run(R"(
  %v = vector.load %in[%c0] : memref<?xf32>, vector<8xf32>
  %m = vector.shape_cast %v : vector<8xf32> to vector<2x4xf32>
  %e = vector.extract %m[%c1, %t] : f32 from vector<2x4xf32>
  %z = arith.constant dense<0.0> : vector<4xf32>
  %ins = vector.insert %e, %z [%t] : f32 into vector<4xf32>
  %row = vector.extract %m[1] : vector<4xf32> from vector<2x4xf32>
  %sum = arith.addf %ins, %row : vector<4xf32>
  vector.store %sum, %out[%base] : memref<?xf32>, vector<4xf32>
  %b = vector.broadcast %e : f32 to vector<2x2xf32>
  %flat = vector.shape_cast %b : vector<2x2xf32> to vector<4xf32>
  %c4 = arith.constant 4 : index
  %p = arith.addi %base, %c4 : index
  vector.store %flat, %out[%p] : memref<?xf32>, vector<4xf32>)",
                 4);
  for (int t = 0; t < 4; ++t)
    for (int l = 0; l < 4; ++l) {
      float row = float(5 + l), e = float(5 + t);
      EXPECT_EQ(out[size_t(t * 8 + l)], row + (l == t ? e : 0.0f))
          << t << " " << l;
      EXPECT_EQ(out[size_t(t * 8 + 4 + l)], e);
    }
  std::string error;
  run(R"(
  %v = vector.load %in[%c0] : memref<?xf32>, vector<4xf32>
  %c9 = arith.constant 9 : index
  %e = vector.extract %v[%c9] : f32 from vector<4xf32>
  memref.store %e, %out[%c0] : memref<?xf32>)",
      1, &error);
  EXPECT_NE(error.find("position 9 out of range for dimension 0 of size 4"),
            std::string::npos)
      << error;
}

TEST(VectorOps, Broadcast2D) {
  auto out = run(R"(
  %row = vector.load %in[%c0] : memref<?xf32>, vector<3xf32>
  %m = vector.broadcast %row : vector<3xf32> to vector<2x3xf32>
  %col = vector.load %in[%c8] : memref<?xf32>, vector<2xf32>
  %cc = vector.shape_cast %col : vector<2xf32> to vector<2x1xf32>
  %n = vector.broadcast %cc : vector<2x1xf32> to vector<2x3xf32>
  %s = arith.addf %m, %n : vector<2x3xf32>
  %flat = vector.shape_cast %s : vector<2x3xf32> to vector<6xf32>
  vector.store %flat, %out[%c0] : memref<?xf32>, vector<6xf32>)");
  // row = [1 2 3], col = [9 10]
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 6),
            (std::vector<float>{10, 11, 12, 11, 12, 13}));
}

TEST(VectorOps, Reductions) {
  auto out = run(R"(
  %v = vector.load %in[%c0] : memref<?xf32>, vector<5xf32>
  %add = vector.reduction <add>, %v : vector<5xf32> into f32
  %acc = arith.constant 100.0 : f32
  %adda = vector.reduction <add>, %v, %acc : vector<5xf32> into f32
  %mx = vector.reduction <maxnumf>, %v : vector<5xf32> into f32
  %mn = vector.reduction <minimumf>, %v : vector<5xf32> into f32
  %mul = vector.reduction <mul>, %v : vector<5xf32> into f32
  %r = vector.from_elements %add, %adda, %mx, %mn, %mul : vector<5xf32>
  vector.store %r, %out[%c0] : memref<?xf32>, vector<5xf32>
  %iv = vector.step : vector<4xindex>
  %imax = vector.reduction <maxsi>, %iv : vector<4xindex> into index
  %isum = vector.reduction <add>, %iv : vector<4xindex> into index
  %x = arith.addi %imax, %isum : index
  %xi = arith.index_cast %x : index to i32
  %xf = arith.sitofp %xi : i32 to f32
  %c5 = arith.constant 5 : index
  memref.store %xf, %out[%c5] : memref<?xf32>)");
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 6),
            (std::vector<float>{15, 115, 5, 1, 120, 3 + 6}));
}

TEST(VectorOps, IntegerReductions) {
  std::string func = R"(
gpu.func @k(%out: memref<?xi32>) kernel {
  %c0 = arith.constant 0 : index
  %v = arith.constant dense<[12, -3, 10, 6]> : vector<4xi32>
  %a = vector.reduction <and>, %v : vector<4xi32> into i32
  %o = vector.reduction <or>, %v : vector<4xi32> into i32
  %x = vector.reduction <xor>, %v : vector<4xi32> into i32
  %mu = vector.reduction <minui>, %v : vector<4xi32> into i32
  %ms = vector.reduction <minsi>, %v : vector<4xi32> into i32
  %xu = vector.reduction <maxui>, %v : vector<4xi32> into i32
  %p = vector.reduction <mul>, %v : vector<4xi32> into i32
  %r = vector.from_elements %a, %o, %x, %mu, %ms, %xu, %p : vector<7xi32>
  vector.store %r, %out[%c0] : memref<?xi32>, vector<7xi32>
  gpu.return
})";
  std::vector<int32_t> out(7);
  SimtBuffer outBuf("out", ElementType::I32, out.data(), 7);
  ASSERT_EQ("",
            runKernel(func, {1, 1, 1}, {1, 1, 1}, {SimtArg::buffer(outBuf)}));
  EXPECT_EQ(out, (std::vector<int32_t>{12 & -3 & 10 & 6, 12 | -3 | 10 | 6,
                                       12 ^ -3 ^ 10 ^ 6, 6, -3, -3,
                                       12 * -3 * 10 * 6}));
}

TEST(VectorOps, VectorSelectAndCompare) {
  auto out = run(R"(
  %v = vector.load %in[%c0] : memref<?xf32>, vector<4xf32>
  %th = arith.constant dense<2.5> : vector<4xf32>
  %gt = arith.cmpf ogt, %v, %th : vector<4xf32>
  %z = arith.constant dense<0.0> : vector<4xf32>
  %s = arith.select %gt, %v, %z : vector<4xi1>, vector<4xf32>
  vector.store %s, %out[%c0] : memref<?xf32>, vector<4xf32>
  %true = arith.constant true
  %s2 = arith.select %true, %z, %v : vector<4xf32>
  %c4 = arith.constant 4 : index
  vector.store %s2, %out[%c4] : memref<?xf32>, vector<4xf32>)");
  EXPECT_EQ(out, (std::vector<float>{0, 0, 3, 4, 0, 0, 0, 0}));
}

TEST(VectorOps, ConstantMaskAndPoison) {
  auto out = run(R"(
  %m = vector.constant_mask [2] : vector<4xi1>
  %p = ub.poison : vector<4xf32>
  %v = vector.load %in[%c0] : memref<?xf32>, vector<4xf32>
  %w = vector.transfer_read %in[%c8], %pad, %m : memref<?xf32>, vector<4xf32>
  %s = arith.addf %v, %w : vector<4xf32>
  vector.store %s, %out[%c0] : memref<?xf32>, vector<4xf32>)");
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 4),
            (std::vector<float>{1 + 9, 2 + 10, 3 - 1, 4 - 1}));
}

} // namespace

namespace {
TEST(VectorOps, IntegerRegisterFenceIsAnOpaqueCopy) {
  // opaqueThreadIdx: an empty side-effecting asm "=r,0" over an i32 returns
  // its operand (it only keeps LLVM from hoisting what uses it).
  auto out = run(R"(
  %w = arith.index_castui %t : index to i32
  %p = llvm.inline_asm has_side_effects "", "=r,0" %w : (i32) -> i32
  %i = arith.index_castui %p : i32 to index
  %v = memref.load %in[%i] : memref<?xf32>
  memref.store %v, %out[%base] : memref<?xf32>)",
                 3);
  for (int t = 0; t < 3; ++t)
    EXPECT_EQ(out[size_t(t * 8)], float(t + 1));
  // Any other asm text under that constraint is refused, not guessed at.
  std::string error;
  run(R"(
  %w = arith.index_castui %t : index to i32
  %p = llvm.inline_asm has_side_effects "mov.u32 $0, 7;", "=r,0" %w : (i32) -> i32)",
      1, &error);
  EXPECT_NE(error.find("only the empty fence of one i32"), std::string::npos) << error;
}
} // namespace
