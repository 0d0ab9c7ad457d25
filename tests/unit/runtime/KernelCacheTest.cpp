//===- KernelCacheTest.cpp - Cache keys, disk entries, recovery, LRU ------===//

#include "runtime/FileUtil.h"
#include "runtime/KernelCache.h"
#include "runtime/Sha256.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <set>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace lossjit::runtime;
using namespace lossjit::runtime::testing;
namespace fs = std::filesystem;

namespace {

/// A compile callback that counts its calls.
struct CountingCompiler {
  std::atomic<int> calls{0};
  size_t payload = 64;
  CompileFunction forKey(const std::string &key) {
    return [this, key]() -> Expected<KernelBundle> {
      ++calls;
      return makeTestBundle(key, payload);
    };
  }
};

KernelCacheOptions diskOptions(const std::string &dir) {
  KernelCacheOptions options;
  options.directory = dir;
  options.maxBytes = 0;
  return options;
}

size_t countOccurrences(const std::string &text, const std::string &needle) {
  size_t count = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + 1))
    ++count;
  return count;
}

void setManifestMtime(const std::string &entry, time_t when) {
  struct timespec times[2] = {{when, 0}, {when, 0}};
  std::string manifest = entry + "/manifest.json";
  ASSERT_EQ(::utimensat(AT_FDCWD, manifest.c_str(), times, 0), 0);
}

} // namespace

TEST(CacheKey, EveryInputChangesTheKey) {
  CacheKeyInputs base;
  base.canonicalIr = "func @f() { loss.linear_cross_entropy ... }";
  base.pipeline = "loss-make-precision-explicit,loss-fuse-linear-cross-entropy";
  base.tileConfig = "block_rows=4,threads=128";
  base.arch = "sm_80";
  base.lossjitVersion = "0.1.0";
  base.llvmVersion = "22.1.8";
  std::string key = computeCacheKey(base);
  EXPECT_TRUE(isSha256Hex(key));
  EXPECT_EQ(computeCacheKey(base), key) << "keys must be deterministic";

  std::string CacheKeyInputs::*fields[] = {
      &CacheKeyInputs::canonicalIr, &CacheKeyInputs::pipeline,
      &CacheKeyInputs::tileConfig,  &CacheKeyInputs::arch,
      &CacheKeyInputs::lossjitVersion, &CacheKeyInputs::llvmVersion};
  std::set<std::string> seen = {key};
  for (auto field : fields) {
    CacheKeyInputs changed = base;
    changed.*field += "x";
    EXPECT_TRUE(seen.insert(computeCacheKey(changed)).second);
    changed = base;
    (changed.*field).clear();
    EXPECT_TRUE(seen.insert(computeCacheKey(changed)).second);
  }
  // Moving bytes across a field boundary must not collide.
  CacheKeyInputs a = base, b = base;
  a.pipeline = "ab";
  a.tileConfig = "c";
  b.pipeline = "a";
  b.tileConfig = "bc";
  EXPECT_NE(computeCacheKey(a), computeCacheKey(b));
}

TEST(KernelCache, RoundTripMemoryThenDisk) {
  TempDir dir;
  CountingCompiler compiler;
  std::string key = testKey("roundtrip");
  {
    KernelCache cache(diskOptions(dir.path()));
    Expected<BundleRef> first = cache.getOrCompile(key, compiler.forKey(key));
    ASSERT_TRUE(first) << first.errorMessage();
    EXPECT_EQ(compiler.calls, 1);
    EXPECT_EQ((*first)->key, key);
    Expected<BundleRef> second = cache.getOrCompile(key, compiler.forKey(key));
    ASSERT_TRUE(second);
    EXPECT_EQ(second->get(), first->get()) << "memory hit shares the bundle";
    EXPECT_EQ(compiler.calls, 1);
    EXPECT_EQ(cache.stats().memoryHits, 1u);
    EXPECT_EQ(cache.stats().diskWrites, 1u);
    EXPECT_TRUE(cache.isDiskEnabled());
  }
  EXPECT_TRUE(fs::exists(dir / (key + "/manifest.json")));
  for (const auto &e : fs::directory_iterator(dir.path()))
    EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u)
        << "temporary directory left behind: " << e.path();

  KernelCache fresh(diskOptions(dir.path()));
  EXPECT_EQ(fresh.lookupInMemory(key), nullptr);
  Expected<BundleRef> loaded = fresh.getOrCompile(key, compiler.forKey(key));
  ASSERT_TRUE(loaded) << loaded.errorMessage();
  EXPECT_EQ(compiler.calls, 1) << "a disk hit must not compile";
  EXPECT_EQ(fresh.stats().diskHits, 1u);
  KernelBundle expected = makeTestBundle(key);
  ASSERT_EQ((*loaded)->kernels.size(), expected.kernels.size());
  for (size_t i = 0; i < expected.kernels.size(); ++i)
    EXPECT_EQ((*loaded)->kernels[i].image, expected.kernels[i].image);
  EXPECT_NE(fresh.lookupInMemory(key), nullptr);
  fresh.clearMemory();
  EXPECT_EQ(fresh.lookupInMemory(key), nullptr);
}

namespace {
/// Writes an entry, damages it with `damage`, and checks that a fresh cache
/// reports it once, recompiles, and replaces it with a valid entry.
void checkRecovery(const std::function<void(const std::string &entry,
                                            const KernelBundle &)> &damage) {
  TempDir dir;
  CountingCompiler compiler;
  std::string key = testKey("recover");
  {
    KernelCache cache(diskOptions(dir.path()));
    ASSERT_TRUE(cache.getOrCompile(key, compiler.forKey(key)));
  }
  std::string entry = dir / key;
  damage(entry, makeTestBundle(key));
  ASSERT_FALSE(readBundleDirectory(entry, key)) << "damage had no effect";

  KernelCache cache(diskOptions(dir.path()));
  ::testing::internal::CaptureStderr();
  Expected<BundleRef> recovered = cache.getOrCompile(key, compiler.forKey(key));
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(recovered) << recovered.errorMessage();
  EXPECT_EQ(compiler.calls, 2) << "a corrupt entry must be recompiled";
  EXPECT_EQ(countOccurrences(log, "ignoring invalid kernel bundle"), 1u) << log;
  EXPECT_EQ(cache.stats().invalidEntries, 1u) << "one bad entry is counted once";
  Expected<KernelBundle> onDisk = readBundleDirectory(entry, key);
  EXPECT_TRUE(onDisk) << "entry not replaced: " << onDisk.errorMessage();
  // And the replacement is used from then on.
  KernelCache again(diskOptions(dir.path()));
  ASSERT_TRUE(again.getOrCompile(key, compiler.forKey(key)));
  EXPECT_EQ(compiler.calls, 2);
}
} // namespace

TEST(KernelCache, FlippedByteIsRecompiledAndReplaced) {
  checkRecovery([](const std::string &entry, const KernelBundle &b) {
    std::string path = entry + "/" + b.kernels[0].file;
    std::string bytes = *readFile(path);
    bytes[bytes.size() / 2] ^= 0x20;
    ASSERT_FALSE(writeFile(path, bytes));
  });
}

TEST(KernelCache, TruncatedImageIsRecompiledAndReplaced) {
  checkRecovery([](const std::string &entry, const KernelBundle &b) {
    ASSERT_EQ(::truncate((entry + "/" + b.kernels[1].file).c_str(), 10), 0);
  });
}

TEST(KernelCache, MissingImageIsRecompiledAndReplaced) {
  checkRecovery([](const std::string &entry, const KernelBundle &b) {
    ASSERT_EQ(::unlink((entry + "/" + b.kernels[1].file).c_str()), 0);
  });
}

TEST(KernelCache, UnparsableManifestIsRecompiledAndReplaced) {
  checkRecovery([](const std::string &entry, const KernelBundle &) {
    ASSERT_FALSE(writeFile(entry + "/manifest.json", "{ not json"));
  });
}

TEST(KernelCache, TruncatedManifestIsRecompiledAndReplaced) {
  checkRecovery([](const std::string &entry, const KernelBundle &) {
    ASSERT_EQ(::truncate((entry + "/manifest.json").c_str(), 0), 0);
  });
}

TEST(KernelCache, UnwritableDirectoryDegradesToMemoryWithOneWarning) {
  // Tests run as root, which ignores permission bits, so make the cache root
  // a path below a regular file: mkdir fails with ENOTDIR for everyone.
  TempDir dir;
  ASSERT_FALSE(writeFile(dir / "file", "not a directory"));
  CountingCompiler compiler;
  KernelCache cache(diskOptions(dir / "file/cache"));
  ::testing::internal::CaptureStderr();
  std::string k1 = testKey("unwritable-1"), k2 = testKey("unwritable-2");
  Expected<BundleRef> a = cache.getOrCompile(k1, compiler.forKey(k1));
  Expected<BundleRef> b = cache.getOrCompile(k2, compiler.forKey(k2));
  Expected<BundleRef> c = cache.getOrCompile(k1, compiler.forKey(k1));
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(a) << a.errorMessage();
  ASSERT_TRUE(b) << b.errorMessage();
  ASSERT_TRUE(c) << c.errorMessage();
  EXPECT_EQ(compiler.calls, 2) << "memory caching must still work";
  EXPECT_FALSE(cache.isDiskEnabled());
  EXPECT_EQ(countOccurrences(log, "lossjit[warning]"), 1u) << log;
  EXPECT_NE(log.find("in memory only"), std::string::npos) << log;
  EXPECT_NE(log.find(dir / "file/cache"), std::string::npos) << log;
}

TEST(KernelCache, DisableMeansMemoryOnly) {
  TempDir dir;
  ScopedEnv cacheDir("LOSSJIT_CACHE_DIR", dir.path().c_str());
  ScopedEnv disable("LOSSJIT_CACHE_DISABLE", "1");
  KernelCacheOptions options = KernelCacheOptions::fromEnvironment();
  EXPECT_TRUE(options.directory.empty());
  KernelCache cache(options);
  EXPECT_FALSE(cache.isDiskEnabled());
  CountingCompiler compiler;
  std::string key = testKey("disabled");
  ASSERT_TRUE(cache.getOrCompile(key, compiler.forKey(key)));
  ASSERT_TRUE(cache.getOrCompile(key, compiler.forKey(key)));
  EXPECT_EQ(compiler.calls, 1);
  EXPECT_TRUE(fs::is_empty(dir.path())) << "nothing may be written";
}

TEST(KernelCache, OptionsFromEnvironment) {
  ScopedEnv cacheDir("LOSSJIT_CACHE_DIR", "/some/where");
  ScopedEnv disable("LOSSJIT_CACHE_DISABLE", nullptr);
  ScopedEnv path("LOSSJIT_KERNEL_PATH", "/a::/b");
  {
    ScopedEnv max("LOSSJIT_CACHE_MAX_BYTES", "3M");
    KernelCacheOptions o = KernelCacheOptions::fromEnvironment();
    EXPECT_EQ(o.directory, "/some/where");
    EXPECT_EQ(o.searchPath, (std::vector<std::string>{"/a", "/b"}));
    EXPECT_EQ(o.maxBytes, 3u << 20);
  }
  ScopedEnv badMax("LOSSJIT_CACHE_MAX_BYTES", "lots");
  ::testing::internal::CaptureStderr();
  KernelCacheOptions o = KernelCacheOptions::fromEnvironment();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(o.maxBytes, KernelCacheOptions().maxBytes);
  EXPECT_NE(log.find("LOSSJIT_CACHE_MAX_BYTES"), std::string::npos) << log;
  ScopedEnv noDir("LOSSJIT_CACHE_DIR", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(KernelCacheOptions::fromEnvironment().directory, "/xdg/lossjit");
}

TEST(KernelCache, EvictsLeastRecentlyUsedAtTheSizeBound) {
  TempDir dir;
  CountingCompiler compiler;
  compiler.payload = 10000; // ~20 KB per entry
  std::string k1 = testKey("lru-1"), k2 = testKey("lru-2"), k3 = testKey("lru-3");
  {
    KernelCache cache(diskOptions(dir.path()));
    ASSERT_TRUE(cache.getOrCompile(k1, compiler.forKey(k1)));
    ASSERT_TRUE(cache.getOrCompile(k2, compiler.forKey(k2)));
  }
  uint64_t entryBytes = KernelCache(diskOptions(dir.path())).diskUsageBytes() / 2;
  ASSERT_GT(entryBytes, 20000u);
  time_t now = ::time(nullptr);
  setManifestMtime(dir / k1, now - 200); // k1 older than k2 ...
  setManifestMtime(dir / k2, now - 100);
  KernelCacheOptions options = diskOptions(dir.path());
  options.maxBytes = entryBytes * 2 + entryBytes / 2; // room for two entries
  KernelCache cache(options);
  // ... but a hit makes k1 the most recently used.
  ASSERT_TRUE(cache.getOrCompile(k1, compiler.forKey(k1)));
  EXPECT_EQ(cache.stats().diskHits, 1u);
  ASSERT_TRUE(cache.getOrCompile(k3, compiler.forKey(k3)));
  EXPECT_TRUE(fs::exists(dir / k1));
  EXPECT_FALSE(fs::exists(dir / k2)) << "k2 was least recently used";
  EXPECT_TRUE(fs::exists(dir / k3));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.diskUsageBytes(), options.maxBytes);

  // The entry just written survives even when it alone exceeds the bound.
  KernelCacheOptions tiny = diskOptions(dir.path());
  tiny.maxBytes = 1;
  KernelCache tinyCache(tiny);
  std::string k4 = testKey("lru-4");
  ASSERT_TRUE(tinyCache.getOrCompile(k4, compiler.forKey(k4)));
  EXPECT_TRUE(fs::exists(dir / k4));
  EXPECT_FALSE(fs::exists(dir / k1));
  EXPECT_FALSE(fs::exists(dir / k3));
  // Evicted entries still in memory keep working.
  EXPECT_TRUE(cache.getOrCompile(k1, compiler.forKey(k1)));
}

TEST(KernelCache, SearchPathIsCheckedBeforeCompiling) {
  TempDir bundles, cacheDir;
  std::string key = testKey("prebuilt");
  ASSERT_FALSE(writeBundleDirectory(makeTestBundle(key), bundles / key));
  KernelCacheOptions options = diskOptions(cacheDir.path());
  options.searchPath = {"/nonexistent-lossjit-dir", bundles.path()};
  KernelCache cache(options);
  CountingCompiler compiler;
  Expected<BundleRef> hit = cache.getOrCompile(key, compiler.forKey(key));
  ASSERT_TRUE(hit) << hit.errorMessage();
  EXPECT_EQ(compiler.calls, 0);
  EXPECT_EQ(cache.stats().searchPathHits, 1u);
  EXPECT_FALSE(fs::exists(cacheDir / key)) << "prebuilt bundles are not copied";

  // An invalid prebuilt bundle is reported and never used.
  std::string other = testKey("prebuilt-bad");
  KernelBundle bad = makeTestBundle(other);
  ASSERT_FALSE(writeBundleDirectory(bad, bundles / other));
  ASSERT_FALSE(writeFile(bundles / (other + "/" + bad.kernels[0].file), "garbage"));
  ::testing::internal::CaptureStderr();
  Expected<BundleRef> compiled = cache.getOrCompile(other, compiler.forKey(other));
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(compiled) << compiled.errorMessage();
  EXPECT_EQ(compiler.calls, 1);
  EXPECT_NE(log.find("ignoring invalid kernel bundle " + bundles / other),
            std::string::npos)
      << log;
}

TEST(KernelCache, RuntimeOnlyBuildReportsMissingKernel) {
  TempDir cacheDir;
  KernelCacheOptions options = diskOptions(cacheDir.path());
  options.searchPath = {"/opt/bundles", "/more"};
  KernelCache cache(options);
  std::string key = testKey("absent");
  Expected<BundleRef> r = cache.getOrCompile(key, cache.noCompilerFunction(key));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(),
            "kernel " + key +
                " not found in LOSSJIT_KERNEL_PATH=/opt/bundles:/more and this "
                "build has no compiler");
}

TEST(KernelCache, RejectsBadKeysAndBadCompileResults) {
  KernelCache cache(KernelCacheOptions{});
  CountingCompiler compiler;
  Expected<BundleRef> r = cache.getOrCompile("../../etc", compiler.forKey("x"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("key: expected 64 lower-case hex"), std::string::npos);
  EXPECT_EQ(compiler.calls, 0);

  std::string key = testKey("mismatch");
  r = cache.getOrCompile(key, compiler.forKey(testKey("something-else")));
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("but was requested as"), std::string::npos);

  // Compile errors pass through and nothing is cached.
  int failures = 0;
  auto failing = [&]() -> Expected<KernelBundle> {
    ++failures;
    return makeError("pass loss-lower-to-gpu failed");
  };
  r = cache.getOrCompile(key, failing);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.errorMessage(), "pass loss-lower-to-gpu failed");
  r = cache.getOrCompile(key, failing);
  EXPECT_EQ(failures, 2);

  // An empty key is filled in; an invalid bundle is rejected.
  r = cache.getOrCompile(key, [&]() -> Expected<KernelBundle> {
    KernelBundle b = makeTestBundle("");
    b.key.clear();
    return b;
  });
  ASSERT_TRUE(r) << r.errorMessage();
  EXPECT_EQ((*r)->key, key);
  std::string key2 = testKey("invalid-compile");
  r = cache.getOrCompile(key2, [&]() -> Expected<KernelBundle> {
    KernelBundle b = makeTestBundle(key2);
    b.kernels[0].args.push_back("ghost");
    return b;
  });
  ASSERT_FALSE(r);
  EXPECT_NE(r.errorMessage().find("ghost"), std::string::npos);
}

TEST(KernelCache, ThreadsCompileOnce) {
  for (bool disk : {false, true}) {
    TempDir dir;
    KernelCacheOptions options;
    if (disk)
      options.directory = dir.path();
    KernelCache cache(options);
    CountingCompiler compiler;
    std::string key = testKey("threads");
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int i = 0; i < 8; ++i)
      threads.emplace_back([&] {
        if (cache.getOrCompile(key, compiler.forKey(key)))
          ++ok;
      });
    for (auto &t : threads)
      t.join();
    EXPECT_EQ(ok, 8);
    EXPECT_EQ(compiler.calls, 1) << (disk ? "disk" : "memory");
  }
}

TEST(KernelCache, ConcurrentProcessesCompileOnce) {
  TempDir dir;
  std::string cacheDir = dir / "cache";
  std::string marker = dir / "compiles.log";
  std::string key = testKey("processes");
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  constexpr int kProcesses = 8;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: wait at the gate so all eight race for the same key.
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) > 0) {
      }
      KernelCache cache(diskOptions(cacheDir));
      auto compile = [&]() -> Expected<KernelBundle> {
        int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        std::string line = std::to_string(::getpid()) + "\n";
        if (fd < 0 || ::write(fd, line.data(), line.size()) < 0)
          ::_exit(3);
        ::close(fd);
        // Hold the lock long enough for every sibling to miss and wait.
        ::usleep(200 * 1000);
        return makeTestBundle(key, 4096);
      };
      Expected<BundleRef> r = cache.getOrCompile(key, compile);
      if (!r)
        ::_exit(1);
      KernelBundle expected = makeTestBundle(key, 4096);
      bool same = (*r)->kernels.size() == expected.kernels.size();
      for (size_t k = 0; same && k < expected.kernels.size(); ++k)
        same = (*r)->kernels[k].image == expected.kernels[k].image;
      ::_exit(same ? 0 : 2);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]); // open the gate
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << pid << " status " << status;
  }
  Expected<std::string> log = readFile(marker);
  ASSERT_TRUE(log) << log.errorMessage();
  EXPECT_EQ(countOccurrences(*log, "\n"), 1u) << "compiled more than once:\n" << *log;
  EXPECT_TRUE(readBundleDirectory(cacheDir + "/" + key, key));
}

//===----------------------------------------------------------------------===//
// issue 16: tampered, misfiled and hostile entries; a held lock
//===----------------------------------------------------------------------===//

namespace {
/// Rewrites an entry's manifest through `edit` and makes manifest.sha256
/// agree, as someone who knows the format would: only the checks behind the
/// hash (key, IR hash, image hashes, the caller's check) can catch it then.
void forgeManifest(const std::string &entry,
                   const std::function<void(std::string &manifest)> &edit) {
  std::string manifest = *readFile(entry + "/manifest.json");
  edit(manifest);
  ASSERT_FALSE(writeFile(entry + "/manifest.json", manifest));
  ASSERT_FALSE(writeFile(entry + "/manifest.sha256", sha256Hex(manifest) + "  manifest.json\n"));
}

void replaceAll(std::string &text, const std::string &from, const std::string &to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}
} // namespace

TEST(KernelCache, EditedLaunchPlanIsRecompiledAndReplaced) {
  // A workspace count edited in the manifest used to overflow the heap.
  checkRecovery([](const std::string &entry, const KernelBundle &) {
    std::string manifest = *readFile(entry + "/manifest.json");
    replaceAll(manifest, "\"S*N\"", "\"1\"");
    ASSERT_FALSE(writeFile(entry + "/manifest.json", manifest));
  });
}

TEST(KernelCache, MissingManifestHashIsRecompiledAndReplaced) {
  // readBundleDirectory() alone accepts a bundle without the hash (prebuilt
  // bundles of older versions); a cache entry needs it.
  TempDir dir;
  std::string key = testKey("nohash");
  CountingCompiler compiler;
  {
    KernelCache cache(diskOptions(dir.path()));
    ASSERT_TRUE(cache.getOrCompile(key, compiler.forKey(key)));
  }
  ASSERT_EQ(::unlink((dir / key + "/manifest.sha256").c_str()), 0);
  KernelCache cache(diskOptions(dir.path()));
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(cache.getOrCompile(key, compiler.forKey(key)));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("ignoring invalid kernel bundle " + dir / key + ": " + dir / key +
                     ": an entry needs its manifest.sha256"),
            std::string::npos)
      << log;
  EXPECT_EQ(compiler.calls, 2);
  EXPECT_TRUE(fs::is_regular_file(dir / key + "/manifest.sha256")) << "entry not replaced";
}

TEST(KernelCache, MissingManifestIsRecompiledAndReplaced) {
  checkRecovery([](const std::string &entry, const KernelBundle &) {
    ASSERT_EQ(::unlink((entry + "/manifest.json").c_str()), 0);
  });
}

TEST(KernelCache, ManifestFifoIsRecompiledNotWaitedFor) {
  checkRecovery([](const std::string &entry, const KernelBundle &) {
    std::string manifest = entry + "/manifest.json";
    ASSERT_EQ(::unlink(manifest.c_str()), 0);
    ASSERT_EQ(::mkfifo(manifest.c_str(), 0644), 0);
  });
}

TEST(KernelCache, ImageLinkedToDevZeroIsRecompiled) {
  checkRecovery([](const std::string &entry, const KernelBundle &b) {
    std::string image = entry + "/" + b.kernels[0].file;
    ASSERT_EQ(::unlink(image.c_str()), 0);
    ASSERT_EQ(::symlink("/dev/zero", image.c_str()), 0);
  });
}

TEST(KernelCache, HugeSparseImageIsRecompiled) {
  checkRecovery([](const std::string &entry, const KernelBundle &b) {
    ASSERT_EQ(::truncate((entry + "/" + b.kernels[0].file).c_str(), off_t(64) << 30), 0);
  });
}

TEST(KernelCache, GarbageLaunchPlanIsRecompiledAndReplaced) {
  // Garbage where the plan's formulas were, with the hashes made to agree.
  checkRecovery([](const std::string &entry, const KernelBundle &) {
    forgeManifest(entry, [](std::string &m) { replaceAll(m, "\"cdiv(N,4)\"", "\"N+\""); });
  });
}

TEST(KernelCache, EntryCopiedUnderAnotherKeyIsNotUsed) {
  // issue 16: a `mean` entry copied to the key of a `sum` graph, its "key"
  // rewritten (and the manifest hash made to agree), returned `mean` results.
  TempDir dir;
  std::string meanKey = testKey("mean"), sumKey = testKey("sum");
  std::string meanIr = sha256Hex("graph with reduction = mean");
  std::string sumIr = sha256Hex("graph with reduction = sum");
  auto compileWith = [](std::string key, std::string irHash, int *calls) {
    return [=]() -> Expected<KernelBundle> {
      ++*calls;
      KernelBundle b = makeTestBundle(key);
      b.irHash = irHash;
      return b;
    };
  };
  int meanCalls = 0, sumCalls = 0;
  {
    KernelCache cache(diskOptions(dir.path()));
    CacheLookup lookup;
    lookup.irHash = meanIr;
    ASSERT_TRUE(cache.getOrCompile(meanKey, compileWith(meanKey, meanIr, &meanCalls), lookup));
  }
  fs::copy(dir / meanKey, dir / sumKey);
  forgeManifest(dir / sumKey, [&](std::string &m) { replaceAll(m, meanKey, sumKey); });
  ASSERT_TRUE(readBundleDirectory(dir / sumKey, sumKey)) << "only the IR hash tells them apart";

  KernelCache cache(diskOptions(dir.path()));
  CacheLookup lookup;
  lookup.irHash = sumIr;
  ::testing::internal::CaptureStderr();
  Expected<BundleRef> got =
      cache.getOrCompile(sumKey, compileWith(sumKey, sumIr, &sumCalls), lookup);
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(got) << got.errorMessage();
  EXPECT_EQ((*got)->irHash, sumIr);
  EXPECT_EQ(sumCalls, 1) << "the copied entry must be recompiled";
  EXPECT_NE(log.find("ir_hash " + meanIr + " does not match the requested graph's " + sumIr),
            std::string::npos)
      << log;
  // The entry now on disk is the real one.
  BundleReadOptions read;
  read.expectedKey = sumKey;
  read.expectedIrHash = sumIr;
  read.requireManifestHash = true;
  EXPECT_TRUE(readBundleDirectory(dir / sumKey, read));
}

TEST(KernelCache, UnusableEntryRejectedByTheCheckIsReplaced) {
  // issue 16: a garbage object whose hashes were updated made every later
  // run fail ("cannot link"). The caller's check (linking, for the CPU
  // backend) runs inside the cache now, so such an entry is recompiled.
  TempDir dir;
  std::string key = testKey("unusable");
  CountingCompiler compiler;
  {
    KernelCache cache(diskOptions(dir.path()));
    ASSERT_TRUE(cache.getOrCompile(key, compiler.forKey(key)));
  }
  KernelBundle b = makeTestBundle(key);
  std::string image = dir / key + "/" + b.kernels[0].file;
  ASSERT_FALSE(writeFile(image, "garbage object"));
  forgeManifest(dir / key, [&](std::string &m) {
    replaceAll(m, sha256Hex(b.kernels[0].image), sha256Hex("garbage object"));
    replaceAll(m, "\"bytes\": " + std::to_string(b.kernels[0].image.size()), "\"bytes\": 14");
  });
  ASSERT_TRUE(readBundleDirectory(dir / key, key)) << "consistent hashes, garbage content";

  int checks = 0;
  CacheLookup lookup;
  lookup.check = [&](const KernelBundle &bundle) -> Error {
    ++checks;
    if (bundle.kernels[0].image == "garbage object")
      return makeError("cannot link its object: invalid object file");
    return Error::success();
  };
  for (int run = 0; run < 2; ++run) {
    KernelCache cache(diskOptions(dir.path()));
    ::testing::internal::CaptureStderr();
    Expected<BundleRef> got = cache.getOrCompile(key, compiler.forKey(key), lookup);
    std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(got) << got.errorMessage();
    EXPECT_EQ((*got)->kernels[0].image, b.kernels[0].image);
    if (run == 0)
      EXPECT_NE(log.find("cannot link its object: invalid object file"), std::string::npos) << log;
    else
      EXPECT_EQ(log, "") << "the replaced entry is used without complaint";
  }
  EXPECT_EQ(compiler.calls, 2) << "compiled once at first, once to replace the bad entry";
  EXPECT_EQ(checks, 3) << "garbage twice (before and under the lock), then the replacement";
}

TEST(KernelCache, LockHeldByAStoppedProcessTimesOut) {
  // issue 16: a lock held by a stopped process blocked every other process
  // forever, silently. Now: progress messages naming the lock file, then a
  // compile without the lock.
  TempDir dir;
  std::string key = testKey("stopped-holder");
  std::string lockPath = dir / key + ".lock";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    int fd = ::open(lockPath.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0)
      ::_exit(1);
    (void)!::write(ready[1], "x", 1);
    ::raise(SIGSTOP); // alive, holding the lock, never releasing it
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);

  KernelCacheOptions options = diskOptions(dir.path());
  options.lockTimeout = std::chrono::milliseconds(400);
  options.lockProgressInterval = std::chrono::milliseconds(150);
  KernelCache cache(options);
  CountingCompiler compiler;
  ::testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  Expected<BundleRef> got = cache.getOrCompile(key, compiler.forKey(key));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string log = ::testing::internal::GetCapturedStderr();
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);

  ASSERT_TRUE(got) << got.errorMessage();
  EXPECT_EQ(compiler.calls, 1);
  EXPECT_LT(seconds, 5.0);
  EXPECT_GE(countOccurrences(log, "waiting for the kernel cache lock " + lockPath), 1u) << log;
  EXPECT_NE(log.find("kernel cache lock " + lockPath +
                     " still held after 400 ms (a stopped or hung process?); compiling " +
                     key.substr(0, 12) + " without it (the result is identical)"),
            std::string::npos)
      << log;
  // No entry existed, so the lock-free compile wrote one.
  BundleReadOptions read;
  read.expectedKey = key;
  read.requireManifestHash = true;
  EXPECT_TRUE(readBundleDirectory(dir / key, read));
  EXPECT_EQ(cache.stats().diskWrites, 1u);
}

TEST(KernelCache, LockTimeoutFromTheEnvironment) {
  {
    ScopedEnv env("LOSSJIT_CACHE_LOCK_TIMEOUT", "2.5");
    EXPECT_EQ(KernelCacheOptions::fromEnvironment().lockTimeout.count(), 2500);
  }
  {
    ScopedEnv env("LOSSJIT_CACHE_LOCK_TIMEOUT", "-1");
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(KernelCacheOptions::fromEnvironment().lockTimeout.count(), 60000);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(),
              "lossjit[warning]: LOSSJIT_CACHE_LOCK_TIMEOUT: '-1' is not a number of seconds "
              "in [0, 1e6]; keeping the default of 60 s\n");
  }
}
