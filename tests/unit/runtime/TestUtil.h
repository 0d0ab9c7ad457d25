//===- TestUtil.h - Shared helpers for runtime unit tests -------*- C++ -*-===//

#ifndef LOSSJIT_TESTS_UNIT_RUNTIME_TESTUTIL_H
#define LOSSJIT_TESTS_UNIT_RUNTIME_TESTUTIL_H

#include "runtime/FileUtil.h"
#include "runtime/KernelBundle.h"
#include "runtime/KernelCache.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace lossjit::runtime::testing {

/// A fresh directory under $TMPDIR, removed on destruction.
class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") +
                          "/lossjit-runtime-test-XXXXXX";
    char *made = ::mkdtemp(pattern.data());
    if (!made)
      throw std::runtime_error("mkdtemp failed for " + pattern);
    dir = made;
  }
  ~TempDir() { (void)removeTree(dir); }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const std::string &path() const { return dir; }
  std::string operator/(const std::string &name) const { return dir + "/" + name; }

private:
  std::string dir;
};

/// Sets an environment variable for a scope, restoring the old value.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (previous)
      ::setenv(name.c_str(), previous->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }

private:
  std::string name;
  std::optional<std::string> previous;
};

/// A deterministic key for test variant `name`.
inline std::string testKey(const std::string &name) {
  CacheKeyInputs inputs;
  inputs.canonicalIr = "test-ir:" + name;
  inputs.pipeline = "test";
  inputs.arch = "sm_80";
  inputs.llvmVersion = "test";
  return computeCacheKey(inputs);
}

/// A small but complete two-kernel bundle shaped like the compiler's
/// linear_cross_entropy output (the manifest example of the bundle format).
/// `payloadBytes` pads each fake PTX image.
inline KernelBundle makeTestBundle(const std::string &key,
                                   size_t payloadBytes = 64) {
  KernelBundle b;
  b.key = key;
  b.llvmVersion = "22.1.8";
  b.op = "linear_cross_entropy";
  b.backend = "cuda";
  b.arch = "sm_80";
  b.options.set("dtype", "f16");
  b.options.set("label_type", "i64");
  b.options.set("ignore_index", -100);
  b.options.set("reduction", "mean");
  b.options.set("bias", false);
  b.tile.set("block_rows", 4);
  b.tile.set("threads", 128);
  b.tile.set("splits", 8);
  b.tile.set("matmul", "simt");
  b.irHash = std::string(64, 'a');
  b.params = {{"x", "buffer", "f16", {"N", "D"}},
              {"w", "buffer", "f16", {"V", "D"}},
              {"labels", "buffer", "i64", {"N"}},
              {"loss", "buffer", "f32", {}},
              {"lse", "buffer", "f32", {"N"}}};
  b.dims = {"N", "V", "D"};
  b.constants = {{"S", 8}};
  b.workspaces = {{"part_m", "f32", "S*N"},
                  {"part_s", "f32", "S*N"},
                  {"loss_rows", "f32", "N"}};
  BundleKernel partial;
  partial.name = "lce_partial";
  partial.file = "lce_partial.sm_80.ptx";
  partial.grid = {"cdiv(N,4)", "S", "1"};
  partial.block = {128, 1, 1};
  partial.sharedBytes = 4096;
  partial.args = {"x", "w", "labels", "part_m", "part_s", "N", "V", "D"};
  partial.image = "//\n// fake PTX for " + key + "\n.version 8.0\n.target sm_80\n" +
                  std::string(payloadBytes, 'p') + "\n";
  BundleKernel combine;
  combine.name = "lce_combine";
  combine.file = "lce_combine.sm_80.ptx";
  combine.grid = {"1", "1", "1"};
  combine.block = {256, 1, 1};
  combine.args = {"part_m", "part_s", "labels", "loss_rows", "loss", "lse", "N", "S"};
  combine.image = "//\n// fake combine PTX\n.version 8.0\n" +
                  std::string(payloadBytes, 'c') + "\n";
  b.kernels = {partial, combine};
  return b;
}

} // namespace lossjit::runtime::testing

#endif // LOSSJIT_TESTS_UNIT_RUNTIME_TESTUTIL_H
