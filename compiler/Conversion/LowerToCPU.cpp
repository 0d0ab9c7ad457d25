//===- LowerToCPU.cpp - fused loss functions → host kernels + launch plan -===//

#include "compiler/Conversion/FusedFunction.h"
#include "compiler/Conversion/Passes.h"
#include "compiler/Kernels/Schedules/Schedules.h"
#include "dialects/Loss/LoweringConfig.h"

#include "mlir/IR/BuiltinOps.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSLOWERTOCPU
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
struct LowerToCPUPass : lossjit::impl::LossLowerToCPUBase<LowerToCPUPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fused = collectFusedFunctions(module, "loss-lower-to-cpu");
    if (failed(fused))
      return signalPassFailure();
    OpBuilder b(&getContext());
    for (FusedFunction &f : *fused) {
      auto config = dyn_cast_or_null<loss::CpuConfigAttr>(loss::getLoweringConfig(f.op));
      if (!config) {
        f.op->emitError() << "loss-lower-to-cpu: @" << f.func.getName()
                          << " has no #loss.cpu_config lowering config (run "
                             "loss-select-lowering-config{target=cpu} first)";
        return signalPassFailure();
      }
      b.setInsertionPoint(f.func);
      // Each fused function gets its own nested module, so kernel names
      // never collide and the module can be JIT-compiled on its own.
      auto kernels = ModuleOp::create(b, f.func.getLoc(), (f.func.getName() + "_kernels").str());
      LaunchPlan plan;
      plan.entry = f.func.getName().str();
      plan.entryArgs = argumentRoles(f);
      plan.entryArgExtents = argumentExtents(f);
      plan.entryResults = resultRoles(f);
      b.setInsertionPointToStart(kernels.getBody());
      LceSpec spec = specOf(f);
      loss::Schedule schedule = config.getSchedule();
      spec.strategy = schedule == loss::Schedule::recompute ? "recompute" : "chunked";
      spec.vocabChunks = schedule == loss::Schedule::vocab_chunked ||
                         schedule == loss::Schedule::fused_vocab_chunked;
      // The plan's options name the schedule a bundle holds.
      if (spec.vocabChunks)
        spec.strategy = "vocab_chunked";
      if (llvm::Error err = buildCpuSchedule(b, f.func.getLoc(), *kernels.getSymName(), spec,
                                             CpuTileConfig::fromAttr(config), plan)) {
        f.op->emitError() << "loss-lower-to-cpu: " << llvm::toString(std::move(err));
        return signalPassFailure();
      }
      attachLaunchPlan(module, plan);
      f.func.erase();
    }
  }
};
} // namespace
