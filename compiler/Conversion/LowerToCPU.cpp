//===- LowerToCPU.cpp - fused loss functions → host kernels + launch plan -===//

#include "compiler/Conversion/FusedFunction.h"
#include "compiler/Conversion/Passes.h"
#include "compiler/Kernels/Schedules/Schedules.h"

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
    if (blockRows < 1 || blockRows > 16 || vectorWidth < 1 || vectorWidth > 64) {
      module.emitError() << "loss-lower-to-cpu: block-rows must be in [1, 16] "
                            "and vector-width in [1, 64], got "
                         << static_cast<int64_t>(blockRows) << " and "
                         << static_cast<int64_t>(vectorWidth);
      return signalPassFailure();
    }
    auto fused = collectFusedFunctions(module, "loss-lower-to-cpu");
    if (failed(fused))
      return signalPassFailure();
    CpuTileConfig tile;
    tile.blockRows = blockRows;
    tile.vectorWidth = vectorWidth;
    OpBuilder b(&getContext());
    for (FusedFunction &f : *fused) {
      b.setInsertionPoint(f.func);
      // Each fused function gets its own nested module, so kernel names
      // never collide and the module can be JIT-compiled on its own.
      auto kernels = ModuleOp::create(b, f.func.getLoc(),
                                      (f.func.getName() + "_kernels").str());
      LaunchPlan plan;
      plan.entry = f.func.getName().str();
      plan.entryArgs = argumentRoles(f);
      plan.entryResults = resultRoles(f);
      b.setInsertionPointToStart(kernels.getBody());
      if (llvm::Error err = buildCpuSchedule(b, f.func.getLoc(), *kernels.getSymName(),
                                             specOf(f), tile, plan)) {
        f.op->emitError() << "loss-lower-to-cpu: " << llvm::toString(std::move(err));
        return signalPassFailure();
      }
      attachLaunchPlan(module, plan);
      f.func.erase();
    }
  }
};
} // namespace
