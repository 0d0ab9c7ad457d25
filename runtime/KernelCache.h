//===- KernelCache.h - Memory + disk cache of kernel bundles ----*- C++ -*-===//
//
// Compiling a variant takes seconds; looking one up must take microseconds.
// getOrCompile() checks, in order:
//   1. the in-memory map (thread-safe),
//   2. the bundle search path LOSSJIT_KERNEL_PATH (prebuilt AOT bundles,
//      read-only; how runtime-only builds get kernels),
//   3. the on-disk cache LOSSJIT_CACHE_DIR/<key>/,
// then takes the per-key file lock <root>/<key>.lock, re-checks the disk
// (another process may have just written it), compiles, and writes the entry
// into a temporary directory in the same root that is renamed into place, so
// readers see a complete entry or none. N processes missing the same key
// therefore compile it once.
//
// Entries are verified on every load: manifest.sha256 over the manifest (and
// so over the launch plan and every image's SHA-256), each image's size and
// SHA-256, the key, the IR hash the caller expects, and the caller's own
// check (the CPU backend links the object there). A corrupt, truncated,
// misfiled or unusable entry is reported once, never executed, and replaced
// by a fresh compile: a bad entry is never a permanent failure.
//
// The per-key lock is waited for at most KernelCacheOptions::lockTimeout
// (with progress messages naming the lock file); a holder that is stopped or
// hung then costs one duplicate compile, not a hang: the entry is compiled
// without the lock (the bytes are identical) and written only if no entry
// exists by then. The disk cache is an LRU bounded by
// LOSSJIT_CACHE_MAX_BYTES (default 2 GiB): a hit refreshes the entry's
// manifest mtime, and after each insert the least recently used entries are
// evicted, never the one just written and never one whose lock is held.
//
// Environment: LOSSJIT_CACHE_DIR (default $XDG_CACHE_HOME/lossjit or
// ~/.cache/lossjit), LOSSJIT_CACHE_DISABLE=1 (memory only), LOSSJIT_KERNEL_PATH
// (colon-separated bundle roots), LOSSJIT_CACHE_MAX_BYTES (bytes, K/M/G/T
// suffixes allowed; 0 = unbounded), LOSSJIT_CACHE_LOCK_TIMEOUT (seconds to
// wait for another process's lock, default 60), LOSSJIT_LOG=info|debug (hits,
// misses and why). An unusable cache directory (unwritable, full, over the
// file size limit: EFBIG) degrades to memory-only with one warning.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_KERNELCACHE_H
#define LOSSJIT_RUNTIME_KERNELCACHE_H

#include "runtime/KernelBundle.h"
#include "runtime/Status.h"
#include "runtime/Version.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace lossjit::runtime {

/// Everything that determines a compiled variant's bytes (docs/ARCHITECTURE.md §6).
struct CacheKeyInputs {
  /// The op's canonical IR text (after specialization).
  std::string canonicalIr;
  /// The pass pipeline string.
  std::string pipeline;
  /// The TileConfig, serialized.
  std::string tileConfig;
  /// Target: "sm_80", "sm_90a", "host", ...
  std::string arch;
  std::string lossjitVersion = kLossjitVersion;
  std::string llvmVersion;
};

/// SHA-256 (64 lower-case hex) over the inputs. Each field is tagged and
/// length-prefixed, so moving bytes from one field to the next changes the
/// key.
std::string computeCacheKey(const CacheKeyInputs &inputs);

/// Where and how the cache persists.
struct KernelCacheOptions {
  /// Root of the on-disk cache; empty means memory only.
  std::string directory;
  /// Read-only bundle roots searched (in order) before the disk cache.
  std::vector<std::string> searchPath;
  /// Disk budget in bytes; 0 = unbounded.
  uint64_t maxBytes = uint64_t(2) << 30;
  /// How long to wait for another process's lock on a key before compiling
  /// without it.
  std::chrono::milliseconds lockTimeout{60000};
  /// Interval of the "waiting for lock" messages.
  std::chrono::milliseconds lockProgressInterval{10000};

  /// Reads LOSSJIT_CACHE_DIR, LOSSJIT_CACHE_DISABLE, LOSSJIT_KERNEL_PATH,
  /// LOSSJIT_CACHE_MAX_BYTES and LOSSJIT_CACHE_LOCK_TIMEOUT (a malformed
  /// value warns and keeps the default).
  static KernelCacheOptions fromEnvironment();
};

/// Counters for tests, benchmarks and logs.
struct KernelCacheStats {
  uint64_t memoryHits = 0;
  uint64_t searchPathHits = 0;
  uint64_t diskHits = 0;
  uint64_t compiles = 0;
  uint64_t diskWrites = 0;
  uint64_t evictions = 0;
  /// Damaged or foreign entries found (and recompiled), each path once per
  /// process, as its warning.
  uint64_t invalidEntries = 0;
};

/// Produces the bundle for a key on a miss.
using CompileFunction = std::function<Expected<KernelBundle>()>;

/// What a bundle loaded from disk or LOSSJIT_KERNEL_PATH must satisfy
/// besides its own integrity (getOrCompile).
struct CacheLookup {
  /// Non-empty: the bundle's ir_hash must equal it (the SHA-256 of the
  /// canonical IR the key was computed from), so an entry copied under
  /// another key is rejected.
  std::string irHash;
  /// Called on every bundle loaded from disk before it is used; an error
  /// makes the entry invalid (reported, recompiled, replaced). Not called
  /// for bundles compiled or already in memory in this process.
  std::function<Error(const KernelBundle &)> check;
};
/// Bundles are immutable once cached and shared by every user.
using BundleRef = std::shared_ptr<const KernelBundle>;

/// The kernel cache. Thread-safe; several processes may share a directory.
class KernelCache {
public:
  explicit KernelCache(KernelCacheOptions options);
  KernelCache(const KernelCache &) = delete;
  KernelCache &operator=(const KernelCache &) = delete;

  /// The process-wide cache configured from the environment (a registry).
  static KernelCache &global();

  /// Returns the bundle for `key` (a computeCacheKey() result), compiling it
  /// with `compile` on a miss. The compiled bundle's key must be empty (it is
  /// filled in) or equal `key`. Compile errors are returned unchanged.
  Expected<BundleRef> getOrCompile(const std::string &key, const CompileFunction &compile,
                                   const CacheLookup &lookup = {});

  /// A compile function for builds without the compiler: it fails with
  /// "kernel <key> not found in LOSSJIT_KERNEL_PATH=<path> and this build has
  /// no compiler".
  CompileFunction noCompilerFunction(const std::string &key) const;

  /// Memory-only probe (no I/O); null when absent.
  BundleRef lookupInMemory(const std::string &key) const;

  /// Drops the in-memory map (the disk is untouched).
  void clearMemory();

  /// True while entries are persisted (false when disabled or degraded).
  bool isDiskEnabled() const { return diskEnabled.load(); }
  const KernelCacheOptions &getOptions() const { return options; }

  /// Total bytes of entries under the cache directory.
  uint64_t diskUsageBytes() const;

  /// Evicts least recently used entries until usage <= maxBytes, sparing
  /// `keep`. Called after each insert; exposed for tools.
  Error evict(const std::string &keep = {});

  KernelCacheStats stats() const;

private:
  enum class Probe { Found, Missing, Invalid };

  BundleRef insertInMemory(const std::string &key, KernelBundle bundle);
  /// Loads `<root>/<key>`; `why` receives the miss or corruption reason.
  /// `isCache`: the root is the cache directory (entries need
  /// manifest.sha256 and are touched for the LRU).
  Probe probeDirectory(const std::string &root, const std::string &key, bool isCache,
                       const CacheLookup &lookup, BundleRef &out, std::string &why);
  Error ensureDirectory();
  void degradeToMemory(const std::string &reason);
  /// Writes the entry through a temporary directory renamed into place.
  /// `replace`: move an existing entry aside first (only under the key's
  /// lock); otherwise an existing entry is kept and this one dropped.
  Error writeEntry(const std::string &key, const KernelBundle &bundle, bool replace);
  std::shared_ptr<std::mutex> keyMutex(const std::string &key);
  void reportInvalidOnce(const std::string &path, const std::string &why);

  KernelCacheOptions options;
  std::atomic<bool> diskEnabled;
  std::once_flag directoryOnce;
  Error directoryError = Error::success();

  mutable std::mutex mapMutex;
  std::unordered_map<std::string, BundleRef> memory;
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> keyMutexes;
  std::set<std::string> reportedInvalid;

  std::atomic<uint64_t> memoryHits{0}, searchPathHits{0}, diskHits{0},
      compiles{0}, diskWrites{0}, evictions{0}, invalidEntries{0};
};

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_KERNELCACHE_H
