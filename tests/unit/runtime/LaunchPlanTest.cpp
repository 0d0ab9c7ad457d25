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
