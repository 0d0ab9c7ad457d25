//===- SoftcapKernelsTest.cpp - GPU kernels with logit transforms, on SIMT -===//
//
// The GPU forward (lce_partial/combine/reduce) and both GPU backward
// schedules of graphs with a logit scale and a tanh softcap, run through the
// SIMT interpreter on small shapes, against the fp64 reference (which applies
// the same transforms and differentiates them analytically) and against the
// CPU backend.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Pipeline/StageRunner.h"
#include "compiler/Target/CpuJit.h"
#include "dialects/Loss/LossOps.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/Reference.h"
#include "testing/simt/PlanRunner.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace lossjit;

namespace {
struct Case {
  int64_t n, v, d;
  std::string dtype = "f32", reduction = "mean";
  double scale = 1.0, cap = 0.0;
  bool bias = false;
  double ignored = 0.0;
  double magnitude = 4.0; ///< typical |x·w| of the random inputs.
  std::string strategy = "chunked";
  std::string tile = "block_rows=2,threads=32,splits=3";
  int64_t workspaceBytes = 64ll << 20;
  std::string chip = "sm_80"; ///< the lowering's chip (sm_90a for wgmma tiles)
  bool fused = false;         ///< loss.linear_cross_entropy_with_grad (gradient graphs).
};

std::string describe(const Case &c) {
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) + " D=" + std::to_string(c.d) +
         " " + c.dtype + " " + c.reduction + " scale=" + loss::formatF64(c.scale) +
         " cap=" + loss::formatF64(c.cap) + (c.bias ? " bias" : "") + " |raw|~" +
         loss::formatF64(c.magnitude) + " " + c.strategy + " tile=" + c.tile + " " + c.chip;
}

class SimtSoftcap : public ::testing::Test {
protected:
  SimtSoftcap() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  LceGraphOptions options(const Case &c, bool gradient) {
    LceGraphOptions o;
    o.dtype = c.dtype;
    o.bias = c.bias;
    o.reduction = c.reduction;
    o.logitScale = c.scale;
    o.softcap = c.cap;
    o.gradient = gradient;
    o.strategy = c.strategy;
    o.workspaceBytes = c.workspaceBytes;
    o.fusedForward = gradient && c.fused;
    return o;
  }

  /// Lowers `c`'s forward or backward graph to GPU kernels and runs its
  /// launch plan on the interpreter.
  void runOnSimt(const Case &c, bool gradient,
                 const std::map<std::string, HostBuffer> &buffers) {
    auto graph = buildLinearCrossEntropyGraph(*context, options(c, gradient));
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    auto tile = TileConfig::parse(c.tile);
    ASSERT_TRUE(static_cast<bool>(tile)) << llvm::toString(tile.takeError());
    GpuTarget target;
    target.chip = c.chip;
    std::vector<Stage> stages = gpuStages(target, *tile);
    while (stages.back().name != "kernels")
      stages.pop_back();
    auto timings = runStages(**graph, stages);
    ASSERT_TRUE(static_cast<bool>(timings)) << llvm::toString(timings.takeError());
    std::string error;
    auto plans = readLaunchPlans(**graph, error);
    ASSERT_TRUE(mlir::succeeded(plans)) << error;
    const auto &opts = plans->front().options;
    if (c.scale != 1.0)
      EXPECT_EQ(opts.at("logit_scale"), loss::formatF64(c.scale));
    if (c.cap != 0.0)
      EXPECT_EQ(opts.at("softcap"), loss::formatF64(c.cap));
    std::map<std::string, simt::SimtHostBuffer> simtBuffers;
    for (const auto &[name, b] : buffers)
      simtBuffers[name] = {b.data, simt::elementTypeOf(b.dtype), b.count};
    llvm::Error err =
        simt::runPlanOnSimt(**graph, plans->front(), simtBuffers, {c.n, c.v, c.d});
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  }

  /// The CPU backend's gradients of the same graph and inputs (same lse).
  std::map<std::string, std::vector<char>> cpuGrads(const Case &c,
                                                    std::map<std::string, HostBuffer> buffers) {
    auto graph = buildLinearCrossEntropyGraph(*context, options(c, true));
    EXPECT_TRUE(static_cast<bool>(graph));
    auto op = simt::test::compileCpuReference(**graph);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    std::map<std::string, std::vector<char>> out;
    if (!op)
      return out;
    for (auto &[name, b] : buffers)
      if (name.rfind("grad_", 0) == 0 && name != "grad_loss") {
        out[name].assign(b.count * (c.dtype == "f32" ? 4 : 2), 0);
        b.data = out[name].data();
      }
    llvm::Error err = (*op)->run(buffers, {c.n, c.v, c.d});
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    return out;
  }

  /// `c`'s random inputs (into `in`) and its problem with the scale and cap.
  static LceProblem &randomProblem(const Case &c, RandomLceInputs &in) {
    RandomLceOptions o;
    o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = c.dtype, o.reduction = c.reduction;
    o.bias = c.bias, o.ignoredFraction = c.ignored, o.logitScale = c.magnitude;
    makeRandomLceInputs(o, in);
    in.problem.logitScale = c.scale;
    in.problem.softcap = c.cap;
    return in.problem;
  }

  void checkCase(const Case &c) {
    SCOPED_TRACE(describe(c));
    RandomLceInputs in;
    LceProblem &p = randomProblem(c, in);
    std::map<std::string, HostBuffer> inputs = {
        {"x", {const_cast<void *>(p.x), c.dtype, c.n * c.d}},
        {"w", {const_cast<void *>(p.w), c.dtype, c.v * c.d}},
        {"labels", {in.labels64.data(), "i64", c.n}}};
    if (c.bias)
      inputs["bias"] = {const_cast<void *>(p.bias), c.dtype, c.v};

    // Forward on the interpreter vs fp64.
    std::vector<float> loss(c.reduction == "none" ? c.n : 1), lse(c.n);
    auto fwd = inputs;
    fwd["loss"] = {loss.data(), "f32", static_cast<int64_t>(loss.size())};
    fwd["lse"] = {lse.data(), "f32", c.n};
    runOnSimt(c, false, fwd);
    LceReference ref = referenceLinearCrossEntropy(p);
    for (int64_t i = 0; i < c.n; ++i)
      EXPECT_LE(std::fabs(lse[i] - ref.lse[i]), 1e-4 * std::fabs(ref.lse[i]) + 1e-5)
          << "lse row " << i << " got " << lse[i] << " want " << ref.lse[i];
    if (c.reduction == "none") {
      for (int64_t i = 0; i < c.n; ++i)
        EXPECT_LE(std::fabs(loss[i] - ref.rowLoss[i]),
                  1e-4 * std::max(std::fabs(ref.rowLoss[i]), std::fabs(ref.lse[i])) + 1e-5)
            << "loss row " << i;
    } else {
      EXPECT_LE(std::fabs(loss[0] - ref.loss), 1e-4 * std::fabs(ref.loss) + 1e-5)
          << "loss got " << loss[0] << " want " << ref.loss;
    }

    // Backward on the interpreter vs fp64 and vs the CPU backend.
    std::vector<float> gradLoss(c.reduction == "none" ? c.n : 1, 0.5f);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    if (c.reduction == "none")
      for (float &g : gradLoss)
        g = u(rng);
    int64_t es = c.dtype == "f32" ? 4 : 2;
    std::vector<char> gx(c.n * c.d * es), gw(c.v * c.d * es), gb(c.v * es);
    auto bwd = inputs;
    bwd["lse"] = {lse.data(), "f32", c.n};
    bwd["grad_loss"] = {gradLoss.data(), "f32", static_cast<int64_t>(gradLoss.size())};
    bwd["grad_x"] = {gx.data(), c.dtype, c.n * c.d};
    bwd["grad_w"] = {gw.data(), c.dtype, c.v * c.d};
    if (c.bias)
      bwd["grad_bias"] = {gb.data(), c.dtype, c.v};
    runOnSimt(c, true, bwd);

    LceGradReference gref = referenceLinearCrossEntropyGrad(
        p, std::vector<double>(gradLoss.begin(), gradLoss.end()));
    double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
    auto asDouble = [&](const std::vector<char> &bytes) {
      std::vector<double> v(bytes.size() / es);
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = elementAsDouble(bytes.data(), c.dtype, static_cast<int64_t>(i));
      return v;
    };
    for (double g : asDouble(gx))
      ASSERT_TRUE(std::isfinite(g)) << "grad_x has a non-finite element";
    for (double g : asDouble(gw))
      ASSERT_TRUE(std::isfinite(g)) << "grad_w has a non-finite element";
    auto cpu = cpuGrads(c, bwd);
    EXPECT_LE(relativeL2Error(gx.data(), c.dtype, gref.gradX), tol) << "grad_x vs fp64";
    EXPECT_LE(relativeL2Error(gw.data(), c.dtype, gref.gradW), tol) << "grad_w vs fp64";
    EXPECT_LE(relativeL2Error(gx.data(), c.dtype, asDouble(cpu["grad_x"])), tol)
        << "grad_x vs CPU backend";
    EXPECT_LE(relativeL2Error(gw.data(), c.dtype, asDouble(cpu["grad_w"])), tol)
        << "grad_w vs CPU backend";
    if (c.bias)
      EXPECT_LE(relativeL2Error(gb.data(), c.dtype, gref.gradBias), tol) << "grad_bias";
  }

  /// The fused forward+backward of `c` (loss, lse and the gradients of
  /// grad_loss = 1 in one plan) on the interpreter against fp64: the logits
  /// go through the scale and the cap before any statistic is folded.
  void checkFused(Case c) {
    c.fused = true;
    SCOPED_TRACE(describe(c) + " fused");
    RandomLceInputs in;
    LceProblem &p = randomProblem(c, in);
    const int64_t es = c.dtype == "f32" ? 4 : 2;
    std::vector<float> loss(1), lse(c.n);
    std::vector<char> gx(c.n * c.d * es), gw(c.v * c.d * es), gb(c.v * es);
    std::map<std::string, HostBuffer> buffers = {
        {"x", {const_cast<void *>(p.x), c.dtype, c.n * c.d}},
        {"w", {const_cast<void *>(p.w), c.dtype, c.v * c.d}},
        {"labels", {in.labels64.data(), "i64", c.n}},
        {"loss", {loss.data(), "f32", 1}},
        {"lse", {lse.data(), "f32", c.n}},
        {"grad_x", {gx.data(), c.dtype, c.n * c.d}},
        {"grad_w", {gw.data(), c.dtype, c.v * c.d}}};
    if (c.bias) {
      buffers["bias"] = {const_cast<void *>(p.bias), c.dtype, c.v};
      buffers["grad_bias"] = {gb.data(), c.dtype, c.v};
    }
    runOnSimt(c, true, buffers);
    LceReference ref = referenceLinearCrossEntropy(p);
    for (int64_t i = 0; i < c.n; ++i)
      EXPECT_LE(std::fabs(lse[i] - ref.lse[i]), 1e-4 * std::fabs(ref.lse[i]) + 1e-5)
          << "lse row " << i << " got " << lse[i] << " want " << ref.lse[i];
    EXPECT_LE(std::fabs(loss[0] - ref.loss), 1e-4 * std::fabs(ref.loss) + 1e-5)
        << "loss got " << loss[0] << " want " << ref.loss;
    LceGradReference gref = referenceLinearCrossEntropyGrad(p, {1.0});
    const double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
    EXPECT_LE(relativeL2Error(gx.data(), c.dtype, gref.gradX), tol) << "grad_x vs fp64";
    EXPECT_LE(relativeL2Error(gw.data(), c.dtype, gref.gradW), tol) << "grad_w vs fp64";
    if (c.bias)
      EXPECT_LE(relativeL2Error(gb.data(), c.dtype, gref.gradBias), tol) << "grad_bias";
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};
} // namespace

TEST_F(SimtSoftcap, SoftcapAllDtypes) {
  for (std::string dtype : {"f32", "f16", "bf16"})
    checkCase({5, 37, 9, dtype, "mean", 1.0, 15.0, true, 0.2, 20.0});
}

TEST_F(SimtSoftcap, SaturatingSoftcapAndScale) {
  // |raw| ~ 300 against cap 5 (after a 0.5 scale): most logits are flat at
  // ±cap, many with exp(2|u|) = +inf inside the kernel's tanh.
  checkCase({4, 41, 8, "f32", "none", 0.5, 5.0, false, 0.0, 300.0});
  checkCase({4, 41, 8, "bf16", "sum", 0.5, 5.0, true, 0.0, 300.0});
}

TEST_F(SimtSoftcap, ScaleAlone) {
  checkCase({5, 33, 7, "f16", "mean", 1.0 / 0.7, 0.0, true, 0.0, 4.0});
  checkCase({3, 20, 5, "f32", "none", -2.0, 0.0, false, 0.0, 4.0});
}

TEST_F(SimtSoftcap, VocabChunkedStrategy) {
  // dZ through the cap and scale per chunk of columns, several chunks.
  for (std::string dtype : {"f32", "bf16"}) {
    Case c{6, 45, 9, dtype, "mean", 2.0, 10.0, true, 0.2, 12.0};
    c.strategy = "vocab_chunked";
    c.workspaceBytes = 2 * (6 * 4 + 10 * 6 * 4);
    checkCase(c);
  }
}

// What matmul=auto now gives a forward with a bias and a softcap on sm_90a:
// 128x128 wgmma logits on the TMA ring, whose whole tiles fold without
// column masks (V = 300: two whole column tiles and a ragged one in one
// split; three splits: ragged tiles only); the backward on the same tile.
// With tma=2 too (a producer warp, 2 stages), which kept 64 columns until
// its ragged fold clamped from the thread's first column.
TEST_F(SimtSoftcap, WgmmaWholeTilesWithABiasAndASoftcap) {
  for (const char *ring : {"stages=3,tma=1", "stages=2,tma=2"})
    for (const char *splits : {"1", "3"}) {
      Case c{9, 300, 72, "bf16", "mean", 1.0, 15.0, true, 0.2, 20.0};
      c.tile = std::string("matmul=wgmma,block_cols=128,block_k=64,") + ring + ",splits=" + splits;
      c.chip = "sm_90a";
      checkCase(c);
    }
}

// The fused op's row chunks with a scale and a cap: on tensor-core tiles
// lce_fused_z folds each tile's capped logits into its row statistics
// (lce_fused_lse merges those), on SIMT lce_fused_lse caps the raw logits
// itself; both against fp64, in one chunk and in several.
TEST_F(SimtSoftcap, FusedRowChunks) {
  struct Tile {
    const char *text, *chip, *dtype;
  };
  for (const Tile &t :
       {Tile{"block_rows=2,threads=32,splits=3", "sm_80", "f32"},
        Tile{"matmul=mma_sync", "sm_80", "f16"},
        Tile{"matmul=wgmma,block_rows=64,threads=128,block_cols=16,block_k=16,"
             "stages=2,grad_cols=16",
             "sm_90a", "bf16"},
        Tile{"matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1", "sm_90a", "bf16"}})
    for (int64_t budget : {int64_t{64} << 20, int64_t{40 * 4 + 16 * (300 * 6 + 19 * 8)}}) {
      Case c{40, 300, 72, t.dtype, "mean", 0.7, 15.0, true, 0.2, 20.0};
      c.tile = t.text;
      c.chip = t.chip;
      c.workspaceBytes = budget;
      checkFused(c);
    }
}

TEST_F(SimtSoftcap, RecomputeStrategy) {
  for (std::string dtype : {"f32", "bf16"}) {
    Case c{6, 45, 9, dtype, "mean", 2.0, 10.0, true, 0.2, 12.0};
    c.strategy = "recompute";
    checkCase(c);
  }
  Case rows{40, 35, 5, "f16", "none", 1.0, 30.0, false, 0.1, 40.0};
  rows.strategy = "recompute";
  rows.tile = "block_rows=3,threads=32,splits=2";
  checkCase(rows);
}
