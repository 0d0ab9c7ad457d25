//===- CudaLauncherTest.cpp - Launcher against a recording fake driver ----===//
//
// No GPU here, so the launcher runs against fake driver entry points that
// record what would have reached libcuda: modules loaded, functions looked
// up, shared-memory opt-ins, and every cuLaunchKernel with its unpacked
// arguments. That checks the launch sequence and the argument ABI on every CI
// run; tests/gpu checks the same path on a real device.

#include "runtime/CudaLauncher.h"
#include "runtime/Log.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <tuple>
#include <utility>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;

namespace {

struct RecordedLaunch {
  std::string function;
  std::array<unsigned, 3> grid, block;
  unsigned sharedBytes;
  cu::Stream stream;
  std::vector<uint64_t> args;
};

/// What the fake driver saw. Test-only state: the fake entry points are plain
/// function pointers and cannot capture.
struct FakeState {
  cu::Context context = reinterpret_cast<cu::Context>(0x1000);
  int ccMajor = 8, ccMinor = 0, optinShared = 163 * 1024;
  int staticShared = 0; ///< every function's static shared memory
  std::vector<std::string> loadedImages;
  int unloads = 0;
  std::vector<std::string> functionNames; // index + 1 is the handle
  std::vector<std::pair<std::string, int>> sharedOptIns;
  std::vector<RecordedLaunch> launches;
  std::map<std::string, size_t> argCounts; // per function name
  /// cuLaunchKernel fails (CUDA_ERROR_UNKNOWN) when this many launches were
  /// recorded already; -1: never.
  int failLaunchAt = -1;
  /// cuTensorMapEncodeTiled calls: (address, dims[0], dims[1], stride, swizzle).
  std::vector<std::array<uint64_t, 5>> encodes;
  /// Occupancy: SMs, blocks per SM, clusters at once; what both queries
  /// return.
  int multiprocessors = 4, blocksPerSm = 2, activeClusters = 3;
  cu::Result occupancyResult = 0;
  /// Occupancy queries: (function, threads, dynamic shared memory, the
  /// cluster query's grid x or 0 for the per-SM one, attributes given,
  /// whether the function's shared memory was opted in before).
  std::vector<std::tuple<std::string, int, size_t, unsigned, unsigned, bool>> occupancyQueries;
};
FakeState *fake = nullptr;

cu::Result fakeGetErrorName(cu::Result r, const char **s) {
  *s = r == 218 ? "CUDA_ERROR_INVALID_PTX" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
cu::Result fakeGetErrorString(cu::Result r, const char **s) {
  *s = r == 218 ? "a PTX JIT compilation failed" : "unknown error";
  return 0;
}
cu::Result fakeCtxGetCurrent(cu::Context *c) {
  *c = fake->context;
  return 0;
}
cu::Result fakeCtxGetDevice(cu::Device *d) {
  *d = 0;
  return 0;
}
cu::Result fakeDeviceGetAttribute(int *value, int attribute, cu::Device) {
  if (attribute == cu::kDeviceAttributeComputeCapabilityMajor)
    *value = fake->ccMajor;
  else if (attribute == cu::kDeviceAttributeComputeCapabilityMinor)
    *value = fake->ccMinor;
  else if (attribute == cu::kDeviceAttributeMaxSharedMemoryPerBlockOptin)
    *value = fake->optinShared;
  else if (attribute == cu::kDeviceAttributeMultiprocessorCount)
    *value = fake->multiprocessors;
  else
    return 1;
  return 0;
}
std::string functionName(cu::Function f) {
  return fake->functionNames[reinterpret_cast<uintptr_t>(f) - 1];
}
/// Whether `f` asked for at least `shared` bytes of dynamic shared memory
/// (none needed: yes).
bool optedIn(cu::Function f, size_t shared) {
  for (const auto &[name, bytes] : fake->sharedOptIns)
    if (name == functionName(f) && size_t(bytes) >= shared)
      return true;
  return shared == 0;
}
cu::Result fakeOccupancyBlocks(int *blocks, cu::Function f, int threads, size_t shared) {
  fake->occupancyQueries.emplace_back(functionName(f), threads, shared, 0u, 0u, optedIn(f, shared));
  *blocks = fake->blocksPerSm;
  return fake->occupancyResult;
}
cu::Result fakeOccupancyClusters(int *clusters, cu::Function f, const cu::LaunchConfig *c) {
  fake->occupancyQueries.emplace_back(functionName(f), c->blockDimX * c->blockDimY * c->blockDimZ,
                                      c->sharedMemBytes, c->gridDimX, c->numAttrs,
                                      optedIn(f, c->sharedMemBytes));
  *clusters = fake->activeClusters;
  return fake->occupancyResult;
}
cu::Result fakeModuleLoadDataEx(cu::Module *module, const void *image,
                                unsigned numOptions, int *options, void **values) {
  std::string text = static_cast<const char *>(image);
  if (text.find("BADPTX") != std::string::npos) {
    for (unsigned i = 0; i < numOptions; ++i)
      if (options[i] == cu::kJitErrorLogBuffer)
        std::strcpy(static_cast<char *>(values[i]), "ptxas fatal: syntax error at BADPTX");
    return 218;
  }
  fake->loadedImages.push_back(text);
  *module = reinterpret_cast<cu::Module>(fake->loadedImages.size());
  return 0;
}
cu::Result fakeModuleUnload(cu::Module) {
  ++fake->unloads;
  return 0;
}
cu::Result fakeModuleGetFunction(cu::Function *f, cu::Module, const char *name) {
  fake->functionNames.push_back(name);
  *f = reinterpret_cast<cu::Function>(fake->functionNames.size());
  return 0;
}
cu::Result fakeFuncGetAttribute(int *value, int attribute, cu::Function) {
  if (attribute != cu::kFuncAttributeSharedSizeBytes)
    return 1;
  *value = fake->staticShared;
  return 0;
}
cu::Result fakeFuncSetAttribute(cu::Function f, int attribute, int value) {
  if (attribute != cu::kFuncAttributeMaxDynamicSharedSizeBytes)
    return 1;
  fake->sharedOptIns.emplace_back(
      fake->functionNames[reinterpret_cast<uintptr_t>(f) - 1], value);
  return 0;
}
cu::Result fakeLaunchKernel(cu::Function f, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned bz, unsigned shared,
                            cu::Stream stream, void **params, void **extra) {
  if (extra)
    return 1;
  if (fake->failLaunchAt == static_cast<int>(fake->launches.size()))
    return 999;
  RecordedLaunch l;
  l.function = fake->functionNames[reinterpret_cast<uintptr_t>(f) - 1];
  l.grid = {gx, gy, gz};
  l.block = {bx, by, bz};
  l.sharedBytes = shared;
  l.stream = stream;
  for (size_t i = 0; i < fake->argCounts[l.function]; ++i) {
    uint64_t v;
    std::memcpy(&v, params[i], 8);
    l.args.push_back(v);
  }
  fake->launches.push_back(l);
  return 0;
}

/// Writes the global address into the map's first 8 bytes, so a launch's
/// recorded argument shows which map it got.
cu::Result fakeEncodeTiled(void *map, int, unsigned rank, void *global, const uint64_t *dims,
                           const uint64_t *strides, const uint32_t *, const uint32_t *, int,
                           int swizzle, int, int) {
  if (rank != 2)
    return 1;
  uint64_t address = reinterpret_cast<uintptr_t>(global);
  fake->encodes.push_back({address, dims[0], dims[1], strides[0], uint64_t(swizzle)});
  std::memset(map, 0, 128);
  std::memcpy(map, &address, 8);
  return 0;
}

class CudaLauncherTest : public ::testing::Test {
protected:
  void SetUp() override {
    fake = &state;
    CudaDriverApi api{};
    api.cuGetErrorName = fakeGetErrorName;
    api.cuGetErrorString = fakeGetErrorString;
    api.cuCtxGetCurrent = fakeCtxGetCurrent;
    api.cuCtxGetDevice = fakeCtxGetDevice;
    api.cuDeviceGetAttribute = fakeDeviceGetAttribute;
    api.cuModuleLoadDataEx = fakeModuleLoadDataEx;
    api.cuModuleUnload = fakeModuleUnload;
    api.cuModuleGetFunction = fakeModuleGetFunction;
    api.cuFuncSetAttribute = fakeFuncSetAttribute;
    api.cuFuncGetAttribute = fakeFuncGetAttribute;
    api.cuLaunchKernel = fakeLaunchKernel;
    api.cuTensorMapEncodeTiled = fakeEncodeTiled;
    api.cuOccupancyMaxActiveBlocksPerMultiprocessor = fakeOccupancyBlocks;
    api.cuOccupancyMaxActiveClusters = fakeOccupancyClusters;
    driver = CudaDriver::fromApi(api);
    allocator.allocate = [this](size_t bytes, cu::Stream) -> Expected<cu::DevicePtr> {
      allocated.push_back(bytes);
      return cu::DevicePtr(0x100000 * allocated.size());
    };
    allocator.release = [this](cu::DevicePtr address, size_t, cu::Stream) {
      released.push_back(address);
    };
  }
  void TearDown() override { fake = nullptr; }

  FakeState state;
  std::unique_ptr<CudaDriver> driver;
  WorkspaceAllocator allocator;
  std::vector<size_t> allocated;
  std::vector<cu::DevicePtr> released;
};

std::vector<DeviceBuffer> buffersFor(int64_t n, int64_t v, int64_t d) {
  return {{0x1000, n * d}, {0x2000, v * d}, {0x3000, n}, {0x4000, 1}, {0x5000, n}};
}

} // namespace

TEST_F(CudaLauncherTest, LaunchesKernelsInOrderWithMemrefArguments) {
  KernelBundle b = makeTestBundle(testKey("launch"));
  state.argCounts["lce_partial"] = 5 * 5 + 3;
  state.argCounts["lce_combine"] = 6 * 5 + 2;
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 1000, 64};
  auto stream = reinterpret_cast<cu::Stream>(0x77);
  Error e = launcher.launch(b, buffersFor(10, 1000, 64), dims, stream, allocator);
  ASSERT_FALSE(e) << e.message();

  EXPECT_EQ(state.loadedImages.size(), 2u);
  EXPECT_EQ(state.functionNames, (std::vector<std::string>{"lce_partial", "lce_combine"}));
  // Any dynamic shared memory raises the kernel's cap: 48 KiB is the limit
  // of static and dynamic together, and the plan knows only the dynamic.
  ASSERT_EQ(state.sharedOptIns.size(), 1u);
  EXPECT_EQ(state.sharedOptIns[0], std::make_pair(std::string("lce_partial"), 4096));
  ASSERT_EQ(state.launches.size(), 2u);
  const RecordedLaunch &partial = state.launches[0];
  EXPECT_EQ(partial.function, "lce_partial");
  EXPECT_EQ(partial.grid, (std::array<unsigned, 3>{3, 8, 1}));
  EXPECT_EQ(partial.block, (std::array<unsigned, 3>{128, 1, 1}));
  EXPECT_EQ(partial.sharedBytes, 4096u);
  EXPECT_EQ(partial.stream, stream);
  // Workspaces part_m, part_s (S*N f32 = 320 bytes) and loss_rows (40).
  EXPECT_EQ(allocated, (std::vector<size_t>{320, 320, 40}));
  std::vector<uint64_t> expected = {0x1000,   0x1000,   0, 640,   1,  // x
                                    0x2000,   0x2000,   0, 64000, 1,  // w
                                    0x3000,   0x3000,   0, 10,    1,  // labels
                                    0x100000, 0x100000, 0, 80,    1,  // part_m
                                    0x200000, 0x200000, 0, 80,    1,  // part_s
                                    10,       1000,     64};
  EXPECT_EQ(partial.args, expected);
  EXPECT_EQ(state.launches[1].function, "lce_combine");
  EXPECT_EQ(state.launches[1].args.back(), 8u) << "constant S";
  EXPECT_EQ(released.size(), 3u) << "every workspace is released";

  // A second launch reuses the loaded modules.
  ASSERT_FALSE(launcher.launch(b, buffersFor(10, 1000, 64), dims, stream, allocator));
  EXPECT_EQ(state.loadedImages.size(), 2u);
  EXPECT_EQ(state.launches.size(), 4u);
  EXPECT_EQ(launcher.loadedBundleCount(), 1u);
  // A different context loads its own copy.
  state.context = reinterpret_cast<cu::Context>(0x2000);
  ASSERT_FALSE(launcher.launch(b, buffersFor(10, 1000, 64), dims, stream, allocator));
  EXPECT_EQ(state.loadedImages.size(), 4u);
  EXPECT_EQ(launcher.loadedBundleCount(), 2u);
}

TEST_F(CudaLauncherTest, SharedFileLoadsOneModuleAndLargeSmemOptsIn) {
  KernelBundle b = makeTestBundle(testKey("shared"));
  b.kernels[1].file = b.kernels[0].file;
  b.kernels[1].image = b.kernels[0].image;
  b.kernels[1].sharedBytes = 100 * 1024;
  CudaLauncher launcher(*driver);
  Error e = launcher.prepare(b);
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(state.loadedImages.size(), 1u);
  ASSERT_EQ(state.sharedOptIns.size(), 2u);
  EXPECT_EQ(state.sharedOptIns[0], std::make_pair(std::string("lce_partial"), 4096));
  EXPECT_EQ(state.sharedOptIns[1], std::make_pair(std::string("lce_combine"), 100 * 1024));

  // Refused by name when lce_combine's dynamic bytes, with `staticBytes`
  // of the function's own (cuFuncGetAttribute(SHARED_SIZE_BYTES)), pass
  // the device's limit: the limit holds for both together.
  auto expectRefused = [&](const char *key, uint32_t dynamicBytes, int staticBytes,
                           const std::string &message) {
    b.key = testKey(key);
    b.kernels[1].sharedBytes = dynamicBytes;
    state.staticShared = staticBytes;
    Error refused = launcher.prepare(b);
    ASSERT_TRUE(static_cast<bool>(refused)) << key;
    EXPECT_NE(refused.message().find(message), std::string::npos) << refused.message();
  };
  expectRefused("too-much-smem", 200 * 1024, 0,
                "needs 204800 bytes of dynamic shared memory; this device allows 166912 in all");
  expectRefused("static-and-dynamic", 166912 - 1024, 2048,
                "kernel 'lce_combine' needs 165888 bytes of dynamic shared memory and 2048 of "
                "static; this device allows 166912 in all");
  b.key = testKey("static-and-dynamic-fit");
  state.staticShared = 1024;
  e = launcher.prepare(b);
  EXPECT_FALSE(e) << e.message();
}

// A persistent kernel sweeps its tiles with a stride of gridDim.x, so the
// launcher runs at most the blocks that fit the device at once — whole
// clusters from cuOccupancyMaxActiveClusters, else blocks per SM times SMs
// — asked once per load, after the shared-memory opt-in. Other kernels, a
// grid that fits, and a driver that cannot say keep the plan's grid.
TEST_F(CudaLauncherTest, PersistentGridsTakeTheCoResidentBlocks) {
  KernelBundle b = makeTestBundle(testKey("persistent"));
  b.kernels[0].grid = {"2*N", "1", "1"};
  b.kernels[0].cluster = 2;
  b.kernels[0].persistent = true;
  b.kernels[0].sharedBytes = 64 * 1024;
  b.kernels[1].grid = {"N", "1", "1"};
  b.kernels[1].persistent = true;
  ASSERT_FALSE(b.verify()) << b.verify().message();
  state.argCounts["lce_partial"] = 0;
  state.argCounts["lce_combine"] = 0;
  auto launchedGrids = [&](CudaLauncher &launcher, int64_t n) {
    state.launches.clear();
    std::vector<int64_t> dims = {n, 1000, 64};
    Error e = launcher.launch(b, buffersFor(n, 1000, 64), dims, nullptr, allocator);
    EXPECT_FALSE(e) << e.message();
    std::vector<unsigned> grids;
    for (const RecordedLaunch &l : state.launches)
      grids.push_back(l.grid[0]);
    return grids;
  };
  {
    CudaLauncher launcher(*driver);
    // N = 10: 20 blocks in clusters of two, of which 3 clusters fit; 10
    // blocks of lce_combine, of which 2 per SM on 4 SMs.
    EXPECT_EQ(launchedGrids(launcher, 10), (std::vector<unsigned>{6, 8}));
    // Asked at load, once, with the launch's block and shared memory (the
    // cluster query over one cluster and no attributes: the image names
    // its cluster size), after the shared-memory opt-in: before it the
    // driver would count the 48 KiB default.
    using Query = std::tuple<std::string, int, size_t, unsigned, unsigned, bool>;
    EXPECT_EQ(state.occupancyQueries,
              (std::vector<Query>{{"lce_partial", 128, 64 * 1024, 2u, 0u, true},
                                  {"lce_combine", 256, 0, 0u, 0u, true}}));
    // N = 3: 6 and 3 blocks fit.
    EXPECT_EQ(launchedGrids(launcher, 3), (std::vector<unsigned>{6, 3}));
    EXPECT_EQ(state.occupancyQueries.size(), 2u);
  }
  // A non-persistent kernel keeps its grid, and is not asked about.
  b.kernels[1].persistent = false;
  b.key = testKey("persistent-one");
  state.occupancyQueries.clear();
  {
    CudaLauncher launcher(*driver);
    EXPECT_EQ(launchedGrids(launcher, 10), (std::vector<unsigned>{6, 10}));
    EXPECT_EQ(state.occupancyQueries.size(), 1u);
  }
  // No cluster fits at all: nothing to cap by (the launch's own error
  // will say why), the plan's grid runs.
  state.activeClusters = 0;
  b.key = testKey("persistent-none-fit");
  {
    CudaLauncher launcher(*driver);
    EXPECT_EQ(launchedGrids(launcher, 10), (std::vector<unsigned>{20, 10}));
  }
  // A query that fails leaves the plan's grid (and says so in the log).
  state.activeClusters = 3;
  state.occupancyResult = 1;
  b.key = testKey("persistent-query-fails");
  {
    CudaLauncher launcher(*driver);
    EXPECT_EQ(launchedGrids(launcher, 10), (std::vector<unsigned>{20, 10}));
  }
  state.occupancyResult = 0;
  // A driver without the entry points (older than CUDA 12 for clusters).
  CudaDriverApi api = driver->api();
  api.cuOccupancyMaxActiveClusters = nullptr;
  api.cuOccupancyMaxActiveBlocksPerMultiprocessor = nullptr;
  std::unique_ptr<CudaDriver> older = CudaDriver::fromApi(api);
  b.key = testKey("persistent-older-driver");
  {
    CudaLauncher launcher(*older);
    EXPECT_EQ(launchedGrids(launcher, 10), (std::vector<unsigned>{20, 10}));
  }
}

TEST_F(CudaLauncherTest, ValidatesInputsBeforeEnqueueing) {
  KernelBundle b = makeTestBundle(testKey("validate"));
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 1000, 64};
  auto buffers = buffersFor(10, 1000, 64);
  buffers[1].elements = 5;
  Error e = launcher.launch(b, buffers, dims, nullptr, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("param 'w': expected 64000 elements (shape [V, D] with "
                             "N=10, V=1000, D=64), got 5"),
            std::string::npos)
      << e.message();
  buffers = buffersFor(10, 1000, 64);
  buffers[0].address = 0;
  e = launcher.launch(b, buffers, dims, nullptr, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("param 'x' is a null device pointer"), std::string::npos);
  buffers = buffersFor(10, 1000, 64);
  buffers.pop_back();
  e = launcher.launch(b, buffers, dims, nullptr, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("expected 5 param buffers (x, w, labels, loss, lse), got 4"),
            std::string::npos)
      << e.message();
  std::vector<int64_t> negative = {10, -1, 64};
  e = launcher.launch(b, buffersFor(10, 1000, 64), negative, nullptr, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("dim V = -1"), std::string::npos);
  e = launcher.launch(b, buffersFor(10, 1000, 64), dims, nullptr, WorkspaceAllocator{});
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("allocator"), std::string::npos);
  EXPECT_TRUE(state.launches.empty()) << "nothing may be enqueued on bad input";
  EXPECT_TRUE(allocated.empty());

  // Allocation failure releases what was already allocated.
  int calls = 0;
  WorkspaceAllocator failing = allocator;
  failing.allocate = [&](size_t, cu::Stream) -> Expected<cu::DevicePtr> {
    if (++calls == 2)
      return makeError("out of memory");
    return cu::DevicePtr(0xABC000);
  };
  e = launcher.launch(b, buffersFor(10, 1000, 64), dims, nullptr, failing);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("allocating workspace 'part_s' (320 bytes): out of memory"),
            std::string::npos)
      << e.message();
  EXPECT_EQ(released, (std::vector<cu::DevicePtr>{0xABC000}));
}

TEST_F(CudaLauncherTest, EmptyGridsAreSkipped) {
  KernelBundle b = makeTestBundle(testKey("empty-grid"));
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {0, 1000, 64};
  Error e = launcher.launch(b, buffersFor(0, 1000, 64), dims, nullptr, allocator);
  ASSERT_FALSE(e) << e.message();
  ASSERT_EQ(state.launches.size(), 1u);
  EXPECT_EQ(state.launches[0].function, "lce_combine");
}

TEST_F(CudaLauncherTest, JitFailureCarriesTheLogAndArchIsChecked) {
  KernelBundle b = makeTestBundle(testKey("bad-ptx"));
  b.kernels[1].image += "BADPTX";
  CudaLauncher launcher(*driver);
  Error e = launcher.prepare(b);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a PTX "
                             "JIT compilation failed)"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("syntax error at BADPTX"), std::string::npos);
  EXPECT_EQ(state.unloads, 1) << "the module loaded before the failure is unloaded";
  EXPECT_EQ(launcher.loadedBundleCount(), 0u);

  KernelBundle hopper = makeTestBundle(testKey("sm90a"));
  hopper.arch = "sm_90a";
  e = launcher.prepare(hopper);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("needs a newer GPU than this sm_80 device"), std::string::npos)
      << e.message();

  KernelBundle cpu = makeTestBundle(testKey("cpu"));
  cpu.backend = "cpu";
  cpu.arch = "host";
  e = launcher.prepare(cpu);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("backend 'cpu', not cuda"), std::string::npos);
}

TEST_F(CudaLauncherTest, NoCurrentContextIsAnError) {
  state.context = nullptr;
  CudaLauncher launcher(*driver);
  Error e = launcher.prepare(makeTestBundle(testKey("no-context")));
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("no CUDA context is current"), std::string::npos);
}

// ---- Chunked launches ----

namespace {

/// Buffers for makeChunkedTestBundle: x, w, labels, grad_loss, grad_x, grad_w.
std::vector<DeviceBuffer> chunkedBuffersFor(int64_t n, int64_t v, int64_t d) {
  return {{0x1000, n * d}, {0x2000, v * d}, {0x3000, n},
          {0x4000, 1},     {0x5000, n * d}, {0x6000, v * d}};
}

void setChunkedArgCounts(FakeState &state) {
  state.argCounts["lce_bwd_scale"] = 3 * 5 + 2;  // labels grad_loss grow N V
  state.argCounts["lce_bwd_dz"] = 5 * 5 + 4;     // ... chunk_begin chunk_end V D
  state.argCounts["lce_bwd_dx"] = 3 * 5 + 4;     // ... chunk_begin chunk_end C NC
  state.argCounts["lce_bwd_finish"] = 1 * 5 + 2; // grad_w V D
}

/// The (chunk_begin, chunk_end) a recorded per-chunk launch received.
std::pair<uint64_t, uint64_t> chunkOf(const RecordedLaunch &l) {
  size_t at = l.function == "lce_bwd_dz" ? 25 : 15; // after the buffers
  return {l.args.at(at), l.args.at(at + 1)};
}

std::vector<std::string> functionsOf(const std::vector<RecordedLaunch> &launches) {
  std::vector<std::string> names;
  for (const RecordedLaunch &l : launches)
    names.push_back(l.function);
  return names;
}

} // namespace

TEST_F(CudaLauncherTest, PerChunkGroupRunsOncePerChunk) {
  // once (scale), group {dz, dx}, once (finish); N=10, C=4.
  KernelBundle b = makeChunkedTestBundle(testKey("launch-chunked"));
  setChunkedArgCounts(state);
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 8, 2};
  auto stream = reinterpret_cast<cu::Stream>(0x99);
  Error e = launcher.launch(b, chunkedBuffersFor(10, 8, 2), dims, stream, allocator);
  ASSERT_FALSE(e) << e.message();

  EXPECT_EQ(functionsOf(state.launches),
            (std::vector<std::string>{"lce_bwd_scale", "lce_bwd_dz", "lce_bwd_dx",
                                      "lce_bwd_dz", "lce_bwd_dx", "lce_bwd_dz",
                                      "lce_bwd_dx", "lce_bwd_finish"}));
  ASSERT_EQ(state.launches.size(), 8u);
  using Chunk = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(chunkOf(state.launches[1]), Chunk(0, 4));
  EXPECT_EQ(chunkOf(state.launches[2]), Chunk(0, 4));
  EXPECT_EQ(chunkOf(state.launches[3]), Chunk(4, 8));
  EXPECT_EQ(chunkOf(state.launches[4]), Chunk(4, 8));
  EXPECT_EQ(chunkOf(state.launches[5]), Chunk(8, 10));
  EXPECT_EQ(chunkOf(state.launches[6]), Chunk(8, 10));

  // Every dz launch gets the same full argument list but for the chunk.
  std::vector<uint64_t> dz = {0x1000,   0x1000,   0, 20, 1,  // x
                              0x2000,   0x2000,   0, 16, 1,  // w
                              0x3000,   0x3000,   0, 10, 1,  // labels
                              0x100000, 0x100000, 0, 10, 1,  // grow (N f32)
                              0x200000, 0x200000, 0, 32, 1,  // dz (C*V f32)
                              8,        10,       8,  2};
  EXPECT_EQ(state.launches[5].args, dz);
  // dx ends with the derived symbols C = 4 and NC = 3.
  EXPECT_EQ(state.launches[2].args[17], 4u);
  EXPECT_EQ(state.launches[2].args[18], 3u);
  // Grids from derived symbols: cdiv(C,4) = 1.
  EXPECT_EQ(state.launches[1].grid, (std::array<unsigned, 3>{1, 1, 1}));
  EXPECT_EQ(state.launches[7].args,
            (std::vector<uint64_t>{0x6000, 0x6000, 0, 16, 1, 8, 2}));
  for (const RecordedLaunch &l : state.launches)
    EXPECT_EQ(l.stream, stream);
  EXPECT_EQ(allocated, (std::vector<size_t>{40, 128})) << "grow = N, dz = C*V floats";
  EXPECT_EQ(released.size(), 2u);

  // An exact multiple of C: chunks [0,4) and [4,8).
  state.launches.clear();
  std::vector<int64_t> eight = {8, 8, 2};
  ASSERT_FALSE(launcher.launch(b, chunkedBuffersFor(8, 8, 2), eight, stream, allocator));
  ASSERT_EQ(state.launches.size(), 6u);
  EXPECT_EQ(chunkOf(state.launches[1]), Chunk(0, 4));
  EXPECT_EQ(chunkOf(state.launches[4]), Chunk(4, 8));
  // Fewer rows than C: C = min(N, ...) = 3, one chunk [0,3).
  state.launches.clear();
  std::vector<int64_t> three = {3, 8, 2};
  ASSERT_FALSE(launcher.launch(b, chunkedBuffersFor(3, 8, 2), three, stream, allocator));
  EXPECT_EQ(functionsOf(state.launches),
            (std::vector<std::string>{"lce_bwd_scale", "lce_bwd_dz", "lce_bwd_dx",
                                      "lce_bwd_finish"}));
  EXPECT_EQ(chunkOf(state.launches[1]), Chunk(0, 3));
  EXPECT_EQ(chunkOf(state.launches[2]), Chunk(0, 3));
}

TEST_F(CudaLauncherTest, PerChunkGroupRunsZeroTimesWithoutRows) {
  KernelBundle b = makeChunkedTestBundle(testKey("launch-chunked-empty"));
  setChunkedArgCounts(state);
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {0, 8, 2};
  Error e = launcher.launch(b, chunkedBuffersFor(0, 8, 2), dims, nullptr, allocator);
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(functionsOf(state.launches),
            (std::vector<std::string>{"lce_bwd_scale", "lce_bwd_finish"}));
  // grow has 0 bytes (not allocated); dz = C*V with C = 1.
  EXPECT_EQ(allocated, (std::vector<size_t>{32}));
  EXPECT_EQ(released.size(), 1u);
}

TEST_F(CudaLauncherTest, SeparatedPerChunkRunsAreSeparateGroups) {
  // {dz}, scale, {dx}, finish: a once-kernel between two per-chunk kernels
  // splits them into two groups, each looping over all chunks.
  KernelBundle b = makeChunkedTestBundle(testKey("launch-two-groups"));
  std::swap(b.kernels[0], b.kernels[1]);
  setChunkedArgCounts(state);
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 8, 2};
  Error e = launcher.launch(b, chunkedBuffersFor(10, 8, 2), dims, nullptr, allocator);
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(functionsOf(state.launches),
            (std::vector<std::string>{"lce_bwd_dz", "lce_bwd_dz", "lce_bwd_dz",
                                      "lce_bwd_scale", "lce_bwd_dx", "lce_bwd_dx",
                                      "lce_bwd_dx", "lce_bwd_finish"}));
  using Chunk = std::pair<uint64_t, uint64_t>;
  std::vector<Chunk> dzChunks, dxChunks;
  for (const RecordedLaunch &l : state.launches)
    if (l.function == "lce_bwd_dz")
      dzChunks.push_back(chunkOf(l));
    else if (l.function == "lce_bwd_dx")
      dxChunks.push_back(chunkOf(l));
  std::vector<Chunk> expected = {{0, 4}, {4, 8}, {8, 10}};
  EXPECT_EQ(dzChunks, expected);
  EXPECT_EQ(dxChunks, expected);
}

TEST_F(CudaLauncherTest, ChunkedLaunchFailureNamesTheChunk) {
  KernelBundle b = makeChunkedTestBundle(testKey("launch-chunked-fail"));
  setChunkedArgCounts(state);
  state.failLaunchAt = 4; // the second chunk's dx
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 8, 2};
  Error e = launcher.launch(b, chunkedBuffersFor(10, 8, 2), dims, nullptr, allocator);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(e.message().find("cuLaunchKernel"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("lce_bwd_dx grid=(1,1,1) block=(128,1,1) smem=0 "
                             "chunk=[4,8)"),
            std::string::npos)
      << e.message();
  EXPECT_EQ(state.launches.size(), 4u) << "nothing after the failed launch";
  EXPECT_EQ(released.size(), 2u) << "workspaces are still released";
}

// Runs with LOSSJIT_LOG=info as its own ctest (see CMakeLists.txt); the level
// is read once per process, so elsewhere the log check is skipped.
TEST_F(CudaLauncherTest, ChunkedLaunchesAreLogged) {
  if (!isLogEnabled(LogLevel::Info))
    GTEST_SKIP() << "needs LOSSJIT_LOG=info";
  KernelBundle b = makeChunkedTestBundle(testKey("launch-chunked-log"));
  setChunkedArgCounts(state);
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 8, 2};
  ::testing::internal::CaptureStderr();
  Error e = launcher.launch(b, chunkedBuffersFor(10, 8, 2), dims, nullptr, allocator);
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(e) << e.message();
  for (const char *line :
       {"[N=10, V=8, D=2] lce_bwd_scale grid=(1,1,1) block=(128,1,1) smem=0 stream=",
        "lce_bwd_dz grid=(1,1,1) block=(128,1,1) smem=0 chunk=[0,4) stream=",
        "lce_bwd_dx grid=(1,1,1) block=(128,1,1) smem=0 chunk=[0,4) stream=",
        "lce_bwd_dz grid=(1,1,1) block=(128,1,1) smem=0 chunk=[4,8) stream=",
        "lce_bwd_dx grid=(1,1,1) block=(128,1,1) smem=0 chunk=[8,10) stream=",
        "lce_bwd_finish grid=(1,1,1) block=(128,1,1) smem=0 stream="})
    EXPECT_NE(log.find(line), std::string::npos) << line << "\nin:\n" << log;
  size_t launches = 0;
  for (size_t at = log.find("lossjit[info]: launch "); at != std::string::npos;
       at = log.find("lossjit[info]: launch ", at + 1))
    ++launches;
  EXPECT_EQ(launches, 8u) << log;
}

TEST_F(CudaLauncherTest, EncodesTensorMapsOncePerAddressAndFallsBackWhenItCannot) {
  KernelBundle b = makeTestBundle(testKey("tma-launch"));
  b.arch = "sm_90a";
  b.tensorMaps = {{"x_tma", "x", {"D", "N"}, {64, 128}, 128},
                  {"w_tma", "w", {"D", "V"}, {64, 64}, 128}};
  b.kernels[0].args = {"x_tma", "w_tma", kTensorMapsReadyArg, "N"};
  state.argCounts["lce_partial"] = 4;
  state.argCounts["lce_combine"] = 6 * 5 + 2;
  state.ccMajor = 9; // a Hopper: sm_90a loads
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 1000, 64};
  Error first = launcher.launch(b, buffersFor(10, 1000, 64), dims, nullptr, allocator);
  ASSERT_FALSE(first) << first.message();
  // Both maps, 128-byte rows, CU_TENSOR_MAP_SWIZZLE_128B (3).
  ASSERT_EQ(state.encodes.size(), 2u);
  EXPECT_EQ(state.encodes[0], (std::array<uint64_t, 5>{0x1000, 64, 10, 128, 3}));
  EXPECT_EQ(state.encodes[1], (std::array<uint64_t, 5>{0x2000, 64, 1000, 128, 3}));
  ASSERT_EQ(state.launches.size(), 2u);
  EXPECT_EQ(state.launches[0].args, (std::vector<uint64_t>{0x1000, 0x2000, 1, 10}));
  // The same addresses and dims again: cached, no new encode.
  ASSERT_FALSE(launcher.launch(b, buffersFor(10, 1000, 64), dims, nullptr, allocator));
  EXPECT_EQ(state.encodes.size(), 2u);
  EXPECT_EQ(state.launches[2].args, (std::vector<uint64_t>{0x1000, 0x2000, 1, 10}));
  // Rows of 37 f16 (74 bytes) cannot be mapped: zeros and ready 0, and the
  // kernels take their cp.async path; nothing is encoded.
  dims = {10, 1000, 37};
  ASSERT_FALSE(launcher.launch(b, buffersFor(10, 1000, 37), dims, nullptr, allocator));
  EXPECT_EQ(state.encodes.size(), 2u);
  EXPECT_EQ(state.launches[4].args, (std::vector<uint64_t>{0, 0, 0, 10}));
  // A base that is not 16-byte aligned (w's): the kernel takes both maps,
  // so it gets zeros and ready 0 too.
  dims = {10, 1000, 64};
  std::vector<DeviceBuffer> shifted = buffersFor(10, 1000, 64);
  shifted[1].address += 8;
  ASSERT_FALSE(launcher.launch(b, shifted, dims, nullptr, allocator));
  EXPECT_EQ(state.launches[6].args, (std::vector<uint64_t>{0, 0, 0, 10}));
}

TEST_F(CudaLauncherTest, EncodesTensorMapsOfWorkspacesAtTheirAllocation) {
  // A map over a workspace (dX's dZ chunk) is encoded after the workspace
  // exists, at its address.
  KernelBundle b = makeTestBundle(testKey("tma-workspace"));
  b.arch = "sm_90a";
  b.tensorMaps = {{"pm_tma", "part_m", {"N", "S"}, {4, 8}, 0}};
  b.kernels[0].args = {"pm_tma", kTensorMapsReadyArg, "N"};
  state.argCounts["lce_partial"] = 3;
  state.argCounts["lce_combine"] = 6 * 5 + 2;
  state.ccMajor = 9;
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {16, 1000, 64};
  Error e = launcher.launch(b, buffersFor(16, 1000, 64), dims, nullptr, allocator);
  ASSERT_FALSE(e) << e.message();
  // part_m is the first workspace allocated: 0x100000, S*N f32.
  ASSERT_EQ(state.encodes.size(), 1u);
  EXPECT_EQ(state.encodes[0], (std::array<uint64_t, 5>{0x100000, 16, 8, 64, 0}));
  EXPECT_EQ(state.launches[0].args, (std::vector<uint64_t>{0x100000, 1, 16}));
}

TEST_F(CudaLauncherTest, AKernelKeepsItsTensorMapsWhenAnotherKernelsCannotBeEncoded) {
  // lce_partial takes x's map, lce_combine a map of w with rows of V = 1001
  // f16 (2002 bytes, not a multiple of 16): only lce_combine falls back.
  KernelBundle b = makeTestBundle(testKey("tma-per-kernel"));
  b.arch = "sm_90a";
  b.tensorMaps = {{"x_tma", "x", {"D", "N"}, {64, 128}, 128},
                  {"w_rows", "w", {"V", "D"}, {8, 8}, 0}};
  b.kernels[0].args = {"x_tma", kTensorMapsReadyArg, "N"};
  b.kernels[1].args = {"w_rows", kTensorMapsReadyArg, "N"};
  state.argCounts["lce_partial"] = 3;
  state.argCounts["lce_combine"] = 3;
  state.ccMajor = 9;
  CudaLauncher launcher(*driver);
  std::vector<int64_t> dims = {10, 1001, 64};
  Error e = launcher.launch(b, buffersFor(10, 1001, 64), dims, nullptr, allocator);
  ASSERT_FALSE(e) << e.message();
  ASSERT_EQ(state.launches.size(), 2u);
  EXPECT_EQ(state.launches[0].args, (std::vector<uint64_t>{0x1000, 1, 10}));
  EXPECT_EQ(state.launches[1].args, (std::vector<uint64_t>{0, 0, 10}));
}
