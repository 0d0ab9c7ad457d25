//===- PtxEmitterTest.cpp - graph → PTX through the C++ API ---------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/BundleBuilder.h"

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
