//===- NvrtcTest.cpp - Reference kernels through NVRTC and ptxas ----------===//
//
// CPU-only: compiles the reference kernels to PTX and has ptxas check them for
// sm_80 and sm_90, so kernel source errors are caught on machines without a
// GPU. Skips only when no NVRTC library can be found.

#include "runtime/Environment.h"
#include "runtime/FileUtil.h"
#include "runtime/KernelCache.h"
#include "runtime/LaunchPlan.h"
#include "runtime/Nvrtc.h"
#include "testing/reference/ReferenceKernels.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <unistd.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

namespace {

const Nvrtc *nvrtcOrNull(std::string &why) {
  Expected<const Nvrtc *> n = Nvrtc::get();
  if (!n) {
    why = n.errorMessage();
    return nullptr;
  }
  return *n;
}

#define REQUIRE_NVRTC(var)                                                     \
  std::string nvrtcMissing;                                                    \
  const Nvrtc *var = nvrtcOrNull(nvrtcMissing);                                \
  if (!var)                                                                    \
    GTEST_SKIP() << "NVRTC not available: " << nvrtcMissing;

std::string findPtxas() {
  std::vector<std::string> candidates;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root)
      candidates.push_back(std::string(root) + "/bin/ptxas");
  candidates.push_back("/usr/local/cuda/bin/ptxas");
  if (const char *path = std::getenv("PATH"))
    for (const std::string &dir : splitPathList(path))
      candidates.push_back(dir + "/ptxas");
  for (const std::string &c : candidates)
    if (::access(c.c_str(), X_OK) == 0)
      return c;
  return {};
}

/// Runs ptxas on `ptx`; returns its output on failure, empty on success.
std::string ptxasErrors(const std::string &ptxas, const std::string &ptx,
                        const std::string &arch) {
  TempDir dir;
  std::string in = dir / "k.ptx", log = dir / "log";
  EXPECT_FALSE(writeFile(in, ptx));
  std::string cmd = ptxas + " -arch=" + arch + " " + in + " -o " + (dir / "k.cubin") +
                    " > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc == 0)
    return {};
  Expected<std::string> out = readFile(log);
  return "ptxas -arch=" + arch + " failed (" + std::to_string(rc) + "):\n" +
         (out ? *out : out.errorMessage());
}

} // namespace

TEST(Nvrtc, LoadsAndReportsVersion) {
  REQUIRE_NVRTC(nvrtc);
  EXPECT_FALSE(nvrtc->libraryPath().empty());
  EXPECT_NE(nvrtc->version(), "unknown");
  std::cerr << "NVRTC " << nvrtc->version() << " from " << nvrtc->libraryPath()
            << ", include dir '" << nvrtc->includeDirectory() << "'\n";
}

TEST(Nvrtc, MissingLibraryListsAttempts) {
  Expected<std::unique_ptr<Nvrtc>> n =
      Nvrtc::load({"/nonexistent/libnvrtc.so.99", "libnvrtc-does-not-exist.so"});
  ASSERT_FALSE(n);
  EXPECT_NE(n.errorMessage().find("/nonexistent/libnvrtc.so.99"), std::string::npos);
  EXPECT_NE(n.errorMessage().find("libnvrtc-does-not-exist.so"), std::string::npos);
  EXPECT_NE(n.errorMessage().find("LOSSJIT_NVRTC_PATH"), std::string::npos);
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  REQUIRE_NVRTC(nvrtc);
  Expected<std::string> ptx = nvrtc->compileToPtx(
      "extern \"C\" __global__ void k() { undeclared_thing = 1; }", "broken.cu", "sm_80");
  ASSERT_FALSE(ptx);
  EXPECT_NE(ptx.errorMessage().find("broken.cu"), std::string::npos) << ptx.errorMessage();
  EXPECT_NE(ptx.errorMessage().find("undeclared_thing"), std::string::npos)
      << ptx.errorMessage();
  Expected<std::string> badArch = nvrtc->compileToPtx("", "x.cu", "gfx90a");
  ASSERT_FALSE(badArch);
  EXPECT_NE(badArch.errorMessage().find("invalid CUDA arch 'gfx90a'"), std::string::npos);
}

TEST(Nvrtc, CanUseToolkitHeaders) {
  REQUIRE_NVRTC(nvrtc);
  if (nvrtc->includeDirectory().empty())
    GTEST_SKIP() << "no CUDA toolkit include directory found";
  Expected<std::string> ptx = nvrtc->compileToPtx(
      "#include <cuda_fp16.h>\n"
      "extern \"C\" __global__ void h(const __half *x, float *y) {"
      " y[threadIdx.x] = __half2float(x[threadIdx.x]); }",
      "fp16.cu", "sm_80");
  EXPECT_TRUE(ptx) << ptx.errorMessage();
}

TEST(Nvrtc, ReferenceKernelsCompileAndPassPtxas) {
  REQUIRE_NVRTC(nvrtc);
  std::string ptxas = findPtxas();
  struct Variant {
    const char *dtype;
    const char *labels;
    bool bias;
    ReferenceKernelOptions::Abi abi;
  };
  // Covers each dtype, label type, bias and ABI at least once while keeping
  // NVRTC invocations (~0.3 s each) few.
  Variant variants[] = {
      {"f32", "i64", false, ReferenceKernelOptions::Abi::Pointers},
      {"f16", "i32", true, ReferenceKernelOptions::Abi::Pointers},
      {"bf16", "i64", true, ReferenceKernelOptions::Abi::Memref},
      {"f16", "i64", false, ReferenceKernelOptions::Abi::Memref},
  };
  for (const Variant &v : variants) {
    ReferenceKernelOptions options;
    options.dtype = v.dtype;
    options.labelType = v.labels;
    options.bias = v.bias;
    options.abi = v.abi;
    SCOPED_TRACE(std::string(v.dtype) + "/" + v.labels + (v.bias ? "/bias" : "") +
                 (v.abi == ReferenceKernelOptions::Abi::Memref ? "/memref" : "/ptr"));
    Expected<std::string> source = referenceKernelSource(options);
    ASSERT_TRUE(source) << source.errorMessage();
    for (const char *arch : {"sm_80", "sm_90"}) {
      Expected<std::string> ptx = nvrtc->compileToPtx(*source, "reference.cu", arch);
      ASSERT_TRUE(ptx) << ptx.errorMessage();
      EXPECT_NE(ptx->find(".entry lossjit_reference_forward"), std::string::npos);
      EXPECT_NE(ptx->find(".entry lossjit_reference_mean"), std::string::npos);
      EXPECT_NE(ptx->find(std::string(".target ") + arch), std::string::npos);
      if (std::string(v.dtype) == "f16") {
        EXPECT_NE(ptx->find("cvt.f32.f16"), std::string::npos);
      }
      if (ptxas.empty())
        continue;
      std::string errors = ptxasErrors(ptxas, *ptx, arch);
      EXPECT_TRUE(errors.empty()) << errors;
    }
  }
  if (ptxas.empty())
    GTEST_SKIP() << "ptxas not found; PTX compiled but was not assembled";
}

TEST(Nvrtc, ReferenceBundleIsValidAndCacheable) {
  REQUIRE_NVRTC(nvrtc);
  ReferenceKernelOptions options;
  options.dtype = "f16";
  options.bias = true;
  Expected<KernelBundle> bundle = buildReferenceBundle(*nvrtc, options, "sm_80");
  ASSERT_TRUE(bundle) << bundle.errorMessage();
  EXPECT_FALSE(bundle->verify());
  Expected<LaunchPlan> plan = LaunchPlan::build(*bundle);
  ASSERT_TRUE(plan) << plan.errorMessage();
  EXPECT_EQ(plan->numParams(), 6u); // x w bias labels loss lse
  // forward: 6 buffers x 5 + N V D
  EXPECT_EQ(plan->parameterCount(0), 33u);
  // The forward kernel's PTX signature has exactly that many parameters.
  const std::string &ptx = bundle->kernels[0].image;
  size_t entry = ptx.find(".entry lossjit_reference_forward(");
  ASSERT_NE(entry, std::string::npos);
  size_t close = ptx.find(')', entry);
  size_t params = 0;
  for (size_t p = ptx.find(".param", entry); p < close; p = ptx.find(".param", p + 1))
    ++params;
  EXPECT_EQ(params, 33u);

  TempDir dir;
  KernelCacheOptions cacheOptions;
  cacheOptions.directory = dir.path();
  KernelCache cache(cacheOptions);
  Expected<BundleRef> cached =
      cache.getOrCompile(bundle->key, [&]() -> Expected<KernelBundle> { return *bundle; });
  ASSERT_TRUE(cached) << cached.errorMessage();
  Expected<KernelBundle> reread = readBundleDirectory(dir / bundle->key, bundle->key);
  ASSERT_TRUE(reread) << reread.errorMessage();
  EXPECT_EQ(reread->kernels[0].image, ptx);
}

TEST(ReferenceKernels, RejectsBadOptions) {
  ReferenceKernelOptions options;
  options.dtype = "f8";
  EXPECT_NE(referenceKernelSource(options).errorMessage().find("dtype"), std::string::npos);
  options = {};
  options.labelType = "u8";
  EXPECT_NE(referenceKernelSource(options).errorMessage().find("label_type"),
            std::string::npos);
  options = {};
  options.threads = 100;
  EXPECT_NE(referenceKernelSource(options).errorMessage().find("power of two"),
            std::string::npos);
}
