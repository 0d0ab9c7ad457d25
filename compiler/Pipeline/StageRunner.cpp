//===- StageRunner.cpp ----------------------------------------------------===//

#include "compiler/Pipeline/StageRunner.h"
#include "compiler/Pipeline/Registration.h"
#include "runtime/Log.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <memory>

using namespace mlir;
using namespace lossjit;

namespace {
std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}
} // namespace

llvm::Expected<std::vector<StageTiming>>
lossjit::runStages(ModuleOp module, llvm::ArrayRef<Stage> stages,
                   const StageSink &sink) {
  registerLossJITPasses();
  MLIRContext *ctx = module.getContext();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Remark)
      return success();
    llvm::raw_string_ostream os(diagnostics);
    os << "\n  " << diag.getLocation() << ": " << diag;
    for (Diagnostic &note : diag.getNotes())
      os << "\n    note: " << note;
    return success();
  });
  if (sink)
    sink("input", printModule(module));
  std::vector<StageTiming> timings;
  for (const Stage &stage : stages) {
    PassManager pm(ctx);
    std::string parseErrors;
    llvm::raw_string_ostream errs(parseErrors);
    if (failed(parsePassPipeline(stripModuleAnchor(stage.pipeline), pm, errs)))
      return llvm::createStringError("stage '" + stage.name +
                                     "': invalid pipeline '" + stage.pipeline +
                                     "': " + parseErrors);
    auto start = std::chrono::steady_clock::now();
    if (failed(pm.run(module)))
      return llvm::createStringError("stage '" + stage.name + "' failed:" +
                                     diagnostics);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    timings.push_back({stage.name, took.count()});
    if (runtime::isLogEnabled(runtime::LogLevel::Info))
      runtime::logInfo("stage " + stage.name + ": " +
                       std::to_string(took.count() * 1e3) + " ms");
    if (sink)
      sink(stage.name, printModule(module));
  }
  return timings;
}

StageSink lossjit::dumpDirectorySink(const std::string &dir) {
  if (dir.empty())
    return {};
  auto counter = std::make_shared<int>(0);
  // A dump is a debugging aid, so a directory it cannot write fails no
  // compile; but it says so once, or an asked-for dump silently never comes.
  auto warned = std::make_shared<bool>(false);
  return [dir, counter, warned](llvm::StringRef stage, llvm::StringRef ir) {
    auto warnOnce = [&](const std::string &what, const std::error_code &ec) {
      if (*warned)
        return;
      *warned = true;
      runtime::logWarning("LOSSJIT_DUMP_DIR: cannot " + what + ": " + ec.message() +
                          "; the stages are not dumped");
    };
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return warnOnce("create " + dir, ec);
    char prefix[8];
    snprintf(prefix, sizeof(prefix), "%02d-", (*counter)++);
    std::error_code ec;
    const std::string path = dir + "/" + prefix + stage.str() + ".mlir";
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return warnOnce("write " + path, ec);
    os << ir;
  };
}

StageSink lossjit::environmentDumpSink() {
  const char *dir = getenv("LOSSJIT_DUMP_DIR");
  return dumpDirectorySink(dir ? dir : "");
}
