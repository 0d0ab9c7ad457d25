//===- BundleBuilder.h - compiled ops as runtime kernel bundles -*- C++ -*-===//
//
// The compiler's output in the runtime's one format (runtime/KernelBundle.h):
// the AOT tool writes these directories, the kernel cache stores them, and a
// runtime-only build loads them.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_TARGET_BUNDLEBUILDER_H
#define LOSSJIT_COMPILER_TARGET_BUNDLEBUILDER_H

#include "compiler/Target/PtxEmitter.h"
#include "runtime/KernelBundle.h"

namespace lossjit {

/// The cache key of compiling `canonicalGraph` (the printed input module)
/// for `target` with `tile`: every input that changes the PTX changes it.
std::string gpuCacheKey(llvm::StringRef canonicalGraph, const GpuTarget &target,
                        const TileConfig &tile);

/// The bundle of one compiled op. `key` names the bundle directory;
/// `irHash` is the SHA-256 of the graph text.
runtime::KernelBundle makeGpuBundle(const GpuCompiledOp &op,
                                    const std::string &key,
                                    const std::string &irHash);

/// The parts of a bundle every backend shares, taken from `plan`: op,
/// options, buffers, dims, constants, derived symbols, chunking and
/// workspaces (kernels and images are the caller's).
runtime::KernelBundle bundleSkeleton(const LaunchPlan &plan, const std::string &key,
                                     const std::string &irHash);

/// Converts a plan's "k=v,k=v" tile text to a JSON object (ints stay ints).
runtime::JsonValue tileToJson(llvm::StringRef tile);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_TARGET_BUNDLEBUILDER_H
