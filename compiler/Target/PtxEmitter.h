//===- PtxEmitter.h - loss graph → PTX, in-process ---------------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_TARGET_PTXEMITTER_H
#define LOSSJIT_COMPILER_TARGET_PTXEMITTER_H

#include "compiler/Kernels/Support/LaunchPlan.h"
#include "compiler/Pipeline/StageRunner.h"

namespace lossjit {

/// The PTX of one kernel (one gpu.module).
struct PtxKernel {
  std::string name;   ///< the .entry name.
  std::string module; ///< the gpu.module it came from.
  std::string ptx;
};

/// One lowered function: its plan and its kernels' PTX in plan order.
struct GpuCompiledOp {
  LaunchPlan plan;
  std::string arch;
  std::vector<PtxKernel> kernels;
};

/// Everything one compilation produced.
struct GpuCompilation {
  std::vector<GpuCompiledOp> ops;
  std::vector<StageTiming> timings;
};

/// Runs the GPU stages on `module` (mutated: it ends as gpu.binary ops) and
/// collects the PTX text of each kernel. No subprocess, no ptxas: the NVPTX
/// backend of LLVM runs in this process.
llvm::Expected<GpuCompilation> compileToPtx(mlir::ModuleOp module,
                                            const GpuTarget &target,
                                            const TileConfig &tile,
                                            const StageSink &sink = {});

} // namespace lossjit

#endif // LOSSJIT_COMPILER_TARGET_PTXEMITTER_H
