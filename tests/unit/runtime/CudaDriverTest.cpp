//===- CudaDriverTest.cpp - Driver loading without a GPU ------------------===//

#include "runtime/CudaDriver.h"
#include "runtime/CudaLauncher.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

TEST(CudaDriver, MissingLibraryErrorSaysWhatAndThatCpuWorks) {
  Expected<std::unique_ptr<CudaDriver>> d =
      CudaDriver::load("/nonexistent/lossjit/libcuda.so.1");
  ASSERT_FALSE(d);
  const std::string &m = d.errorMessage();
  EXPECT_EQ(m.rfind("CUDA driver library /nonexistent/lossjit/libcuda.so.1 not found (", 0), 0u)
      << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << "dlerror text: " << m;
  EXPECT_NE(m.find("the CPU backend still works"), std::string::npos) << m;
}

TEST(CudaDriver, EnvironmentOverridesTheLibraryPath) {
  {
    ScopedEnv unset("LOSSJIT_CUDA_DRIVER_PATH", nullptr);
    EXPECT_EQ(CudaDriver::defaultLibraryPath(), "libcuda.so.1");
  }
  ScopedEnv set("LOSSJIT_CUDA_DRIVER_PATH", "/nowhere/libcuda.so.1");
  EXPECT_EQ(CudaDriver::defaultLibraryPath(), "/nowhere/libcuda.so.1");
  Expected<std::unique_ptr<CudaDriver>> d = CudaDriver::load(CudaDriver::defaultLibraryPath());
  ASSERT_FALSE(d);
  EXPECT_NE(d.errorMessage().find("/nowhere/libcuda.so.1 not found"), std::string::npos);
}

TEST(CudaDriver, NotADriverLibrary) {
  // A real shared library without the driver's symbols.
  Expected<std::unique_ptr<CudaDriver>> d = CudaDriver::load("libm.so.6");
  ASSERT_FALSE(d);
  EXPECT_NE(d.errorMessage().find("lacks the entry points cuInit"), std::string::npos)
      << d.errorMessage();
}

TEST(CudaDriver, GlobalDriverEitherWorksOrExplains) {
  Expected<const CudaDriver *> d = CudaDriver::get();
  if (d) {
    Expected<int> count = (*d)->deviceCount();
    EXPECT_TRUE(count) << count.errorMessage();
    GTEST_SKIP() << "a CUDA driver is present (CUDA " << (*d)->versionString()
                 << "); the no-driver path is covered by the tests above";
  }
  EXPECT_NE(d.errorMessage().find("the CPU backend still works"), std::string::npos)
      << d.errorMessage();
  // Asking twice gives the same answer without crashing.
  EXPECT_EQ(CudaDriver::get().errorMessage(), d.errorMessage());
}

TEST(CudaArch, ParseAndCompatibility) {
  bool specific = true;
  auto cc = parseCudaArch("sm_80", &specific);
  ASSERT_TRUE(cc);
  EXPECT_EQ(*cc, std::make_pair(8, 0));
  EXPECT_FALSE(specific);
  cc = parseCudaArch("sm_90a", &specific);
  ASSERT_TRUE(cc);
  EXPECT_EQ(*cc, std::make_pair(9, 0));
  EXPECT_TRUE(specific);
  EXPECT_EQ(*parseCudaArch("compute_120"), std::make_pair(12, 0));
  EXPECT_EQ(*parseCudaArch("sm_75"), std::make_pair(7, 5));
  for (const char *bad : {"sm80", "sm_", "sm_8", "sm_80b", "gfx90a", ""})
    EXPECT_FALSE(parseCudaArch(bad)) << bad;
  EXPECT_EQ(archForComputeCapability(9, 0), "sm_90");

  EXPECT_FALSE(checkArchCompatible("sm_80", false, 9, 0)) << "PTX runs forward";
  EXPECT_FALSE(checkArchCompatible("sm_80", false, 8, 6));
  Error tooNew = checkArchCompatible("sm_90", false, 8, 0);
  ASSERT_TRUE(static_cast<bool>(tooNew));
  EXPECT_NE(tooNew.message().find("needs a newer GPU"), std::string::npos);
  EXPECT_TRUE(static_cast<bool>(checkArchCompatible("sm_90a", false, 10, 0)));
  EXPECT_FALSE(checkArchCompatible("sm_90a", false, 9, 0));
  EXPECT_TRUE(static_cast<bool>(checkArchCompatible("sm_80", true, 9, 0)))
      << "cubins do not cross major versions";
}

// The arch the JIT builds for: Hopper (9.0) gets sm_90a, whose modules hold
// the wgmma kernels and load on 9.0 alone; every other device its own sm_XY.
// LOSSJIT_CUDA_ARCH replaces the choice once its PTX would run there.
TEST(CudaArch, JitArchPicksSm90aOnHopperAndHonorsARunnableRequest) {
  EXPECT_EQ(*selectJitArch(9, 0, ""), "sm_90a");
  EXPECT_EQ(*selectJitArch(8, 0, ""), "sm_80");
  EXPECT_EQ(*selectJitArch(8, 9, ""), "sm_89");
  EXPECT_EQ(*selectJitArch(10, 0, ""), "sm_100") << "sm_90a modules do not load on 10.0";
  EXPECT_EQ(*selectJitArch(9, 0, "sm_90"), "sm_90") << "the mma.sync kernels on Hopper";
  EXPECT_EQ(*selectJitArch(9, 0, "sm_80"), "sm_80");
  auto expectRefusal = [](int major, int minor, const std::string &requested,
                          const std::string &why) {
    auto arch = selectJitArch(major, minor, requested);
    ASSERT_FALSE(arch) << requested;
    EXPECT_NE(arch.errorMessage().find("LOSSJIT_CUDA_ARCH='" + requested + "'"),
              std::string::npos)
        << arch.errorMessage();
    EXPECT_NE(arch.errorMessage().find(why), std::string::npos) << arch.errorMessage();
  };
  expectRefusal(8, 0, "sm_90a", "its kernels need a newer GPU than this sm_80 device");
  expectRefusal(10, 0, "sm_90a", "load on compute capability 9.x alone, this device is sm_100");
  expectRefusal(9, 0, "sm_100", "need a newer GPU than this sm_90 device");
  expectRefusal(9, 0, "compute_90", "expected an sm_<major><minor>[a] arch");
  expectRefusal(9, 0, "hopper", "expected an sm_<major><minor>[a] arch");
  expectRefusal(9, 0, "sm_9", "expected an sm_<major><minor>[a] arch");
  expectRefusal(9, 0, "sm_90b", "expected an sm_<major><minor>[a] arch");
}
