//===- BackwardKernelsTest.cpp - GPU gradient kernels on the interpreter --===//
//
// The chunked GPU backward (lce_bwd_scale, per-chunk dz/dx/dw, finish) run
// through the SIMT interpreter on small shapes, against the fp64 analytic
// gradient and against the CPU backend's gradients.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Pipeline/StageRunner.h"
#include "compiler/Target/CpuJit.h"
#include "runtime/Formula.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/Reference.h"
#include "testing/simt/PlanRunner.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <set>

using namespace lossjit;

namespace {
struct GradCase {
  int64_t n, v, d;
  std::string dtype = "f32", reduction = "mean";
  bool bias = false;
  double ignored = 0.0;
  int64_t workspaceBytes = 256ll << 20;
  std::string tile = "block_rows=2,threads=32,splits=3";
  bool needsX = true, needsW = true;
  std::string strategy = "chunked";
  bool gradLse = false; ///< a per-row gradient of lse too (a z-loss).
  bool fused = false;   ///< loss.linear_cross_entropy_with_grad (gradient graphs).
};

std::string describe(const GradCase &c) {
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) + " D=" +
         std::to_string(c.d) + " " + c.dtype + " " + c.reduction + (c.bias ? " bias" : "") +
         " ignored=" + std::to_string(c.ignored) + " ws=" + std::to_string(c.workspaceBytes) +
         " tile=" + c.tile + " " + c.strategy;
}

class SimtBackward : public ::testing::Test {
protected:
  SimtBackward() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  LceGraphOptions options(const GradCase &c, bool gradient) {
    LceGraphOptions o;
    o.dtype = c.dtype;
    o.bias = c.bias;
    o.reduction = c.reduction;
    o.gradient = gradient;
    o.strategy = c.strategy;
    o.workspaceBytes = c.workspaceBytes;
    o.needsGradX = c.needsX;
    o.needsGradW = c.needsW;
    o.gradLse = gradient && c.gradLse;
    o.fusedForward = gradient && c.fused;
    return o;
  }

  /// Runs the GPU kernels of `c`'s forward or backward graph on the
  /// interpreter with `buffers`.
  void runOnSimt(const GradCase &c, bool gradient, const std::map<std::string, HostBuffer> &buffers,
                 const std::function<void(LaunchPlan &)> &edit = {}) {
    auto graph = buildLinearCrossEntropyGraph(*context, options(c, gradient));
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    LaunchPlan plan = lowerToKernels(**graph, c.tile);
    ASSERT_FALSE(HasFailure());
    if (edit)
      edit(plan);
    std::map<std::string, simt::SimtHostBuffer> simtBuffers;
    for (const auto &[name, b] : buffers)
      simtBuffers[name] = {b.data, simt::elementTypeOf(b.dtype), b.count};
    llvm::Error err =
        simt::runPlanOnSimt(**graph, plan, simtBuffers, {c.n, c.v, c.d});
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  }

  /// Lowers `graph` to GPU kernels with `tileText` and returns its plan.
  LaunchPlan lowerToKernels(mlir::ModuleOp graph, const std::string &tileText) {
    auto tile = TileConfig::parse(tileText);
    EXPECT_TRUE(static_cast<bool>(tile)) << llvm::toString(tile.takeError());
    if (!tile)
      return {};
    // wgmma exists on sm_90a only.
    GpuTarget target;
    if (tile->matmul == loss::MatmulKind::wgmma)
      target.chip = "sm_90a";
    std::vector<Stage> stages = gpuStages(target, *tile);
    while (stages.back().name != "kernels")
      stages.pop_back();
    auto timings = runStages(graph, stages);
    EXPECT_TRUE(static_cast<bool>(timings)) << llvm::toString(timings.takeError());
    std::string error;
    auto plans = readLaunchPlans(graph, error);
    EXPECT_TRUE(mlir::succeeded(plans)) << error;
    if (mlir::failed(plans) || plans->empty())
      return {};
    return plans->front();
  }

  /// The kernels of `c`'s backward that launch in clusters of `size` (their
  /// known_cluster_size).
  std::set<std::string> clusteredKernels(const GradCase &c, int32_t size = 2) {
    auto graph = buildLinearCrossEntropyGraph(*context, options(c, true));
    EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    if (!graph)
      return {};
    lowerToKernels(**graph, c.tile);
    std::set<std::string> names;
    (*graph)->walk([&](mlir::gpu::GPUFuncOp f) {
      std::optional<llvm::ArrayRef<int32_t>> known = f.getKnownClusterSize();
      if (known && (*known)[0] * (*known)[1] * (*known)[2] == size)
        names.insert(f.getName().str());
    });
    return names;
  }

  /// The CPU backend's gradients for the same inputs (same lse).
  std::map<std::string, std::vector<char>> cpuGrads(const GradCase &c,
                                                    std::map<std::string, HostBuffer> buffers) {
    auto graph = buildLinearCrossEntropyGraph(*context, options(c, true));
    EXPECT_TRUE(static_cast<bool>(graph));
    auto op = simt::test::compileCpuReference(**graph);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    std::map<std::string, std::vector<char>> out;
    for (auto &[name, b] : buffers)
      if (name.rfind("grad_", 0) == 0 && name != "grad_loss" && name != "grad_lse") {
        out[name].assign(b.count * (c.dtype == "f64" ? 8 : c.dtype == "f32" ? 4 : 2), 0);
        b.data = out[name].data();
      }
    llvm::Error err = (*op)->run(buffers, {c.n, c.v, c.d});
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    return out;
  }

  /// Checks `c`'s gradients against fp64 and the CPU backend; `grads`, when
  /// given, receives their bytes (grad_x, grad_w, grad_bias).
  void checkCase(const GradCase &c, std::map<std::string, std::vector<char>> *grads = nullptr) {
    SCOPED_TRACE(describe(c));
    RandomLceOptions o;
    o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = c.dtype, o.reduction = c.reduction;
    o.bias = c.bias, o.ignoredFraction = c.ignored;
    RandomLceInputs in;
    makeRandomLceInputs(o, in);
    const LceProblem &p = in.problem;
    std::map<std::string, HostBuffer> inputs = {
        {"x", {const_cast<void *>(p.x), c.dtype, c.n * c.d}},
        {"w", {const_cast<void *>(p.w), c.dtype, c.v * c.d}},
        {"labels", {in.labels64.data(), "i64", c.n}}};
    if (c.bias)
      inputs["bias"] = {const_cast<void *>(p.bias), c.dtype, c.v};
    // Forward on the interpreter for lse.
    std::vector<float> loss(c.reduction == "none" ? c.n : 1), lse(c.n);
    auto fwd = inputs;
    fwd["loss"] = {loss.data(), "f32", static_cast<int64_t>(loss.size())};
    fwd["lse"] = {lse.data(), "f32", c.n};
    runOnSimt(c, false, fwd);
    // The backward's lse is the forward's: both against fp64.
    LceReference fwdRef = referenceLinearCrossEntropy(p);
    for (int64_t i = 0; i < c.n; ++i)
      ASSERT_LE(std::fabs(lse[i] - fwdRef.lse[i]), 1e-4 * std::fabs(fwdRef.lse[i]) + 1e-5)
          << "lse of row " << i;
    // Backward.
    std::vector<float> gradLoss(c.reduction == "none" ? c.n : 1, 0.5f);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    if (c.reduction == "none")
      for (float &g : gradLoss)
        g = u(rng);
    int64_t es = c.dtype == "f32" ? 4 : 2;
    // NaN bit patterns where the gradients go (torch.empty_like gives
    // whatever memory held): a kernel that read an output before writing it
    // — the first chunk's dW sums, which start from zero without a zeroing
    // pass, with f32 storage summing straight into grad_w — would carry a NaN
    // into the result.
    std::vector<char> gx(c.n * c.d * es, char(0xff)), gw(c.v * c.d * es, char(0xff)),
        gb(c.v * es, char(0xff));
    auto bwd = inputs;
    bwd["lse"] = {lse.data(), "f32", c.n};
    bwd["grad_loss"] = {gradLoss.data(), "f32", static_cast<int64_t>(gradLoss.size())};
    std::vector<float> gradLse;
    if (c.gradLse) {
      for (int64_t r = 0; r < c.n; ++r)
        gradLse.push_back(r % 4 == 0 ? 0.0f : 0.3f - 0.1f * static_cast<float>(r % 5));
      bwd["grad_lse"] = {gradLse.data(), "f32", c.n};
    }
    if (c.needsX)
      bwd["grad_x"] = {gx.data(), c.dtype, c.n * c.d};
    if (c.needsW) {
      bwd["grad_w"] = {gw.data(), c.dtype, c.v * c.d};
      if (c.bias)
        bwd["grad_bias"] = {gb.data(), c.dtype, c.v};
    }
    runOnSimt(c, true, bwd);
    if (grads)
      *grads = {{"grad_x", gx}, {"grad_w", gw}, {"grad_bias", gb}};

    LceGradReference ref = referenceLinearCrossEntropyGrad(
        p, std::vector<double>(gradLoss.begin(), gradLoss.end()),
        std::vector<double>(gradLse.begin(), gradLse.end()));
    double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
    auto cpu = cpuGrads(c, bwd);
    auto asDouble = [&](const std::vector<char> &bytes) {
      std::vector<double> v(bytes.size() / es);
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = elementAsDouble(bytes.data(), c.dtype, static_cast<int64_t>(i));
      return v;
    };
    if (c.needsX) {
      EXPECT_LE(relativeL2Error(gx.data(), c.dtype, ref.gradX), tol) << "grad_x vs fp64";
      EXPECT_LE(relativeL2Error(gx.data(), c.dtype, asDouble(cpu["grad_x"])), tol)
          << "grad_x vs CPU backend";
    }
    if (c.needsW) {
      EXPECT_LE(relativeL2Error(gw.data(), c.dtype, ref.gradW), tol) << "grad_w vs fp64";
      EXPECT_LE(relativeL2Error(gw.data(), c.dtype, asDouble(cpu["grad_w"])), tol)
          << "grad_w vs CPU backend";
      if (c.bias)
        EXPECT_LE(relativeL2Error(gb.data(), c.dtype, ref.gradBias), tol) << "grad_bias";
    }
  }

  /// `c`'s inputs with a bias (what the fused checks run on).
  void makeBiasedInputs(const GradCase &c, RandomLceInputs &in) {
    RandomLceOptions o;
    o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = c.dtype, o.reduction = c.reduction;
    o.bias = true, o.ignoredFraction = c.ignored;
    makeRandomLceInputs(o, in);
  }

  /// The bytes of loss, lse, grad_x, grad_w and grad_bias for `in` (with a
  /// bias) from the GPU kernels of `c`'s loss.linear_cross_entropy_with_grad
  /// or, with `fused` false, of its forward followed by its backward of
  /// grad_loss = 1. `edit`, when given, changes the gradient plan first.
  std::map<std::string, std::vector<char>>
  lossAndGradients(const GradCase &c, const RandomLceInputs &in, bool fused,
                   const std::function<void(LaunchPlan &)> &edit = {}) {
    GradCase b = c;
    b.bias = true;
    const int64_t es = c.dtype == "f32" ? 4 : 2;
    // The gradients start as NaN bit patterns: an element no kernel writes
    // cannot pass for a zero.
    std::map<std::string, std::vector<char>> out = {
        {"loss", std::vector<char>(4)},
        {"lse", std::vector<char>(c.n * 4)},
        {"grad_x", std::vector<char>(c.n * c.d * es, char(0xff))},
        {"grad_w", std::vector<char>(c.v * c.d * es, char(0xff))},
        {"grad_bias", std::vector<char>(c.v * es, char(0xff))}};
    std::map<std::string, HostBuffer> inputs = {
        {"x", {const_cast<void *>(in.problem.x), c.dtype, c.n * c.d}},
        {"w", {const_cast<void *>(in.problem.w), c.dtype, c.v * c.d}},
        {"bias", {const_cast<void *>(in.problem.bias), c.dtype, c.v}},
        {"labels", {const_cast<int64_t *>(in.labels64.data()), "i64", c.n}}};
    auto forward = inputs, backward = inputs;
    for (const char *name : {"loss", "lse"})
      forward[name] = {out[name].data(), "f32", static_cast<int64_t>(out[name].size() / 4)};
    for (const char *name : {"grad_x", "grad_w", "grad_bias"})
      if (std::string(name) == "grad_x" ? c.needsX : c.needsW)
        backward[name] = {out[name].data(), c.dtype, static_cast<int64_t>(out[name].size() / es)};
    if (fused) {
      b.fused = true;
      auto graph = buildLinearCrossEntropyGraph(*context, options(b, true));
      EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
      if (!graph)
        return out;
      LaunchPlan plan = lowerToKernels(**graph, c.tile);
      if (edit)
        edit(plan);
      std::map<std::string, simt::SimtHostBuffer> buffers;
      for (const auto *half : {&forward, &backward})
        for (const auto &[name, h] : *half)
          buffers[name] = {h.data, simt::elementTypeOf(h.dtype), h.count};
      llvm::Error err = simt::runPlanOnSimt(**graph, plan, buffers, {c.n, c.v, c.d});
      EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
      return out;
    }
    b.fused = false;
    runOnSimt(b, false, forward);
    float one = 1.0f;
    backward["lse"] = forward["lse"];
    backward["grad_loss"] = {&one, "f32", 1};
    runOnSimt(b, true, backward, edit);
    return out;
  }

  /// The GPU kernels of loss.linear_cross_entropy_with_grad (row chunks:
  /// raw logits per chunk, lse and row losses from them, dZ in place,
  /// dX/dW, finish, reduce; vocabulary chunks: the forward's statistics,
  /// then the backward's chunks) against fp64: loss, lse and the gradients
  /// of grad_loss = 1. `outputs`, when given, receives their bytes.
  void checkFused(const GradCase &c, std::map<std::string, std::vector<char>> *outputs = nullptr) {
    SCOPED_TRACE(describe(c) + " fused");
    RandomLceInputs in;
    makeBiasedInputs(c, in);
    std::map<std::string, std::vector<char>> got = lossAndGradients(c, in, /*fused=*/true);
    ASSERT_FALSE(HasFailure());
    const float *loss = reinterpret_cast<const float *>(got["loss"].data());
    const float *lse = reinterpret_cast<const float *>(got["lse"].data());
    LceReference ref = referenceLinearCrossEntropy(in.problem);
    EXPECT_LE(std::fabs(loss[0] - ref.loss), 1e-4 * std::fabs(ref.loss)) << "loss";
    for (int64_t i = 0; i < c.n; ++i)
      EXPECT_LE(std::fabs(lse[i] - ref.lse[i]), 1e-4 * std::fabs(ref.lse[i]) + 1e-6);
    LceGradReference gref = referenceLinearCrossEntropyGrad(in.problem, {1.0});
    double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
    if (c.needsX)
      EXPECT_LE(relativeL2Error(got["grad_x"].data(), c.dtype, gref.gradX), tol) << "grad_x";
    if (c.needsW) {
      EXPECT_LE(relativeL2Error(got["grad_w"].data(), c.dtype, gref.gradW), tol) << "grad_w";
      EXPECT_LE(relativeL2Error(got["grad_bias"].data(), c.dtype, gref.gradBias), tol)
          << "grad_bias";
    }
    if (outputs)
      *outputs = std::move(got);
  }

  /// `c`'s backward plan (`c.fused`: the fused op's).
  LaunchPlan gradientPlan(const GradCase &c) {
    auto graph = buildLinearCrossEntropyGraph(*context, options(c, true));
    EXPECT_TRUE(static_cast<bool>(graph));
    if (!graph)
      return {};
    return lowerToKernels(**graph, c.tile);
  }
  /// N, V, D, the constants and the derived symbols of `plan` for `c`.
  std::map<std::string, int64_t> symbolsOf(const LaunchPlan &plan, const GradCase &c) {
    std::map<std::string, int64_t> symbols = {{"N", c.n}, {"V", c.v}, {"D", c.d}};
    for (const auto &[name, value] : plan.constants)
      symbols[name] = value;
    for (const auto &[name, formula] : plan.derived) {
      auto value = runtime::evaluateFormula(formula, symbols);
      EXPECT_TRUE(static_cast<bool>(value)) << formula;
      symbols[name] = value ? *value : -1;
    }
    return symbols;
  }
  /// `formula` of `plan` evaluated for `c`.
  int64_t evaluateFor(const LaunchPlan &plan, const GradCase &c, const std::string &formula) {
    auto value = runtime::evaluateFormula(formula, symbolsOf(plan, c));
    EXPECT_TRUE(static_cast<bool>(value)) << formula;
    return value ? *value : -1;
  }

  /// How many chunks `c`'s backward plan cuts its chunk dim into (1
  /// without chunking) and of what size, from the plan's own formulas.
  std::pair<int64_t, int64_t> chunking(const GradCase &c) {
    LaunchPlan plan = gradientPlan(c);
    if (plan.chunkSymbol.empty())
      return {1, 0};
    std::map<std::string, int64_t> symbols = symbolsOf(plan, c);
    const int64_t extent = symbols[plan.chunkDim], size = symbols[plan.chunkSymbol];
    return {(extent + size - 1) / size, size};
  }
  int64_t chunksOf(const GradCase &c) { return chunking(c).first; }
  /// chunking() of `c`'s fused forward+backward.
  std::pair<int64_t, int64_t> fusedChunking(GradCase c) {
    c.fused = true;
    return chunking(c);
  }
  static std::pair<int64_t, int64_t> chunksOfRows(int64_t chunks, int64_t rows) {
    return {chunks, rows};
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};
// --- Hopper tensor cores: every product of the backward on matmul = wgmma --
//
// dZ·W (W MN-major: wgmma's transposed B) and dZᵀ·X (both operands
// MN-major) through the canonical MN-major core matrices, the logits
// K-major; against fp64 and the CPU backend at shapes that are not
// multiples of any tile, over several chunks.

const char *const kWgmmaNarrow =
    "matmul=wgmma,block_rows=64,threads=128,block_cols=16,block_k=16,stages=2,grad_cols=16";

TEST_F(SimtBackward, WgmmaChunkedAndFused) {
  for (std::string dtype : {"f16", "bf16"}) {
    GradCase c{37, 70, 24, dtype, "mean", true, 0.2};
    c.tile = kWgmmaNarrow;
    checkCase(c);
    GradCase f{40, 75, 24, dtype, "mean", true, 0.3};
    f.tile = kWgmmaNarrow;
    // The fused op's per-row terms share the budget (raw logits, 16-bit dZ
    // and one lse state of two fields per 16-column tile): 11 rows, four
    // chunks.
    f.workspaceBytes = 40 * 4 + 11 * (75 * 6 + 5 * 8);
    EXPECT_EQ(fusedChunking(f), chunksOfRows(4, 11));
    checkFused(f);
  }
  // dW over five chunks of 8 rows; V and D not multiples of 8 (plain loads).
  GradCase odd{37, 83, 20, "bf16", "sum", true, 0.25};
  odd.tile = kWgmmaNarrow;
  odd.workspaceBytes = 37 * 4 + 8 * 83 * 2 + 4;
  EXPECT_EQ(chunking(odd), chunksOfRows(5, 8));
  checkCase(odd);
  // The default tile (two warpgroups) and one warpgroup of 32 columns,
  // cp.async for every operand.
  GradCase wide{45, 96, 48, "f16", "none", false, 0.1};
  wide.tile = "matmul=wgmma";
  checkCase(wide);
  wide.tile = "matmul=wgmma,block_rows=64,threads=128,block_cols=32";
  checkCase(wide);
  // The gradient products on their own tile (grad_cols): 48 columns of D
  // per dX / dW block next to 16-column logit tiles, D = 100 in three
  // column tiles (the last one partial), over several chunks.
  GradCase split{26, 58, 100, "bf16", "mean", true, 0.2};
  split.tile = "matmul=wgmma,block_rows=64,threads=128,block_cols=16,block_k=16,stages=2,"
               "grad_cols=48";
  split.workspaceBytes = 26 * 4 + 9 * 58 * 2 + 4;
  checkCase(split);
  split.tile += ",stages=3";
  checkFused(split);
  // 128-column logit tiles (what matmul=auto gives a Hopper's backward,
  // with a bias too): dZ in 128x128 tiles, V = 200 in two column tiles.
  GradCase wide128{45, 200, 40, "bf16", "mean", true, 0.1};
  wide128.tile = "matmul=wgmma,block_cols=128";
  wide128.workspaceBytes = 45 * 4 + 20 * 200 * 6;
  checkCase(wide128);
  checkFused(wide128);
  // V = 300: dZ·W runs ten k steps of 32 through the default 4-stage ring,
  // refilling stages behind the wgmma group in flight (W MN-major).
  GradCase deep{33, 300, 40, "bf16", "mean", true, 0.1};
  deep.tile = "matmul=wgmma";
  deep.workspaceBytes = 33 * 4 + 33 * 300 * 6;
  checkCase(deep);
}

// tma=1: the logits products (lce_bwd_dz, lce_fused_z) load x and w by TMA
// boxes into swizzled stages over several chunks — chunk rows are box rows
// at chunk_begin, rows past the chunk the box's real rows (never stored) —
// while dZ·W and dZᵀ·X stay on the cp.async ring of the same 2-D layout.
TEST_F(SimtBackward, WgmmaTmaChunkedAndFused) {
  for (std::string dtype : {"f16", "bf16"}) {
    GradCase c{37, 70, 24, dtype, "mean", true, 0.2};
    c.tile = std::string(kWgmmaNarrow) + ",tma=1";
    c.workspaceBytes = 37 * 4 + 9 * 70 * 6;
    checkCase(c);
    GradCase f{40, 75, 96, dtype, "mean", true, 0.3};
    f.tile = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=3,tma=1";
    // The fused op's per-row terms share the budget (an lse state per
    // 32-column tile): 11 rows, four chunks.
    f.workspaceBytes = 40 * 4 + 11 * (75 * 6 + 3 * 8);
    EXPECT_EQ(fusedChunking(f), chunksOfRows(4, 11));
    checkFused(f);
  }
  GradCase wide{45, 200, 136, "bf16", "sum", true, 0.1};
  wide.tile = "matmul=wgmma,block_cols=128,tma=1";
  checkCase(wide);
  checkFused(wide);
  // block_k 64 and V, D multiples of 8: dX reads dZ (K-major, the chunk's
  // rows of the workspace) and Wᵀ (MN-major: boxes of 64 columns of D) by
  // TMA too, over several chunks; D = 96 is one and a half 64-column boxes
  // of the 128-column gradient tile (the rest zero fill).
  for (std::string dtype : {"f16", "bf16"}) {
    GradCase dx{40, 200, 96, dtype, "mean", true, 0.2};
    dx.tile = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=3,tma=1";
    // C = 12 rows of 16-bit dZ: four chunks.
    dx.workspaceBytes = 40 * 4 + 12 * 200 * 2;
    EXPECT_EQ(chunking(dx), chunksOfRows(4, 12));
    std::map<std::string, std::vector<char>> mapped, copied;
    checkCase(dx, &mapped);
    checkFused(dx);
    // The swizzles move bytes, not arithmetic: the same bits as the
    // cp.async kernels of the same tile.
    GradCase ring = dx;
    ring.tile = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=3";
    checkCase(ring, &copied);
    for (const auto &[name, bytes] : copied)
      EXPECT_TRUE(bytes == mapped[name]) << name << " differs from the cp.async kernels' bits";
  }
  // D = 20: rows of 40 bytes cannot be encoded, so the same kernels take
  // their cp.async rings.
  GradCase odd{37, 83, 20, "bf16", "sum", true, 0.25};
  odd.tile = std::string(kWgmmaNarrow) + ",tma=1";
  checkCase(odd);
}

// tma=2: every tensor-core kernel of the backward (lce_bwd_dz, lce_fused_z,
// dX, dW) gets a producer warp that copies the k tiles by TMA while
// the consumers multiply; tma=3 a producer warpgroup that lends the two
// consumer warpgroups its registers around the sweeps. The bits are the
// cp.async kernels' (each wgmma reads the same operands in the same order).
TEST_F(SimtBackward, WgmmaWarpSpecializedChunkedAndFused) {
  for (const char *tile :
       {"matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=3",
        "matmul=wgmma,block_cols=64,block_k=64,stages=3"}) {
    GradCase ring{40, 200, 136, "bf16", "mean", true, 0.2};
    ring.tile = tile;
    ring.workspaceBytes = 40 * 4 + 12 * 200 * 2; // C = 12 rows of 16-bit dZ
    EXPECT_EQ(chunking(ring), chunksOfRows(4, 12));
    std::map<std::string, std::vector<char>> copied;
    checkCase(ring, &copied);
    const bool twoConsumers = !llvm::StringRef(tile).contains("block_rows=64");
    for (const char *mode : {",tma=2", ",tma=3"}) {
      if (llvm::StringRef(mode) == ",tma=3" && !twoConsumers)
        continue;
      GradCase ws = ring;
      ws.tile = std::string(tile) + mode;
      SCOPED_TRACE(ws.tile);
      std::map<std::string, std::vector<char>> specialized;
      checkCase(ws, &specialized);
      checkFused(ws);
      for (const auto &[name, bytes] : copied)
        EXPECT_TRUE(bytes == specialized[name])
            << name << " differs from the cp.async kernels' bits";
    }
  }
}

// cluster=2: the logits products (lce_bwd_dz, lce_fused_z) run in clusters
// of two row blocks of one column, which multicast its W tile, as
// lce_partial does in the forward; so do the gradient products dX and dW
// (128 gradient columns: each block multicasts one of the B tile's two
// MN-major 64-line boxes; 256: two of four). Row chunks of one row block
// (its pair holds no row) and of three (a padded fourth), 64 and 256 logit
// columns (halves of 32 and 128 W rows); dW over 200 and
// 130 vocabulary rows (a pair each), over vocabulary chunks of 100 (a
// padded pair); a producer warp and a producer warpgroup; maps the runtime
// cannot encode (D = 37: the clusters on the cp.async ring). The kernels
// that pair are those the lowering says (known_cluster_size); the same bits
// as the cp.async ring's, and fp64 and the CPU backend through checkCase.
TEST_F(SimtBackward, ClustersMulticastTheProductsSharedTiles) {
  const std::string tile = "matmul=wgmma,block_cols=64,block_k=64,stages=3";
  const std::string wide = "matmul=wgmma,block_cols=256,block_k=64,stages=3,grad_cols=256";
  // Row chunks of 16-bit storage also have the single chunk's dW
  // (lce_bwd_dw_single), clustered as lce_bwd_dw is.
  auto products = [](const GradCase &c) {
    std::set<std::string> names{"lce_bwd_dz", "lce_bwd_dx", "lce_bwd_dw"};
    if (c.strategy != "vocab_chunked")
      names.insert("lce_bwd_dw_single");
    return names;
  };
  GradCase small{40, 200, 136, "bf16", "mean", true, 0.2};
  small.workspaceBytes = 40 * 4 + 12 * 200 * 2; // C = 12 rows of 16-bit dZ
  GradCase rows{300, 130, 72, "f16", "sum", false, 0.1};
  GradCase vocab{70, 200, 96, "bf16", "mean", true, 0.2};
  vocab.strategy = "vocab_chunked";
  vocab.workspaceBytes = 2 * (70 * 4) + 100 * 70 * 4 * 2;
  for (GradCase ring : {small, rows, vocab}) {
    ring.tile = tile;
    std::map<std::string, std::vector<char>> copied;
    checkCase(ring, &copied);
    std::vector<std::string> pairTiles{tile + ",tma=2,cluster=2", tile + ",tma=3,cluster=2",
                                       wide + ",tma=3,cluster=2"};
    // A producer warp with two boxes a block (specializedProduct).
    if (ring.n == rows.n)
      pairTiles.push_back(tile + ",grad_cols=256,tma=2,cluster=2");
    for (const std::string &pairTile : pairTiles) {
      GradCase pairs = ring;
      pairs.tile = pairTile;
      SCOPED_TRACE(describe(pairs));
      EXPECT_EQ(clusteredKernels(pairs), products(pairs));
      std::map<std::string, std::vector<char>> clustered;
      checkCase(pairs, &clustered);
      checkFused(pairs);
      for (const auto &[name, bytes] : copied)
        EXPECT_TRUE(bytes == clustered[name]) << name << " differs from the cp.async kernels' bits";
    }
  }
  // Clusters of four on 256-column tiles (a quarter of each shared tile
  // per block: 64 W rows, one 64-line box): dX's 3 row blocks and dW's 2
  // vocabulary row blocks each padded to a cluster; vocabulary chunks.
  for (GradCase ring : {rows, vocab}) {
    ring.tile = wide + ",tma=3";
    std::map<std::string, std::vector<char>> copied;
    checkCase(ring, &copied);
    GradCase quads = ring;
    quads.tile = wide + ",tma=3,cluster=4";
    SCOPED_TRACE(describe(quads));
    EXPECT_EQ(clusteredKernels(quads, 4), products(quads));
    std::map<std::string, std::vector<char>> clustered;
    checkCase(quads, &clustered);
    checkFused(quads);
    for (const auto &[name, bytes] : copied)
      EXPECT_TRUE(bytes == clustered[name]) << name << " differs from the unclustered bits";
  }
  // 64 gradient columns (one box) pair only dZ; unaligned rows (D = 37)
  // encode no map, and the clusters run the cp.async ring.
  GradCase narrow = rows;
  narrow.tile = tile + ",grad_cols=64,tma=2,cluster=2";
  EXPECT_EQ(clusteredKernels(narrow), std::set<std::string>{"lce_bwd_dz"});
  GradCase odd{33, 150, 37, "f16", "sum", true, 0.1};
  for (const char *mode : {",tma=2,cluster=2", ",tma=3,cluster=2"}) {
    odd.tile = tile + mode;
    EXPECT_EQ(clusteredKernels(odd), products(odd));
    checkCase(odd);
  }
  // V = 300 (600-byte dZ rows: no dZ map, the cp.async ring): dW's three
  // vocabulary row blocks and a padding block past every line, which must
  // read nothing outside dZ.
  GradCase padded{40, 300, 72, "f16", "sum", true, 0.1};
  padded.tile = tile + ",tma=2,cluster=2";
  checkCase(padded);
}

// Clusters with persistent blocks or bands: the two blocks of a cluster
// multicast the B tile they share, so they take the tiles of one column
// block together, as groups of two row blocks (GpuSchedule::forEachTile).
// Persistent clusters sweep the groups (persistent=3: one cluster takes
// them all; 5: two clusters, uneven counts); banded ones take their group
// in band order (band=1: columns first everywhere). At N=150 in 64-row
// blocks a group is often half padding (a block past the rows, which must
// read nothing outside and store nothing), and grids sized for a full
// chunk run shorter ones (row chunks of 128 and 22 rows; vocabulary chunks
// of 64, 64, 64 and 8 columns). dZ, dX (128 gradient columns: a 64-line
// box each) and dW all pair up; the same bits as a block per tile without
// clusters, and fp64 and the CPU backend through checkCase.
TEST_F(SimtBackward, ClustersTakeTheirTilesTogetherPersistentOrBanded) {
  const std::string narrow = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,"
                             "stages=2,grad_cols=128,tma=2";
  for (const char *strategy : {"chunked", "vocab_chunked"}) {
    GradCase base{150, 200, 96, "bf16", "mean", true, 0.2};
    base.strategy = strategy;
    base.workspaceBytes =
        base.strategy == "vocab_chunked" ? 2 * (150 * 4 + 64 * 150 * 2) : 150 * 4 + 128 * 200 * 2;
    base.tile = narrow;
    ASSERT_EQ(chunksOf(base), base.strategy == "vocab_chunked" ? 4 : 2);
    std::map<std::string, std::vector<char>> perTile;
    checkCase(base, &perTile);
    std::set<std::string> products{"lce_bwd_dz", "lce_bwd_dx", "lce_bwd_dw"};
    if (base.strategy == "chunked")
      products.insert("lce_bwd_dw_single");
    for (const char *knobs : {",cluster=2,persistent=3", ",cluster=2,persistent=5",
                              ",cluster=2,band=1", ",cluster=2,persistent=5,band=25"}) {
      GradCase c = base;
      c.tile = narrow + knobs;
      SCOPED_TRACE(describe(c));
      EXPECT_EQ(clusteredKernels(c), products);
      std::map<std::string, std::vector<char>> grads;
      checkCase(c, &grads);
      for (const auto &[name, bytes] : perTile)
        EXPECT_TRUE(bytes == grads[name]) << name << " differs from a block per tile's bits";
    }
  }
  // The fused op's lce_fused_z, persistent in clusters of four (one
  // cluster: persistent=5 rounds down to whole clusters, at least one).
  GradCase fused{70, 200, 96, "bf16", "mean", true, 0.2};
  fused.tile = "matmul=wgmma,block_cols=256,block_k=64,stages=3,grad_cols=256,tma=3";
  std::map<std::string, std::vector<char>> perTile, swept;
  checkFused(fused, &perTile);
  fused.tile += ",cluster=4,persistent=5";
  GradCase fusedPlan = fused;
  fusedPlan.fused = true;
  EXPECT_EQ(
      clusteredKernels(fusedPlan, 4),
      (std::set<std::string>{"lce_fused_z", "lce_bwd_dx", "lce_bwd_dw", "lce_bwd_dw_single"}));
  checkFused(fused, &swept);
  for (const auto &[name, bytes] : perTile)
    EXPECT_TRUE(bytes == swept[name]) << name << " differs from a block per tile's bits";
}

// A persistent kernel's launch may run fewer blocks than its plan's grid:
// the launchers cap it at the blocks the device holds at once, in whole
// clusters (LaunchPlan::launchedBlocksX, the C API's $p$i_launch). The plan
// marks exactly the sweeping products persistent, with their cluster, and
// their bits do not change when one block or cluster, or six blocks (three
// clusters), sweep every tile — forward+backward and the fused op, row and
// vocabulary chunks.
TEST_F(SimtBackward, PersistentSweepsGiveTheSameBitsOnFewerBlocks) {
  const std::string narrow = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,"
                             "stages=2,grad_cols=128,tma=2";
  struct Knobs {
    const char *text;
    int64_t cluster;
  };
  for (const char *strategy : {"chunked", "vocab_chunked"})
    for (Knobs knobs : {Knobs{",persistent=132", 1}, Knobs{",cluster=2,persistent=132", 2}})
      for (bool fused : {false, true}) {
        GradCase c{150, 200, 96, "bf16", "mean", true, 0.2};
        c.strategy = strategy;
        c.tile = narrow + knobs.text;
        c.workspaceBytes =
            c.strategy == "vocab_chunked" ? 2 * (150 * 4 + 64 * 150 * 2) : 150 * 4 + 128 * 200 * 2;
        SCOPED_TRACE(describe(c) + (fused ? " fused" : ""));
        RandomLceInputs in;
        makeBiasedInputs(c, in);
        auto planned = lossAndGradients(c, in, fused);
        for (int64_t resident : {int64_t(1), int64_t(6)}) {
          // What the launchers do with `resident` co-resident blocks.
          const int64_t blocks = std::max<int64_t>(resident / knobs.cluster, 1) * knobs.cluster;
          std::set<std::string> capped;
          auto cap = [&](LaunchPlan &plan) {
            for (PlanKernel &k : plan.kernels) {
              if (!k.persistent)
                continue;
              EXPECT_EQ(k.cluster, knobs.cluster) << k.name;
              EXPECT_EQ(k.grid[1], "1") << k.name;
              k.grid[0] = "min(" + k.grid[0] + "," + std::to_string(blocks) + ")";
              capped.insert(k.name);
            }
          };
          auto swept = lossAndGradients(c, in, fused, cap);
          // (The fused op in vocabulary chunks takes the forward's
          // statistics, then the backward's dZ.)
          std::set<std::string> products{"lce_bwd_dx", "lce_bwd_dw"};
          products.insert(fused && c.strategy == "chunked" ? "lce_fused_z" : "lce_bwd_dz");
          for (const std::string &name : products)
            EXPECT_EQ(capped.count(name), 1u) << name << " is not marked persistent";
          for (const char *name : {"loss", "lse", "grad_x", "grad_w", "grad_bias"})
            EXPECT_TRUE(planned[name] == swept[name])
                << name << " differs on " << blocks << " block(s)";
        }
      }
}

// tma=3 with the gradient products in 128x256 tiles (wgmma m64n256, 128
// accumulators per consumer thread: the registers the producer lends),
// row and vocabulary chunks, persistent or not, and unaligned rows (D = 37:
// the consumers alone on the cp.async ring): checked against fp64 and the
// CPU backend by checkCase, and the same bits as the cp.async ring's.
TEST_F(SimtBackward, ProducerWarpgroupWideGradientTiles) {
  const std::string tile = "matmul=wgmma,block_cols=64,block_k=64,stages=3,grad_cols=256";
  for (const char *strategy : {"chunked", "vocab_chunked"}) {
    GradCase ring{40, 300, 136, "bf16", "mean", true, 0.2};
    ring.strategy = strategy;
    ring.tile = tile;
    ring.workspaceBytes =
        ring.strategy == "chunked" ? 40 * 4 + 12 * 300 * 6 : 2 * (40 * 4 + 64 * 40 * 2);
    std::map<std::string, std::vector<char>> copied;
    checkCase(ring, &copied);
    for (const char *knobs : {",tma=3", ",tma=3,persistent=3"}) {
      GradCase ws = ring;
      ws.tile = tile + knobs;
      SCOPED_TRACE(std::string(strategy) + " " + ws.tile);
      std::map<std::string, std::vector<char>> lent;
      checkCase(ws, &lent);
      for (const auto &[name, bytes] : copied)
        EXPECT_TRUE(bytes == lent[name]) << name << " differs from the cp.async kernels' bits";
    }
  }
  GradCase odd{33, 150, 37, "f16", "sum", true, 0.1};
  odd.tile = tile + ",tma=3";
  checkCase(odd);
}

// 128x256 logit tiles on the producer warpgroup (lce_bwd_dz's, and the
// fused op's lce_partial, whose whole tiles fold without column masks and
// ragged ones with them) in vocabulary chunks of 256 columns (the last one
// ragged): the backward and the fused op against fp64 and the CPU backend,
// and the same bits as the cp.async ring's (both rings fold the same way;
// KernelBits pins the masked fold's bits on whole tiles).
TEST_F(SimtBackward, WideLogitTilesOnTheProducerWarpgroup) {
  // Two splits of 300 columns: the fused op's lce_partial folds a whole
  // tile and a ragged one per split.
  const std::string tile = "matmul=wgmma,block_cols=256,block_k=64,stages=4,grad_cols=256,splits=2";
  for (bool fused : {false, true}) {
    GradCase ring{40, 600, 72, "bf16", "mean", true, 0.2};
    ring.strategy = "vocab_chunked";
    ring.fused = fused;
    ring.tile = tile;
    // Chunks of 256 columns (dZ and the f32 dX accumulator in the budget;
    // the fused op's row terms are 2 splits of 2 partials and the losses).
    ring.workspaceBytes = 40 * 4 * (fused ? 2 + 2 * 2 : 1) + 40 * 72 * 4 + 256 * 40 * 2;
    SCOPED_TRACE(std::string(fused ? "fused " : "backward ") + describe(ring));
    ASSERT_GT(chunking(ring).first, 2) << chunking(ring).second;
    std::map<std::string, std::vector<char>> copied, lent;
    fused ? checkFused(ring, &copied) : checkCase(ring, &copied);
    GradCase ws = ring;
    ws.tile = tile + ",tma=3";
    fused ? checkFused(ws, &lent) : checkCase(ws, &lent);
    for (const auto &[name, bytes] : copied)
      EXPECT_TRUE(bytes == lent[name]) << name << " differs from the cp.async kernels' bits";
  }
}

// tile persistent=P: the product kernels (lce_bwd_dz, lce_fused_z, dX, dW)
// launch at most P blocks, each taking the tiles blockIdx.x, + P, … (with
// tma=2 through one TMA ring). Each tile's product and epilogue are the
// ones its own block would form: the same bits, bias gradient included
// (the tiles of the first column own db, whichever block takes them).
TEST_F(SimtBackward, PersistentProductKernelsGiveTheSameBits) {
  const std::string narrow = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,"
                             "stages=3";
  for (const std::string &tile :
       {std::string("matmul=mma_sync"), narrow, narrow + ",tma=1", narrow + ",tma=2",
        std::string("matmul=wgmma,block_cols=64,block_k=64,stages=2,tma=2"),
        std::string("matmul=wgmma,block_cols=64,block_k=64,stages=2,tma=3"),
        std::string("matmul=wgmma,block_cols=128,block_k=64,stages=2,tma=2")}) {
    SCOPED_TRACE(tile);
    GradCase one{40, 200, 136, "bf16", "mean", true, 0.2};
    one.tile = tile;
    one.workspaceBytes = 40 * 4 + 12 * 200 * 2; // C = 12 rows of 16-bit dZ
    EXPECT_EQ(chunking(one), chunksOfRows(4, 12));
    std::map<std::string, std::vector<char>> perTile, swept;
    checkCase(one, &perTile);
    // 3 blocks: dZ's 7 tiles (one row block × 200/32 columns) are 3, 2 and
    // 2 per block, dW's 4 × 5 (64-row tiles) 7, 7 and 6.
    GradCase p = one;
    p.tile = tile + ",persistent=3";
    checkCase(p, &swept);
    checkFused(p);
    for (const auto &[name, bytes] : perTile)
      EXPECT_TRUE(bytes == swept[name]) << name << " differs from a block per tile's bits";
  }
  // A last chunk with fewer row blocks than a full one: chunks of C = 128
  // and 22 rows in 64-row tiles. The grid is sized from C (dX: 2 x 2 tiles
  // on 4 blocks), so in the last chunk blocks 2 and 3 are past its 2 tiles
  // and take none (an unsigned count would wrap and never end).
  GradCase one{150, 200, 136, "bf16", "mean", true, 0.2};
  one.tile = narrow + ",tma=2";
  one.workspaceBytes = 150 * 4 + 128 * 200 * 2;
  ASSERT_EQ(chunking(one), std::make_pair(int64_t{2}, int64_t{128}));
  std::map<std::string, std::vector<char>> perTile, swept;
  checkCase(one, &perTile);
  GradCase p = one;
  p.tile += ",persistent=4";
  checkCase(p, &swept);
  for (const auto &[name, bytes] : perTile)
    EXPECT_TRUE(bytes == swept[name]) << name << " differs from a block per tile's bits";
}

} // namespace

TEST_F(SimtBackward, Float64ComputesInFloat64) {
  // f64 storage: the GPU kernels (SIMT, exp2/log2 expanded as on the host,
  // fma.rn.f64) compute in f64 — loss, lse and gradients within f64
  // rounding of the fp64 reference and of the CPU backend's f64 kernels.
  for (std::string strategy : {"chunked", "recompute"})
    for (std::string reduction : {"mean", "none"}) {
      GradCase c{13, 71, 17, "f64", reduction};
      c.bias = true;
      c.ignored = 0.2;
      c.strategy = strategy;
      SCOPED_TRACE(describe(c));
      RandomLceOptions o;
      o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = "f64", o.reduction = reduction;
      o.bias = true, o.ignoredFraction = c.ignored, o.logitScale = 8.0;
      RandomLceInputs in;
      makeRandomLceInputs(o, in);
      const LceProblem &p = in.problem;
      std::map<std::string, HostBuffer> inputs = {
          {"x", {const_cast<void *>(p.x), "f64", c.n * c.d}},
          {"w", {const_cast<void *>(p.w), "f64", c.v * c.d}},
          {"bias", {const_cast<void *>(p.bias), "f64", c.v}},
          {"labels", {in.labels64.data(), "i64", c.n}}};
      std::vector<double> loss(reduction == "none" ? c.n : 1), lse(c.n);
      auto fwd = inputs;
      fwd["loss"] = {loss.data(), "f64", static_cast<int64_t>(loss.size())};
      fwd["lse"] = {lse.data(), "f64", c.n};
      runOnSimt(c, false, fwd);
      LceReference want = referenceLinearCrossEntropy(p);
      EXPECT_LE(relativeL2Error(lse.data(), "f64", want.lse), 1e-14) << "lse";
      EXPECT_LE(relativeL2Error(loss.data(), "f64",
                                reduction == "none" ? want.rowLoss
                                                    : std::vector<double>{want.loss}),
                1e-13)
          << "loss";

      std::vector<double> gradLoss(loss.size(), 0.75);
      for (size_t i = 0; i < gradLoss.size(); ++i)
        gradLoss[i] -= 0.1 * static_cast<double>(i % 7);
      std::vector<double> gx(c.n * c.d), gw(c.v * c.d), gb(c.v);
      auto bwd = inputs;
      bwd["lse"] = {lse.data(), "f64", c.n};
      bwd["grad_loss"] = {gradLoss.data(), "f64", static_cast<int64_t>(gradLoss.size())};
      bwd["grad_x"] = {gx.data(), "f64", c.n * c.d};
      bwd["grad_w"] = {gw.data(), "f64", c.v * c.d};
      bwd["grad_bias"] = {gb.data(), "f64", c.v};
      runOnSimt(c, true, bwd);
      LceGradReference ref = referenceLinearCrossEntropyGrad(p, gradLoss);
      EXPECT_LE(relativeL2Error(gx.data(), "f64", ref.gradX), 1e-13) << "grad_x";
      EXPECT_LE(relativeL2Error(gw.data(), "f64", ref.gradW), 1e-13) << "grad_w";
      EXPECT_LE(relativeL2Error(gb.data(), "f64", ref.gradBias), 1e-13) << "grad_bias";
      auto cpu = cpuGrads(c, bwd);
      auto asDouble = [](const std::vector<char> &bytes) {
        std::vector<double> v(bytes.size() / 8);
        std::memcpy(v.data(), bytes.data(), bytes.size());
        return v;
      };
      EXPECT_LE(relativeL2Error(gx.data(), "f64", asDouble(cpu["grad_x"])), 1e-13)
          << "grad_x vs CPU backend";
      EXPECT_LE(relativeL2Error(gw.data(), "f64", asDouble(cpu["grad_w"])), 1e-13)
          << "grad_w vs CPU backend";
    }
}

TEST_F(SimtBackward, AllDtypesAndReductions) {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string reduction : {"mean", "sum", "none"})
      checkCase({5, 37, 9, dtype, reduction, true, 0.2});
}

TEST_F(SimtBackward, ManyChunksAwkwardShapes) {
  // C = 2 rows per chunk: three chunks for N=5, the last one partial.
  GradCase c{5, 41, 13, "f16", "mean", true, 0.0};
  c.workspaceBytes = 5 * 4 + 2 * 41 * 4;
  EXPECT_EQ(chunking(c), chunksOfRows(3, 2));
  checkCase(c);
  checkCase({1, 1, 1, "f32"});
  checkCase({3, 70, 40, "bf16", "sum", false, 0.0, 256ll << 20,
             "block_rows=4,threads=64,splits=2"});
}

TEST_F(SimtBackward, OnlyOneGradientAndIgnoredRows) {
  GradCase onlyW{6, 30, 7, "f32", "mean", true, 0.5};
  onlyW.needsX = false;
  checkCase(onlyW);
  GradCase onlyX{6, 30, 7, "bf16", "none", false, 0.5};
  onlyX.needsW = false;
  checkCase(onlyX);
}

TEST_F(SimtBackward, RecomputeStrategy) {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string reduction : {"mean", "none"}) {
      GradCase c{5, 37, 9, dtype, reduction, true, 0.2};
      c.strategy = "recompute";
      checkCase(c);
    }
  GradCase tiny{1, 1, 1, "f32"};
  tiny.strategy = "recompute";
  checkCase(tiny);
  // More rows and columns than one tile of threads, odd D, one gradient each.
  GradCase rows{70, 45, 5, "bf16", "sum", true, 0.1, 256ll << 20,
                "block_rows=3,threads=32,splits=2"};
  rows.strategy = "recompute";
  checkCase(rows);
  GradCase onlyW = rows;
  onlyW.needsX = false;
  checkCase(onlyW);
  GradCase onlyX = rows;
  onlyX.needsW = false;
  checkCase(onlyX);
}

TEST_F(SimtBackward, FusedForwardBackward) {
  for (std::string dtype : {"f32", "bf16"})
    for (std::string reduction : {"mean", "sum"}) {
      GradCase c{7, 41, 9, dtype, reduction, true, 0.3};
      c.workspaceBytes = 7 * 4 + 3 * 41 * 4; // C = 3 rows: three chunks
      EXPECT_EQ(fusedChunking(c), chunksOfRows(3, 3));
      checkFused(c);
    }
}

// The fused op's row chunks on tensor-core tiles: lce_fused_z folds each
// tile's row statistics as it stores the raw logits (one state per row,
// column tile and warp column: "tile_<field>"), and lce_fused_lse merges
// those instead of reading the V raw logits of a row again. Against fp64 on
// tiles whose rows two warp columns share (mma.sync's 64x64: two states a
// tile) or one quad (wgmma from cp.async, in bands, from a producer warp in
// clusters, from a producer warpgroup over a persistent grid), with a ragged
// last column tile, a short last chunk, a bias and ignored rows; and lse and
// loss have the same bits whichever chunks, clusters or block order made the
// states (a state slot that depended on them, or a tile left out, fails).
TEST_F(SimtBackward, FusedRowChunksMergeEachTilesRowStatistics) {
  const std::string wide = "matmul=wgmma,block_cols=64,block_k=64,stages=3,grad_cols=256,tma=3";
  const std::string spec = "matmul=wgmma,block_cols=64,block_k=64,stages=2,tma=2";
  // Each tile, and the tile whose states it must reproduce bit for bit
  // (empty: none).
  const std::vector<std::pair<std::string, std::string>> tiles = {
      {"matmul=mma_sync", ""},
      // Four warp columns: four states a row per 128-column tile.
      {"matmul=mma_sync,block_rows=64,block_cols=128,threads=256", ""},
      {kWgmmaNarrow, ""},
      {"matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=2,tma=1,band=25",
       ""},
      {spec, ""},
      {spec + ",cluster=2", spec},
      {wide, ""},
      {wide + ",persistent=3", wide}};
  std::map<std::string, std::map<std::string, std::vector<char>>> whole;
  for (const auto &[tile, same] : tiles) {
    SCOPED_TRACE(tile);
    GradCase one{70, 200, 40, "bf16", "mean", true, 0.2};
    one.tile = tile;
    // f16 on the tiles whose states come from several warp columns.
    if (tile.rfind("matmul=mma_sync", 0) == 0)
      one.dtype = "f16";
    ASSERT_EQ(fusedChunking(one).first, 1);
    checkFused(one, &whole[tile]);
    // Three chunks of 30 or 31 rows (at most 13 states a row: 16-column
    // tiles), the last one short: each chunk's states at its own rows.
    GradCase several = one;
    several.workspaceBytes = 70 * 4 + 30 * (200 * 6 + 13 * 8);
    ASSERT_EQ(fusedChunking(several).first, 3);
    std::map<std::string, std::vector<char>> chunked;
    checkFused(several, &chunked);
    for (const char *name : {"lse", "loss"}) {
      EXPECT_TRUE(chunked[name] == whole[tile][name]) << name << " depends on the chunks";
      if (!same.empty())
        EXPECT_TRUE(whole[tile][name] == whole[same][name]) << name << " differs from " << same;
    }
  }
  // D = 0: every logit is its bias (the products run no k step).
  for (const std::string tile : {std::string("matmul=mma_sync"), std::string(kWgmmaNarrow)}) {
    GradCase bare{9, 45, 0, "bf16", "sum", true, 0.0, 256ll << 20, tile};
    checkFused(bare);
  }
}

// --- Tensor cores: every product of the backward on matmul = mma_sync -----
//
// The logits of the chunked and fused backward (and the forward's lse), dZ·W
// (W through ldmatrix.trans) and dZᵀ·X (both operands through .trans) come
// from the tensor-core strategy, on a 16-bit dZ prescaled by a power of two.
// The gradients meet fp64 and the CPU backend (checkCase) at shapes that are
// not multiples of any tile, with several chunks (dW accumulated across
// them), D and V that are not multiples of 8 (the plain-load staging).

const char *const kMmaOneWarp =
    "matmul=mma_sync,block_rows=32,block_cols=32,threads=32,block_k=16,stages=2";

TEST_F(SimtBackward, TensorCoreLogitsChunked) {
  for (std::string dtype : {"f16", "bf16"})
    for (std::string reduction : {"mean", "none"}) {
      GradCase c{37, 70, 24, dtype, reduction, true, 0.2};
      c.tile = kMmaOneWarp;
      checkCase(c);
    }
  // Three chunks of 13 rows, D not a multiple of 8 (the plain-load path),
  // V smaller than one block tile.
  GradCase chunks{37, 21, 13, "bf16", "sum", false, 0.0};
  chunks.tile = kMmaOneWarp;
  chunks.workspaceBytes = 37 * 4 + 13 * 21 * 2; // 16-bit dZ
  EXPECT_EQ(chunking(chunks), chunksOfRows(3, 13));
  checkCase(chunks);
  // The default 64x64x32 tile, 3 stages.
  GradCase wide{5, 130, 40, "f16", "mean", true, 0.0};
  wide.tile = "matmul=mma_sync";
  checkCase(wide);
}

TEST_F(SimtBackward, TensorCoreLogitsFused) {
  for (std::string dtype : {"f16", "bf16"}) {
    GradCase c{40, 75, 24, dtype, "mean", true, 0.3};
    c.tile = kMmaOneWarp;
    // The fused op's per-row terms share the budget (raw logits, 16-bit dZ
    // and an lse state per 32-column tile of the one warp): 11 rows, four
    // chunks.
    c.workspaceBytes = 40 * 4 + 11 * (75 * 6 + 3 * 8);
    EXPECT_EQ(fusedChunking(c), chunksOfRows(4, 11));
    checkFused(c);
  }
}

TEST_F(SimtBackward, TensorCoreGradientsOfManyChunksAndOddStrides) {
  // dW sums five chunks of 8 rows (its k range starts mid-tensor: the dZᵀ
  // and Xᵀ pieces are aligned to the chunk, not to 0); V = 83 and D = 20 are
  // not multiples of 8, so the strided operands take the plain-load path.
  for (std::string dtype : {"f16", "bf16"}) {
    GradCase c{37, 83, 20, dtype, "mean", true, 0.25};
    c.tile = kMmaOneWarp;
    c.workspaceBytes = 37 * 4 + 8 * 83 * 2 + 4;
    EXPECT_EQ(chunking(c), chunksOfRows(5, 8));
    checkCase(c);
  }
  // V and D multiples of 8: cp.async for every operand, both layouts.
  GradCase aligned{45, 96, 48, "bf16", "sum", true, 0.1};
  aligned.tile = kMmaOneWarp;
  aligned.workspaceBytes = 45 * 4 + 16 * 96 * 2 + 4;
  checkCase(aligned);
}

TEST_F(SimtBackward, TensorCoreGradientsKeepTinyF16Gradients) {
  // The tensor cores read dZ in the storage type. f16 flushes below 6e-8,
  // and dZ = g·p is g/V-sized: at g = 1e-4 and V = 4000 most of it would be
  // subnormal or zero, and the softmax part of dX and dW would be lost while
  // the gradients themselves are ordinary f16 numbers. dZ is stored divided
  // by the power of two above max |g| (lce_bwd_scale): the tensor-core
  // gradients stay within f16 rounding of the SIMT ones, which use f32 dZ.
  const int64_t n = 6, v = 4000, d = 16;
  RandomLceOptions o;
  o.n = n, o.v = v, o.d = d, o.dtype = "f16", o.reduction = "sum";
  RandomLceInputs in;
  makeRandomLceInputs(o, in);
  std::vector<float> lse(n), loss(1);
  std::vector<float> gradLoss(1, 1e-4f);
  auto grads = [&](const std::string &tile) {
    GradCase c{n, v, d, "f16", "sum"};
    c.tile = tile;
    std::map<std::string, HostBuffer> buffers = {
        {"x", {const_cast<void *>(in.problem.x), "f16", n * d}},
        {"w", {const_cast<void *>(in.problem.w), "f16", v * d}},
        {"labels", {in.labels64.data(), "i64", n}},
        {"lse", {lse.data(), "f32", n}}};
    auto fwd = buffers;
    fwd["loss"] = {loss.data(), "f32", 1};
    runOnSimt(c, false, fwd);
    std::pair<std::vector<char>, std::vector<char>> out{std::vector<char>(n * d * 2),
                                                        std::vector<char>(v * d * 2)};
    buffers["grad_loss"] = {gradLoss.data(), "f32", 1};
    buffers["grad_x"] = {out.first.data(), "f16", n * d};
    buffers["grad_w"] = {out.second.data(), "f16", v * d};
    runOnSimt(c, true, buffers);
    return out;
  };
  auto simt = grads("block_rows=2,threads=32,splits=3");
  auto mma = grads(kMmaOneWarp);
  ASSERT_FALSE(HasFailure());
  auto asDouble = [](const std::vector<char> &bytes) {
    std::vector<double> v(bytes.size() / 2);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = elementAsDouble(bytes.data(), "f16", static_cast<int64_t>(i));
    return v;
  };
  EXPECT_LE(relativeL2Error(mma.first.data(), "f16", asDouble(simt.first)), 1e-3) << "grad_x";
  EXPECT_LE(relativeL2Error(mma.second.data(), "f16", asDouble(simt.second)), 1e-3) << "grad_w";
}

TEST_F(SimtBackward, GradientOfLseOnEveryScheduleAndStrategy) {
  // A z-loss's gradient reaches lse: dZ gains a_r · softmax on the GPU
  // kernels of both SIMT strategies and on the tensor-core backward (whose
  // dZ scale G must then bound |g| + |a|), against fp64 and the CPU backend.
  for (std::string strategy : {"chunked", "vocab_chunked", "recompute"})
    for (std::string dtype : {"f32", "bf16"}) {
      GradCase c{29, 45, 17, dtype, "none", true, 0.25};
      c.strategy = strategy;
      c.gradLse = true;
      c.workspaceBytes = 29 * 4 + 9 * 45 * 4;
      checkCase(c);
    }
  for (std::string strategy : {"chunked", "vocab_chunked"})
    for (std::string reduction : {"mean", "none"}) {
      GradCase c{37, 70, 24, "f16", reduction, true, 0.2};
      c.tile = kMmaOneWarp;
      c.strategy = strategy;
      c.gradLse = true;
      c.workspaceBytes = 2 * (37 * 4 + 20 * 37 * 2);
      checkCase(c);
    }
}

// --- Vocabulary chunks (strategy vocab_chunked) ----------------------------
//
// Per chunk of C columns: every row's dZ of the chunk, dX += dZ · W[chunk]
// into an f32 accumulator, dW[chunk] = dZᵀ·X over all rows rounded once
// into grad_w (no V × D accumulator). Against fp64 and the CPU backend's
// vocabulary chunks, over several chunks with a short last one, on every
// matmul strategy. The budget holds grow, the dX accumulator (16-bit
// storage) and the dZ chunk, but gives the chunk at least half of it.

TEST_F(SimtBackward, VocabChunkedEveryDtypeAndReduction) {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string reduction : {"mean", "sum", "none"}) {
      GradCase c{7, 41, 9, dtype, reduction, true, 0.2};
      c.strategy = "vocab_chunked";
      // grow, the f32 dX accumulator of 16-bit storage, and 9 columns of
      // f32 dZ (SIMT products).
      c.workspaceBytes = 7 * 4 + (dtype == "f32" ? 0 : 7 * 9 * 4) + 9 * 7 * 4;
      ASSERT_EQ(chunksOf(c), 5) << "41 columns in chunks of 9";
      checkCase(c);
    }
  GradCase tiny{1, 1, 1, "f32"};
  tiny.strategy = "vocab_chunked";
  checkCase(tiny);
}

TEST_F(SimtBackward, VocabChunkedOneGradientAndTheBudget) {
  GradCase onlyW{6, 30, 7, "bf16", "mean", true, 0.5};
  onlyW.strategy = "vocab_chunked";
  onlyW.needsX = false;
  onlyW.workspaceBytes = 6 * 4 + 4 * 6 * 4;
  ASSERT_EQ(chunksOf(onlyW), 8);
  checkCase(onlyW);
  GradCase onlyX{6, 30, 7, "f16", "none", false, 0.5};
  onlyX.strategy = "vocab_chunked";
  onlyX.needsW = false;
  onlyX.workspaceBytes = 6 * 4 + 6 * 7 * 4 + 11 * 6 * 4;
  ASSERT_EQ(chunksOf(onlyX), 3);
  checkCase(onlyX);
  // An accumulator beyond half the budget stays outside it: the chunk gets
  // half the budget, not the few bytes the accumulator leaves.
  GradCase big{6, 30, 7, "bf16", "mean", true, 0.0};
  big.strategy = "vocab_chunked";
  big.workspaceBytes = 2 * (6 * 4 + 5 * 6 * 4);
  ASSERT_EQ(chunksOf(big), 6) << "30 columns in chunks of 5";
  checkCase(big);
  // Once 64 columns fit, chunks are whole multiples of 64 (TMA boxes).
  GradCase wide{4, 300, 8, "bf16", "mean", false, 0.0};
  wide.strategy = "vocab_chunked";
  wide.workspaceBytes = 4 * 4 + 4 * 8 * 4 + 100 * 4 * 4;
  ASSERT_EQ(chunksOf(wide), 5) << "300 columns in chunks of 64, not 100";
  checkCase(wide);
  // The chunks are evened out: 1000 columns with room for 640 are two of
  // 512 (488 in the last), not 640 and a short 360.
  GradCase even{4, 1000, 8, "bf16", "mean", false, 0.0};
  even.strategy = "vocab_chunked";
  even.workspaceBytes = 4 * 4 + 4 * 8 * 4 + 640 * 4 * 4;
  ASSERT_EQ(chunking(even), std::make_pair(int64_t{2}, int64_t{512}));
  checkCase(even);
}

TEST_F(SimtBackward, VocabChunkedTensorCores) {
  // mma.sync: dZ [N × C] prescaled to 16 bits; dX's k and dW's lines start
  // mid-tensor at the chunk (plain loads: C = 13 is no multiple of 8).
  for (std::string dtype : {"f16", "bf16"}) {
    GradCase c{37, 70, 24, dtype, "mean", true, 0.2};
    c.tile = kMmaOneWarp;
    c.strategy = "vocab_chunked";
    c.workspaceBytes = 2 * (37 * 4 + 13 * 37 * 2);
    ASSERT_EQ(chunksOf(c), 6);
    checkCase(c);
  }
  // wgmma over cp.async rings, then TMA (tma=1): 64-column chunks of V =
  // 200 (the last one 8 wide), D = 96 in 64-column boxes; the dZ map is
  // [N rows × C], and dX's boxes read k from the chunk's start.
  for (std::string tile :
       {std::string(kWgmmaNarrow), std::string("matmul=wgmma,block_cols=128"),
        std::string("matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,"
                    "stages=3,tma=1"),
        std::string("matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1")}) {
    SCOPED_TRACE(tile);
    GradCase w{40, 200, 96, "bf16", "sum", true, 0.2};
    w.tile = tile;
    w.strategy = "vocab_chunked";
    w.workspaceBytes = 2 * (40 * 4 + 64 * 40 * 2);
    ASSERT_EQ(chunksOf(w), 4);
    checkCase(w);
  }
  GradCase none{33, 150, 136, "f16", "none", false, 0.1};
  none.tile = "matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1";
  none.strategy = "vocab_chunked";
  none.workspaceBytes = 2 * (33 * 4 + 64 * 33 * 2);
  ASSERT_EQ(chunksOf(none), 3);
  checkCase(none);
}

TEST_F(SimtBackward, VocabChunkedWarpSpecializedAndPersistentGiveTheSameBits) {
  // The producer warp (tma=2: one TMA ring through a block's tiles) and
  // persistent products (a block sweeping tiles, the short last chunk's
  // surplus blocks taking none; dW's db by whichever block takes a first
  // column tile) against a block per tile on the cp.async ring: the same
  // products in the same order, so the same bits.
  const std::string tile =
      "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=2";
  GradCase w{40, 200, 96, "bf16", "sum", true, 0.2};
  w.strategy = "vocab_chunked";
  w.workspaceBytes = 2 * (40 * 4 + 64 * 40 * 2);
  w.tile = tile;
  ASSERT_EQ(chunksOf(w), 4);
  std::map<std::string, std::vector<char>> reference;
  checkCase(w, &reference);
  for (const char *knobs : {",tma=2", ",persistent=3", ",tma=2,persistent=3"}) {
    SCOPED_TRACE(knobs);
    GradCase other = w;
    other.tile = tile + knobs;
    std::map<std::string, std::vector<char>> grads;
    checkCase(other, &grads);
    for (const auto &[name, bytes] : reference)
      EXPECT_TRUE(bytes == grads[name]) << name << " differs from a block per tile's bits";
  }
}

// tile band=B: the tensor-core product kernels take their tiles in bands of
// row blocks (as many A slabs of BM rows × the depth in 16-bit as fit B KiB),
// each band column by column. Which block makes a tile changes, its bits do
// not. At N=150, D=96 (dZ's 64-row slabs of 12 KiB): band 1 is one row
// block per band (columns first everywhere), band 25 bands of two row
// blocks in lce_bwd_dz (over three in the vocabulary chunks: the last band
// short) and in the row chunks' dW (100-deep slabs); with persistent blocks
// and a producer warp, and through a producer warpgroup's sweep of one tile.
TEST_F(SimtBackward, BandedTileOrderGivesTheSameBits) {
  const std::string narrow =
      "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=2";
  const std::string lend = "matmul=wgmma,block_cols=64,block_k=64,stages=2";
  const std::vector<std::pair<std::string, std::string>> variants = {
      {narrow, ",band=1"},
      {narrow, ",band=25"},
      {narrow, ",tma=2,persistent=3,band=25"},
      {lend + ",tma=3", ",band=1"},
      {"matmul=mma_sync", ",band=1"}};
  for (const char *strategy : {"chunked", "vocab_chunked"}) {
    GradCase base{150, 200, 96, "bf16", "mean", true, 0.2};
    base.strategy = strategy;
    // Chunks whose grids outnumber the last chunk's tiles: 128 and 22 rows,
    // or 64, 64, 64 and 8 columns.
    base.workspaceBytes =
        base.strategy == "vocab_chunked" ? 2 * (150 * 4 + 64 * 150 * 2) : 150 * 4 + 128 * 200 * 2;
    base.tile = narrow; // (16-bit dZ, as every tile below)
    ASSERT_EQ(chunksOf(base), base.strategy == "vocab_chunked" ? 4 : 2);
    std::map<std::string, std::map<std::string, std::vector<char>>> rowsFirst;
    for (const auto &[tile, knobs] : variants) {
      SCOPED_TRACE(std::string(strategy) + " " + tile + knobs);
      GradCase plain = base, banded = base;
      plain.tile = tile;
      banded.tile = tile + knobs;
      if (!rowsFirst.count(tile))
        checkCase(plain, &rowsFirst[tile]);
      std::map<std::string, std::vector<char>> grads;
      checkCase(banded, &grads);
      for (const auto &[name, bytes] : rowsFirst[tile])
        EXPECT_TRUE(bytes == grads[name]) << name << " differs from row blocks first";
    }
  }
}

// The GPU's row chunks are evened out: a chunk kernel's grid is sized for
// C rows, so a short last chunk idled the blocks past its rows. As many
// chunks as the budget's largest chunk CMAX needs (each row chunk reads and
// writes the whole f32 dW accumulator: never more), each about N / chunks
// rows rounded up to whole tiles where CMAX allows.
TEST_F(SimtBackward, RowChunksAreEvenedOutToWholeTiles) {
  // Tensor cores (16-bit dZ, 64-row tiles): CMAX = 130 would cut 130, 130
  // and 40 rows (three row blocks per chunk); 128, 128 and 44 take two.
  GradCase tiles{300, 60, 40, "bf16", "mean", true, 0.1};
  tiles.tile = "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=2";
  tiles.workspaceBytes = 300 * 4 + 130 * 60 * 2;
  EXPECT_EQ(chunking(tiles), std::make_pair(int64_t{3}, int64_t{128}));
  checkCase(tiles);
  // SIMT (f32 dZ, 2-row tiles): CMAX = 65 → five chunks of 60, not 65 × 4 + 40.
  GradCase simt = tiles;
  simt.tile = "block_rows=2,threads=32,splits=3";
  EXPECT_EQ(chunking(simt), std::make_pair(int64_t{5}, int64_t{60}));
  checkCase(simt);
  checkFused(simt);
  // A problem that fits one chunk stays one chunk, tiles or not.
  GradCase one = tiles;
  one.workspaceBytes = 300 * 4 + 300 * 60 * 2;
  EXPECT_EQ(chunking(one), std::make_pair(int64_t{1}, int64_t{300}));
  // A CMAX below one tile keeps CMAX: 300 rows in chunks of at most 40.
  GradCase small = tiles;
  small.workspaceBytes = 300 * 4 + 40 * 60 * 2;
  EXPECT_EQ(chunking(small), std::make_pair(int64_t{8}, int64_t{40}));
}

// --- One chunk of every row: dW rounded straight into storage -----------
//
// Where a call's rows fit one chunk (SINGLE = 1) lce_bwd_dw_single sums dW
// and db over them and rounds them into grad_w and grad_bias: the f32
// accumulators are empty and lce_bwd_dw and lce_bwd_finish launch nothing.
// The bits are the accumulated path's: the same plan with SINGLE forced to
// 0 runs lce_bwd_dw into the accumulators (which it then sizes) and
// lce_bwd_finish. SIMT and tensor-core gradient products (bias, one column
// block of D and several; D = 0), backward and fused; several chunks never
// take the single path.
TEST_F(SimtBackward, OneChunkRoundsTheWeightGradientItself) {
  auto forceAccumulators = [](LaunchPlan &plan) {
    for (auto &[name, formula] : plan.derived)
      if (name == "SINGLE")
        formula = "0";
  };
  struct Shape {
    int64_t n, v, d;
  };
  for (const char *tile :
       {"block_rows=2,threads=32,splits=3", kWgmmaNarrow,
        "matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=2,tma=1"})
    for (Shape shape : {Shape{37, 70, 40}, Shape{9, 21, 0}})
      for (const char *dtype : {"bf16", "f16"})
        for (bool fused : {false, true}) {
          GradCase c{shape.n, shape.v, shape.d, dtype, "mean", true, 0.2};
          c.tile = tile;
          c.fused = fused;
          SCOPED_TRACE(describe(c) + (fused ? " fused" : ""));
          LaunchPlan plan = gradientPlan(c);
          ASSERT_FALSE(plan.kernels.empty());
          std::map<std::string, int64_t> symbols = symbolsOf(plan, c);
          ASSERT_EQ(symbols.count("SINGLE"), 1u);
          EXPECT_EQ(symbols["SINGLE"], 1) << "37 rows are one chunk";
          std::map<std::string, const PlanKernel *> kernels;
          for (const PlanKernel &k : plan.kernels)
            kernels[k.name] = &k;
          for (const char *name : {"lce_bwd_dw", "lce_bwd_dw_single", "lce_bwd_finish"})
            ASSERT_EQ(kernels.count(name), 1u) << name;
          EXPECT_EQ(evaluateFor(plan, c, kernels["lce_bwd_dw"]->grid[0]), 0);
          EXPECT_EQ(evaluateFor(plan, c, kernels["lce_bwd_finish"]->grid[0]), 0);
          EXPECT_GT(evaluateFor(plan, c, kernels["lce_bwd_dw_single"]->grid[0]), 0);
          for (const PlanWorkspace &w : plan.workspaces)
            if (w.name == "dw_acc" || w.name == "db_acc")
              EXPECT_EQ(evaluateFor(plan, c, w.count), 0) << w.name << " is not needed";
          LaunchPlan accumulated = plan;
          forceAccumulators(accumulated);
          for (const PlanWorkspace &w : accumulated.workspaces)
            if (w.name == "dw_acc")
              EXPECT_EQ(evaluateFor(accumulated, c, w.count), c.v * c.d);

          RandomLceInputs in;
          makeBiasedInputs(c, in);
          auto single = lossAndGradients(c, in, fused);
          auto reference = lossAndGradients(c, in, fused, forceAccumulators);
          for (const char *name : {"loss", "lse", "grad_x", "grad_w", "grad_bias"})
            EXPECT_TRUE(single[name] == reference[name]) << name << " differs in its bits";
          LceGradReference gref = referenceLinearCrossEntropyGrad(in.problem, {1.0});
          EXPECT_LE(relativeL2Error(single["grad_bias"].data(), c.dtype, gref.gradBias), 1e-2);
          if (c.d)
            EXPECT_LE(relativeL2Error(single["grad_w"].data(), c.dtype, gref.gradW), 1e-2);
        }
  // Several chunks: SINGLE = 0, the accumulators are sized, lce_bwd_dw and
  // lce_bwd_finish launch and lce_bwd_dw_single does not. At the edge: N =
  // CMAX rows are one chunk, CMAX + 1 two (C is evened out to whole tiles
  // within CMAX).
  GradCase several{300, 60, 40, "bf16", "mean", true};
  several.tile = kWgmmaNarrow;
  several.workspaceBytes = 300 * 4 + 130 * 60 * 2;
  ASSERT_GT(chunksOf(several), 1);
  LaunchPlan plan = gradientPlan(several);
  EXPECT_EQ(symbolsOf(plan, several)["SINGLE"], 0);
  for (const PlanWorkspace &w : plan.workspaces) {
    if (w.name == "dw_acc")
      EXPECT_EQ(evaluateFor(plan, several, w.count), several.v * several.d);
    if (w.name == "db_acc")
      EXPECT_EQ(evaluateFor(plan, several, w.count), several.v);
  }
  for (const PlanKernel &k : plan.kernels) {
    const int64_t blocks = evaluateFor(plan, several, k.grid[0]);
    if (k.name == "lce_bwd_dw" || k.name == "lce_bwd_finish")
      EXPECT_GT(blocks, 0) << k.name;
    if (k.name == "lce_bwd_dw_single")
      EXPECT_EQ(blocks, 0) << k.name;
  }
  // (CMAX grows as N shrinks: the budget holds N's row factors too.)
  std::set<int64_t> seen;
  for (int64_t n = 120; n <= 140; ++n) {
    GradCase edge = several;
    edge.n = n;
    std::map<std::string, int64_t> symbols = symbolsOf(plan, edge);
    const bool one = n <= symbols["CMAX"];
    EXPECT_EQ(symbols["SINGLE"], one ? 1 : 0) << "N = " << n << ", CMAX = " << symbols["CMAX"];
    EXPECT_EQ(symbols["C"] >= n, one) << "N = " << n << ", C = " << symbols["C"];
    seen.insert(symbols["SINGLE"]);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1})) << "the edge lies in N = 120 ... 140";
  // f32 storage sums in grad_w itself: no accumulators, no single kernel.
  GradCase f32 = several;
  f32.dtype = "f32";
  f32.tile = "block_rows=2,threads=32,splits=3";
  for (const PlanKernel &k : gradientPlan(f32).kernels)
    EXPECT_NE(k.name, "lce_bwd_dw_single");
}

TEST_F(SimtBackward, NoRowsWriteZeroGradients) {
  // Issue 16: N = 0 left grad_w and grad_bias as the caller allocated them
  // (torch.empty_like): per-chunk kernels ran zero times, and with f32
  // storage lce_bwd_dw is what writes grad_w (with 16-bit storage the finish
  // kernel rounded a never-zeroed accumulator). The sum over no rows is 0.
  for (std::string dtype : {"f32", "bf16"})
    for (std::string schedule :
         {"chunked", "vocab_chunked", "recompute", "fused", "fused_vocab_chunked"}) {
      GradCase c{0, 37, 9, dtype, "sum", true};
      c.strategy = schedule == "fused"                 ? "chunked"
                   : schedule == "fused_vocab_chunked" ? "vocab_chunked"
                                                       : schedule;
      SCOPED_TRACE(describe(c) + " " + schedule);
      LceGraphOptions g = options(c, true);
      g.fusedForward = schedule.rfind("fused", 0) == 0;
      auto graph = buildLinearCrossEntropyGraph(*context, g);
      ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
      LaunchPlan plan = lowerToKernels(**graph, c.tile);
      ASSERT_FALSE(HasFailure());
      int64_t es = dtype == "f32" ? 4 : 2;
      std::vector<char> x(16), w(c.v * c.d * es, 0), bias(c.v * es, 0), labels(16), lse(16);
      std::vector<float> loss(1, -1.0f), gradLoss(1, 1.0f);
      // Garbage (NaN bit patterns) where the gradients go: nothing may survive.
      std::vector<char> gx(16), gw(c.v * c.d * es, char(0xff)), gb(c.v * es, char(0xff));
      std::map<std::string, simt::SimtHostBuffer> buffers = {
          {"x", {x.data(), simt::elementTypeOf(dtype), 0}},
          {"w", {w.data(), simt::elementTypeOf(dtype), c.v * c.d}},
          {"bias", {bias.data(), simt::elementTypeOf(dtype), c.v}},
          {"labels", {labels.data(), simt::ElementType::I64, 0}},
          {"lse", {lse.data(), simt::ElementType::F32, 0}},
          {"grad_x", {gx.data(), simt::elementTypeOf(dtype), 0}},
          {"grad_w", {gw.data(), simt::elementTypeOf(dtype), c.v * c.d}},
          {"grad_bias", {gb.data(), simt::elementTypeOf(dtype), c.v}}};
      if (g.fusedForward)
        buffers["loss"] = {loss.data(), simt::ElementType::F32, 1};
      else
        buffers["grad_loss"] = {gradLoss.data(), simt::ElementType::F32, 1};
      llvm::Error err = simt::runPlanOnSimt(**graph, plan, buffers, {c.n, c.v, c.d});
      ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
      EXPECT_EQ(std::count(gw.begin(), gw.end(), 0), static_cast<long>(gw.size()))
          << "grad_w must be all zeros";
      EXPECT_EQ(std::count(gb.begin(), gb.end(), 0), static_cast<long>(gb.size()))
          << "grad_bias must be all zeros";
      if (g.fusedForward)
        EXPECT_EQ(loss[0], 0.0f) << "a sum over no rows";
    }
}

TEST_F(SimtBackward, NoFeaturesStillGiveTheBiasGradient) {
  // D = 0: the logits are the bias alone, dX and dW are empty, and db is the
  // column sums of dZ. The dW kernels have no column tiles then; the tiles
  // of the first column own db, so the grid keeps one column of tiles.
  for (std::string dtype : {"f32", "bf16"})
    for (std::string strategy : {"chunked", "vocab_chunked", "recompute"}) {
      GradCase c{5, 37, 0, dtype, "mean", true, 0.2};
      c.strategy = strategy;
      checkCase(c);
      GradCase several = c; // several chunks
      several.workspaceBytes = 5 * 4 + 2 * 37 * 4;
      checkCase(several);
    }
  // Tensor cores: mma.sync, and wgmma from the cp.async ring, from TMA,
  // from a producer warpgroup over a persistent grid, and in clusters (dW's
  // pairs run no k tile) (D = 0 encodes no map).
  for (std::string tile : {std::string(kMmaOneWarp), std::string(kWgmmaNarrow),
                           std::string("matmul=wgmma,block_cols=64,block_k=64,stages=3,tma=1"),
                           std::string("matmul=wgmma,block_cols=64,block_k=64,stages=3,"
                                       "grad_cols=256,tma=3,persistent=3"),
                           std::string("matmul=wgmma,block_cols=64,block_k=64,stages=3,tma=2,"
                                       "cluster=2")})
    for (std::string strategy : {"chunked", "vocab_chunked"}) {
      GradCase tensorCores{9, 45, 0, "bf16", "sum", true, 0.0, 256ll << 20, tile};
      tensorCores.strategy = strategy;
      checkCase(tensorCores);
    }
  for (std::string dtype : {"f32", "bf16"})
    for (std::string strategy : {"chunked", "vocab_chunked"}) {
      GradCase fused{7, 41, 0, dtype, "mean", true, 0.3};
      fused.strategy = strategy;
      fused.workspaceBytes = 7 * 4 + 3 * 41 * 4;
      checkFused(fused);
    }
}

// The fused op in vocabulary chunks (strategy vocab_chunked): the forward's
// statistics (lce_partial, lce_combine, lce_reduce), then the backward's
// vocabulary chunks for grad_loss = 1, with no V × D f32 accumulator.
// Against fp64, and bit for bit the forward followed by the backward of
// grad_loss = 1 in the same chunks: SIMT, mma.sync and wgmma (cp.async,
// TMA, a producer warpgroup over a persistent grid, bands), f32 and 16-bit
// storage, mean and sum, one gradient alone.
TEST_F(SimtBackward, FusedVocabChunkedIsTheForwardThenTheBackward) {
  struct Variant {
    std::string tile, dtype, reduction;
    bool needsX = true, needsW = true;
  };
  const std::string simt = "block_rows=2,threads=32,splits=3";
  const std::vector<Variant> variants = {
      {simt, "f32", "mean"},
      {simt, "bf16", "sum"},
      {kMmaOneWarp, "f16", "mean"},
      {kWgmmaNarrow, "bf16", "mean"},
      {"matmul=wgmma,block_cols=64,block_k=64,stages=3,tma=1", "bf16", "sum"},
      {"matmul=wgmma,block_cols=64,block_k=64,stages=3,grad_cols=256,tma=3,persistent=3", "bf16",
       "mean"},
      // The forward's statistics in clusters of two row blocks (multicast W).
      {"matmul=wgmma,block_cols=64,block_k=64,stages=2,tma=2,cluster=2", "bf16", "mean"},
      {"matmul=wgmma,block_rows=64,threads=128,block_cols=32,block_k=64,stages=2,tma=1,"
       "band=25",
       "f16", "mean"},
      {kWgmmaNarrow, "bf16", "mean", false, true},
      {kWgmmaNarrow, "bf16", "mean", true, false}};
  for (const Variant &variant : variants) {
    GradCase c{70, 200, 96, variant.dtype, variant.reduction, true, 0.2};
    c.tile = variant.tile;
    c.strategy = "vocab_chunked";
    c.needsX = variant.needsX;
    c.needsW = variant.needsW;
    // Two to four chunks (without dX, no N × D accumulator shares the
    // budget): the fused op's per-row terms (the row losses and partials)
    // leave the same chunks.
    c.workspaceBytes = 2 * (70 * 4) + (c.needsX ? 100 * 70 * 4 * 2 : 100 * 70 * 2);
    SCOPED_TRACE(describe(c));
    GradCase fused = c;
    fused.fused = true;
    const auto chunks = chunking(c);
    ASSERT_GT(chunks.first, 1) << chunks.second;
    ASSERT_EQ(chunking(fused), chunks);
    std::map<std::string, std::vector<char>> once;
    checkFused(c, &once);
    RandomLceInputs in;
    makeBiasedInputs(c, in);
    std::map<std::string, std::vector<char>> twice = lossAndGradients(c, in, /*fused=*/false);
    std::vector<std::string> compared = {"loss", "lse"};
    if (c.needsX)
      compared.push_back("grad_x");
    if (c.needsW)
      compared.insert(compared.end(), {"grad_w", "grad_bias"});
    for (const std::string &name : compared)
      EXPECT_TRUE(once[name] == twice[name])
          << name << " differs from the forward, then the backward";
  }
}
