//===- PlanBuilder.cpp ----------------------------------------------------===//

#include "compiler/Kernels/Support/PlanBuilder.h"

using namespace lossjit;

void PlanBuilder::begin(const LceSpec &spec, llvm::StringRef tile) {
  // The op family a bundle serves (runtime lookups match on it).
  plan.op = spec.isVocabReduce() ? "vocab_reduce" : "linear_cross_entropy";
  plan.dims = spec.dims();
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

ChunkedAccumulators PlanBuilder::chunked(const LceSpec &spec, llvm::StringRef productDzType,
                                         llvm::StringRef reserve, int64_t balanceRows,
                                         llvm::StringRef rowBytes) {
  constant("WB", spec.workspaceBytes);
  // Bytes per dZ element of a chunk: compute-type dZ; or 16-bit dZ for
  // tensor-core products, next to the fused op's f32 raw logits.
  const std::string ct = spec.computeName();
  const int64_t computeBytes = spec.computeBytes();
  const bool dz16 = !productDzType.empty() && productDzType != ct;
  const int64_t perElement = !dz16 ? computeBytes : spec.fusedForward ? 6 : 2;
  std::string rows = "WB-N*" + std::to_string(computeBytes);
  std::string left = reserve.empty() ? rows : rows + "-" + reserve.str();
  std::string perRow = "V*" + std::to_string(perElement);
  if (!rowBytes.empty())
    perRow += "+" + rowBytes.str();
  const std::string largest = "max(1,min(N,(" + left + ")/(" + perRow + ")))";
  plan.derived = {{"C", largest}};
  if (balanceRows) {
    // As many chunks as CMAX needs (never more: each row chunk reads and
    // writes the whole f32 dW accumulator), each about N / that many rows
    // rounded up to whole tiles where CMAX allows (N = 0: one row, never run).
    const std::string m = std::to_string(balanceRows);
    plan.derived = {
        {"CMAX", largest},
        {"C", "max(1,min(CMAX,cdiv(cdiv(N,max(1,cdiv(N,CMAX)))," + m + ")*" + m + "))"}};
  }
  plan.chunkSymbol = "C";
  if (!dz16 || spec.fusedForward)
    workspace("dz", ct, "C*V");
  if (dz16) {
    workspace(spec.fusedForward ? "dzs" : "dz", productDzType, "C*V");
    workspace("gscale", "f32", "1");
  }
  ChunkedAccumulators acc;
  if (!spec.needsGradW || spec.storesCompute())
    return acc;
  acc.separate = true;
  acc.dw = "dw_acc";
  workspace("dw_acc", ct, "V*D");
  if (spec.needsGradBias()) {
    acc.db = "db_acc";
    workspace("db_acc", ct, "V");
  }
  return acc;
}

void PlanBuilder::roundSingleChunk(ChunkedAccumulators &acc) {
  if (!acc.separate)
    return;
  // 1 for N > 0 and C >= N; 0 for N = 0 (no chunk runs: the zero and
  // finish kernels make the gradients) and for several chunks.
  acc.single = "SINGLE";
  plan.derived.push_back({acc.single, "min(N,1)-min(1,max(0,N-C))"});
  for (PlanWorkspace &w : plan.workspaces)
    if (w.name == acc.dw || w.name == acc.db)
      w.count = "(" + w.count + ")*(1-" + acc.single + ")";
}

void PlanBuilder::vocabChunks(const LceSpec &spec, llvm::StringRef columnsFormula,
                              llvm::StringRef productDzType, bool balanced) {
  constant("WB", spec.workspaceBytes);
  plan.derived = {{"C", columnsFormula.str()}};
  if (balanced)
    plan.derived = {{"CMAX", columnsFormula.str()},
                    {"C", "min(CMAX,cdiv(cdiv(V,cdiv(V,CMAX)),64)*64)"}};
  plan.chunkSymbol = "C";
  plan.chunkDim = "V";
  const bool dz16 = !productDzType.empty() && productDzType != spec.computeName();
  workspace("dz", dz16 ? productDzType : llvm::StringRef(spec.computeName()), "N*C");
  if (dz16)
    workspace("gscale", "f32", "1");
}
