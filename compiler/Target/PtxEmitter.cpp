//===- PtxEmitter.cpp -----------------------------------------------------===//

#include "compiler/Target/PtxEmitter.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace lossjit;

namespace {
/// The PTX text held by the gpu.binary named `module`.
llvm::Expected<std::string> findPtx(ModuleOp top, llvm::StringRef module) {
  auto binary = top.lookupSymbol<gpu::BinaryOp>(module);
  if (!binary)
    return llvm::createStringError("no gpu.binary @" + module.str() +
                                   " after serialization");
  for (Attribute a : binary.getObjects()) {
    auto object = dyn_cast<gpu::ObjectAttr>(a);
    if (object && object.getFormat() == gpu::CompilationTarget::Assembly)
      return object.getObject().str();
  }
  return llvm::createStringError("gpu.binary @" + module.str() +
                                 " holds no PTX assembly object");
}
} // namespace

llvm::Expected<GpuCompilation> lossjit::compileToPtx(ModuleOp module,
                                                     const GpuTarget &target,
                                                     const TileConfig &tile,
                                                     const StageSink &sink) {
  if (llvm::Error err = target.validate())
    return std::move(err);
  if (llvm::Error err = tile.validate())
    return std::move(err);
  GpuCompilation result;
  auto timings = runStages(module, gpuStages(target, tile), sink);
  if (!timings)
    return timings.takeError();
  result.timings = std::move(*timings);
  std::string error;
  auto plans = readLaunchPlans(module, error);
  if (failed(plans))
    return llvm::createStringError(error);
  for (LaunchPlan &plan : *plans) {
    GpuCompiledOp op{plan, target.chip, {}};
    for (const PlanKernel &k : plan.kernels) {
      auto ptx = findPtx(module, k.module);
      if (!ptx)
        return ptx.takeError();
      op.kernels.push_back({k.name, k.module, std::move(*ptx)});
    }
    result.ops.push_back(std::move(op));
  }
  return result;
}
