//===- LaunchPlan.h - Sizes, grids and kernel arguments of a bundle -*- C++ -*-===//
//
// A bundle's manifest says how to size and call its kernels symbolically; a
// LaunchPlan is that description compiled once per bundle (formulas parsed,
// argument names bound to slots) so that each launch only evaluates a few
// integer programs and copies pointers. It knows nothing about CUDA, which
// keeps it testable on machines without a GPU.
//
// A manifest may come from a directory someone else can write, so every
// quantity is checked before it reaches a kernel: resolve() bounds element
// counts and byte sizes (no int64/uint64 wrap-around), grids (CUDA's limits),
// and checkBuffers() compares what the kernels will be told with the buffers
// that exist; packArguments() refuses a ResolvedLaunch that is not this
// plan's.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_LAUNCHPLAN_H
#define LOSSJIT_RUNTIME_LAUNCHPLAN_H

#include "runtime/Formula.h"
#include "runtime/KernelBundle.h"
#include "runtime/Status.h"
#include "runtime/TensorMapBytes.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lossjit::runtime {

/// What a kernel argument name refers to.
struct ArgBinding {
  enum Kind {
    Param,
    Workspace,
    Dim,
    Constant,
    Derived,
    ChunkBegin,
    ChunkEnd,
    TensorMap,
    TensorMapsReady
  };
  Kind kind;
  /// Index into the bundle's params / workspaces / dims / constants / derived
  /// symbols / tensor maps (0 for ChunkBegin / ChunkEnd / TensorMapsReady).
  size_t index;
};

/// Concrete sizes for one set of dims.
struct ResolvedLaunch {
  /// Element counts, per param and per workspace; byte sizes (never
  /// wrapped: resolve() rejects sizes beyond int64).
  std::vector<int64_t> paramElements;
  std::vector<uint64_t> paramBytes;
  std::vector<int64_t> workspaceElements;
  std::vector<uint64_t> workspaceBytes;
  /// Per kernel: grid size; `skip` when some grid dimension is 0 (nothing to
  /// do, and CUDA rejects empty grids).
  struct Kernel {
    std::array<uint32_t, 3> grid;
    bool skip;
  };
  std::vector<Kernel> kernels;
  /// Per tensor map of the bundle: what cuTensorMapEncodeTiled needs besides
  /// the param's address (paramAddresses[param]).
  struct TensorMap {
    size_t buffer;          ///< index into the params, or the workspaces
    bool workspace = false; ///< a workspace (its address exists once allocated)
    std::string dtype;
    std::array<uint64_t, 2> dims;  ///< elements: contiguous, rows.
    uint64_t rowBytes;             ///< the rows' stride.
    std::array<uint32_t, 2> box;
    uint32_t swizzle;
  };
  std::vector<TensorMap> tensorMaps;
  /// dims, then constants, then derived symbols: the values the formulas saw.
  std::vector<int64_t> symbolValues;
  /// Chunked bundles (LaunchPlan::isChunked()): the rows the per-chunk groups
  /// split (the bundle's chunk_dim: N, or V for vocabulary chunks) and the
  /// rows per chunk (the chunk symbol, at least 1).
  /// Both 0 for bundles without chunking.
  int64_t chunkRows = 0;
  int64_t chunkSize = 0;
};

/// Whether TMA can take a map of `map` over a buffer at `address` (what the
/// launcher checks before encoding; the kernels fall back to cp.async when
/// any map of a launch fails it): a 16-byte aligned base, rows a multiple of
/// 16 bytes below 2^40, every dim in [1, 2^31) (the kernels' coordinates
/// are int32). "" when it can, else why not.
std::string tensorMapUnencodable(const ResolvedLaunch::TensorMap &map, uint64_t address);

/// Kernel parameters in cuLaunchKernel's form: `pointers()[i]` points at the
/// i-th parameter — an 8-byte value, or a 128-byte tensor map. Reused across
/// launches, so its vectors keep their capacity.
class PackedArgs {
public:
  void **pointers() { return pointerArray.data(); }
  size_t size() const { return pointerArray.size(); }
  /// The raw 8-byte values, tensor maps left out (for tests and logs).
  const std::vector<uint64_t> &values() const { return slots; }
  /// The tensor maps passed, in argument order.
  const std::vector<TensorMapBytes> &maps() const { return mapSlots; }

private:
  friend class LaunchPlan;
  std::vector<uint64_t> slots;
  std::vector<TensorMapBytes> mapSlots;
  /// Where parameter i lies: slots[j] (false, j) or mapSlots[j] (true, j).
  std::vector<std::pair<bool, size_t>> order;
  std::vector<void *> pointerArray;
};

/// A bundle's launch description, validated and bound.
class LaunchPlan {
public:
  /// Prepares `bundle` (which must pass KernelBundle::verify()).
  static Expected<LaunchPlan> build(const KernelBundle &bundle);

  /// Evaluates the derived symbols, then every size and grid, for `dims` (in
  /// the bundle's dims order). Errors name the dim, derived symbol, workspace
  /// or kernel and the offending value; a param whose graph declares static
  /// extents (BundleParam::extents) must have exactly those.
  Expected<ResolvedLaunch> resolve(std::span<const int64_t> dims) const;

  /// Fills `out` with kernel `kernel`'s parameters following the memref ABI
  /// (see KernelBundle.h). `paramAddresses` and `workspaceAddresses` hold one
  /// device address per param / workspace, in bundle order. `chunkBegin` and
  /// `chunkEnd` are the row range of the current chunk, packed (as int64) for
  /// the chunk_begin / chunk_end args of a per-chunk kernel; a per-chunk
  /// kernel needs 0 <= chunkBegin <= chunkEnd <= launch.chunkRows. Other
  /// kernels ignore them.
  /// `maps` holds the launch's tensor maps (one per bundle tensor map,
  /// ResolvedLaunch::tensorMaps order) and `encoded` whether each one could
  /// be encoded (empty: none). A kernel whose every map was encoded gets
  /// them and tensor_maps_ready = 1; any other gets zeros and 0, and takes
  /// its cp.async path — per kernel, so a dZ map that cannot be encoded
  /// (V·2 bytes not a multiple of 16) leaves the logit kernels on TMA.
  Error packArguments(size_t kernel, const ResolvedLaunch &launch,
                      std::span<const uint64_t> paramAddresses,
                      std::span<const uint64_t> workspaceAddresses,
                      PackedArgs &out, int64_t chunkBegin = 0,
                      int64_t chunkEnd = 0, std::span<const TensorMapBytes> maps = {},
                      std::span<const uint8_t> encoded = {}) const;

  /// Checks `launch` (which must come from this plan's resolve()) against the
  /// buffers that exist, before anything is launched: `paramElements[i]` is
  /// the element count of the caller's buffer for param i (-1: unknown, the
  /// caller vouches for it) and must equal the param's shape product;
  /// `workspaceBytes[i]` is the size of the allocation for workspace i and
  /// must hold the workspace. Errors name the param or workspace and both
  /// sizes.
  Error checkBuffers(const ResolvedLaunch &launch, std::span<const int64_t> paramElements,
                     std::span<const uint64_t> workspaceBytes) const;

  /// Number of 8-byte kernel parameters kernel `kernel` takes.
  size_t parameterCount(size_t kernel) const;

  size_t numParams() const { return params.size(); }
  size_t numWorkspaces() const { return workspaces.size(); }
  size_t numDims() const { return dimNames.size(); }
  size_t numKernels() const { return kernels.size(); }
  size_t numTensorMaps() const { return tensorMaps.size(); }
  const std::string &tensorMapName(size_t i) const { return tensorMaps[i].name; }
  size_t numDerived() const { return derivedSymbols.size(); }
  const std::string &derivedName(size_t i) const { return derivedSymbols[i].name; }
  /// Whether the bundle names a chunk symbol (ResolvedLaunch::chunkSize).
  bool isChunked() const { return chunkSymbol >= 0; }
  /// Whether kernel `k` runs once per row chunk, in the group of consecutive
  /// per-chunk kernels around it.
  bool isPerChunk(size_t k) const { return kernels[k].perChunk; }
  const std::string &paramName(size_t i) const { return params[i].name; }
  const std::string &workspaceName(size_t i) const { return workspaces[i].name; }
  const std::vector<std::string> &getDimNames() const { return dimNames; }
  /// Human-readable shape of param `i` ("[N, D]").
  std::string paramShapeText(size_t i) const;
  size_t paramElementSize(size_t i) const { return params[i].elementSize; }
  const std::vector<ArgBinding> &kernelArgs(size_t k) const {
    return kernels[k].args;
  }

  /// Whether kernel `k` sweeps its tiles with a stride of gridDim.x
  /// (BundleKernel::persistent), and its blocks per cluster (1: none).
  bool isPersistent(size_t k) const { return kernels[k].persistent; }
  uint32_t clusterSize(size_t k) const { return kernels[k].cluster; }

  /// The blocks along x to launch kernel `k` with, whose grid resolved to
  /// `gridX`, on a device where `resident` of its blocks run at once (0:
  /// unknown). gridX, except that a persistent kernel runs at most the
  /// co-resident blocks, in whole clusters and at least one: more would
  /// make a second wave, nearly doubling its time, and the sweep's results
  /// do not depend on how many blocks share it.
  uint32_t launchedBlocksX(size_t k, uint32_t gridX, uint64_t resident) const;

  /// "name grid=(a,b,c) block=(x,y,z) smem=B" for logs.
  std::string describeKernel(size_t kernel, const ResolvedLaunch &launch) const;

private:
  /// Whether `launch` has the shape of this plan's resolve() results.
  Error checkResolved(const ResolvedLaunch &launch) const;

  struct ShapeEntry {
    bool isSymbol;
    int64_t value; // literal or symbol index
  };
  struct Param {
    std::string name;
    std::string dtype;
    size_t elementSize;
    std::vector<ShapeEntry> shape;
    std::string shapeText;
    std::vector<int64_t> extents; ///< declared per shape entry (-1: any), or empty.
  };
  struct Workspace {
    std::string name;
    size_t elementSize;
    Formula count;
  };
  struct Kernel {
    std::string name;
    std::array<Formula, 3> grid;
    std::array<uint32_t, 3> block;
    uint32_t sharedBytes;
    std::vector<ArgBinding> args;
    size_t parameterCount;
    bool perChunk;
    uint32_t cluster;
    bool persistent;
  };
  struct Derived {
    std::string name;
    Formula formula;
  };
  struct TensorMap {
    std::string name;
    size_t buffer;
    bool workspace;
    std::string dtype;
    size_t elementSize;
    std::array<Formula, 2> dims;
    std::array<uint32_t, 2> box;
    uint32_t swizzle;
  };

  std::vector<std::string> dimNames;
  std::vector<int64_t> constantValues;
  std::vector<Derived> derivedSymbols;
  /// Indices into ResolvedLaunch::symbolValues; -1 when not chunked.
  int64_t chunkSymbol = -1;
  int64_t chunkRowsDim = -1;
  std::vector<Param> params;
  std::vector<Workspace> workspaces;
  std::vector<Kernel> kernels;
  std::vector<TensorMap> tensorMaps;
};

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_LAUNCHPLAN_H
