//===- LowerToGPU.cpp - fused loss functions → gpu.module + launch plan ---===//

#include "compiler/Conversion/FusedFunction.h"
#include "compiler/Conversion/Passes.h"
#include "compiler/Kernels/Schedules/Schedules.h"
#include "compiler/Pipeline/Pipelines.h"
#include "dialects/Loss/LoweringConfig.h"

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
    GpuTarget target{chip, ""};
    if (llvm::Error err = target.validate()) {
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
      plan.entryArgExtents = argumentExtents(f);
      plan.entryResults = resultRoles(f);
      auto config = dyn_cast_or_null<loss::GpuConfigAttr>(loss::getLoweringConfig(f.op));
      if (!config) {
        f.op->emitError() << "loss-lower-to-gpu: @" << f.func.getName()
                          << " has no #loss.gpu_config lowering config (run "
                             "loss-select-lowering-config{target=gpu} first)";
        return signalPassFailure();
      }
      if (std::string why = loss::checkMatmulChip(config.getMatmul(), chip); !why.empty()) {
        f.op->emitError() << "loss-lower-to-gpu: " << why;
        return signalPassFailure();
      }
      LceSpec spec = specOf(f);
      loss::Schedule schedule = config.getSchedule();
      spec.strategy = schedule == loss::Schedule::recompute ? "recompute" : "chunked";
      spec.vocabChunks = schedule == loss::Schedule::vocab_chunked ||
                         schedule == loss::Schedule::fused_vocab_chunked;
      // The plan's options name the schedule a bundle holds.
      if (spec.vocabChunks)
        spec.strategy = "vocab_chunked";
      if (llvm::Error err = buildGpuSchedule(b, f.func.getLoc(), f.func.getName(), spec,
                                             TileConfig::fromAttr(config), plan)) {
        f.op->emitError() << "loss-lower-to-gpu: " << llvm::toString(std::move(err));
        return signalPassFailure();
      }
      plan.options["arch"] = chip;
      attachLaunchPlan(module, plan);
      f.func.erase();
    }
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  }
};
} // namespace
