//===- ChunkedBackward.cpp ------------------------------------------------===//

#include "compiler/Kernels/Schedules/ChunkedBackward.h"
#include "compiler/Kernels/RowStats/RowStats.h"

using namespace lossjit;

void lossjit::buildChunkedBackward(ChunkedBackwardSteps &steps, PlanBuilder &plan,
                                   const LceSpec &spec) {
  // Loss, lse and the gradients of grad_loss = 1 from one pass over the
  // logits in the fused op: per chunk the raw logits land in the dZ
  // workspace once, give lse and the row losses, become dZ in place and are
  // multiplied out (6·N·D·V in all, against 2 + 6 for a forward then a
  // backward).
  // The fused op's per-tile row statistics, where the backend folds them
  // as it stores the raw logits: lse then merges a few states a row rather
  // than reading the V raw logits again (2.1 GB at N=4096, V=128256).
  const std::string tileStates = spec.fusedForward ? steps.fusedTileStates() : "";
  const RowStats stats = RowStats::forSpec(spec);
  std::string rowBytes;
  if (!tileStates.empty())
    rowBytes = "(" + tileStates + ")*" + std::to_string(stats.width() * spec.computeBytes());
  ChunkedAccumulators acc = plan.chunked(spec, steps.productDzType(), steps.budgetReserve(),
                                         steps.balancedChunkRows(), rowBytes);
  if (!tileStates.empty())
    for (const std::string &field : stats.fieldNames())
      plan.workspace("tile_" + field, spec.computeName(), "C*(" + tileStates + ")");
  // A call whose rows fit one chunk rounds its dW straight into storage
  // where the backend can: no V × D f32 accumulator (2 GiB at a Llama-3
  // head) and no pass that rounds it.
  if (steps.roundsSingleChunk())
    plan.roundSingleChunk(acc);
  if (spec.fusedForward)
    plan.workspace("loss_rows", spec.computeName(), "N");
  // The cross-entropy ops form g_r from grad_loss; a reduction's adjoints
  // are inputs.
  if (!spec.isVocabReduce())
    steps.scale();
  // Per-chunk kernels run once per chunk of rows, so with N = 0 not at all:
  // the sums must read zero without a first chunk to start them (issue 16:
  // f32 grad_w, which lce_bwd_dw writes directly, was left as allocated).
  // The GPU's first chunk starts them itself, so its zero() works only for
  // N = 0.
  if (spec.needsGradW)
    steps.zero(acc);
  steps.dz(/*storeRaw=*/spec.fusedForward);
  if (spec.fusedForward) {
    steps.fusedRows();
    steps.fusedDz();
  }
  if (spec.needsGradX)
    steps.dx();
  if (spec.needsGradW) {
    steps.dw(acc);
    if (!acc.single.empty())
      steps.dwSingle(acc);
    if (acc.separate)
      steps.finish();
  }
  if (spec.fusedForward)
    steps.reduce();
}
