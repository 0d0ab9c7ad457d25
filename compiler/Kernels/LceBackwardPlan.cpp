//===- LceBackwardPlan.cpp ------------------------------------------------===//

#include "compiler/Kernels/LceBackwardPlan.h"

using namespace lossjit;

void lossjit::beginBackwardPlan(const LceSpec &spec, llvm::StringRef tile,
                                LaunchPlan &plan) {
  plan.params = spec.planParams();
  plan.options = spec.planOptions();
  plan.tile = tile.str();
  plan.constants = {};
  plan.derived.clear();
  plan.chunkSymbol.clear();
  plan.workspaces = {{"grow", "f32", "N"}};
  plan.kernels.clear();
}

ChunkedAccumulators lossjit::addChunkedBackwardPlan(const LceSpec &spec,
                                                    LaunchPlan &plan) {
  plan.constants["WB"] = spec.workspaceBytes;
  plan.derived = {{"C", "max(1,min(N,(WB-N*4)/(V*4)))"}};
  plan.chunkSymbol = "C";
  plan.workspaces.push_back({"dz", "f32", "C*V"});
  ChunkedAccumulators acc;
  if (!spec.needsGradW || spec.storesF32())
    return acc;
  acc.separate = true;
  acc.dw = "dw_acc";
  plan.workspaces.push_back({"dw_acc", "f32", "V*D"});
  if (spec.needsGradBias()) {
    acc.db = "db_acc";
    plan.workspaces.push_back({"db_acc", "f32", "V"});
  }
  return acc;
}
