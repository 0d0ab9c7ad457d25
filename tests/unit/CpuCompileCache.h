//===- CpuCompileCache.h - CPU ops of the unit tests, cached ----*- C++ -*-===//
//
// ctest runs every test in its own process, and the tests of a graph compile
// its CPU op again and again: the CPU backend's numerics tests, the same
// tests under forced baseline targets, the interpreter's CPU references and
// the pinned bits share a few hundred graphs. Measured on a 2-core machine
// (the compiler and interpreter tests, PR of 2026-12-07): 1256 LLVM compiles
// of 727 distinct ops, 312 of 809 s in repeats. These helpers compile through
// a kernel cache in the build tree, so each op compiles once per compiler.
//
// The key covers the graph, the CPU pipeline, tile and target and the
// compiler's fingerprint (CpuCompiledOp::compileCached): an edited compiler
// or another target is a miss, never a stale op. A hit links the same object
// a compile would emit, so a test sees the same bits either way. The cache
// itself is tested without these helpers (KernelCacheTest,
// CpuBackend.SecondProcessLinksTheCachedObject), and the tests of what
// compilation emits (CpuTargetTest) compile uncached.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTS_UNIT_CPUCOMPILECACHE_H
#define LOSSJIT_TESTS_UNIT_CPUCOMPILECACHE_H

#include "compiler/Target/CpuJit.h"
#include "compiler/Target/CpuTarget.h"
#include "runtime/KernelCache.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>

#ifndef LOSSJIT_TEST_CACHE_DIR
#error "LOSSJIT_TEST_CACHE_DIR must name the tests' cache directory in the build tree"
#endif

namespace lossjit::test {

/// The tests' kernel cache (LOSSJIT_TEST_CACHE_DIR), one per test process.
inline runtime::KernelCache &testKernelCache() {
  static runtime::KernelCache cache{[] {
    runtime::KernelCacheOptions options;
    options.directory = LOSSJIT_TEST_CACHE_DIR;
    // 727 ops of 0.1–0.4 MB per compiler fingerprint; the least recently
    // used entries (an older compiler's) go when it is full.
    options.maxBytes = uint64_t(768) << 20;
    return options;
  }()};
  return cache;
}

/// The CPU op of `graph` (mutated on a miss) for LOSSJIT_CPU_TARGET's
/// target, through the tests' cache.
inline llvm::Expected<std::unique_ptr<CpuCompiledOp>>
compileCpuCached(mlir::ModuleOp graph, const CpuTileConfig &tile = CpuTileConfig{}) {
  return CpuCompiledOp::compileCached(graph, tile, testKernelCache());
}

/// The CPU op of `graph` for `target`, through the tests' cache.
inline llvm::Expected<std::unique_ptr<CpuCompiledOp>>
compileCpuCached(mlir::ModuleOp graph, const CpuTileConfig &tile, const CpuTarget &target) {
  return CpuCompiledOp::compileCached(graph, tile, target, testKernelCache());
}

} // namespace lossjit::test

#endif // LOSSJIT_TESTS_UNIT_CPUCOMPILECACHE_H
