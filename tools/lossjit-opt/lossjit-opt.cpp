//===- lossjit-opt.cpp - mlir-opt for the loss dialect and its passes -----===//
//
// Every lossjit pass runs alone here (loss-make-precision-explicit, ...), as
// do the whole pipelines (lossjit-gpu-pipeline, lossjit-cpu-pipeline) and
// every upstream pass, so a researcher can replay and bisect any stage.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipeline/Registration.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  lossjit::registerLossJITDialects(registry);
  lossjit::registerLossJITPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "lossjit optimizer driver (loss dialect + MLIR)\n", registry));
}
