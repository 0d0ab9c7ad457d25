//===- CpuBackendTest.cpp - CPU backend numerics vs the fp64 reference ----===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "runtime/KernelCache.h"
#include "testing/reference/Reference.h"

#include "llvm/Support/FileSystem.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "tests/unit/CpuCompileCache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace lossjit;

namespace {
struct Case {
  int64_t n, v, d;
  std::string dtype = "f16", labelType = "i64", reduction = "mean";
  bool bias = false;
  double ignored = 0.0;
  double logitScale = 4.0;
  uint64_t seed = 7;
};

std::string describe(const Case &c) {
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) +
         " D=" + std::to_string(c.d) + " " + c.dtype + " " + c.labelType + " " +
         c.reduction + (c.bias ? " bias" : "") + " ignored=" + std::to_string(c.ignored) +
         " scale=" + std::to_string(c.logitScale);
}

/// Outputs of one run.
struct Outputs {
  std::vector<float> loss, lse;
};

class CpuBackend : public ::testing::Test {
protected:
  CpuBackend() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  std::unique_ptr<CpuCompiledOp> compile(const Case &c) {
    LceGraphOptions o;
    o.dtype = c.dtype;
    o.labelType = c.labelType;
    o.bias = c.bias;
    o.reduction = c.reduction;
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    auto op = lossjit::test::compileCpuCached(**graph);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    return std::move(*op);
  }

  static Outputs run(const CpuCompiledOp &op, const LceProblem &p, unsigned threads) {
    Outputs out;
    out.loss.assign(p.reduction == "none" ? p.n : 1, -1.0f);
    out.lse.assign(p.n, -1.0f);
    int64_t es = p.dtype == "f32" ? 4 : 2;
    (void)es;
    std::map<std::string, HostBuffer> buffers = {
        {"x", {const_cast<void *>(p.x), p.dtype, p.n * p.d}},
        {"w", {const_cast<void *>(p.w), p.dtype, p.v * p.d}},
        {"labels", {const_cast<void *>(p.labels), p.labelType, p.n}},
        {"loss", {out.loss.data(), "f32", static_cast<int64_t>(out.loss.size())}},
        {"lse", {out.lse.data(), "f32", p.n}},
    };
    if (p.bias)
      buffers["bias"] = {const_cast<void *>(p.bias), p.dtype, p.v};
    llvm::Error err = op.run(buffers, {p.n, p.v, p.d}, threads);
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    return out;
  }

  /// Checks one case against fp64: lse and mean/sum loss with relative error
  /// ≤ 1e-4; per-row losses (none) relative to max(|loss|, |lse|), the size
  /// of the two terms whose difference a row loss is.
  void checkCase(const Case &c) {
    SCOPED_TRACE(describe(c));
    RandomLceOptions o;
    o.n = c.n, o.v = c.v, o.d = c.d;
    o.dtype = c.dtype, o.labelType = c.labelType, o.reduction = c.reduction;
    o.bias = c.bias, o.ignoredFraction = c.ignored, o.logitScale = c.logitScale;
    o.seed = c.seed;
    RandomLceInputs in;
    makeRandomLceInputs(o, in);
    auto op = compile(c);
    ASSERT_TRUE(op);
    Outputs got = run(*op, in.problem, 0);
    LceReference ref = referenceLinearCrossEntropy(in.problem);
    for (int64_t i = 0; i < c.n; ++i)
      EXPECT_LE(std::fabs(got.lse[i] - ref.lse[i]), 1e-4 * std::fabs(ref.lse[i]) + 1e-6)
          << "lse row " << i << " got " << got.lse[i] << " want " << ref.lse[i];
    if (c.reduction == "none") {
      for (int64_t i = 0; i < c.n; ++i)
        EXPECT_LE(std::fabs(got.loss[i] - ref.rowLoss[i]),
                  1e-4 * std::max(std::fabs(ref.rowLoss[i]), std::fabs(ref.lse[i])) + 1e-6)
            << "loss row " << i << " got " << got.loss[i] << " want " << ref.rowLoss[i];
      return;
    }
    if (std::isnan(ref.loss)) {
      EXPECT_TRUE(std::isnan(got.loss[0])) << "want NaN (no counted rows), got " << got.loss[0];
      return;
    }
    EXPECT_LE(std::fabs(got.loss[0] - ref.loss), 1e-4 * std::fabs(ref.loss) + 1e-6)
        << "loss got " << got.loss[0] << " want " << ref.loss;
    // Determinism: another run, and a different thread count, give the same bits.
    Outputs again = run(*op, in.problem, 1);
    EXPECT_EQ(0, std::memcmp(got.loss.data(), again.loss.data(), got.loss.size() * 4));
    EXPECT_EQ(0, std::memcmp(got.lse.data(), again.lse.data(), got.lse.size() * 4));
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};
} // namespace

TEST_F(CpuBackend, AwkwardShapesAllStorageTypes) {
  for (std::string dtype : {"f16", "bf16", "f32"}) {
    checkCase({1, 1, 1, dtype});                    // N=1, V=1
    checkCase({1, 301, 29, dtype});                 // N=1, odd D
    checkCase({7, 1000, 17, dtype, "i32"});         // V not a multiple of any tile
    checkCase({70, 129, 64, dtype, "i64", "sum"});  // more rows than one thread's share
    checkCase({9, 33, 13, dtype, "i64", "none", true, 0.3});
  }
}

// The forward folds each row's logits in groups of RowStats::kGroupLanes
// lanes: a group may cross the end of the vocabulary (V = 37: 16 + 16 + 5)
// or of a vocabulary tile (20 columns: 16 + 4 per tile), and its lanes may
// be −inf (a −inf bias), all of them −inf, or NaN.
TEST_F(CpuBackend, LogitGroupsMaskTheirTailAndKeepSpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t vocabTile : {64, 20}) {
    SCOPED_TRACE("vocab_tile=" + std::to_string(vocabTile));
    CpuTileConfig tile;
    tile.vocabTile = vocabTile;
    Case c{4, 37, 5, "f32", "i64", "none", true};
    LceGraphOptions o;
    o.dtype = c.dtype, o.bias = true, o.reduction = c.reduction;
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    auto op = lossjit::test::compileCpuCached(**graph, tile);
    ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());

    std::vector<float> x(c.n * c.d), w(c.v * c.d), bias(c.v);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i)));
    for (int64_t j = 0; j < c.v; ++j)
      bias[j] = static_cast<float>(0.1 * static_cast<double>(j % 7));
    bias[3] = bias[20] = bias[36] = -static_cast<float>(inf); // inside groups and the tail
    x[2 * c.d + 1] = std::numeric_limits<float>::quiet_NaN(); // row 2: NaN logits
    std::vector<int64_t> labels = {0, 36, 5, 3};
    LceProblem p;
    p.x = x.data(), p.w = w.data(), p.bias = bias.data(), p.labels = labels.data();
    p.dtype = c.dtype, p.n = c.n, p.v = c.v, p.d = c.d, p.reduction = c.reduction;
    Outputs got = run(**op, p, 0);
    LceReference ref = referenceLinearCrossEntropy(p);
    for (int64_t i : {0, 1, 3})
      EXPECT_NEAR(got.lse[i], ref.lse[i], 1e-5 * std::fabs(ref.lse[i]) + 1e-6) << "row " << i;
    EXPECT_TRUE(std::isnan(got.lse[2])) << "a NaN logit gives a NaN lse, got " << got.lse[2];
    EXPECT_EQ(got.loss[1], static_cast<float>(inf)) << "the label's logit is −inf";
    EXPECT_EQ(got.loss[3], static_cast<float>(inf));

    // Every logit −inf but one in the second group: lse is that logit.
    std::vector<float> only(c.v, -static_cast<float>(inf));
    only[17] = 0.5f;
    p.bias = only.data();
    Outputs single = run(**op, p, 0);
    for (int64_t i : {0, 1, 3}) {
      float z = 0.0f; // the kernel's order: one fma per term from 0, then the bias
      for (int64_t k = 0; k < c.d; ++k)
        z = std::fma(x[i * c.d + k], w[17 * c.d + k], z);
      EXPECT_EQ(single.lse[i], z + 0.5f) << "row " << i;
    }
  }
}

TEST_F(CpuBackend, IgnoredRows) {
  checkCase({16, 50, 8, "f16", "i64", "mean", false, 0.5});
  checkCase({16, 50, 8, "f32", "i32", "sum", true, 0.5});
  // Every row ignored: mean is 0/0 = NaN like PyTorch, sum is 0.
  checkCase({5, 20, 8, "f16", "i64", "mean", false, 1.0});
  checkCase({5, 20, 8, "f16", "i64", "sum", false, 1.0});
}

TEST_F(CpuBackend, HugeFp16LogitsDoNotOverflow) {
  // |z| ≈ 1e4: exp overflows an fp16 softmax beyond z ≈ 11.09; ours is f32.
  checkCase({12, 257, 32, "f16", "i64", "mean", false, 0.0, 1e4});
  checkCase({12, 257, 32, "f16", "i64", "none", true, 0.0, 1e4});
  checkCase({12, 257, 32, "bf16", "i64", "sum", false, 0.0, 1e4});
}

TEST_F(CpuBackend, RejectsMismatchedBuffers) {
  Case c{4, 10, 8};
  auto op = compile(c);
  ASSERT_TRUE(op);
  std::vector<uint16_t> x(4 * 8), w(10 * 8);
  std::vector<int64_t> y(4, 0);
  std::vector<float> loss(1), lse(4);
  std::map<std::string, HostBuffer> buffers = {
      {"x", {x.data(), "f16", 32}}, {"w", {w.data(), "f32", 80}},
      {"labels", {y.data(), "i64", 4}}, {"loss", {loss.data(), "f32", 1}},
      {"lse", {lse.data(), "f32", 4}}};
  llvm::Error err = op->run(buffers, {4, 10, 8});
  EXPECT_EQ(llvm::toString(std::move(err)), "buffer 'w' has dtype f32, expected f16");
  buffers["w"].dtype = "f16";
  buffers["w"].count = 79;
  err = op->run(buffers, {4, 10, 8});
  EXPECT_EQ(llvm::toString(std::move(err)), "buffer 'w' has 79 elements, expected V*D = 80");
  buffers["w"].count = 80;
  buffers.erase("lse");
  err = op->run(buffers, {4, 10, 8});
  EXPECT_EQ(llvm::toString(std::move(err)), "missing buffer 'lse' (f32, N elements)");
  err = op->run(buffers, {4, 0, 8});
  EXPECT_EQ(llvm::toString(std::move(err)), "V (vocabulary size) must be ≥ 1, got 0");
}

TEST_F(CpuBackend, StaticExtentsAreCheckedOnEveryCall) {
  // The kernels see only N, V, D: without the check a graph declaring 3 rows
  // would run on 5 (issue 16). Fixed N and V, dynamic D, through the cache
  // too (the extents travel in the cached plan).
  const char *graph = R"(
    func.func @lce(%x: tensor<3x?xf32>, %w: tensor<5x?xf32>, %y: tensor<3xi64>) -> tensor<f32> {
      %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32}
          : tensor<3x?xf32>, tensor<5x?xf32>, tensor<3xi64> -> tensor<f32>, tensor<3xf32>
      return %loss : tensor<f32>
    })";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(graph, context.get());
  ASSERT_TRUE(module);
  auto op = lossjit::test::compileCpuCached(*module);
  ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
  auto buffersFor = [](int64_t n, int64_t v, int64_t d, std::vector<float> &x,
                       std::vector<float> &w, std::vector<int64_t> &y, std::vector<float> &loss,
                       std::vector<float> &lse) {
    x.assign(n * d, 0.5f), w.assign(v * d, 0.25f), y.assign(n, 1), loss.assign(1, -1.0f);
    lse.assign(n, -1.0f);
    return std::map<std::string, HostBuffer>{
        {"x", {x.data(), "f32", n * d}},      {"w", {w.data(), "f32", v * d}},
        {"labels", {y.data(), "i64", n}},     {"loss", {loss.data(), "f32", 1}},
        {"lse", {lse.data(), "f32", n}}};
  };
  std::vector<float> x, w, loss, lse;
  std::vector<int64_t> y;
  // Matching extents (any D) run: equal logits give loss = log V.
  auto buffers = buffersFor(3, 5, 7, x, w, y, loss, lse);
  llvm::Error err = (*op)->run(buffers, {3, 5, 7});
  ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  EXPECT_NEAR(loss[0], std::log(5.0), 1e-6);
  buffers = buffersFor(5, 5, 7, x, w, y, loss, lse);
  err = (*op)->run(buffers, {5, 5, 7});
  EXPECT_EQ(llvm::toString(std::move(err)),
            "argument 0 ('x') of @lce is declared 3x?: dimension 0 (N) must be 3, the input has 5");
  EXPECT_EQ(loss[0], -1.0f) << "nothing may run on a mismatch";
  buffers = buffersFor(3, 6, 7, x, w, y, loss, lse);
  err = (*op)->run(buffers, {3, 6, 7});
  EXPECT_EQ(llvm::toString(std::move(err)),
            "argument 1 ('w') of @lce is declared 5x?: dimension 0 (V) must be 5, the input has 6");
}

TEST_F(CpuBackend, SecondProcessLinksTheCachedObject) {
  // A fresh KernelCache over the same directory stands for a second process:
  // it must find the entry on disk, link its object, and compute the same bits.
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("lossjit-cpu-cache", dir));
  runtime::KernelCacheOptions options;
  options.directory = dir.str().str();
  Case c{9, 77, 13, "bf16", "i32", "sum", true, 0.2};
  RandomLceOptions o;
  o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = c.dtype, o.labelType = c.labelType;
  o.reduction = c.reduction, o.bias = c.bias, o.ignoredFraction = c.ignored;
  RandomLceInputs in;
  makeRandomLceInputs(o, in);
  std::vector<Outputs> results;
  for (int process = 0; process < 2; ++process) {
    runtime::KernelCache cache(options);
    LceGraphOptions g;
    g.dtype = c.dtype, g.labelType = c.labelType, g.bias = c.bias, g.reduction = c.reduction;
    auto graph = buildLinearCrossEntropyGraph(*context, g);
    ASSERT_TRUE(static_cast<bool>(graph));
    auto op = CpuCompiledOp::compileCached(**graph, CpuTileConfig{}, cache);
    ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    EXPECT_EQ((*op)->fromCache(), process == 1);
    EXPECT_EQ(cache.stats().compiles, process == 0 ? 1u : 0u);
    EXPECT_EQ(cache.stats().diskHits, process == 0 ? 0u : 1u);
    EXPECT_EQ((*op)->plan().entryArgs, (std::vector<std::string>{"x", "w", "labels", "bias"}));
    results.push_back(run(**op, in.problem, 0));
  }
  EXPECT_EQ(results[0].loss, results[1].loss);
  EXPECT_EQ(results[0].lse, results[1].lse);
  llvm::sys::fs::remove_directories(dir);
}
