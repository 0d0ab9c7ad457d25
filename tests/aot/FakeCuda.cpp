//===- FakeCuda.cpp -------------------------------------------------------===//

#include "FakeCuda.h"

#include "tools/lossjit-aot/PtxSignature.h"

#include <cstddef>
#include <cstring>

namespace fakecuda {

namespace {
State *current = nullptr;

std::string ptxTarget(const std::string &image) {
  if (image.size() >= 4 && std::memcmp(image.data(), "\x7f" "ELF", 4) == 0)
    return "cubin";
  size_t at = image.find(".target ");
  if (at == std::string::npos)
    return "?";
  size_t end = image.find_first_of(" \n,", at + 8);
  return image.substr(at + 8, end - at - 8);
}

size_t functionIndex(CUfunction f) { return reinterpret_cast<uintptr_t>(f) - 1; }
} // namespace

State &state() {
  if (!current)
    current = new State;
  return *current;
}

void reset() {
  delete current;
  current = new State;
}

} // namespace fakecuda

using fakecuda::state;

extern "C" {

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  switch (error) {
  case CUDA_ERROR_INVALID_PTX: *pStr = "CUDA_ERROR_INVALID_PTX"; break;
  case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "CUDA_ERROR_OUT_OF_MEMORY"; break;
  case CUDA_ERROR_INVALID_CONTEXT: *pStr = "CUDA_ERROR_INVALID_CONTEXT"; break;
  default: *pStr = "CUDA_ERROR_UNKNOWN"; break;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  *pStr = error == CUDA_ERROR_INVALID_PTX ? "a PTX JIT compilation failed" : "fake error";
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  *pctx = state().hasCurrentContext ? state().context : nullptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  if (ctx != state().context)
    return CUDA_ERROR_INVALID_CONTEXT;
  ++state().contextDepth;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) {
  --state().contextDepth;
  if (pctx)
    *pctx = state().context;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice) {
  switch (attrib) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = state().major; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = state().minor; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = state().optinShared; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *pi = state().multiprocessors;
    break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
  if (state().moduleLoadResult != CUDA_SUCCESS) {
    for (unsigned i = 0; i < numOptions; ++i)
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
        std::strcpy(static_cast<char *>(optionValues[i]), state().jitLog.c_str());
    return state().moduleLoadResult;
  }
  const char *bytes = static_cast<const char *>(image);
  // PTX is NUL-terminated text; a cubin is an ELF image (sized by its header;
  // the fake keeps its first bytes only, enough to tell it apart).
  std::string text = std::memcmp(bytes, "\x7f" "ELF", 4) == 0 ? std::string(bytes, 64)
                                                               : std::string(bytes);
  state().modules.push_back(text);
  *module = reinterpret_cast<CUmodule>(uintptr_t(state().modules.size()));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule) {
  ++state().unloads;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  size_t module = reinterpret_cast<uintptr_t>(hmod) - 1;
  if (module >= state().modules.size())
    return CUDA_ERROR_INVALID_HANDLE;
  const std::string &image = state().modules[module];
  if (image.rfind("\x7f" "ELF", 0) != 0 &&
      image.find(std::string(".entry ") + name) == std::string::npos)
    return CUDA_ERROR_NOT_FOUND;
  state().functions.emplace_back(module, name);
  *hfunc = reinterpret_cast<CUfunction>(uintptr_t(state().functions.size()));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int *value, CUfunction_attribute attrib, CUfunction) {
  if (attrib != CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    return CUDA_ERROR_INVALID_VALUE;
  *value = state().staticShared;
  return CUDA_SUCCESS;
}

namespace {
/// Records an occupancy query of `f`, and whether its shared memory was
/// opted in first (when it has any).
void recordOccupancy(CUfunction f, unsigned threads, size_t shared, unsigned clusterGridX) {
  const std::string &name = state().functions[fakecuda::functionIndex(f)].second;
  bool optedIn = shared == 0;
  for (const auto &[function, bytes] : state().sharedOptIns)
    optedIn = optedIn || (function == name && size_t(bytes) >= shared);
  state().occupancyQueries.push_back(
      {name, threads, static_cast<unsigned>(shared), clusterGridX, optedIn});
}
} // namespace

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction f,
                                                             int blockSize, size_t shared) {
  recordOccupancy(f, static_cast<unsigned>(blockSize), shared, 0);
  *numBlocks = state().blocksPerSm;
  return state().occupancyResult;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction f,
                                              const CUlaunchConfig *config) {
  if (!config || config->numAttrs != 0)
    return CUDA_ERROR_INVALID_VALUE;
  recordOccupancy(f, config->blockDimX * config->blockDimY * config->blockDimZ,
                  config->sharedMemBytes, config->gridDimX);
  *numClusters = state().activeClusters;
  return state().occupancyResult;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    return CUDA_ERROR_INVALID_VALUE;
  state().sharedOptIns.emplace_back(state().functions[fakecuda::functionIndex(hfunc)].second,
                                    value);
  return CUDA_SUCCESS;
}

static CUdeviceptr fakeAllocate(size_t bytes) {
  CUdeviceptr p = state().nextAddress;
  state().nextAddress += (bytes + 4095) / 4096 * 4096 + 4096;
  state().allocations.emplace_back(p, bytes);
  return p;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
  ++state().syncAllocs;
  *dptr = fakeAllocate(bytesize);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  state().frees.push_back(dptr);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream) {
  if (!state().poolsSupported)
    return CUDA_ERROR_NOT_SUPPORTED;
  ++state().asyncAllocs;
  *dptr = fakeAllocate(bytesize);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream) {
  state().frees.push_back(dptr);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream) {
  ++state().streamSyncs;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra) {
  if (extra || !kernelParams)
    return CUDA_ERROR_INVALID_VALUE;
  if (state().launchResult != CUDA_SUCCESS)
    return state().launchResult;
  if (state().contextDepth <= 0 && !state().hasCurrentContext)
    return CUDA_ERROR_INVALID_CONTEXT;
  const auto &[module, name] = state().functions.at(fakecuda::functionIndex(f));
  const std::string &image = state().modules[module];
  fakecuda::Launch l;
  l.kernel = name;
  l.target = fakecuda::ptxTarget(image);
  l.grid = {gridDimX, gridDimY, gridDimZ};
  l.block = {blockDimX, blockDimY, blockDimZ};
  l.sharedBytes = sharedMemBytes;
  l.stream = hStream;
  // The PTX says how many 8-byte parameters the entry takes.
  auto params = lossjit::aot::parsePtxEntryParams(image, name);
  if (!params)
    return CUDA_ERROR_INVALID_PTX;
  for (size_t i = 0; i < params->size(); ++i) {
    uint64_t v;
    std::memcpy(&v, kernelParams[i], sizeof v);
    l.params.push_back(v);
  }
  state().launches.push_back(std::move(l));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType type,
                                        cuuint32_t rank, void *global, const cuuint64_t *dims,
                                        const cuuint64_t *strides, const cuuint32_t *box,
                                        const cuuint32_t *, CUtensorMapInterleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill) {
  if (!tensorMap || rank != 2 || strides[0] % 16)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t address = reinterpret_cast<uintptr_t>(global);
  std::array<uint64_t, 9> call = {address, dims[0],        dims[1],           strides[0],  box[0],
                                  box[1],  uint64_t(type), uint64_t(swizzle), uint64_t(l2)};
  state().tensorMaps.push_back(call);
  uint64_t words[16] = {};
  std::memcpy(words, call.data(), sizeof call);
  std::memcpy(tensorMap, words, sizeof words);
  return CUDA_SUCCESS;
}

} // extern "C"

namespace fakecuda {

namespace cu = lossjit::runtime::cu;

// The runtime's CUlaunchConfig mirror must be cuda.h's, field for field.
static_assert(sizeof(cu::LaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(cu::LaunchConfig, sharedMemBytes) ==
              offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(cu::LaunchConfig, hStream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(cu::LaunchConfig, numAttrs) == offsetof(CUlaunchConfig, numAttrs));

lossjit::runtime::CudaDriverApi runtimeApi() {
  lossjit::runtime::CudaDriverApi api{};
  api.cuGetErrorName = [](cu::Result r, const char **s) -> cu::Result {
    return ::cuGetErrorName(static_cast<CUresult>(r), s);
  };
  api.cuGetErrorString = [](cu::Result r, const char **s) -> cu::Result {
    return ::cuGetErrorString(static_cast<CUresult>(r), s);
  };
  api.cuCtxGetCurrent = [](cu::Context *c) -> cu::Result {
    CUcontext ctx;
    CUresult r = ::cuCtxGetCurrent(&ctx);
    *c = reinterpret_cast<cu::Context>(ctx);
    return r;
  };
  api.cuCtxGetDevice = [](cu::Device *d) -> cu::Result { return ::cuCtxGetDevice(d); };
  api.cuDeviceGetAttribute = [](int *v, int a, cu::Device d) -> cu::Result {
    return ::cuDeviceGetAttribute(v, static_cast<CUdevice_attribute>(a), d);
  };
  api.cuModuleLoadDataEx = [](cu::Module *m, const void *image, unsigned n, int *options,
                              void **values) -> cu::Result {
    std::vector<CUjit_option> opts;
    for (unsigned i = 0; i < n; ++i)
      opts.push_back(static_cast<CUjit_option>(options[i]));
    CUmodule module;
    CUresult r = ::cuModuleLoadDataEx(&module, image, n, opts.data(), values);
    *m = reinterpret_cast<cu::Module>(module);
    return r;
  };
  api.cuModuleUnload = [](cu::Module m) -> cu::Result {
    return ::cuModuleUnload(reinterpret_cast<CUmodule>(m));
  };
  api.cuModuleGetFunction = [](cu::Function *f, cu::Module m, const char *name) -> cu::Result {
    CUfunction fn;
    CUresult r = ::cuModuleGetFunction(&fn, reinterpret_cast<CUmodule>(m), name);
    *f = reinterpret_cast<cu::Function>(fn);
    return r;
  };
  api.cuFuncGetAttribute = [](int *v, int a, cu::Function f) -> cu::Result {
    return ::cuFuncGetAttribute(v, static_cast<CUfunction_attribute>(a),
                                reinterpret_cast<CUfunction>(f));
  };
  api.cuFuncSetAttribute = [](cu::Function f, int a, int v) -> cu::Result {
    return ::cuFuncSetAttribute(reinterpret_cast<CUfunction>(f),
                                static_cast<CUfunction_attribute>(a), v);
  };
  api.cuTensorMapEncodeTiled = [](void *map, int type, unsigned rank, void *global,
                                   const uint64_t *dims, const uint64_t *strides,
                                   const uint32_t *box, const uint32_t *steps, int interleave,
                                   int swizzle, int l2, int oob) -> cu::Result {
    return ::cuTensorMapEncodeTiled(
        static_cast<CUtensorMap *>(map), static_cast<CUtensorMapDataType>(type), rank, global,
        dims, strides, box, steps, static_cast<CUtensorMapInterleave>(interleave),
        static_cast<CUtensorMapSwizzle>(swizzle), static_cast<CUtensorMapL2promotion>(l2),
        static_cast<CUtensorMapFloatOOBfill>(oob));
  };
  api.cuOccupancyMaxActiveBlocksPerMultiprocessor = [](int *n, cu::Function f, int threads,
                                                       size_t shared) -> cu::Result {
    return ::cuOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<CUfunction>(f),
                                                         threads, shared);
  };
  api.cuOccupancyMaxActiveClusters = [](int *n, cu::Function f,
                                        const cu::LaunchConfig *config) -> cu::Result {
    return ::cuOccupancyMaxActiveClusters(n, reinterpret_cast<CUfunction>(f),
                                          reinterpret_cast<const CUlaunchConfig *>(config));
  };
  api.cuLaunchKernel = [](cu::Function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, cu::Stream s,
                          void **params, void **extra) -> cu::Result {
    return ::cuLaunchKernel(reinterpret_cast<CUfunction>(f), gx, gy, gz, bx, by, bz, shared,
                            reinterpret_cast<CUstream>(s), params, extra);
  };
  return api;
}

} // namespace fakecuda
