//===- KernelCache.cpp - Memory + disk cache of kernel bundles ------------===//

#include "runtime/KernelCache.h"

#include "runtime/Environment.h"
#include "runtime/FileLock.h"
#include "runtime/FileUtil.h"
#include "runtime/Log.h"
#include "runtime/Sha256.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>

namespace fs = std::filesystem;

namespace lossjit::runtime {

std::string computeCacheKey(const CacheKeyInputs &inputs) {
  Sha256 hasher;
  // The salt names the generation of what the compiler writes beside the
  // kernels: v2 added the plan's persistent and cluster fields, which the
  // launchers act on, so a v1 entry (same IR, tile and version) would load
  // without them and its persistent grids would never be capped.
  hasher.update(std::string_view("lossjit-cache-key-v2", 21)); // includes NUL
  auto field = [&](std::string_view tag, const std::string &value) {
    std::string header = std::string(tag) + ":" + std::to_string(value.size()) + ":";
    hasher.update(header);
    hasher.update(value);
  };
  field("ir", inputs.canonicalIr);
  field("pipeline", inputs.pipeline);
  field("tile", inputs.tileConfig);
  field("arch", inputs.arch);
  field("lossjit", inputs.lossjitVersion);
  field("llvm", inputs.llvmVersion);
  return Sha256::toHex(hasher.finalize());
}

KernelCacheOptions KernelCacheOptions::fromEnvironment() {
  KernelCacheOptions options;
  if (auto dir = getEnv("LOSSJIT_CACHE_DIR"); dir && !dir->empty())
    options.directory = *dir;
  else
    options.directory = defaultCacheDirectory();
  if (auto disable = getEnv("LOSSJIT_CACHE_DISABLE"); disable && isTruthy(*disable))
    options.directory.clear();
  if (auto path = getEnv("LOSSJIT_KERNEL_PATH"))
    options.searchPath = splitPathList(*path);
  if (auto timeout = getEnv("LOSSJIT_CACHE_LOCK_TIMEOUT"); timeout && !timeout->empty()) {
    // Seconds, fractions allowed ("0.5"); strtod accepts more than that, so
    // the whole text must be consumed and the value finite and >= 0.
    char *end = nullptr;
    double seconds = std::strtod(timeout->c_str(), &end);
    if (end && *end == '\0' && seconds >= 0 && seconds <= 1e6)
      options.lockTimeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    else
      logWarning("LOSSJIT_CACHE_LOCK_TIMEOUT: '" + printable(*timeout) +
                 "' is not a number of seconds in [0, 1e6]; keeping the default of " +
                 std::to_string(options.lockTimeout.count() / 1000) + " s");
  }
  if (auto max = getEnv("LOSSJIT_CACHE_MAX_BYTES"); max && !max->empty()) {
    Expected<uint64_t> bytes = parseByteSize(*max);
    if (bytes)
      options.maxBytes = *bytes;
    else
      logWarning("LOSSJIT_CACHE_MAX_BYTES: " + bytes.errorMessage() +
                 "; keeping the default of " + std::to_string(options.maxBytes));
  }
  return options;
}

KernelCache::KernelCache(KernelCacheOptions options)
    : options(std::move(options)),
      diskEnabled(!this->options.directory.empty()) {}

KernelCache &KernelCache::global() {
  static KernelCache cache(KernelCacheOptions::fromEnvironment());
  return cache;
}

namespace {
std::string shortKey(const std::string &key) { return key.substr(0, 12); }

std::string joinPath(const std::vector<std::string> &parts) {
  std::string out;
  for (const std::string &p : parts)
    out += (out.empty() ? "" : ":") + p;
  return out;
}

/// Sum of the regular files directly inside `dir` (entries are flat).
uint64_t directoryBytes(const fs::path &dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sizeEc;
    if (it->is_regular_file(sizeEc)) {
      uint64_t size = it->file_size(sizeEc);
      if (!sizeEc)
        total += size;
    }
  }
  return total;
}
} // namespace

CompileFunction KernelCache::noCompilerFunction(const std::string &key) const {
  std::string path = joinPath(options.searchPath);
  return [key, path]() -> Expected<KernelBundle> {
    return makeError("kernel " + key + " not found in LOSSJIT_KERNEL_PATH=" +
                     (path.empty() ? std::string("(unset)") : path) +
                     " and this build has no compiler");
  };
}

BundleRef KernelCache::lookupInMemory(const std::string &key) const {
  std::lock_guard<std::mutex> lock(mapMutex);
  auto it = memory.find(key);
  return it == memory.end() ? nullptr : it->second;
}

void KernelCache::clearMemory() {
  std::lock_guard<std::mutex> lock(mapMutex);
  memory.clear();
}

BundleRef KernelCache::insertInMemory(const std::string &key, KernelBundle bundle) {
  auto ref = std::make_shared<const KernelBundle>(std::move(bundle));
  std::lock_guard<std::mutex> lock(mapMutex);
  auto [it, inserted] = memory.emplace(key, ref);
  // A racing thread may have inserted first; everyone shares its copy.
  return it->second;
}

std::shared_ptr<std::mutex> KernelCache::keyMutex(const std::string &key) {
  std::lock_guard<std::mutex> lock(mapMutex);
  auto &m = keyMutexes[key];
  if (!m)
    m = std::make_shared<std::mutex>();
  return m;
}

void KernelCache::reportInvalidOnce(const std::string &path, const std::string &why) {
  // getOrCompile probes the cache directory before and after taking the
  // file lock: one bad entry is one warning and one count, not two.
  {
    std::lock_guard<std::mutex> lock(mapMutex);
    if (!reportedInvalid.insert(path).second)
      return;
  }
  invalidEntries.fetch_add(1);
  logWarning("ignoring invalid kernel bundle " + path + ": " + why);
}

void KernelCache::degradeToMemory(const std::string &reason) {
  if (diskEnabled.exchange(false))
    logWarning("kernel cache directory '" + options.directory +
               "' is unusable (" + reason +
               "); caching kernels in memory only for this process");
}

Error KernelCache::ensureDirectory() {
  std::call_once(directoryOnce, [&] {
    directoryError = createDirectories(options.directory);
    if (!directoryError) {
      // Probe writability now so the failure is reported once, up front,
      // rather than on every compile.
      std::string probe = options.directory + "/.probe-" + uniqueSuffix();
      directoryError = writeFile(probe, "");
      ::unlink(probe.c_str());
    }
  });
  if (directoryError)
    return makeError(directoryError.message());
  return Error::success();
}

KernelCache::Probe KernelCache::probeDirectory(const std::string &root, const std::string &key,
                                               bool isCache, const CacheLookup &lookup,
                                               BundleRef &out, std::string &why) {
  std::string dir = root + "/" + key;
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    why = "missing";
    return Probe::Missing;
  }
  BundleReadOptions read;
  read.expectedKey = key;
  read.expectedIrHash = lookup.irHash;
  read.requireManifestHash = isCache;
  Expected<KernelBundle> bundle = readBundleDirectory(dir, read);
  Error checked = Error::success();
  if (bundle && lookup.check)
    checked = lookup.check(*bundle);
  if (!bundle || checked) {
    std::string message = bundle ? checked.message() : bundle.errorMessage();
    why = "invalid entry " + dir + ": " + message;
    reportInvalidOnce(dir, message);
    return Probe::Invalid;
  }
  if (isCache) {
    // The manifest's mtime is the LRU clock; failing to touch is harmless.
    std::string manifest = dir + "/" + kManifestFileName;
    ::utimensat(AT_FDCWD, manifest.c_str(), nullptr, 0);
  }
  out = insertInMemory(key, std::move(*bundle));
  return Probe::Found;
}

Error KernelCache::writeEntry(const std::string &key, const KernelBundle &bundle, bool replace) {
  const std::string &root = options.directory;
  std::string temp = root + "/.tmp-" + key.substr(0, 16) + "-" + uniqueSuffix();
  if (Error e = writeBundleDirectory(bundle, temp)) {
    (void)removeTree(temp);
    return e;
  }
  std::string final = root + "/" + key;
  std::string trash;
  struct stat st;
  if (replace && ::lstat(final.c_str(), &st) == 0) {
    // rename() cannot replace a non-empty directory: move the bad entry
    // aside first. We hold the key's lock, so no writer races us.
    trash = root + "/.trash-" + key.substr(0, 16) + "-" + uniqueSuffix();
    if (::rename(final.c_str(), trash.c_str()) != 0) {
      int saved = errno;
      (void)removeTree(temp);
      return makeError("cannot move old entry '" + final +
                       "' aside: " + errnoMessage(saved));
    }
  }
  if (::rename(temp.c_str(), final.c_str()) != 0) {
    int saved = errno;
    (void)removeTree(temp);
    // Without the lock an existing entry (another process's, or a bad one
    // its lock holder will replace) wins; ours was only a courtesy copy.
    if (!replace && (saved == ENOTEMPTY || saved == EEXIST || saved == ENOTDIR || saved == EISDIR))
      return Error::success();
    return makeError("cannot rename '" + temp + "' to '" + final +
                     "': " + errnoMessage(saved));
  }
  if (!trash.empty())
    (void)removeTree(trash);
  diskWrites.fetch_add(1);
  return Error::success();
}

Expected<BundleRef> KernelCache::getOrCompile(const std::string &key,
                                              const CompileFunction &compile,
                                              const CacheLookup &lookup) {
  if (!isSha256Hex(key))
    return makeError("KernelCache::getOrCompile: key: expected 64 lower-case "
                     "hex characters (a computeCacheKey result), got '" +
                     key + "'");
  if (BundleRef hit = lookupInMemory(key)) {
    memoryHits.fetch_add(1);
    logDebug("kernel cache hit " + shortKey(key) + " (memory)");
    return hit;
  }
  if (!compile)
    return makeError("KernelCache::getOrCompile: compile: expected a compile "
                     "function (use noCompilerFunction() in runtime-only "
                     "builds), got an empty one");

  // One thread per key past this point; the file lock below handles other
  // processes.
  std::shared_ptr<std::mutex> perKey = keyMutex(key);
  std::lock_guard<std::mutex> keyLock(*perKey);
  if (BundleRef hit = lookupInMemory(key)) {
    memoryHits.fetch_add(1);
    return hit;
  }

  std::string reasons = "not in memory";
  BundleRef found;
  for (const std::string &root : options.searchPath) {
    std::string why;
    Probe probe = probeDirectory(root, key, /*isCache=*/false, lookup, found, why);
    if (probe == Probe::Found) {
      searchPathHits.fetch_add(1);
      logInfo("kernel cache hit " + shortKey(key) + " (bundle in " + root + ")");
      return found;
    }
    reasons += "; " + (probe == Probe::Missing
                           ? "not in LOSSJIT_KERNEL_PATH entry " + root
                           : why);
  }

  if (isDiskEnabled())
    if (Error e = ensureDirectory())
      degradeToMemory(e.message());

  std::optional<FileLock> fileLock;
  bool lockTimedOut = false;
  if (isDiskEnabled()) {
    std::string why;
    if (probeDirectory(options.directory, key, /*isCache=*/true, lookup, found, why) ==
        Probe::Found) {
      diskHits.fetch_add(1);
      logInfo("kernel cache hit " + shortKey(key) + " (disk " +
              options.directory + ")");
      return found;
    }
    std::string lockPath = options.directory + "/" + key + ".lock";
    LockWait wait;
    wait.timeout = options.lockTimeout;
    wait.progressInterval = options.lockProgressInterval;
    wait.onProgress = [&](std::chrono::milliseconds waited) {
      logWarning("waiting for the kernel cache lock " + lockPath +
                 " (held by another process, compiling the same kernel?) for " +
                 std::to_string(waited.count() / 1000) + " s; compiling without it after " +
                 std::to_string(options.lockTimeout.count() / 1000) + " s");
    };
    Expected<FileLock> acquired = FileLock::acquire(lockPath, wait, &lockTimedOut);
    if (!acquired && lockTimedOut) {
      // A stopped or hung holder must not hang us: compile without the
      // lock. The bytes are the same whoever compiles them.
      logWarning("kernel cache lock " + lockPath + " still held after " +
                 std::to_string(options.lockTimeout.count()) +
                 " ms (a stopped or hung process?); compiling " + shortKey(key) +
                 " without it (the result is identical)");
      reasons += "; lock " + lockPath + " held too long";
    } else if (!acquired) {
      degradeToMemory(acquired.errorMessage());
      reasons += "; cannot lock the disk entry";
    } else {
      fileLock.emplace(std::move(*acquired));
      // Whoever held the lock before us may have just written the entry.
      Probe probe = probeDirectory(options.directory, key, /*isCache=*/true, lookup, found, why);
      if (probe == Probe::Found) {
        diskHits.fetch_add(1);
        logInfo("kernel cache hit " + shortKey(key) + " (disk " +
                options.directory + ", written by another process)");
        return found;
      }
      reasons += "; " + (probe == Probe::Missing ? "not on disk" : why);
    }
  } else {
    reasons += "; disk cache disabled";
  }

  logInfo("kernel cache miss " + shortKey(key) + " (" + reasons + "); compiling");
  auto start = std::chrono::steady_clock::now();
  Expected<KernelBundle> compiled = compile();
  if (!compiled)
    return compiled.takeError();
  compiles.fetch_add(1);
  if (compiled->key.empty())
    compiled->key = key;
  if (compiled->key != key)
    return makeError("compiled bundle has key " + compiled->key +
                     " but was requested as " + key);
  if (Error e = compiled->verify())
    return std::move(e).withContext("compiled bundle for " + key);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  logInfo("compiled " + shortKey(key) + " in " + std::to_string(ms) + " ms");

  if (isDiskEnabled() && (fileLock || lockTimedOut)) {
    if (Error e = writeEntry(key, *compiled, /*replace=*/fileLock.has_value())) {
      degradeToMemory(e.message());
    } else {
      logDebug("wrote cache entry " + options.directory + "/" + key);
      if (options.maxBytes)
        if (Error e = evict(key))
          logWarning("kernel cache eviction: " + e.message());
    }
  }
  return insertInMemory(key, std::move(*compiled));
}

uint64_t KernelCache::diskUsageBytes() const {
  if (options.directory.empty())
    return 0;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(options.directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code dirEc;
    if (isSha256Hex(name) && it->is_directory(dirEc))
      total += directoryBytes(it->path());
  }
  return total;
}

Error KernelCache::evict(const std::string &keep) {
  if (options.directory.empty() || !options.maxBytes)
    return Error::success();
  struct Entry {
    std::string key;
    uint64_t bytes;
    int64_t lastUse; // ns since epoch; entries without a manifest sort first
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  auto staleBefore = std::chrono::system_clock::now() - std::chrono::hours(1);
  for (fs::directory_iterator it(options.directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code entryEc;
    if (!it->is_directory(entryEc))
      continue;
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(".trash-", 0) == 0) {
      // Leftovers of a crashed writer; young ones may still be in use.
      struct stat st;
      if (::stat(it->path().c_str(), &st) == 0 &&
          std::chrono::system_clock::from_time_t(st.st_mtime) < staleBefore)
        (void)removeTree(it->path().string());
      continue;
    }
    if (!isSha256Hex(name))
      continue;
    Entry entry{name, directoryBytes(it->path()), 0};
    struct stat st;
    std::string manifest = it->path().string() + "/" + kManifestFileName;
    if (::stat(manifest.c_str(), &st) == 0)
      entry.lastUse = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    total += entry.bytes;
    entries.push_back(std::move(entry));
  }
  if (ec)
    return makeError("cannot list '" + options.directory + "': " + ec.message());
  if (total <= options.maxBytes)
    return Error::success();
  std::sort(entries.begin(), entries.end(),
            [](const Entry &a, const Entry &b) { return a.lastUse < b.lastUse; });
  for (const Entry &entry : entries) {
    if (total <= options.maxBytes)
      break;
    if (entry.key == keep)
      continue;
    // Skip entries another process is compiling or replacing right now.
    bool busy = false;
    Expected<FileLock> lock =
        FileLock::tryAcquire(options.directory + "/" + entry.key + ".lock", &busy);
    if (!lock)
      continue;
    std::string dir = options.directory + "/" + entry.key;
    std::string trash = options.directory + "/.trash-" + entry.key.substr(0, 16) +
                        "-" + uniqueSuffix();
    if (::rename(dir.c_str(), trash.c_str()) != 0)
      continue;
    (void)removeTree(trash);
    total -= std::min(total, entry.bytes);
    evictions.fetch_add(1);
    logInfo("kernel cache evicted " + shortKey(entry.key) + " (" +
            std::to_string(entry.bytes) + " bytes; cache now " +
            std::to_string(total) + " of " + std::to_string(options.maxBytes) +
            " bytes)");
  }
  return Error::success();
}

KernelCacheStats KernelCache::stats() const {
  KernelCacheStats s;
  s.memoryHits = memoryHits.load();
  s.searchPathHits = searchPathHits.load();
  s.diskHits = diskHits.load();
  s.compiles = compiles.load();
  s.diskWrites = diskWrites.load();
  s.evictions = evictions.load();
  s.invalidEntries = invalidEntries.load();
  return s;
}

} // namespace lossjit::runtime
