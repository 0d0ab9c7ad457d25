//===- CudaLauncher.cpp - Run a kernel bundle on a CUDA stream ------------===//

#include "runtime/CudaLauncher.h"
#include "runtime/TensorMap.h"

#include "runtime/Log.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace lossjit::runtime {

namespace {
bool isElfImage(const std::string &image) {
  return image.size() >= 4 && std::memcmp(image.data(), "\x7f" "ELF", 4) == 0;
}

std::string addressText(const void *p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

/// How many blocks of persistent kernel `k` (loaded as `function`, its
/// shared memory opted in) run at once on `device`: whole clusters times
/// their blocks, or blocks per SM times the SMs. 0 when the driver cannot
/// say (an older driver, a table without the entry points): the launch
/// then takes the plan's grid, which gives the same results.
uint64_t residentBlocks(const CudaDriver &driver, const BundleKernel &k, cu::Function function,
                        cu::Device device) {
  const CudaDriverApi &api = driver.api();
  const int threads = static_cast<int>(k.block[0] * k.block[1] * k.block[2]);
  auto unknown = [&](Error e) -> uint64_t {
    logWarning("kernel '" + k.name + "': " + e.message() +
               "; its persistent grid is not capped at the co-resident blocks");
    return 0;
  };
  if (k.cluster > 1) {
    if (!api.cuOccupancyMaxActiveClusters)
      return 0;
    // The image requires its cluster size (.reqnctapercluster): the
    // config leaves it unset, and its grid is one cluster.
    cu::LaunchConfig config{k.cluster,     1,       1,       k.block[0], k.block[1], k.block[2],
                            k.sharedBytes, nullptr, nullptr, 0};
    int clusters = 0;
    if (Error e = driver.check(api.cuOccupancyMaxActiveClusters(&clusters, function, &config),
                               "cuOccupancyMaxActiveClusters"))
      return unknown(std::move(e));
    return uint64_t(std::max(clusters, 0)) * k.cluster;
  }
  if (!api.cuOccupancyMaxActiveBlocksPerMultiprocessor)
    return 0;
  int perSm = 0;
  if (Error e = driver.check(
          api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, function, threads, k.sharedBytes),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    return unknown(std::move(e));
  Expected<int> sms = driver.attribute(cu::kDeviceAttributeMultiprocessorCount, device);
  if (!sms)
    return unknown(sms.takeError());
  return uint64_t(std::max(perSm, 0)) * uint64_t(std::max(*sms, 0));
}
} // namespace

Error checkArchCompatible(const std::string &arch, bool isCubin, int major,
                          int minor) {
  bool specific = false;
  Expected<std::pair<int, int>> target = parseCudaArch(arch, &specific);
  if (!target)
    return target.takeError();
  auto [tMajor, tMinor] = *target;
  std::string device = "sm_" + std::to_string(major) + std::to_string(minor);
  if (std::make_pair(major, minor) < *target)
    return makeError("bundle arch " + arch + " needs a newer GPU than this " +
                     device + " device");
  if ((specific || isCubin) && major != tMajor)
    return makeError("bundle arch " + arch + (isCubin ? " (cubin)" : "") +
                     " runs only on compute capability " +
                     std::to_string(tMajor) + ".x, this device is " + device);
  return Error::success();
}

Expected<std::string> selectJitArch(int major, int minor, const std::string &requested,
                                    const std::string &what) {
  if (requested.empty())
    return major == 9 && minor == 0 ? std::string("sm_90a")
                                    : archForComputeCapability(major, minor);
  const std::string named = what + "='" + requested + "': ";
  bool specific = false;
  Expected<std::pair<int, int>> target =
      requested.rfind("sm_", 0) == 0 ? parseCudaArch(requested, &specific)
                                     : Expected<std::pair<int, int>>(makeError(""));
  if (!target)
    return makeError(named + "expected an sm_<major><minor>[a] arch, e.g. sm_90 or sm_90a");
  // The JIT emits PTX, so a requested arch runs where its PTX would.
  const std::string device = archForComputeCapability(major, minor);
  if (std::make_pair(major, minor) < *target)
    return makeError(named + "its kernels need a newer GPU than this " + device + " device");
  if (specific && major != target->first)
    return makeError(named + "its kernels load on compute capability " +
                     std::to_string(target->first) + ".x alone, this device is " + device);
  return requested;
}

WorkspaceAllocator makeSynchronousAllocator(const CudaDriver &driver) {
  WorkspaceAllocator allocator;
  const CudaDriver *d = &driver;
  allocator.allocate = [d](size_t bytes, cu::Stream) -> Expected<cu::DevicePtr> {
    cu::DevicePtr address = 0;
    if (Error e = d->check(d->api().cuMemAlloc(&address, bytes),
                           "cuMemAlloc(" + std::to_string(bytes) + " bytes)"))
      return e;
    return address;
  };
  allocator.release = [d](cu::DevicePtr address, size_t, cu::Stream stream) {
    // Kernels using the workspace may still be running.
    if (Error e = d->check(d->api().cuStreamSynchronize(stream), "cuStreamSynchronize"))
      logWarning("workspace release: " + e.message());
    if (Error e = d->check(d->api().cuMemFree(address), "cuMemFree"))
      logWarning("workspace release: " + e.message());
  };
  return allocator;
}

/// A bundle loaded into one context.
struct CudaLauncher::Loaded {
  LaunchPlan plan;
  std::vector<cu::Module> modules;
  std::vector<cu::Function> functions; // per kernel
  /// Per kernel: the blocks that run at once, for persistent kernels
  /// (0: not persistent, or unknown).
  std::vector<uint64_t> resident;
};

CudaLauncher::CudaLauncher(const CudaDriver &driver)
    : driver(driver), l2Promotion(l2PromotionFromEnvironment()) {}

Expected<TensorMapBytes> CudaLauncher::encodeCachedTensorMap(const ResolvedLaunch::TensorMap &map,
                                                             uint64_t address) {
  std::string key = map.dtype + ":" + std::to_string(address) + ":" +
                    std::to_string(map.dims[0]) + "x" + std::to_string(map.dims[1]) + ":" +
                    std::to_string(map.rowBytes) + ":" + std::to_string(map.box[0]) + "x" +
                    std::to_string(map.box[1]) + ":" + std::to_string(map.swizzle);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = tensorMapCache.find(key); it != tensorMapCache.end())
      return it->second;
  }
  TensorMapSpec spec;
  spec.dtype = map.dtype;
  spec.rank = 2;
  spec.global = address;
  spec.dims = {map.dims[0], map.dims[1], 0, 0, 0};
  spec.strides = {map.rowBytes, 0, 0, 0};
  spec.box = {map.box[0], map.box[1], 0, 0, 0};
  spec.swizzleBytes = map.swizzle;
  spec.l2PromotionBytes = l2Promotion;
  Expected<TensorMapBytes> bytes = encodeTensorMap(driver, spec);
  if (!bytes)
    return bytes;
  std::lock_guard<std::mutex> lock(mutex);
  // Bounded: a training loop reuses a few addresses; anything else starts
  // over rather than growing.
  if (tensorMapCache.size() >= kTensorMapCacheEntries)
    tensorMapCache.clear();
  tensorMapCache.emplace(key, *bytes);
  return bytes;
}

CudaLauncher::~CudaLauncher() {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto &[key, entry] : loaded)
    for (cu::Module m : entry->modules)
      (void)driver.api().cuModuleUnload(m);
}

size_t CudaLauncher::loadedBundleCount() const {
  std::lock_guard<std::mutex> lock(mutex);
  return loaded.size();
}

Expected<std::shared_ptr<CudaLauncher::Loaded>>
CudaLauncher::load(const KernelBundle &bundle, cu::Context context,
                   cu::Device device) {
  if (bundle.backend != "cuda")
    return makeError("bundle " + bundle.key + " is for backend '" +
                     bundle.backend + "', not cuda");
  Expected<LaunchPlan> plan = LaunchPlan::build(bundle);
  if (!plan)
    return plan.takeError();
  Expected<std::pair<int, int>> cc = driver.computeCapability(device);
  if (!cc)
    return cc.takeError();
  auto entry = std::make_shared<Loaded>(Loaded{std::move(*plan), {}, {}, {}});
  // Unload what was loaded so far if a later step fails.
  struct Cleanup {
    const CudaDriver &driver;
    std::shared_ptr<Loaded> &entry;
    bool armed = true;
    ~Cleanup() {
      if (armed)
        for (cu::Module m : entry->modules)
          (void)driver.api().cuModuleUnload(m);
    }
  } cleanup{driver, entry};

  int optinLimit = -1;
  std::map<std::string, cu::Module> modulesByFile;
  for (const BundleKernel &k : bundle.kernels) {
    if (Error e = checkArchCompatible(bundle.arch, isElfImage(k.image), cc->first,
                                      cc->second))
      return std::move(e).withContext("kernel '" + k.name + "'");
    cu::Module module = nullptr;
    if (auto it = modulesByFile.find(k.file); it != modulesByFile.end()) {
      module = it->second;
    } else {
      std::string errorLog(8192, '\0');
      std::string infoLog(8192, '\0');
      int options[] = {cu::kJitErrorLogBuffer, cu::kJitErrorLogBufferSizeBytes,
                       cu::kJitInfoLogBuffer, cu::kJitInfoLogBufferSizeBytes};
      void *values[] = {errorLog.data(),
                        reinterpret_cast<void *>(uintptr_t(errorLog.size())),
                        infoLog.data(),
                        reinterpret_cast<void *>(uintptr_t(infoLog.size()))};
      // c_str(): PTX must be NUL-terminated.
      cu::Result r = driver.api().cuModuleLoadDataEx(&module, k.image.c_str(), 4,
                                                     options, values);
      if (Error e = driver.check(r, "cuModuleLoadDataEx")) {
        errorLog.resize(std::strlen(errorLog.c_str()));
        return makeError("loading " + k.file + " of bundle " + bundle.key +
                         " (arch " + bundle.arch + ") on sm_" +
                         std::to_string(cc->first) + std::to_string(cc->second) +
                         ": " + e.message() +
                         (errorLog.empty() ? "" : "\nJIT log:\n" + errorLog));
      }
      infoLog.resize(std::strlen(infoLog.c_str()));
      if (!infoLog.empty())
        logDebug("JIT log for " + k.file + ":\n" + infoLog);
      modulesByFile.emplace(k.file, module);
      entry->modules.push_back(module);
    }
    cu::Function function = nullptr;
    if (Error e = driver.check(
            driver.api().cuModuleGetFunction(&function, module, k.name.c_str()),
            "cuModuleGetFunction(" + k.name + ")"))
      return std::move(e).withContext("kernel '" + k.name + "' in " + k.file);
    // Without an opt-in a kernel may use 48 KiB of shared memory *in all*,
    // its static buffers included, which the plan does not know: any
    // dynamic shared memory raises the kernel's own cap to what it asks for
    // (48 KiB of rings next to a few KiB of static row-merge buffers would
    // otherwise fail to launch).
    if (k.sharedBytes > 0) {
      if (optinLimit < 0) {
        Expected<int> limit =
            driver.attribute(cu::kDeviceAttributeMaxSharedMemoryPerBlockOptin, device);
        if (!limit)
          return limit.takeError();
        optinLimit = *limit;
      }
      // The limit holds for static and dynamic shared memory together:
      // past it cuFuncSetAttribute fails with a bare CUDA_ERROR_INVALID_VALUE.
      int staticBytes = 0;
      if (driver.api().cuFuncGetAttribute)
        if (Error e = driver.check(driver.api().cuFuncGetAttribute(
                                       &staticBytes, cu::kFuncAttributeSharedSizeBytes, function),
                                   "cuFuncGetAttribute(SHARED_SIZE_BYTES)"))
          return std::move(e).withContext("kernel '" + k.name + "'");
      if (uint64_t(k.sharedBytes) + uint64_t(std::max(staticBytes, 0)) >
          static_cast<uint64_t>(optinLimit))
        return makeError("kernel '" + k.name + "' needs " + std::to_string(k.sharedBytes) +
                         " bytes of dynamic shared memory" +
                         (staticBytes > 0 ? " and " + std::to_string(staticBytes) + " of static"
                                          : std::string()) +
                         "; this device allows " + std::to_string(optinLimit) + " in all");
      if (Error e = driver.check(
              driver.api().cuFuncSetAttribute(
                  function, cu::kFuncAttributeMaxDynamicSharedSizeBytes,
                  static_cast<int>(k.sharedBytes)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"))
        return std::move(e).withContext("kernel '" + k.name + "'");
    }
    entry->functions.push_back(function);
    // After the shared-memory opt-in, which bounds the blocks per SM.
    entry->resident.push_back(k.persistent ? residentBlocks(driver, k, function, device) : 0);
    if (k.persistent && entry->resident.back())
      logDebug("kernel '" + k.name + "': " + std::to_string(entry->resident.back()) +
               " blocks run at once; its persistent grid launches at most those");
  }
  cleanup.armed = false;
  logInfo("loaded bundle " + bundle.key.substr(0, 12) + " (" + bundle.op + ", " +
          bundle.arch + ", " + std::to_string(entry->modules.size()) +
          " module(s)) into context " + addressText(context));
  return entry;
}

Expected<std::shared_ptr<CudaLauncher::Loaded>>
CudaLauncher::getLoaded(const KernelBundle &bundle) {
  Expected<std::pair<cu::Context, cu::Device>> current = driver.currentContext();
  if (!current)
    return current.takeError();
  auto mapKey = std::make_pair(bundle.key, current->first);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = loaded.find(mapKey); it != loaded.end())
      return it->second;
  }
  // Load outside the lock (the driver JIT can take a while); a racing thread
  // may load the same bundle, and the loser's modules are unloaded.
  Expected<std::shared_ptr<Loaded>> entry =
      load(bundle, current->first, current->second);
  if (!entry)
    return entry.takeError();
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = loaded.emplace(mapKey, *entry);
  if (!inserted)
    for (cu::Module m : (*entry)->modules)
      (void)driver.api().cuModuleUnload(m);
  return it->second;
}

Error CudaLauncher::prepare(const KernelBundle &bundle) {
  Expected<std::shared_ptr<Loaded>> entry = getLoaded(bundle);
  return entry ? Error::success() : entry.takeError();
}

Error CudaLauncher::launch(const KernelBundle &bundle,
                           std::span<const DeviceBuffer> params,
                           std::span<const int64_t> dims, cu::Stream stream,
                           const WorkspaceAllocator &allocator) {
  Expected<std::shared_ptr<Loaded>> entryOr = getLoaded(bundle);
  if (!entryOr)
    return entryOr.takeError();
  const Loaded &entry = **entryOr;
  const LaunchPlan &plan = entry.plan;

  if (params.size() != plan.numParams()) {
    std::string names;
    for (size_t i = 0; i < plan.numParams(); ++i)
      names += (i ? ", " : "") + plan.paramName(i);
    return makeError("launch: expected " + std::to_string(plan.numParams()) +
                     " param buffers (" + names + "), got " +
                     std::to_string(params.size()));
  }
  Expected<ResolvedLaunch> resolved = plan.resolve(dims);
  if (!resolved)
    return std::move(resolved.takeError()).withContext("launch");
  auto dimsText = [&] {
    std::string text;
    for (size_t i = 0; i < plan.numDims(); ++i)
      text += (i ? ", " : "") + plan.getDimNames()[i] + "=" + std::to_string(dims[i]);
    return text;
  };
  std::vector<uint64_t> paramAddresses(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t expected = resolved->paramElements[i];
    if (params[i].elements >= 0 && params[i].elements != expected)
      return makeError("launch: param '" + plan.paramName(i) + "': expected " +
                       std::to_string(expected) + " elements (shape " +
                       plan.paramShapeText(i) + " with " + dimsText() + "), got " +
                       std::to_string(params[i].elements));
    if (params[i].address == 0 && expected > 0)
      return makeError("launch: param '" + plan.paramName(i) +
                       "' is a null device pointer but holds " +
                       std::to_string(expected) + " elements");
    paramAddresses[i] = params[i].address;
  }
  if (plan.numWorkspaces() && (!allocator.allocate || !allocator.release))
    return makeError("launch: the bundle needs " +
                     std::to_string(plan.numWorkspaces()) +
                     " workspace(s) but the allocator has no allocate/release "
                     "callback");

  // Workspaces live until every kernel is enqueued.
  std::vector<uint64_t> workspaceAddresses(plan.numWorkspaces(), 0);
  struct Releaser {
    const WorkspaceAllocator &allocator;
    const ResolvedLaunch &launch;
    std::vector<uint64_t> &addresses;
    cu::Stream stream;
    ~Releaser() {
      for (size_t i = 0; i < addresses.size(); ++i)
        if (addresses[i])
          allocator.release(addresses[i], launch.workspaceBytes[i], stream);
    }
  } releaser{allocator, *resolved, workspaceAddresses, stream};
  for (size_t i = 0; i < plan.numWorkspaces(); ++i) {
    uint64_t bytes = resolved->workspaceBytes[i];
    if (bytes == 0)
      continue;
    Expected<cu::DevicePtr> address = allocator.allocate(bytes, stream);
    if (!address)
      return std::move(address.takeError())
          .withContext("launch: allocating workspace '" + plan.workspaceName(i) +
                       "' (" + std::to_string(bytes) + " bytes)");
    if (*address == 0)
      return makeError("launch: the allocator returned a null pointer for "
                       "workspace '" + plan.workspaceName(i) + "'");
    workspaceAddresses[i] = *address;
  }

  // Every size the kernels will be told, against the buffers that exist
  // (the param counts were compared above, with the dims in the message).
  {
    std::vector<int64_t> elements(params.size());
    for (size_t i = 0; i < params.size(); ++i)
      elements[i] = params[i].elements;
    if (Error e = plan.checkBuffers(*resolved, elements, resolved->workspaceBytes))
      return std::move(e).withContext("launch");
  }

  bool logLaunches = isLogEnabled(LogLevel::Info);
  // TMA tensor maps for this call's addresses and dims, each where TMA can
  // take it; a kernel with one that could not be encoded takes its cp.async
  // path (tensor_maps_ready = 0).
  std::vector<TensorMapBytes> maps(plan.numTensorMaps());
  std::vector<uint8_t> encoded(plan.numTensorMaps(), 0);
  for (size_t i = 0; i < plan.numTensorMaps(); ++i) {
    const ResolvedLaunch::TensorMap &m = resolved->tensorMaps[i];
    const uint64_t address =
        m.workspace ? workspaceAddresses[m.buffer] : paramAddresses[m.buffer];
    std::string why = tensorMapUnencodable(m, address);
    Expected<TensorMapBytes> bytes =
        why.empty() ? encodeCachedTensorMap(m, address) : Expected<TensorMapBytes>(makeError(why));
    if (!bytes) {
      if (logLaunches)
        logInfo("launch " + bundle.key.substr(0, 12) + ": tensor map '" + plan.tensorMapName(i) +
                "' of '" +
                (m.workspace ? plan.workspaceName(m.buffer) : plan.paramName(m.buffer)) +
                "' not encoded (" +
                bytes.errorMessage() + "); the kernels taking it copy by cp.async");
      continue;
    }
    maps[i] = *bytes;
    encoded[i] = 1;
  }
  PackedArgs args;
  // One kernel launch; per-chunk kernels get their chunk's row range.
  auto launchKernel = [&](size_t k, int64_t chunkBegin, int64_t chunkEnd) -> Error {
    bool perChunk = plan.isPerChunk(k);
    auto describe = [&] {
      std::string text = plan.describeKernel(k, *resolved);
      if (perChunk)
        text += " chunk=[" + std::to_string(chunkBegin) + "," +
                std::to_string(chunkEnd) + ")";
      return text;
    };
    if (logLaunches)
      logInfo("launch " + bundle.key.substr(0, 12) + " [" + dimsText() + "] " +
              describe() + " stream=" + addressText(stream));
    const ResolvedLaunch::Kernel &rk = resolved->kernels[k];
    if (rk.skip)
      return Error::success();
    if (Error e = plan.packArguments(k, *resolved, paramAddresses, workspaceAddresses, args,
                                     chunkBegin, chunkEnd, maps, encoded))
      return e;
    const BundleKernel &bk = bundle.kernels[k];
    // A persistent sweep takes at most the co-resident blocks.
    const uint32_t gridX = plan.launchedBlocksX(k, rk.grid[0], entry.resident[k]);
    if (logLaunches && gridX != rk.grid[0])
      logInfo("launch " + bundle.key.substr(0, 12) + ": " + bk.name + " runs " +
              std::to_string(gridX) + " persistent blocks along x, those that fit the device");
    cu::Result r = driver.api().cuLaunchKernel(entry.functions[k], gridX, rk.grid[1], rk.grid[2],
                                               bk.block[0], bk.block[1], bk.block[2],
                                               bk.sharedBytes, stream, args.pointers(), nullptr);
    if (Error e = driver.check(r, "cuLaunchKernel"))
      return std::move(e).withContext(
          "launch: " + describe() +
          (gridX != rk.grid[0] ? " (launched " + std::to_string(gridX) + " blocks along x)"
                               : std::string()));
    return Error::success();
  };

  // Manifest order, except that each maximal run of per-chunk kernels runs as
  // a group once per chunk of rows (zero times when there are no rows).
  for (size_t k = 0; k < plan.numKernels();) {
    if (!plan.isPerChunk(k)) {
      if (Error e = launchKernel(k, 0, 0))
        return e;
      ++k;
      continue;
    }
    size_t groupEnd = k;
    while (groupEnd < plan.numKernels() && plan.isPerChunk(groupEnd))
      ++groupEnd;
    const int64_t rows = resolved->chunkRows, size = resolved->chunkSize;
    for (int64_t begin = 0; begin < rows;) {
      int64_t end = size >= rows - begin ? rows : begin + size; // no overflow
      for (size_t g = k; g < groupEnd; ++g)
        if (Error e = launchKernel(g, begin, end))
          return e;
      begin = end;
    }
    k = groupEnd;
  }
  return Error::success();
}

} // namespace lossjit::runtime
