//===- CudaLauncher.h - Run a kernel bundle on a CUDA stream ----*- C++ -*-===//
//
// Given a bundle, device pointers for its params, the runtime dims and the
// caller's stream, the launcher sizes and allocates the workspaces, packs the
// memref-ABI arguments and enqueues every kernel in manifest order, each run
// of consecutive per-chunk kernels once per row chunk (KernelBundle.h). Modules
// are loaded (PTX JIT-compiled by the driver) once per (bundle key, CUDA
// context) and kept; functions needing more than 48 KiB of dynamic shared
// memory are opted in once, at load.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_CUDALAUNCHER_H
#define LOSSJIT_RUNTIME_CUDALAUNCHER_H

#include "runtime/CudaDriver.h"
#include "runtime/KernelBundle.h"
#include "runtime/LaunchPlan.h"
#include "runtime/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace lossjit::runtime {

/// A caller-owned device buffer bound to one bundle param.
struct DeviceBuffer {
  cu::DevicePtr address = 0;
  /// Element count the caller allocated; checked against the param's shape.
  /// -1 skips the check (the caller vouches for it).
  int64_t elements = -1;
};

/// Provides workspace memory for one launch.
struct WorkspaceAllocator {
  /// Returns at least `bytes` (> 0) bytes usable by work on `stream`.
  std::function<Expected<cu::DevicePtr>(size_t bytes, cu::Stream stream)> allocate;
  /// Gives a workspace back. Called right after the last kernel is enqueued,
  /// not after it ran: the allocator must be stream-ordered (PyTorch's caching
  /// allocator, cuMemFreeAsync) or synchronize before reusing the memory.
  std::function<void(cu::DevicePtr address, size_t bytes, cu::Stream stream)> release;
};

/// cuMemAlloc / cuMemFree; release synchronizes the stream first. Simple and
/// slow: for tests and tools, not for training loops.
WorkspaceAllocator makeSynchronousAllocator(const CudaDriver &driver);

/// Loads and launches bundles. Thread-safe.
class CudaLauncher {
public:
  explicit CudaLauncher(const CudaDriver &driver);
  /// Unloads the modules it loaded (errors ignored: their context may be
  /// gone already). Destroy it before tearing down contexts if possible.
  ~CudaLauncher();
  CudaLauncher(const CudaLauncher &) = delete;
  CudaLauncher &operator=(const CudaLauncher &) = delete;

  /// Enqueues every kernel of `bundle` on `stream` in the current context, in
  /// manifest order, except that each maximal run of per-chunk kernels is
  /// enqueued as a group once per row chunk [chunk_begin, chunk_end) (none
  /// when N = 0). With LOSSJIT_LOG=info every launch is logged, with its chunk.
  /// `params` holds one buffer per bundle param (in manifest order), `dims`
  /// one value per bundle dim. Errors name the param/dim/kernel at fault;
  /// nothing is enqueued when validation fails.
  Error launch(const KernelBundle &bundle, std::span<const DeviceBuffer> params,
               std::span<const int64_t> dims, cu::Stream stream,
               const WorkspaceAllocator &allocator);

  /// Loads the bundle's modules into the current context without launching,
  /// so JIT errors (bad PTX, too new a PTX ISA for the driver) surface early.
  Error prepare(const KernelBundle &bundle);

  /// Number of (bundle, context) pairs loaded.
  size_t loadedBundleCount() const;

private:
  struct Loaded;
  Expected<std::shared_ptr<Loaded>> getLoaded(const KernelBundle &bundle);
  Expected<std::shared_ptr<Loaded>> load(const KernelBundle &bundle,
                                         cu::Context context, cu::Device device);

  /// The tensor map of `map` over `address`, encoded once per address and
  /// shape (cuTensorMapEncodeTiled is a host call, but per launch and map).
  Expected<TensorMapBytes> encodeCachedTensorMap(const ResolvedLaunch::TensorMap &map,
                                                 uint64_t address);
  static constexpr size_t kTensorMapCacheEntries = 256;

  const CudaDriver &driver;
  /// The tensor maps' L2 promotion in bytes ($LOSSJIT_TMA_L2_PROMOTION when
  /// the launcher was made).
  const unsigned l2Promotion;
  mutable std::mutex mutex;
  std::map<std::string, TensorMapBytes> tensorMapCache;
  std::map<std::pair<std::string, cu::Context>, std::shared_ptr<Loaded>> loaded;
};

/// Whether an image built for `arch` can run on a device of compute
/// capability (major, minor); the error says why not. PTX runs on its arch and
/// newer; 'a'/'f'-suffixed PTX and cubins only within the same major version.
Error checkArchCompatible(const std::string &arch, bool isCubin, int major,
                          int minor);

/// The arch the JIT compiles for on a device of compute capability
/// (major, minor): sm_90a on 9.0 (Hopper's wgmma kernels; the module runs on
/// 9.0 alone, which is the device it is built for), sm_<major><minor>
/// elsewhere. A non-empty `requested` (LOSSJIT_CUDA_ARCH) replaces that
/// choice — e.g. sm_90 keeps a Hopper on the mma.sync kernels — once it is
/// known to run on the device; the error names `what` and says why not.
Expected<std::string> selectJitArch(int major, int minor, const std::string &requested,
                                    const std::string &what = "LOSSJIT_CUDA_ARCH");

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_CUDALAUNCHER_H
