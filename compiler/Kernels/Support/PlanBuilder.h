//===- PlanBuilder.h - the launch plan's non-kernel parts ---------*- C++ -*-===//
//
// Kernels enter the plan through a KernelSink (from their signatures); this
// writes the rest, the same way for every schedule and backend: the op's
// buffers and options, constants, derived symbols, chunking, workspaces.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_SUPPORT_PLANBUILDER_H
#define LOSSJIT_COMPILER_KERNELS_SUPPORT_PLANBUILDER_H

#include "compiler/Kernels/Support/LaunchPlan.h"
#include "compiler/Kernels/Support/LceSpec.h"

namespace lossjit {

/// Where the chunked backward sums dW and db: in place (f32 storage) or in
/// gradient-sized f32 workspaces rounded once at the end (16-bit storage).
struct ChunkedAccumulators {
  std::string dw = "grad_w";
  std::string db = "grad_bias";
  /// true when a finish kernel must round them (with `single`: in the
  /// calls of several chunks, or of none).
  bool separate = false;
  /// With separate accumulators: the derived symbol that is 1 when one
  /// chunk holds every row (N > 0) and 0 otherwise (N = 0, several
  /// chunks), where the backend sums dW (and db) over that chunk and rounds
  /// them straight into grad_w (grad_bias), so the accumulators are empty
  /// and the finish kernel does not run (PlanBuilder::roundSingleChunk).
  /// Empty when the backend always goes through the accumulators.
  std::string single;
};

class PlanBuilder {
public:
  explicit PlanBuilder(LaunchPlan &plan) : plan(plan) {}

  /// Starts the plan of `spec`: params, options and tile text; no
  /// constants, symbols, workspaces or kernels yet.
  void begin(const LceSpec &spec, llvm::StringRef tile);
  void constant(llvm::StringRef name, int64_t value);
  void workspace(llvm::StringRef name, llvm::StringRef dtype, llvm::StringRef count);

  /// What the chunked schedules need: the budget constant WB, the chunk size
  /// C (the budget bounds only the [C,V] dZ chunk and the row factors; the
  /// dW accumulator is gradient-sized and kept outside it, or chunks would
  /// shrink to one row whenever V·D·4 exceeds the budget), the dZ
  /// workspace and, for 16-bit storage, the f32 accumulators (all of the
  /// compute type). With a `productDzType` other than the compute type
  /// (tensor-core products) dZ is stored in that type — in "dzs" next to
  /// the fused op's f32 raw logits "dz" — with
  /// its power-of-two scale in "gscale". `reserve` (a formula over WB) is
  /// taken off the budget before the chunk is sized. With `balanceRows`
  /// the chunks are evened out: as many as the budget's largest chunk CMAX
  /// needs, each a multiple of `balanceRows` rows where CMAX allows.
  /// `rowBytes` (a formula over V; empty for none) is what each chunk row
  /// takes besides its V dZ elements, e.g. the fused op's per-tile row
  /// statistics; the caller declares those workspaces.
  ChunkedAccumulators chunked(const LceSpec &spec, llvm::StringRef productDzType = "",
                              llvm::StringRef reserve = "", int64_t balanceRows = 0,
                              llvm::StringRef rowBytes = "");

  /// For a backend that rounds a single chunk's dW straight into storage:
  /// adds the derived symbol `acc.single` (after C) and sizes the separate
  /// accumulators for the calls that need them (N = 0 or several chunks),
  /// so a call whose rows fit one chunk allocates no V × D f32 workspace.
  /// Nothing without separate accumulators.
  void roundSingleChunk(ChunkedAccumulators &acc);

  /// Chunks over the vocabulary: the budget constant WB, the chunk width
  /// C = `columnsFormula` (over N, V, D, WB) and the dZ workspace [N × C]
  /// of the compute type, or of `productDzType` (tensor-core products) with
  /// its power-of-two scale in "gscale". `balanced`: the formula gives the
  /// widest chunk CMAX, and C evens the chunks out (as many as CMAX needs,
  /// widths rounded up to 64 columns within CMAX), so that a grid sized for
  /// a full chunk does not run mostly empty tiles in a short last one (but
  /// where CMAX is 64 or less: V = 193 in chunks of 64 leaves one of 1).
  void vocabChunks(const LceSpec &spec, llvm::StringRef columnsFormula,
                   llvm::StringRef productDzType = "", bool balanced = false);

private:
  LaunchPlan &plan;
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SUPPORT_PLANBUILDER_H
