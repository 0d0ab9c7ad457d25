//===- LogitTransformsTest.cpp - logit scaling and tanh softcap on the CPU -===//
//
// z = softcap(scale · (x·w + b)) end to end on the CPU backend: forward
// (lse, loss) and both backward strategies against the fp64 reference, with
// logits large enough that the tanh saturates (and that exp(2|u|) overflows
// to +inf inside the kernel's tanh), a scale alone, and both together.
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "dialects/Loss/LossOps.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/Reference.h"

#include "mlir/IR/MLIRContext.h"
#include "tests/unit/CpuCompileCache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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
  uint64_t seed = 11;
  /// Gradient errors are relative to max(‖reference‖₂, gradFloor): a floor
  /// for cases whose gradients are all but zero.
  double gradFloor = 0.0;
};

std::string describe(const Case &c) {
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) + " D=" +
         std::to_string(c.d) + " " + c.dtype + " " + c.reduction + " scale=" +
         loss::formatF64(c.scale) + " cap=" + loss::formatF64(c.cap) +
         (c.bias ? " bias" : "") + " |raw|~" + loss::formatF64(c.magnitude);
}

int64_t bytesOf(const std::string &dtype) { return dtype == "f32" ? 4 : 2; }

/// ‖got − want‖₂ / max(‖want‖₂, floor), `got` read as `dtype`.
double gradError(const std::vector<char> &got, const std::string &dtype,
                 const std::vector<double> &want, double floor) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double diff = elementAsDouble(got.data(), dtype, static_cast<int64_t>(i)) - want[i];
    num += diff * diff;
    den += want[i] * want[i];
  }
  double scale = std::max(std::sqrt(den), floor);
  return scale == 0 ? std::sqrt(num) : std::sqrt(num) / scale;
}

class LogitTransforms : public ::testing::Test {
protected:
  LogitTransforms() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  LceGraphOptions options(const Case &c, bool gradient, const std::string &strategy) {
    LceGraphOptions o;
    o.dtype = c.dtype;
    o.bias = c.bias;
    o.reduction = c.reduction;
    o.logitScale = c.scale;
    o.softcap = c.cap;
    o.gradient = gradient;
    o.strategy = strategy;
    return o;
  }

  std::unique_ptr<CpuCompiledOp> compile(const LceGraphOptions &o) {
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    if (!graph)
      return nullptr;
    auto op = lossjit::test::compileCpuCached(**graph);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    return op ? std::move(*op) : nullptr;
  }

  static std::vector<double> asDouble(const std::vector<char> &bytes, const std::string &dtype) {
    std::vector<double> out(bytes.size() / bytesOf(dtype));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = elementAsDouble(bytes.data(), dtype, static_cast<int64_t>(i));
    return out;
  }

  /// Forward vs fp64 (lse and loss to 1e-4 relative), then the gradients of
  /// both strategies vs fp64 (relative L2 ≤ 1e-4 for f32, 1e-2 for 16-bit).
  void checkCase(const Case &c) {
    SCOPED_TRACE(describe(c));
    RandomLceOptions ro;
    ro.n = c.n, ro.v = c.v, ro.d = c.d, ro.dtype = c.dtype, ro.reduction = c.reduction;
    ro.bias = c.bias, ro.ignoredFraction = c.ignored, ro.logitScale = c.magnitude;
    ro.seed = c.seed;
    RandomLceInputs in;
    makeRandomLceInputs(ro, in);
    LceProblem &p = in.problem;
    p.logitScale = c.scale;
    p.softcap = c.cap;

    auto fwd = compile(options(c, false, "auto"));
    ASSERT_TRUE(fwd);
    std::vector<float> loss(c.reduction == "none" ? c.n : 1, -1.0f), lse(c.n, -1.0f);
    std::map<std::string, HostBuffer> in0 = {
        {"x", {const_cast<void *>(p.x), c.dtype, c.n * c.d}},
        {"w", {const_cast<void *>(p.w), c.dtype, c.v * c.d}},
        {"labels", {const_cast<void *>(p.labels), "i64", c.n}}};
    if (c.bias)
      in0["bias"] = {const_cast<void *>(p.bias), c.dtype, c.v};
    auto fb = in0;
    fb["loss"] = {loss.data(), "f32", static_cast<int64_t>(loss.size())};
    fb["lse"] = {lse.data(), "f32", c.n};
    llvm::Error err = fwd->run(fb, {c.n, c.v, c.d});
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));

    LceReference ref = referenceLinearCrossEntropy(p);
    for (int64_t i = 0; i < c.n; ++i)
      EXPECT_LE(std::fabs(lse[i] - ref.lse[i]), 1e-4 * std::fabs(ref.lse[i]) + 1e-5)
          << "lse row " << i << " got " << lse[i] << " want " << ref.lse[i];
    if (c.reduction == "none") {
      for (int64_t i = 0; i < c.n; ++i)
        EXPECT_LE(std::fabs(loss[i] - ref.rowLoss[i]),
                  1e-4 * std::max(std::fabs(ref.rowLoss[i]), std::fabs(ref.lse[i])) + 1e-5)
            << "loss row " << i << " got " << loss[i] << " want " << ref.rowLoss[i];
    } else {
      EXPECT_LE(std::fabs(loss[0] - ref.loss), 1e-4 * std::fabs(ref.loss) + 1e-5)
          << "loss got " << loss[0] << " want " << ref.loss;
    }

    std::vector<float> gradLoss(c.reduction == "none" ? c.n : 1, 0.75f);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    if (c.reduction == "none")
      for (float &g : gradLoss)
        g = u(rng);
    LceGradReference gref = referenceLinearCrossEntropyGrad(
        p, std::vector<double>(gradLoss.begin(), gradLoss.end()));
    double tol = c.dtype == "f32" ? 1e-4 : 1e-2;
    int64_t es = bytesOf(c.dtype);
    std::map<std::string, std::vector<char>> byStrategy[2];
    const char *strategies[2] = {"chunked", "recompute"};
    for (int s = 0; s < 2; ++s) {
      SCOPED_TRACE(strategies[s]);
      auto bwd = compile(options(c, true, strategies[s]));
      ASSERT_TRUE(bwd);
      auto &out = byStrategy[s];
      out["grad_x"].assign(c.n * c.d * es, 0x7f);
      out["grad_w"].assign(c.v * c.d * es, 0x7f);
      auto bb = in0;
      bb["lse"] = {lse.data(), "f32", c.n};
      bb["grad_loss"] = {gradLoss.data(), "f32", static_cast<int64_t>(gradLoss.size())};
      bb["grad_x"] = {out["grad_x"].data(), c.dtype, c.n * c.d};
      bb["grad_w"] = {out["grad_w"].data(), c.dtype, c.v * c.d};
      if (c.bias) {
        out["grad_bias"].assign(c.v * es, 0x7f);
        bb["grad_bias"] = {out["grad_bias"].data(), c.dtype, c.v};
      }
      err = bwd->run(bb, {c.n, c.v, c.d});
      ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
      for (const auto &[name, bytes] : out)
        for (double value : asDouble(bytes, c.dtype))
          ASSERT_TRUE(std::isfinite(value)) << name << " has a non-finite element";
      EXPECT_LE(gradError(out["grad_x"], c.dtype, gref.gradX, c.gradFloor), tol) << "grad_x";
      EXPECT_LE(gradError(out["grad_w"], c.dtype, gref.gradW, c.gradFloor), tol) << "grad_w";
      if (c.bias)
        EXPECT_LE(gradError(out["grad_bias"], c.dtype, gref.gradBias, c.gradFloor), tol)
            << "grad_bias";
    }
    // The two schedules agree with each other as closely as with fp64.
    EXPECT_LE(gradError(byStrategy[1]["grad_w"], c.dtype, asDouble(byStrategy[0]["grad_w"], c.dtype),
                        c.gradFloor),
              tol);
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};
} // namespace

TEST_F(LogitTransforms, SoftcapAllStorageTypesAndReductions) {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string reduction : {"mean", "sum", "none"})
      checkCase({6, 53, 24, dtype, reduction, 1.0, 30.0, true, 0.2, 20.0});
}

TEST_F(LogitTransforms, SoftcapSaturates) {
  // |raw| ~ 300 against cap 5: most logits sit on the flat part of the tanh
  // (z = ±cap, ∂z/∂raw ≈ 0), about half of them so far out (|u| > 44) that
  // exp(2|u|) overflows to +inf in f32, where the kernel's tanh must still
  // give ±1 and a zero derivative, never NaN; a few stay on the slope.
  for (std::string dtype : {"f32", "f16", "bf16"})
    checkCase({6, 64, 16, dtype, "mean", 1.0, 5.0, true, 0.0, 300.0});
  // |raw| ~ 1e4: nearly every logit overflows; the gradients are all but
  // zero, so they are checked against an absolute floor.
  Case extreme{5, 40, 16, "bf16", "none", 1.0, 5.0, true, 0.0, 1e4};
  extreme.gradFloor = 1e-3;
  checkCase(extreme);
  extreme.dtype = "f32";
  checkCase(extreme);
}

TEST_F(LogitTransforms, ScaleAlone) {
  for (std::string dtype : {"f32", "f16", "bf16"}) {
    checkCase({7, 45, 20, dtype, "mean", 0.25, 0.0, true, 0.1, 8.0});
    checkCase({7, 45, 20, dtype, "none", -1.7, 0.0, false, 0.0, 4.0});
  }
}

TEST_F(LogitTransforms, ScaleThenSoftcap) {
  for (std::string dtype : {"f32", "f16", "bf16"})
    checkCase({6, 37, 12, dtype, "sum", 2.5, 15.0, true, 0.2, 12.0});
  checkCase({1, 1, 1, "f32", "mean", 0.5, 3.0});
  checkCase({9, 70, 33, "f16", "mean", 1.0 / 0.7, 30.0, false, 0.0, 40.0});
}

TEST_F(LogitTransforms, PlanOptionsOnlyWhenSet) {
  Case plain{2, 3, 4};
  auto op = compile(options(plain, false, "auto"));
  ASSERT_TRUE(op);
  EXPECT_EQ(op->plan().options.count("logit_scale"), 0u);
  EXPECT_EQ(op->plan().options.count("softcap"), 0u);
  Case capped{2, 3, 4, "f16", "mean", 0.5, 30.0};
  for (bool gradient : {false, true}) {
    auto c = compile(options(capped, gradient, "auto"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->plan().options.at("logit_scale"), "0.5");
    EXPECT_EQ(c->plan().options.at("softcap"), "30.0");
  }
}

TEST_F(LogitTransforms, BuilderRejectsBadOptions) {
  auto expectError = [&](double scale, double cap, const std::string &what) {
    Case c{2, 3, 4, "f32", "mean", scale, cap};
    for (bool gradient : {false, true}) {
      auto graph = buildLinearCrossEntropyGraph(*context, options(c, gradient, "auto"));
      ASSERT_FALSE(static_cast<bool>(graph));
      EXPECT_EQ(llvm::toString(graph.takeError()), what);
    }
  };
  expectError(0.0, 0.0, "logit scale must be finite and nonzero, got 0.0");
  expectError(std::numeric_limits<double>::quiet_NaN(), 0.0,
              "logit scale must be finite and nonzero, got nan");
  expectError(1.0, -3.0, "softcap must be 0 (none) or positive and finite, got -3.0");
  expectError(1.0, std::numeric_limits<double>::infinity(),
              "softcap must be 0 (none) or positive and finite, got inf");
}

TEST(FormatF64, SpellsLikePythonRepr) {
  // The manifest spelling of logit_scale/softcap; Python forms the same
  // strings with repr(float(value)) to look up prebuilt kernels.
  const std::pair<double, const char *> cases[] = {
      {30.0, "30.0"},
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1234.5, "1234.5"},
      {0.0001, "0.0001"},
      {-2.5, "-2.5"},
      {1.0 / 3.0, "0.3333333333333333"},
      {123456789.0, "123456789.0"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {-0.0, "-0.0"},
      {2.5e-7, "2.5e-07"},
      {1e22, "1e+22"},
  };
  for (const auto &[value, text] : cases)
    EXPECT_EQ(loss::formatF64(value), text) << value;
}
