//===- cache_bench.cpp - Kernel cache lookup costs (not a test) -----------===//
//
// Measures the CPU-side costs docs/benchmarks.md reports: an in-memory cache hit (the
// per-call dispatch overhead), a warm disk load (first call in a new process:
// manifest parse + SHA-256 of every image), a cold insert (write + rename),
// the cache key itself, and per-launch argument preparation.
//
// Usage: lossjit-bench-cache [image_kib=256] [kernels=3]
//
//===----------------------------------------------------------------------===//

#include "runtime/FileUtil.h"
#include "runtime/KernelCache.h"
#include "runtime/LaunchPlan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace lossjit::runtime;
using Clock = std::chrono::steady_clock;

namespace {

KernelBundle makeBundle(const std::string &key, size_t imageBytes, int kernels) {
  KernelBundle b;
  b.key = key;
  b.llvmVersion = "22.1.8";
  b.op = "linear_cross_entropy";
  b.arch = "sm_80";
  b.options.set("dtype", "f16");
  b.tile.set("splits", 8);
  b.params = {{"x", "buffer", "f16", {"N", "D"}},
              {"w", "buffer", "f16", {"V", "D"}},
              {"labels", "buffer", "i64", {"N"}},
              {"loss", "buffer", "f32", {}},
              {"lse", "buffer", "f32", {"N"}}};
  b.dims = {"N", "V", "D"};
  b.constants = {{"S", 8}};
  b.workspaces = {{"part_m", "f32", "S*N"}, {"part_s", "f32", "S*N"}};
  for (int k = 0; k < kernels; ++k) {
    BundleKernel kernel;
    kernel.name = "kernel" + std::to_string(k);
    kernel.file = kernel.name + ".sm_80.ptx";
    kernel.grid = {"cdiv(N,4)", "S", "1"};
    kernel.block = {128, 1, 1};
    kernel.args = {"x", "w", "labels", "part_m", "part_s", "loss", "lse", "N", "V", "D"};
    // PTX-like text: varied bytes so nothing is trivially compressible.
    kernel.image.reserve(imageBytes);
    for (size_t i = 0; kernel.image.size() < imageBytes; ++i)
      kernel.image += "  fma.rn.f32 %f" + std::to_string(i % 997) + ", %f" +
                      std::to_string((i * 7) % 991) + ";\n";
    kernel.image.resize(imageBytes);
    b.kernels.push_back(std::move(kernel));
  }
  return b;
}

struct Timing {
  double meanUs, p50Us, p99Us;
};

/// Runs `body` in `batches` batches of `perBatch` calls; per-call times.
Timing measure(int batches, int perBatch, const std::function<void()> &body) {
  std::vector<double> samples;
  for (int b = 0; b < batches; ++b) {
    auto start = Clock::now();
    for (int i = 0; i < perBatch; ++i)
      body();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    samples.push_back(us / perBatch);
  }
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double s : samples)
    sum += s;
  return {sum / samples.size(), samples[samples.size() / 2],
          samples[std::min(samples.size() - 1, samples.size() * 99 / 100)]};
}

void row(const char *what, const Timing &t) {
  std::printf("| %-44s | %12.3f | %12.3f | %12.3f |\n", what, t.meanUs, t.p50Us, t.p99Us);
}

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "lossjit-bench-cache: %s\n", message.c_str());
  std::exit(1);
}

} // namespace

int main(int argc, char **argv) {
  size_t imageKiB = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  int kernels = argc > 2 ? std::atoi(argv[2]) : 3;
  if (imageKiB == 0 || kernels <= 0)
    die("usage: lossjit-bench-cache [image_kib>0] [kernels>0]");

  char pattern[] = "/tmp/lossjit-bench-cache-XXXXXX";
  if (!::mkdtemp(pattern))
    die("mkdtemp failed");
  std::string root = pattern;
  KernelCacheOptions options;
  options.directory = root;
  options.maxBytes = 0;

  CacheKeyInputs inputs;
  inputs.canonicalIr = std::string(20000, 'i');
  inputs.pipeline = "loss-make-precision-explicit,loss-fuse-linear-cross-entropy,loss-lower-to-gpu";
  inputs.tileConfig = "block_rows=4,threads=128,splits=8,matmul=simt,stages=1";
  inputs.arch = "sm_80";
  inputs.llvmVersion = "22.1.8";
  std::string key = computeCacheKey(inputs);
  KernelBundle bundle = makeBundle(key, imageKiB * 1024, kernels);
  auto compile = [&]() -> Expected<KernelBundle> { return bundle; };

  std::printf("lossjit kernel cache benchmark: %d kernel image(s) of %zu KiB, cache dir %s\n\n",
              kernels, imageKiB, root.c_str());
  std::printf("| %-44s | %12s | %12s | %12s |\n", "operation", "mean (us)", "p50 (us)",
              "p99 (us)");
  std::printf("|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(14, '-').c_str(),
              std::string(14, '-').c_str(), std::string(14, '-').c_str());

  row("computeCacheKey (20 KB IR)", measure(50, 200, [&] {
        volatile size_t n = computeCacheKey(inputs).size();
        (void)n;
      }));

  // Cold inserts: compile callback returns at once, so this is write+rename.
  int coldIndex = 0;
  row("cold insert (write entry + rename)", measure(20, 1, [&] {
        CacheKeyInputs other = inputs;
        other.pipeline += std::to_string(coldIndex++);
        std::string k = computeCacheKey(other);
        KernelCache cache(options);
        Expected<BundleRef> r = cache.getOrCompile(k, [&]() -> Expected<KernelBundle> {
          KernelBundle b = bundle;
          b.key = k;
          return b;
        });
        if (!r)
          die(r.errorMessage());
      }));

  {
    KernelCache cache(options);
    if (Expected<BundleRef> r = cache.getOrCompile(key, compile); !r)
      die(r.errorMessage());
  }
  row("warm disk load (new cache, verify hashes)", measure(50, 1, [&] {
        KernelCache cache(options);
        Expected<BundleRef> r = cache.getOrCompile(key, compile);
        if (!r)
          die(r.errorMessage());
      }));

  KernelCache cache(options);
  if (Expected<BundleRef> r = cache.getOrCompile(key, compile); !r)
    die(r.errorMessage());
  row("in-memory hit (getOrCompile)", measure(200, 5000, [&] {
        Expected<BundleRef> r = cache.getOrCompile(key, compile);
        if (!r)
          die(r.errorMessage());
      }));

  Expected<LaunchPlan> plan = LaunchPlan::build(bundle);
  if (!plan)
    die(plan.errorMessage());
  std::vector<int64_t> dims = {4096, 128256, 4096};
  std::vector<uint64_t> params = {1, 2, 3, 4, 5}, workspaces = {6, 7};
  PackedArgs args;
  row("launch prep (resolve dims + pack all args)", measure(200, 5000, [&] {
        Expected<ResolvedLaunch> r = plan->resolve(dims);
        if (!r)
          die(r.errorMessage());
        for (size_t k = 0; k < plan->numKernels(); ++k)
          if (Error e = plan->packArguments(k, *r, params, workspaces, args))
            die(e.message());
      }));

  KernelCacheStats s = cache.stats();
  std::printf("\nstats of the hot cache: memory hits %llu, disk hits %llu, compiles %llu\n",
              static_cast<unsigned long long>(s.memoryHits),
              static_cast<unsigned long long>(s.diskHits),
              static_cast<unsigned long long>(s.compiles));
  (void)removeTree(root);
  return 0;
}
