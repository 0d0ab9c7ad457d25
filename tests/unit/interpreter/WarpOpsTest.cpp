//===- WarpOpsTest.cpp - shuffle, mma.sync, ldmatrix, async copies --------===//
//
// The mma.sync fragment layouts below are spelled out register by register
// from the PTX ISA tables (not computed by the interpreter's own layout
// functions), and the ldmatrix + mma test checks the composition against a
// plain matrix product, which holds only if both instructions' layouts are
// right.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>
#include <random>

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

constexpr auto F32 = ElementType::F32;
constexpr auto F16 = ElementType::F16;
constexpr auto BF16 = ElementType::BF16;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// --- gpu.shuffle ----------------------------------------------------------

struct ShuffleResult {
  std::vector<float> value;
  std::vector<uint8_t> valid;
  std::string error;
};

ShuffleResult shuffle(const std::string &mode, int offset, int width,
                      int64_t threads = 64, const std::string &guard = "") {
  ShuffleResult r;
  r.value.assign(size_t(threads), -1.0f);
  r.valid.assign(size_t(threads), 7);
  SimtBuffer valueBuf("value", F32, r.value.data(), threads);
  SimtBuffer validBuf("valid", ElementType::I1, r.valid.data(), threads);
  std::string body = "  %off = arith.constant " + std::to_string(offset) +
                     " : i32\n"
                     "  %w = arith.constant " +
                     std::to_string(width) +
                     " : i32\n"
                     "  %s, %ok = gpu.shuffle " +
                     mode +
                     " %f, %off, %w : f32\n"
                     "  memref.store %s, %value[%t] : memref<?xf32>\n"
                     "  memref.store %ok, %valid[%t] : memref<?xi1>\n";
  if (!guard.empty())
    body = "  %c = arith.constant " + guard +
           " : index\n"
           "  %in = arith.cmpi ult, %t, %c : index\n"
           "  scf.if %in {\n" +
           body + "  }\n";
  std::string func =
      "gpu.func @k(%value: memref<?xf32>, %valid: memref<?xi1>) kernel {\n"
      "  %t = gpu.thread_id x\n"
      "  %ti = arith.index_cast %t : index to i32\n"
      "  %f = arith.sitofp %ti : i32 to f32\n" +
      body + "  gpu.return\n}";
  r.error = runKernel(func, {1, 1, 1}, {threads, 1, 1},
                      {SimtArg::buffer(valueBuf), SimtArg::buffer(validBuf)});
  return r;
}

TEST(Shuffle, ModesFullWidth) {
  auto x = shuffle("xor", 5, 32);
  auto down = shuffle("down", 3, 32);
  auto up = shuffle("up", 3, 32);
  auto idx = shuffle("idx", 7, 32);
  for (auto *r : {&x, &down, &up, &idx})
    ASSERT_EQ("", r->error);
  for (int t = 0; t < 64; ++t) {
    int lane = t % 32, base = t - lane;
    EXPECT_EQ(x.value[size_t(t)], float(base + (lane ^ 5)));
    EXPECT_EQ(x.valid[size_t(t)], 1);
    bool downOk = lane + 3 < 32;
    EXPECT_EQ(down.valid[size_t(t)], downOk);
    EXPECT_EQ(down.value[size_t(t)], float(downOk ? t + 3 : t)) << t;
    bool upOk = lane >= 3;
    EXPECT_EQ(up.valid[size_t(t)], upOk);
    EXPECT_EQ(up.value[size_t(t)], float(upOk ? t - 3 : t)) << t;
    EXPECT_EQ(idx.value[size_t(t)], float(base + 7));
    EXPECT_EQ(idx.valid[size_t(t)], 1);
  }
}

TEST(Shuffle, PartialWidth) {
  auto x = shuffle("xor", 8, 16);
  auto down = shuffle("down", 4, 16);
  auto idx = shuffle("idx", 20, 16);
  for (int t = 0; t < 64; ++t) {
    int lane = t % 32, base = t - lane;
    bool inWidth = lane < 16;
    EXPECT_EQ(x.valid[size_t(t)], inWidth) << t;
    EXPECT_EQ(x.value[size_t(t)], float(inWidth ? base + (lane ^ 8) : t)) << t;
    bool downOk = inWidth && lane + 4 < 16;
    EXPECT_EQ(down.valid[size_t(t)], downOk) << t;
    EXPECT_EQ(down.value[size_t(t)], float(downOk ? t + 4 : t)) << t;
    EXPECT_EQ(idx.valid[size_t(t)], 0) << t; // source lane 20 >= width
  }
}

TEST(Shuffle, ButterflyReduction) {
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %ti = arith.index_cast %t : index to i32
  %f = arith.sitofp %ti : i32 to f32
  %w = arith.constant 32 : i32
  %o16 = arith.constant 16 : i32
  %o8 = arith.constant 8 : i32
  %o4 = arith.constant 4 : i32
  %o2 = arith.constant 2 : i32
  %o1 = arith.constant 1 : i32
  %s16, %v16 = gpu.shuffle xor %f, %o16, %w : f32
  %a16 = arith.addf %f, %s16 : f32
  %s8, %v8 = gpu.shuffle xor %a16, %o8, %w : f32
  %a8 = arith.addf %a16, %s8 : f32
  %s4, %v4 = gpu.shuffle xor %a8, %o4, %w : f32
  %a4 = arith.addf %a8, %s4 : f32
  %s2, %v2 = gpu.shuffle xor %a4, %o2, %w : f32
  %a2 = arith.addf %a4, %s2 : f32
  %s1, %v1 = gpu.shuffle xor %a2, %o1, %w : f32
  %a1 = arith.addf %a2, %s1 : f32
  memref.store %a1, %out[%t] : memref<?xf32>
  gpu.return
})";
  std::vector<float> out(96);
  SimtBuffer outBuf("out", F32, out.data(), 96);
  ASSERT_EQ("",
            runKernel(func, {1, 1, 1}, {96, 1, 1}, {SimtArg::buffer(outBuf)}));
  for (int t = 0; t < 96; ++t) {
    int base = t / 32 * 32;
    EXPECT_EQ(out[size_t(t)], float(32 * base + 31 * 32 / 2)) << t;
  }
}

TEST(Shuffle, VectorValues) {
  std::string func = R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %t = gpu.thread_id x
  %ti = arith.index_cast %t : index to i32
  %f = arith.sitofp %ti : i32 to f32
  %two = arith.constant 2.0 : f32
  %g = arith.mulf %f, %two : f32
  %v = vector.from_elements %f, %g : vector<2xf32>
  %w = arith.constant 32 : i32
  %o = arith.constant 1 : i32
  %s, %ok = gpu.shuffle down %v, %o, %w : vector<2xf32>
  %c2 = arith.constant 2 : index
  %p = arith.muli %t, %c2 : index
  vector.store %s, %out[%p] : memref<?xf32>, vector<2xf32>
  gpu.return
})";
  std::vector<float> out(64);
  SimtBuffer outBuf("out", F32, out.data(), 64);
  ASSERT_EQ("",
            runKernel(func, {1, 1, 1}, {32, 1, 1}, {SimtArg::buffer(outBuf)}));
  for (int t = 0; t < 32; ++t) {
    int src = t < 31 ? t + 1 : t;
    EXPECT_EQ(out[size_t(2 * t)], float(src));
    EXPECT_EQ(out[size_t(2 * t + 1)], float(2 * src));
  }
}

TEST(Shuffle, InactiveLanesAreAnError) {
  auto r = shuffle("xor", 1, 32, 64, "16");
  EXPECT_TRUE(contains(r.error,
                       "gpu.shuffle with width 32 needs lanes 0..31 of "
                       "the warp active, lane 16 is not"))
      << r.error;
  // Width 16 needs only lanes 0..15, which are active.
  EXPECT_EQ("", shuffle("xor", 1, 16, 64, "16").error);
}

// --- mma.sync --------------------------------------------------------------

/// (row, col) of fragment element i of `lane`, spelled out per register from
/// the PTX ISA ("Matrix Fragments for mma.m16n8k16 / m16n8k8").
struct Pos {
  int row, col;
};
Pos fragmentA(int m, int k, bool tf32, int lane, int i) {
  int g = lane / 4, c = lane % 4;
  if (tf32 && k == 8) {
    const Pos table[4] = {{g, c}, {g + 8, c}, {g, c + 4}, {g + 8, c + 4}};
    return table[i];
  }
  if (tf32 && k == 4) {
    const Pos table[2] = {{g, c}, {g + 8, c}};
    return table[i];
  }
  if (!tf32 && k == 16) {
    const Pos table[8] = {{g, 2 * c},         {g, 2 * c + 1},    {g + 8, 2 * c},
                          {g + 8, 2 * c + 1}, {g, 2 * c + 8},    {g, 2 * c + 9},
                          {g + 8, 2 * c + 8}, {g + 8, 2 * c + 9}};
    return table[i];
  }
  const Pos table[4] = {
      {g, 2 * c}, {g, 2 * c + 1}, {g + 8, 2 * c}, {g + 8, 2 * c + 1}};
  (void)m;
  return table[i];
}
Pos fragmentB(int k, bool tf32, int lane, int i) {
  int g = lane / 4, c = lane % 4;
  if (tf32 && k == 4)
    return Pos{c, g};
  if (tf32) {
    const Pos table[2] = {{c, g}, {c + 4, g}};
    return table[i];
  }
  if (k == 16) {
    const Pos table[4] = {
        {2 * c, g}, {2 * c + 1, g}, {2 * c + 8, g}, {2 * c + 9, g}};
    return table[i];
  }
  const Pos table[2] = {{2 * c, g}, {2 * c + 1, g}};
  return table[i];
}
Pos fragmentC(int lane, int i) {
  int g = lane / 4, c = lane % 4;
  const Pos table[4] = {
      {g, 2 * c}, {g, 2 * c + 1}, {g + 8, 2 * c}, {g + 8, 2 * c + 1}};
  return table[i];
}

struct MmaCase {
  std::string inType;  // f16, bf16, f32 (tf32)
  std::string accType; // f32, f16
  int k;
};

double roundIn(const std::string &type, double v) {
  if (type == "f16")
    return roundToHalf(v);
  if (type == "bf16")
    return roundToBFloat16(v);
  // tf32: 10 explicit mantissa bits (values chosen exactly representable).
  return double(float(roundToFormat(v, 11, -126, 3.4e38)));
}

void checkMma(const MmaCase &mc) {
  SCOPED_TRACE(mc.inType + " -> " + mc.accType + " k=" + std::to_string(mc.k));
  bool tf32 = mc.inType == "f32";
  int sizeA = tf32 ? mc.k / 2 : mc.k / 2, sizeB = tf32 ? mc.k / 4 : mc.k / 4;
  std::mt19937 rng(mc.k * 7 + int(mc.inType.size()));
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<std::vector<double>> A(16, std::vector<double>(size_t(mc.k))),
      B(size_t(mc.k), std::vector<double>(8)), C(16, std::vector<double>(8));
  for (auto &row : A)
    for (double &v : row)
      v = roundIn(mc.inType, u(rng));
  for (auto &row : B)
    for (double &v : row)
      v = roundIn(mc.inType, u(rng));
  for (auto &row : C)
    for (double &v : row)
      v = mc.accType == "f16" ? roundToHalf(u(rng)) : double(float(u(rng)));
  ElementType in = *parseElementType(mc.inType),
              acc = *parseElementType(mc.accType);
  SimtBuffer aBuf("a", in, 32 * sizeA), bBuf("b", in, 32 * sizeB),
      cBuf("c", acc, 32 * 4), dBuf("d", acc, 32 * 4);
  auto word = [](ElementType, double v) -> uint64_t {
    return f32Word(float(v)); // all test values are exact in the type
  };
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < sizeA; ++i) {
      Pos p = fragmentA(16, mc.k, tf32, lane, i);
      aBuf.storeWord(lane * sizeA + i,
                     word(in, A[size_t(p.row)][size_t(p.col)]));
    }
    for (int i = 0; i < sizeB; ++i) {
      Pos p = fragmentB(mc.k, tf32, lane, i);
      bBuf.storeWord(lane * sizeB + i,
                     word(in, B[size_t(p.row)][size_t(p.col)]));
    }
    for (int i = 0; i < 4; ++i) {
      Pos p = fragmentC(lane, i);
      cBuf.storeWord(lane * 4 + i, word(acc, C[size_t(p.row)][size_t(p.col)]));
    }
  }
  std::string t = mc.inType, a = mc.accType;
  std::string aShape =
      tf32 ? std::to_string(sizeA) + "x1" : std::to_string(sizeA / 2) + "x2";
  std::string bShape =
      tf32 ? std::to_string(sizeB) + "x1" : std::to_string(sizeB / 2) + "x2";
  std::string func =
      "gpu.func @k(%a: memref<?x" + t + ">, %b: memref<?x" + t +
      ">, %c: memref<?x" + a + ">, %d: memref<?x" + a +
      ">) kernel {\n"
      "  %l = gpu.lane_id\n"
      "  %cA = arith.constant " +
      std::to_string(sizeA) +
      " : index\n"
      "  %cB = arith.constant " +
      std::to_string(sizeB) +
      " : index\n"
      "  %c4 = arith.constant 4 : index\n"
      "  %pa = arith.muli %l, %cA : index\n"
      "  %pb = arith.muli %l, %cB : index\n"
      "  %pc = arith.muli %l, %c4 : index\n"
      "  %fa = vector.load %a[%pa] : memref<?x" +
      t + ">, vector<" + std::to_string(sizeA) + "x" + t +
      ">\n"
      "  %fb = vector.load %b[%pb] : memref<?x" +
      t + ">, vector<" + std::to_string(sizeB) + "x" + t +
      ">\n"
      "  %fc = vector.load %c[%pc] : memref<?x" +
      a + ">, vector<4x" + a +
      ">\n"
      "  %va = vector.shape_cast %fa : vector<" +
      std::to_string(sizeA) + "x" + t + "> to vector<" + aShape + "x" + t +
      ">\n"
      "  %vb = vector.shape_cast %fb : vector<" +
      std::to_string(sizeB) + "x" + t + "> to vector<" + bShape + "x" + t +
      ">\n"
      "  %vc = vector.shape_cast %fc : vector<4x" +
      a + "> to vector<2x2x" + a +
      ">\n"
      "  %vd = nvgpu.mma.sync (%va, %vb, %vc) {mmaShape = [16, 8, " +
      std::to_string(mc.k) + "]" + (tf32 ? ", tf32Enabled" : "") +
      "} : (vector<" + aShape + "x" + t + ">, vector<" + bShape + "x" + t +
      ">, vector<2x2x" + a + ">) -> vector<2x2x" + a +
      ">\n"
      "  %fd = vector.shape_cast %vd : vector<2x2x" +
      a + "> to vector<4x" + a +
      ">\n"
      "  vector.store %fd, %d[%pc] : memref<?x" +
      a + ">, vector<4x" + a +
      ">\n"
      "  gpu.return\n}";
  ASSERT_EQ("", runKernel(func, {1, 1, 1}, {32, 1, 1},
                          {SimtArg::buffer(aBuf), SimtArg::buffer(bBuf),
                           SimtArg::buffer(cBuf), SimtArg::buffer(dBuf)}))
      << func;
  double tolerance = mc.accType == "f16" ? 1e-3 : 1e-6;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      Pos p = fragmentC(lane, i);
      double want = C[size_t(p.row)][size_t(p.col)];
      for (int k = 0; k < mc.k; ++k)
        want += A[size_t(p.row)][size_t(k)] * B[size_t(k)][size_t(p.col)];
      double got = wordF32(dBuf.loadWord(lane * 4 + i));
      EXPECT_NEAR(got, want, tolerance * (1 + std::fabs(want)))
          << "lane " << lane << " d" << i << " = D[" << p.row << "][" << p.col
          << "]";
    }
}

TEST(MmaSync, M16N8K16F16) { checkMma({"f16", "f32", 16}); }
TEST(MmaSync, M16N8K16BF16) { checkMma({"bf16", "f32", 16}); }
TEST(MmaSync, M16N8K16F16Accumulator) { checkMma({"f16", "f16", 16}); }
TEST(MmaSync, M16N8K8F16) { checkMma({"f16", "f32", 8}); }
TEST(MmaSync, M16N8K8TF32) { checkMma({"f32", "f32", 8}); }
TEST(MmaSync, M16N8K8BF16) { checkMma({"bf16", "f32", 8}); }
TEST(MmaSync, M16N8K4TF32) { checkMma({"f32", "f32", 4}); }

TEST(MmaSync, NeedsTheWholeWarp) {
  std::string func = R"(
gpu.func @k() kernel {
  %t = gpu.thread_id x
  %c8 = arith.constant 8 : index
  %a = arith.constant dense<1.0> : vector<4x2xf16>
  %b = arith.constant dense<1.0> : vector<2x2xf16>
  %c = arith.constant dense<0.0> : vector<2x2xf32>
  %lt = arith.cmpi ult, %t, %c8 : index
  scf.if %lt {
    %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
  }
  gpu.return
})";
  std::string error = runKernel(func, {1, 1, 1}, {32, 1, 1}, {});
  EXPECT_TRUE(
      contains(error, "nvgpu.mma.sync executed by 8 of the 32 lanes of warp 0"))
      << error;
  error = runKernel(func, {1, 1, 1}, {8, 1, 1}, {});
  EXPECT_TRUE(contains(error, "the block size is not a multiple of 32"))
      << error;
}

// --- ldmatrix --------------------------------------------------------------

std::string ldmatrixKernel(bool transpose, int tiles,
                           const std::string &guard = "") {
  // Shared 8x(8*tiles) f16 matrix M[r][c] = r * 64 + c (as tiles side by
  // side); lane l < 8*tiles addresses row l%8 of tile l/8.
  std::string n = std::to_string(8 * tiles);
  std::string v = std::to_string(tiles);
  std::string load = "  %r = nvgpu.ldmatrix %sm[%row, %col] {numTiles = " + v +
                     " : i32, transpose = " + (transpose ? "true" : "false") +
                     "} : memref<8x" + n +
                     "xf16, #gpu.address_space<workgroup>> -> vector<" + v +
                     "x2xf16>\n"
                     "  %flat = vector.shape_cast %r : vector<" +
                     v + "x2xf16> to vector<" + std::to_string(2 * tiles) +
                     "xf16>\n"
                     "  %cw = arith.constant " +
                     std::to_string(2 * tiles) +
                     " : index\n"
                     "  %p = arith.muli %l, %cw : index\n"
                     "  vector.store %flat, %out[%p] : memref<?xf16>, vector<" +
                     std::to_string(2 * tiles) + "xf16>\n";
  if (!guard.empty())
    load = "  %g = arith.constant " + guard +
           " : index\n  %in = arith.cmpi ult, %l, %g : index\n"
           "  scf.if %in {\n" +
           load + "  }\n";
  return "gpu.func @k(%out: memref<?xf16>) workgroup(%sm : memref<8x" + n +
         "xf16, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel {\n"
         "  %l = gpu.lane_id\n"
         "  %c0 = arith.constant 0 : index\n"
         "  %c1 = arith.constant 1 : index\n"
         "  %c8 = arith.constant 8 : index\n"
         "  %c64 = arith.constant 64 : index\n"
         "  %cn = arith.constant " +
         n +
         " : index\n"
         "  scf.for %r = %c0 to %c8 step %c1 {\n"
         "    %lt = arith.cmpi ult, %l, %cn : index\n"
         "    scf.if %lt {\n"
         "      %rv = arith.muli %r, %c64 : index\n"
         "      %e = arith.addi %rv, %l : index\n"
         "      %ei = arith.index_cast %e : index to i32\n"
         "      %ef = arith.sitofp %ei : i32 to f16\n"
         "      memref.store %ef, %sm[%r, %l] : memref<8x" +
         n +
         "xf16, #gpu.address_space<workgroup>>\n"
         "    }\n"
         "  }\n"
         "  gpu.barrier\n"
         "  %row = arith.remui %l, %c8 : index\n"
         "  %tile = arith.divui %l, %c8 : index\n"
         "  %tc = arith.remui %tile, %cn : index\n"
         "  %col0 = arith.muli %tile, %c8 : index\n"
         "  %col = arith.remui %col0, %cn : index\n" +
         load + "  gpu.return\n}";
}

TEST(LdMatrix, X1HandChecked) {
  for (bool transpose : {false, true}) {
    std::vector<uint16_t> out(64, 0);
    SimtBuffer outBuf("out", F16, out.data(), 64);
    ASSERT_EQ("", runKernel(ldmatrixKernel(transpose, 1), {1, 1, 1}, {32, 1, 1},
                            {SimtArg::buffer(outBuf)}));
    auto at = [&](int lane, int j) {
      return halfBitsToFloat(out[size_t(2 * lane + j)]);
    };
    if (!transpose) {
      // Lane 5 holds row 1, columns 2 and 3; lane 31 row 7, columns 6, 7.
      EXPECT_EQ(at(5, 0), 64 + 2);
      EXPECT_EQ(at(5, 1), 64 + 3);
      EXPECT_EQ(at(31, 0), 7 * 64 + 6);
      EXPECT_EQ(at(31, 1), 7 * 64 + 7);
    } else {
      // Lane 5 holds column 1 of rows 2 and 3.
      EXPECT_EQ(at(5, 0), 2 * 64 + 1);
      EXPECT_EQ(at(5, 1), 3 * 64 + 1);
      EXPECT_EQ(at(31, 0), 6 * 64 + 7);
      EXPECT_EQ(at(31, 1), 7 * 64 + 7);
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < 2; ++j) {
        int r = lane / 4, c = 2 * (lane % 4) + j;
        if (transpose)
          std::swap(r, c);
        EXPECT_EQ(at(lane, j), float(r * 64 + c)) << lane << " " << j;
      }
  }
}

TEST(LdMatrix, X4TilesSideBySide) {
  std::vector<uint16_t> out(256, 0);
  SimtBuffer outBuf("out", F16, out.data(), 256);
  ASSERT_EQ("", runKernel(ldmatrixKernel(false, 4), {1, 1, 1}, {32, 1, 1},
                          {SimtArg::buffer(outBuf)}));
  for (int lane = 0; lane < 32; ++lane)
    for (int tile = 0; tile < 4; ++tile)
      for (int j = 0; j < 2; ++j)
        EXPECT_EQ(halfBitsToFloat(out[size_t(8 * lane + 2 * tile + j)]),
                  float((lane / 4) * 64 + tile * 8 + 2 * (lane % 4) + j));
}

TEST(LdMatrix, NeedsConvergedWarp) {
  std::vector<uint16_t> out(64, 0);
  SimtBuffer outBuf("out", F16, out.data(), 64);
  std::string error = runKernel(ldmatrixKernel(false, 1, "16"), {1, 1, 1},
                                {32, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "nvgpu.ldmatrix executed by 16 of the 32 lanes"))
      << error;
}

/// ldmatrix feeding mma.sync against a plain matrix product: A (16x16) and
/// B (16x8) in shared memory, B once as [n][k] (plain ldmatrix) and once as
/// [k][n] (ldmatrix .trans).
TEST(LdMatrix, FeedsMmaSync) {
  std::string func = R"(
gpu.func @k(%ga: memref<?xf16>, %gb: memref<?xf16>, %d1: memref<?xf32>, %d2: memref<?xf32>)
    workgroup(%sa : memref<16x16xf16, #gpu.address_space<workgroup>> {llvm.align = 16 : i64},
              %sbt : memref<8x16xf16, #gpu.address_space<workgroup>> {llvm.align = 16 : i64},
              %sb : memref<16x8xf16, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel {
  %l = gpu.lane_id
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  // Each lane copies half a row of A (row l/2, 8 columns) and B.
  %ar = arith.divui %l, %c2 : index
  %ah = arith.remui %l, %c2 : index
  %ac = arith.muli %ah, %c8 : index
  scf.for %j = %c0 to %c8 step %c1 {
    %col = arith.addi %ac, %j : index
    %r16 = arith.muli %ar, %c16 : index
    %ai = arith.addi %r16, %col : index
    %av = memref.load %ga[%ai] : memref<?xf16>
    memref.store %av, %sa[%ar, %col] : memref<16x16xf16, #gpu.address_space<workgroup>>
  }
  // B[k][n] at gb[k * 8 + n]: lanes 0..15 copy row k = l of B.
  %lk = arith.cmpi ult, %l, %c16 : index
  scf.if %lk {
    scf.for %n = %c0 to %c8 step %c1 {
      %k8 = arith.muli %l, %c8 : index
      %bi = arith.addi %k8, %n : index
      %bv = memref.load %gb[%bi] : memref<?xf16>
      memref.store %bv, %sb[%l, %n] : memref<16x8xf16, #gpu.address_space<workgroup>>
      memref.store %bv, %sbt[%n, %l] : memref<8x16xf16, #gpu.address_space<workgroup>>
    }
  }
  gpu.barrier
  // A, x4: lane l addresses row l % 16, column 8 * (l / 16).
  %arow = arith.remui %l, %c16 : index
  %ahalf = arith.divui %l, %c16 : index
  %acol = arith.muli %ahalf, %c8 : index
  %fa = nvgpu.ldmatrix %sa[%arow, %acol] {numTiles = 4 : i32, transpose = false} : memref<16x16xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
  // B as [n][k], x2: lane l < 16 addresses row n = l % 8, column k = 8 * (l / 8).
  %l16 = arith.remui %l, %c16 : index
  %brow = arith.remui %l16, %c8 : index
  %bhalf = arith.divui %l16, %c8 : index
  %bcol = arith.muli %bhalf, %c8 : index
  %fb1 = nvgpu.ldmatrix %sbt[%brow, %bcol] {numTiles = 2 : i32, transpose = false} : memref<8x16xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
  // B as [k][n], x2 .trans: lane l < 16 addresses row k = l.
  %fb2 = nvgpu.ldmatrix %sb[%l16, %c0] {numTiles = 2 : i32, transpose = true} : memref<16x8xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
  %zero = arith.constant dense<0.0> : vector<2x2xf32>
  %r1 = nvgpu.mma.sync (%fa, %fb1, %zero) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
  %r2 = nvgpu.mma.sync (%fa, %fb2, %zero) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
  // D element (i, j) of the lane: row groupID + 8 i, column 2 * tig + j.
  %g = arith.divui %l, %c4 : index
  %tig = arith.remui %l, %c4 : index
  %col0 = arith.muli %tig, %c2 : index
  %row1 = arith.addi %g, %c8 : index
  %x00 = vector.extract %r1[0, 0] : f32 from vector<2x2xf32>
  %x01 = vector.extract %r1[0, 1] : f32 from vector<2x2xf32>
  %x10 = vector.extract %r1[1, 0] : f32 from vector<2x2xf32>
  %x11 = vector.extract %r1[1, 1] : f32 from vector<2x2xf32>
  %y00 = vector.extract %r2[0, 0] : f32 from vector<2x2xf32>
  %y01 = vector.extract %r2[0, 1] : f32 from vector<2x2xf32>
  %y10 = vector.extract %r2[1, 0] : f32 from vector<2x2xf32>
  %y11 = vector.extract %r2[1, 1] : f32 from vector<2x2xf32>
  %i0 = arith.muli %g, %c8 : index
  %i00 = arith.addi %i0, %col0 : index
  %i01 = arith.addi %i00, %c1 : index
  %i1 = arith.muli %row1, %c8 : index
  %i10 = arith.addi %i1, %col0 : index
  %i11 = arith.addi %i10, %c1 : index
  memref.store %x00, %d1[%i00] : memref<?xf32>
  memref.store %x01, %d1[%i01] : memref<?xf32>
  memref.store %x10, %d1[%i10] : memref<?xf32>
  memref.store %x11, %d1[%i11] : memref<?xf32>
  memref.store %y00, %d2[%i00] : memref<?xf32>
  memref.store %y01, %d2[%i01] : memref<?xf32>
  memref.store %y10, %d2[%i10] : memref<?xf32>
  memref.store %y11, %d2[%i11] : memref<?xf32>
  gpu.return
})";
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<uint16_t> a(256), b(128);
  std::vector<double> A(256), B(128);
  for (int i = 0; i < 256; ++i) {
    A[size_t(i)] = roundToHalf(u(rng));
    a[size_t(i)] = doubleToHalfBits(A[size_t(i)]);
  }
  for (int i = 0; i < 128; ++i) {
    B[size_t(i)] = roundToHalf(u(rng));
    b[size_t(i)] = doubleToHalfBits(B[size_t(i)]);
  }
  std::vector<float> d1(128, NAN), d2(128, NAN);
  SimtBuffer aBuf("ga", F16, a.data(), 256), bBuf("gb", F16, b.data(), 128),
      d1Buf("d1", F32, d1.data(), 128), d2Buf("d2", F32, d2.data(), 128);
  ASSERT_EQ("", runKernel(func, {1, 1, 1}, {32, 1, 1},
                          {SimtArg::buffer(aBuf), SimtArg::buffer(bBuf),
                           SimtArg::buffer(d1Buf), SimtArg::buffer(d2Buf)}));
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = 0;
      for (int k = 0; k < 16; ++k)
        want += A[size_t(m * 16 + k)] * B[size_t(k * 8 + n)];
      EXPECT_NEAR(d1[size_t(m * 8 + n)], want, 1e-5) << m << "," << n;
      EXPECT_NEAR(d2[size_t(m * 8 + n)], want, 1e-5) << m << "," << n;
    }
}

// --- cp.async ----------------------------------------------------------------

std::string asyncKernel(const std::string &afterCopy,
                        const std::string &srcElements = "") {
  return R"(
gpu.func @k(%g: memref<?xf32>, %out: memref<?xf32>) workgroup(%sm : memref<128xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel {
  %t = gpu.thread_id x
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %off = arith.muli %t, %c4 : index
  %tok = nvgpu.device_async_copy %g[%off], %sm[%off], 4)" +
         srcElements +
         R"( : memref<?xf32> to memref<128xf32, #gpu.address_space<workgroup>>
  %grp = nvgpu.device_async_create_group %tok
)" + afterCopy +
         R"(
  %t1 = arith.addi %t, %c1 : index
  %nb = arith.remui %t1, %c32 : index
  %n4 = arith.muli %nb, %c4 : index
  %n = arith.addi %n4, %c2 : index
  %v = memref.load %sm[%n] : memref<128xf32, #gpu.address_space<workgroup>>
  memref.store %v, %out[%t] : memref<?xf32>
  gpu.return
})";
}

struct AsyncRun {
  std::vector<float> out;
  std::string error;
};
AsyncRun runAsync(const std::string &func) {
  std::vector<float> g(128);
  for (int i = 0; i < 128; ++i)
    g[size_t(i)] = float(i);
  AsyncRun r;
  r.out.assign(32, -1);
  SimtBuffer gBuf("g", F32, g.data(), 128),
      outBuf("out", F32, r.out.data(), 32);
  r.error = runKernel(func, {1, 1, 1}, {32, 1, 1},
                      {SimtArg::buffer(gBuf), SimtArg::buffer(outBuf)});
  return r;
}

TEST(AsyncCopy, WaitThenBarrierPublishesTheData) {
  auto r = runAsync(
      asyncKernel("  nvgpu.device_async_wait %grp {numGroups = 0 : i32}\n"
                  "  gpu.barrier"));
  ASSERT_EQ("", r.error);
  for (int t = 0; t < 32; ++t)
    EXPECT_EQ(r.out[size_t(t)], float(((t + 1) % 32) * 4 + 2));
}

TEST(AsyncCopy, ZeroFill) {
  auto r = runAsync(
      asyncKernel("  nvgpu.device_async_wait %grp\n  gpu.barrier", ", %c2"));
  ASSERT_EQ("", r.error);
  for (int t = 0; t < 32; ++t)
    EXPECT_EQ(r.out[size_t(t)],
              0.0f); // element 2 of each 4 is past srcElements
}

TEST(AsyncCopy, ReadBeforeWaitIsAnError) {
  auto r = runAsync(asyncKernel("  gpu.barrier"));
  EXPECT_TRUE(contains(r.error,
                       "read of element 6 of 'workgroup attribution #0' "
                       "(shared memory) while an nvgpu.device_async_copy "
                       "to it is in flight"))
      << r.error;
}

TEST(AsyncCopy, WaitWithoutBarrierIsARace) {
  auto r = runAsync(asyncKernel("  nvgpu.device_async_wait %grp"));
  EXPECT_TRUE(contains(r.error, "data race: read of element 6") &&
              contains(r.error, "after a write by thread (1,0,0)"))
      << r.error;
}

TEST(AsyncCopy, WaitLeavesTheNewestGroupsInFlight) {
  std::string func = R"(
gpu.func @k(%g: memref<?xf32>, %out: memref<?xf32>) workgroup(%sm : memref<8xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %t1 = nvgpu.device_async_copy %g[%c0], %sm[%c0], 4 : memref<?xf32> to memref<8xf32, #gpu.address_space<workgroup>>
  %g1 = nvgpu.device_async_create_group %t1
  %t2 = nvgpu.device_async_copy %g[%c4], %sm[%c4], 4 : memref<?xf32> to memref<8xf32, #gpu.address_space<workgroup>>
  %g2 = nvgpu.device_async_create_group %t2
  nvgpu.device_async_wait %g1 {numGroups = 1 : i32}
  %a = memref.load %sm[%c0] : memref<8xf32, #gpu.address_space<workgroup>>
  memref.store %a, %out[%c0] : memref<?xf32>
  %b = memref.load %sm[%c4] : memref<8xf32, #gpu.address_space<workgroup>>
  memref.store %b, %out[%c4] : memref<?xf32>
  gpu.return
})";
  std::vector<float> g(8, 1.0f), out(8);
  SimtBuffer gBuf("g", F32, g.data(), 8), outBuf("out", F32, out.data(), 8);
  std::string error =
      runKernel(func, {1, 1, 1}, {1, 1, 1},
                {SimtArg::buffer(gBuf), SimtArg::buffer(outBuf)});
  EXPECT_TRUE(
      contains(error, "read of element 4 of 'workgroup attribution #0'") &&
      contains(error, "in flight"))
      << error;
  EXPECT_EQ(out[0], 1.0f); // the first group completed
}

TEST(AsyncCopy, DestinationMustBeAligned) {
  // cp.async of 16 bytes to element 1 of a shared f32 array: misaligned.
  std::string func = R"(
gpu.func @k(%g: memref<?xf32>) workgroup(%sm : memref<8xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t1 = nvgpu.device_async_copy %g[%c0], %sm[%c1], 4 : memref<?xf32> to memref<8xf32, #gpu.address_space<workgroup>>
  gpu.return
})";
  std::vector<float> g(8, 1.0f);
  SimtBuffer gBuf("g", F32, g.data(), 8);
  std::string error =
      runKernel(func, {1, 1, 1}, {1, 1, 1}, {SimtArg::buffer(gBuf)});
  EXPECT_TRUE(contains(error, "destination is not aligned to the copy size"))
      << error;
}

TEST(AsyncCopy, SharedBufferMustBeAlignedForTheCopy) {
  // Without llvm.align the lowering places an f32 array on a 4-byte
  // boundary: a 16-byte cp.async into it faults on hardware.
  std::string func = R"(
gpu.func @k(%g: memref<?xf32>) workgroup(%sm : memref<8xf32, #gpu.address_space<workgroup>>) kernel {
  %c0 = arith.constant 0 : index
  %t1 = nvgpu.device_async_copy %g[%c0], %sm[%c0], 4 : memref<?xf32> to memref<8xf32, #gpu.address_space<workgroup>>
  gpu.return
})";
  std::vector<float> g(8, 1.0f);
  SimtBuffer gBuf("g", F32, g.data(), 8);
  std::string error = runKernel(func, {1, 1, 1}, {1, 1, 1}, {SimtArg::buffer(gBuf)});
  EXPECT_TRUE(contains(error, "whose start is only 4-byte aligned")) << error;
}

TEST(LdMatrix, SharedBufferMustBeSixteenByteAligned) {
  std::string func = R"(
gpu.func @k(%out: memref<?xf16>) workgroup(%sm : memref<8x8xf16, #gpu.address_space<workgroup>>) kernel {
  %l = gpu.lane_id
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %r = arith.remui %l, %c8 : index
  %v = nvgpu.ldmatrix %sm[%r, %c0] {numTiles = 1 : i32, transpose = false} : memref<8x8xf16, #gpu.address_space<workgroup>> -> vector<1x2xf16>
  gpu.return
})";
  std::vector<uint16_t> out(64, 0);
  SimtBuffer outBuf("out", F16, out.data(), 64);
  std::string error = runKernel(func, {1, 1, 1}, {32, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_TRUE(contains(error, "whose start is only 2-byte aligned")) << error;
}

} // namespace
