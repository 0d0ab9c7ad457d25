//===- CudaDriver.cpp - The CUDA driver API, loaded at run time -----------===//

#include "runtime/CudaDriver.h"

#include "runtime/Environment.h"
#include "runtime/Log.h"

#include <cctype>
#include <type_traits>
#include <dlfcn.h>

namespace lossjit::runtime {

std::string CudaDriver::defaultLibraryPath() {
  if (auto path = getEnv("LOSSJIT_CUDA_DRIVER_PATH"); path && !path->empty())
    return *path;
  return "libcuda.so.1";
}

Expected<std::unique_ptr<CudaDriver>>
CudaDriver::load(const std::string &libraryPath) {
  dlerror();
  void *handle = ::dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return makeError("CUDA driver library " + libraryPath + " not found (" +
                     (why ? why : "dlopen failed") +
                     "); the CPU backend still works");
  }
  std::unique_ptr<CudaDriver> driver(new CudaDriver());
  driver->handle = handle;

  std::string missing;
  auto resolve = [&](auto &fn, const char *symbol) {
    void *address = ::dlsym(handle, symbol);
    if (!address)
      missing += (missing.empty() ? "" : ", ") + std::string(symbol);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(address);
  };
  CudaDriverApi &f = driver->fns;
  resolve(f.cuInit, "cuInit");
  resolve(f.cuDriverGetVersion, "cuDriverGetVersion");
  resolve(f.cuGetErrorString, "cuGetErrorString");
  resolve(f.cuGetErrorName, "cuGetErrorName");
  resolve(f.cuDeviceGetCount, "cuDeviceGetCount");
  resolve(f.cuDeviceGet, "cuDeviceGet");
  resolve(f.cuDeviceGetName, "cuDeviceGetName");
  resolve(f.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  resolve(f.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve(f.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  resolve(f.cuCtxSetCurrent, "cuCtxSetCurrent");
  resolve(f.cuCtxGetCurrent, "cuCtxGetCurrent");
  resolve(f.cuCtxGetDevice, "cuCtxGetDevice");
  resolve(f.cuCtxSynchronize, "cuCtxSynchronize");
  resolve(f.cuModuleLoadDataEx, "cuModuleLoadDataEx");
  resolve(f.cuModuleUnload, "cuModuleUnload");
  resolve(f.cuModuleGetFunction, "cuModuleGetFunction");
  resolve(f.cuFuncSetAttribute, "cuFuncSetAttribute");
  resolve(f.cuFuncGetAttribute, "cuFuncGetAttribute");
  resolve(f.cuLaunchKernel, "cuLaunchKernel");
  resolve(f.cuMemAlloc, "cuMemAlloc_v2");
  resolve(f.cuMemFree, "cuMemFree_v2");
  resolve(f.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  resolve(f.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  resolve(f.cuMemsetD8, "cuMemsetD8_v2");
  resolve(f.cuStreamCreate, "cuStreamCreate");
  resolve(f.cuStreamDestroy, "cuStreamDestroy_v2");
  resolve(f.cuStreamSynchronize, "cuStreamSynchronize");
  // Optional: a driver without it runs every kernel but the TMA ones.
  f.cuTensorMapEncodeTiled = reinterpret_cast<decltype(f.cuTensorMapEncodeTiled)>(
      ::dlsym(handle, "cuTensorMapEncodeTiled"));
  // Optional: without them a persistent grid is not capped at what is
  // co-resident (the same results, maybe in a second wave).
  f.cuOccupancyMaxActiveBlocksPerMultiprocessor =
      reinterpret_cast<decltype(f.cuOccupancyMaxActiveBlocksPerMultiprocessor)>(
          ::dlsym(handle, "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
  f.cuOccupancyMaxActiveClusters = reinterpret_cast<decltype(f.cuOccupancyMaxActiveClusters)>(
      ::dlsym(handle, "cuOccupancyMaxActiveClusters"));
  if (!missing.empty())
    return makeError("CUDA driver library " + libraryPath +
                     " lacks the entry points " + missing +
                     " (driver too old?); the CPU backend still works");

  if (Error e = driver->check(f.cuInit(0), "cuInit"))
    return makeError("CUDA driver " + libraryPath +
                     " is present but unusable: " + e.message() +
                     "; the CPU backend still works");
  logDebug("loaded CUDA driver " + libraryPath + " (CUDA " +
           driver->versionString() + ")");
  return driver;
}

std::unique_ptr<CudaDriver> CudaDriver::fromApi(const CudaDriverApi &api) {
  std::unique_ptr<CudaDriver> driver(new CudaDriver());
  driver->fns = api;
  return driver;
}

Expected<const CudaDriver *> CudaDriver::get() {
  // A registry of one: the driver is process-global by nature.
  static Expected<std::unique_ptr<CudaDriver>> loaded = load(defaultLibraryPath());
  if (!loaded)
    return makeError(loaded.errorMessage());
  return static_cast<const CudaDriver *>(loaded->get());
}

CudaDriver::~CudaDriver() {
  // The library stays loaded: contexts and modules made through it may still
  // be referenced by the process, and unloading libcuda is not supported.
}

Error CudaDriver::check(cu::Result result, std::string_view call) const {
  if (result == cu::kSuccess)
    return Error::success();
  const char *name = nullptr;
  const char *description = nullptr;
  if (fns.cuGetErrorName)
    fns.cuGetErrorName(result, &name);
  if (fns.cuGetErrorString)
    fns.cuGetErrorString(result, &description);
  std::string message = std::string(call) + " failed: " +
                        (name ? name : "CUDA error " + std::to_string(result));
  if (description)
    message += std::string(" (") + description + ")";
  return makeError(message);
}

std::string CudaDriver::versionString() const {
  int version = 0;
  if (fns.cuDriverGetVersion(&version) != cu::kSuccess)
    return "unknown";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

Expected<int> CudaDriver::deviceCount() const {
  int count = 0;
  if (Error e = check(fns.cuDeviceGetCount(&count), "cuDeviceGetCount"))
    return e;
  return count;
}

Expected<int> CudaDriver::attribute(int attribute, cu::Device device) const {
  int value = 0;
  if (Error e = check(fns.cuDeviceGetAttribute(&value, attribute, device),
                      "cuDeviceGetAttribute(" + std::to_string(attribute) + ")"))
    return e;
  return value;
}

Expected<std::pair<int, int>>
CudaDriver::computeCapability(cu::Device device) const {
  Expected<int> major = attribute(cu::kDeviceAttributeComputeCapabilityMajor, device);
  if (!major)
    return major.takeError();
  Expected<int> minor = attribute(cu::kDeviceAttributeComputeCapabilityMinor, device);
  if (!minor)
    return minor.takeError();
  return std::make_pair(*major, *minor);
}

Expected<std::string> CudaDriver::deviceName(cu::Device device) const {
  char name[256] = {0};
  if (Error e = check(fns.cuDeviceGetName(name, sizeof(name) - 1, device),
                      "cuDeviceGetName"))
    return e;
  return std::string(name);
}

Expected<std::pair<cu::Context, cu::Device>> CudaDriver::currentContext() const {
  cu::Context context = nullptr;
  if (Error e = check(fns.cuCtxGetCurrent(&context), "cuCtxGetCurrent"))
    return e;
  if (!context)
    return makeError("no CUDA context is current on this thread: initialize "
                     "the device first (e.g. torch.cuda.init() or "
                     "CudaDriver::makePrimaryContextCurrent)");
  cu::Device device = 0;
  if (Error e = check(fns.cuCtxGetDevice(&device), "cuCtxGetDevice"))
    return e;
  return std::make_pair(context, device);
}

Expected<cu::Context> CudaDriver::makePrimaryContextCurrent(int ordinal) const {
  Expected<int> count = deviceCount();
  if (!count)
    return count.takeError();
  if (ordinal < 0 || ordinal >= *count)
    return makeError("device ordinal " + std::to_string(ordinal) +
                     " is out of range: " + std::to_string(*count) +
                     " CUDA device(s) visible");
  cu::Device device = 0;
  if (Error e = check(fns.cuDeviceGet(&device, ordinal), "cuDeviceGet"))
    return e;
  cu::Context context = nullptr;
  if (Error e = check(fns.cuDevicePrimaryCtxRetain(&context, device),
                      "cuDevicePrimaryCtxRetain"))
    return e;
  if (Error e = check(fns.cuCtxSetCurrent(context), "cuCtxSetCurrent"))
    return e;
  return context;
}

std::string archForComputeCapability(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

Expected<std::pair<int, int>> parseCudaArch(const std::string &arch,
                                            bool *archSpecific) {
  auto bad = [&] {
    return makeError("invalid CUDA arch '" + arch +
                     "': expected sm_<major><minor>[a|f] or "
                     "compute_<major><minor>[a|f], e.g. sm_80 or sm_90a");
  };
  std::string digits;
  size_t pos;
  if (arch.rfind("sm_", 0) == 0)
    pos = 3;
  else if (arch.rfind("compute_", 0) == 0)
    pos = 8;
  else
    return bad();
  while (pos < arch.size() && std::isdigit(static_cast<unsigned char>(arch[pos])))
    digits += arch[pos++];
  bool specific = false;
  if (pos < arch.size()) {
    if (pos + 1 != arch.size() || (arch[pos] != 'a' && arch[pos] != 'f'))
      return bad();
    specific = true;
  }
  if (digits.size() < 2 || digits.size() > 4)
    return bad();
  if (archSpecific)
    *archSpecific = specific;
  int major = std::stoi(digits.substr(0, digits.size() - 1));
  int minor = digits.back() - '0';
  return std::make_pair(major, minor);
}

} // namespace lossjit::runtime
