//===- PlanBuilder.cpp ----------------------------------------------------===//

#include "compiler/Kernels/Support/PlanBuilder.h"

using namespace lossjit;

void PlanBuilder::begin(const LceSpec &spec, llvm::StringRef tile) {
  plan.params = spec.planParams();
  plan.options = spec.planOptions();
  plan.tile = tile.str();
  plan.constants.clear();
  plan.derived.clear();
  plan.chunkSymbol.clear();
  plan.workspaces.clear();
  plan.kernels.clear();
}

void PlanBuilder::constant(llvm::StringRef name, int64_t value) {
  plan.constants[name.str()] = value;
}

void PlanBuilder::workspace(llvm::StringRef name, llvm::StringRef dtype, llvm::StringRef count) {
  plan.workspaces.push_back({name.str(), dtype.str(), count.str()});
}

ChunkedAccumulators PlanBuilder::chunked(const LceSpec &spec) {
  constant("WB", spec.workspaceBytes);
  plan.derived = {{"C", "max(1,min(N,(WB-N*4)/(V*4)))"}};
  plan.chunkSymbol = "C";
  workspace("dz", "f32", "C*V");
  ChunkedAccumulators acc;
  if (!spec.needsGradW || spec.storesF32())
    return acc;
  acc.separate = true;
  acc.dw = "dw_acc";
  workspace("dw_acc", "f32", "V*D");
  if (spec.needsGradBias()) {
    acc.db = "db_acc";
    workspace("db_acc", "f32", "V");
  }
  return acc;
}

void PlanBuilder::vocabChunks(llvm::StringRef columnsFormula, int64_t workspaceBytes) {
  constant("WB", workspaceBytes);
  plan.derived = {{"C", columnsFormula.str()}};
  plan.chunkSymbol = "C";
  plan.chunkDim = "V";
  workspace("dz", "f32", "N*C");
}
