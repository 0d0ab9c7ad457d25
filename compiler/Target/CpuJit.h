//===- CpuJit.h - the CPU backend: host kernels through LLVM's JIT -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_TARGET_CPUJIT_H
#define LOSSJIT_COMPILER_TARGET_CPUJIT_H

#include "compiler/Kernels/Support/LaunchPlan.h"
#include "compiler/Pipeline/StageRunner.h"
#include "compiler/Target/CpuTarget.h"

#include <map>
#include <memory>

namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace lossjit::runtime {
class KernelCache;
} // namespace lossjit::runtime

namespace lossjit {

/// A caller-owned host array bound to a plan param by name.
struct HostBuffer {
  void *data = nullptr;
  std::string dtype; ///< "f16", "bf16", "f32", "i32", "i64".
  int64_t count = 0; ///< elements.
};

/// Runtime sizes of one call: N, V, D, and T (a teacher's hidden size;
/// only plans with a teacher have the dim).
struct Dims {
  int64_t n = 0, v = 0, d = 0, t = 0;
};

/// A fused op compiled for the host: the JIT-compiled kernels and the plan
/// that calls them. Thread-safe to run concurrently on different buffers.
class CpuCompiledOp {
public:
  ~CpuCompiledOp();

  /// Runs the CPU stages on `module` (mutated), compiles the kernels of its
  /// one lowered function with LLVM at -O3 for `target` and links them
  /// (see CpuCodegen.h: the object may call only lossjit's own routines).
  static llvm::Expected<std::unique_ptr<CpuCompiledOp>>
  compile(mlir::ModuleOp module, const CpuTileConfig &tile, const CpuTarget &target,
          const StageSink &sink = {});

  /// compile() for the target LOSSJIT_CPU_TARGET names (default: native).
  static llvm::Expected<std::unique_ptr<CpuCompiledOp>>
  compile(mlir::ModuleOp module, const CpuTileConfig &tile, const StageSink &sink = {});

  /// Like compile(), through `cache`: the entry holds the object code for
  /// `target` and the plan, so a hit in this or another process skips MLIR
  /// and LLVM codegen and only links the object. The key covers the graph
  /// text, the CPU pipeline and tile, the target's CPU name and feature
  /// string (CpuTarget::key), and the lossjit and LLVM versions: code built
  /// for one CPU is never linked for another.
  static llvm::Expected<std::unique_ptr<CpuCompiledOp>>
  compileCached(mlir::ModuleOp module, const CpuTileConfig &tile, const CpuTarget &target,
                runtime::KernelCache &cache, const StageSink &sink = {});

  /// compileCached() for the target LOSSJIT_CPU_TARGET names.
  static llvm::Expected<std::unique_ptr<CpuCompiledOp>>
  compileCached(mlir::ModuleOp module, const CpuTileConfig &tile,
                runtime::KernelCache &cache, const StageSink &sink = {});

  /// True when this op was linked from a cached object (no compilation).
  bool fromCache() const { return cachedObject; }

  const LaunchPlan &plan() const { return launchPlan; }
  /// The CPU the kernels were compiled for.
  const CpuTarget &target() const { return hostTarget; }
  const std::vector<StageTiming> &timings() const { return stageTimings; }
  /// Seconds spent in LLVM codegen + linking (after the MLIR stages).
  double jitSeconds() const { return jitTime; }
  /// The object code the kernels were linked from (what the cache stores).
  llvm::StringRef objectCode() const { return object; }

  /// Checks buffers against the plan (names, dtypes, element counts).
  llvm::Error validate(const std::map<std::string, HostBuffer> &buffers,
                       const Dims &dims) const;

  /// Runs the plan. `threads` = 0 uses every hardware thread. Results do not
  /// depend on `threads`: rows are independent and the reduction has one
  /// fixed order.
  llvm::Error run(const std::map<std::string, HostBuffer> &buffers,
                  const Dims &dims, unsigned threads = 0) const;

private:
  CpuCompiledOp() = default;
  LaunchPlan launchPlan;
  std::vector<StageTiming> stageTimings;
  double jitTime = 0;
  bool cachedObject = false;
  CpuTarget hostTarget;
  /// The object code (what the cache stores) and the JIT it is linked into.
  std::string object;
  std::unique_ptr<llvm::orc::LLJIT> linked;

  /// Calls the packed wrapper of kernel `name`.
  llvm::Error invoke(llvm::StringRef name, llvm::MutableArrayRef<void *> args) const;
};

/// Element size in bytes of a plan dtype, or 0 if unknown.
int64_t dtypeBytes(llvm::StringRef dtype);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_TARGET_CPUJIT_H
