//===- KernelBundle.h - Compiled op: in-memory form and on-disk format -*- C++ -*-===//
//
// A kernel bundle is everything needed to run one compiled op variant: the
// kernel images plus how to size, order and call them. The compiler writes
// it, the cache stores it, the AOT tool ships directories of them
// (LOSSJIT_KERNEL_PATH), and the launcher runs it; all four share this one
// format, so a runtime-only build can run kernels made elsewhere.
//
// ON-DISK FORMAT (format_version 1)
// ---------------------------------
// A bundle is a directory `<root>/<key>/` holding `manifest.json` and one file
// per kernel image. manifest.json:
//
//   {
//     "format": "lossjit-bundle", "format_version": 1,
//     "key": "<64 lower-case hex: SHA-256 cache key, == directory name>",
//     "lossjit_version": "0.1.0", "llvm_version": "22.1.8",
//     "op": "linear_cross_entropy",          // op family
//     "backend": "cuda",                     // "cuda" (PTX or cubin) | "cpu"
//     "arch": "sm_80",                       // "host" for cpu
//     "options": {...},                      // free-form object (dtype, ...)
//     "tile": {...},                         // free-form object (TileConfig)
//     "ir_hash": "<sha256 hex of canonical IR text>",
//     "params": [ {"name": "x", "kind": "buffer", "dtype": "f16",
//                  "shape": ["N", "D"],       // inputs AND outputs
//                  "extents": [3, -1]}, ... ], // optional: declared by the graph
//     "dims": ["N", "V", "D"],              // runtime int64 symbols (caller)
//     "constants": {"S": 8},                // compile-time int64 symbols
//     "derived": [ {"name": "C",            // optional: computed symbols
//                   "formula": "max(1,min(N,(WB-V*D*4)/(V*4)))"} ],
//     "chunk": "C",                         // optional: rows per chunk
//     "chunk_dim": "V",                     // optional: the dim chunks split (N);
//                                           // with it, format_version is 2
//     "workspaces": [ {"name": "part_m", "dtype": "f32", "count": "S*N"} ],
//     "tensor_maps": [ {"name": "x_tma_128x64",   // optional: TMA maps
//                       "buffer": "x", "dims": ["D", "N"],
//                       "box": [64, 128], "swizzle": 128} ],
//     "kernels": [ {"name": "lce_partial",         // PTX entry name
//                   "file": "lce_partial.sm_80.ptx",
//                   "sha256": "<hex of the file's bytes>",
//                   "bytes": 81234,                 // optional: the file's size
//                   "grid": ["cdiv(N,4)", "S", "1"],
//                   "block": [128, 1, 1],
//                   "shared_bytes": 4096,           // dynamic shared memory
//                   "args": ["x", "w", "part_m", "N"],
//                   "per_chunk": false,             // optional, default false
//                   "cluster": 2,                   // optional, default 1
//                   "persistent": true}, ... ]      // optional, default false
//   }
//
// Names (params, workspaces, dims, constants, derived symbols) are C
// identifiers, unique across all five groups; "cdiv", "min", "max",
// "chunk_begin" and "chunk_end" are reserved. dtype is one of f16 bf16 f32 f64
// i8 i16 i32 i64 u8 u16 u32 u64 i1 (i1 takes one byte). A shape entry is a dim
// or constant name or a non-negative integer; element count = product (empty
// shape = 1). Derived symbols are computed in order once the dims are known,
// each formula (runtime/Formula.h) over dims, constants and earlier derived
// symbols. Grid entries and workspace counts are formulas over dims, constants
// and derived symbols; a grid entry may also be a JSON integer. Unknown
// top-level fields are ignored (forward compatibility). Several kernels may
// name the same file (one module with several entry points) if their images
// are identical. For backend "cpu" the images are opaque to the runtime and
// grid/block/shared_bytes/args are optional.
//
// Chunked launches: kernels run in manifest order, except that each maximal
// run of consecutive "per_chunk" kernels runs as a group once per chunk of
// rows: for chunk_begin = 0, C, 2C, ... while chunk_begin < N, every kernel of
// the group runs with chunk_end = min(N, chunk_begin + C), where N is the dim
// named by "chunk_dim" ("N" when absent; "V" for schedules that cut the
// vocabulary) and C the value of the constant or derived symbol named by
// "chunk" (values below 1 count as 1). With N = 0 a group runs zero times.
// per_chunk kernels need "chunk"; "chunk" needs its chunk_dim among the
// dims; "chunk_dim" needs "chunk". The reserved names
// "chunk_begin" and "chunk_end" may appear as args of per_chunk kernels only.
// "derived", "chunk" and "per_chunk" are optional (written only when used),
// so manifests without them read as before.
//
// Clusters and persistent grids (Hopper): "cluster" is the blocks per
// thread-block cluster along x that the kernel's image requires
// (.reqnctapercluster; 1..16), so grid[0] must come out a multiple of it. A
// "persistent" kernel sweeps its tiles with a stride of gridDim.x, so the
// launcher may launch fewer blocks along x than grid[0], in whole clusters;
// it launches at most as many as are co-resident on the device, since a
// second wave of a sweep would run nearly twice as long. Its grid[1] and
// grid[2] must be "1". Both are optional and written only when set; a
// runtime that ignores them launches grid[0] and gets the same results.
//
// Tensor maps (Hopper kernels built with tile tma=1): each describes a
// row-major 2-D param or workspace (dtype f16, bf16 or f32) of dims[1] rows of dims[0]
// elements (formulas like grid entries; rows dims[0]·element bytes apart),
// copied in boxes of box[0] × box[1] elements (1..256 each; box[0] bytes a
// multiple of 16 and at most the swizzle span) into shared memory with a
// 0-, 32-, 64- or 128-byte swizzle and zero out-of-bounds fill. The launcher
// encodes every map with cuTensorMapEncodeTiled for each call (cached per
// address and dims); an arg naming a map is that 128-byte CUtensorMap passed
// by value, and the reserved arg "tensor_maps_ready" is an int64 that is 1
// when every map the kernel takes could be encoded and 0 when one could not
// (a base not 16-byte aligned, rows not a multiple of 16 bytes, a dim past
// 2^31): that kernel then uses its cp.async path and ignores its maps, which
// are passed as zeros. A map never reaches past its buffer (dims[0] ·
// dims[1] at most its elements). Map names share the one namespace below.
//
// Kernel argument ABI (cuda): an arg naming a buffer (param or workspace)
// expands to the MLIR memref<?xT> descriptor of a flat 1-D buffer, 5 kernel
// parameters: T* allocated, T* aligned, int64 offset (= 0), int64 size
// (= element count), int64 stride (= 1). An arg naming a dim, constant or
// derived symbol, or chunk_begin / chunk_end, is one int64.
//
// manifest.sha256 (beside manifest.json, written by writeBundleDirectory) is
// `<sha256 hex of manifest.json's bytes>  manifest.json\n`, the format of
// sha256sum(1). Since the manifest holds every image's SHA-256, it covers the
// whole entry: the launch plan (params, workspaces, grids, args) as much as
// the images.
//
// Integrity: on load the manifest must match manifest.sha256 (required for
// cache entries, checked when present elsewhere), and each image its SHA-256
// and "bytes". A missing, truncated or altered file, or an unparsable or
// inconsistent manifest, makes the whole entry invalid: it is reported and
// never executed. Files are read only when they are regular files within the
// size bounds below (a FIFO, a device or a huge sparse file is an error, not
// a hang or an out-of-memory abort); an image's bound is its "bytes".
//
// Trust: the hashes detect corruption, truncation, partial edits and entries
// filed under the wrong key (the key and the IR hash are compared on load);
// they are not signatures. Whoever can write a cache directory or a kernel
// path can also write consistent hashes, and kernel images are code, so those
// directories must be writable only by users trusted to run code as you
// (docs/reliability.md).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_KERNELBUNDLE_H
#define LOSSJIT_RUNTIME_KERNELBUNDLE_H

#include "runtime/Json.h"
#include "runtime/Status.h"
#include "runtime/Version.h"

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lossjit::runtime {

inline constexpr const char *kBundleFormat = "lossjit-bundle";
inline constexpr int64_t kBundleFormatVersion = 1;
/// The version of a manifest whose chunks split another dim than N
/// ("chunk_dim"): a runtime from before chunk_dim reads only version 1, so it
/// refuses such a bundle instead of chunking its N. Readers take both.
inline constexpr int64_t kBundleFormatVersionChunkDim = 2;
inline constexpr const char *kManifestFileName = "manifest.json";
/// The manifest's SHA-256, in sha256sum(1) format.
inline constexpr const char *kManifestHashFileName = "manifest.sha256";
/// Size bounds of what readBundleDirectory() reads.
inline constexpr uint64_t kMaxManifestBytes = uint64_t(16) << 20;
inline constexpr uint64_t kMaxImageBytes = uint64_t(1) << 30;
inline constexpr uint64_t kMaxBundleBytes = uint64_t(4) << 30;
/// The most blocks a thread-block cluster may hold (sm_90's non-portable
/// limit; 8 is the portable one).
inline constexpr int64_t kMaxClusterBlocks = 16;
/// The special int64 args of per-chunk kernels: the chunk's row range.
inline constexpr const char *kChunkBeginArg = "chunk_begin";
inline constexpr const char *kChunkEndArg = "chunk_end";
/// The dim whose rows chunked launches split unless the manifest's
/// "chunk_dim" names another.
inline constexpr const char *kChunkRowsDim = "N";

/// Size in bytes of a manifest dtype, or an error naming the valid ones.
Expected<size_t> dtypeSize(const std::string &dtype);

/// A buffer the caller provides (input or output).
struct BundleParam {
  std::string name;
  std::string kind = "buffer";
  std::string dtype;
  /// Dim/constant names or decimal literals.
  std::vector<std::string> shape;
  /// The extents the graph declares for this buffer, one per shape entry
  /// (-1: dynamic), or empty when it declares none: a graph written with
  /// tensor<3x4xf32> must not run on 5 rows (LaunchPlan::resolve checks).
  std::vector<int64_t> extents;
};

/// A scratch buffer the launcher allocates for the duration of one launch.
struct BundleWorkspace {
  std::string name;
  std::string dtype;
  /// Element count formula.
  std::string count;
};

/// A TMA tensor map over a param, encoded per call (see "Tensor maps").
struct BundleTensorMap {
  std::string name;
  std::string buffer;
  std::array<std::string, 2> dims;   ///< formulas: contiguous dim, rows.
  std::array<uint32_t, 2> box = {0, 0};
  uint32_t swizzle = 0;
};

/// The reserved int64 arg saying whether the tensor maps were encoded.
inline constexpr const char *kTensorMapsReadyArg = "tensor_maps_ready";

/// One kernel, launched in manifest order.
struct BundleKernel {
  /// Entry point name inside the image.
  std::string name;
  /// File name of the image inside the bundle directory.
  std::string file;
  std::array<std::string, 3> grid = {"1", "1", "1"};
  std::array<uint32_t, 3> block = {1, 1, 1};
  /// Dynamic shared memory per block, in bytes.
  uint32_t sharedBytes = 0;
  /// Names of params, workspaces, dims, constants or derived symbols (and, in
  /// per-chunk kernels, chunk_begin / chunk_end), in kernel-parameter order.
  std::vector<std::string> args;
  /// Launched once per row chunk, as part of the group of consecutive
  /// per-chunk kernels (see "Chunked launches" above).
  bool perChunk = false;
  /// Blocks per cluster along x the image requires (1: no clusters).
  uint32_t cluster = 1;
  /// The blocks sweep their tiles with a stride of gridDim.x: the launcher
  /// may launch fewer whole clusters along x (see "Clusters and persistent
  /// grids" above).
  bool persistent = false;
  /// The image bytes (PTX text, cubin or a CPU object).
  std::string image;
};

/// The in-memory form of a compiled op variant.
struct KernelBundle {
  std::string key;
  std::string lossjitVersion = kLossjitVersion;
  std::string llvmVersion;
  std::string op;
  std::string backend = "cuda";
  std::string arch;
  JsonValue options = JsonValue::object();
  JsonValue tile = JsonValue::object();
  std::string irHash;
  std::vector<BundleParam> params;
  std::vector<std::string> dims;
  /// Ordered as in the manifest.
  std::vector<std::pair<std::string, int64_t>> constants;
  /// (name, formula) pairs computed in order after dims and constants; each
  /// formula reads dims, constants and earlier derived symbols.
  std::vector<std::pair<std::string, std::string>> derived;
  /// Empty: no chunking. Else the constant or derived symbol giving the rows
  /// per chunk of the per-chunk kernel groups (values < 1 count as 1).
  std::string chunk;
  /// The dim the chunks split (manifest "chunk_dim"; written only when it
  /// is not kChunkRowsDim, so row-chunked manifests read as before).
  std::string chunkDim = kChunkRowsDim;
  std::vector<BundleWorkspace> workspaces;
  std::vector<BundleTensorMap> tensorMaps;
  std::vector<BundleKernel> kernels;

  /// Checks internal consistency: well-formed key and names, known dtypes,
  /// every arg and formula symbol resolves, derived formulas parse in order,
  /// chunking is well-formed, safe file names, sane block sizes, non-empty
  /// images. Errors name the offending field.
  Error verify() const;

  /// The manifest (file hashes computed from the images).
  JsonValue toManifest() const;

  /// Parses a manifest into a bundle without images (see readBundleDirectory),
  /// then returns the per-kernel "sha256" values in `expectedHashes` and the
  /// "bytes" values (-1 where absent) in `expectedSizes`.
  static Expected<KernelBundle> fromManifest(const JsonValue &manifest,
                                             std::vector<std::string> *expectedHashes = nullptr,
                                             std::vector<int64_t> *expectedSizes = nullptr);

  /// Bytes of all images (what the cache's size bound counts, plus manifest).
  uint64_t imageBytes() const;
};

/// Writes `bundle` into `directory` (created if missing): image files first,
/// then manifest.sha256, manifest.json last. Not atomic by itself; the cache
/// writes into a temporary directory and renames it.
Error writeBundleDirectory(const KernelBundle &bundle,
                           const std::string &directory);

/// What readBundleDirectory() must find besides a well-formed bundle.
struct BundleReadOptions {
  /// Non-empty: the manifest's "key" must equal it (the directory name).
  std::string expectedKey;
  /// Non-empty: the manifest's "ir_hash" must equal it, so an entry copied
  /// under another key (its "key" rewritten) is not used for another graph.
  std::string expectedIrHash;
  /// manifest.sha256 must exist (cache entries; prebuilt bundles from older
  /// lossjit versions lack it, and are checked when it is present).
  bool requireManifestHash = false;
};

/// Reads and fully validates a bundle directory: checks the manifest against
/// manifest.sha256, parses it (bounded: JsonLimits), checks it
/// (KernelBundle::verify) and the options' expectations, loads every image
/// (regular files only, at most its "bytes" or kMaxImageBytes) and checks its
/// size and SHA-256. Any failure is an error saying which file and why.
Expected<KernelBundle> readBundleDirectory(const std::string &directory,
                                           const BundleReadOptions &options);
/// readBundleDirectory() with only an expected key.
Expected<KernelBundle> readBundleDirectory(const std::string &directory,
                                           const std::string &expectedKey = {});

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_KERNELBUNDLE_H
