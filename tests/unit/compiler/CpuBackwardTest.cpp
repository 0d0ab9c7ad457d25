//===- CpuBackwardTest.cpp - CPU gradients vs the fp64 reference ----------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/Reference.h"

#include "mlir/IR/MLIRContext.h"
#include "tests/unit/CpuCompileCache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

using namespace lossjit;

namespace {
struct GradCase {
  int64_t n, v, d;
  std::string dtype = "f32", strategy = "chunked", reduction = "mean";
  bool bias = false;
  double ignored = 0.0;
  double logitScale = 4.0;
  bool needsX = true, needsW = true;
  int64_t workspaceBytes = 256ll << 20;
  bool gradLse = false; ///< the backward also takes a gradient of lse.
};

std::string describe(const GradCase &c) {
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) + " D=" + std::to_string(c.d) +
         " " + c.dtype + " " + c.strategy + " " + c.reduction + (c.bias ? " bias" : "") +
         " ignored=" + std::to_string(c.ignored) + " ws=" + std::to_string(c.workspaceBytes);
}

/// A workspace budget that leaves `bytes` for the chunks after the host's
/// scratch reserve (WB/16 of small budgets, CpuSchedule::kScratchReserve),
/// so a test can size its chunks exactly.
int64_t budgetFor(int64_t bytes) { return bytes * 16 / 15 + 16; }

/// Storage bytes of one element.
int64_t bytesOf(const std::string &dtype) { return dtype == "f32" ? 4 : 2; }

struct Grads {
  std::vector<char> x, w, b;
};

class CpuBackward : public ::testing::Test {
protected:
  CpuBackward() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  /// The compiled op of `c`'s graph: the forward, or with `gradient` the
  /// backward. The graph depends on the options, never on the shape, so a
  /// test that runs one graph at several shapes compiles it once: the ops
  /// are kept by their graph's text (the fixture lives for one test).
  CpuCompiledOp *compile(const GradCase &c, bool gradient) {
    LceGraphOptions o;
    o.dtype = c.dtype;
    o.bias = c.bias;
    o.reduction = c.reduction;
    o.gradient = gradient;
    o.strategy = c.strategy;
    o.needsGradX = c.needsX;
    o.needsGradW = c.needsW;
    o.workspaceBytes = c.workspaceBytes;
    o.gradLse = gradient && c.gradLse;
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    if (!graph)
      return nullptr;
    std::string key;
    llvm::raw_string_ostream(key) << **graph;
    if (auto it = compiled.find(key); it != compiled.end())
      return it->second.get();
    auto op = lossjit::test::compileCpuCached(**graph);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    if (!op)
      return nullptr;
    return (compiled[key] = std::move(*op)).get();
  }

  /// Forward (for lse) then backward; returns the gradients.
  Grads run(const GradCase &c, const LceProblem &p, const std::vector<float> &gradLoss,
            unsigned threads = 0, const std::vector<float> *gradLse = nullptr) {
    auto fwd = compile(c, false);
    auto bwd = compile(c, true);
    Grads g;
    if (!fwd || !bwd)
      return g;
    std::vector<float> loss(c.reduction == "none" ? c.n : 1), lse(c.n);
    std::map<std::string, HostBuffer> in = {{"x", {const_cast<void *>(p.x), c.dtype, c.n * c.d}},
                                            {"w", {const_cast<void *>(p.w), c.dtype, c.v * c.d}},
                                            {"labels", {const_cast<void *>(p.labels), "i64", c.n}}};
    if (c.bias)
      in["bias"] = {const_cast<void *>(p.bias), c.dtype, c.v};
    auto fwdBuffers = in;
    fwdBuffers["loss"] = {loss.data(), "f32", static_cast<int64_t>(loss.size())};
    fwdBuffers["lse"] = {lse.data(), "f32", c.n};
    llvm::Error err = fwd->run(fwdBuffers, {c.n, c.v, c.d}, threads);
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    auto bwdBuffers = in;
    bwdBuffers["lse"] = {lse.data(), "f32", c.n};
    bwdBuffers["grad_loss"] = {const_cast<float *>(gradLoss.data()), "f32",
                               static_cast<int64_t>(gradLoss.size())};
    if (gradLse)
      bwdBuffers["grad_lse"] = {const_cast<float *>(gradLse->data()), "f32", c.n};
    int64_t es = bytesOf(c.dtype);
    if (c.needsX) {
      g.x.assign(c.n * c.d * es, 0x7f);
      bwdBuffers["grad_x"] = {g.x.data(), c.dtype, c.n * c.d};
    }
    if (c.needsW) {
      g.w.assign(c.v * c.d * es, 0x7f);
      bwdBuffers["grad_w"] = {g.w.data(), c.dtype, c.v * c.d};
      if (c.bias) {
        g.b.assign(c.v * es, 0x7f);
        bwdBuffers["grad_bias"] = {g.b.data(), c.dtype, c.v};
      }
    }
    err = bwd->run(bwdBuffers, {c.n, c.v, c.d}, threads);
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    return g;
  }

  static std::vector<float> gradLossFor(const GradCase &c) {
    if (c.reduction != "none")
      return {0.75f};
    std::vector<float> g(c.n);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (float &v : g)
      v = u(rng); // non-uniform per-row gradients
    return g;
  }

  /// Random inputs of `c`'s shape, dtype, bias, ignored rows and scale.
  static void inputsFor(const GradCase &c, RandomLceInputs &in) {
    RandomLceOptions o;
    o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = c.dtype, o.reduction = c.reduction;
    o.bias = c.bias, o.ignoredFraction = c.ignored, o.logitScale = c.logitScale;
    makeRandomLceInputs(o, in);
  }

  /// Checks one case against the fp64 gradient: relative L2 error ≤ 1e-4
  /// (f32 storage) or ≤ 1e-2 (f16/bf16, rounded once from f32).
  Grads checkCase(const GradCase &c) {
    SCOPED_TRACE(describe(c));
    RandomLceInputs in;
    inputsFor(c, in);
    std::vector<float> gradLoss = gradLossFor(c);
    Grads got = run(c, in.problem, gradLoss);
    std::vector<double> g64(gradLoss.begin(), gradLoss.end());
    LceGradReference ref = referenceLinearCrossEntropyGrad(in.problem, g64);
    double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
    if (c.needsX)
      EXPECT_LE(relativeL2Error(got.x.data(), c.dtype, ref.gradX), tol) << "grad_x";
    if (c.needsW) {
      EXPECT_LE(relativeL2Error(got.w.data(), c.dtype, ref.gradW), tol) << "grad_w";
      if (c.bias)
        EXPECT_LE(relativeL2Error(got.b.data(), c.dtype, ref.gradBias), tol) << "grad_bias";
    }
    return got;
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
  /// compile()'s ops by their graph's text (destroyed before the context).
  std::map<std::string, std::unique_ptr<CpuCompiledOp>> compiled;
};
} // namespace

TEST_F(CpuBackward, BothStrategiesAllDtypesAndReductions) {
  for (std::string strategy : {"chunked", "recompute"})
    for (std::string dtype : {"f32", "f16", "bf16"})
      for (std::string reduction : {"mean", "sum", "none"}) {
        checkCase({13, 301, 29, dtype, strategy, reduction, false, 0.2});
        checkCase({6, 97, 16, dtype, strategy, reduction, true});
      }
}

TEST_F(CpuBackward, GradientOfLseJoinsTheSamePass) {
  // A z-loss differentiates through lse: dZ gains a_r · softmax (∂lse/∂z),
  // for every row — ignored rows too, whose loss gradient is 0. Each host
  // schedule (row chunks, recompute, vocabulary chunks for 16-bit storage)
  // against fp64 with a scalar and a per-row loss gradient, in three row
  // chunks; once with only lse having a gradient.
  const std::pair<const char *, const char *> schedules[] = {
      {"f32", "chunked"}, {"f32", "recompute"}, {"bf16", "auto"}};
  for (auto [dtype, strategy] : schedules)
    for (std::string reduction : {"mean", "none"}) {
      GradCase c{23, 57, 19, dtype, strategy, reduction, true, 0.3};
      c.gradLse = true;
      c.workspaceBytes = 2 << 10; // 8-row chunks: three of them
      SCOPED_TRACE(describe(c));
      RandomLceInputs in;
      inputsFor(c, in);
      std::vector<float> gradLoss = gradLossFor(c), gradLse(c.n);
      for (int64_t r = 0; r < c.n; ++r)
        gradLse[r] = r % 5 == 0 ? 0.0f : 0.4f - 0.05f * static_cast<float>(r % 7);
      const bool lseOnly = std::string(strategy) == "chunked" && reduction == "none";
      if (lseOnly)
        std::fill(gradLoss.begin(), gradLoss.end(), 0.0f);
      Grads got = run(c, in.problem, gradLoss, 0, &gradLse);
      std::vector<double> g64(gradLoss.begin(), gradLoss.end());
      LceGradReference ref = referenceLinearCrossEntropyGrad(
          in.problem, g64, std::vector<double>(gradLse.begin(), gradLse.end()));
      double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
      EXPECT_LE(relativeL2Error(got.x.data(), c.dtype, ref.gradX), tol) << "grad_x";
      EXPECT_LE(relativeL2Error(got.w.data(), c.dtype, ref.gradW), tol) << "grad_w";
      EXPECT_LE(relativeL2Error(got.b.data(), c.dtype, ref.gradBias), tol) << "grad_bias";
      // The lse term is not negligible here: without it dX differs.
      LceGradReference plain = referenceLinearCrossEntropyGrad(in.problem, g64);
      EXPECT_GT(relativeL2Error(got.x.data(), c.dtype, plain.gradX), 0.05);
    }
}

TEST_F(CpuBackward, AwkwardShapes) {
  for (std::string strategy : {"chunked", "recompute"}) {
    checkCase({1, 1, 1, "f32", strategy});
    checkCase({1, 7, 3, "f32", strategy, "sum", true});
    checkCase({37, 5, 9, "f16", strategy, "none", true, 0.3});
  }
}

TEST_F(CpuBackward, AllRowsIgnoredGiveZeroGradients) {
  for (std::string strategy : {"chunked", "recompute"}) {
    GradCase c{5, 20, 8, "f32", strategy, "mean", true, 1.0};
    Grads g = checkCase(c);
    for (size_t i = 0; i < g.x.size() / 4; ++i)
      EXPECT_EQ(reinterpret_cast<float *>(g.x.data())[i], 0.0f);
    for (size_t i = 0; i < g.w.size() / 4; ++i)
      EXPECT_EQ(reinterpret_cast<float *>(g.w.data())[i], 0.0f);
  }
}

TEST_F(CpuBackward, ZeroRowsGiveZeroGradients) {
  // N = 0: no row ever reaches the accumulators, yet dW and db are outputs
  // (torch gives zeros). The gradient buffers start as garbage (0x7f bytes),
  // as an empty_like tensor may.
  for (std::string strategy : {"chunked", "vocab_chunked", "recompute", "auto"})
    for (std::string dtype : {"f32", "bf16"})
      for (std::string reduction : {"mean", "sum", "none"}) {
        GradCase c{0, 37, 11, dtype, strategy, reduction, true};
        SCOPED_TRACE(describe(c));
        RandomLceOptions o;
        o.n = 0, o.v = c.v, o.d = c.d, o.dtype = dtype, o.bias = true, o.reduction = reduction;
        RandomLceInputs in;
        makeRandomLceInputs(o, in);
        Grads g = run(c, in.problem, reduction == "none" ? std::vector<float>{}
                                                          : std::vector<float>{1.0f});
        ASSERT_EQ(g.w.size(), static_cast<size_t>(c.v * c.d * bytesOf(dtype)));
        EXPECT_EQ(g.w, std::vector<char>(g.w.size(), 0)) << "grad_w";
        EXPECT_EQ(g.b, std::vector<char>(g.b.size(), 0)) << "grad_bias";
        EXPECT_TRUE(g.x.empty());
      }
}

TEST_F(CpuBackward, LargeFp16LogitsStayFinite) {
  for (std::string strategy : {"chunked", "recompute"}) {
    GradCase c{12, 257, 32, "f16", strategy, "mean", false, 0.0, 1e4};
    Grads g = checkCase(c);
    for (size_t i = 0; i < g.w.size() / 2; ++i) {
      uint16_t h = reinterpret_cast<uint16_t *>(g.w.data())[i];
      ASSERT_NE(h & 0x7c00, 0x7c00) << "inf/NaN in grad_w at " << i;
    }
  }
}

TEST_F(CpuBackward, OnlyTheRequestedGradients) {
  for (std::string strategy : {"chunked", "recompute"}) {
    GradCase onlyX{9, 40, 12, "bf16", strategy};
    onlyX.needsW = false;
    checkCase(onlyX);
    GradCase onlyW{9, 40, 12, "bf16", strategy, "sum", true};
    onlyW.needsX = false;
    checkCase(onlyW);
  }
}

TEST_F(CpuBackward, ChunksStrategiesAndThreadsAgree) {
  // A tiny budget forces many chunks; every schedule must agree with the
  // one-chunk result within rounding, and each must be bitwise stable.
  GradCase one{40, 130, 24, "f32", "chunked", "mean", true, 0.1};
  GradCase many = one;
  many.workspaceBytes = budgetFor(130 * 4 * 3 + 40 * 4); // C = 3 rows per chunk
  GradCase recompute = one;
  recompute.strategy = "recompute";
  RandomLceOptions o;
  o.n = one.n, o.v = one.v, o.d = one.d, o.dtype = "f32", o.bias = true;
  o.ignoredFraction = 0.1;
  RandomLceInputs in;
  makeRandomLceInputs(o, in);
  std::vector<float> g = {1.0f};
  Grads a = run(one, in.problem, g, 2), b = run(many, in.problem, g, 2),
        r = run(recompute, in.problem, g, 2);
  auto close = [](const std::vector<char> &p, const std::vector<char> &q) {
    std::vector<double> ref(p.size() / 4);
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] = reinterpret_cast<const float *>(p.data())[i];
    return relativeL2Error(q.data(), "f32", ref);
  };
  EXPECT_LE(close(a.w, b.w), 1e-6);
  EXPECT_LE(close(a.x, b.x), 1e-6);
  EXPECT_LE(close(a.w, r.w), 1e-5);
  EXPECT_LE(close(a.b, r.b), 1e-5);
  for (const GradCase &c : {one, many, recompute}) {
    Grads first = run(c, in.problem, g, 2), second = run(c, in.problem, g, 1);
    EXPECT_EQ(first.x, second.x) << describe(c);
    EXPECT_EQ(first.w, second.w) << describe(c);
    EXPECT_EQ(first.b, second.b) << describe(c);
  }
}

TEST_F(CpuBackward, VocabularyChunksGiveTheRowChunksBits) {
  // 16-bit storage with strategy auto chunks the vocabulary (no V×D f32 dW
  // accumulator); explicit chunked chunks the rows. Each element sums its
  // terms in the same order either way, so the gradients are the same bits
  // — with several chunks of each kind, and for per-row grad_loss.
  for (std::string dtype : {"bf16", "f16"})
    for (std::string reduction : {"mean", "none"}) {
      GradCase rows{37, 149, 29, dtype, "chunked", reduction, true, 0.15};
      rows.workspaceBytes = budgetFor(149 * 4 * 5 + 37 * 4); // 5 rows per chunk
      GradCase vocab = rows;
      vocab.strategy = "auto";
      vocab.workspaceBytes = budgetFor(37 * 4 + 37 * 29 * 4 + 11 * (37 + 29) * 4); // 11 columns
      SCOPED_TRACE(describe(vocab));
      RandomLceOptions o;
      o.n = rows.n, o.v = rows.v, o.d = rows.d, o.dtype = dtype, o.bias = true;
      o.reduction = reduction, o.ignoredFraction = 0.15;
      RandomLceInputs in;
      makeRandomLceInputs(o, in);
      std::vector<float> g = gradLossFor(rows);
      Grads a = run(rows, in.problem, g), b = run(vocab, in.problem, g);
      EXPECT_EQ(a.x, b.x) << "grad_x";
      EXPECT_EQ(a.w, b.w) << "grad_w";
      EXPECT_EQ(a.b, b.b) << "grad_bias";
      // And the vocabulary-chunked gradients are right, not only equal.
      LceGradReference ref =
          referenceLinearCrossEntropyGrad(in.problem, std::vector<double>(g.begin(), g.end()));
      EXPECT_LE(relativeL2Error(b.w.data(), dtype, ref.gradW), 1e-2);
      EXPECT_LE(relativeL2Error(b.x.data(), dtype, ref.gradX), 1e-2);
    }
}

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

/// Peak resident set (VmHWM) in bytes; `reset` clears it first.
int64_t peakRss(bool reset) {
  if (reset) {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
  }
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  return -1;
}
} // namespace

TEST_F(CpuBackward, ExtraMemoryStaysWithinTheBudget) {
  // N·V·4 = 1 GiB would be the logits of this shape; the chunked backward
  // must stay within its 64 MiB workspace budget (plus O(N + V)).
  const int64_t n = 8192, v = 32768, d = 8, budget = 64ll << 20;
  GradCase c{n, v, d, "f32", "chunked", "mean"};
  c.workspaceBytes = budget;
  RandomLceOptions o;
  o.n = n, o.v = v, o.d = d, o.dtype = "f32";
  RandomLceInputs in;
  makeRandomLceInputs(o, in);
  auto fwd = compile(c, false);
  auto bwd = compile(c, true);
  ASSERT_TRUE(fwd && bwd);
  std::vector<float> loss(1), lse(n), gx(n * d), gw(v * d), gradLoss = {1.0f};
  std::map<std::string, HostBuffer> buffers = {
      {"x", {const_cast<void *>(in.problem.x), "f32", n * d}},
      {"w", {const_cast<void *>(in.problem.w), "f32", v * d}},
      {"labels", {in.labels64.data(), "i64", n}}};
  auto fwdBuffers = buffers;
  fwdBuffers["loss"] = {loss.data(), "f32", 1};
  fwdBuffers["lse"] = {lse.data(), "f32", n};
  ASSERT_FALSE(static_cast<bool>(fwd->run(fwdBuffers, {n, v, d})));
  buffers["lse"] = {lse.data(), "f32", n};
  buffers["grad_loss"] = {gradLoss.data(), "f32", 1};
  buffers["grad_x"] = {gx.data(), "f32", n * d};
  buffers["grad_w"] = {gw.data(), "f32", v * d};
  int64_t before = peakRss(true);
  ASSERT_GT(before, 0);
  llvm::Error err = bwd->run(buffers, {n, v, d});
  ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  int64_t extra = peakRss(false) - before;
  // Thread stacks and allocator slack are a few MiB at most.
  int64_t bound = budget + (8ll << 20);
  // Under AddressSanitizer (scripts/sanitize.sh) every byte the run touches
  // has 1/8 of a byte of shadow memory, resident as well: the same bound on
  // the memory lossjit uses is 9/8 of it in RSS.
  if (kAddressSanitizer)
    bound += bound / 8;
  EXPECT_LE(extra, bound) << "extra peak RSS " << (extra >> 20) << " MiB";
  EXPECT_GT(extra, 0);
  for (float value : gw)
    ASSERT_TRUE(std::isfinite(value));
}

TEST_F(CpuBackward, FusedForwardBackwardInOnePass) {
  // loss, lse and the gradients of grad_loss = 1 from one chunked pass; a
  // tiny budget forces several chunks. Checked against fp64 and against the
  // separate forward + backward. Both schedules: auto's (row chunks for f32,
  // vocabulary chunks for 16-bit storage) and the other one the strategy
  // asks for.
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string reduction : {"mean", "sum"})
      for (std::string strategy : {"auto", dtype == "f32" ? "vocab_chunked" : "chunked"}) {
        GradCase c{23, 67, 11, dtype, "chunked", reduction, true, 0.2};
        c.workspaceBytes = budgetFor(23 * 4 + 5 * 67 * 4); // C = 5 rows per chunk
        SCOPED_TRACE(describe(c) + " fused " + strategy);
        RandomLceOptions o;
        o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = dtype, o.reduction = reduction;
        o.bias = true, o.ignoredFraction = c.ignored;
        RandomLceInputs in;
        makeRandomLceInputs(o, in);
        LceGraphOptions g;
        g.dtype = dtype, g.bias = true, g.reduction = reduction, g.gradient = true;
        g.fusedForward = true, g.workspaceBytes = c.workspaceBytes, g.strategy = strategy;
        auto graph = buildLinearCrossEntropyGraph(*context, g);
        ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
        auto op = lossjit::test::compileCpuCached(**graph);
        ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
        int64_t es = bytesOf(dtype);
        std::vector<float> loss(1), lse(c.n);
        std::vector<char> gx(c.n * c.d * es), gw(c.v * c.d * es), gb(c.v * es);
        std::map<std::string, HostBuffer> buffers = {
            {"x", {const_cast<void *>(in.problem.x), dtype, c.n * c.d}},
            {"w", {const_cast<void *>(in.problem.w), dtype, c.v * c.d}},
            {"bias", {const_cast<void *>(in.problem.bias), dtype, c.v}},
            {"labels", {in.labels64.data(), "i64", c.n}},
            {"loss", {loss.data(), "f32", 1}},
            {"lse", {lse.data(), "f32", c.n}},
            {"grad_x", {gx.data(), dtype, c.n * c.d}},
            {"grad_w", {gw.data(), dtype, c.v * c.d}},
            {"grad_bias", {gb.data(), dtype, c.v}}};
        llvm::Error err = (*op)->run(buffers, {c.n, c.v, c.d});
        ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
        LceReference ref = referenceLinearCrossEntropy(in.problem);
        EXPECT_LE(std::fabs(loss[0] - ref.loss), 1e-4 * std::fabs(ref.loss)) << "loss";
        for (int64_t i = 0; i < c.n; ++i)
          EXPECT_LE(std::fabs(lse[i] - ref.lse[i]), 1e-4 * std::fabs(ref.lse[i]) + 1e-6);
        LceGradReference gref = referenceLinearCrossEntropyGrad(in.problem, {1.0});
        double tol = dtype == "f32" ? 1e-4 : 1e-2;
        EXPECT_LE(relativeL2Error(gx.data(), dtype, gref.gradX), tol) << "grad_x";
        EXPECT_LE(relativeL2Error(gw.data(), dtype, gref.gradW), tol) << "grad_w";
        EXPECT_LE(relativeL2Error(gb.data(), dtype, gref.gradBias), tol) << "grad_bias";
        // The separate backward at grad_loss = 1 agrees within rounding.
        Grads separate = run(c, in.problem, {1.0f});
        auto asDouble = [&](const std::vector<char> &bytes) {
          std::vector<double> out(bytes.size() / es);
          for (size_t i = 0; i < out.size(); ++i)
            out[i] = elementAsDouble(bytes.data(), dtype, static_cast<int64_t>(i));
          return out;
        };
        EXPECT_LE(relativeL2Error(gw.data(), dtype, asDouble(separate.w)), tol);
        // Bitwise stable across runs and thread counts.
        std::vector<char> gw2(gw.size());
        buffers["grad_w"].data = gw2.data();
        err = (*op)->run(buffers, {c.n, c.v, c.d}, 1);
        ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
        EXPECT_EQ(gw, gw2);
      }
}

TEST_F(CpuBackward, FusedForwardBackwardRejectsNoneAndRecompute) {
  LceGraphOptions g;
  g.reduction = "none", g.gradient = true, g.fusedForward = true;
  auto graph = buildLinearCrossEntropyGraph(*context, g);
  ASSERT_FALSE(static_cast<bool>(graph));
  EXPECT_EQ(llvm::toString(graph.takeError()),
            "the fused forward+backward needs reduction mean or sum (with none every "
            "row has its own loss gradient)");
  g.reduction = "mean", g.strategy = "recompute";
  graph = buildLinearCrossEntropyGraph(*context, g);
  ASSERT_FALSE(static_cast<bool>(graph));
  EXPECT_EQ(llvm::toString(graph.takeError()),
            "strategy recompute does not apply to the fused forward+backward (it forms each "
            "logit tile once per chunk): use auto, chunked or vocab_chunked");
}

TEST_F(CpuBackward, PackedBlocksKeepTheOrderOfEverySum) {
  // The packed dX and dW (CpuVector::accumulatePacked) block k, the
  // columns and the rows of A, and run the tiles at the edges of M and N on
  // a padded copy; none of it may move a bit. The recompute schedule sums
  // the same terms in the same order without any blocking (one rank-one
  // update per vocabulary column or row), so every schedule must give its
  // bits. Shapes: D = 2100 takes two column blocks (2048 + 52) and k blocks
  // of 128; V = 613 and N = 83 leave partial register tiles, row blocks and
  // k blocks everywhere; several row and vocabulary chunks.
  for (std::string dtype : {"f32", "bf16"}) {
    GradCase recompute{83, 613, 2100, dtype, "recompute", "mean", true, 0.1};
    GradCase rows = recompute;
    rows.strategy = "chunked";
    rows.workspaceBytes = budgetFor(613 * 4 * 29 + 83 * 4); // 29 rows per chunk
    GradCase vocab = recompute;
    vocab.strategy = "auto";
    vocab.workspaceBytes = budgetFor(83 * 4 + 83 * 2100 * 4 + 257 * (83 + 2100) * 4); // 257 columns
    SCOPED_TRACE(dtype);
    RandomLceInputs in;
    inputsFor(recompute, in);
    std::vector<float> g = gradLossFor(recompute);
    Grads want = run(recompute, in.problem, g, 2);
    LceGradReference ref =
        referenceLinearCrossEntropyGrad(in.problem, std::vector<double>(g.begin(), g.end()));
    double tol = dtype == "f32" ? 1e-4 : 1e-2;
    EXPECT_LE(relativeL2Error(want.x.data(), dtype, ref.gradX), tol);
    EXPECT_LE(relativeL2Error(want.w.data(), dtype, ref.gradW), tol);
    for (const GradCase &c : {rows, vocab}) {
      if (c.strategy == "auto" && dtype == "f32")
        continue; // f32 storage chunks the rows with strategy auto too
      SCOPED_TRACE(describe(c));
      for (unsigned threads : {1u, 2u}) {
        Grads got = run(c, in.problem, g, threads);
        EXPECT_EQ(got.x, want.x) << "grad_x, " << threads << " threads";
        EXPECT_EQ(got.w, want.w) << "grad_w, " << threads << " threads";
        EXPECT_EQ(got.b, want.b) << "grad_bias, " << threads << " threads";
      }
    }
  }
}

TEST_F(CpuBackward, RowsWiderThan8192) {
  // D = 8200: the logits no longer fit the packed W tile (64 columns × D
  // f32 on the stack) and the packed products take five column blocks with
  // k blocks of 128; 16-bit x is widened 24 rows per panel. D = 40000: six
  // widened rows per panel, fewer than a register block. Right against
  // fp64, the same bits as recompute.
  for (int64_t d : {8200, 40000})
    for (std::string dtype : {"f32", "bf16"}) {
      GradCase recompute{11, 45, d, dtype, "recompute", "sum", true, 0.1};
      GradCase chunked = recompute;
      chunked.strategy = dtype == "f32" ? "chunked" : "auto";
      Grads want = checkCase(recompute), got = checkCase(chunked);
      EXPECT_EQ(got.x, want.x) << dtype << " grad_x";
      EXPECT_EQ(got.w, want.w) << dtype << " grad_w";
      EXPECT_EQ(got.b, want.b) << dtype << " grad_bias";
    }
}
