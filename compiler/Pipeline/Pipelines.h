//===- Pipelines.h - graph → PTX and graph → host code, stage by stage -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_PIPELINE_PIPELINES_H
#define LOSSJIT_COMPILER_PIPELINE_PIPELINES_H

#include "compiler/Kernels/Support/TileConfig.h"

#include <string>
#include <vector>

namespace lossjit {

/// A GPU to emit PTX for.
struct GpuTarget {
  std::string chip = "sm_80"; ///< sm_80, sm_86, sm_89, sm_90, sm_90a, ...
  /// PTX ISA features; empty picks one the chip needs (the upstream default
  /// +ptx60 makes LLVM abort on sm_80 and newer).
  std::string features;
  /// Checks the chip spelling and that lossjit supports it (sm_70 or newer).
  llvm::Error validate() const;
  /// `features`, or the default for `chip`.
  std::string effectiveFeatures() const;
};

/// One named step of a pipeline; stages run in order.
struct Stage {
  std::string name;     ///< "precision", "fused", "kernels", "nvvm", "ptx", ...
  std::string pipeline; ///< textual pass pipeline on builtin.module.
};

/// The stages from a `loss` graph to PTX (the last one serializes every
/// kernel gpu.module to a gpu.binary holding PTX text).
std::vector<Stage> gpuStages(const GpuTarget &target, const TileConfig &tile);

/// The stages from a `loss` graph to LLVM-dialect host kernels.
/// `f16ExtendInHardware`: the target CPU widens f16 → f32 with an exact
/// instruction (x86 F16C), so loss-expand-host-libcalls may leave that
/// conversion to LLVM (same bits, several times faster in the dot loops).
/// `vectorRegisters` (when > 0) sizes the register tile for the target
/// where `tile` leaves it at the defaults. Without `fmaInHardware` (a CPU
/// without FMA units) f32 fused multiply-adds expand into exact f64
/// arithmetic rather than LLVM's per-element fmaf calls: the same bits.
std::vector<Stage> cpuStages(const CpuTileConfig &tile, bool f16ExtendInHardware = false,
                             int64_t vectorRegisters = 0, bool fmaInHardware = true);

/// The passes inside a "builtin.module(...)" pipeline, for adding to a pass
/// manager that is already anchored on builtin.module.
llvm::StringRef stripModuleAnchor(llvm::StringRef pipeline);

/// The same stages as one pipeline string (what lossjit-opt's registered
/// pipelines run).
std::string joinStages(const std::vector<Stage> &stages);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_PIPELINE_PIPELINES_H
