//===- PtxEmitterTest.cpp - graph → PTX through the C++ API ---------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/BundleBuilder.h"
#include "runtime/LaunchPlan.h"

#include "mlir/Parser/Parser.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace lossjit;

namespace {
class PtxEmitter : public ::testing::Test {
protected:
  PtxEmitter() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }
  llvm::Expected<GpuCompilation> compile(const LceGraphOptions &o, const GpuTarget &t,
                                         const TileConfig &tile = {}) {
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    if (!graph)
      return graph.takeError();
    return compileToPtx(**graph, t, tile);
  }
  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};
} // namespace

TEST_F(PtxEmitter, EveryKernelHasItsOwnPtxWithF32Math) {
  for (std::string dtype : {"f16", "bf16", "f32"}) {
    for (std::string chip : {"sm_80", "sm_90"}) {
      LceGraphOptions o;
      o.dtype = dtype;
      auto result = compile(o, {chip, ""});
      ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
      ASSERT_EQ(result->ops.size(), 1u);
      const GpuCompiledOp &op = result->ops.front();
      ASSERT_EQ(op.kernels.size(), 3u);
      for (const PtxKernel &k : op.kernels) {
        SCOPED_TRACE(dtype + " " + chip + " " + k.name);
        EXPECT_NE(k.ptx.find(".target " + chip), std::string::npos);
        EXPECT_NE(k.ptx.find(".entry " + k.name), std::string::npos);
        EXPECT_EQ(k.ptx.find("__nv_"), std::string::npos) << "libdevice call";
        EXPECT_EQ(k.ptx.find("atom."), std::string::npos) << "atomics break determinism";
      }
      EXPECT_NE(op.kernels[0].ptx.find("ex2.approx.f32"), std::string::npos);
      EXPECT_NE(op.kernels[1].ptx.find("lg2.approx.f32"), std::string::npos);
      if (dtype == "f16")
        EXPECT_NE(op.kernels[0].ptx.find("cvt.f32.f16"), std::string::npos);
    }
  }
}

TEST_F(PtxEmitter, ReductionNoneHasNoReduceKernel) {
  LceGraphOptions o;
  o.reduction = "none";
  auto result = compile(o, {"sm_80", ""});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  ASSERT_EQ(result->ops.front().kernels.size(), 2u);
}

TEST_F(PtxEmitter, BadTargetsAndTilesAreClearErrors) {
  LceGraphOptions o;
  auto bad = compile(o, {"sm80", ""});
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "arch must look like sm_80, sm_90 or sm_90a, got 'sm80'");
  auto old = compile(o, {"sm_60", ""});
  ASSERT_FALSE(static_cast<bool>(old));
  EXPECT_EQ(llvm::toString(old.takeError()),
            "arch sm_60 is not supported: lossjit needs sm_70 or newer");
  TileConfig tile;
  tile.threads = 100;
  auto badTile = compile(o, {"sm_80", ""}, tile);
  ASSERT_FALSE(static_cast<bool>(badTile));
  EXPECT_EQ(llvm::toString(badTile.takeError()),
            "tile threads must be a power of two in [32, 1024], got 100");
}

TEST_F(PtxEmitter, BundleVerifiesAndKeyTracksEveryInput) {
  LceGraphOptions o;
  auto result = compile(o, {"sm_90", ""});
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  std::string key = gpuCacheKey("graph", {"sm_90", ""}, {});
  runtime::KernelBundle bundle = makeGpuBundle(result->ops.front(), key, key);
  runtime::Error err = bundle.verify();
  EXPECT_FALSE(static_cast<bool>(err)) << err.message();
  EXPECT_EQ(bundle.kernels.size(), 3u);
  EXPECT_EQ(bundle.kernels[0].file, "lce_partial.sm_90.ptx");
  TileConfig other;
  other.splits = 16;
  EXPECT_NE(key, gpuCacheKey("graph2", {"sm_90", ""}, {}));
  EXPECT_NE(key, gpuCacheKey("graph", {"sm_80", ""}, {}));
  EXPECT_NE(key, gpuCacheKey("graph", {"sm_90", "+ptx83"}, {}));
  EXPECT_NE(key, gpuCacheKey("graph", {"sm_90", ""}, other));
  EXPECT_EQ(key, gpuCacheKey("graph", {"sm_90", ""}, {}));
}

TEST_F(PtxEmitter, StaticExtentsTravelInTheBundleAndAreChecked) {
  // Issue 16: a graph declaring 3 rows ran on 5 on the GPU path (the
  // bundle carried only N, V, D). The extents now travel in the bundle's
  // params (and so in its hashed manifest) and the runtime's plan refuses a
  // launch that contradicts them.
  const char *graph = R"(
    func.func @lce(%x: tensor<3x?xbf16>, %w: tensor<5x?xbf16>, %y: tensor<3xi64>) -> tensor<f32> {
      %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = f32}
          : tensor<3x?xbf16>, tensor<5x?xbf16>, tensor<3xi64> -> tensor<f32>, tensor<3xf32>
      return %loss : tensor<f32>
    })";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(graph, context.get());
  ASSERT_TRUE(module);
  auto result = compileToPtx(*module, {"sm_80", ""}, TileConfig::automaticChoice());
  ASSERT_TRUE(static_cast<bool>(result)) << llvm::toString(result.takeError());
  std::string key = gpuCacheKey("static", {"sm_80", ""}, TileConfig::automaticChoice());
  runtime::KernelBundle bundle = makeGpuBundle(result->ops.front(), key, key);
  ASSERT_FALSE(static_cast<bool>(bundle.verify()));
  std::map<std::string, std::vector<int64_t>> extents;
  for (const runtime::BundleParam &p : bundle.params)
    extents[p.name] = p.extents;
  EXPECT_EQ(extents["x"], (std::vector<int64_t>{3, -1}));
  EXPECT_EQ(extents["w"], (std::vector<int64_t>{5, -1}));
  EXPECT_EQ(extents["labels"], (std::vector<int64_t>{3}));
  EXPECT_TRUE(extents["loss"].empty()) << "outputs are not arguments";
  // The manifest round-trips them.
  runtime::Expected<runtime::KernelBundle> again =
      runtime::KernelBundle::fromManifest(bundle.toManifest());
  ASSERT_TRUE(again) << again.errorMessage();
  EXPECT_EQ(again->params[0].extents, bundle.params[0].extents);
  // fromManifest gives no images: the plan is built from the original.
  auto plan = runtime::LaunchPlan::build(bundle);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> fits = {3, 5, 64}, moreRows = {5, 5, 64}, widerVocab = {3, 6, 64};
  EXPECT_TRUE(plan->resolve(fits));
  auto bad = plan->resolve(moreRows);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.errorMessage(), "param 'x' is declared 3x? by the graph: dimension 0 of [N, D] "
                                "must be 3, the input has 5");
  bad = plan->resolve(widerVocab);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.errorMessage(), "param 'w' is declared 5x? by the graph: dimension 0 of [V, D] "
                                "must be 5, the input has 6");
}
