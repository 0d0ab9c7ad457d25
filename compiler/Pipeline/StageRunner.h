//===- StageRunner.h - run pipeline stages, report each stage ---*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_PIPELINE_STAGERUNNER_H
#define LOSSJIT_COMPILER_PIPELINE_STAGERUNNER_H

#include "compiler/Pipeline/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"

#include <functional>

namespace lossjit {

/// Receives the IR after each stage ("input" first): LOSSJIT_DUMP_DIR,
/// `lossjit-aot --emit-stages` and tests use it.
using StageSink = std::function<void(llvm::StringRef stage, llvm::StringRef ir)>;

/// Wall time of one stage.
struct StageTiming {
  std::string name;
  double seconds = 0;
};

/// Runs `stages` on `module` in order. Diagnostics are captured: a failing
/// stage returns an error naming the stage with every diagnostic it emitted.
llvm::Expected<std::vector<StageTiming>>
runStages(mlir::ModuleOp module, llvm::ArrayRef<Stage> stages,
          const StageSink &sink = {});

/// A sink writing `<dir>/<NN>-<stage>.mlir`, or none if `dir` is empty.
StageSink dumpDirectorySink(const std::string &dir);

/// LOSSJIT_DUMP_DIR's sink (empty when the variable is unset).
StageSink environmentDumpSink();

} // namespace lossjit

#endif // LOSSJIT_COMPILER_PIPELINE_STAGERUNNER_H
