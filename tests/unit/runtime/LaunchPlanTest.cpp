//===- LaunchPlanTest.cpp - Sizes, grids and argument packing -------------===//

#include "runtime/LaunchPlan.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

TEST(LaunchPlan, ResolvesSizesAndGrids) {
  KernelBundle b = makeTestBundle(testKey("plan"));
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> dims = {10, 1000, 64};
  Expected<ResolvedLaunch> r = plan->resolve(dims);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ(r->paramElements, (std::vector<int64_t>{640, 64000, 10, 1, 10}));
  EXPECT_EQ(r->workspaceElements, (std::vector<int64_t>{80, 80, 10}));
  EXPECT_EQ(r->workspaceBytes, (std::vector<uint64_t>{320, 320, 40}));
  ASSERT_EQ(r->kernels.size(), 2u);
  EXPECT_EQ(r->kernels[0].grid, (std::array<uint32_t, 3>{3, 8, 1}));
  EXPECT_FALSE(r->kernels[0].skip);
  EXPECT_EQ(r->kernels[1].grid, (std::array<uint32_t, 3>{1, 1, 1}));
  EXPECT_EQ(plan->paramShapeText(0), "[N, D]");
  EXPECT_EQ(plan->paramShapeText(3), "[]");
  EXPECT_EQ(plan->describeKernel(0, *r),
            "lce_partial grid=(3,8,1) block=(128,1,1) smem=4096");
}

// A persistent kernel launches at most the co-resident blocks, in whole
// clusters and at least one; other kernels, or an unknown count (0), keep
// the resolved grid. A grid in clusters must come out in whole clusters.
TEST(LaunchPlan, PersistentGridsTakeAtMostTheCoResidentClusters) {
  KernelBundle b = makeTestBundle(testKey("persistent-plan"));
  b.kernels[0].grid = {"2*N", "1", "1"};
  b.kernels[0].cluster = 2;
  b.kernels[0].persistent = true;
  b.kernels[1].grid = {"N", "1", "1"};
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  EXPECT_TRUE(plan->isPersistent(0));
  EXPECT_FALSE(plan->isPersistent(1));
  EXPECT_EQ(plan->clusterSize(0), 2u);
  EXPECT_EQ(plan->clusterSize(1), 1u);
  EXPECT_EQ(plan->launchedBlocksX(0, 20, 0), 20u) << "unknown: the resolved grid";
  EXPECT_EQ(plan->launchedBlocksX(0, 20, 8), 8u);
  EXPECT_EQ(plan->launchedBlocksX(0, 20, 7), 6u) << "whole clusters";
  EXPECT_EQ(plan->launchedBlocksX(0, 20, 1), 2u) << "at least one cluster";
  EXPECT_EQ(plan->launchedBlocksX(0, 4, 8), 4u) << "a grid that fits";
  EXPECT_EQ(plan->launchedBlocksX(1, 20, 8), 20u) << "not persistent";
  // 2*N + 1 is no whole number of clusters of two.
  b.kernels[0].grid[0] = "2*N+1";
  plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> dims = {10, 1000, 64};
  Expected<ResolvedLaunch> r = plan->resolve(dims);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("kernel 'lce_partial' grid[0] = '2*N+1' evaluates to 21, not a "
                                  "multiple of its cluster of 2 blocks"),
            std::string::npos)
      << r.errorMessage();
  // A kernel that does not launch (an empty grid) is not held to it, as
  // the C API skips it first too.
  b.kernels[0].grid = {"2*N+1", "0", "1"};
  b.kernels[0].persistent = false;
  plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  r = plan->resolve(dims);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_TRUE(r->kernels[0].skip);
}

TEST(LaunchPlan, PacksMemrefDescriptors) {
  KernelBundle b = makeTestBundle(testKey("pack"));
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan);
  std::vector<int64_t> dims = {10, 1000, 64};
  ResolvedLaunch r = *plan->resolve(dims);
  std::vector<uint64_t> params = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  std::vector<uint64_t> workspaces = {0xA000, 0xB000, 0xC000};
  PackedArgs args;
  Error e = plan->packArguments(0, r, params, workspaces, args);
  ASSERT_FALSE(e) << e.message();
  // x, w, labels, part_m, part_s (5 each) then N, V, D.
  std::vector<uint64_t> expected = {0x1000, 0x1000, 0, 640,   1,
                                    0x2000, 0x2000, 0, 64000, 1,
                                    0x3000, 0x3000, 0, 10,    1,
                                    0xA000, 0xA000, 0, 80,    1,
                                    0xB000, 0xB000, 0, 80,    1,
                                    10,     1000,   64};
  EXPECT_EQ(args.values(), expected);
  ASSERT_EQ(args.size(), expected.size());
  EXPECT_EQ(plan->parameterCount(0), expected.size());
  for (size_t i = 0; i < args.size(); ++i)
    EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[i]), expected[i]);

  // The combine kernel reads the constant S as one int64 at the end.
  ASSERT_FALSE(plan->packArguments(1, r, params, workspaces, args));
  EXPECT_EQ(args.values().back(), 8u);
  EXPECT_EQ(args.values()[args.size() - 2], 10u);

  std::vector<uint64_t> tooFew = {1, 2};
  Error bad = plan->packArguments(0, r, tooFew, workspaces, args);
  ASSERT_TRUE(static_cast<bool>(bad));
  EXPECT_NE(bad.message().find("expected 5 param addresses"), std::string::npos);
}

TEST(LaunchPlan, EmptyGridIsSkippedNotLaunched) {
  KernelBundle b = makeTestBundle(testKey("empty"));
  LaunchPlan plan = *LaunchPlan::build(b);
  std::vector<int64_t> dims = {0, 1000, 64};
  Expected<ResolvedLaunch> r = plan.resolve(dims);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_TRUE(r->kernels[0].skip);
  EXPECT_FALSE(r->kernels[1].skip);
  EXPECT_NE(plan.describeKernel(0, *r).find("skipped"), std::string::npos);
}

TEST(LaunchPlan, RejectsBadDims) {
  KernelBundle b = makeTestBundle(testKey("dims"));
  LaunchPlan plan = *LaunchPlan::build(b);
  std::vector<int64_t> two = {1, 2};
  Expected<ResolvedLaunch> r = plan.resolve(two);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("expected 3 values (N, V, D), got 2"),
            std::string::npos)
      << r.errorMessage();
  std::vector<int64_t> negative = {4, -1, 8};
  r = plan.resolve(negative);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("dim V = -1"), std::string::npos);
  // Grid y is limited to 65535 by CUDA.
  b.kernels[0].grid[1] = "N";
  plan = *LaunchPlan::build(b);
  std::vector<int64_t> huge = {70000, 10, 10};
  r = plan.resolve(huge);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("grid[1] = 'N' evaluates to 70000"),
            std::string::npos)
      << r.errorMessage();
  std::vector<int64_t> overflow = {int64_t(1) << 40, 1, int64_t(1) << 40};
  b = makeTestBundle(testKey("dims"));
  plan = *LaunchPlan::build(b);
  r = plan.resolve(overflow);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("param 'x': element count of shape [N, D] overflows"),
            std::string::npos)
      << r.errorMessage();
}

TEST(LaunchPlan, BuildRejectsInvalidBundles) {
  KernelBundle b = makeTestBundle(testKey("invalid"));
  b.kernels[0].args.push_back("ghost");
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.errorMessage().find("ghost"), std::string::npos);
}

// ---- Chunked launch plans ----

TEST(LaunchPlan, UnchunkedPlanHasNoChunks) {
  LaunchPlan plan = *LaunchPlan::build(makeTestBundle(testKey("no-chunks")));
  EXPECT_FALSE(plan.isChunked());
  EXPECT_EQ(plan.numDerived(), 0u);
  for (size_t k = 0; k < plan.numKernels(); ++k)
    EXPECT_FALSE(plan.isPerChunk(k));
  std::vector<int64_t> dims = {10, 1000, 64};
  ResolvedLaunch r = *plan.resolve(dims);
  EXPECT_EQ(r.chunkRows, 0);
  EXPECT_EQ(r.chunkSize, 0);
  EXPECT_EQ(r.symbolValues, (std::vector<int64_t>{10, 1000, 64, 8}));
}

TEST(LaunchPlan, ResolvesDerivedSymbolsInGridsAndWorkspaces) {
  KernelBundle b = makeChunkedTestBundle(testKey("derived"));
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  EXPECT_TRUE(plan->isChunked());
  ASSERT_EQ(plan->numDerived(), 2u);
  EXPECT_EQ(plan->derivedName(0), "C");
  EXPECT_EQ(plan->derivedName(1), "NC");
  EXPECT_FALSE(plan->isPerChunk(0));
  EXPECT_TRUE(plan->isPerChunk(1));
  EXPECT_TRUE(plan->isPerChunk(2));
  EXPECT_FALSE(plan->isPerChunk(3));

  // N=10, V=8, D=2, WB=192: C = max(1,min(10,(192-64)/32)) = 4, NC = 3.
  std::vector<int64_t> dims = {10, 8, 2};
  Expected<ResolvedLaunch> r = plan->resolve(dims);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ(r->symbolValues, (std::vector<int64_t>{10, 8, 2, 192, 4, 3}));
  EXPECT_EQ(r->chunkRows, 10);
  EXPECT_EQ(r->chunkSize, 4);
  // Workspaces grow = N, dz = C*V.
  EXPECT_EQ(r->workspaceElements, (std::vector<int64_t>{10, 32}));
  EXPECT_EQ(r->workspaceBytes, (std::vector<uint64_t>{40, 128}));
  // Grids: dz reads C, finish reads only dims.
  EXPECT_EQ(r->kernels[1].grid, (std::array<uint32_t, 3>{1, 1, 1}));
  EXPECT_EQ(r->kernels[3].grid, (std::array<uint32_t, 3>{1, 1, 1}));

  // A larger budget: C = min(N, (WB-V*D*4)/(V*4)) = min(100, 30) = 30.
  b.constants[0].second = 64 + 30 * 32;
  b.kernels[1].grid = {"cdiv(C,4)", "NC", "C*V"};
  plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> more = {100, 8, 2};
  r = plan->resolve(more);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ(r->chunkSize, 30);
  EXPECT_EQ(r->workspaceElements[1], 240);
  EXPECT_EQ(r->kernels[1].grid, (std::array<uint32_t, 3>{8, 4, 240}));
  EXPECT_EQ(plan->describeKernel(1, *r),
            "lce_bwd_dz grid=(8,4,240) block=(128,1,1) smem=0");
}

TEST(LaunchPlan, VocabularyChunksSplitV) {
  // chunk_dim V: the per-chunk groups split the vocabulary, chunk ranges
  // are bounded by V (packArguments refuses a range past it).
  KernelBundle b = makeChunkedTestBundle(testKey("chunk-dim-v"));
  b.chunkDim = "V";
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> dims = {10, 8, 2};
  Expected<ResolvedLaunch> r = plan->resolve(dims);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ(r->chunkRows, 8);
  EXPECT_EQ(r->chunkSize, 4);
  PackedArgs args;
  std::vector<uint64_t> params(b.params.size(), 0x1000), workspaces(b.workspaces.size(), 0x2000);
  EXPECT_FALSE(plan->packArguments(1, *r, params, workspaces, args, 4, 8));
  Error past = plan->packArguments(1, *r, params, workspaces, args, 4, 9);
  ASSERT_TRUE(static_cast<bool>(past));
  EXPECT_NE(past.message().find("within [0, 8) of dim V"), std::string::npos) << past.message();
}

TEST(LaunchPlan, ChunkSizeBelowOneCountsAsOne) {
  KernelBundle b = makeChunkedTestBundle(testKey("chunk-zero"));
  b.derived[0].second = "N-N-3"; // C = -3
  b.derived[1].second = "N";     // NC must not divide by C any more
  b.workspaces[1].count = "V";
  b.kernels[1].grid = {"1", "1", "1"};
  b.kernels[2].grid = {"1", "1", "1"};
  LaunchPlan plan = *LaunchPlan::build(b);
  std::vector<int64_t> dims = {10, 8, 2};
  ResolvedLaunch r = *plan.resolve(dims);
  EXPECT_EQ(r.symbolValues[4], -3) << "the symbol itself keeps its value";
  EXPECT_EQ(r.chunkSize, 1);
  // A constant chunk size works the same way.
  b.constants[0].second = 0;
  b.chunk = "WB";
  plan = *LaunchPlan::build(b);
  r = *plan.resolve(dims);
  EXPECT_EQ(r.chunkSize, 1);
  b.constants[0].second = 6;
  plan = *LaunchPlan::build(b);
  r = *plan.resolve(dims);
  EXPECT_EQ(r.chunkSize, 6);
}

TEST(LaunchPlan, DerivedSymbolErrorsNameTheSymbol) {
  KernelBundle b = makeChunkedTestBundle(testKey("derived-errors"));
  LaunchPlan plan = *LaunchPlan::build(b);
  // N = 0 is fine: C = max(1, min(0, ...)) = 1, NC = 0.
  std::vector<int64_t> empty = {0, 8, 2};
  Expected<ResolvedLaunch> r = plan.resolve(empty);
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ(r->chunkSize, 1);
  EXPECT_EQ(r->chunkRows, 0);
  // V = 0 divides by zero in C.
  std::vector<int64_t> noVocab = {10, 0, 2};
  r = plan.resolve(noVocab);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("derived symbol 'C'"), std::string::npos)
      << r.errorMessage();
  EXPECT_NE(r.errorMessage().find("division by zero"), std::string::npos)
      << r.errorMessage();
  // Overflow in a later derived symbol names that one.
  b.derived[1].second = "N*V*D*WB";
  plan = *LaunchPlan::build(b);
  std::vector<int64_t> huge = {int64_t(1) << 40, int64_t(1) << 20, 2};
  r = plan.resolve(huge);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("derived symbol 'NC'"), std::string::npos)
      << r.errorMessage();
  EXPECT_NE(r.errorMessage().find("overflow"), std::string::npos) << r.errorMessage();
}

TEST(LaunchPlan, PacksChunkBoundsAndDerivedArgs) {
  KernelBundle b = makeChunkedTestBundle(testKey("pack-chunk"));
  LaunchPlan plan = *LaunchPlan::build(b);
  std::vector<int64_t> dims = {10, 8, 2};
  ResolvedLaunch r = *plan.resolve(dims);
  std::vector<uint64_t> params = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000};
  std::vector<uint64_t> workspaces = {0xA000, 0xB000};
  PackedArgs args;
  // lce_bwd_dz: x, w, labels, grow, dz (5 each), chunk_begin, chunk_end, V, D.
  Error e = plan.packArguments(1, r, params, workspaces, args, 4, 8);
  ASSERT_FALSE(e) << e.message();
  std::vector<uint64_t> expected = {0x1000, 0x1000, 0, 20, 1,  // x
                                    0x2000, 0x2000, 0, 16, 1,  // w
                                    0x3000, 0x3000, 0, 10, 1,  // labels
                                    0xA000, 0xA000, 0, 10, 1,  // grow
                                    0xB000, 0xB000, 0, 32, 1,  // dz
                                    4,      8,      8, 2};
  EXPECT_EQ(args.values(), expected);
  EXPECT_EQ(plan.parameterCount(1), expected.size());
  for (size_t i = 0; i < args.size(); ++i)
    EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[i]), expected[i]);

  // lce_bwd_dx ends with chunk_begin, chunk_end and the derived C and NC.
  ASSERT_FALSE(plan.packArguments(2, r, params, workspaces, args, 8, 10));
  ASSERT_EQ(args.size(), 3u * 5 + 4);
  EXPECT_EQ(std::vector<uint64_t>(args.values().end() - 4, args.values().end()),
            (std::vector<uint64_t>{8, 10, 4, 3}));
  // A chunk covering every row is fine.
  ASSERT_FALSE(plan.packArguments(2, r, params, workspaces, args, 0, 10));
  EXPECT_EQ(args.values()[15], 0u);
  EXPECT_EQ(args.values()[16], 10u);

  // Bounds outside [0, N] are rejected for per-chunk kernels...
  Error bad = plan.packArguments(1, r, params, workspaces, args, 8, 12);
  ASSERT_TRUE(static_cast<bool>(bad));
  EXPECT_NE(bad.message().find("kernel 'lce_bwd_dz': chunk [8, 12) is not a range "
                               "within [0, 10) of dim N"),
            std::string::npos)
      << bad.message();
  EXPECT_TRUE(static_cast<bool>(plan.packArguments(1, r, params, workspaces, args, 5, 4)));
  EXPECT_TRUE(static_cast<bool>(plan.packArguments(1, r, params, workspaces, args, -1, 4)));
  // ... and ignored by the others.
  ASSERT_FALSE(plan.packArguments(0, r, params, workspaces, args, 99, -5));
  EXPECT_EQ(args.values().back(), 8u) << "V";
}

TEST(LaunchPlan, TamperedQuantitiesAreCheckedAgainstTheBuffers) {
  // issue 16: a manifest edited in a shared cache must give an error before
  // launch, never a kernel reading or writing past a buffer.
  std::vector<int64_t> dims = {10, 1000, 64};
  std::vector<int64_t> callerElements = {640, 64000, 10, 1, 10};
  KernelBundle good = makeTestBundle(testKey("tamper"));
  Expected<LaunchPlan> plan = LaunchPlan::build(good);
  ASSERT_TRUE(plan);
  ResolvedLaunch r = *plan->resolve(dims);
  EXPECT_FALSE(plan->checkBuffers(r, callerElements, r.workspaceBytes));

  // A param shape shrunk from [N, D] to [N]: the caller's buffer disagrees.
  KernelBundle shape = good;
  shape.params[0].shape = {"N"};
  Expected<LaunchPlan> shapePlan = LaunchPlan::build(shape);
  ASSERT_TRUE(shapePlan);
  ResolvedLaunch shapeLaunch = *shapePlan->resolve(dims);
  Error e = shapePlan->checkBuffers(shapeLaunch, callerElements, shapeLaunch.workspaceBytes);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(e.message(),
            "param 'x': the plan's shape [N] gives 10 elements, but the buffer holds 640");

  // A workspace allocation smaller than the count needs.
  std::vector<uint64_t> small = r.workspaceBytes;
  small[1] = 16;
  e = plan->checkBuffers(r, callerElements, small);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(e.message(),
            "workspace 'part_s': count 'S*N' needs 320 bytes, but the allocation holds 16");

  // A ResolvedLaunch of another plan is refused, not indexed past its end.
  KernelBundle fewer = good;
  fewer.workspaces.pop_back();
  fewer.kernels[1].args = {"part_m", "part_s", "labels", "loss", "lse", "N", "S"};
  Expected<LaunchPlan> fewerPlan = LaunchPlan::build(fewer);
  ASSERT_TRUE(fewerPlan) << fewerPlan.errorMessage();
  ResolvedLaunch other = *fewerPlan->resolve(dims);
  std::vector<uint64_t> addresses = {1, 2, 3, 4, 5}, workspaces = {6, 7, 8};
  PackedArgs args;
  e = plan->packArguments(0, other, addresses, workspaces, args);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(e.message(), "the resolved launch does not belong to this plan (5 params, 2 "
                         "workspaces, 2 kernels; the plan has 5, 3, 2)");
}

TEST(LaunchPlan, ByteSizesNeverWrap) {
  // Element counts that fit int64 while their bytes do not.
  KernelBundle b = makeTestBundle(testKey("wrap"));
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan);
  std::vector<int64_t> dims = {int64_t(1) << 61, 1, 2}; // x: N*D = 2^62 f16 = 2^63 bytes
  Expected<ResolvedLaunch> r = plan->resolve(dims);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), "param 'x': byte size of shape [N, D] overflows int64");

  KernelBundle ws = b;
  ws.workspaces[2].count = "N*V";
  plan = LaunchPlan::build(ws);
  ASSERT_TRUE(plan);
  dims = {int64_t(1) << 31, int64_t(1) << 31, 0}; // N*V = 2^62 f32
  r = plan->resolve(dims);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), "workspace 'loss_rows': byte size of count 'N*V' = "
                              "4611686018427387904 overflows int64");
}

TEST(LaunchPlan, DeclaredExtentsAreCheckedAtEveryResolve) {
  KernelBundle b = makeTestBundle(testKey("extents"));
  b.params[0].extents = {10, -1}; // x: 10 rows, any D
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> fits = {10, 1000, 64}, anyD = {10, 1000, 3}, moreRows = {11, 1000, 64};
  EXPECT_TRUE(plan->resolve(fits));
  EXPECT_TRUE(plan->resolve(anyD));
  Expected<ResolvedLaunch> r = plan->resolve(moreRows);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), "param 'x' is declared 10x? by the graph: dimension 0 of [N, D] "
                              "must be 10, the input has 11");
}

namespace {
/// makeTestBundle with TMA tensor maps of x and w (boxes of 64 k × 128 / 64
/// lines, 128-byte swizzle) that lce_partial takes after its buffers,
/// followed by tensor_maps_ready.
KernelBundle makeTmaBundle(const std::string &key) {
  KernelBundle b = makeTestBundle(key);
  b.arch = "sm_90a";
  b.tensorMaps = {{"x_tma_128x64", "x", {"D", "N"}, {64, 128}, 128},
                  {"w_tma_64x64", "w", {"D", "V"}, {64, 64}, 128}};
  b.kernels[0].args = {"x",  "w", "labels", "part_m", "part_s", "x_tma_128x64", "w_tma_64x64",
                       kTensorMapsReadyArg, "N", "V", "D"};
  return b;
}
} // namespace

TEST(LaunchPlan, ResolvesAndPacksTensorMaps) {
  KernelBundle b = makeTmaBundle(testKey("tma"));
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  ASSERT_EQ(plan->numTensorMaps(), 2u);
  std::vector<int64_t> dims = {10, 1000, 64};
  ResolvedLaunch r = *plan->resolve(dims);
  ASSERT_EQ(r.tensorMaps.size(), 2u);
  EXPECT_EQ(r.tensorMaps[0].buffer, 0u);
  EXPECT_FALSE(r.tensorMaps[0].workspace);
  EXPECT_EQ(r.tensorMaps[0].dtype, "f16");
  EXPECT_EQ(r.tensorMaps[0].dims, (std::array<uint64_t, 2>{64, 10}));
  EXPECT_EQ(r.tensorMaps[0].rowBytes, 128u);
  EXPECT_EQ(r.tensorMaps[1].dims, (std::array<uint64_t, 2>{64, 1000}));
  EXPECT_EQ(r.tensorMaps[1].box, (std::array<uint32_t, 2>{64, 64}));
  EXPECT_EQ(r.tensorMaps[1].swizzle, 128u);
  // One kernel parameter per map, 8 bytes or 128.
  EXPECT_EQ(plan->parameterCount(0), 5u * 5 + 2 + 1 + 3);

  std::vector<uint64_t> params = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  std::vector<uint64_t> workspaces = {0xA000, 0xB000, 0xC000};
  std::vector<TensorMapBytes> maps(2);
  maps[0].bytes.fill(0x11);
  maps[1].bytes.fill(0x22);
  PackedArgs args;
  const std::vector<uint8_t> both = {1, 1};
  ASSERT_FALSE(plan->packArguments(0, r, params, workspaces, args, 0, 0, maps, both));
  ASSERT_EQ(args.size(), plan->parameterCount(0));
  auto map = [&](size_t i) { return static_cast<const TensorMapBytes *>(args.pointers()[i]); };
  EXPECT_EQ(map(25)->bytes, maps[0].bytes);
  EXPECT_EQ(map(26)->bytes, maps[1].bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(args.pointers()[25]) % 64, 0u);
  EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[27]), 1u); // tensor_maps_ready
  EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[28]), 10u); // N
  EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[20]), 0xB000u); // part_s

  // Not encoded: zeros and tensor_maps_ready 0 (the kernels copy by cp.async).
  ASSERT_FALSE(plan->packArguments(0, r, params, workspaces, args, 0, 0, {}, {}));
  EXPECT_EQ(map(25)->bytes, TensorMapBytes{}.bytes);
  EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[27]), 0u);
  // One of the kernel's maps not encoded: none of its maps is used.
  const std::vector<uint8_t> onlyX = {1, 0};
  ASSERT_FALSE(plan->packArguments(0, r, params, workspaces, args, 0, 0, maps, onlyX));
  EXPECT_EQ(map(25)->bytes, TensorMapBytes{}.bytes);
  EXPECT_EQ(map(26)->bytes, TensorMapBytes{}.bytes);
  EXPECT_EQ(*static_cast<uint64_t *>(args.pointers()[27]), 0u);
  // A kernel without maps packs as before, whatever the flags.
  ASSERT_FALSE(plan->packArguments(1, r, params, workspaces, args, 0, 0, maps, onlyX));
  EXPECT_EQ(args.values().back(), 8u);
  // Flags that do not match the maps are refused.
  Error e = plan->packArguments(0, r, params, workspaces, args, 0, 0,
                                std::span<const TensorMapBytes>(maps).first(1), both);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("expected 2 tensor maps and encoded flags, got 1 and 2"),
            std::string::npos);
}

TEST(LaunchPlan, SaysWhyATensorMapCannotBeEncoded) {
  ResolvedLaunch::TensorMap m{0, false, "bf16", {64, 10}, 128, {64, 128}, 128};
  EXPECT_EQ(tensorMapUnencodable(m, 0x1000), "");
  EXPECT_EQ(tensorMapUnencodable(m, 0x1008), "the buffer's address is not 16-byte aligned");
  ResolvedLaunch::TensorMap odd = m;
  odd.dims[0] = 37, odd.rowBytes = 74;
  EXPECT_EQ(tensorMapUnencodable(odd, 0x1000),
            "rows of 74 bytes (TMA strides are multiples of 16 below 2^40)");
  ResolvedLaunch::TensorMap empty = m;
  empty.dims[1] = 0;
  EXPECT_EQ(tensorMapUnencodable(empty, 0x1000),
            "dims[1] = 0 (TMA coordinates here are in [0, 2^31))");
  ResolvedLaunch::TensorMap huge = m;
  huge.dims[1] = uint64_t(1) << 31;
  EXPECT_NE(tensorMapUnencodable(huge, 0x1000), "");
}

TEST(LaunchPlan, TensorMapsAreCheckedWhenTheBundleIsVerified) {
  auto expectError = [](KernelBundle b, const std::string &message) {
    Error e = b.verify();
    ASSERT_TRUE(static_cast<bool>(e)) << message;
    EXPECT_NE(e.message().find(message), std::string::npos) << e.message();
  };
  KernelBundle b = makeTmaBundle(testKey("tma-verify"));
  ASSERT_FALSE(b.verify());
  KernelBundle noParam = b;
  noParam.tensorMaps[0].buffer = "nothing";
  expectError(noParam, "tensor_maps[0].buffer: \"nothing\" names no param or workspace");
  KernelBundle labels = b;
  labels.tensorMaps[0].buffer = "labels";
  expectError(labels, "'labels' is i64; tensor maps take f16, bf16 or f32");
  KernelBundle swizzle = b;
  swizzle.tensorMaps[1].swizzle = 96;
  expectError(swizzle, "tensor_maps[1].swizzle: expected 0, 32, 64 or 128 bytes, got 96");
  KernelBundle wide = b;
  wide.tensorMaps[0].swizzle = 64;
  expectError(wide, "a box row of 128 bytes must be a multiple of 16 and at most the 64-byte "
                    "swizzle span");
  KernelBundle box = b;
  box.tensorMaps[0].box[1] = 512;
  expectError(box, "tensor_maps[0].box[1]: expected 1..256 elements, got 512");
  KernelBundle clash = b;
  clash.tensorMaps[1].name = "x";
  expectError(clash, "name 'x' is declared twice");
  KernelBundle noMaps = b;
  noMaps.tensorMaps.clear();
  noMaps.kernels[0].args.erase(noMaps.kernels[0].args.begin() + 5,
                               noMaps.kernels[0].args.begin() + 7);
  expectError(noMaps, "\"tensor_maps_ready\" needs tensor_maps, and the bundle has none");
  KernelBundle dims = b;
  dims.tensorMaps[0].dims[1] = "Q";
  expectError(dims, "tensor_maps[0].dims[1]");

  // The manifest carries them (and a bundle without any writes none).
  Expected<KernelBundle> back = KernelBundle::fromManifest(b.toManifest());
  ASSERT_TRUE(back) << back.errorMessage();
  ASSERT_EQ(back->tensorMaps.size(), 2u);
  EXPECT_EQ(back->tensorMaps[1].name, "w_tma_64x64");
  EXPECT_EQ(back->tensorMaps[1].buffer, "w");
  EXPECT_EQ(back->tensorMaps[1].dims, (std::array<std::string, 2>{"D", "V"}));
  EXPECT_EQ(back->tensorMaps[1].box, (std::array<uint32_t, 2>{64, 64}));
  EXPECT_EQ(back->tensorMaps[1].swizzle, 128u);
  EXPECT_EQ(makeTestBundle(testKey("plain")).toManifest().find("tensor_maps"), nullptr);
}

TEST(LaunchPlan, ATensorMapNeverReachesPastItsBuffer) {
  // x is [N, D]; a map of V rows of D would read past it.
  KernelBundle b = makeTmaBundle(testKey("tma-extent"));
  b.tensorMaps[0].dims = {"D", "V"};
  Expected<LaunchPlan> plan = LaunchPlan::build(b);
  ASSERT_TRUE(plan) << plan.errorMessage();
  std::vector<int64_t> dims = {10, 1000, 64};
  Expected<ResolvedLaunch> r = plan->resolve(dims);
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find(
                "tensor map 'x_tma_128x64': dims 64 x 1000 reach past its buffer 'x' of 640 "
                "elements"),
            std::string::npos)
      << r.errorMessage();
}
