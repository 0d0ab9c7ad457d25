//===- CompilerPiecesTest.cpp - tile configs, plans, graph builder --------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Kernels/Support/LaunchPlan.h"
#include "compiler/Kernels/Support/TileConfig.h"
#include "compiler/Pipeline/Registration.h"
#include "dialects/Loss/LoweringConfig.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace lossjit;

TEST(TileConfig, ParsesAndRoundTrips) {
  auto t = TileConfig::parse("threads=256,splits=16");
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(t->threads, 256);
  EXPECT_EQ(t->splits, 16);
  EXPECT_EQ(t->blockRows, 4);
  auto again = TileConfig::parse(t->str());
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_EQ(again->str(), t->str());
}

TEST(TileConfig, RejectsBadInput) {
  auto expectError = [](llvm::StringRef text, llvm::StringRef message) {
    auto t = TileConfig::parse(text);
    ASSERT_FALSE(static_cast<bool>(t)) << text.str();
    EXPECT_EQ(llvm::toString(t.takeError()), message.str());
  };
  expectError("warps=4",
              "unknown tile key 'warps' (expected block_rows, threads, splits, "
              "matmul, stages, block_cols, block_k, grad_cols, tma, persistent, band, cluster)");
  expectError("threads=abc", "tile 'threads' expects an integer, got 'abc'");
  // An empty tile (an unset shell variable) is an error, not SIMT's default.
  for (const char *empty : {"", " ", ",", " , "})
    expectError(empty, std::string("tile must be 'auto' or key=value pairs such as "
                                   "'matmul=wgmma,tma=2', got '") +
                           empty + "'");
  // A key given again overrides (a base tile plus overrides).
  auto overridden = TileConfig::parse("matmul=wgmma,stages=2,stages=3,matmul=mma_sync");
  ASSERT_TRUE(static_cast<bool>(overridden)) << llvm::toString(overridden.takeError());
  EXPECT_EQ(overridden->stages, 3);
  EXPECT_EQ(overridden->matmul, lossjit::loss::MatmulKind::mma_sync);
  expectError("threads=-1", "tile 'threads' must not be negative, got -1");
  expectError("threads=48", "tile threads must be a power of two in [32, 1024], got 48");
  expectError("block_rows=0", "tile block_rows must be in [1, 16], got 0");
  expectError("splits=0", "tile splits must be in [1, 1024], got 0");
  expectError("matmul=tcgen05", "tile matmul must be 'simt', 'mma_sync' or 'wgmma', got 'tcgen05'");
  expectError("stages=2", "matmul simt reads operands straight from memory: stages must be 1, "
                          "got 2");
  expectError("block_k=32", "matmul simt has one column per thread and no k tile: block_cols "
                            "and block_k must be 0, got 0 and 32");
}

TEST(TileConfig, AutomaticChoicePerChipStorageAndSchedule) {
  // "auto" is a tile of its own that round-trips; the choice is per op.
  auto automatic = TileConfig::parse("auto");
  ASSERT_TRUE(static_cast<bool>(automatic)) << llvm::toString(automatic.takeError());
  EXPECT_TRUE(automatic->automatic);
  EXPECT_EQ(automatic->str(), "auto");
  EXPECT_FALSE(static_cast<bool>(automatic->validate()));
  mlir::MLIRContext context;
  mlir::Builder b(&context);
  using lossjit::loss::Schedule;
  const std::string mma = TileConfig::forMatmul(lossjit::loss::MatmulKind::mma_sync).str();
  const std::string wgmma = TileConfig::forMatmul(lossjit::loss::MatmulKind::wgmma).str();
  const std::string simt = TileConfig().str();
  // wgmma on sm_90a (what the JIT builds on compute capability 9.0), mma.sync
  // on every other tensor-core arch (sm_90 PTX also runs on later chips).
  for (const char *chip : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100"}) {
    SCOPED_TRACE(chip);
    const std::string tc = llvm::StringRef(chip) == "sm_90a" ? wgmma : mma;
    EXPECT_EQ(TileConfig::defaultFor(chip, b.getBF16Type(), Schedule::forward).str(), tc);
    EXPECT_EQ(TileConfig::defaultFor(chip, b.getF16Type(), Schedule::chunked).str(), tc);
    EXPECT_EQ(TileConfig::defaultFor(chip, b.getBF16Type(), Schedule::fused).str(), tc);
    // Tensor cores do not build the recompute backward; f32 is never TF32.
    EXPECT_EQ(TileConfig::defaultFor(chip, b.getBF16Type(), Schedule::recompute).str(), simt);
    EXPECT_EQ(TileConfig::defaultFor(chip, b.getF32Type(), Schedule::forward).str(), simt);
  }
  // Before Ampere: no m16n8k16 bf16 mma.sync.
  EXPECT_EQ(TileConfig::defaultFor("sm_75", b.getF16Type(), Schedule::forward).str(), simt);
  EXPECT_EQ(TileConfig::defaultFor("sm_70", b.getBF16Type(), Schedule::forward).str(), simt);
}

TEST(TileConfig, TensorCoreTiles) {
  // The strategy's own default: 64x64 logits, 4 warps, k steps of 32, 3 stages.
  TileConfig d = TileConfig::forMatmul(lossjit::loss::MatmulKind::mma_sync);
  EXPECT_FALSE(static_cast<bool>(d.validate()));
  EXPECT_EQ(d.str(), "block_rows=64,threads=128,splits=8,matmul=mma_sync,stages=3,"
                     "block_cols=64,block_k=32");
  auto again = TileConfig::parse(d.str());
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_EQ(again->str(), d.str());
  EXPECT_EQ(again->tileCols(), 64);
  // The strategy alone is its default tile; other keys change that tile.
  auto alone = TileConfig::parse("matmul=mma_sync");
  ASSERT_TRUE(static_cast<bool>(alone)) << llvm::toString(alone.takeError());
  EXPECT_EQ(alone->str(), d.str());
  auto twoStages = TileConfig::parse("stages=2,matmul=mma_sync");
  ASSERT_TRUE(static_cast<bool>(twoStages)) << llvm::toString(twoStages.takeError());
  EXPECT_EQ(twoStages->stages, 2);
  EXPECT_EQ(twoStages->blockCols, 64);
  EXPECT_EQ(TileConfig().tileCols(), 128); // simt: one column per thread

  auto expectError = [](llvm::StringRef text, llvm::StringRef message) {
    auto t = TileConfig::parse(text);
    ASSERT_FALSE(static_cast<bool>(t)) << text.str();
    EXPECT_EQ(llvm::toString(t.takeError()), message.str());
  };
  const std::string mma = "matmul=mma_sync,stages=3,block_k=32,";
  expectError(mma + "block_rows=48,block_cols=64,threads=128",
              "matmul mma_sync: block_rows must be 32, 64, 96 or 128 (32-row warp tiles), got 48");
  expectError(mma + "block_rows=64,block_cols=80,threads=128",
              "matmul mma_sync: block_cols must be a multiple of 32 in [32, 256], got 80");
  expectError(mma + "block_rows=64,block_cols=64,threads=256",
              "matmul mma_sync: threads must be 32 per 32x32 warp tile, 128 for 64x64, got 256");
  // Omitted keys take the strategy's defaults, wherever matmul is written.
  auto partial = TileConfig::parse("stages=2,matmul=mma_sync");
  ASSERT_TRUE(static_cast<bool>(partial)) << llvm::toString(partial.takeError());
  EXPECT_EQ(partial->str(), "block_rows=64,threads=128,splits=8,matmul=mma_sync,stages=2,"
                            "block_cols=64,block_k=32");
  expectError("matmul=mma_sync,stages=3,block_rows=64,block_cols=64,threads=128,block_k=24",
              "matmul mma_sync: block_k must be 16, 32 or 64, got 24");
  expectError("matmul=mma_sync,stages=1,block_rows=64,block_cols=64,threads=128,block_k=32",
              "matmul mma_sync: stages must be in [2, 4] (a cp.async ring), got 1");
  // The ring is in dynamic shared memory: even the largest tile (128x256,
  // BK 64, 4 stages: 221184 bytes) is a valid config; the device decides.
  auto largest = TileConfig::parse(
      "matmul=mma_sync,stages=4,block_rows=128,block_cols=256,threads=1024,block_k=64");
  EXPECT_TRUE(static_cast<bool>(largest)) << llvm::toString(largest.takeError());
}

TEST(TileConfig, WgmmaTiles) {
  // Two warpgroups of 128 threads (64 rows each), 64 columns (wgmma's N),
  // k steps of 32 through 4 stages; the gradient products 128 columns wide.
  TileConfig d = TileConfig::forMatmul(lossjit::loss::MatmulKind::wgmma);
  EXPECT_FALSE(static_cast<bool>(d.validate()));
  EXPECT_EQ(d.str(), "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=4,"
                     "block_cols=64,block_k=32,grad_cols=128");
  TileConfig grad = d.gradientTile();
  EXPECT_EQ(grad.str(), "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=4,"
                        "block_cols=128,block_k=32");
  // grad_cols 0: the gradient products take the logits' tile.
  auto same = TileConfig::parse("matmul=wgmma,grad_cols=0");
  ASSERT_TRUE(static_cast<bool>(same)) << llvm::toString(same.takeError());
  EXPECT_EQ(same->gradientTile().str(), same->str());
  auto alone = TileConfig::parse("matmul=wgmma");
  ASSERT_TRUE(static_cast<bool>(alone)) << llvm::toString(alone.takeError());
  EXPECT_EQ(alone->str(), d.str());
  auto two = TileConfig::parse("matmul=wgmma,block_rows=128,threads=256,block_cols=256,block_k=64,"
                               "stages=4");
  EXPECT_TRUE(static_cast<bool>(two)) << llvm::toString(two.takeError());
  auto expectError = [](llvm::StringRef text, llvm::StringRef message) {
    auto t = TileConfig::parse(text);
    ASSERT_FALSE(static_cast<bool>(t)) << text.str();
    EXPECT_EQ(llvm::toString(t.takeError()), message.str());
  };
  expectError("matmul=wgmma,block_rows=32,threads=64",
              "matmul wgmma: block_rows must be 64 or 128 (64 rows per warpgroup), got 32");
  expectError("matmul=wgmma,threads=128",
              "matmul wgmma: threads must be 128 per 64 rows (one warpgroup each), 256 for "
              "block_rows 128, got 128");
  expectError("matmul=wgmma,block_cols=24",
              "matmul wgmma: block_cols must be a multiple of 16 in [16, 256] (wgmma's N), got 24");
  expectError("matmul=wgmma,block_cols=272",
              "matmul wgmma: block_cols must be a multiple of 16 in [16, 256] (wgmma's N), got 272");
  expectError("matmul=wgmma,block_k=48", "matmul wgmma: block_k must be 16, 32 or 64, got 48");
  expectError("matmul=wgmma,stages=5",
              "matmul wgmma: stages must be in [2, 4] (a cp.async ring), got 5");
  expectError("matmul=wgmma,grad_cols=40",
              "matmul wgmma: grad_cols must be 0 (as block_cols) or a multiple of 16 in [16, 256] "
              "(wgmma's N), got 40");
  expectError("matmul=mma_sync,grad_cols=128",
              "tile grad_cols is for matmul wgmma (its threads do not depend on the columns), got "
              "matmul mma_sync");
  expectError("grad_cols=64", "tile grad_cols is for matmul wgmma (its threads do not depend on "
                              "the columns), got matmul simt");
  // tma: wgmma's swizzled stages only, a flag.
  expectError("matmul=wgmma,tma=4", "tile tma must be 0 (cp.async), 1 (TMA), 2 (TMA from a "
                                    "producer warp) or 3 (TMA from a producer warpgroup that "
                                    "lends its registers), got 4");
  expectError("matmul=wgmma,block_rows=64,threads=128,tma=3",
              "matmul wgmma: tma 3 (a producer warpgroup lending its registers) needs block_rows "
              "128 (two consumer warpgroups), got 64");
  expectError("matmul=mma_sync,tma=1", "tile tma is for matmul wgmma (TMA tiles in the swizzled "
                                       "layouts wgmma reads), got matmul mma_sync");
  // tma=3: 384 threads launch with 168 registers; the producer keeps 40,
  // each consumer warpgroup takes 232 (168 + (168 - 40) / 2).
  auto lend = TileConfig::parse("matmul=wgmma,block_k=64,stages=3,tma=3");
  ASSERT_TRUE(static_cast<bool>(lend)) << llvm::toString(lend.takeError());
  EXPECT_EQ(lend->productThreads(), 384);
  EXPECT_EQ(lend->warpgroupRegisters().launch, 168);
  EXPECT_EQ(lend->warpgroupRegisters().producer, 40);
  EXPECT_EQ(lend->warpgroupRegisters().consumer, 232);
  EXPECT_EQ(TileConfig::parse("matmul=wgmma,block_k=64,tma=2")->warpgroupRegisters().launch, 0);
  auto tma = TileConfig::parse("matmul=wgmma,block_k=64,stages=3,tma=1");
  ASSERT_TRUE(static_cast<bool>(tma)) << llvm::toString(tma.takeError());
  EXPECT_EQ(tma->tma, 1);
  EXPECT_EQ(tma->str(), "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=3,block_cols=64,"
                        "block_k=64,grad_cols=128,tma=1");
  auto again = TileConfig::parse(tma->str());
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_EQ(again->str(), tma->str());
  EXPECT_EQ(TileConfig::parse("matmul=wgmma,tma=0")->str().find("tma"), std::string::npos);
  // cluster: the products in clusters of two or four row blocks, for
  // wgmma's warp-specialized rings; it round-trips through str().
  auto pair = TileConfig::parse("matmul=wgmma,block_cols=128,block_k=64,stages=2,tma=2,cluster=2");
  ASSERT_TRUE(static_cast<bool>(pair)) << llvm::toString(pair.takeError());
  EXPECT_EQ(pair->cluster, 2);
  EXPECT_EQ(pair->str(), "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=2,"
                         "block_cols=128,block_k=64,grad_cols=128,tma=2,cluster=2");
  EXPECT_EQ(TileConfig::parse(pair->str())->str(), pair->str());
  EXPECT_EQ(TileConfig::parse("matmul=wgmma,tma=2,cluster=0")->str().find("cluster"),
            std::string::npos);
  auto quad = TileConfig::parse("matmul=wgmma,block_cols=256,block_k=64,tma=3,cluster=4");
  ASSERT_TRUE(static_cast<bool>(quad)) << llvm::toString(quad.takeError());
  EXPECT_EQ(quad->cluster, 4);
  EXPECT_EQ(TileConfig::parse(quad->str())->str(), quad->str());
  expectError("matmul=wgmma,tma=2,cluster=3",
              "tile cluster must be 0 (no clusters), 2 or 4 (row blocks that multicast the tiles "
              "they share), got 3");
  expectError("matmul=wgmma,block_cols=48,tma=2,cluster=4",
              "matmul wgmma: with tile cluster 4 each block copies block_cols / 4 lines of every "
              "W tile in whole swizzle atoms of 8, so block_cols must be a multiple of 32, got 48");
  expectError("matmul=wgmma,block_k=64,tma=1,cluster=2",
              "tile cluster is for matmul wgmma with tma 2 or 3 (a producer copies the multicast "
              "shares), got matmul wgmma and tma 1");
  expectError("cluster=2", "tile cluster is for matmul wgmma with tma 2 or 3 (a producer copies "
                           "the multicast shares), got matmul simt and tma 0");
  // persistent: a block count for the tensor-core product kernels.
  expectError("persistent=4", "tile persistent is for tensor-core products (matmul mma_sync or "
                              "wgmma), got matmul simt");
  expectError("matmul=wgmma,persistent=65537",
              "tile persistent must be 0 (a block per tile) or the most blocks a product kernel "
              "launches, in [1, 65536], got 65537");
  expectError("matmul=wgmma,persistent=-2", "tile 'persistent' must not be negative, got -2");
  auto persistent = TileConfig::parse("matmul=mma_sync,persistent=132");
  ASSERT_TRUE(static_cast<bool>(persistent)) << llvm::toString(persistent.takeError());
  EXPECT_EQ(persistent->persistent, 132);
  EXPECT_EQ(persistent->str(), "block_rows=64,threads=128,splits=8,matmul=mma_sync,stages=3,"
                               "block_cols=64,block_k=32,persistent=132");
  EXPECT_EQ(TileConfig::parse(persistent->str())->str(), persistent->str());
  EXPECT_EQ(TileConfig::parse("matmul=wgmma,persistent=0")->str().find("persistent"),
            std::string::npos);
  // Only sm_90a has wgmma.
  using lossjit::loss::MatmulKind;
  EXPECT_EQ(lossjit::loss::checkMatmulChip(MatmulKind::wgmma, "sm_90a"), "");
  for (const char *chip : {"sm_80", "sm_90", "sm_100a"})
    EXPECT_NE(lossjit::loss::checkMatmulChip(MatmulKind::wgmma, chip), "") << chip;
  EXPECT_EQ(lossjit::loss::checkMatmulChip(MatmulKind::mma_sync, "sm_90"), "");
  // mma.sync on bf16 and cp.async need sm_80 (below, the backend aborted).
  for (const char *chip : {"sm_80", "sm_86", "sm_90a", "sm_100a"})
    EXPECT_EQ(lossjit::loss::checkMatmulChip(MatmulKind::mma_sync, chip), "") << chip;
  EXPECT_EQ(lossjit::loss::checkMatmulChip(MatmulKind::mma_sync, "sm_75"),
            "matmul mma_sync needs chip sm_80 or newer (mma.sync on bf16 and cp.async), got "
            "'sm_75'");
  EXPECT_NE(lossjit::loss::checkMatmulChip(MatmulKind::mma_sync, "sm_70"), "");
  EXPECT_EQ(lossjit::loss::checkMatmulChip(MatmulKind::simt, "sm_70"), "");
}

TEST(LaunchPlan, AttributeRoundTrip) {
  mlir::MLIRContext context;
  LaunchPlan plan;
  plan.entry = "f";
  plan.entryArgs = {"x", "w", "labels"};
  plan.entryResults = {"lse", "loss"};
  plan.params = {{"x", "f16", {"N", "D"}, false}, {"loss", "f32", {}, true}};
  plan.constants = {{"S", 8}};
  plan.workspaces = {{"part_max", "f32", "S*N"}};
  plan.kernels = {{"k", "mod_k", {"cdiv(N,4)", "S", "1"}, {128, 1, 1}, 0, {"x", "N"}, "rows", true}};
  plan.derived = {{"C", "min(N,64)"}};
  plan.chunkSymbol = "C";
  plan.options = {{"dtype", "f16"}};
  plan.tile = "threads=128";
  plan.tensorMaps = {{"x_tma_128x64", "x", {"D", "N"}, {64, 128}, 128}};
  std::string error;
  auto back = LaunchPlan::fromAttr(plan.toAttr(&context), error);
  ASSERT_TRUE(mlir::succeeded(back)) << error;
  EXPECT_EQ(back->entry, "f");
  EXPECT_EQ(back->entryArgs, plan.entryArgs);
  EXPECT_EQ(back->entryResults, plan.entryResults);
  EXPECT_EQ(back->params[1].name, "loss");
  EXPECT_TRUE(back->params[1].isOutput);
  EXPECT_EQ(back->kernels[0].grid[0], "cdiv(N,4)");
  EXPECT_EQ(back->kernels[0].module, "mod_k");
  EXPECT_EQ(back->constants.at("S"), 8);
  EXPECT_EQ(back->workspaces[0].count, "S*N");
  EXPECT_EQ(back->kernels[0].parallel, "rows");
  EXPECT_TRUE(back->kernels[0].perChunk);
  EXPECT_EQ(back->derived, plan.derived);
  EXPECT_EQ(back->chunkSymbol, "C");
  ASSERT_EQ(back->tensorMaps.size(), 1u);
  EXPECT_EQ(back->tensorMaps[0].name, "x_tma_128x64");
  EXPECT_EQ(back->tensorMaps[0].buffer, "x");
  EXPECT_EQ(back->tensorMaps[0].dims, (std::array<std::string, 2>{"D", "N"}));
  EXPECT_EQ(back->tensorMaps[0].box, (std::array<int64_t, 2>{64, 128}));
  EXPECT_EQ(back->tensorMaps[0].swizzle, 128);

  mlir::Builder b(&context);
  auto broken = b.getDictionaryAttr({b.getNamedAttr("entry", b.getStringAttr("f"))});
  EXPECT_TRUE(mlir::failed(LaunchPlan::fromAttr(broken, error)));
  EXPECT_EQ(error, "malformed launch plan: entry, entry_args, entry_results, op, tile and dims are required");
}

TEST(GraphBuilder, RejectsBadOptions) {
  mlir::DialectRegistry registry;
  registerLossJITDialects(registry);
  mlir::MLIRContext context(registry);
  auto expectError = [&](LceGraphOptions o, llvm::StringRef message) {
    auto g = buildLinearCrossEntropyGraph(context, o);
    ASSERT_FALSE(static_cast<bool>(g));
    EXPECT_EQ(llvm::toString(g.takeError()), message.str());
  };
  LceGraphOptions o;
  o.dtype = "f8";
  expectError(o, "dtype must be f16, bf16, f32 or f64, got 'f8'");
  o = {};
  o.labelType = "f32";
  expectError(o, "label type must be i32 or i64, got 'f32'");
  o = {};
  o.reduction = "avg";
  expectError(o, "reduction must be none, mean or sum, got 'avg'");
}

TEST(GraphBuilder, BuildsAVerifiedUnfusedGraph) {
  mlir::DialectRegistry registry;
  registerLossJITDialects(registry);
  mlir::MLIRContext context(registry);
  LceGraphOptions o;
  o.bias = true;
  o.dtype = "bf16";
  auto g = buildLinearCrossEntropyGraph(context, o);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_TRUE(mlir::succeeded(mlir::verify(**g)));
  std::string text;
  llvm::raw_string_ostream os(text);
  (*g)->print(os);
  EXPECT_NE(text.find("loss.linear %arg0, %arg1, %arg3"), std::string::npos) << text;
  EXPECT_NE(text.find("loss.cast"), std::string::npos) << text;
  EXPECT_NE(text.find("loss.nll"), std::string::npos) << text;
}
