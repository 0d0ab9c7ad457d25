//===- SimtKernel.cpp - public entry points of the SIMT interpreter -------===//

#include "testing/simt/SimtInterpreter.h"
#include "testing/simt/SimtProgram.h"

#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace lossjit::simt;

SimtKernel::SimtKernel() : program(std::make_unique<detail::Program>()) {}
SimtKernel::~SimtKernel() = default;

llvm::Expected<std::unique_ptr<SimtKernel>>
SimtKernel::decode(gpu::GPUFuncOp func) {
  std::unique_ptr<SimtKernel> kernel(new SimtKernel());
  if (llvm::Error err = detail::decodeProgram(func, *kernel->program))
    return err;
  return kernel;
}

llvm::Error SimtKernel::launch(std::array<int64_t, 3> grid,
                               std::array<int64_t, 3> block,
                               llvm::ArrayRef<SimtArg> args,
                               const SimtOptions &options) const {
  return detail::executeProgram(*program, grid, block, args, options);
}

llvm::StringRef SimtKernel::getName() const { return program->name; }

size_t SimtKernel::getNumInstructions() const { return program->instrs.size(); }

llvm::Expected<gpu::GPUFuncOp>
lossjit::simt::lookupKernel(Operation *root, llvm::StringRef moduleName,
                            llvm::StringRef kernelName) {
  gpu::GPUModuleOp module;
  root->walk([&](gpu::GPUModuleOp candidate) {
    if (candidate.getName() == moduleName)
      module = candidate;
  });
  if (!module)
    return llvm::createStringError("no gpu.module @" + moduleName.str());
  auto func = module.lookupSymbol<gpu::GPUFuncOp>(kernelName);
  if (!func)
    return llvm::createStringError("no gpu.func @" + kernelName.str() +
                                   " in gpu.module @" + moduleName.str());
  return func;
}
