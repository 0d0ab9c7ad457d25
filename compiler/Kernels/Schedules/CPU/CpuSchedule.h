//===- CpuSchedule.h - shared state of the host schedules ------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_SCHEDULES_CPU_CPUSCHEDULE_H
#define LOSSJIT_COMPILER_KERNELS_SCHEDULES_CPU_CPUSCHEDULE_H

#include "compiler/Kernels/Matmul/CpuVector.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowStats.h"
#include "compiler/Kernels/Support/KernelSignature.h"
#include "compiler/Kernels/Support/LceSpec.h"
#include "compiler/Kernels/Support/PlanBuilder.h"

#include <optional>

namespace lossjit {

/// What every host kernel builder of one variant reads. ("f32" in these
/// comments is the compute type, f64 for f64 storage: LceSpec::compute.)
struct CpuSchedule {
  CpuKernelSink &sink;
  const LceSpec &spec;
  const CpuTileConfig &tile;
  CpuVector matmul;
  /// The statistics the vocabulary sweep carries.
  RowStats stats = RowStats::forSpec(spec);

  mlir::Type storage() const { return spec.storage; }
  mlir::Type compute() const { return spec.compute; }
  /// `floats` f32 elements' worth of compute elements: the stack scratch
  /// and cache blocks are sized in bytes, so f64 gets half the elements.
  int64_t elements(int64_t floats) const { return spec.compute.isF64() ? floats / 2 : floats; }
  mlir::Type index() const { return sink.builder().getIndexType(); }
  mlir::MemRefType flat(mlir::Type t) const { return KernelSink::flat(t); }
  /// The i1 constant true.
  mlir::Value always(KernelEmitter &e) const;

  /// x, w, [bias] and the per-row adjoint inputs (declareAdjointInputs):
  /// what recomputing dZ reads.
  void dzInputs(KernelSignature &sig) const;
  /// The raw logits x·w + b of `tile`'s rows at its columns (a kernel with
  /// dzInputs' arguments and D).
  Fragment logits(KernelEmitter &e, const KernelArgs &a, const BlockTile &tile) const;
  /// The packed W tile of the logit kernels: room for one vocabulary tile
  /// of W in f32 (vocabTile·D on the stack) and whether it is used: up to
  /// kMaxPackFloats; past that every logit is formed unpacked (the same
  /// bits, slower).
  struct LogitPack {
    mlir::Value buffer, enabled;
    /// The register tile's accumulators, spilled for the epilogue.
    mlir::Value tile;
    /// 16-bit storage: the panel's rows of x widened to f32 once
    /// (panelRows·D on the stack), so the micro-kernel broadcasts f32 from
    /// memory instead of widening x per broadcast (a vector-port op next to
    /// every fma pair). Null for f32 storage, which reads x in place.
    mlir::Value rows;
    /// Rows per panel: blockRows·panelBlocks, and for 16-bit storage at
    /// most what kWideRowFloats holds (at least one row).
    mlir::Value panelRows;
  };
  static constexpr int64_t kMaxPackFloats = 512 * 1024;
  static constexpr int64_t kWideRowFloats = 256 * 1024;
  LogitPack logitPack(KernelEmitter &e, mlir::Value d) const;
  /// The kernel arguments of one logit product: the student's x·wᵀ + b over
  /// D, or the teacher's x'·w'ᵀ + b' over its own hidden size T.
  struct LogitStream {
    const char *x, *w, *bias, *dim;
  };
  static constexpr LogitStream kStudent{"x", "w", "bias", "D"};
  static constexpr LogitStream kTeacher{"teacher_x", "teacher_w", "teacher_bias", "T"};
  /// Packs W's columns [vt, vtEnd) (a kernel with "w" and D, or the
  /// stream's) for forLogitTiles().
  void packLogits(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack, mlir::Value vt,
                  mlir::Value vtEnd, const LogitStream &stream = kStudent) const;
  /// Widens x's rows [pb, pe) (a panel) into pack.rows; nothing for f32.
  void widenRows(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack, mlir::Value pb,
                 mlir::Value pe) const;
  /// The raw logits x·w + b of rows [rb, rb + blockRows) (clamped below
  /// rowLimit) of the panel that starts at row pb, at the packed columns
  /// [vt, vtEnd): register tiles of blockRows × blockCols·vectorWidth
  /// columns, then of vectorWidth, then single columns, in ascending
  /// order; body(e, raw, iters) → iters, once per column (a one-column
  /// fragment: the epilogue is a loop over the tile's columns, not
  /// unrolled over them). Every logit is summed in ascending k with one
  /// fma per term, whatever tile it falls in.
  llvm::SmallVector<mlir::Value>
  forLogitTiles(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack, mlir::Value pb,
                mlir::Value rb, mlir::Value rowLimit, mlir::Value vt, mlir::Value vtEnd,
                mlir::ValueRange iters,
                const std::function<llvm::SmallVector<mlir::Value>(KernelEmitter &, Fragment &,
                                                                   mlir::ValueRange)> &body,
                const LogitStream &stream = kStudent) const;

  /// The rows of x a logit product reads: in place, or the panel's widened
  /// copy (pack.rows).
  MatrixOperand logitRows(const KernelArgs &a, const LogitPack &pack, mlir::Value pb,
                          const LogitStream &stream) const;
  /// The student's raw products x·wᵀ (no bias) of rows [rb, rb +
  /// blockRows) (clamped below rowLimit) of the panel at pb, at the packed
  /// columns [vt, vtEnd), into `values` (row i, column c at i·vocabTile +
  /// (c − vt); logitGroups() sizes it): the register tiles store their
  /// accumulators there directly. The same bits as forLogitTiles().
  void formLogitTile(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack, mlir::Value pb,
                     mlir::Value rb, mlir::Value rowLimit, mlir::Value vt, mlir::Value vtEnd,
                     mlir::Value values) const;
  /// The buffers of the grouped epilogue: the tile's products (blockRows ×
  /// vocabTile, for formLogitTile()) and, with a bias, the tile's bias
  /// widened (vocabTile); both one group of lanes longer, zeroed, so that
  /// a group that crosses the tile's end reads numbers (then masks them).
  struct LogitGroups {
    mlir::Value values, bias;
  };
  LogitGroups logitGroups(KernelEmitter &e, const KernelArgs &a) const;
  /// Widens bias[vt, vtEnd) into groups.bias (nothing without a bias): one
  /// plain vector load per group afterwards, with no 16-bit constant or
  /// masked load a baseline target would need a runtime routine for.
  void formGroupBias(KernelEmitter &e, const KernelArgs &a, const LogitGroups &groups,
                     mlir::Value vt, mlir::Value vtEnd) const;
  /// Columns [vt, vtEnd) of a logit tile in groups of RowStats::kGroupLanes
  /// from vt: body(e, g, valid, full, raw, iters) → iters with the group's
  /// offset g, its lane mask (`full`: every lane inside), and raw(i) = row
  /// i's products there plus the bias (groups.values and groups.bias).
  using TileGroupBody = std::function<llvm::SmallVector<mlir::Value>(
      KernelEmitter &, mlir::Value g, mlir::Value valid, mlir::Value full,
      const std::function<mlir::Value(int64_t)> &raw, mlir::ValueRange iters)>;
  llvm::SmallVector<mlir::Value> forTileGroups(KernelEmitter &e, const LogitGroups &groups,
                                               mlir::Value vt, mlir::Value vtEnd,
                                               mlir::ValueRange iters,
                                               const TileGroupBody &body) const;
  /// The epilogue of a logit tile when the row statistics push groups
  /// (RowStats::pushesGroups()): each row of groups.values
  /// (formLogitTile()) folds columns [vt, vtEnd) in groups of
  /// RowStats::kGroupLanes from vt, with the bias and the logit map applied
  /// lane-wise and the lanes past vtEnd masked to −inf. `state`: the rows'
  /// states (RowStats::row order); returns them after the tile.
  llvm::SmallVector<mlir::Value> pushLogitGroups(KernelEmitter &e, const RowStats &stats,
                                                 const LogitGroups &groups, mlir::Value vt,
                                                 mlir::Value vtEnd, mlir::ValueRange state) const;

  /// The rows of a logit tile in groups.values (formLogitTile(); `rows`
  /// the tile's row fragment) with the bias added, stored group by group at
  /// out[rowStart(e, row) + (c − vt)] for c ∈ [vt, vtEnd): the raw logits,
  /// or with `grad` the cross-entropy gradient (groupLogitGrad, the row's
  /// adjoints from loadRowAdjoint).
  void storeLogitGroups(KernelEmitter &e, const KernelArgs &a, const LogitGroups &groups,
                        const Fragment &rows, mlir::Value vt, mlir::Value vtEnd, mlir::Value out,
                        const std::function<mlir::Value(KernelEmitter &, mlir::Value)> &rowStart,
                        bool grad) const;
  /// Columns [begin, end) of one row held contiguously in a buffer of the
  /// compute type (buffer[base + c]), in groups of RowStats::kGroupLanes
  /// from `begin`: body(e, c, values, valid, full) → iters with the group's
  /// vector<kGroupLanes> (lanes past `end` are 0 and clear in `valid`;
  /// `full`: no such lane). Only a partial group loads masked.
  using RowGroupBody = std::function<llvm::SmallVector<mlir::Value>(
      KernelEmitter &, mlir::Value c, mlir::Value values, mlir::Value valid, mlir::Value full,
      mlir::ValueRange iters)>;
  llvm::SmallVector<mlir::Value> forRowGroups(KernelEmitter &e, mlir::Value buffer,
                                              mlir::Value base, mlir::Value begin,
                                              mlir::Value end, mlir::ValueRange iters,
                                              const RowGroupBody &body) const;
  /// Stores a group of forRowGroups() at buffer[at]: its valid lanes only
  /// when it is not full.
  void storeRowGroup(KernelEmitter &e, mlir::Value values, mlir::Value buffer, mlir::Value at,
                     mlir::Value valid, mlir::Value full) const;
  /// The cross-entropy gradient of a group of raw logits at columns c, c +
  /// 1, ... (emitLogitGrad lane by lane: the scalar form's bits) for a row
  /// with lse, adjoint g and label.
  mlir::Value groupLogitGrad(KernelEmitter &e, mlir::Value raw, mlir::Value c, mlir::Value lse,
                             mlir::Value g, mlir::Value label,
                             mlir::Value lseGrad = mlir::Value()) const;

  /// The teacher's logits next to the student's: the same packed product
  /// (every u summed in ascending k with one fma per term, the GPU kernels'
  /// order) formed per row block and vocabulary tile into `values`
  /// (blockRows × vocabTile: row i, column c at i·vocabTile + (c − vt)),
  /// where the student's sweep reads them. x' is read in place (no widened
  /// panel); W' is packed per tile up to kMaxTeacherPackFloats.
  struct TeacherTile {
    LogitPack pack;
    mlir::Value values;
  };
  static constexpr int64_t kMaxTeacherPackFloats = 128 * 1024;
  /// A kernel with the teacher's arguments (declareTeacherInputs).
  TeacherTile teacherTile(KernelEmitter &e, const KernelArgs &a) const;
  /// Packs W' for the vocabulary tile [vt, vtEnd).
  void packTeacher(KernelEmitter &e, const KernelArgs &a, const TeacherTile &t, mlir::Value vt,
                   mlir::Value vtEnd) const;
  /// Forms u of rows [rb, rb + blockRows) (clamped below rowLimit) at
  /// [vt, vtEnd) into t.values.
  void formTeacherTile(KernelEmitter &e, const KernelArgs &a, const TeacherTile &t,
                       mlir::Value pb, mlir::Value rb, mlir::Value rowLimit, mlir::Value vt,
                       mlir::Value vtEnd) const;
  /// u of the block's row i at column `col` of the tile that starts at vt.
  mlir::Value teacherLogitAt(KernelEmitter &e, const TeacherTile &t, int64_t i, mlir::Value col,
                             mlir::Value vt) const;

  /// The label adjoints of a row block at one vocabulary tile, for labels
  /// [N, K] (a top-K gather): values[i·vocabTile + (c − vt)] is the sum, in
  /// label order, of the adjoints of row i's labels equal to column c (0
  /// where none is). dZ then adds one value per logit instead of comparing
  /// every logit with the row's K labels. (A column repeated among a row's
  /// labels gets its adjoints summed first, then added: with K per-logit
  /// compares they were added to dZ one by one.)
  struct LabelTile {
    mlir::Value values;
  };
  /// A tile for a reduction's gradient with K > 1 labels per row, else none.
  std::optional<LabelTile> labelTile(KernelEmitter &e) const;
  /// Forms the tile of rows [rb, rb + blockRows) (clamped below rowLimit,
  /// as the logits' fragments are) at [vt, vtEnd).
  void formLabelTile(KernelEmitter &e, const KernelArgs &a, const LabelTile &t, mlir::Value rb,
                     mlir::Value rowLimit, mlir::Value vt, mlir::Value vtEnd) const;

  /// The host's dot product for the teacher's logits where no
  /// TeacherTile is formed (LogitMaps.h; the recompute kernels): 4
  /// accumulators of 16 lanes over k in steps of 64, summed in a fixed tree,
  /// then the rest of k in order. The lanes are fixed (not the target's
  /// vector width), so every target CPU gives the same bits.
  DotProduct teacherDot() const;
  /// dZ of the fragment's rows and columns from their raw logits
  /// (emitRawGrad: the statistics' adjoints times ∂z/∂raw), row-major.
  /// (`teacher`: the teacher's logits of the fragment's row block at the
  /// vocabulary tile from vt, formed by formTeacherTile; null: each u is a
  /// teacherDot.)
  /// (`labels`: the row block's label adjoints at that tile, formed by
  /// formLabelTile; null: each logit is compared with the row's labels.)
  llvm::SmallVector<mlir::Value> rowGrads(KernelEmitter &e, const KernelArgs &a,
                                          const Fragment &raw,
                                          const TeacherTile *teacher = nullptr,
                                          mlir::Value vt = {},
                                          const LabelTile *labels = nullptr) const;
  /// The packed products' shape (dX and dW): the config's register tile
  /// (blockRows × blockCols·vectorWidth) and the cache blocks around it.
  CpuVector::PackedShape packedShape() const;
  /// The part of the workspace budget WB the host kernels' stack scratch
  /// takes (packed operand blocks, widened x panels: 1–2.5 MiB per
  /// thread): WB/16, at most 4 MiB — two threads' worth at the default
  /// 64 MiB. A formula over WB for the chunk sizes.
  static constexpr const char *kScratchReserve = "min(4194304,WB/16)";
  /// Rows per panel whose f32 rows of d elements stay within `budgetFloats`
  /// (at least one register block, at most `most`), a multiple of the
  /// register block.
  mlir::Value panelRows(KernelEmitter &e, mlir::Value d, int64_t most,
                        int64_t budgetFloats = 64 * 1024) const;
};

/// Scratch of `count` f32 on the stack of the calling thread.
mlir::Value stackReal(KernelEmitter &e, mlir::Value count);

/// lce_bwd_scale: counted rows and g_r of every row into "grow".
void buildCpuScaleKernel(CpuSchedule &s);
/// lce_rows: the forward's statistics, lse and row losses of rows
/// [row_begin, row_end) (rows-parallel).
void buildCpuRowsKernel(CpuSchedule &s);
/// The vocabulary-chunked backward (and, with a forward first, the fused
/// forward+backward) and its plan; `plan` has begun.
llvm::Error buildCpuVocabChunkedBackward(CpuSchedule &s, PlanBuilder &plan);

/// lce_rows (+ lce_reduce), and the forward plan.
void buildCpuForward(CpuSchedule &s);
/// lce_reduce(labels, loss_rows, loss, N): the GPU reduction's lanes and
/// tree, run sequentially (the forward and the fused op share it).
void buildCpuReduceKernel(CpuSchedule &s);
/// The backward (chunked or recompute) or fused forward+backward, and plan.
llvm::Error buildCpuBackward(CpuSchedule &s);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SCHEDULES_CPU_CPUSCHEDULE_H
