//===- ChunkedBackward.h - the chunked schedule's kernel order --*- C++ -*-===//
//
// The chunked backward and the fused forward+backward launch the same kind
// of kernels in the same order on both backends; each backend implements
// the steps, this writes the order (and the plan entries that go with it)
// once.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_SCHEDULES_CHUNKEDBACKWARD_H
#define LOSSJIT_COMPILER_KERNELS_SCHEDULES_CHUNKEDBACKWARD_H

#include "compiler/Kernels/Support/PlanBuilder.h"

#include <string>

namespace lossjit {

/// One backend's kernels of the chunked schedule.
class ChunkedBackwardSteps {
public:
  virtual ~ChunkedBackwardSteps() = default;
  /// The element type (a storage type name) the gradient products read dZ
  /// in: empty for the compute type, or f16/bf16 for tensor-core products.
  virtual std::string productDzType() const { return ""; }
  /// Bytes of the budget (a formula over WB) set aside for what is not a
  /// workspace, e.g. the host threads' packing scratch; empty for none.
  virtual std::string budgetReserve() const { return ""; }
  /// The rows a chunk is a multiple of when the chunks are evened out (the
  /// logit and gradient tiles' rows: a GPU grid sized for C rows runs every
  /// chunk, so a short last chunk, or a chunk that ends inside a tile, idles
  /// row blocks); 0 keeps the largest chunks the budget allows.
  virtual int64_t balancedChunkRows() const { return 0; }
  /// The fused op: where its raw-logits kernel (dz(true)) also folds each
  /// tile's row statistics, the partial states a chunk row gets (a formula
  /// over V), which fusedRows() merges instead of reading the row's V raw
  /// logits again; empty where fusedRows() folds the raw logits.
  virtual std::string fusedTileStates() const { return ""; }
  /// lce_bwd_scale: counted rows and g_r of every row.
  virtual void scale() = 0;
  /// Before the chunks: the dW (and db) sums of `acc` start at zero, so
  /// they hold the right value (zero) when no chunk runs at all (N = 0).
  /// A backend whose dw() starts the sums at the first chunk needs it only
  /// for N = 0.
  virtual void zero(const ChunkedAccumulators &acc) = 0;
  /// Per chunk: dZ into the [C, V] workspace, or with `storeRaw` the raw
  /// logits (lce_fused_z).
  virtual void dz(bool storeRaw) = 0;
  /// Per chunk (fused): raw logits, or with fusedTileStates() their tiles'
  /// statistics ("tile_<field>", [state, chunk row]), → lse and row losses.
  virtual void fusedRows() = 0;
  /// Per chunk (fused): raw logits → dZ (in place, or into "dzs").
  virtual void fusedDz() = 0;
  /// Per chunk: dX rows of the chunk.
  virtual void dx() = 0;
  /// Per chunk: dW (and db) accumulated into `acc`; with `acc.single`
  /// only when the rows take several chunks.
  virtual void dw(const ChunkedAccumulators &acc) = 0;
  /// Whether the backend has dwSingle(): then a call whose rows fit one
  /// chunk needs no separate accumulators.
  virtual bool roundsSingleChunk() const { return false; }
  /// Per chunk, where `acc.single` is 1 (one chunk of every row): dW (and
  /// db) of that chunk rounded straight into grad_w (grad_bias), with the
  /// bits of the accumulated path (a zeroed sum plus the chunk's, rounded).
  virtual void dwSingle(const ChunkedAccumulators &) {}
  /// After the chunks: one rounding of separate f32 accumulators (with
  /// `acc.single`, only when they were used).
  virtual void finish() = 0;
  /// Fused: the fixed-order reduction of the row losses.
  virtual void reduce() = 0;
};

/// scale; zero the dW sums; per chunk dZ (fused: raw logits, then row statistics and dZ in
/// place), dX, dW (and, for a backend that rounds a single chunk itself,
/// dwSingle); finish; (fused) reduce — with the plan's chunking and
/// workspaces. `plan` has begun and holds the "grow" workspace.
void buildChunkedBackward(ChunkedBackwardSteps &steps, PlanBuilder &plan, const LceSpec &spec);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SCHEDULES_CHUNKEDBACKWARD_H
