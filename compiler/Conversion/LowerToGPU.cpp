//===- LowerToGPU.cpp - fused loss functions → gpu.module + launch plan ---===//

#include "compiler/Conversion/FusedFunction.h"
#include "compiler/Conversion/Passes.h"
#include "compiler/Kernels/Schedules/Schedules.h"
#include "compiler/Pipeline/Pipelines.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSLOWERTOGPU
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
struct LowerToGPUPass : lossjit::impl::LossLowerToGPUBase<LowerToGPUPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    TileConfig tile;
    tile.blockRows = blockRows;
    tile.threads = threads;
    tile.splits = splits;
    GpuTarget target{chip, ""};
    if (llvm::Error err = target.validate()) {
      module.emitError() << "loss-lower-to-gpu: " << llvm::toString(std::move(err));
      return signalPassFailure();
    }
    if (llvm::Error err = tile.validate()) {
      module.emitError() << "loss-lower-to-gpu: " << llvm::toString(std::move(err));
      return signalPassFailure();
    }
    auto fused = collectFusedFunctions(module, "loss-lower-to-gpu");
    if (failed(fused))
      return signalPassFailure();
    if (fused->empty())
      return;
    OpBuilder b(&getContext());
    for (FusedFunction &f : *fused) {

      b.setInsertionPoint(f.func);
      LaunchPlan plan;
      plan.entry = f.func.getName().str();
      plan.entryArgs = argumentRoles(f);
      plan.entryResults = resultRoles(f);
      if (llvm::Error err =
              buildGpuSchedule(b, f.func.getLoc(), f.func.getName(), specOf(f), tile, plan)) {
        f.op->emitError() << "loss-lower-to-gpu: " << llvm::toString(std::move(err));
        return signalPassFailure();
      }
      plan.options["arch"] = chip;
      attachLaunchPlan(module, plan);
      f.func.erase();
    }
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    b.getUnitAttr());
  }
};
} // namespace
