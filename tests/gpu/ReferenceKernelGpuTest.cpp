//===- ReferenceKernelGpuTest.cpp - NVRTC reference kernels on a device ---===//
//
// The NVRTC reference kernel is the independent second answer for the
// compiler's kernels, so it is itself checked here against an fp64 CPU
// reference, for determinism, on a non-default stream, and through the full
// bundle + CudaLauncher path that compiler output takes.

#include "GpuTestUtil.h"

#include "runtime/CudaLauncher.h"
#include "runtime/KernelCache.h"
#include "testing/reference/ReferenceKernels.h"

#include <cmath>
#include <random>

using namespace lossjit::runtime;
using namespace lossjit::runtime::gputest;

namespace {

constexpr int64_t kIgnore = -100;

/// Host inputs for one problem, with storage-rounded fp64 copies.
struct Problem {
  int64_t n, v, d;
  std::string dtype, labelType;
  bool hasBias;
  StoredTensor x, w, bias;
  std::vector<int64_t> labels;
  std::vector<uint8_t> labelBytes;
  LceReference ref;
};

Problem makeProblem(int64_t n, int64_t v, int64_t d, const std::string &dtype,
                    const std::string &labelType, bool hasBias, unsigned seed) {
  Problem p{n, v, d, dtype, labelType, hasBias, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * d)), w(static_cast<size_t>(v * d)),
      b(static_cast<size_t>(v));
  for (float &e : x)
    e = normal(rng);
  // Scaled so logits span a few units (softmax neither flat nor one-hot).
  for (float &e : w)
    e = 0.5f * normal(rng);
  for (float &e : b)
    e = 0.1f * normal(rng);
  p.x = makeStored(x, dtype);
  p.w = makeStored(w, dtype);
  p.bias = makeStored(b, dtype);
  std::uniform_int_distribution<int64_t> label(0, v - 1);
  for (int64_t r = 0; r < n; ++r)
    p.labels.push_back(r % 5 == 3 ? kIgnore : label(rng));
  if (labelType == "i64") {
    p.labelBytes.resize(p.labels.size() * 8);
    std::memcpy(p.labelBytes.data(), p.labels.data(), p.labelBytes.size());
  } else {
    std::vector<int32_t> l32(p.labels.begin(), p.labels.end());
    p.labelBytes.resize(l32.size() * 4);
    std::memcpy(p.labelBytes.data(), l32.data(), p.labelBytes.size());
  }
  p.ref = referenceLinearCrossEntropy(p.x.values, p.w.values,
                                      hasBias ? &p.bias.values : nullptr,
                                      p.labels, n, v, d, kIgnore);
  return p;
}

/// Device copies of a problem's inputs and outputs.
struct DeviceProblem {
  DeviceMemory x, w, bias, labels, lse, lossRows, loss;
  DeviceProblem(const CudaDriver &driver, const Problem &p)
      : x(driver, p.x.bytes.size()), w(driver, p.w.bytes.size()),
        bias(driver, p.bias.bytes.size()), labels(driver, p.labelBytes.size()),
        lse(driver, static_cast<size_t>(p.n) * 4),
        lossRows(driver, static_cast<size_t>(p.n) * 4), loss(driver, 4) {
    x.upload(p.x.bytes);
    w.upload(p.w.bytes);
    bias.upload(p.bias.bytes);
    labels.upload(p.labelBytes);
  }
};

struct Results {
  std::vector<float> lse, lossRows, loss;
  bool operator==(const Results &o) const {
    // Bitwise, NaN-safe.
    auto same = [](const std::vector<float> &a, const std::vector<float> &b) {
      return a.size() == b.size() &&
             std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return same(lse, o.lse) && same(lossRows, o.lossRows) && same(loss, o.loss);
  }
};

Results download(const DeviceProblem &dp, const Problem &p, bool withRows = true) {
  Results r;
  r.lse = dp.lse.download<float>(static_cast<size_t>(p.n));
  if (withRows)
    r.lossRows = dp.lossRows.download<float>(static_cast<size_t>(p.n));
  r.loss = dp.loss.download<float>(1);
  return r;
}

void expectMatchesReference(const Results &r, const Problem &p) {
  // fp32 accumulation over D terms of O(1): relative error ~1e-6; leave room.
  auto tolerance = [](double ref) { return 2e-4 * std::max(1.0, std::fabs(ref)); };
  for (int64_t i = 0; i < p.n; ++i) {
    size_t k = static_cast<size_t>(i);
    EXPECT_NEAR(r.lse[k], p.ref.lse[k], tolerance(p.ref.lse[k])) << "lse row " << i;
    if (!r.lossRows.empty()) {
      if (p.labels[k] == kIgnore)
        EXPECT_EQ(r.lossRows[k], 0.f) << "ignored row " << i << " must give 0";
      else
        EXPECT_NEAR(r.lossRows[k], p.ref.rowLoss[k], tolerance(p.ref.rowLoss[k]))
            << "loss row " << i;
    }
  }
  EXPECT_NEAR(r.loss[0], p.ref.mean, tolerance(p.ref.mean)) << "mean loss";
}

/// The pointer-ABI kernels loaded straight through the driver.
class ReferenceKernelTest : public NvrtcGpuTest {
protected:
  void TearDown() override {
    if (module)
      (void)driver->api().cuModuleUnload(module);
  }

  void load(const ReferenceKernelOptions &options) {
    Expected<std::string> source = referenceKernelSource(options);
    ASSERT_TRUE(source) << source.errorMessage();
    Expected<std::string> ptx = nvrtc->compileToPtx(*source, "reference.cu", arch);
    ASSERT_TRUE(ptx) << ptx.errorMessage();
    if (module)
      (void)driver->api().cuModuleUnload(module);
    module = nullptr;
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuModuleLoadDataEx(&module, ptx->c_str(), 0, nullptr, nullptr),
        "cuModuleLoadDataEx"));
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuModuleGetFunction(&forward, module, kReferenceForwardKernel),
        "cuModuleGetFunction(forward)"));
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuModuleGetFunction(&mean, module, kReferenceMeanKernel),
        "cuModuleGetFunction(mean)"));
    threads = options.threads;
  }

  /// Enqueues forward + mean on `stream` (does not synchronize).
  void launch(DeviceProblem &dp, const Problem &p, cu::Stream stream) {
    cu::DevicePtr x = dp.x.address(), w = dp.w.address(),
                  b = p.hasBias ? dp.bias.address() : 0, labels = dp.labels.address(),
                  lse = dp.lse.address(), rows = dp.lossRows.address(),
                  loss = dp.loss.address();
    long long n = p.n, v = p.v, d = p.d;
    void *forwardArgs[] = {&x, &w, &b, &labels, &lse, &rows, &n, &v, &d};
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuLaunchKernel(forward, static_cast<unsigned>(p.n), 1, 1, threads,
                                     1, 1, 0, stream, forwardArgs, nullptr),
        "cuLaunchKernel(forward)"));
    void *meanArgs[] = {&labels, &rows, &loss, &n};
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuLaunchKernel(mean, 1, 1, 1, threads, 1, 1, 0, stream,
                                     meanArgs, nullptr),
        "cuLaunchKernel(mean)"));
  }

  void synchronize(cu::Stream stream) {
    LOSSJIT_ASSERT_OK(driver->check(driver->api().cuStreamSynchronize(stream),
                                    "cuStreamSynchronize"));
  }

  cu::Module module = nullptr;
  cu::Function forward = nullptr, mean = nullptr;
  unsigned threads = 256;
};

} // namespace

TEST_F(ReferenceKernelTest, MatchesFp64Reference) {
  struct Case {
    const char *dtype, *labels;
    bool bias;
    int64_t n, v, d;
  } cases[] = {
      {"f32", "i64", false, 37, 1000, 64},
      {"f16", "i32", true, 19, 517, 96},   // V not a multiple of the block
      {"bf16", "i64", true, 8, 100, 33},   // V < threads: idle threads combine
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.dtype) + "/" + c.labels + (c.bias ? "/bias" : ""));
    ReferenceKernelOptions options;
    options.dtype = c.dtype;
    options.labelType = c.labels;
    options.bias = c.bias;
    options.ignoreIndex = kIgnore;
    ASSERT_NO_FATAL_FAILURE(load(options));
    Problem p = makeProblem(c.n, c.v, c.d, c.dtype, c.labels, c.bias, 1234);
    DeviceProblem dp(*driver, p);
    ASSERT_NO_FATAL_FAILURE(launch(dp, p, nullptr));
    ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));
    expectMatchesReference(download(dp, p), p);
  }
}

TEST_F(ReferenceKernelTest, BitwiseDeterministicAcrossLaunches) {
  ReferenceKernelOptions options;
  options.dtype = "f16";
  ASSERT_NO_FATAL_FAILURE(load(options));
  Problem p = makeProblem(64, 2048, 128, "f16", "i64", false, 7);
  DeviceProblem dp(*driver, p);
  Results first;
  for (int run = 0; run < 5; ++run) {
    // Poison outputs so a launch that writes nothing cannot pass.
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuMemsetD8(dp.lse.address(), 0xff, dp.lse.size()), "cuMemsetD8"));
    ASSERT_NO_FATAL_FAILURE(launch(dp, p, nullptr));
    ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));
    Results r = download(dp, p);
    if (run == 0) {
      first = r;
      expectMatchesReference(r, p);
    } else {
      EXPECT_TRUE(r == first) << "run " << run << " differs bitwise from run 0";
    }
  }
}

TEST_F(ReferenceKernelTest, RunsOnANonDefaultStream) {
  ReferenceKernelOptions options;
  ASSERT_NO_FATAL_FAILURE(load(options));
  Problem p = makeProblem(33, 700, 48, "f32", "i64", false, 99);
  DeviceProblem onDefault(*driver, p), onStream(*driver, p);
  ASSERT_NO_FATAL_FAILURE(launch(onDefault, p, nullptr));
  ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));
  cu::Stream stream = nullptr;
  LOSSJIT_ASSERT_OK(driver->check(
      driver->api().cuStreamCreate(&stream, cu::kStreamNonBlocking), "cuStreamCreate"));
  ASSERT_NO_FATAL_FAILURE(launch(onStream, p, stream));
  ASSERT_NO_FATAL_FAILURE(synchronize(stream));
  Results a = download(onDefault, p), b = download(onStream, p);
  (void)driver->api().cuStreamDestroy(stream);
  expectMatchesReference(b, p);
  EXPECT_TRUE(a == b) << "same kernel, same inputs, different stream: must match bitwise";
}

/// The memref-ABI bundle through KernelCache + CudaLauncher, as compiler
/// output will run.
class ReferenceBundleTest : public NvrtcGpuTest {};

TEST_F(ReferenceBundleTest, LauncherRunsTheBundle) {
  ReferenceKernelOptions options;
  options.dtype = "bf16";
  options.bias = true;
  Expected<KernelBundle> built = buildReferenceBundle(*nvrtc, options, arch);
  ASSERT_TRUE(built) << built.errorMessage();
  KernelCache cache(KernelCacheOptions{}); // memory only
  Expected<BundleRef> bundle =
      cache.getOrCompile(built->key, [&]() -> Expected<KernelBundle> { return *built; });
  ASSERT_TRUE(bundle) << bundle.errorMessage();

  Problem p = makeProblem(41, 1500, 80, "bf16", "i64", true, 5);
  DeviceProblem dp(*driver, p);
  // Bundle param order: x, w, bias, labels, loss, lse.
  std::vector<DeviceBuffer> params = {
      {dp.x.address(), p.n * p.d},   {dp.w.address(), p.v * p.d},
      {dp.bias.address(), p.v},      {dp.labels.address(), p.n},
      {dp.loss.address(), 1},        {dp.lse.address(), p.n}};
  std::vector<int64_t> dims = {p.n, p.v, p.d};
  CudaLauncher launcher(*driver);
  WorkspaceAllocator allocator = makeSynchronousAllocator(*driver);
  cu::Stream stream = nullptr;
  LOSSJIT_ASSERT_OK(driver->check(
      driver->api().cuStreamCreate(&stream, cu::kStreamNonBlocking), "cuStreamCreate"));
  LOSSJIT_ASSERT_OK(launcher.prepare(**bundle));
  LOSSJIT_ASSERT_OK(launcher.launch(**bundle, params, dims, stream, allocator));
  LOSSJIT_ASSERT_OK(driver->check(driver->api().cuStreamSynchronize(stream),
                                  "cuStreamSynchronize"));
  Results first = download(dp, p, /*withRows=*/false);
  expectMatchesReference(first, p);
  EXPECT_EQ(launcher.loadedBundleCount(), 1u);

  // Deterministic through the launcher too, and modules are reused.
  for (int run = 0; run < 3; ++run) {
    LOSSJIT_ASSERT_OK(launcher.launch(**bundle, params, dims, stream, allocator));
    LOSSJIT_ASSERT_OK(driver->check(driver->api().cuStreamSynchronize(stream),
                                    "cuStreamSynchronize"));
    EXPECT_TRUE(download(dp, p, false) == first) << "run " << run;
  }
  EXPECT_EQ(launcher.loadedBundleCount(), 1u);

  // Bad input is an error naming the argument, not a crash or a bad launch.
  std::vector<DeviceBuffer> wrong = params;
  wrong[1].elements = 7;
  Error e = launcher.launch(**bundle, wrong, dims, stream, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("param 'w': expected"), std::string::npos) << e.message();
  std::vector<int64_t> shortDims = {p.n, p.v};
  e = launcher.launch(**bundle, params, shortDims, stream, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("expected 3 values (N, V, D)"), std::string::npos);

  // More than 48 KiB of dynamic shared memory is opted into at load.
  KernelBundle big = *built;
  big.kernels[0].sharedBytes = 64 * 1024;
  big.key = computeCacheKey({"big-smem", "", "", arch, "", ""});
  Error bigError = launcher.launch(big, params, dims, stream, allocator);
  EXPECT_FALSE(static_cast<bool>(bigError)) << bigError.message();
  LOSSJIT_ASSERT_OK(driver->check(driver->api().cuStreamSynchronize(stream),
                                  "cuStreamSynchronize"));
  EXPECT_TRUE(download(dp, p, false) == first);
  (void)driver->api().cuStreamDestroy(stream);
}
