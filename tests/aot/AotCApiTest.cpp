//===- AotCApiTest.cpp - The generated C API against a fake driver ---------===//
//
// The C sources lossjit-aot generated at build time (tests/aot/CMakeLists.txt)
// are compiled into this test and linked against FakeCuda instead of libcuda.
// Checked here on every CI run, without a GPU:
//   * launch parity: for the same bundle, dims and buffers, the C API issues
//     exactly the launches the runtime's CudaLauncher issues (kernel, grid,
//     block, shared memory, stream and every 8-byte kernel parameter);
//   * the arch choice for devices old and new, by name too;
//   * every error path returns its status with a message, never exits;
//   * workspaces: caller-provided, default stream-ordered allocator, the
//     pool-less fallback and a custom allocator;
//   * the synthetic backward: derived symbols and per-chunk kernel groups.
//
//===----------------------------------------------------------------------===//

// Runtime headers first (see FakeCuda.h), then the generated ones.
#include "runtime/CudaLauncher.h"
#include "runtime/FileUtil.h"
#include "runtime/Json.h"
#include "runtime/KernelBundle.h"

#include "FakeCuda.h"
#include "tools/lossjit-aot/AotModel.h"

#include "aot_bf16_cluster_fused.h"
#include "aot_bf16_lend.h"
#include "aot_bf16_mma_warp.h"
#include "aot_bf16_spec.h"
#include "aot_bf16_sum_bias.h"
#include "aot_bf16_tma.h"
#include "aot_bf16_vocab.h"
#include "aot_f16_mean.h"
#include "aot_f16_mma.h"
#include "aot_f32_none.h"
#include "aot_f64_sum.h"
#include "aot_jsd_bf16.h"
#include "aot_kl_f16.h"
#include "aot_logprob_bf16.h"
#include "aot_static.h"
#include "synth.h"
#ifdef LOSSJIT_TEST_CUBIN
#include "aot_f16_cubin.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <functional>
#include <map>

using namespace lossjit;

namespace {

/// One generated C API behind a prefix-free interface.
struct CApi {
  std::string name;
  std::string dir; ///< the AOT output directory
  std::function<int(CUcontext, const char *)> create;
  std::function<int()> destroy;
  std::function<const char *()> handleArch;
  std::function<int(const char *op, CUstream, const std::vector<CUdeviceptr> &,
                    const std::vector<int64_t> &, CUdeviceptr, size_t)>
      run;
  std::function<size_t(const char *op, int64_t, int64_t, int64_t)> workspaceBytes;
  std::function<const char *()> lastError;
  std::function<int(void *alloc, void *release, void *user)> setAllocator;
};

// Binds <prefix>_* into a CApi; the handle lives in a static per prefix.
#define LOSSJIT_BIND_CAPI(P, DIR, BACKWARD)                                              \
  [] {                                                                                 \
    static P##_handle *handle = nullptr;                                               \
    CApi api;                                                                          \
    api.name = #P;                                                                     \
    api.dir = DIR;                                                                     \
    api.create = [](CUcontext c, const char *arch) {                                   \
      return static_cast<int>(P##_create_for_arch(c, arch, &handle));                  \
    };                                                                                 \
    api.destroy = [] {                                                                 \
      int s = static_cast<int>(P##_destroy(handle));                                   \
      handle = nullptr;                                                                \
      return s;                                                                        \
    };                                                                                 \
    api.handleArch = [] { return P##_handle_arch(handle); };                           \
    api.run = [](const char *op, CUstream s, const std::vector<CUdeviceptr> &b,        \
                 const std::vector<int64_t> &d, CUdeviceptr ws, size_t bytes) {        \
      if (std::string(op) == "forward")                                                \
        return static_cast<int>(P##_forward_v(handle, s, b.data(), int(b.size()),      \
                                              d.data(), int(d.size()), ws, bytes));    \
      BACKWARD##_RUN(P)                                                                \
      return -1;                                                                       \
    };                                                                                 \
    api.workspaceBytes = [](const char *op, int64_t n, int64_t v, int64_t d) {         \
      if (std::string(op) == "forward")                                                \
        return P##_forward_workspace_bytes(n, v, d);                                   \
      BACKWARD##_BYTES(P)                                                              \
      return P##_workspace_bytes(n, v, d);                                             \
    };                                                                                 \
    api.lastError = [] { return P##_last_error(); };                                   \
    api.setAllocator = [](void *a, void *r, void *u) {                                 \
      return static_cast<int>(P##_set_allocator(handle, (P##_alloc_fn)a,               \
                                                (P##_free_fn)r, u));                   \
    };                                                                                 \
    return api;                                                                        \
  }()
#define LOSSJIT_WITH_BACKWARD_RUN(P)                                                   \
  if (std::string(op) == "backward")                                                   \
    return static_cast<int>(P##_backward_v(handle, s, b.data(), int(b.size()),         \
                                           d.data(), int(d.size()), ws, bytes));
#define LOSSJIT_WITH_BACKWARD_BYTES(P)                                                 \
  if (std::string(op) == "backward")                                                   \
    return P##_backward_workspace_bytes(n, v, d);
// Variants built with --fused also have <prefix>_forward_backward*.
#define LOSSJIT_WITH_FUSED_RUN(P)                                                                  \
  LOSSJIT_WITH_BACKWARD_RUN(P)                                                                     \
  if (std::string(op) == "forward_backward")                                                       \
    return static_cast<int>(P##_forward_backward_v(handle, s, b.data(), int(b.size()), d.data(),   \
                                                   int(d.size()), ws, bytes));
#define LOSSJIT_WITH_FUSED_BYTES(P)                                                                \
  LOSSJIT_WITH_BACKWARD_BYTES(P)                                                                   \
  if (std::string(op) == "forward_backward")                                                       \
    return P##_forward_backward_workspace_bytes(n, v, d);
// Forward-only variants have no <prefix>_backward*: "backward" is not an op.
#define LOSSJIT_FORWARD_ONLY_RUN(P)
#define LOSSJIT_FORWARD_ONLY_BYTES(P)                                                  \
  if (std::string(op) == "backward")                                                   \
    return static_cast<size_t>(-1);

// The build-time variants are generated with their backward.
CApi f16Mean() { return LOSSJIT_BIND_CAPI(aot_f16_mean, AOT_DIR_f16_mean, LOSSJIT_WITH_FUSED); }
CApi bf16SumBias() {
  return LOSSJIT_BIND_CAPI(aot_bf16_sum_bias, AOT_DIR_bf16_sum_bias, LOSSJIT_WITH_BACKWARD);
}
CApi f32None() {
  return LOSSJIT_BIND_CAPI(aot_f32_none, AOT_DIR_f32_none, LOSSJIT_WITH_BACKWARD);
}
CApi f64Sum() {
  return LOSSJIT_BIND_CAPI(aot_f64_sum, AOT_DIR_f64_sum, LOSSJIT_WITH_BACKWARD);
}
CApi synth() { return LOSSJIT_BIND_CAPI(synth, "", LOSSJIT_WITH_BACKWARD); }
// The tensor-core forward (matmul=mma_sync): forward only.
CApi f16Mma() { return LOSSJIT_BIND_CAPI(aot_f16_mma, AOT_DIR_f16_mma, LOSSJIT_FORWARD_ONLY); }
CApi bf16MmaWarp() {
  return LOSSJIT_BIND_CAPI(aot_bf16_mma_warp, AOT_DIR_bf16_mma_warp, LOSSJIT_FORWARD_ONLY);
}

// Hopper's TMA kernels (sm_90a only, tile tma=1).
CApi bf16Tma() {
  return LOSSJIT_BIND_CAPI(aot_bf16_tma, AOT_DIR_bf16_tma, LOSSJIT_WITH_BACKWARD);
}
// The same with a producer warp (tile tma=2).
CApi bf16Spec() {
  return LOSSJIT_BIND_CAPI(aot_bf16_spec, AOT_DIR_bf16_spec, LOSSJIT_WITH_BACKWARD);
}

// The same with a producer warpgroup that lends its registers (tma=3).
CApi bf16Lend() {
  return LOSSJIT_BIND_CAPI(aot_bf16_lend, AOT_DIR_bf16_lend, LOSSJIT_WITH_BACKWARD);
}

// The backward in vocabulary chunks, on a small workspace budget.
CApi bf16Vocab() {
  return LOSSJIT_BIND_CAPI(aot_bf16_vocab, AOT_DIR_bf16_vocab, LOSSJIT_WITH_FUSED);
}

// The fused op on 128x256 tiles in persistent clusters of two (tma=3,
// cluster=2, persistent=132), in row chunks of a small workspace budget.
CApi bf16ClusterFused() {
  return LOSSJIT_BIND_CAPI(aot_bf16_cluster_fused, AOT_DIR_bf16_cluster_fused, LOSSJIT_WITH_FUSED);
}

// A graph with static extents (tests/aot/Inputs/static_forward.mlir).
CApi staticForward() {
  return LOSSJIT_BIND_CAPI(aot_static, AOT_DIR_static, LOSSJIT_FORWARD_ONLY);
}

// The log-prob preset (lse, label_logit, entropy and the derived backward).
CApi logProbBf16() {
  return LOSSJIT_BIND_CAPI(aot_logprob_bf16, AOT_DIR_logprob_bf16, LOSSJIT_WITH_BACKWARD);
}

std::vector<CApi> realApis() {
  return {f16Mean(),     bf16SumBias(), f32None(),    f64Sum(),
          f16Mma(),      bf16MmaWarp(), logProbBf16()};
}

/// The bundle directory the index lists for (op, arch).
std::string bundleDir(const std::string &dir, const std::string &role, const std::string &arch) {
  auto text = runtime::readFile(dir + "/manifest.json");
  EXPECT_TRUE(text) << text.errorMessage();
  auto index = runtime::parseJson(*text);
  EXPECT_TRUE(index) << index.errorMessage();
  for (const runtime::JsonValue &op : index->find("ops")->getArray())
    if (op.find("role")->getString() == role)
      for (const runtime::JsonValue &a : op.find("arches")->getArray())
        if (a.find("arch")->getString() == arch)
          return dir + "/" + a.find("dir")->getString();
  if (role == "forward")
    ADD_FAILURE() << "no forward bundle for " << arch << " in " << dir;
  return {};
}

std::string baseArch(const std::string &handleArch) {
  return handleArch.substr(0, handleArch.find(':'));
}

class AotCApiTest : public ::testing::Test {
protected:
  void SetUp() override { fakecuda::reset(); }
  void TearDown() override { EXPECT_EQ(fakecuda::state().contextDepth, 0); }
};

CUstream testStream() { return reinterpret_cast<CUstream>(uintptr_t(0xabc0)); }

std::vector<CUdeviceptr> fakeBuffers(size_t n) {
  std::vector<CUdeviceptr> b;
  for (size_t i = 0; i < n; ++i)
    b.push_back(0x100000000ull * (i + 1));
  return b;
}

/// Runs the runtime's launcher on `bundle` against the fake, workspaces
/// carved from `base` exactly as the C API lays them out.
std::vector<fakecuda::Launch> runtimeLaunches(const runtime::KernelBundle &bundle,
                                              const std::vector<CUdeviceptr> &buffers,
                                              const std::vector<int64_t> &dims,
                                              CUdeviceptr base, runtime::Error *error) {
  fakecuda::state().launches.clear();
  auto driver = runtime::CudaDriver::fromApi(fakecuda::runtimeApi());
  runtime::CudaLauncher launcher(*driver);
  std::vector<runtime::DeviceBuffer> params;
  for (CUdeviceptr b : buffers)
    params.push_back({b, -1});
  uint64_t next = 0;
  runtime::WorkspaceAllocator allocator;
  allocator.allocate = [&](size_t bytes,
                           runtime::cu::Stream) -> runtime::Expected<runtime::cu::DevicePtr> {
    next = (next + 255) / 256 * 256;
    uint64_t address = base + next;
    next += bytes;
    return address;
  };
  allocator.release = [](runtime::cu::DevicePtr, size_t, runtime::cu::Stream) {};
  *error = launcher.launch(bundle, params, dims,
                           reinterpret_cast<runtime::cu::Stream>(testStream()), allocator);
  return fakecuda::state().launches;
}

/// A fresh fake driver whose device has compute capability (major, minor).
void resetFakeDevice(int major, int minor) {
  fakecuda::reset();
  fakecuda::state().major = major;
  fakecuda::state().minor = minor;
}

/// `role`'s launches through the C API, with a caller-provided workspace at
/// a fixed base, after checking they equal the runtime launcher's for the
/// same bundle, buffers and dims (empty, with a failure, when either fails).
std::vector<fakecuda::Launch> launchesOfBoth(const CApi &api, const char *role,
                                             const runtime::KernelBundle &bundle,
                                             const std::vector<CUdeviceptr> &buffers,
                                             const std::vector<int64_t> &dims) {
  const CUdeviceptr base = 0x5000000000ull;
  size_t bytes = api.workspaceBytes(role, dims[0], dims[1], dims[2]);
  fakecuda::state().launches.clear();
  if (api.run(role, testStream(), buffers, dims, base, bytes) != 0) {
    ADD_FAILURE() << api.lastError();
    return {};
  }
  std::vector<fakecuda::Launch> mine = fakecuda::state().launches;
  runtime::Error error = runtime::Error::success();
  std::vector<fakecuda::Launch> theirs = runtimeLaunches(bundle, buffers, dims, base, &error);
  if (error) {
    ADD_FAILURE() << error.message();
    return {};
  }
  EXPECT_EQ(mine, theirs);
  return mine;
}

TEST_F(AotCApiTest, LaunchesMatchTheRuntimeLauncher) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 1, 1}, {7, 1000, 64}, {130, 8191, 96}, {4096, 128256, 4096}, {0, 32000, 128},
      {65, 5, 3}, {4096, 32000, 1024}};
  for (const CApi &api : realApis()) {
    for (auto [major, minor] : {std::pair{8, 0}, std::pair{8, 9}, std::pair{9, 0}}) {
      SCOPED_TRACE(api.name + " on sm_" + std::to_string(major) + std::to_string(minor));
      resetFakeDevice(major, minor);
      ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
      std::string arch = baseArch(api.handleArch());
      for (const char *role : {"forward", "backward"}) {
      std::string dir = bundleDir(api.dir, role, arch);
      if (dir.empty())
        continue;
      auto bundle = runtime::readBundleDirectory(dir);
      ASSERT_TRUE(bundle) << bundle.errorMessage();
      std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
      for (const std::vector<int64_t> &dims : shapes) {
        SCOPED_TRACE(std::string(role) + " N=" + std::to_string(dims[0]) +
                     " V=" + std::to_string(dims[1]) + " D=" + std::to_string(dims[2]));
        // Caller-provided workspace.
        const CUdeviceptr base = 0x5000000000ull;
        size_t bytes = api.workspaceBytes(role, dims[0], dims[1], dims[2]);
        ASSERT_NE(bytes, static_cast<size_t>(-1));
        fakecuda::state().launches.clear();
        ASSERT_EQ(api.run(role, testStream(), buffers, dims, base, bytes), 0)
            << api.lastError();
        std::vector<fakecuda::Launch> mine = fakecuda::state().launches;
        runtime::Error error = runtime::Error::success();
        std::vector<fakecuda::Launch> theirs = runtimeLaunches(*bundle, buffers, dims, base, &error);
        ASSERT_FALSE(error) << error.message();
        ASSERT_EQ(mine.size(), theirs.size());
        for (size_t i = 0; i < mine.size(); ++i) {
          EXPECT_EQ(mine[i].kernel, theirs[i].kernel);
          EXPECT_EQ(mine[i].grid, theirs[i].grid) << mine[i].kernel;
          EXPECT_EQ(mine[i].block, theirs[i].block) << mine[i].kernel;
          EXPECT_EQ(mine[i].sharedBytes, theirs[i].sharedBytes) << mine[i].kernel;
          EXPECT_EQ(mine[i].stream, testStream());
          EXPECT_EQ(mine[i].params, theirs[i].params) << mine[i].kernel;
          EXPECT_EQ(mine[i].target, arch);
        }
        if (dims[0] > 0) {
          EXPECT_FALSE(mine.empty());
        }

        // Allocator path: one stream-ordered block, carved the same way.
        size_t allocationsBefore = fakecuda::state().allocations.size();
        fakecuda::state().launches.clear();
        ASSERT_EQ(api.run(role, testStream(), buffers, dims, 0, 0), 0) << api.lastError();
        mine = fakecuda::state().launches;
        if (bytes > 0) {
          ASSERT_EQ(fakecuda::state().allocations.size(), allocationsBefore + 1);
          auto [address, size] = fakecuda::state().allocations.back();
          EXPECT_EQ(size, bytes);
          EXPECT_EQ(fakecuda::state().frees.back(), address);
          theirs = runtimeLaunches(*bundle, buffers, dims, address, &error);
          ASSERT_FALSE(error) << error.message();
          EXPECT_EQ(mine, theirs);
        } else {
          EXPECT_EQ(fakecuda::state().allocations.size(), allocationsBefore);
        }
      }
      }
      EXPECT_EQ(api.destroy(), 0);
      EXPECT_EQ(fakecuda::state().unloads, static_cast<int>(fakecuda::state().modules.size()));
    }
  }
}

TEST_F(AotCApiTest, TensorMapsMatchTheRuntimeLauncher) {
  // The forward and the chunked backward of the TMA build on a Hopper: the
  // same launches and parameters (a map's recorded parameter is its first 8
  // bytes: the address the fake encoded) and the same cuTensorMapEncodeTiled
  // calls. D = 100 (200-byte rows) cannot be mapped: zeros, ready 0, no
  // encode — in both. Nor can the backward's dZ maps at V = 8191 (rows of
  // V): dX and dW fall back there, while the logits kernel keeps its maps.
  // tma=2 (bf16Spec) adds the producer warp to the tensor-core kernels'
  // blocks: the C API launches them with the plan's 288 threads too, and
  // its persistent backward products on the plan's min(tiles, 5) blocks;
  // tma=3 (bf16Lend) a producer warpgroup: 384 threads. The row kernels
  // keep the consumers' 256, but lce_combine's warp.
  for (const CApi &api : {bf16Tma(), bf16Spec(), bf16Lend()}) {
    SCOPED_TRACE(api.name);
    const bool lends = api.name.find("lend") != std::string::npos;
    const bool specialized = lends || api.name.find("spec") != std::string::npos;
    const unsigned productThreads = lends ? 384u : specialized ? 288u : 256u;
    fakecuda::reset();
    ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
    EXPECT_EQ(baseArch(api.handleArch()), "sm_90a");
    for (const char *role : {"forward", "backward"}) {
      auto bundle = runtime::readBundleDirectory(bundleDir(api.dir, role, "sm_90a"));
      ASSERT_TRUE(bundle) << bundle.errorMessage();
      const bool backward = std::string(role) == "backward";
      // x, w; the backward's dX also dZ and Wᵀ, its dW dZᵀ and Xᵀ.
      ASSERT_EQ(bundle->tensorMaps.size(), backward ? 6u : 2u) << role;
      std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
      for (const std::vector<int64_t> &dims :
           std::vector<std::vector<int64_t>>{{130, 8191, 96}, {7, 1000, 64}, {9, 300, 100}}) {
        SCOPED_TRACE(std::string(role) + " D=" + std::to_string(dims[2]));
        const CUdeviceptr base = 0x5000000000ull;
        size_t bytes = api.workspaceBytes(role, dims[0], dims[1], dims[2]);
        fakecuda::state().launches.clear();
        fakecuda::state().tensorMaps.clear();
        ASSERT_EQ(api.run(role, testStream(), buffers, dims, base, bytes), 0) << api.lastError();
        std::vector<fakecuda::Launch> mine = fakecuda::state().launches;
        auto mineMaps = fakecuda::state().tensorMaps;
        fakecuda::state().tensorMaps.clear();
        runtime::Error error = runtime::Error::success();
        std::vector<fakecuda::Launch> theirs =
            runtimeLaunches(*bundle, buffers, dims, base, &error);
        ASSERT_FALSE(error) << error.message();
        EXPECT_EQ(mine, theirs);
        // The same maps encoded (the runtime's cache skips a repeated one:
        // dX's Wᵀ boxes equal w's 64 x 64 ones here).
        using Calls = std::set<std::array<uint64_t, 9>>;
        EXPECT_EQ(Calls(mineMaps.begin(), mineMaps.end()),
                  Calls(fakecuda::state().tensorMaps.begin(), fakecuda::state().tensorMaps.end()));
        const bool mapped = dims[2] % 8 == 0 && (!backward || dims[1] % 8 == 0);
        // x and w: rows of D bf16, boxes of 64 k (encoded in order until one
        // cannot be).
        if (mapped) {
          EXPECT_EQ(mineMaps.size(), bundle->tensorMaps.size());
        }
        if (dims[2] % 8) {
          EXPECT_TRUE(mineMaps.empty());
        }
        if (!mineMaps.empty()) {
          EXPECT_EQ(mineMaps[0][0], buffers[0]);
          EXPECT_EQ(mineMaps[0][2], uint64_t(dims[0]));
          EXPECT_EQ(mineMaps[0][3], uint64_t(dims[2] * 2));
          EXPECT_EQ(mineMaps[0][4], 64u);
          EXPECT_EQ(mineMaps[1][2], uint64_t(dims[1]));
        }
        // The logits kernel gets x's map (its first 8 bytes: x's address, next
        // to the two of x's memref) whenever D allows, whatever V; dX's Wᵀ
        // map only when V does too.
        bool sawLogits = false;
        for (const fakecuda::Launch &l : mine) {
          auto uses = [&](CUdeviceptr address) {
            return std::count(l.params.begin(), l.params.end(), address);
          };
          const bool tensorCores = l.kernel == "lce_partial" || l.kernel == "lce_bwd_dz" ||
                                   l.kernel == "lce_bwd_dx" || l.kernel == "lce_bwd_dw" ||
                                   l.kernel == "lce_bwd_dw_single";
          // lce_combine: a warp a block, a thread per row.
          const unsigned rowThreads = l.kernel == "lce_combine" ? 32u : 256u;
          EXPECT_EQ(l.block[0], tensorCores ? productThreads : rowThreads) << l.kernel;
          // bf16Spec's and bf16Lend's backward products are persistent: at most 5 blocks,
          // each sweeping several tiles.
          if (specialized && tensorCores && l.kernel != "lce_partial") {
            EXPECT_LE(l.grid[0], 5u) << l.kernel;
            EXPECT_EQ(l.grid[1], 1u) << l.kernel;
          }
          if (l.kernel == "lce_partial" || l.kernel == "lce_bwd_dz") {
            sawLogits = true;
            EXPECT_EQ(uses(buffers[0]), dims[2] % 8 ? 2 : 3) << l.kernel;
          }
          if (l.kernel == "lce_bwd_dx") {
            EXPECT_EQ(uses(buffers[1]), mapped ? 3 : 2) << l.kernel;
          }
        }
        EXPECT_TRUE(sawLogits);
      }
    }
    EXPECT_EQ(api.destroy(), 0);
  }
}

TEST_F(AotCApiTest, VocabChunksMatchTheRuntimeLauncher) {
  // Strategy vocab_chunked: the bundle's chunk_dim is V, and the C API runs
  // its per-chunk groups over column ranges of V exactly as the runtime's
  // launcher does — on sm_80 (mma.sync) and on a Hopper (TMA maps of the
  // [N, C] dZ workspace) — with as many chunks as the plan's C gives.
  const CApi api = bf16Vocab();
  for (auto [major, minor] : {std::pair{8, 0}, std::pair{9, 0}}) {
    SCOPED_TRACE("sm_" + std::to_string(major) + std::to_string(minor));
    resetFakeDevice(major, minor);
    ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
    const std::string arch = baseArch(api.handleArch());
    EXPECT_EQ(arch, major == 9 ? "sm_90a" : "sm_80");
    auto bundle = runtime::readBundleDirectory(bundleDir(api.dir, "backward", arch));
    ASSERT_TRUE(bundle) << bundle.errorMessage();
    EXPECT_EQ(bundle->chunkDim, "V");
    auto plan = runtime::LaunchPlan::build(*bundle);
    ASSERT_TRUE(plan) << plan.errorMessage();
    std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
    for (const std::vector<int64_t> &dims : std::vector<std::vector<int64_t>>{
             {130, 8191, 96}, {300, 5000, 64}, {96, 3000, 136}, {0, 300, 8}}) {
      SCOPED_TRACE("N=" + std::to_string(dims[0]) + " V=" + std::to_string(dims[1]) +
                   " D=" + std::to_string(dims[2]));
      auto resolved = plan->resolve(dims);
      ASSERT_TRUE(resolved) << resolved.errorMessage();
      EXPECT_EQ(resolved->chunkRows, dims[1]) << "chunks split V";
      const int64_t chunks = (dims[1] + resolved->chunkSize - 1) / resolved->chunkSize;
      std::vector<fakecuda::Launch> mine = launchesOfBoth(api, "backward", *bundle, buffers, dims);
      // dW is launched once per chunk whatever N (N = 0: zeros), dZ only
      // with rows to form.
      auto launches = [&](const char *kernel) {
        return std::count_if(mine.begin(), mine.end(),
                             [&](const fakecuda::Launch &l) { return l.kernel == kernel; });
      };
      EXPECT_GT(chunks, dims[0] ? 1 : 0);
      EXPECT_EQ(launches("lce_bwd_dw"), chunks);
      EXPECT_EQ(launches("lce_bwd_dz"), dims[0] ? chunks : 0);
      EXPECT_EQ(launches("lce_bwd_finish_dx"), dims[0] ? 1 : 0);
    }
    EXPECT_EQ(api.destroy(), 0);
  }
}

TEST_F(AotCApiTest, FusedOpMatchesTheRuntimeLauncher) {
  // lossjit-aot --fused: <prefix>_forward_backward (loss, lse and the
  // gradients of grad_loss = 1 in one call) launches what the runtime's
  // launcher launches for its bundle — the default tiles on sm_80 and a
  // Hopper in row chunks, auto's Hopper tile in vocabulary chunks, and the
  // 128x256 tiles in clusters of two — in both workspace modes, in as many
  // chunks as the plan gives, and with no rows still writes grad_w.
  struct Case {
    CApi api;
    int major;
    const char *arch, *chunkDim;
    bool benchmarkShape; ///< also N=4096 V=128256 D=4096 (not on tiny budgets)
  };
  const std::vector<Case> cases = {{f16Mean(), 8, "sm_80", "N", true},
                                   {f16Mean(), 9, "sm_90a", "N", true},
                                   {bf16Vocab(), 8, "sm_80", "V", false},
                                   {bf16Vocab(), 9, "sm_90a", "V", false},
                                   {bf16ClusterFused(), 9, "sm_90a", "N", false}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.api.name + " on sm_" + std::to_string(c.major) + "0");
    resetFakeDevice(c.major, 0);
    ASSERT_EQ(c.api.create(nullptr, nullptr), 0) << c.api.lastError();
    ASSERT_EQ(baseArch(c.api.handleArch()), c.arch);
    const std::string dir = bundleDir(c.api.dir, "forward_backward", c.arch);
    ASSERT_FALSE(dir.empty()) << "no forward_backward bundle";
    auto bundle = runtime::readBundleDirectory(dir);
    ASSERT_TRUE(bundle) << bundle.errorMessage();
    EXPECT_EQ(bundle->chunkDim.empty() ? "N" : bundle->chunkDim, c.chunkDim);
    auto plan = runtime::LaunchPlan::build(*bundle);
    ASSERT_TRUE(plan) << plan.errorMessage();
    const std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
    size_t gradW = 0;
    while (gradW < bundle->params.size() && bundle->params[gradW].name != "grad_w")
      ++gradW;
    ASSERT_LT(gradW, buffers.size()) << "the fused op writes grad_w";
    int severalChunks = 0;
    std::vector<std::vector<int64_t>> shapes = {
        {130, 8191, 96}, {1, 3, 1}, {300, 5000, 64}, {0, 300, 8}};
    if (c.benchmarkShape)
      shapes.push_back({4096, 128256, 4096});
    for (const std::vector<int64_t> &dims : shapes) {
      SCOPED_TRACE("N=" + std::to_string(dims[0]) + " V=" + std::to_string(dims[1]) +
                   " D=" + std::to_string(dims[2]));
      auto resolved = plan->resolve(dims);
      ASSERT_TRUE(resolved) << resolved.errorMessage();
      const int64_t extent = c.chunkDim == std::string("V") ? dims[1] : dims[0];
      const int64_t chunks = (extent + resolved->chunkSize - 1) / resolved->chunkSize;
      severalChunks += chunks > 1;
      // The caller's workspace (launchesOfBoth), then the allocator's.
      std::vector<fakecuda::Launch> mine =
          launchesOfBoth(c.api, "forward_backward", *bundle, buffers, dims);
      ASSERT_FALSE(mine.empty()) << "grad_w is written even without rows";
      const size_t bytes = c.api.workspaceBytes("forward_backward", dims[0], dims[1], dims[2]);
      ASSERT_NE(bytes, static_cast<size_t>(-1));
      size_t allocations = fakecuda::state().allocations.size();
      fakecuda::state().launches.clear();
      ASSERT_EQ(c.api.run("forward_backward", testStream(), buffers, dims, 0, 0), 0)
          << c.api.lastError();
      EXPECT_EQ(fakecuda::state().allocations.size(), allocations + (bytes ? 1 : 0));
      if (bytes) {
        runtime::Error error = runtime::Error::success();
        auto theirs = runtimeLaunches(*bundle, buffers, dims,
                                      fakecuda::state().allocations.back().first, &error);
        ASSERT_FALSE(error) << error.message();
        EXPECT_EQ(fakecuda::state().launches, theirs);
      }
      // Some launch names grad_w (or, with 16-bit storage and several
      // chunks, the f32 accumulator a later launch rounds into it).
      EXPECT_TRUE(std::any_of(mine.begin(), mine.end(), [&](const fakecuda::Launch &l) {
        return std::find(l.params.begin(), l.params.end(), buffers[gradW]) != l.params.end();
      })) << "nothing writes grad_w";
    }
    EXPECT_GE(severalChunks, 1) << "no shape took several chunks";
    EXPECT_EQ(c.api.destroy(), 0);
  }
}

// Persistent products launch at most the blocks the device holds at once:
// whole clusters by cuOccupancyMaxActiveClusters, else blocks per SM times
// SMs, asked at create after each kernel's shared-memory opt-in — exactly
// the runtime launcher's grids (launchesOfBoth). A query that fails keeps
// the plan's grids, in both.
TEST_F(AotCApiTest, PersistentGridsTakeTheCoResidentBlocks) {
  struct Case {
    CApi api;
    const char *role;
    unsigned cluster;
  };
  for (const Case &c : {Case{bf16Spec(), "backward", 1}, Case{bf16Lend(), "backward", 1},
                        Case{bf16ClusterFused(), "forward_backward", 2}}) {
    for (bool queryFails : {false, true}) {
      SCOPED_TRACE(c.api.name + (queryFails ? ", the query fails" : ""));
      resetFakeDevice(9, 0);
      // Four blocks at once: 2 SMs of two blocks, or two clusters of two
      // (a count without the SMs, the blocks per SM or the cluster's blocks
      // would be 2).
      fakecuda::state().multiprocessors = 2;
      fakecuda::state().blocksPerSm = 2;
      fakecuda::state().activeClusters = 2;
      if (queryFails)
        fakecuda::state().occupancyResult = CUDA_ERROR_INVALID_VALUE;
      ASSERT_EQ(c.api.create(nullptr, nullptr), 0) << c.api.lastError();
      auto bundle = runtime::readBundleDirectory(bundleDir(c.api.dir, c.role, "sm_90a"));
      ASSERT_TRUE(bundle) << bundle.errorMessage();
      auto plan = runtime::LaunchPlan::build(*bundle);
      ASSERT_TRUE(plan) << plan.errorMessage();
      std::set<std::string> persistent;
      for (const runtime::BundleKernel &k : bundle->kernels)
        if (k.persistent) {
          persistent.insert(k.name);
          EXPECT_EQ(k.cluster, c.cluster) << k.name;
        }
      ASSERT_FALSE(persistent.empty());
      // The create asked of every persistent kernel it loaded.
      std::set<std::string> asked;
      for (const auto &q : fakecuda::state().occupancyQueries)
        asked.insert(q.function);
      EXPECT_TRUE(std::includes(asked.begin(), asked.end(), persistent.begin(), persistent.end()));
      const std::vector<int64_t> dims = {300, 5000, 64};
      auto resolved = plan->resolve(dims);
      ASSERT_TRUE(resolved) << resolved.errorMessage();
      uint32_t planned = 0;
      for (size_t k = 0; k < bundle->kernels.size(); ++k)
        if (bundle->kernels[k].persistent)
          planned = std::max(planned, resolved->kernels[k].grid[0]);
      ASSERT_GT(planned, 4u) << "the plan's grids fit anyway: the test shows nothing";
      const std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
      std::vector<fakecuda::Launch> mine = launchesOfBoth(c.api, c.role, *bundle, buffers, dims);
      ASSERT_FALSE(mine.empty());
      uint32_t most = 0;
      for (const fakecuda::Launch &l : mine)
        if (persistent.count(l.kernel)) {
          most = std::max(most, l.grid[0]);
          EXPECT_EQ(l.grid[0] % c.cluster, 0u) << l.kernel;
        }
      if (queryFails)
        EXPECT_EQ(most, planned);
      else
        EXPECT_EQ(most, 4u);
      // Both launchers asked after the shared-memory opt-in (before it the
      // driver would count the 48 KiB default), in clusters over one
      // cluster.
      ASSERT_FALSE(fakecuda::state().occupancyQueries.empty());
      for (const auto &q : fakecuda::state().occupancyQueries) {
        EXPECT_TRUE(q.optedIn) << q.function;
        EXPECT_EQ(q.clusterGridX, c.cluster > 1 ? c.cluster : 0u) << q.function;
      }
      EXPECT_EQ(c.api.destroy(), 0);
    }
  }
}

TEST_F(AotCApiTest, NoRowsStillZeroTheWeightGradients) {
  // Issue 16: with N = 0 no per-chunk kernel runs, and with f32 storage
  // lce_bwd_dw is what wrote grad_w, so grad_w (torch.empty_like) was left as
  // allocated. lce_bwd_zero, launched before the chunks when N = 0, zeroes
  // the sums (grad_w/grad_bias themselves for f32, the accumulators
  // lce_bwd_finish rounds otherwise), on the C API and the runtime launcher
  // alike. With rows lce_bwd_dw starts the sums at the first chunk, so
  // lce_bwd_zero (grid × (1 − min(N, 1))) launches no block: no pass zeroes
  // the V × D accumulators.
  const std::vector<int64_t> dims = {0, 1000, 64}, rows = {5, 1000, 64};
  for (const CApi &api : realApis()) {
    SCOPED_TRACE(api.name);
    fakecuda::reset();
    ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
    std::string arch = baseArch(api.handleArch());
    std::string dir = bundleDir(api.dir, "backward", arch);
    if (dir.empty() && api.name.find("mma") != std::string::npos) {
      EXPECT_EQ(api.destroy(), 0); // the tensor-core C APIs are forward-only so far
      continue;
    }
    ASSERT_FALSE(dir.empty());
    auto bundle = runtime::readBundleDirectory(dir);
    ASSERT_TRUE(bundle) << bundle.errorMessage();
    std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
    std::vector<fakecuda::Launch> mine = launchesOfBoth(api, "backward", *bundle, buffers, dims);
    ASSERT_FALSE(mine.empty());
    auto find = [&](const std::string &name) {
      return std::find_if(mine.begin(), mine.end(),
                          [&](const fakecuda::Launch &l) { return l.kernel == name; });
    };
    auto zero = find("lce_bwd_zero"), finish = find("lce_bwd_finish");
    ASSERT_NE(zero, mine.end()) << "nothing zeroes the dW sums when N = 0";
    ASSERT_GE(zero->params.size(), 4u);
    EXPECT_EQ(zero->params[3], uint64_t(dims[1] * dims[2])) << "V*D elements";
    if (finish != mine.end()) {
      EXPECT_LT(zero, finish);
      EXPECT_EQ(zero->params[0], finish->params[0]) << "the accumulator finish rounds";
    } else {
      size_t gradW = 0;
      while (gradW < bundle->params.size() && bundle->params[gradW].name != "grad_w")
        ++gradW;
      ASSERT_LT(gradW, buffers.size());
      EXPECT_EQ(zero->params[0], buffers[gradW]) << "f32: grad_w itself";
    }
    // 16-bit storage: f32 accumulators, which lce_bwd_finish rounded.
    const bool accumulates = finish != mine.end();
    mine = launchesOfBoth(api, "backward", *bundle, buffers, rows);
    EXPECT_EQ(find("lce_bwd_zero"), mine.end()) << "a zeroing pass with rows";
    // Five rows are one chunk: with accumulators it is rounded in
    // lce_bwd_dw_single (OneChunkRoundsTheWeightGradientItself).
    EXPECT_EQ(find("lce_bwd_dw") != mine.end(), !accumulates);
    EXPECT_EQ(find("lce_bwd_dw_single") != mine.end(), accumulates);
    EXPECT_EQ(api.destroy(), 0);
  }
}

TEST_F(AotCApiTest, OneChunkRoundsTheWeightGradientItself) {
  // 16-bit storage sums dW and db in f32 accumulators (V × D: 2 GiB at a
  // Llama-3 head) that lce_bwd_finish rounds. Where the rows fit one chunk,
  // lce_bwd_dw_single rounds the sums straight into grad_w instead: the
  // accumulators take no workspace, and lce_bwd_dw and lce_bwd_finish launch
  // nothing. With several chunks it is the other way round. The C API and
  // the runtime launcher alike, SIMT and Hopper bundles; f32 storage (no
  // accumulators) never launches the single kernel.
  const std::vector<int64_t> one = {5, 1000, 64}, several = {4096, 128256, 64};
  std::vector<std::pair<CApi, int>> apis;
  for (const CApi &api : realApis())
    apis.push_back({api, 8});
  for (const CApi &api : {f16Mean(), bf16Tma(), bf16Spec(), bf16Lend()})
    apis.push_back({api, 9});
  int checked = 0;
  for (const auto &[api, major] : apis) {
    SCOPED_TRACE(api.name + " on sm_" + std::to_string(major) + "0");
    resetFakeDevice(major, 0);
    ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
    std::string dir = bundleDir(api.dir, "backward", baseArch(api.handleArch()));
    if (dir.empty()) {
      EXPECT_EQ(api.destroy(), 0); // forward-only
      continue;
    }
    auto bundle = runtime::readBundleDirectory(dir);
    ASSERT_TRUE(bundle) << bundle.errorMessage();
    auto plan = runtime::LaunchPlan::build(*bundle);
    ASSERT_TRUE(plan) << plan.errorMessage();
    size_t accumulator = plan->numWorkspaces(), biasAccumulator = plan->numWorkspaces();
    for (size_t i = 0; i < plan->numWorkspaces(); ++i) {
      if (plan->workspaceName(i) == "dw_acc")
        accumulator = i;
      if (plan->workspaceName(i) == "db_acc")
        biasAccumulator = i;
    }
    std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
    for (const std::vector<int64_t> &dims : {one, several}) {
      SCOPED_TRACE("N=" + std::to_string(dims[0]));
      auto resolved = plan->resolve(dims);
      ASSERT_TRUE(resolved) << resolved.errorMessage();
      std::vector<fakecuda::Launch> mine = launchesOfBoth(api, "backward", *bundle, buffers, dims);
      ASSERT_FALSE(mine.empty());
      auto launches = [&](const char *kernel) {
        return std::count_if(mine.begin(), mine.end(),
                             [&](const fakecuda::Launch &l) { return l.kernel == kernel; });
      };
      if (accumulator == plan->numWorkspaces()) {
        EXPECT_EQ(launches("lce_bwd_dw_single"), 0) << "no accumulators to spare";
        continue;
      }
      const bool single = dims == one;
      const int64_t chunks = (dims[0] + resolved->chunkSize - 1) / resolved->chunkSize;
      EXPECT_EQ(chunks > 1, !single);
      EXPECT_EQ(launches("lce_bwd_dw_single"), single ? 1 : 0);
      EXPECT_EQ(launches("lce_bwd_dw"), single ? 0 : chunks);
      EXPECT_EQ(launches("lce_bwd_finish"), single ? 0 : 1);
      EXPECT_EQ(resolved->workspaceBytes[accumulator],
                single ? 0u : uint64_t(dims[1] * dims[2]) * 4u)
          << "the f32 dW accumulator";
      if (biasAccumulator < plan->numWorkspaces()) {
        EXPECT_EQ(resolved->workspaceBytes[biasAccumulator], single ? 0u : uint64_t(dims[1]) * 4u)
            << "the f32 db accumulator";
      }
      ++checked;
    }
    EXPECT_EQ(api.destroy(), 0);
  }
  EXPECT_GE(checked, 8) << "too few bundles with accumulators";
}

TEST_F(AotCApiTest, ArchChoice) {
  CApi api = f16Mean(); // sm_80, sm_90, sm_90a
  struct Case {
    int major, minor;
    const char *want;
    const char *expect; // nullptr: no compatible arch
  };
  const Case cases[] = {
      {8, 0, nullptr, "sm_80:ptx"},   {8, 6, nullptr, "sm_80:ptx"},
      {8, 9, nullptr, "sm_80:ptx"},   {9, 0, nullptr, "sm_90a:ptx"},
      {10, 0, nullptr, "sm_90:ptx"},  {12, 0, nullptr, "sm_90:ptx"},
      {7, 5, nullptr, nullptr},       {9, 0, "sm_80", "sm_80:ptx"},
      {9, 0, "sm_90:ptx", "sm_90:ptx"}, {8, 9, "sm_90a", nullptr},
      {10, 0, "sm_90a", nullptr},     {9, 0, "sm_75", nullptr},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::to_string(c.major) + "." + std::to_string(c.minor) + " want " +
                 (c.want ? c.want : "auto"));
    fakecuda::reset();
    fakecuda::state().major = c.major;
    fakecuda::state().minor = c.minor;
    int status = api.create(nullptr, c.want);
    if (!c.expect) {
      EXPECT_EQ(status, AOT_F16_MEAN_ERROR_NO_COMPATIBLE_ARCH);
      EXPECT_NE(std::string(api.lastError()).find("sm_80:ptx, sm_90:ptx, sm_90a:ptx"),
                std::string::npos)
          << api.lastError();
      EXPECT_TRUE(fakecuda::state().modules.empty());
      continue;
    }
    ASSERT_EQ(status, 0) << api.lastError();
    EXPECT_STREQ(api.handleArch(), c.expect);
    for (const std::string &m : fakecuda::state().modules)
      EXPECT_NE(m.find(".target " + baseArch(c.expect) + "\n"), std::string::npos);
    EXPECT_EQ(api.destroy(), 0);
  }
  EXPECT_EQ(aot_f16_mean_num_arches(), 3);
  EXPECT_STREQ(aot_f16_mean_arch_name(0), "sm_80:ptx");
  EXPECT_EQ(aot_f16_mean_arch_name(3), nullptr);
}

TEST_F(AotCApiTest, ErrorsAreStatusCodesWithMessages) {
  CApi api = f16Mean();
  std::vector<CUdeviceptr> buffers = fakeBuffers(5);
  // No handle.
  EXPECT_EQ(aot_f16_mean_create(nullptr, nullptr), AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(api.run("forward", nullptr, buffers, {4, 5, 6}, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("handle is NULL"), std::string::npos);
  EXPECT_EQ(aot_f16_mean_destroy(nullptr), AOT_F16_MEAN_SUCCESS);
  // No current context.
  fakecuda::state().hasCurrentContext = false;
  EXPECT_EQ(api.create(nullptr, nullptr), AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("none is current"), std::string::npos);
  // A context that is not the fake's.
  EXPECT_EQ(api.create(reinterpret_cast<CUcontext>(uintptr_t(0x2000)), nullptr),
            AOT_F16_MEAN_ERROR_CUDA);
  EXPECT_NE(std::string(api.lastError()).find("CUDA_ERROR_INVALID_CONTEXT"), std::string::npos);
  fakecuda::state().hasCurrentContext = true;
  // JIT failure: the status, the file and the JIT log.
  fakecuda::state().moduleLoadResult = CUDA_ERROR_INVALID_PTX;
  fakecuda::state().jitLog = "ptxas fatal   : Unresolved extern function 'oops'";
  EXPECT_EQ(api.create(nullptr, nullptr), AOT_F16_MEAN_ERROR_CUDA);
  std::string message = api.lastError();
  EXPECT_NE(message.find("CUDA_ERROR_INVALID_PTX"), std::string::npos) << message;
  EXPECT_NE(message.find("lce_partial.sm_90a.ptx"), std::string::npos) << message;
  EXPECT_NE(message.find("Unresolved extern function 'oops'"), std::string::npos) << message;
  // A JIT log filling its whole buffer (4095 bytes): the message keeps its
  // start and the start of the log, cut to the 4096-byte message buffer.
  fakecuda::state().jitLog = std::string(4095, 'x');
  EXPECT_EQ(api.create(nullptr, nullptr), AOT_F16_MEAN_ERROR_CUDA);
  message = api.lastError();
  EXPECT_EQ(message.size(), 4095u);
  EXPECT_EQ(message.rfind("create: loading ", 0), 0u) << message.substr(0, 200);
  size_t logStart = message.find("\nJIT log:\nx");
  ASSERT_NE(logStart, std::string::npos) << message.substr(0, 200);
  EXPECT_EQ(message.find_first_not_of('x', logStart + 10), std::string::npos);
  fakecuda::state().moduleLoadResult = CUDA_SUCCESS;

  ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
  EXPECT_STREQ(api.lastError(), "");
  // Bad dims, buffers and workspaces; nothing is launched.
  fakecuda::state().launches.clear();
  EXPECT_EQ(api.run("forward", nullptr, buffers, {-1, 5, 6}, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("dim N = -1"), std::string::npos);
  EXPECT_EQ(api.run("forward", nullptr, buffers, {INT64_MAX / 2, 5, 6}, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("overflows"), std::string::npos) << api.lastError();
  EXPECT_EQ(api.run("forward", nullptr, buffers, {int64_t(1) << 40, 5, 6}, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("grid[0]"), std::string::npos) << api.lastError();
  std::vector<CUdeviceptr> nullX = buffers;
  nullX[0] = 0;
  EXPECT_EQ(api.run("forward", nullptr, nullX, {4, 5, 6}, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("x is a null device pointer"), std::string::npos);
  size_t bytes = api.workspaceBytes("forward", 4, 5, 6);
  EXPECT_EQ(api.run("forward", nullptr, buffers, {4, 5, 6}, 0x5000000000ull, bytes - 1),
            AOT_F16_MEAN_ERROR_WORKSPACE_TOO_SMALL);
  EXPECT_EQ(api.run("forward", nullptr, buffers, {4, 5, 6}, 0x5000000010ull, bytes),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(aot_f16_mean_forward_v(nullptr, nullptr, buffers.data(), 4, nullptr, 3, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  int64_t dims[3] = {4, 5, 6};
  EXPECT_EQ(aot_f16_mean_forward_v(nullptr, nullptr, buffers.data(), 4, dims, 3, 0, 0),
            AOT_F16_MEAN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api.lastError()).find("expected 5 buffers and 3 dims"),
            std::string::npos);
  EXPECT_TRUE(fakecuda::state().launches.empty());
  // N = 0: x may be NULL; the reduction still writes the loss.
  EXPECT_EQ(api.run("forward", nullptr, nullX, {0, 5, 6}, 0, 0), AOT_F16_MEAN_SUCCESS)
      << api.lastError();
  ASSERT_EQ(fakecuda::state().launches.size(), 1u);
  EXPECT_EQ(fakecuda::state().launches[0].kernel, "lce_reduce");
  EXPECT_EQ(api.workspaceBytes("forward", -1, 5, 6), static_cast<size_t>(-1));
  EXPECT_EQ(api.workspaceBytes("all", INT64_MAX, 5, 6), static_cast<size_t>(-1));
  // A failing launch reports the kernel and grid.
  fakecuda::state().launchResult = CUDA_ERROR_INVALID_HANDLE;
  EXPECT_EQ(api.run("forward", nullptr, buffers, {4, 5, 6}, 0, 0), AOT_F16_MEAN_ERROR_CUDA);
  EXPECT_NE(std::string(api.lastError()).find("kernel lce_partial grid=(1,8,1)"),
            std::string::npos)
      << api.lastError();
  fakecuda::state().launchResult = CUDA_SUCCESS;
  EXPECT_STREQ(aot_f16_mean_status_string(AOT_F16_MEAN_ERROR_WORKSPACE_TOO_SMALL),
               "AOT_F16_MEAN_ERROR_WORKSPACE_TOO_SMALL");
  EXPECT_EQ(api.destroy(), 0);
}

TEST_F(AotCApiTest, DeclaredDimsAreChecked) {
  // Issue 16: a graph declaring tensor<3x?xf16> ran on 5 rows. The C API
  // knows the graph's extents (N = 3, V = 5) and refuses other dims before
  // anything is launched.
  CApi api = staticForward();
  ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
  std::vector<CUdeviceptr> buffers = fakeBuffers(5);
  fakecuda::state().launches.clear();
  EXPECT_EQ(api.run("forward", nullptr, buffers, {5, 5, 64}, 0, 0),
            AOT_STATIC_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(api.lastError(), "forward: dim N = 5, but the graph declares N = 3");
  EXPECT_EQ(api.run("forward", nullptr, buffers, {3, 6, 64}, 0, 0),
            AOT_STATIC_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(api.lastError(), "forward: dim V = 6, but the graph declares V = 5");
  EXPECT_TRUE(fakecuda::state().launches.empty());
  // D is dynamic: any D runs.
  EXPECT_EQ(api.run("forward", nullptr, buffers, {3, 5, 64}, 0, 0), AOT_STATIC_SUCCESS)
      << api.lastError();
  EXPECT_EQ(api.run("forward", nullptr, buffers, {3, 5, 8}, 0, 0), AOT_STATIC_SUCCESS)
      << api.lastError();
  EXPECT_FALSE(fakecuda::state().launches.empty());
  EXPECT_EQ(api.destroy(), 0);
}

TEST_F(AotCApiTest, TypedEntryPointEqualsArrayForm) {
  ASSERT_EQ(f16Mean().create(nullptr, nullptr), 0);
  std::vector<CUdeviceptr> b = fakeBuffers(5);
  aot_f16_mean_handle *h = nullptr;
  ASSERT_EQ(aot_f16_mean_create(nullptr, &h), AOT_F16_MEAN_SUCCESS);
  ASSERT_EQ(aot_f16_mean_forward(h, testStream(), b[0], b[1], b[2], b[3], b[4], 33, 1000, 64, 0,
                                 0),
            AOT_F16_MEAN_SUCCESS);
  auto typed = fakecuda::state().launches;
  fakecuda::state().launches.clear();
  ASSERT_EQ(f16Mean().run("forward", testStream(), b, {33, 1000, 64}, 0, 0), 0);
  ASSERT_EQ(typed.size(), fakecuda::state().launches.size());
  for (size_t i = 0; i < typed.size(); ++i) {
    EXPECT_EQ(typed[i].grid, fakecuda::state().launches[i].grid);
    // Workspaces differ between the two calls; buffers and dims do not.
    EXPECT_EQ(typed[i].params.size(), fakecuda::state().launches[i].params.size());
  }
  EXPECT_EQ(aot_f16_mean_destroy(h), AOT_F16_MEAN_SUCCESS);
  EXPECT_EQ(f16Mean().destroy(), 0);
}

CUresult customAlloc(void *user, size_t bytes, CUstream stream, CUdeviceptr *out) {
  auto *log = static_cast<std::vector<std::string> *>(user);
  log->push_back("alloc " + std::to_string(bytes) + " on " +
                 std::to_string(reinterpret_cast<uintptr_t>(stream)));
  *out = 0x9000000000ull;
  return CUDA_SUCCESS;
}
void customFree(void *user, CUdeviceptr ptr, size_t bytes, CUstream) {
  static_cast<std::vector<std::string> *>(user)->push_back(
      "free " + std::to_string(ptr) + " " + std::to_string(bytes));
}

TEST_F(AotCApiTest, Allocators) {
  CApi api = bf16SumBias();
  ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
  std::vector<CUdeviceptr> b = fakeBuffers(6);
  size_t bytes = api.workspaceBytes("forward", 100, 50, 8);
  ASSERT_GT(bytes, 0u);
  // Default: stream-ordered pool allocation, no synchronization.
  ASSERT_EQ(api.run("forward", testStream(), b, {100, 50, 8}, 0, 0), 0);
  EXPECT_EQ(fakecuda::state().asyncAllocs, 1);
  EXPECT_EQ(fakecuda::state().streamSyncs, 0);
  // Without memory pools: cuMemAlloc, then synchronize before cuMemFree.
  fakecuda::state().poolsSupported = false;
  ASSERT_EQ(api.run("forward", testStream(), b, {100, 50, 8}, 0, 0), 0);
  EXPECT_EQ(fakecuda::state().syncAllocs, 1);
  EXPECT_EQ(fakecuda::state().streamSyncs, 1);
  EXPECT_EQ(fakecuda::state().frees.size(), 2u);
  // Custom allocator: called with the exact size and the stream.
  std::vector<std::string> log;
  ASSERT_EQ(api.setAllocator(reinterpret_cast<void *>(&customAlloc), nullptr, &log),
            AOT_BF16_SUM_BIAS_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(api.setAllocator(reinterpret_cast<void *>(&customAlloc),
                             reinterpret_cast<void *>(&customFree), &log),
            0);
  fakecuda::state().launches.clear();
  ASSERT_EQ(api.run("forward", testStream(), b, {100, 50, 8}, 0, 0), 0);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0], "alloc " + std::to_string(bytes) + " on " + std::to_string(0xabc0));
  EXPECT_EQ(log[1], "free " + std::to_string(0x9000000000ull) + " " + std::to_string(bytes));
  // The first workspace starts at the allocator's address.
  bool sawBase = false;
  for (const fakecuda::Launch &l : fakecuda::state().launches)
    for (uint64_t p : l.params)
      sawBase = sawBase || p == 0x9000000000ull;
  EXPECT_TRUE(sawBase);
  EXPECT_EQ(api.destroy(), 0);
}

TEST_F(AotCApiTest, SyntheticChunkedBackward) {
  CApi api = synth();
  fakecuda::state().major = 9;
  ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
  EXPECT_STREQ(api.handleArch(), "sm_90:ptx");
  // The 64 KiB forward kernel was opted in at create time.
  ASSERT_EQ(fakecuda::state().sharedOptIns.size(), 1u);
  EXPECT_EQ(fakecuda::state().sharedOptIns[0],
            (std::pair<std::string, int>{"fwd_combine", 64 * 1024}));
  // N=10, V=1000, D=8: C = max(1, min(10, 16000 / 4000)) = 4 rows per chunk.
  const int64_t N = 10, V = 1000, D = 8;
  size_t bwdBytes = synth_backward_workspace_bytes(N, V, D);
  // dz: C*V f32 = 16000 bytes, acc at the next 256-byte boundary: V*D f32.
  EXPECT_EQ(bwdBytes, (16000 + 255) / 256 * 256 + size_t(V * D * 4));
  EXPECT_EQ(synth_workspace_bytes(N, V, D),
            std::max(bwdBytes, synth_forward_workspace_bytes(N, V, D)));
  std::vector<CUdeviceptr> b = fakeBuffers(7);
  const CUdeviceptr base = 0x5000000000ull;
  ASSERT_EQ(api.run("backward", testStream(), b, {N, V, D}, base, bwdBytes), 0)
      << api.lastError();
  const auto &launches = fakecuda::state().launches;
  std::vector<std::string> order;
  for (const fakecuda::Launch &l : launches)
    order.push_back(l.kernel);
  EXPECT_EQ(order, (std::vector<std::string>{"bwd_zero", "bwd_logits", "bwd_dx", "bwd_dw",
                                              "bwd_logits", "bwd_dx", "bwd_dw", "bwd_logits",
                                              "bwd_dx", "bwd_dw", "bwd_cast"}));
  // bwd_dx: dz(5) w(5) grad_x(5) chunk_begin chunk_end V D.
  const int64_t chunks[3][2] = {{0, 4}, {4, 8}, {8, 10}};
  for (int c = 0; c < 3; ++c) {
    const fakecuda::Launch &dx = launches[2 + 3 * c];
    ASSERT_EQ(dx.params.size(), 19u);
    EXPECT_EQ(dx.params[0], base) << "dz is the first workspace";
    EXPECT_EQ(dx.params[3], uint64_t(4 * V)) << "dz holds C*V elements";
    EXPECT_EQ(dx.params[5], b[1]);
    EXPECT_EQ(dx.params[10], b[5]);
    EXPECT_EQ(dx.params[13], uint64_t(N * D));
    EXPECT_EQ(int64_t(dx.params[15]), chunks[c][0]);
    EXPECT_EQ(int64_t(dx.params[16]), chunks[c][1]);
    EXPECT_EQ(dx.grid[0], 1u) << "cdiv(C, BN)";
    const fakecuda::Launch &dw = launches[3 + 3 * c];
    EXPECT_EQ(int64_t(dw.params[15]), chunks[c][0]);
    EXPECT_EQ(int64_t(dw.params[17]), 4) << "C";
    EXPECT_EQ(dw.params[10], base + (16000 + 255) / 256 * 256) << "acc follows dz";
  }
  // Non-chunk kernels see the whole range.
  EXPECT_EQ(launches.front().grid[0], unsigned((V * D + 255) / 256));
  // Chunks never exceed N, and N < C is one chunk.
  fakecuda::state().launches.clear();
  ASSERT_EQ(api.run("backward", testStream(), b, {3, V, D}, 0, 0), 0) << api.lastError();
  EXPECT_EQ(fakecuda::state().launches.size(), 5u);
  // N = 0: per-chunk kernels do not run; the others still do.
  fakecuda::state().launches.clear();
  ASSERT_EQ(api.run("backward", testStream(), b, {0, V, D}, 0, 0), 0) << api.lastError();
  order.clear();
  for (const fakecuda::Launch &l : fakecuda::state().launches)
    order.push_back(l.kernel);
  EXPECT_EQ(order, (std::vector<std::string>{"bwd_zero", "bwd_cast"}));
  // Huge V: C clamps to 1 row.
  fakecuda::state().launches.clear();
  ASSERT_EQ(api.run("backward", testStream(), b, {3, 100000, 1}, 0, 0), 0) << api.lastError();
  EXPECT_EQ(fakecuda::state().launches.size(), 2u + 3u * 3u);
  // The typed backward has the brief's signature.
  synth_handle *h = nullptr;
  ASSERT_EQ(synth_create(nullptr, &h), SYNTH_SUCCESS);
  EXPECT_EQ(synth_backward(h, nullptr, b[0], b[1], b[2], b[3], b[4], b[5], b[6], N, V, D, 0, 0),
            SYNTH_SUCCESS);
  EXPECT_EQ(synth_destroy(h), SYNTH_SUCCESS);
  EXPECT_EQ(api.destroy(), 0);
}

TEST_F(AotCApiTest, SyntheticChunkedLaunchesMatchTheRuntimeLauncher) {
  if (!aot::bundleHasChunking())
    GTEST_SKIP() << "this runtime's bundles cannot express per-chunk kernels";
  CApi api = synth();
  ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
  for (const char *role : {"forward", "backward"}) {
    auto bundle = runtime::readBundleDirectory(std::string(AOT_DIR_synth) + "/" + role + "-sm_90");
    ASSERT_TRUE(bundle) << bundle.errorMessage();
    std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
    for (std::vector<int64_t> dims : {std::vector<int64_t>{10, 1000, 8}, {3, 100000, 1},
                                      {0, 1000, 8}, {1, 1, 1}, {4096, 4000, 64}}) {
      SCOPED_TRACE(std::string(role) + " N=" + std::to_string(dims[0]) +
                   " V=" + std::to_string(dims[1]));
      const CUdeviceptr base = 0x5000000000ull;
      size_t bytes = api.workspaceBytes(role, dims[0], dims[1], dims[2]);
      fakecuda::state().launches.clear();
      ASSERT_EQ(api.run(role, testStream(), buffers, dims, base, bytes), 0) << api.lastError();
      std::vector<fakecuda::Launch> mine = fakecuda::state().launches;
      runtime::Error error = runtime::Error::success();
      std::vector<fakecuda::Launch> theirs = runtimeLaunches(*bundle, buffers, dims, base, &error);
      ASSERT_FALSE(error) << error.message();
      EXPECT_EQ(mine, theirs);
    }
  }
  EXPECT_EQ(api.destroy(), 0);
}

#ifdef LOSSJIT_TEST_CUBIN
TEST_F(AotCApiTest, CubinsWithPtxFallback) {
  // Built with --emit cubin --arch sm_80,sm_90.
  struct Case {
    int major, minor;
    const char *expect;
  };
  for (Case c : {Case{8, 0, "sm_80:cubin"}, Case{8, 6, "sm_80:cubin"}, Case{9, 0, "sm_90:cubin"},
                 Case{10, 0, "sm_90:ptx"}}) {
    fakecuda::reset();
    fakecuda::state().major = c.major;
    fakecuda::state().minor = c.minor;
    aot_f16_cubin_handle *h = nullptr;
    ASSERT_EQ(aot_f16_cubin_create(nullptr, &h), AOT_F16_CUBIN_SUCCESS)
        << aot_f16_cubin_last_error();
    EXPECT_STREQ(aot_f16_cubin_handle_arch(h), c.expect);
    bool cubin = std::string(c.expect).find("cubin") != std::string::npos;
    for (const std::string &m : fakecuda::state().modules)
      EXPECT_EQ(m.rfind("\x7f" "ELF", 0) == 0, cubin);
    EXPECT_EQ(aot_f16_cubin_destroy(h), AOT_F16_CUBIN_SUCCESS);
  }
  fakecuda::reset();
  aot_f16_cubin_handle *h = nullptr;
  EXPECT_EQ(aot_f16_cubin_create_for_arch(nullptr, "sm_90:ptx", &h), AOT_F16_CUBIN_SUCCESS);
  EXPECT_STREQ(aot_f16_cubin_handle_arch(h), "sm_90:ptx");
  EXPECT_EQ(aot_f16_cubin_destroy(h), AOT_F16_CUBIN_SUCCESS);
}
#endif

} // namespace

TEST_F(AotCApiTest, TensorCoreForwardFollowsItsTile) {
  // Blocks and grids come from the mma_sync tile (BM rows per partial block,
  // 32 threads per 32x32 warp tile), not from SIMT's one column per thread;
  // kernels past 48 KiB of dynamic shared memory are opted in at create.
  for (const CApi &api : {f16Mma(), bf16MmaWarp()}) {
    SCOPED_TRACE(api.name);
    auto text = runtime::readFile(api.dir + "/manifest.json");
    ASSERT_TRUE(text) << text.errorMessage();
    auto index = runtime::parseJson(*text);
    ASSERT_TRUE(index) << index.errorMessage();
    const runtime::JsonValue *tile = index->find("tile");
    ASSERT_TRUE(tile && tile->find("matmul")) << "the index carries no tile";
    EXPECT_EQ(tile->find("matmul")->getString(), "mma_sync");
    const unsigned rows = static_cast<unsigned>(tile->find("block_rows")->getInt());
    const unsigned threads = static_cast<unsigned>(tile->find("threads")->getInt());
    const unsigned splits = static_cast<unsigned>(tile->find("splits")->getInt());
    EXPECT_EQ(threads, 32 * (rows / 32) * (tile->find("block_cols")->getInt() / 32));
    std::vector<std::string> roles;
    for (const runtime::JsonValue &op : index->find("ops")->getArray())
      roles.push_back(op.find("role")->getString());
    EXPECT_EQ(roles, std::vector<std::string>{"forward"});

    for (auto [major, minor] : {std::pair{8, 0}, std::pair{9, 0}}) {
      SCOPED_TRACE("sm_" + std::to_string(major) + std::to_string(minor));
      resetFakeDevice(major, minor);
      ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
      auto bundle = runtime::readBundleDirectory(
          bundleDir(api.dir, "forward", baseArch(api.handleArch())));
      ASSERT_TRUE(bundle) << bundle.errorMessage();
      const runtime::JsonValue *matmul = bundle->tile.find("matmul");
      ASSERT_TRUE(matmul && matmul->isString()) << "the bundle carries no tile";
      EXPECT_EQ(matmul->getString(), "mma_sync");
      // Every kernel with dynamic shared memory raises its cap to it (48 KiB
      // bounds static and dynamic together; the plan knows the dynamic).
      std::vector<std::pair<std::string, int>> optIns;
      for (const runtime::BundleKernel &k : bundle->kernels)
        if (k.sharedBytes > 0)
          optIns.emplace_back(k.name, static_cast<int>(k.sharedBytes));
      EXPECT_EQ(fakecuda::state().sharedOptIns, optIns);

      const unsigned n = 130;
      ASSERT_EQ(api.run("forward", testStream(), fakeBuffers(bundle->params.size()),
                        {int64_t(n), 4099, 63}, 0, 0),
                0)
          << api.lastError();
      // lce_combine runs a warp a block, a thread per row, whatever the tile.
      bool sawPartial = false, sawCombine = false;
      for (const fakecuda::Launch &l : fakecuda::state().launches) {
        const unsigned block = l.kernel == "lce_combine" ? 32 : threads;
        EXPECT_EQ(l.block, (std::array<unsigned, 3>{block, 1, 1})) << l.kernel;
        if (l.kernel == "lce_partial") {
          sawPartial = true;
          EXPECT_EQ(l.grid, (std::array<unsigned, 3>{(n + rows - 1) / rows, splits, 1}));
        } else if (l.kernel == "lce_combine") {
          sawCombine = true;
          EXPECT_EQ(l.grid, (std::array<unsigned, 3>{(n + 31) / 32, 1, 1}));
        }
      }
      EXPECT_TRUE(sawPartial && sawCombine);
      EXPECT_EQ(api.workspaceBytes("backward", n, 4099, 63), static_cast<size_t>(-1));
      EXPECT_EQ(api.destroy(), 0);

      // The device's limit holds for static and dynamic shared memory
      // together: a kernel whose dynamic bytes fit but not with its static
      // ones is refused at create, naming both, before cuFuncSetAttribute
      // could fail with a bare invalid value.
      unsigned most = 0;
      for (const runtime::BundleKernel &k : bundle->kernels)
        most = std::max(most, static_cast<unsigned>(k.sharedBytes));
      ASSERT_GT(most, 0u);
      resetFakeDevice(major, minor);
      fakecuda::state().optinShared = static_cast<int>(most) + 1024;
      fakecuda::state().staticShared = 2048;
      EXPECT_NE(api.create(nullptr, nullptr), 0);
      EXPECT_NE(std::string(api.lastError())
                    .find("bytes of shared memory and 2048 of static, the device allows " +
                          std::to_string(most + 1024) + " in all"),
                std::string::npos)
          << api.lastError();
      fakecuda::state().staticShared = 1024;
      ASSERT_EQ(api.create(nullptr, nullptr), 0) << api.lastError();
      EXPECT_EQ(api.destroy(), 0);
    }
  }
}

namespace {
/// The C API of a distillation preset (four dims: T after D), by prefix.
#define DISTILLATION_API(TYPE, NAME, SUCCESS)                                               \
  struct TYPE {                                                                             \
    using Handle = NAME##_handle;                                                           \
    static constexpr auto create = NAME##_create;                                           \
    static constexpr auto destroy = NAME##_destroy;                                         \
    static constexpr auto handleArch = NAME##_handle_arch;                                  \
    static constexpr auto lastError = NAME##_last_error;                                    \
    static constexpr auto forwardBytes = NAME##_forward_workspace_bytes;                    \
    static constexpr auto backwardBytes = NAME##_backward_workspace_bytes;                  \
    static constexpr auto forward = NAME##_forward_v;                                       \
    static constexpr auto backward = NAME##_backward_v;                                     \
    static constexpr int success = SUCCESS;                                                 \
  }

/// The launches of a distillation preset's typed entry points (the
/// teacher's operands, T in the kernels' parameters, every workspace of
/// the plan) equal the runtime launcher's on sm_80 and sm_90, for empty,
/// awkward and large shapes; three dims are refused with a message.
template <typename Api> void checkDistillationLaunches(const char *dir) {
  for (auto [major, minor] : {std::pair{8, 0}, std::pair{9, 0}}) {
    SCOPED_TRACE("sm_" + std::to_string(major) + std::to_string(minor));
    resetFakeDevice(major, minor);
    typename Api::Handle *handle = nullptr;
    ASSERT_EQ(Api::create(nullptr, &handle), Api::success) << Api::lastError();
    std::string arch = baseArch(Api::handleArch(handle));
    for (const std::vector<int64_t> &dims : std::vector<std::vector<int64_t>>{
             {7, 1000, 64, 48}, {130, 8191, 96, 200}, {0, 32000, 128, 64}, {4096, 32000, 1024, 2048}}) {
      SCOPED_TRACE("N=" + std::to_string(dims[0]) + " T=" + std::to_string(dims[3]));
      for (const char *role : {"forward", "backward"}) {
        SCOPED_TRACE(role);
        auto bundle = runtime::readBundleDirectory(bundleDir(dir, role, arch));
        ASSERT_TRUE(bundle) << bundle.errorMessage();
        EXPECT_TRUE(std::any_of(bundle->params.begin(), bundle->params.end(),
                                [](const runtime::BundleParam &p) { return p.name == "teacher_w"; }));
        std::vector<CUdeviceptr> buffers = fakeBuffers(bundle->params.size());
        const bool forward = std::string(role) == "forward";
        size_t bytes = forward ? Api::forwardBytes(dims[0], dims[1], dims[2], dims[3])
                               : Api::backwardBytes(dims[0], dims[1], dims[2], dims[3]);
        ASSERT_NE(bytes, static_cast<size_t>(-1));
        const CUdeviceptr base = 0x5000000000ull;
        fakecuda::state().launches.clear();
        auto status = (forward ? Api::forward : Api::backward)(
            handle, testStream(), buffers.data(), int(buffers.size()), dims.data(),
            int(dims.size()), base, bytes);
        ASSERT_EQ(status, Api::success) << Api::lastError();
        std::vector<fakecuda::Launch> mine = fakecuda::state().launches;
        runtime::Error error = runtime::Error::success();
        std::vector<fakecuda::Launch> theirs = runtimeLaunches(*bundle, buffers, dims, base, &error);
        ASSERT_FALSE(error) << error.message();
        EXPECT_EQ(mine, theirs);
        if (dims[0] > 0) {
          EXPECT_FALSE(mine.empty());
        }
      }
      // Three dims are refused with a message (T is not optional).
      std::vector<CUdeviceptr> buffers = fakeBuffers(7);
      const int64_t three[] = {7, 1000, 64};
      EXPECT_NE(Api::forward(handle, testStream(), buffers.data(), int(buffers.size()), three, 3,
                             0, 0),
                Api::success);
      EXPECT_NE(std::string(Api::lastError()), "");
    }
    EXPECT_EQ(Api::destroy(handle), Api::success);
  }
}

DISTILLATION_API(KlApi, aot_kl_f16, AOT_KL_F16_SUCCESS);
DISTILLATION_API(JsdApi, aot_jsd_bf16, AOT_JSD_BF16_SUCCESS);

TEST_F(AotCApiTest, DistillationPresetLaunchesMatchTheRuntimeLauncher) {
  checkDistillationLaunches<KlApi>(AOT_DIR_kl_f16);
}

TEST_F(AotCApiTest, JsdPresetLaunchesItsSecondSweepLikeTheRuntimeLauncher) {
  // Four forward kernels (the mixture's partials and combine after the
  // lse pair) and their workspaces, laid out as the runtime lays them out.
  checkDistillationLaunches<JsdApi>(AOT_DIR_jsd_bf16);
  auto bundle = runtime::readBundleDirectory(bundleDir(AOT_DIR_jsd_bf16, "forward", "sm_80"));
  ASSERT_TRUE(bundle) << bundle.errorMessage();
  EXPECT_EQ(bundle->kernels.size(), 4u);
}
} // namespace
