//===- TestUtil.h - Shared helpers for runtime unit tests -------*- C++ -*-===//

#ifndef LOSSJIT_TESTS_UNIT_RUNTIME_TESTUTIL_H
#define LOSSJIT_TESTS_UNIT_RUNTIME_TESTUTIL_H

#include "runtime/FileUtil.h"
#include "runtime/KernelBundle.h"
#include "runtime/KernelCache.h"

#include <array>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

/// A chunked bundle shaped like the compiler's gradient output: a once-kernel
/// (lce_bwd_scale), a group of two per-chunk kernels (lce_bwd_dz, lce_bwd_dx)
/// and another once-kernel (lce_bwd_finish). The chunk size is the derived
/// symbol C = max(1,min(N,(WB-V*D*4)/(V*4))), which is 4 for V = 8, D = 2
/// (WB = 192); the derived symbol NC = cdiv(N,C) counts the chunks.
inline KernelBundle makeChunkedTestBundle(const std::string &key) {
  KernelBundle b;
  b.key = key;
  b.llvmVersion = "22.1.8";
  b.op = "linear_cross_entropy_backward";
  b.backend = "cuda";
  b.arch = "sm_80";
  b.options.set("dtype", "f32");
  b.tile.set("block_rows", 4);
  b.tile.set("threads", 128);
  b.irHash = std::string(64, 'b');
  b.params = {{"x", "buffer", "f32", {"N", "D"}},
              {"w", "buffer", "f32", {"V", "D"}},
              {"labels", "buffer", "i64", {"N"}},
              {"grad_loss", "buffer", "f32", {}},
              {"grad_x", "buffer", "f32", {"N", "D"}},
              {"grad_w", "buffer", "f32", {"V", "D"}}};
  b.dims = {"N", "V", "D"};
  b.constants = {{"WB", 192}};
  b.derived = {{"C", "max(1,min(N,(WB-V*D*4)/(V*4)))"}, {"NC", "cdiv(N,C)"}};
  b.chunk = "C";
  b.workspaces = {{"grow", "f32", "N"}, {"dz", "f32", "C*V"}};
  auto kernel = [&](const std::string &name, std::array<std::string, 3> grid,
                    std::vector<std::string> args, bool perChunk) {
    BundleKernel k;
    k.name = name;
    k.file = name + ".sm_80.ptx";
    k.grid = std::move(grid);
    k.block = {128, 1, 1};
    k.args = std::move(args);
    k.perChunk = perChunk;
    k.image = "//\n// fake PTX " + name + " for " + key + "\n.version 8.0\n";
    return k;
  };
  b.kernels = {
      kernel("lce_bwd_scale", {"1", "1", "1"},
             {"labels", "grad_loss", "grow", "N", "V"}, false),
      kernel("lce_bwd_dz", {"cdiv(C,4)", "cdiv(V,128)", "1"},
             {"x", "w", "labels", "grow", "dz", "chunk_begin", "chunk_end", "V",
              "D"},
             true),
      kernel("lce_bwd_dx", {"cdiv(C,4)", "cdiv(D,128)", "1"},
             {"dz", "w", "grad_x", "chunk_begin", "chunk_end", "C", "NC"}, true),
      kernel("lce_bwd_finish", {"cdiv(V*D,128)", "1", "1"},
             {"grad_w", "V", "D"}, false)};
  return b;
}

} // namespace lossjit::runtime::testing

#endif // LOSSJIT_TESTS_UNIT_RUNTIME_TESTUTIL_H
