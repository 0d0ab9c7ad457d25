//===- CudaDriver.h - The CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// libcuda.so.1 is dlopen'ed rather than linked so the same binaries run on
// machines without a driver (CI, CPU-only users): there the CPU backend keeps
// working and GPU entry points fail with a message saying what is missing.
// The few driver types and constants used are declared here (ABI-identical to
// cuda.h) so the runtime compiles without the CUDA toolkit headers too.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_CUDADRIVER_H
#define LOSSJIT_RUNTIME_CUDADRIVER_H

#include "runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

// The driver's opaque handle types, declared at global scope exactly as
// cuda.h declares them, so code that includes both sees one type.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;

namespace lossjit::runtime {

/// Driver API types and constants, matching cuda.h.
namespace cu {
using Result = int;
using Device = int;
using DevicePtr = unsigned long long;
using Context = ::CUctx_st *;
using Module = ::CUmod_st *;
using Function = ::CUfunc_st *;
using Stream = ::CUstream_st *;

inline constexpr Result kSuccess = 0;
inline constexpr int kDeviceAttributeMultiprocessorCount = 16;
inline constexpr int kDeviceAttributeComputeCapabilityMajor = 75;
inline constexpr int kDeviceAttributeComputeCapabilityMinor = 76;
inline constexpr int kDeviceAttributeMaxSharedMemoryPerBlockOptin = 97;
inline constexpr int kFuncAttributeMaxDynamicSharedSizeBytes = 8;
/// CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: a function's static shared memory.
inline constexpr int kFuncAttributeSharedSizeBytes = 1;
inline constexpr int kJitInfoLogBuffer = 3;
inline constexpr int kJitInfoLogBufferSizeBytes = 4;
inline constexpr int kJitErrorLogBuffer = 5;
inline constexpr int kJitErrorLogBufferSizeBytes = 6;
inline constexpr unsigned kStreamNonBlocking = 1;

/// CUlaunchConfig (CUDA 11.7+), as cuOccupancyMaxActiveClusters reads it.
struct LaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  Stream hStream;
  void *attrs;
  unsigned numAttrs;
};
} // namespace cu

/// The resolved driver entry points. Each CUresult must go through
/// CudaDriver::check so the error names the call and the driver's message.
struct CudaDriverApi {
  cu::Result (*cuInit)(unsigned);
  cu::Result (*cuDriverGetVersion)(int *);
  cu::Result (*cuGetErrorString)(cu::Result, const char **);
  cu::Result (*cuGetErrorName)(cu::Result, const char **);
  cu::Result (*cuDeviceGetCount)(int *);
  cu::Result (*cuDeviceGet)(cu::Device *, int);
  cu::Result (*cuDeviceGetName)(char *, int, cu::Device);
  cu::Result (*cuDeviceGetAttribute)(int *, int, cu::Device);
  cu::Result (*cuDevicePrimaryCtxRetain)(cu::Context *, cu::Device);
  cu::Result (*cuDevicePrimaryCtxRelease)(cu::Device);
  cu::Result (*cuCtxSetCurrent)(cu::Context);
  cu::Result (*cuCtxGetCurrent)(cu::Context *);
  cu::Result (*cuCtxGetDevice)(cu::Device *);
  cu::Result (*cuCtxSynchronize)();
  cu::Result (*cuModuleLoadDataEx)(cu::Module *, const void *, unsigned, int *,
                                   void **);
  cu::Result (*cuModuleUnload)(cu::Module);
  cu::Result (*cuModuleGetFunction)(cu::Function *, cu::Module, const char *);
  cu::Result (*cuFuncSetAttribute)(cu::Function, int, int);
  /// May be null in a table built for tests (fromApi): the static shared
  /// memory then counts as 0.
  cu::Result (*cuFuncGetAttribute)(int *, int, cu::Function);
  cu::Result (*cuLaunchKernel)(cu::Function, unsigned, unsigned, unsigned,
                               unsigned, unsigned, unsigned, unsigned,
                               cu::Stream, void **, void **);
  cu::Result (*cuMemAlloc)(cu::DevicePtr *, size_t);
  cu::Result (*cuMemFree)(cu::DevicePtr);
  cu::Result (*cuMemcpyHtoD)(cu::DevicePtr, const void *, size_t);
  cu::Result (*cuMemcpyDtoH)(void *, cu::DevicePtr, size_t);
  cu::Result (*cuMemsetD8)(cu::DevicePtr, unsigned char, size_t);
  cu::Result (*cuStreamCreate)(cu::Stream *, unsigned);
  cu::Result (*cuStreamDestroy)(cu::Stream);
  cu::Result (*cuStreamSynchronize)(cu::Stream);
  /// Optional (CUDA 12.0+ drivers): null when the driver lacks it, which
  /// only the TMA kernels need (runtime/TensorMap.h).
  cu::Result (*cuTensorMapEncodeTiled)(void *tensorMap, int dataType, unsigned rank,
                                       void *globalAddress, const uint64_t *globalDim,
                                       const uint64_t *globalStrides, const uint32_t *boxDim,
                                       const uint32_t *elementStrides, int interleave,
                                       int swizzle, int l2Promotion, int oobFill);
  /// Optional (null in a table built for tests that leave it out): without
  /// it a persistent kernel runs the grid its plan says.
  cu::Result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *numBlocks, cu::Function,
                                                            int blockSize, size_t dynamicSMem);
  /// Optional (CUDA 11.7+ drivers): without it a persistent kernel in
  /// clusters runs the grid its plan says.
  cu::Result (*cuOccupancyMaxActiveClusters)(int *numClusters, cu::Function,
                                             const cu::LaunchConfig *config);
};

/// A loaded driver library with cuInit done.
class CudaDriver {
public:
  /// The process-wide driver, loaded on first use from defaultLibraryPath().
  /// The outcome (success or the error) is computed once and shared: whether
  /// a driver exists does not change during a process.
  static Expected<const CudaDriver *> get();

  /// Loads a driver from `libraryPath` (a soname or a path) and calls cuInit.
  /// Tests use it to point at a nonexistent library.
  static Expected<std::unique_ptr<CudaDriver>> load(const std::string &libraryPath);

  /// $LOSSJIT_CUDA_DRIVER_PATH if set (a test hook), else "libcuda.so.1".
  static std::string defaultLibraryPath();

  /// A driver over caller-supplied entry points, without dlopen or cuInit.
  /// Lets CPU-only tests run the launcher against a recording fake driver.
  static std::unique_ptr<CudaDriver> fromApi(const CudaDriverApi &api);

  ~CudaDriver();
  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;

  const CudaDriverApi &api() const { return fns; }

  /// Success for CUDA_SUCCESS, else "<call> failed: <NAME> (<description>)".
  Error check(cu::Result result, std::string_view call) const;

  /// The driver's CUDA version as "major.minor" (e.g. "12.8").
  std::string versionString() const;

  /// Number of visible devices (0 is not an error).
  Expected<int> deviceCount() const;

  /// (major, minor) compute capability of `device`.
  Expected<std::pair<int, int>> computeCapability(cu::Device device) const;

  /// A device attribute.
  Expected<int> attribute(int attribute, cu::Device device) const;

  /// The device's name ("NVIDIA H200").
  Expected<std::string> deviceName(cu::Device device) const;

  /// The calling thread's current context and its device; an error when the
  /// thread has none (frameworks like PyTorch make one current lazily).
  Expected<std::pair<cu::Context, cu::Device>> currentContext() const;

  /// Retains device `ordinal`'s primary context (the one PyTorch and the
  /// runtime API share) and makes it current on this thread. The retain is
  /// intentionally never released: the context must outlive modules cached
  /// in it.
  Expected<cu::Context> makePrimaryContextCurrent(int ordinal) const;

private:
  CudaDriver() = default;
  void *handle = nullptr;
  CudaDriverApi fns{};
};

/// "sm_<major><minor>" for a compute capability.
std::string archForComputeCapability(int major, int minor);

/// Parses "sm_80" / "sm_90a" / "compute_90" into (major, minor, archSpecific).
/// archSpecific is true for the 'a' (and 'f') suffixed targets, whose PTX
/// runs only on exactly that major version.
Expected<std::pair<int, int>> parseCudaArch(const std::string &arch,
                                            bool *archSpecific = nullptr);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_CUDADRIVER_H
