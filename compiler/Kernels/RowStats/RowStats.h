//===- RowStats.h - what a vocabulary sweep carries per row -----*- C++ -*-===//
//
// A sweep over the vocabulary folds every logit of a row into a few f32
// values (the log-sum-exp's running max and scaled sum, and whatever other
// statistic a loss needs) and merges partial states — per thread, across a
// block's threads, across vocabulary splits — in an order the kernel fixes,
// so the bits never depend on scheduling. RowStats owns that state and the
// order; the statistic kinds (StatKinds.cpp) own the math. Adding a
// statistic is one entry there.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_ROWSTATS_ROWSTATS_H
#define LOSSJIT_COMPILER_KERNELS_ROWSTATS_ROWSTATS_H

#include "compiler/Kernels/Support/KernelEmitter.h"
#include "dialects/Loss/LossDialect.h"

#include <functional>

#include <string>
#include <vector>

namespace lossjit {

struct RowSharing; // compiler/Kernels/Matmul/TileMatmul.h
struct LceSpec;     // compiler/Kernels/Support/LceSpec.h

/// The states a sweep can carry (fused_loss_families: each has an online
/// push, an associative merge applied in a fixed order, a finish). A kind
/// provides one or more of the statistics an op asks for (loss::Statistic).
enum class StatKind {
  /// lse = max + log Σ exp(z − max): fields (max, sum).
  LogSumExp,
  /// lse and the entropy −Σ p log p: fields (max, sum, dsum) with
  /// dsum = Σ exp(z − max)·(z − max).
  SoftmaxEntropy,
  /// Σ_j c_j z_j with the column's class weight c_j (1 without): (zsum).
  LogitSum,
  /// Σ_j c_j t_j z_j with the row's target t_j (class probabilities): (tsum).
  TargetLogitSum,
  /// The teacher's lse, and its lse and entropy (the student's kinds on the
  /// teacher's logits u).
  TeacherLogSumExp,
  TeacherSoftmaxEntropy,
  /// −Σ softmax(a) log softmax(b) with (a, b) = (u, z): cross_entropy, and
  /// (z, u): reverse_cross_entropy. Fields (max_a, sum_a, max_b, sum_b, d)
  /// with d = Σ exp(a − max_a)·(b − max_b): the value is log sum_b − d/sum_a.
  CrossEntropyForward,
  CrossEntropyReverse,
  /// The dependent sums of the mixture M = β·q + (1 − β)·p, which read the
  /// finished lse of both streams (LogitInputs::lse, teacherLse) and so
  /// take a second sweep: jsd = Σ β q log(q/M) + (1 − β) p log(p/M),
  /// mixture_kl = Σ p log(p/M) and mixture_p2 = Σ p²/M. Fields (jsum, ksum,
  /// ssum).
  MixtureSums,
};

/// What a statistic may read of one logit besides its value: the column's
/// class weight, the row's target at that column and the teacher's logit
/// there (null when absent); in a dependent sweep also the row's finished
/// lse of both streams and the mixture weight β.
struct LogitInputs {
  mlir::Value weight;
  mlir::Value target;
  mlir::Value teacher;
  mlir::Value lse, teacherLse, beta;
};

/// One carried f32 value: its name (partial workspaces are "part_<name>")
/// and its value for an empty row.
struct StatField {
  const char *name;
  double identity;
};

/// The math of one statistic kind over its fields.
class StatKindRules {
public:
  virtual ~StatKindRules() = default;
  virtual llvm::ArrayRef<StatField> fields() const = 0;
  /// Whether finish() gives the statistic `what`.
  virtual bool provides(loss::Statistic what) const = 0;
  /// Folds logit z (with its class weight and target, LogitInputs) into
  /// the state.
  virtual llvm::SmallVector<mlir::Value> push(KernelEmitter &e, mlir::ValueRange state,
                                              mlir::Value z, const LogitInputs &in) const = 0;
  /// Folds the logits `z` (those whose `valid` bit is set; `inputs` per
  /// logit, or empty for none) into the state, in order. A kind may fold
  /// them as one partial state first (fewer exponentials on a register tile).
  virtual llvm::SmallVector<mlir::Value> pushMany(KernelEmitter &e, mlir::ValueRange state,
                                                  llvm::ArrayRef<mlir::Value> z,
                                                  llvm::ArrayRef<mlir::Value> valid,
                                                  llvm::ArrayRef<LogitInputs> inputs) const = 0;
  /// For a kind whose pushMany() is foldMasked() of its stream (the
  /// logits, or the teacher's) with the invalid values −inf: that stream's
  /// value for logit z, an existing value (it builds no operation, so a
  /// caller may ask only to decide). Null for the kinds that mask their
  /// updates instead, and for a teacher's kind without its logit in `in`.
  virtual mlir::Value maskableStream(mlir::Value z, const LogitInputs &in) const;
  /// With maskableStream(): the state after the stream values `masked`, the
  /// invalid ones already −inf (pushMany() after its masks).
  virtual llvm::SmallVector<mlir::Value> foldMasked(KernelEmitter &e, mlir::ValueRange state,
                                                    llvm::ArrayRef<mlir::Value> masked) const;
  /// Whether pushGroup() exists for this kind.
  virtual bool pushesGroups() const { return false; }
  /// Folds a group of logits, one vector<RowStats::kGroupLanes> `z` of the
  /// compute type (lanes past the row's end already −inf), into the scalar
  /// state: the group's max, one exponential per lane and a fixed tree over
  /// the lanes (laneSum), then one rescale of the state. The vector math
  /// is the scalar push's per lane, so no bit depends on the host's vector
  /// width. Only for kinds that read nothing but the logit.
  virtual llvm::SmallVector<mlir::Value> pushGroup(KernelEmitter &e, mlir::ValueRange state,
                                                   mlir::Value z) const;
  /// a then b (the order is part of the bits).
  virtual llvm::SmallVector<mlir::Value> merge(KernelEmitter &e, mlir::ValueRange a,
                                               mlir::ValueRange b) const = 0;
  /// The statistic `what` (one it provides).
  virtual mlir::Value finish(KernelEmitter &e, mlir::ValueRange state,
                             loss::Statistic what) const = 0;
  /// The fields of the wide state: how a row is carried across vocabulary
  /// tiles (a sum with its compensation), so that a long row's error is
  /// bounded by one tile's length, not by V.
  virtual llvm::ArrayRef<StatField> wideFields() const = 0;
  /// A wide state then a partial one (a tile's plain state).
  virtual llvm::SmallVector<mlir::Value> mergeWide(KernelEmitter &e, mlir::ValueRange wide,
                                                   mlir::ValueRange part) const = 0;
  /// The statistic `what` from a wide state.
  virtual mlir::Value finishWide(KernelEmitter &e, mlir::ValueRange wide,
                                 loss::Statistic what) const = 0;
};

/// The registered rules of `kind` (StatKinds.cpp).
const StatKindRules &statKindRules(StatKind kind);

/// The carried state of a list of statistics, for one or several rows.
/// Multi-row states are the rows' values concatenated (row-major).
class RowStats {
public:
  explicit RowStats(llvm::ArrayRef<StatKind> kinds);
  /// What the sweep of `spec` carries: the cross-entropy ops LogSumExp; a
  /// vocabulary reduction the softmax (with its entropy when asked for) and
  /// the logit sum when asked for.
  static RowStats forSpec(const LceSpec &spec);
  /// What the dependent second sweep of `spec` carries (MixtureSums), or
  /// nothing when the op yields no dependent sum (then no second sweep).
  static RowStats dependentForSpec(const LceSpec &spec);
  /// Whether statistic `what` comes from the dependent sweep.
  static bool isDependent(loss::Statistic what);
  bool empty() const { return kinds.empty(); }
  /// The logits of one pushGroup(): a constant of the kernels, not of the
  /// host, so that the order of a group's sum is the same on every CPU.
  static constexpr int64_t kGroupLanes = 16;
  /// Whether every carried kind folds groups of logits (pushGroup()).
  bool pushesGroups() const;

  /// Carried values per row.
  unsigned width() const { return static_cast<unsigned>(names.size()); }
  /// Values per row of the wide state (see StatKindRules::wideFields).
  unsigned wideWidth() const;
  /// The fields' names in carried order (e.g. max, sum).
  const std::vector<std::string> &fieldNames() const { return names; }

  /// The empty state of `rows` rows.
  llvm::SmallVector<mlir::Value> identity(KernelEmitter &e, unsigned rows = 1) const;
  /// Row `i` of a multi-row state.
  mlir::ValueRange row(mlir::ValueRange state, unsigned i) const;
  /// One row's state after logit z (with its class weight and target,
  /// null where the op has none).
  llvm::SmallVector<mlir::Value> push(KernelEmitter &e, mlir::ValueRange row, mlir::Value z,
                                      const LogitInputs &in = {}) const;
  /// One row's state after the logits `z` whose `valid` bit is set, in
  /// order (a fragment row of a tile product); `inputs` per logit or empty.
  /// One logit is push().
  llvm::SmallVector<mlir::Value> pushMany(KernelEmitter &e, mlir::ValueRange row,
                                          llvm::ArrayRef<mlir::Value> z,
                                          llvm::ArrayRef<mlir::Value> valid,
                                          llvm::ArrayRef<LogitInputs> inputs = {}) const;
  /// pushMany() of several rows over the same columns (a fragment's rows,
  /// `state` their states concatenated, `inputs` per row or empty), with
  /// the same bits. With more than one column and every carried kind
  /// folding its stream masked (maskableStream()), the rows' streams are
  /// masked a column at a time, so each column's mask dies at once rather
  /// than living through every row's fold: 128×256 wgmma logits with a
  /// bias spilled 48 bytes for 64 masks kept next to 128 accumulators.
  /// Otherwise each row takes pushMany() in turn.
  llvm::SmallVector<mlir::Value>
  pushRows(KernelEmitter &e, mlir::ValueRange state,
           llvm::ArrayRef<llvm::SmallVector<mlir::Value>> z, llvm::ArrayRef<mlir::Value> valid,
           llvm::ArrayRef<llvm::SmallVector<LogitInputs>> inputs = {}) const;
  /// One row's state after a group of kGroupLanes logits (a vector; lanes
  /// past the row's end −inf), for stats that pushesGroups().
  llvm::SmallVector<mlir::Value> pushGroup(KernelEmitter &e, mlir::ValueRange row,
                                           mlir::Value z) const;
  /// One row's partial states a then b.
  llvm::SmallVector<mlir::Value> merge(KernelEmitter &e, mlir::ValueRange a,
                                       mlir::ValueRange b) const;
  /// Statistic `what` from one row's state (a carried kind provides it).
  mlir::Value finish(KernelEmitter &e, mlir::ValueRange row, loss::Statistic what) const;

  /// The empty wide state of one row, and the wide counterparts of merge
  /// and finish (see StatKindRules::mergeWide).
  llvm::SmallVector<mlir::Value> identityWide(KernelEmitter &e) const;
  llvm::SmallVector<mlir::Value> mergeWide(KernelEmitter &e, mlir::ValueRange wide,
                                           mlir::ValueRange part) const;
  mlir::Value finishWide(KernelEmitter &e, mlir::ValueRange wide, loss::Statistic what) const;

  /// One row's state from / into one buffer per field at index `at`.
  llvm::SmallVector<mlir::Value> load(KernelEmitter &e, llvm::ArrayRef<mlir::Value> buffers,
                                      mlir::Value at) const;
  void store(KernelEmitter &e, mlir::ValueRange row, llvm::ArrayRef<mlir::Value> buffers,
             mlir::Value at) const;

  /// GPU: merges the per-thread states of `rows` rows across a block of
  /// `threads` threads in a fixed tree order, through one shared buffer per
  /// field (rows × threads elements: row i of thread t at i·threads + t).
  /// Afterwards row i's block state is at index i·threads.
  void mergeAcrossBlock(KernelEmitter &e, mlir::Value tid, int64_t threads,
                        llvm::ArrayRef<mlir::Value> shared, mlir::ValueRange state,
                        unsigned rows) const;

  /// GPU: merges the per-thread states of a tile's fragment rows (`state`:
  /// one row state per fragment row, in fragment order) across the block as
  /// `sharing` says (TileMatmul.h), through one shared buffer per field of
  /// TileMatmul::rowMergeSlots(rows) elements, then calls `emit` in thread
  /// t < rows with tile row t's block state. Every order is fixed.
  void mergeFragmentRows(KernelEmitter &e, const RowSharing &sharing,
                         llvm::ArrayRef<mlir::Value> shared, mlir::ValueRange state,
                         int64_t rows,
                         const std::function<void(KernelEmitter &, mlir::Value tileRow,
                                                  mlir::ValueRange merged)> &emit) const;

  /// GPU, for a fragment whose rows a warp's lanes share (not
  /// `sharing.everyThread`): the fragment rows' states (`state`, in
  /// fragment order) merged across the lanes that hold the same rows, by
  /// xor shuffles in `sharing.laneXor` order, each pair taking the lower
  /// lane's state first; every such lane gets the same bits. Needs no
  /// shared memory or barrier (the whole warp must run it).
  llvm::SmallVector<mlir::Value> mergeSharingLanes(KernelEmitter &e, const RowSharing &sharing,
                                                   mlir::ValueRange state) const;

private:
  std::vector<StatKind> kinds;
  std::vector<std::string> names;
  /// First field of each kind.
  std::vector<unsigned> offsets;
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_ROWSTATS_ROWSTATS_H
