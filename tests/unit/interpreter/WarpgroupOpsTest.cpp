//===- WarpgroupOpsTest.cpp - wgmma, its groups and the proxy fence -------===//
//
// A hand-written kernel stages A (64×16) and B (N×16) into dynamic shared
// memory in the canonical no-swizzle layouts of the PTX ISA (K-major or
// MN-major), builds the descriptors from the views' addresses and runs one
// wgmma.mma_async m64nNk16. The product must equal a plain matrix product
// (integers, exact in bf16 and f32), which holds only if the layouts, the
// descriptor decoding and the accumulator fragment agree; the broken
// variants (no proxy fence, no wait, half a warpgroup) must fail.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "testing/simt/WarpgroupMatrix.h"

#include <random>

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

struct WgmmaCase {
  int n = 16;
  bool aKMajor = true, bKMajor = true;
  bool fence = true, wait = true;
  bool refillBeforeWait = false; ///< overwrite A's stage while the wgmma is in flight
  int64_t threads = 128;
};

std::string shared(int64_t elements) {
  return "memref<" + std::to_string(elements) + "xbf16, #gpu.address_space<workgroup>>";
}

/// Stores operand `src` (lines × 16, line-major) into view `dst` in the
/// canonical layout: core matrix (line/8, k/8) at element
/// ((k/8)·(lines/8) + line/8)·64, its 8×8 elements K-major (row = line) or
/// MN-major (row = k).
std::string stage(const std::string &name, const std::string &src, const std::string &dst,
                  int64_t lines, bool kMajor) {
  std::string l = std::to_string(lines), g = std::to_string(lines / 8);
  std::string inner = kMajor ? "%" + name + "r0 = arith.muli %" + name + "l8, %c8 : index\n"
                                   "%" + name + "r = arith.addi %" + name + "r0, %" + name + "k8 : index\n"
                             : "%" + name + "r0 = arith.muli %" + name + "k8, %c8 : index\n"
                                   "%" + name + "r = arith.addi %" + name + "r0, %" + name + "l8 : index\n";
  return "%" + name + "total = arith.constant " + std::to_string(lines * 16) + " : index\n" +
         "%" + name + "groups = arith.constant " + g + " : index\n" +
         "scf.for %" + name + "e = %tid to %" + name + "total step %c128 {\n" +
         "%" + name + "line = arith.divui %" + name + "e, %c16 : index\n" +
         "%" + name + "k = arith.remui %" + name + "e, %c16 : index\n" +
         "%" + name + "l8 = arith.remui %" + name + "line, %c8 : index\n" +
         "%" + name + "k8 = arith.remui %" + name + "k, %c8 : index\n" +
         "%" + name + "lg = arith.divui %" + name + "line, %c8 : index\n" +
         "%" + name + "kg = arith.divui %" + name + "k, %c8 : index\n" +
         "%" + name + "c0 = arith.muli %" + name + "kg, %" + name + "groups : index\n" +
         "%" + name + "c1 = arith.addi %" + name + "c0, %" + name + "lg : index\n" +
         "%" + name + "c = arith.muli %" + name + "c1, %c64 : index\n" + inner +
         "%" + name + "d = arith.addi %" + name + "c, %" + name + "r : index\n" +
         "%" + name + "v = memref.load " + src + "[%" + name + "e] : memref<?xbf16>\n" +
         "memref.store %" + name + "v, " + dst + "[%" + name + "d] : " + shared(lines * 16) + "\n" +
         "}\n";
}

/// The descriptor of view `view`: LBO (between k groups) lines/8 core
/// matrices of 128 bytes, SBO (between line groups) 128 bytes.
std::string descriptor(const std::string &name, const std::string &view, int64_t lines) {
  uint64_t fields = uint64_t(lines / 8 * 128 >> 4) << 16 | uint64_t(128 >> 4) << 32;
  return "%" + name + "p = memref.extract_aligned_pointer_as_index " + view + " : " +
         shared(lines * 16) + " -> index\n" +
         "%" + name + "p64 = arith.index_cast %" + name + "p : index to i64\n" +
         "%" + name + "m = arith.andi %" + name + "p64, %mask : i64\n" +
         "%" + name + "s = arith.shrui %" + name + "m, %c4_i64 : i64\n" +
         "%" + name + "f = arith.constant " + std::to_string(fields) + " : i64\n" +
         "%" + name + "desc = arith.ori %" + name + "s, %" + name + "f : i64\n";
}

std::string wgmmaKernel(const WgmmaCase &c) {
  const int regs = c.n / 2;
  std::string acc = "!llvm.struct<(";
  for (int i = 0; i < regs; ++i)
    acc += i ? ", f32" : "f32";
  acc += ")>";
  std::string text = R"(
gpu.func @k(%a: memref<?xbf16>, %b: memref<?xbf16>, %out: memref<?xf32>) kernel {
  %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %c2048 = arith.constant 2048 : index
  %mask = arith.constant 262143 : i64
  %c4_i64 = arith.constant 4 : i64
  %half = arith.constant 0.5 : f32
  %sa = memref.view %dyn[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to )" +
                     shared(64 * 16) + R"(
  %sb = memref.view %dyn[%c2048][] : memref<?xi8, #gpu.address_space<workgroup>> to )" +
                     shared(c.n * 16) + R"(
  %tid = gpu.thread_id x
)";
  text += stage("A", "%a", "%sa", 64, c.aKMajor);
  text += stage("B", "%b", "%sb", c.n, c.bKMajor);
  if (c.fence)
    text += "nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = "
            "#nvvm.shared_space<cta>}\n";
  text += "gpu.barrier\n";
  text += descriptor("A", "%sa", 64) + descriptor("B", "%sb", c.n);
  text += "%z = llvm.mlir.zero : " + acc + "\n";
  text += "%init = llvm.insertvalue %half, %z[0] : " + acc + "\n";
  text += "nvvm.wgmma.fence.aligned\n";
  text += "%d = nvvm.wgmma.mma_async %Adesc, %Bdesc, %init, #nvvm.shape<m = 64, n = " +
          std::to_string(c.n) +
          ", k = 16>, D [<f32>, #nvvm.wgmma_scale_out<one>], A [<bf16>, "
          "#nvvm.wgmma_scale_in<one>, " +
          (c.aKMajor ? "<row>" : "<col>") + "], B [<bf16>, #nvvm.wgmma_scale_in<one>, " +
          (c.bKMajor ? "<col>" : "<row>") + "] : " + acc + " -> " + acc + "\n";
  text += "nvvm.wgmma.commit.group.sync.aligned\n";
  if (c.refillBeforeWait) {
    text += "gpu.barrier\n";
    text += "%zero = arith.constant 0.0 : bf16\n";
    text += "memref.store %zero, %sa[%tid] : " + shared(64 * 16) + "\n";
  }
  if (c.wait)
    text += "nvvm.wgmma.wait.group.sync.aligned 0\n";
  text += "%regs = arith.constant " + std::to_string(regs) + " : index\n";
  text += "%base = arith.muli %tid, %regs : index\n";
  for (int i = 0; i < regs; ++i) {
    std::string s = std::to_string(i);
    text += "%v" + s + " = llvm.extractvalue %d[" + s + "] : " + acc + "\n";
    text += "%i" + s + "c = arith.constant " + s + " : index\n";
    text += "%i" + s + " = arith.addi %base, %i" + s + "c : index\n";
    text += "memref.store %v" + s + ", %out[%i" + s + "] : memref<?xf32>\n";
  }
  text += "gpu.return\n}\n";
  return text;
}

struct WgmmaRun {
  std::string error;
  std::vector<float> a, b, out;
};

WgmmaRun runWgmma(const WgmmaCase &c) {
  WgmmaRun r;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<uint16_t> aBits(64 * 16), bBits(size_t(c.n) * 16);
  auto bf16 = [](float f) { return uint16_t(std::bit_cast<uint32_t>(f) >> 16); };
  for (size_t i = 0; i < aBits.size(); ++i) {
    r.a.push_back(float(small(rng)));
    aBits[i] = bf16(r.a.back());
  }
  for (size_t i = 0; i < bBits.size(); ++i) {
    r.b.push_back(float(small(rng)));
    bBits[i] = bf16(r.b.back());
  }
  r.out.assign(size_t(c.threads) * size_t(c.n / 2), -1.0f);
  SimtBuffer aBuf("a", ElementType::BF16, aBits.data(), int64_t(aBits.size()));
  SimtBuffer bBuf("b", ElementType::BF16, bBits.data(), int64_t(bBits.size()));
  SimtBuffer outBuf("out", ElementType::F32, r.out.data(), int64_t(r.out.size()));
  SimtOptions options;
  options.dynamicSharedBytes = 2048 + c.n * 32;
  r.error = runKernel(wgmmaKernel(c), {1, 1, 1}, {c.threads, 1, 1},
                      {SimtArg::buffer(aBuf), SimtArg::buffer(bBuf), SimtArg::buffer(outBuf)},
                      options);
  return r;
}

void expectProduct(const WgmmaCase &c) {
  WgmmaRun r = runWgmma(c);
  ASSERT_EQ(r.error, "");
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < c.n / 2; ++i) {
      auto [row, col] = wgmmaElementD(t, i);
      float expected = i == 0 ? 0.5f : 0.0f;
      for (int k = 0; k < 16; ++k)
        expected += r.a[size_t(row * 16 + k)] * r.b[size_t(col * 16 + k)];
      EXPECT_EQ(r.out[size_t(t * (c.n / 2) + i)], expected) << "thread " << t << " register " << i;
    }
}

TEST(WarpgroupOps, WgmmaKMajorOperandsFormTheProduct) { expectProduct({}); }

TEST(WarpgroupOps, WgmmaMNMajorOperandsFormTheProduct) {
  WgmmaCase c;
  c.n = 24;
  c.aKMajor = false;
  c.bKMajor = false;
  expectProduct(c);
  c.aKMajor = true;
  expectProduct(c);
}

TEST(WarpgroupOps, WgmmaWithoutAProxyFenceIsAnError) {
  WgmmaCase c;
  c.fence = false;
  std::string error = runWgmma(c).error;
  EXPECT_NE(error.find("with no nvvm.fence.proxy (async.shared::cta) by that thread since"),
            std::string::npos)
      << error;
}

TEST(WarpgroupOps, WgmmaGroupsInFlightAtTheEndAreAnError) {
  WgmmaCase c;
  c.wait = false;
  std::string error = runWgmma(c).error;
  EXPECT_NE(error.find("1 wgmma group(s) in flight"), std::string::npos) << error;
}

TEST(WarpgroupOps, RefillingAnOperandOfAWgmmaInFlightIsAnError) {
  WgmmaCase c;
  c.refillBeforeWait = true;
  std::string error = runWgmma(c).error;
  EXPECT_NE(error.find("while the wgmma of warpgroup 0 that reads it (its group 1) is in flight: "
                       "no wgmma.wait_group has covered it"),
            std::string::npos)
      << error;
}

TEST(WarpgroupOps, WgmmaNeedsWholeWarpgroups) {
  WgmmaCase c;
  c.threads = 64;
  std::string error = runWgmma(c).error;
  EXPECT_NE(error.find("needs whole warpgroups"), std::string::npos) << error;
}

} // namespace
