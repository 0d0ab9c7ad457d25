//===- lossjit-opt.cpp - mlir-opt for the loss dialect and its passes -----===//
//
// Every lossjit pass runs alone here (loss-make-precision-explicit, ...), as
// do the whole pipelines (lossjit-gpu-pipeline, lossjit-cpu-pipeline) and
// every upstream pass, so a researcher can replay and bisect any stage.
//
// mlir-opt's driver, except that the input is read by the tools' bounded
// reader first: a file nested deeper than MLIR's recursive parser can take
// (runtime/NestingLimit.h) is an error, not a stack overflow.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipeline/Registration.h"
#include "tools/support/ToolInput.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  lossjit::initToolProcess();
  mlir::DialectRegistry registry;
  lossjit::registerLossJITDialects(registry);
  lossjit::registerLossJITPasses();
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "lossjit optimizer driver (loss dialect + MLIR)\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects()) {
    llvm::outs() << "Available Dialects: ";
    llvm::interleave(registry.getDialectNames(), llvm::outs(), ",");
    llvm::outs() << "\n";
    return 0;
  }
  if (config.shouldListPasses()) {
    mlir::printRegisteredPasses();
    return 0;
  }
  auto input = lossjit::readGraphInput(inputFilename);
  if (!input) {
    llvm::errs() << "lossjit-opt: error: " << llvm::toString(input.takeError()) << "\n";
    return 1;
  }
  std::string error;
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "lossjit-opt: error: " << error << "\n";
    return 1;
  }
  bool ok = mlir::succeeded(mlir::MlirOptMain(output->os(), std::move(*input), registry, config));
  // A failed write (EFBIG past `ulimit -f`, ENOSPC) is an error message:
  // LLVM would abort in the stream's destructor with the error unchecked.
  output->os().flush();
  if (output->os().has_error()) {
    llvm::errs() << "lossjit-opt: error: cannot write '" << outputFilename
                 << "': " << output->os().error().message() << "\n";
    output->os().clear_error();
    return 1;
  }
  if (!ok)
    return 1;
  output->keep();
  if (llvm::Error err = lossjit::flushStandardOutput()) {
    llvm::errs() << "lossjit-opt: error: " << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  return 0;
}
