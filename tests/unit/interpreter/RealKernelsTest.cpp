//===- RealKernelsTest.cpp - the generated GPU kernels on the interpreter
//--===//
//
// Builds loss graphs, lowers them with the real pass pipeline, runs the
// launch plan through the SIMT interpreter on random inputs, and compares
// loss and lse with an fp64 reference computed here from the same rounded
// inputs.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "testing/simt/PlanRunner.h"
#include "compiler/Kernels/Support/LaunchPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <random>

using namespace lossjit;
using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

struct Case {
  Case(int64_t n, int64_t v, int64_t d) : n(n), v(v), d(d) {}
  int64_t n, v, d;
  std::string dtype = "f16", labelType = "i64", reduction = "mean";
  bool bias = false;
  double ignored = 0.0; ///< fraction of rows with label ignore_index
  std::string tile;     ///< loss-select-lowering-config options, e.g. "block-rows=2 ..."
  std::string chip = "sm_80"; ///< the selection's and lowering's chip
  uint64_t seed = 1;
};

std::string describe(const Case &c) {
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) +
         " D=" + std::to_string(c.d) + " " + c.dtype + " " + c.labelType + " " +
         c.reduction + (c.bias ? " bias" : "") +
         " ignored=" + std::to_string(c.ignored) + " tile={" + c.tile + "}";
}

std::string graphText(const Case &c) {
  std::string t = c.dtype, mat = "tensor<?x?x" + t + ">",
              vec = "tensor<?x" + t + ">";
  std::string lab = "tensor<?x" + c.labelType + ">";
  std::string res = c.reduction == "none" ? "tensor<?xf32>" : "tensor<f32>";
  std::string args = "%x: " + mat + ", %w: " + mat +
                     (c.bias ? ", %b: " + vec : "") + ", %y: " + lab;
  std::string linear =
      c.bias ? "loss.linear %x, %w, %b : " + mat + ", " + mat + ", " + vec +
                   " -> " + mat
             : "loss.linear %x, %w : " + mat + ", " + mat + " -> " + mat;
  return "func.func @lce(" + args + ") -> " + res +
         " {\n"
         "  %z = " +
         linear +
         "\n"
         "  %lp = loss.log_softmax %z : " +
         mat + " -> " + mat +
         "\n"
         "  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = "
         "#loss<reduction " +
         c.reduction + ">} : " + mat + ", " + lab + " -> " + res +
         "\n"
         "  return %l : " +
         res + "\n}\n";
}

/// Lowers `c`'s graph with the GPU pipeline (up to, not including, NVVM).
mlir::OwningOpRef<mlir::ModuleOp> lower(const Case &c) {
  static bool registered = [] {
    registerLossJITPasses();
    return true;
  }();
  (void)registered;
  auto module = parseModule(graphText(c));
  if (!module)
    return module;
  mlir::PassManager pm(&getContext(), mlir::ModuleOp::getOperationName());
  std::string lowerPass = "loss-select-lowering-config{target=gpu chip=" + c.chip;
  if (!c.tile.empty())
    lowerPass += " " + c.tile;
  lowerPass += "},loss-lower-to-gpu{chip=" + c.chip + "}";
  // Passes of the module-anchored manager (parsePassPipeline would nest a
  // "builtin.module(...)" pipeline one level deeper).
  std::string pipeline = "loss-make-precision-explicit,"
                         "loss-fuse-linear-cross-entropy," +
                         lowerPass + ",canonicalize,cse";
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (mlir::failed(mlir::parsePassPipeline(pipeline, pm, os))) {
    ADD_FAILURE() << "bad pipeline " << pipeline << ": " << errors;
    return {};
  }
  if (mlir::failed(pm.run(*module))) {
    ADD_FAILURE() << "pipeline failed for\n" << graphText(c);
    return {};
  }
  return module;
}

/// Random inputs in storage format plus their exact values.
struct Inputs {
  std::vector<uint8_t> x, w, bias, labels; // raw storage
  std::vector<double> xv, wv, bv;
  std::vector<int64_t> y;
};

void fill(const std::string &dtype, int64_t count, std::mt19937_64 &rng,
          double scale, std::vector<uint8_t> &raw,
          std::vector<double> &values) {
  std::uniform_real_distribution<double> u(-scale, scale);
  size_t size = dtype == "f32" ? 4 : 2;
  raw.assign(size_t(count) * size, 0);
  values.resize(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    double v = u(rng);
    if (dtype == "f32") {
      float f = float(v);
      std::memcpy(&raw[size_t(i) * 4], &f, 4);
      values[size_t(i)] = f;
    } else {
      uint16_t bits =
          dtype == "f16" ? doubleToHalfBits(v) : doubleToBFloat16Bits(v);
      std::memcpy(&raw[size_t(i) * 2], &bits, 2);
      values[size_t(i)] =
          dtype == "f16" ? halfBitsToFloat(bits) : bfloat16BitsToFloat(bits);
    }
  }
}

Inputs makeInputs(const Case &c) {
  Inputs in;
  std::mt19937_64 rng(c.seed * 1000003 + uint64_t(c.n * 31 + c.v * 7 + c.d));
  fill(c.dtype, c.n * c.d, rng, 1.0, in.x, in.xv);
  fill(c.dtype, c.v * c.d, rng, 2.0 / std::sqrt(double(c.d)), in.w, in.wv);
  if (c.bias)
    fill(c.dtype, c.v, rng, 1.0, in.bias, in.bv);
  std::uniform_int_distribution<int64_t> label(0, c.v - 1);
  std::uniform_real_distribution<double> coin(0, 1);
  for (int64_t i = 0; i < c.n; ++i)
    in.y.push_back(coin(rng) < c.ignored ? -100 : label(rng));
  size_t size = c.labelType == "i32" ? 4 : 8;
  in.labels.assign(size_t(c.n) * size, 0);
  for (int64_t i = 0; i < c.n; ++i) {
    if (size == 4) {
      int32_t v = int32_t(in.y[size_t(i)]);
      std::memcpy(&in.labels[size_t(i) * 4], &v, 4);
    } else {
      std::memcpy(&in.labels[size_t(i) * 8], &in.y[size_t(i)], 8);
    }
  }
  return in;
}

struct Reference {
  std::vector<double> lse, rowLoss;
  double loss = 0; ///< mean or sum
};

Reference reference(const Case &c, const Inputs &in) {
  Reference r;
  double sum = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    std::vector<double> z(size_t(c.v));
    double m = -INFINITY;
    for (int64_t v = 0; v < c.v; ++v) {
      double acc = c.bias ? in.bv[size_t(v)] : 0.0;
      for (int64_t k = 0; k < c.d; ++k)
        acc += in.xv[size_t(i * c.d + k)] * in.wv[size_t(v * c.d + k)];
      z[size_t(v)] = acc;
      m = std::max(m, acc);
    }
    double s = 0;
    for (double zv : z)
      s += std::exp(zv - m);
    double lse = m + std::log(s);
    r.lse.push_back(lse);
    int64_t y = in.y[size_t(i)];
    double row = y == -100 ? 0.0 : lse - z[size_t(y)];
    r.rowLoss.push_back(row);
    if (y != -100) {
      sum += row;
      ++counted;
    }
  }
  r.loss = c.reduction == "sum" ? sum : sum / double(counted); // 0/0 → NaN
  return r;
}

struct Outputs {
  std::vector<float> loss, lse;
};

/// Runs the plan; returns the error text ("" on success).
std::string runPlan(mlir::ModuleOp module, const LaunchPlan &plan,
                    const Case &c, Inputs &in, Outputs &out,
                    const SimtOptions &options = {}) {
  ElementType storage = *parseElementType(c.dtype);
  out.loss.assign(c.reduction == "none" ? size_t(c.n) : 1, -7.0f);
  out.lse.assign(size_t(c.n), -7.0f);
  std::map<std::string, SimtHostBuffer> buffers = {
      {"x", {in.x.data(), storage, c.n * c.d}},
      {"w", {in.w.data(), storage, c.v * c.d}},
      {"labels", {in.labels.data(), *parseElementType(c.labelType), c.n}},
      {"loss", {out.loss.data(), ElementType::F32, int64_t(out.loss.size())}},
      {"lse", {out.lse.data(), ElementType::F32, c.n}}};
  if (c.bias)
    buffers["bias"] = {in.bias.data(), storage, c.v};
  return errorText(
      runPlanOnSimt(module, plan, buffers, {c.n, c.v, c.d}, options));
}

LaunchPlan planOf(mlir::ModuleOp module) {
  std::string error;
  auto plans = readLaunchPlans(module, error);
  EXPECT_TRUE(mlir::succeeded(plans)) << error;
  if (mlir::failed(plans) || plans->size() != 1) {
    ADD_FAILURE() << "expected one launch plan";
    return {};
  }
  return (*plans)[0];
}

void checkCase(const Case &c) {
  SCOPED_TRACE(describe(c));
  auto module = lower(c);
  ASSERT_TRUE(module);
  LaunchPlan plan = planOf(*module);
  ASSERT_FALSE(plan.kernels.empty());
  Inputs in = makeInputs(c);
  Outputs got;
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ("", runPlan(*module, plan, c, in, got));
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  std::cout << "[ simt     ] " << describe(c) << ": " << plan.kernels.size()
            << " kernels in " << ms << " ms\n";
  Reference ref = reference(c, in);
  for (int64_t i = 0; i < c.n; ++i)
    EXPECT_LE(std::fabs(got.lse[size_t(i)] - ref.lse[size_t(i)]),
              1e-4 * std::fabs(ref.lse[size_t(i)]) + 1e-6)
        << "lse row " << i << " got " << got.lse[size_t(i)] << " want "
        << ref.lse[size_t(i)];
  if (c.reduction == "none") {
    for (int64_t i = 0; i < c.n; ++i) {
      // A row loss is lse - z_target: its error scales with those terms.
      double scale = std::max(std::fabs(ref.rowLoss[size_t(i)]),
                              std::fabs(ref.lse[size_t(i)]));
      EXPECT_LE(std::fabs(got.loss[size_t(i)] - ref.rowLoss[size_t(i)]),
                1e-4 * scale + 1e-6)
          << "loss row " << i << " got " << got.loss[size_t(i)] << " want "
          << ref.rowLoss[size_t(i)];
    }
  } else if (std::isnan(ref.loss)) {
    EXPECT_TRUE(std::isnan(got.loss[0]))
        << "want NaN (every row ignored), got " << got.loss[0];
  } else {
    EXPECT_LE(std::fabs(got.loss[0] - ref.loss),
              1e-4 * std::fabs(ref.loss) + 1e-6)
        << "loss got " << got.loss[0] << " want " << ref.loss;
  }
  // Determinism: a second run gives the same bits.
  Outputs again;
  ASSERT_EQ("", runPlan(*module, plan, c, in, again));
  EXPECT_EQ(
      0, std::memcmp(got.loss.data(), again.loss.data(), got.loss.size() * 4));
  EXPECT_EQ(0,
            std::memcmp(got.lse.data(), again.lse.data(), got.lse.size() * 4));
}

const char *kSmallTile = "block-rows=2 threads=32 splits=3";

TEST(RealKernels, CiShapeF16Mean) { checkCase({5, 300, 24}); }
TEST(RealKernels, CiShapeSmallTile) {
  Case c{5, 300, 24};
  c.tile = kSmallTile;
  checkCase(c);
}
TEST(RealKernels, SingleRowSingleClass) {
  checkCase({1, 1, 1});
  Case c{1, 1, 1};
  c.tile = kSmallTile;
  c.reduction = "sum";
  checkCase(c);
}
TEST(RealKernels, BF16BiasSumI32Labels) {
  Case c{7, 33, 5};
  c.dtype = "bf16";
  c.bias = true;
  c.reduction = "sum";
  c.labelType = "i32";
  checkCase(c);
  c.tile = kSmallTile;
  checkCase(c);
}
TEST(RealKernels, F32NoneWithIgnoredRows) {
  Case c{6, 129, 7};
  c.dtype = "f32";
  c.reduction = "none";
  c.bias = true;
  c.ignored = 0.4;
  c.seed = 3;
  checkCase(c);
  c.tile = kSmallTile;
  checkCase(c);
}
TEST(RealKernels, F16VocabNotAMultipleOfSplitsOddD) {
  Case c{9, 257, 17};
  c.tile = kSmallTile;
  c.ignored = 0.3;
  c.seed = 5;
  checkCase(c);
  c.labelType = "i32";
  c.tile = "block-rows=3 threads=64 splits=5";
  checkCase(c);
}
TEST(RealKernels, MoreRowsThanThreads) {
  Case c{130, 20, 4};
  c.reduction = "mean";
  c.ignored = 0.1;
  checkCase(c);
  c.tile = kSmallTile;
  c.dtype = "bf16";
  checkCase(c);
}
TEST(RealKernels, MoreSplitsThanClasses) {
  Case c{3, 5, 2};
  checkCase(c); // 8 splits over 5 classes: some splits are empty
  c.reduction = "none";
  checkCase(c);
}
TEST(RealKernels, AllRowsIgnored) {
  for (std::string reduction : {"mean", "sum", "none"}) {
    Case c{4, 50, 3};
    c.ignored = 1.0;
    c.reduction = reduction;
    checkCase(c);
  }
  Case c{4, 50, 3};
  c.ignored = 1.0;
  c.tile = kSmallTile;
  checkCase(c); // mean → NaN
}

TEST(RealKernels, EmptyBatch) {
  // N = 0: the row-block grids are empty and skipped; the reduction still
  // runs and reports NaN (mean of nothing) or 0 (sum).
  for (std::string reduction : {"mean", "sum"}) {
    Case c{0, 10, 4};
    c.reduction = reduction;
    SCOPED_TRACE(describe(c));
    auto module = lower(c);
    ASSERT_TRUE(module);
    LaunchPlan plan = planOf(*module);
    Inputs in = makeInputs(c);
    Outputs out;
    ASSERT_EQ("", runPlan(*module, plan, c, in, out));
    if (reduction == "mean")
      EXPECT_TRUE(std::isnan(out.loss[0])) << out.loss[0];
    else
      EXPECT_EQ(out.loss[0], 0.0f);
  }
}

TEST(RealKernels, PlanRunnerValidatesBuffers) {
  Case c{3, 10, 4};
  auto module = lower(c);
  ASSERT_TRUE(module);
  LaunchPlan plan = planOf(*module);
  Inputs in = makeInputs(c);
  float loss = 0;
  std::vector<float> lse(3);
  std::map<std::string, SimtHostBuffer> buffers = {
      {"x", {in.x.data(), ElementType::F16, 12}},
      {"w", {in.w.data(), ElementType::F16, 40}},
      {"labels", {in.labels.data(), ElementType::I64, 3}},
      {"loss", {&loss, ElementType::F32, 1}},
      {"lse", {lse.data(), ElementType::F32, 3}}};
  EXPECT_EQ("", errorText(runPlanOnSimt(*module, plan, buffers, {3, 10, 4})));
  auto missing = buffers;
  missing.erase("labels");
  EXPECT_EQ("no buffer for param 'labels'",
            errorText(runPlanOnSimt(*module, plan, missing, {3, 10, 4})));
  auto wrongType = buffers;
  wrongType["x"].type = ElementType::BF16;
  EXPECT_EQ("param 'x' is f16 but the buffer holds bf16",
            errorText(runPlanOnSimt(*module, plan, wrongType, {3, 10, 4})));
  auto wrongCount = buffers;
  wrongCount["w"].numElements = 39;
  EXPECT_EQ("param 'w' needs 40 elements but the buffer has 39",
            errorText(runPlanOnSimt(*module, plan, wrongCount, {3, 10, 4})));
  auto extra = buffers;
  extra["bias"] = {in.x.data(), ElementType::F16, 10};
  EXPECT_EQ("buffer 'bias' is not a param of plan 'lce'",
            errorText(runPlanOnSimt(*module, plan, extra, {3, 10, 4})));
}

TEST(RealKernels, BrokenPlanIsCaught) {
  // A plan whose combine kernel runs before the partial kernel reads
  // workspaces nobody wrote: the interpreter must say so.
  Case c{3, 10, 4};
  auto module = lower(c);
  ASSERT_TRUE(module);
  LaunchPlan plan = planOf(*module);
  ASSERT_GE(plan.kernels.size(), 2u);
  std::swap(plan.kernels[0], plan.kernels[1]);
  Inputs in = makeInputs(c);
  Outputs out;
  std::string error = runPlan(*module, plan, c, in, out);
  EXPECT_NE(error.find("read of uninitialized element"), std::string::npos)
      << error;
  EXPECT_NE(error.find("(launch 1 of"), std::string::npos) << error;
}

// --- Tensor cores: matmul = mma_sync (cp.async ring, ldmatrix, mma.sync) --
//
// The interpreter models mma.sync, ldmatrix and cp.async from the PTX ISA's
// fragment tables (WarpOps tests), independently of the lowering; here the
// kernels built on them meet fp64 and the SIMT kernels, with races checked.

/// The default tensor-core tile (64×64×32, 3 stages) and a one-warp tile
/// (32×32×16, 2 stages) that gives many tiles and k steps at small shapes.
const char *kMmaTile = "matmul=mma_sync";
const char *kMmaOneWarp =
    "matmul=mma_sync block-rows=32 block-cols=32 threads=32 block-k=16 stages=2";

/// `c` on tensor cores against fp64 (checkCase), then against the SIMT
/// kernels: lse rows agree to a few f32 ulps of the statistics.
/// `first` and `second` lowered and run on the same inputs (first's): their
/// outputs, and whether `second`'s plan carries tensor maps.
void runBoth(const Case &first, const Case &second, Outputs &a, Outputs &b,
             bool *secondMaps = nullptr) {
  auto one = lower(first), two = lower(second);
  ASSERT_TRUE(one && two);
  Inputs in = makeInputs(first);
  ASSERT_EQ("", runPlan(*one, planOf(*one), first, in, a));
  ASSERT_EQ("", runPlan(*two, planOf(*two), second, in, b));
  if (secondMaps)
    *secondMaps = !planOf(*two).tensorMaps.empty();
}

void checkTensorCores(Case c, const char *tile) {
  c.tile = tile;
  checkCase(c);
  Case simt = c;
  simt.tile = "";
  SCOPED_TRACE(describe(c) + " vs simt");
  Outputs a, b;
  ASSERT_NO_FATAL_FAILURE(runBoth(c, simt, a, b));
  for (int64_t i = 0; i < c.n; ++i)
    EXPECT_LE(std::fabs(a.lse[size_t(i)] - b.lse[size_t(i)]),
              4e-6 * std::fabs(b.lse[size_t(i)]) + 1e-6)
        << "lse row " << i << ": mma_sync " << a.lse[size_t(i)] << ", simt " << b.lse[size_t(i)];
}

TEST(TensorCoreKernels, F16AlignedRowsTakeTheCpAsyncPath) {
  checkTensorCores({5, 300, 24}, kMmaTile);
}
TEST(TensorCoreKernels, OddDTakesThePlainLoadPath) {
  checkTensorCores({5, 77, 37}, kMmaOneWarp);
}
TEST(TensorCoreKernels, BF16BiasSumManyTilesAndKSteps) {
  Case c{70, 200, 72};
  c.dtype = "bf16";
  c.bias = true;
  c.reduction = "sum";
  checkTensorCores(c, kMmaOneWarp);
}
TEST(TensorCoreKernels, VocabularySmallerThanOneTileAndOneRow) {
  checkTensorCores({1, 3, 8}, kMmaTile);
  Case c{3, 10, 16};
  c.dtype = "bf16";
  checkTensorCores(c, kMmaOneWarp);
}
TEST(TensorCoreKernels, IgnoredRowsNoReductionI32Labels) {
  Case c{33, 65, 40};
  c.ignored = 0.3;
  c.reduction = "none";
  c.labelType = "i32";
  checkTensorCores(c, kMmaOneWarp);
}

TEST(TensorCoreKernels, KernelIrHasMmaSyncAndTheRing) {
  Case c{5, 300, 24};
  c.tile = kMmaTile;
  auto module = lower(c);
  ASSERT_TRUE(module);
  std::map<std::string, int> ops;
  module->walk([&](mlir::Operation *op) { ++ops[op->getName().getStringRef().str()]; });
  // 64×64×32 tile: 2 k16 steps × 2×4 products; the ring's fills in the
  // prologue (2) and the loop (1), 4 chunks each.
  EXPECT_EQ(ops["nvgpu.mma.sync"], 16);
  EXPECT_EQ(ops["nvgpu.ldmatrix"], 12);
  EXPECT_EQ(ops["nvgpu.device_async_copy"], 12);
  EXPECT_EQ(ops["nvgpu.device_async_create_group"], 3);
  // The two operand rings are views of dynamic shared memory, and the plan
  // asks for their bytes: 2 × 3 stages × 64 rows × (32 + 8) × 2 bytes.
  EXPECT_EQ(ops["gpu.dynamic_shared_memory"], 1);
  EXPECT_EQ(ops["memref.view"], 2);
  LaunchPlan plan = planOf(*module);
  auto partial = llvm::find_if(plan.kernels, [](const auto &k) { return k.name == "lce_partial"; });
  ASSERT_NE(partial, plan.kernels.end());
  EXPECT_EQ(partial->sharedBytes, 2 * 3 * 64 * 40 * 2);
}

// --- Hopper tensor cores: matmul = wgmma (sm_90a) -------------------------
//
// The interpreter models wgmma from the PTX ISA's descriptor, canonical
// layout and fragment tables (WarpgroupMatrix tests), independently of the
// strategy; here the kernels built on it meet fp64 and the SIMT kernels,
// with races and the async-proxy fences checked.

/// The default wgmma tile (128×64×32, 4 stages, two warpgroups), one
/// warpgroup with 32 columns, and a narrow one-warpgroup tile (64×16×16, 2
/// stages) that gives many tiles and k steps at small shapes.
const char *kWgmmaTile = "matmul=wgmma";
const char *kWgmmaOneGroup = "matmul=wgmma block-rows=64 threads=128 block-cols=32";
const char *kWgmmaNarrow = "matmul=wgmma block-rows=64 threads=128 block-cols=16 block-k=16 stages=2";

void checkWgmma(Case c, const char *tile) {
  c.chip = "sm_90a";
  checkTensorCores(c, tile);
}

TEST(WgmmaKernels, F16AlignedRowsTakeTheCpAsyncPath) {
  checkWgmma({5, 300, 24}, kWgmmaTile);
  checkWgmma({70, 130, 40}, kWgmmaOneGroup);
}
TEST(WgmmaKernels, OddDTakesThePlainLoadPath) { checkWgmma({5, 77, 37}, kWgmmaNarrow); }
TEST(WgmmaKernels, ManyKStepsRefillTheRingBehindTheGroupInFlight) {
  // D = 200: seven k steps of 32 through the default 4-stage ring, so every
  // stage is refilled while one wgmma group is in flight (the interpreter
  // faults a refill of a stage that group still reads).
  checkWgmma({9, 150, 200}, kWgmmaTile);
  Case c{20, 70, 136};
  c.dtype = "bf16";
  checkWgmma(c, "matmul=wgmma block-rows=64 threads=128 block-cols=16 block-k=16 stages=3");
}
TEST(WgmmaKernels, BF16BiasSumManyTilesAndKSteps) {
  Case c{70, 200, 72};
  c.dtype = "bf16";
  c.bias = true;
  c.reduction = "sum";
  checkWgmma(c, kWgmmaNarrow);
}
TEST(WgmmaKernels, VocabularySmallerThanOneTileAndOneRow) {
  checkWgmma({1, 3, 8}, kWgmmaTile);
  Case c{3, 10, 16};
  c.dtype = "bf16";
  c.ignored = 0.4;
  c.labelType = "i32";
  c.reduction = "none";
  checkWgmma(c, kWgmmaNarrow);
}

TEST(WgmmaKernels, WideLogitTilesOfTheAutomaticChoice) {
  // matmul=auto on sm_90a gives the cross-entropy ops without a bias or
  // softcap 128x128 logit tiles (m64n128k16) on the TMA ring (k 64, 3
  // stages; 64.3 ms against the cp.async ring's 139.5 on an H200): two
  // column tiles, the last one partial, and four k steps (D = 200, the
  // last partial): the 3-stage ring wraps and its phases flip.
  Case c{9, 200, 200};
  c.dtype = "bf16";
  checkWgmma(c, "matmul=auto");
  c.tile = "matmul=auto";
  c.chip = "sm_90a";
  auto module = lower(c);
  ASSERT_TRUE(module);
  EXPECT_EQ(planOf(*module).tile,
            "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=3,block_cols=128,block_k=64,"
            "grad_cols=128,tma=1");
  Case none{130, 150, 40};
  none.reduction = "none";
  none.ignored = 0.3;
  checkWgmma(none, "matmul=wgmma block-cols=128");
}

// tma=1: x and w reach the stages by TMA boxes in the 128-, 64- and
// 32-byte swizzles (block_k 64, 32, 16), waited for on the mbarrier ring;
// rows past N and k past D are the boxes' zero fill.
TEST(WgmmaKernels, TmaBoxesIntoSwizzledStages) {
  // D = 200: four k tiles of 64 through 3 stages, the last one partial.
  checkWgmma({9, 150, 200}, "matmul=wgmma block-k=64 stages=3 tma=1");
  Case c{70, 200, 72};
  c.dtype = "bf16";
  c.bias = true;
  c.reduction = "sum";
  checkWgmma(c, "matmul=wgmma block-rows=64 threads=128 block-cols=32 tma=1");
  Case narrow{20, 70, 136};
  narrow.dtype = "bf16";
  checkWgmma(narrow,
             "matmul=wgmma block-rows=64 threads=128 block-cols=16 block-k=16 stages=2 tma=1");
}
TEST(WgmmaKernels, TmaProductsInOneBlockKeepTheBarrierPhases) {
  // One split: a block sweeps V = 150 in three column tiles, each a product
  // of four k tiles through three stages, so stage 0 completes two phases
  // per product and stages 1 and 2 one: without the extra arrivals that
  // even them out, the second product would wait on the wrong parity.
  checkWgmma({9, 150, 200}, "matmul=wgmma block-k=64 stages=3 splits=1 tma=1");
  Case c{40, 100, 96};
  c.dtype = "bf16";
  checkWgmma(c, "matmul=wgmma block-rows=64 threads=128 block-cols=16 block-k=32 stages=4 "
                "splits=1 tma=1");
}
/// `copied` (the cp.async ring) and `mapped` (a TMA tile) on the same
/// inputs: every lse and row loss bit for bit, and `mapped` with tensor maps.
void expectTheCpAsyncBits(const Case &copied, const Case &mapped) {
  SCOPED_TRACE(mapped.tile + " against " + copied.tile);
  Outputs a, b;
  bool maps = false;
  ASSERT_NO_FATAL_FAILURE(runBoth(copied, mapped, a, b, &maps));
  ASSERT_TRUE(maps);
  for (int64_t i = 0; i < copied.n; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(a.lse[size_t(i)]), std::bit_cast<uint32_t>(b.lse[size_t(i)]))
        << "lse row " << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(a.loss[size_t(i)]),
              std::bit_cast<uint32_t>(b.loss[size_t(i)]))
        << "loss row " << i;
  }
}

TEST(WgmmaKernels, TmaAndCpAsyncGiveTheSameBits) {
  // The swizzle moves bytes, not arithmetic: each wgmma reads the same
  // operands in the same order through either ring, so the TMA kernels'
  // outputs equal the cp.async kernels' bit for bit.
  for (const char *tile : {"matmul=wgmma block-k=64 stages=3", "matmul=wgmma",
                           "matmul=wgmma block-rows=64 threads=128 block-cols=16 block-k=16 "
                           "stages=2 splits=1"}) {
    Case c{37, 300, 136};
    c.dtype = "bf16";
    c.bias = true;
    c.reduction = "none";
    c.chip = "sm_90a";
    c.tile = tile;
    // tma=2 and 3: the same products from a producer warp's copies, or a
    // producer warpgroup's (two consumer warpgroups only).
    const bool twoConsumers = !llvm::StringRef(tile).contains("block-rows=64");
    for (const char *mode : {" tma=1", " tma=2", " tma=3"}) {
      if (llvm::StringRef(mode) == " tma=3" && !twoConsumers)
        continue;
      Case t = c;
      t.tile = std::string(tile) + mode;
      expectTheCpAsyncBits(c, t);
    }
  }
}

/// N=70, V=200, D=72, bf16 with a bias, reduction sum: several row and
/// column tiles and k steps.
Case bf16BiasSum() {
  Case c{70, 200, 72};
  c.dtype = "bf16";
  c.bias = true;
  c.reduction = "sum";
  return c;
}

/// The sweeps every warp-specialized tile (`mode`: " tma=2" or " tma=3")
/// must get right, against fp64 and the SIMT kernels (checkWgmma).
void checkWarpSpecializedSweeps(const std::string &mode) {
  // Two consumer warpgroups, four k tiles through 3 stages.
  checkWgmma({9, 150, 200}, ("matmul=wgmma block-k=64 stages=3" + mode).c_str());
  // One split: a sweep of three column tiles per block, one ring sequence
  // of twelve k tiles through them (the producer runs into the next tile).
  checkWgmma({9, 150, 200}, ("matmul=wgmma block-k=64 stages=3 splits=1" + mode).c_str());
  // Eight splits of 3 columns over V = 20: the last split has no column
  // tile (a sweep without a copy).
  checkWgmma({9, 20, 64}, ("matmul=wgmma block-k=64 stages=3 splits=8" + mode).c_str());
  // 128-column tiles (m64n128k16) with a bias: three column tiles, the
  // last partial, and three k tiles through 2 stages.
  Case wide{9, 300, 136};
  wide.dtype = "bf16";
  wide.bias = true;
  checkWgmma(wide, ("matmul=wgmma block-cols=128 block-k=64 stages=2 splits=1" + mode).c_str());
  // Maps the runtime cannot encode (74-byte rows): the cp.async ring.
  checkWgmma({5, 77, 37}, ("matmul=wgmma block-k=64 stages=3" + mode).c_str());
}

// tma=2: a producer warp copies the k tiles while the consumer
// warpgroups multiply, stages passed on full/empty mbarrier rings; the
// interpreter runs the two roles as tasks that wait on each other
// (ExecTasks.cpp), and orders the stage refills after the consumers'
// releases (vector clocks) — in lockstep the producer's first wait for an
// empty stage would deadlock. On the cp.async ring the producer warp idles
// but for the barriers.
TEST(WgmmaKernels, WarpSpecializedProducerAndConsumers) {
  checkWarpSpecializedSweeps(" tma=2");
  // One consumer warpgroup, two stages (no wgmma group in flight), bias.
  checkWgmma(bf16BiasSum(),
             "matmul=wgmma block-rows=64 threads=128 block-cols=32 block-k=32 stages=2 tma=2");
}

// tma=3: a producer warpgroup copies while two consumer warpgroups
// multiply, and lends them its registers around the sweep (setmaxnreg 40
// and 232 from the launch's 168, back to 168 after): the interpreter's
// register pool makes the consumers' increase wait for the producer's
// release and the producer's return wait for theirs. On the cp.async ring
// the consumers alone run it, on their named barrier.
TEST(WgmmaKernels, ProducerWarpgroupLendsItsRegisters) {
  checkWarpSpecializedSweeps(" tma=3");
  // k tiles of 32 (64-byte swizzle), 4 stages, two splits, bias.
  checkWgmma(bf16BiasSum(), "matmul=wgmma block-k=32 stages=4 splits=2 tma=3");
}

// 128x256 logit tiles (m64n256k16: 128 accumulators per consumer thread)
// on the producer warpgroup, whose whole tiles fold without column masks
// or clamps (foldColumns) and whose ragged last tile per split keeps the
// masked fold: both against fp64 and the SIMT kernels, and the TMA ring's
// bits equal the cp.async ring's (both fold the same way; KernelBits pins
// the masked fold's bits on whole tiles).
TEST(WgmmaKernels, WideLogitTilesFoldWholeTilesWithoutMasks) {
  const std::string wide = "matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256";
  // Two splits of 300 columns: a whole tile and a ragged one each.
  Case c{9, 600, 136};
  c.dtype = "bf16";
  c.bias = true;
  checkWgmma(c, (wide + " splits=2 tma=3").c_str());
  // Only whole tiles (one split of two), and only a ragged one (V < 256).
  checkWgmma({9, 512, 64}, (wide + " splits=1 tma=3").c_str());
  checkWgmma({9, 200, 64}, (wide + " splits=1 tma=3").c_str());
  // Ragged tiles of 3 columns (two splits of 259, 128x256) and of 2 (four
  // splits of 130, 128x128 on tma=2, the last split one whole tile): the
  // ragged fold clamps its columns from the thread's first one
  // (Fragment::colFirst), and quads from 2 (from 1) start past the split's
  // last column.
  Case tail{9, 518, 64};
  tail.dtype = "bf16";
  tail.bias = true;
  checkWgmma(tail, (wide + " splits=2 tma=3").c_str());
  checkWgmma(tail, "matmul=wgmma block-cols=128 block-k=64 stages=2 splits=4 tma=2");
  c.reduction = "none";
  c.chip = "sm_90a";
  c.tile = wide + " splits=2";
  Case lent = c;
  lent.tile = wide + " splits=2 tma=3";
  expectTheCpAsyncBits(c, lent);
}

// cluster=2: lce_partial runs in clusters of two row blocks of one split;
// each block's producer copies half of every W box and multicasts it to
// both, and releases reach both producers (ExecCluster.cpp runs the two
// blocks together, their threads ordered by the cluster's vector clocks).
// One row block (N = 9: its peer holds no row), two, and three (a padded
// fourth); tma=2 and tma=3; 128- and 256-column tiles; maps the runtime cannot
// encode (the cp.async ring, no multicast). The logits are the same
// products in the same order, so the bits equal the cp.async ring's.
TEST(WgmmaKernels, ClustersMulticastEachWTileToBothRowBlocks) {
  for (const char *mode : {" tma=2 cluster=2", " tma=3 cluster=2"}) {
    SCOPED_TRACE(mode);
    checkWgmma({9, 150, 200}, (std::string("matmul=wgmma block-k=64 stages=3") + mode).c_str());
    Case rows{300, 150, 72};
    rows.dtype = "bf16";
    rows.bias = true;
    checkWgmma(rows, (std::string("matmul=wgmma block-k=64 stages=2 splits=2") + mode).c_str());
    Case wide{200, 300, 136};
    wide.dtype = "bf16";
    checkWgmma(
        wide,
        (std::string("matmul=wgmma block-cols=128 block-k=64 stages=2 splits=1") + mode).c_str());
    checkWgmma({5, 77, 37}, (std::string("matmul=wgmma block-k=64 stages=3") + mode).c_str());
    // Eight splits of 3 columns over V = 20: the last split's pair sweeps
    // no tile (no copy, no release; the cluster barriers still meet).
    checkWgmma({9, 20, 64},
               (std::string("matmul=wgmma block-k=64 stages=3 splits=8") + mode).c_str());
    Case bits{130, 300, 136};
    bits.dtype = "bf16";
    bits.bias = true;
    bits.reduction = "none";
    bits.chip = "sm_90a";
    bits.tile = "matmul=wgmma block-k=64 stages=3 splits=2";
    Case clustered = bits;
    clustered.tile += mode;
    expectTheCpAsyncBits(bits, clustered);
  }
  // 256-column tiles on the producer warpgroup: each block's half of a W
  // tile is a box of 128 rows.
  Case wide{200, 300, 136};
  wide.dtype = "bf16";
  wide.bias = true;
  checkWgmma(wide, "matmul=wgmma block-cols=256 block-k=64 stages=3 splits=1 tma=3 cluster=2");
  // Clusters of four: each block copies a quarter of every W tile (32 rows
  // of 128, 64 of 256); one row block (three padded), three (one padded).
  checkWgmma({9, 150, 200}, "matmul=wgmma block-cols=128 block-k=64 stages=3 tma=2 cluster=4");
  checkWgmma(wide, "matmul=wgmma block-cols=256 block-k=64 stages=3 splits=1 tma=3 cluster=4");
  Case quad = wide;
  quad.n = 300;
  quad.reduction = "none";
  quad.chip = "sm_90a";
  quad.tile = "matmul=wgmma block-cols=128 block-k=64 stages=2 splits=2";
  Case clustered = quad;
  clustered.tile += " tma=2 cluster=4";
  expectTheCpAsyncBits(quad, clustered);
}

/// What a warp-specialized tile's kernels state: op counts and nvvm.maxnreg.
struct SpecializedKernels {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::map<std::string, int> ops;
  int maxnreg = 0;
};

/// The forward of N=9, V=150, D=200 on sm_90a with `tile`, after checking
/// that lce_partial launches `productThreads` threads, lce_combine a warp
/// (a thread per row) and lce_reduce the consumers' 256.
SpecializedKernels lowerSpecialized(const char *tile, int64_t productThreads) {
  Case c{9, 150, 200};
  c.tile = tile;
  c.chip = "sm_90a";
  SpecializedKernels k;
  k.module = lower(c);
  if (!k.module) {
    ADD_FAILURE() << "lowering " << tile;
    return k;
  }
  for (const PlanKernel &pk : planOf(*k.module).kernels)
    EXPECT_EQ(pk.block[0], pk.name == "lce_partial"   ? productThreads
                           : pk.name == "lce_combine" ? 32
                                                      : 256)
        << pk.name;
  k.module->walk([&](mlir::Operation *op) {
    ++k.ops[op->getName().getStringRef().str()];
    if (auto limit = op->getAttrOfType<mlir::IntegerAttr>("nvvm.maxnreg"))
      k.maxnreg = int(limit.getInt());
  });
  return k;
}

TEST(WgmmaKernels, ProducerWarpgroupKernelsTradeRegisters) {
  SpecializedKernels k = lowerSpecialized("matmul=wgmma block-k=64 stages=3 tma=3", 384);
  ASSERT_TRUE(k.module);
  // 384 threads launch with 168 registers each (nearly the whole file):
  // the trades count from the cap the kernel states.
  EXPECT_EQ(k.maxnreg, 168);
  EXPECT_EQ(k.ops["nvgpu.mbarrier.create"], 2);
  // Two roles on the TMA ring and two on the cp.async fallback, each taking
  // and giving back: the producer keeps 40, the consumers take 232.
  std::map<std::string, int> trades, barriers;
  auto constant = [](mlir::Value v) {
    auto c = v ? v.getDefiningOp<mlir::arith::ConstantOp>() : mlir::arith::ConstantOp();
    return c ? std::to_string(mlir::cast<mlir::IntegerAttr>(c.getValue()).getInt())
             : std::string("?");
  };
  k.module->walk([&](mlir::Operation *op) {
    if (auto set = mlir::dyn_cast<mlir::NVVM::SetMaxRegisterOp>(op))
      ++trades[(set.getAction() == mlir::NVVM::SetMaxRegisterAction::increase ? "inc " : "dec ") +
               std::to_string(set.getRegCount())];
    if (auto bar = mlir::dyn_cast<mlir::NVVM::BarrierOp>(op))
      ++barriers["sync " + constant(bar.getBarrierId()) + "," + constant(bar.getNumberOfThreads())];
    if (auto arrive = mlir::dyn_cast<mlir::NVVM::BarrierArriveOp>(op))
      ++barriers["arrive " + constant(arrive.getBarrierId()) + "," +
                 constant(arrive.getNumberOfThreads())];
  });
  EXPECT_EQ(trades, (std::map<std::string, int>{
                        {"inc 232", 2}, {"dec 168", 2}, {"dec 40", 2}, {"inc 168", 2}}));
  // The consumers synchronize on barrier 1 (256 threads) before they give
  // theirs back — and on it around the fallback's ring — then arrive on the
  // handback barrier 2, on which the producer waits (384 threads).
  EXPECT_EQ(barriers["arrive 2,384"], 2);
  EXPECT_EQ(barriers["sync 2,384"], 2);
  EXPECT_GE(barriers["sync 1,256"], 4);
  EXPECT_EQ(barriers.size(), 3u);
}

TEST(WgmmaKernels, WarpSpecializedKernelsHaveAProducerWarp) {
  SpecializedKernels k = lowerSpecialized("matmul=wgmma block-k=64 stages=3 tma=2", 288);
  ASSERT_TRUE(k.module);
  // No register cap of our own: a launch counts 9 warps as 12, so ptxas's
  // 168 for .maxntid 288 is the most that launches (224 assembled but failed
  // every launch on an H200).
  EXPECT_EQ(k.maxnreg, 0);
  EXPECT_EQ(k.ops["nvvm.setmaxregister"], 0);
  // Two rings of mbarriers: full (the copies) and empty (the releases).
  EXPECT_EQ(k.ops["nvgpu.mbarrier.create"], 2);
}
TEST(WgmmaKernels, TmaWithUnalignedRowsTakesTheCpAsyncRing) {
  // D = 37: x's and w's rows are 74 bytes apart, which no tensor map takes
  // (strides are multiples of 16): tma_ready is 0 and the same rings are
  // filled by the plain-load path (a TMA load would be an error here).
  checkWgmma({5, 77, 37}, "matmul=wgmma block-k=64 stages=3 tma=1");
  // D = 24: encodable rows of 48 bytes, but k tiles of 64 past D.
  checkWgmma({5, 300, 24}, "matmul=wgmma tma=1");
}

TEST(WgmmaKernels, KernelIrHasWgmmaAndTheRing) {
  Case c{5, 300, 24};
  c.tile = kWgmmaTile;
  c.chip = "sm_90a";
  auto module = lower(c);
  ASSERT_TRUE(module);
  std::map<std::string, int> ops;
  module->walk([&](mlir::Operation *op) { ++ops[op->getName().getStringRef().str()]; });
  // 128×64×32 tile: one wgmma m64n64k16 per k16 step and warpgroup, 2 per k
  // tile; each fill (2 in the prologue, 1 in the loop) copies 2 pieces of A
  // and 1 of B per thread; one proxy fence per step, before the barrier.
  EXPECT_EQ(ops["nvvm.wgmma.mma_async"], 2);
  EXPECT_EQ(ops["nvvm.wgmma.fence.aligned"], 1);
  EXPECT_EQ(ops["nvvm.wgmma.commit.group.sync.aligned"], 1);
  EXPECT_EQ(ops["nvvm.wgmma.wait.group.sync.aligned"], 2); // wait 1 per step, 0 after
  EXPECT_EQ(ops["nvvm.fence.proxy"], 1);
  EXPECT_EQ(ops["nvgpu.device_async_copy"], 9);
  EXPECT_EQ(ops["nvgpu.device_async_create_group"], 3);
  EXPECT_EQ(ops["nvgpu.ldmatrix"], 0);
  EXPECT_EQ(ops["memref.extract_aligned_pointer_as_index"], 2);
  // Rings of 4 stages × 128 (A) and 64 (B) lines × 32 k × 2 bytes, unpadded.
  LaunchPlan plan = planOf(*module);
  auto partial = llvm::find_if(plan.kernels, [](const auto &k) { return k.name == "lce_partial"; });
  ASSERT_NE(partial, plan.kernels.end());
  EXPECT_EQ(partial->sharedBytes, 4 * (128 + 64) * 32 * 2);
}

} // namespace
