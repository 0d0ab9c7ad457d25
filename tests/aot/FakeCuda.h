//===- FakeCuda.h - A recording CUDA driver for the generated C API -*- C++ -*-===//
//
// The generated C API links against libcuda's symbols. Tests link this file
// instead: the same entry points (declared by cuda.h, or by the fake_cuda/
// stand-in when no toolkit is installed), recording modules, functions,
// allocations and every launch with its unpacked kernel parameters. The
// runtime's launcher can be pointed at the same fake (runtimeApi()), so the
// two launch paths are compared call for call.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTS_AOT_FAKECUDA_H
#define LOSSJIT_TESTS_AOT_FAKECUDA_H

// runtime/ headers before cuda.h: CudaDriver.h names `struct CUstream_st`
// (and friends) inside its namespace, which only stays its own type when
// cuda.h has not declared the global one yet. The runtime library is built
// without cuda.h, so this order keeps the mangled names identical.
#include "runtime/CudaDriver.h"

#include <cuda.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fakecuda {

struct Launch {
  std::string kernel;
  /// ".target" of the module's PTX ("sm_80"), or "cubin".
  std::string target;
  std::array<unsigned, 3> grid, block;
  unsigned sharedBytes;
  CUstream stream;
  std::vector<uint64_t> params;

  friend bool operator==(const Launch &, const Launch &) = default;
};

struct State {
  // Device.
  int major = 9, minor = 0, optinShared = 227 * 1024;
  /// What cuFuncGetAttribute(SHARED_SIZE_BYTES) says of every function.
  int staticShared = 0;
  /// Occupancy: SMs, and what cuOccupancyMaxActiveBlocksPerMultiprocessor
  /// and cuOccupancyMaxActiveClusters say of every function (an H200's
  /// SMs, one block each; clusters of two on 66 TPCs).
  int multiprocessors = 132, blocksPerSm = 1, activeClusters = 66;
  CUresult occupancyResult = CUDA_SUCCESS; ///< returned by both queries
  CUcontext context = reinterpret_cast<CUcontext>(uintptr_t(0x1000));
  bool hasCurrentContext = true;
  // Failure injection.
  CUresult moduleLoadResult = CUDA_SUCCESS; ///< returned by cuModuleLoadDataEx
  std::string jitLog;                       ///< written to the error log then
  bool poolsSupported = true;               ///< cuMemAllocAsync works
  CUresult launchResult = CUDA_SUCCESS;
  // Records.
  std::vector<std::string> modules; ///< image text per loaded module
  int unloads = 0;
  std::vector<std::pair<size_t, std::string>> functions; ///< (module, name)
  std::vector<std::pair<std::string, int>> sharedOptIns;
  /// Occupancy queries: (function, threads, dynamic shared memory, grid x of
  /// the cluster query's config or 0 for the per-SM query). A query before
  /// the function's shared-memory opt-in would see the 48 KiB cap.
  struct OccupancyQuery {
    std::string function;
    unsigned threads, sharedBytes, clusterGridX;
    bool optedIn;
    friend bool operator==(const OccupancyQuery &, const OccupancyQuery &) = default;
  };
  std::vector<OccupancyQuery> occupancyQueries;
  std::vector<Launch> launches;
  std::vector<std::pair<CUdeviceptr, size_t>> allocations;
  std::vector<CUdeviceptr> frees;
  int asyncAllocs = 0, syncAllocs = 0, streamSyncs = 0;
  int contextDepth = 0; ///< pushes minus pops
  CUdeviceptr nextAddress = 0x7f0000000000ull;
  /// cuTensorMapEncodeTiled calls: (address, dims[0], dims[1], stride,
  /// box[0], box[1], data type, swizzle, L2 promotion), which the map's
  /// first 72 bytes hold too: a launch's recorded parameter (its first 8
  /// bytes) is the address.
  std::vector<std::array<uint64_t, 9>> tensorMaps;
};

/// The fake's state; reset() before each test.
State &state();
void reset();

/// The same fake through the runtime's CudaDriver types.
lossjit::runtime::CudaDriverApi runtimeApi();

} // namespace fakecuda

#endif // LOSSJIT_TESTS_AOT_FAKECUDA_H
