//===- AsyncTransferOpsTest.cpp - mbarriers and TMA loads in kernels ------===//
//
// A hand-written kernel: thread 0 initializes an mbarrier, announces the
// box's bytes (arrive.expect_tx) and issues one TMA load of a box of a bf16
// matrix into dynamic shared memory; every thread waits on the phase, then
// copies the destination out in storage order. The expectation is computed
// here from the box, the coordinates and CUTLASS's Swizzle<B,4,3>
// (address ^ ((address >> 3) & mask)), an involution: storage position p
// holds the box element at the unswizzled address of p.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

constexpr int64_t kCols = 100, kRows = 70, kPitch = 104; // bf16, 208-byte rows

struct TmaCase {
  uint32_t boxCols = 64, boxRows = 16;
  const char *swizzle = "swizzle_128b";
  TmaSwizzle mapSwizzle = TmaSwizzle::B128;
  bool nanFill = false;
  int64_t viewOffset = 1008; ///< shared address 1040 + 1008 = 2048
  int64_t txBytes = -1;      ///< -1: the box's bytes
  bool readBeforeWait = false;
  /// Threads from this one on skip the wait (128: none do).
  int64_t waitingThreads = 128;
  /// A gpu.barrier between the wait and the reads.
  bool barrierAfterWait = false;
  uint32_t mapBoxCols = 0;   ///< 0: boxCols (else a map that disagrees)
  uint64_t rowStride = kPitch * 2;
};

std::string tmaKernel(const TmaCase &c) {
  const std::string view = "memref<" + std::to_string(c.boxRows) + "x" +
                           std::to_string(c.boxCols) + "xbf16, #gpu.address_space<workgroup>>";
  const std::string tm = "!nvgpu.tensormap.descriptor<tensor = memref<" +
                         std::to_string(c.boxRows) + "x" + std::to_string(c.boxCols) +
                         "xbf16, 3>, swizzle = " + c.swizzle + ", l2promo = none, oob = " +
                         (c.nanFill ? "nan" : "zero") + ", interleave = none>";
  const std::string bars =
      "!nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2>";
  std::string read = R"(
  scf.for %e = %t to %total step %c128 {
    %r = arith.divui %e, %cols : index
    %c = arith.remui %e, %cols : index
    %x = memref.load %v[%r, %c] : )" + view + R"(
    %xf = arith.extf %x : bf16 to f32
    memref.store %xf, %out[%e] : memref<?xf32>
  }
)";
  std::string wait = "  nvgpu.mbarrier.try_wait.parity %bar[%c1], %false, %ticks : " + bars + "\n";
  if (c.waitingThreads < 128)
    wait = "  %waits = arith.cmpi ult, %t, %nwait : index\n  scf.if %waits {\n  " + wait + "  }\n";
  if (c.barrierAfterWait)
    wait += "  gpu.barrier\n";
  return R"(
gpu.func @k(%tm: !llvm.ptr {llvm.align = 64 : i64}, %out: memref<?xf32>, %x0: index, %y0: index,
            %tx: index) kernel attributes {loss.tensor_maps = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %ticks = arith.constant 1000000 : index
  %false = arith.constant false
  %off = arith.constant )" +
         std::to_string(c.viewOffset) + R"( : index
  %cols = arith.constant )" +
         std::to_string(c.boxCols) + R"( : index
  %total = arith.constant )" +
         std::to_string(c.boxCols * c.boxRows) + R"( : index
  %nwait = arith.constant )" +
         std::to_string(c.waitingThreads) + R"( : index
  %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %v = memref.view %dyn[%off][] : memref<?xi8, #gpu.address_space<workgroup>> to )" +
         view + R"(
  %desc = builtin.unrealized_conversion_cast %tm : !llvm.ptr to )" +
         tm + R"(
  %bar = nvgpu.mbarrier.create -> )" +
         bars + R"(
  %t = gpu.thread_id x
  %t0 = arith.cmpi eq, %t, %c0 : index
  scf.if %t0 {
    nvgpu.mbarrier.init %bar[%c1], %c1 : )" +
         bars + R"(
  }
  gpu.barrier
  scf.if %t0 {
    nvgpu.mbarrier.arrive.expect_tx %bar[%c1], %tx : )" +
         bars + R"(
    nvgpu.tma.async.load %desc[%x0, %y0], %bar[%c1] to %v : )" +
         tm + ", " + bars + " -> " + view + R"(
  }
)" + (c.readBeforeWait ? read + wait : wait + read) +
         R"(
  gpu.return
})";
}

struct TmaRun {
  std::string error;
  std::vector<float> out, global;
};

TmaRun runTma(const TmaCase &c, int64_t x0, int64_t y0) {
  TmaRun r;
  std::vector<uint16_t> bits(size_t(kPitch * kRows), 0);
  for (int64_t row = 0; row < kRows; ++row)
    for (int64_t col = 0; col < kPitch; ++col) {
      float v = float((row * 7 + col * 3) % 61 - 30);
      bits[size_t(row * kPitch + col)] = uint16_t(std::bit_cast<uint32_t>(v) >> 16);
      r.global.push_back(v);
    }
  SimtBuffer global("w", ElementType::BF16, bits.data(), int64_t(bits.size()));
  TensorMapDesc map;
  map.type = ElementType::BF16;
  map.rank = 2;
  map.globalDim = {uint64_t(kCols), uint64_t(kRows)};
  map.globalStrides = {c.rowStride};
  map.boxDim = {c.mapBoxCols ? c.mapBoxCols : c.boxCols, c.boxRows};
  map.swizzle = c.mapSwizzle;
  map.oobFill = c.nanFill ? TmaOobFill::Nan : TmaOobFill::Zero;
  r.out.assign(size_t(c.boxCols * c.boxRows), -1000.0f);
  SimtBuffer out("out", ElementType::F32, r.out.data(), int64_t(r.out.size()));
  SimtOptions options;
  options.dynamicSharedBytes = c.viewOffset + int64_t(c.boxCols * c.boxRows * 2);
  const int64_t tx = c.txBytes >= 0 ? c.txBytes : int64_t(c.boxCols * c.boxRows * 2);
  r.error = runKernel(tmaKernel(c), {1, 1, 1}, {128, 1, 1},
                      {SimtArg::tensorMap(map, global), SimtArg::buffer(out),
                       SimtArg::integer(x0), SimtArg::integer(y0), SimtArg::integer(tx)},
                      options);
  return r;
}

void expectBox(const TmaCase &c, int64_t x0, int64_t y0) {
  SCOPED_TRACE("box at (" + std::to_string(x0) + ", " + std::to_string(y0) + ") " + c.swizzle);
  TmaRun r = runTma(c, x0, y0);
  ASSERT_EQ(r.error, "");
  const int64_t base = 2048; // the view's shared address
  const int64_t span = c.mapSwizzle == TmaSwizzle::B128  ? 128
                       : c.mapSwizzle == TmaSwizzle::B64 ? 64
                       : c.mapSwizzle == TmaSwizzle::B32 ? 32
                                                         : 0;
  const int64_t mask = span ? (span / 16 - 1) << 4 : 0;
  for (int64_t p = 0; p < int64_t(r.out.size()); ++p) {
    const int64_t a = base + 2 * p;
    const int64_t linear = ((a ^ ((a >> 3) & mask)) - base) / 2;
    const int64_t col = x0 + linear % c.boxCols, row = y0 + linear / c.boxCols;
    const bool inside = col >= 0 && col < kCols && row >= 0 && row < kRows;
    const float got = r.out[size_t(p)];
    if (!inside && c.nanFill)
      EXPECT_TRUE(std::isnan(got)) << "position " << p;
    else
      EXPECT_EQ(got, inside ? r.global[size_t(row * kPitch + col)] : 0.0f) << "position " << p;
  }
}

TEST(AsyncTransferOps, TmaBoxLandsSwizzledWithOutOfBoundsFill) {
  TmaCase c;
  for (auto [x0, y0] : {std::pair<int64_t, int64_t>{0, 0}, {50, 60}, {-8, -3}, {96, 2}})
    expectBox(c, x0, y0);
  TmaCase none;
  none.swizzle = "none";
  none.mapSwizzle = TmaSwizzle::None;
  none.boxCols = 24;
  none.boxRows = 8;
  none.nanFill = true;
  expectBox(none, 90, 66);
  TmaCase s64;
  s64.swizzle = "swizzle_64b";
  s64.mapSwizzle = TmaSwizzle::B64;
  s64.boxCols = 32;
  expectBox(s64, 70, -5);
}

TEST(AsyncTransferOps, TransactionBytesThatDoNotMatchTheBoxNeverCompleteThePhase) {
  TmaCase c;
  c.txBytes = 64 * 16 * 2 - 16;
  std::string error = runTma(c, 0, 0).error;
  EXPECT_NE(error.find("waits for the phase of parity 0 of mbarrier 1, which has not completed "
                       "(0 arrival(s) and -16 transaction byte(s) outstanding)"),
            std::string::npos)
      << error;
  c.txBytes = 64 * 16 * 2 + 16;
  error = runTma(c, 0, 0).error;
  EXPECT_NE(error.find("(0 arrival(s) and 16 transaction byte(s) outstanding)"),
            std::string::npos)
      << error;
}

TEST(AsyncTransferOps, ReadingTheDestinationBeforeTheWaitIsAnError) {
  TmaCase c;
  c.readBeforeWait = true;
  // 16 bytes more announced than the box brings: the phase stays open, the
  // copy stays in flight, and the first read of its destination fails.
  c.txBytes = 64 * 16 * 2 + 16;
  std::string error = runTma(c, 0, 0).error;
  EXPECT_NE(error.find("a TMA copy to it (its mbarrier phase has not completed)"),
            std::string::npos)
      << error;
}

// The copy lands at its phase's completion, ordered after the issuing
// thread's arrival in that phase: a thread reaches the data by passing the
// phase's wait. One that skips it races with the copy even when, in the
// interpreter's order, the phase completed long before its read (on a GPU
// it may see stale bytes). A gpu.barrier after a wait orders every thread.
TEST(AsyncTransferOps, ReadingLandedDataWithoutTheWaitIsARace) {
  TmaCase c;
  c.waitingThreads = 64;
  std::string error = runTma(c, 0, 0).error;
  EXPECT_NE(error.find("data race: read of element"), std::string::npos) << error;
  EXPECT_NE(error.find("after a TMA copy issued by thread (0,0,0) with no gpu.barrier in between "
                       "and no mbarrier phase ordering them, thread (64,0,0)"),
            std::string::npos)
      << error;
  // Only thread 0 waits, then the block synchronizes: every read is ordered.
  TmaCase one;
  one.waitingThreads = 1;
  one.barrierAfterWait = true;
  expectBox(one, 0, 0);
  // Only thread 0 waits and nothing else orders the others.
  one.barrierAfterWait = false;
  error = runTma(one, 0, 0).error;
  EXPECT_NE(error.find("after a TMA copy issued by thread (0,0,0)"), std::string::npos) << error;
  EXPECT_NE(error.find("thread (1,0,0)"), std::string::npos) << error;
}

TEST(AsyncTransferOps, TheMapMustBeTheOneTheDescriptorTypePromises) {
  TmaCase c;
  c.mapBoxCols = 32;
  std::string error = runTma(c, 0, 0).error;
  EXPECT_NE(error.find("is not the one the descriptor type promises"), std::string::npos) << error;
  TmaCase unaligned;
  unaligned.viewOffset = 1024; // shared address 2064
  error = runTma(unaligned, 0, 0).error;
  EXPECT_NE(error.find("destination at shared address 2064 is not 128-byte aligned"),
            std::string::npos)
      << error;
  TmaCase stride;
  stride.rowStride = 200;
  error = runTma(stride, 0, 0).error;
  EXPECT_NE(error.find("argument 0: tensor map globalStrides of dimension 1 must be a multiple "
                       "of 16 below 2^40 bytes, got 200"),
            std::string::npos)
      << error;
}

TEST(AsyncTransferOps, TensorMapParametersCarryTheGridConstantMark) {
  // Without llvm.align = 64, loss-tensor-map-grid-constant would not pass
  // the map by value; without loss.tensor_maps it would not look.
  std::string kernel = tmaKernel(TmaCase());
  std::string unmarked = kernel;
  unmarked.replace(unmarked.find(" {llvm.align = 64 : i64}"), 24, "");
  std::string uncounted = kernel;
  uncounted.replace(uncounted.find(" attributes {loss.tensor_maps = 1 : i64}"), 40, "");
  const std::pair<std::string, std::string> cases[] = {
      {unmarked, "tensor map parameter without llvm.align = 64"},
      {uncounted, "tensor map count: loss.tensor_maps says 0, the parameters have 1"}};
  for (const auto &[text, expected] : cases) {
    auto module = parseModule(kernelModule(text));
    ASSERT_TRUE(module);
    auto func = lookupKernel(*module, "m", "k");
    ASSERT_TRUE(static_cast<bool>(func));
    auto decoded = SimtKernel::decode(*func);
    ASSERT_FALSE(static_cast<bool>(decoded));
    std::string error = llvm::toString(decoded.takeError());
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  }
}

} // namespace
