//===- StatKinds.cpp - the math of each row statistic ---------------------===//
//
// One class per StatKind and one row in the table at the end: that is all
// a new carried statistic needs. Which outputs (loss::Statistic) a kind
// provides is its finish().
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/RowStats.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <functional>
#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// exp(m − M), but 0 when m is −inf (so −inf − −inf never makes a NaN).
Value rescale(KernelEmitter &e, Value m, Value maxAll) {
  Value isNegInf = e.cmpF(arith::CmpFPredicate::OEQ, m, e.negInf());
  return e.select(isNegInf, e.real(0.0), e.exp(e.subF(m, maxAll)));
}

/// The logits whose `valid` bit is clear replaced by −inf (they add 0).
SmallVector<Value> maskInvalid(KernelEmitter &e, ArrayRef<Value> z, ArrayRef<Value> valid) {
  SmallVector<Value> masked;
  for (auto [value, ok] : llvm::zip_equal(z, valid))
    masked.push_back(e.select(ok, value, e.negInf()));
  return masked;
}

/// Halves of `v` combined by `op` until one lane is left (the upper half
/// into the lower one): a fixed tree, whatever vectors the host has.
Value laneTree(KernelEmitter &e, Value v, const std::function<Value(Value, Value)> &op) {
  OpBuilder &b = e.builder();
  for (int64_t n = cast<VectorType>(v.getType()).getNumElements(); n > 1; n /= 2) {
    auto half = [&](int64_t offset) {
      return vector::ExtractStridedSliceOp::create(b, e.location(), v, ArrayRef<int64_t>{offset},
                                                   ArrayRef<int64_t>{n / 2}, ArrayRef<int64_t>{1})
          .getResult();
    };
    v = op(half(0), half(n / 2));
  }
  return vector::ExtractOp::create(b, e.location(), v, ArrayRef<int64_t>{0});
}

/// The largest lane of `v` by a > b: the host's plain max instruction, not
/// IEEE maximum's expansion. A NaN lane may be passed over, but its
/// exponential is NaN, so the sum still is; the sign of a zero max moves
/// no bit (exp(±0) = 1, and lse = max + log s with log s ≥ +0).
Value laneMax(KernelEmitter &e, Value v) {
  return laneTree(e, v, [&](Value a, Value b) {
    return e.select(e.cmpF(arith::CmpFPredicate::OGT, a, b), a, b);
  });
}
/// The sum of the lanes of `v` in laneTree's order.
Value laneSum(KernelEmitter &e, Value v) {
  return laneTree(e, v, [&](Value a, Value b) { return e.addF(a, b); });
}

/// exp(z − m) per lane of the vector z, 0 where z is −inf.
Value laneRescale(KernelEmitter &e, Value z, Value m) {
  KernelEmitter ve = e.lanes(cast<VectorType>(z.getType()).getNumElements());
  Value mv = vector::BroadcastOp::create(e.builder(), e.location(), z.getType(), m);
  Value isNegInf = ve.cmpF(arith::CmpFPredicate::OEQ, z, ve.negInf());
  return ve.select(isNegInf, ve.real(0.0), ve.exp(ve.subF(z, mv)));
}

Value maxOf(KernelEmitter &e, ArrayRef<Value> values) {
  Value m = values.front();
  for (Value value : values.drop_front())
    m = e.maxF(m, value);
  return m;
}

/// The valid logits pushed one by one, in order (a kind without a cheaper
/// partial state for a tile).
SmallVector<Value> pushEachInOrder(const StatKindRules &rules, KernelEmitter &e,
                                   ValueRange state, ArrayRef<Value> z, ArrayRef<Value> valid,
                                   ArrayRef<LogitInputs> in) {
  SmallVector<Value> cur(state.begin(), state.end());
  for (size_t j = 0; j < z.size(); ++j) {
    SmallVector<Value> pushed = rules.push(e, cur, z[j], in[j]);
    for (auto [c, p] : llvm::zip_equal(cur, pushed))
      c = e.select(valid[j], p, c);
  }
  return cur;
}

/// The logit a kind reads: the student's z or, for a teacher kind, the
/// teacher's u.
Value streamValue(bool teacher, Value z, const LogitInputs &in) {
  return teacher ? in.teacher : z;
}
SmallVector<Value> streamValues(bool teacher, ArrayRef<Value> z, ArrayRef<LogitInputs> in) {
  if (!teacher)
    return SmallVector<Value>(z.begin(), z.end());
  SmallVector<Value> out;
  for (const LogitInputs &i : in)
    out.push_back(i.teacher);
  return out;
}

/// d of a state with max m and sum s, moved to the max M (keep =
/// exp(m − M)): keep·(d + (m − M)·s); 0 for an empty state (m = −inf).
Value shifted(KernelEmitter &e, Value m, Value s, Value d, Value maxAll, Value keep) {
  Value empty = e.cmpF(arith::CmpFPredicate::OEQ, m, e.negInf());
  Value moved = e.mulF(keep, e.fma(e.subF(m, maxAll), s, d));
  return e.select(empty, e.real(0.0), moved);
}

} // namespace

SmallVector<Value> StatKindRules::pushGroup(KernelEmitter &, ValueRange, Value) const {
  llvm_unreachable("pushGroup() on a kind that does not push groups (check pushesGroups())");
}

Value StatKindRules::maskableStream(Value, const LogitInputs &) const { return Value(); }

SmallVector<Value> StatKindRules::foldMasked(KernelEmitter &, ValueRange, ArrayRef<Value>) const {
  llvm_unreachable("foldMasked() on a kind without a maskable stream (check maskableStream())");
}

namespace {
/// Online log-sum-exp: (m, s) with lse = m + log s, s = Σ exp(z − m) (of
/// the teacher's logits for the teacher's kind).
class LogSumExp : public StatKindRules {
public:
  explicit LogSumExp(bool teacher) : teacher(teacher) {}
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"max", kNegInf}, {"sum", 0.0}};
    static const StatField t[] = {{"tmax", kNegInf}, {"tsum", 0.0}};
    return teacher ? llvm::ArrayRef<StatField>(t) : llvm::ArrayRef<StatField>(f);
  }
  bool provides(loss::Statistic what) const override {
    return what == (teacher ? loss::Statistic::teacher_lse : loss::Statistic::lse);
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &in) const override {
    return mergeParts(e, state[0], state[1], streamValue(teacher, z, in), e.real(1.0));
  }
  /// The logits as one partial (m_t, s_t) — their max, then Σ exp(z − m_t)
  /// in order — merged into the state: one exponential per logit and one
  /// rescale per row instead of two exponentials per logit. Invalid logits
  /// count as −inf (they add 0; a tile with none leaves the state as is).
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs> in) const override {
    return foldMasked(e, state, maskInvalid(e, streamValues(teacher, z, in), valid));
  }
  Value maskableStream(Value z, const LogitInputs &in) const override {
    return streamValue(teacher, z, in);
  }
  SmallVector<Value> foldMasked(KernelEmitter &e, ValueRange state,
                                ArrayRef<Value> masked) const override {
    Value m = maxOf(e, masked);
    Value s = rescale(e, masked.front(), m);
    for (Value value : ArrayRef<Value>(masked).drop_front())
      s = e.addF(s, rescale(e, value, m));
    return mergeParts(e, state[0], state[1], m, s);
  }
  /// m' = max(m, the group's max), s' = s·exp(m − m') + Σ exp(z − m') with
  /// the lanes summed in laneSum's tree: one exponential per logit.
  bool pushesGroups() const override { return !teacher; }
  SmallVector<Value> pushGroup(KernelEmitter &e, ValueRange state, Value z) const override {
    Value m = e.maxF(state[0], laneMax(e, z));
    Value s = e.addF(e.mulF(state[1], rescale(e, state[0], m)), laneSum(e, laneRescale(e, z, m)));
    return {m, s};
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange a, ValueRange b) const override {
    return mergeParts(e, a[0], a[1], b[0], b[1]);
  }
  Value finish(KernelEmitter &e, ValueRange state, loss::Statistic) const override {
    return e.addF(state[0], e.log(state[1]));
  }
  /// (max, sum, compensation): the sum of the tiles' rescaled sums is
  /// compensated, so its error stays that of one tile however long the
  /// row. (A rescale when the max grows rounds the carried sum once; the
  /// terms it scales shrink by that factor, so this does not accumulate.)
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField f[] = {{"max", kNegInf}, {"sum", 0.0}, {"comp", 0.0}};
    static const StatField t[] = {{"tmax", kNegInf}, {"tsum", 0.0}, {"tcomp", 0.0}};
    return teacher ? llvm::ArrayRef<StatField>(t) : llvm::ArrayRef<StatField>(f);
  }
  SmallVector<Value> mergeWide(KernelEmitter &e, ValueRange wide,
                               ValueRange part) const override {
    Value m = e.maxF(wide[0], part[0]);
    Value keep = rescale(e, wide[0], m);
    Value carried = e.mulF(wide[1], keep), added = e.mulF(part[1], rescale(e, part[0], m));
    Value sum = e.addF(carried, added);
    Value comp = e.addF(e.mulF(wide[2], keep), e.addError(carried, added, sum));
    return {m, sum, comp};
  }
  Value finishWide(KernelEmitter &e, ValueRange wide, loss::Statistic) const override {
    return e.addF(wide[0], e.log(e.addF(wide[1], wide[2])));
  }

private:
  static SmallVector<Value> mergeParts(KernelEmitter &e, Value ma, Value sa, Value mb, Value sb) {
    Value m = e.maxF(ma, mb);
    Value s = e.addF(e.mulF(sa, rescale(e, ma, m)), e.mulF(sb, rescale(e, mb, m)));
    return {m, s};
  }
  bool teacher;
};

/// The softmax and its entropy together: (m, s, d) with s = Σ exp(z − m)
/// and d = Σ exp(z − m)·(z − m), so lse = m + log s and
/// H = −Σ p log p = log s − d / s. Shifting by the running max keeps d
/// free of the cancellation lse − E_p[z] would suffer for large logits.
/// When the max grows from m to M every term becomes
/// exp(m − M)·exp(z − m)·((z − m) + (m − M)): d' = exp(m − M)·(d + (m − M)·s).
class SoftmaxEntropy : public StatKindRules {
public:
  explicit SoftmaxEntropy(bool teacher) : teacher(teacher) {}
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"max", kNegInf}, {"sum", 0.0}, {"dsum", 0.0}};
    static const StatField t[] = {{"tmax", kNegInf}, {"tsum", 0.0}, {"tdsum", 0.0}};
    return teacher ? llvm::ArrayRef<StatField>(t) : llvm::ArrayRef<StatField>(f);
  }
  bool provides(loss::Statistic what) const override {
    return teacher ? what == loss::Statistic::teacher_lse ||
                         what == loss::Statistic::teacher_entropy
                   : what == loss::Statistic::lse || what == loss::Statistic::entropy;
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &in) const override {
    return mergeParts(e, state, {streamValue(teacher, z, in), e.real(1.0), e.real(0.0)});
  }
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs> in) const override {
    return foldMasked(e, state, maskInvalid(e, streamValues(teacher, z, in), valid));
  }
  Value maskableStream(Value z, const LogitInputs &in) const override {
    return streamValue(teacher, z, in);
  }
  SmallVector<Value> foldMasked(KernelEmitter &e, ValueRange state,
                                ArrayRef<Value> masked) const override {
    Value m = maxOf(e, masked);
    Value s = e.real(0.0), d = e.real(0.0);
    for (Value value : masked) {
      Value t = rescale(e, value, m);
      s = e.addF(s, t);
      // A masked logit has t = 0 and z − m = −inf: its term is 0, not NaN.
      d = e.select(e.cmpF(arith::CmpFPredicate::OEQ, t, e.real(0.0)), d,
                   e.fma(t, e.subF(value, m), d));
    }
    return mergeParts(e, state, {m, s, d});
  }
  /// The group as one partial relative to its own max m_g — s_g = Σ t and
  /// d_g = Σ t·(z − m_g) with t = exp(z − m_g), both in laneSum's tree (a
  /// −inf lane adds 0 to each) — merged into the state.
  bool pushesGroups() const override { return !teacher; }
  SmallVector<Value> pushGroup(KernelEmitter &e, ValueRange state, Value z) const override {
    KernelEmitter lane = e.lanes(cast<VectorType>(z.getType()).getNumElements());
    Value m = laneMax(e, z);
    Value t = laneRescale(e, z, m);
    Value mv = vector::BroadcastOp::create(e.builder(), e.location(), z.getType(), m);
    Value terms = lane.select(lane.cmpF(arith::CmpFPredicate::OEQ, t, lane.real(0.0)),
                              lane.real(0.0), lane.mulF(t, lane.subF(z, mv)));
    return mergeParts(e, state, {m, laneSum(e, t), laneSum(e, terms)});
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange a, ValueRange b) const override {
    return mergeParts(e, a, b);
  }
  Value finish(KernelEmitter &e, ValueRange state, loss::Statistic what) const override {
    if (isLse(what))
      return e.addF(state[0], e.log(state[1]));
    return e.subF(e.log(state[1]), e.divF(state[2], state[1]));
  }
  /// (max, sum, comp, dsum, dcomp): both sums compensated over the tiles.
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField f[] = {
        {"max", kNegInf}, {"sum", 0.0}, {"comp", 0.0}, {"dsum", 0.0}, {"dcomp", 0.0}};
    static const StatField t[] = {
        {"tmax", kNegInf}, {"tsum", 0.0}, {"tcomp", 0.0}, {"tdsum", 0.0}, {"tdcomp", 0.0}};
    return teacher ? llvm::ArrayRef<StatField>(t) : llvm::ArrayRef<StatField>(f);
  }
  SmallVector<Value> mergeWide(KernelEmitter &e, ValueRange wide,
                               ValueRange part) const override {
    Value m = e.maxF(wide[0], part[0]);
    Value keepWide = rescale(e, wide[0], m), keepPart = rescale(e, part[0], m);
    Value carried = e.mulF(wide[1], keepWide), added = e.mulF(part[1], keepPart);
    Value sum = e.addF(carried, added);
    Value comp = e.addF(e.mulF(wide[2], keepWide), e.addError(carried, added, sum));
    Value carriedD = shifted(e, wide[0], e.addF(wide[1], wide[2]), wide[3], m, keepWide);
    Value addedD = shifted(e, part[0], part[1], part[2], m, keepPart);
    Value dsum = e.addF(carriedD, addedD);
    Value dcomp = e.addF(e.mulF(wide[4], keepWide), e.addError(carriedD, addedD, dsum));
    return {m, sum, comp, dsum, dcomp};
  }
  Value finishWide(KernelEmitter &e, ValueRange wide, loss::Statistic what) const override {
    Value s = e.addF(wide[1], wide[2]);
    if (isLse(what))
      return e.addF(wide[0], e.log(s));
    return e.subF(e.log(s), e.divF(e.addF(wide[3], wide[4]), s));
  }

private:
  static bool isLse(loss::Statistic what) {
    return what == loss::Statistic::lse || what == loss::Statistic::teacher_lse;
  }
  bool teacher;
  static SmallVector<Value> mergeParts(KernelEmitter &e, ValueRange a, ValueRange b) {
    Value m = e.maxF(a[0], b[0]);
    Value ra = rescale(e, a[0], m), rb = rescale(e, b[0], m);
    Value s = e.addF(e.mulF(a[1], ra), e.mulF(b[1], rb));
    Value d = e.addF(shifted(e, a[0], a[1], a[2], m, ra), shifted(e, b[0], b[1], b[2], m, rb));
    return {m, s, d};
  }
};

/// Σ_j c_j z_j (c_j the column's class weight, 1 without) or, with
/// `targets`, Σ_j c_j t_j z_j (t_j the row's target): a plain sum,
/// compensated across tiles.
class LogitSum : public StatKindRules {
public:
  explicit LogitSum(bool targets) : targets(targets) {}
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField plain[] = {{"zsum", 0.0}}, targeted[] = {{"tsum", 0.0}};
    return targets ? llvm::ArrayRef<StatField>(targeted) : llvm::ArrayRef<StatField>(plain);
  }
  bool provides(loss::Statistic what) const override {
    return what == (targets ? loss::Statistic::target_logit_sum : loss::Statistic::logit_sum);
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &in) const override {
    Value factor = in.weight;
    if (targets)
      factor = factor ? e.mulF(factor, in.target) : in.target;
    return {factor ? e.fma(factor, z, state[0]) : e.addF(state[0], z)};
  }
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs> inputs) const override {
    Value sum = state[0];
    for (size_t j = 0; j < z.size(); ++j)
      sum = e.select(valid[j], push(e, sum, z[j], inputs.empty() ? LogitInputs{} : inputs[j])[0],
                     sum);
    return {sum};
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange a, ValueRange b) const override {
    return {e.addF(a[0], b[0])};
  }
  Value finish(KernelEmitter &, ValueRange state, loss::Statistic) const override {
    return state[0];
  }
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField plain[] = {{"zsum", 0.0}, {"zcomp", 0.0}},
                           targeted[] = {{"tsum", 0.0}, {"tcomp", 0.0}};
    return targets ? llvm::ArrayRef<StatField>(targeted) : llvm::ArrayRef<StatField>(plain);
  }
  SmallVector<Value> mergeWide(KernelEmitter &e, ValueRange wide,
                               ValueRange part) const override {
    Value sum = e.addF(wide[0], part[0]);
    return {sum, e.addF(wide[1], e.addError(wide[0], part[0], sum))};
  }
  /// The compensation is dropped once the sum is ±inf or NaN (inf − inf).
  Value finishWide(KernelEmitter &e, ValueRange wide, loss::Statistic) const override {
    Value finite = e.cmpF(arith::CmpFPredicate::OLT, e.absF(wide[0]),
                          e.real(std::numeric_limits<double>::infinity()));
    return e.select(finite, e.addF(wide[0], wide[1]), wide[0]);
  }

private:
  bool targets;
};

/// −Σ_j softmax(a)_j log softmax(b)_j of two streams (the student's z and
/// the teacher's u): (m_a, s_a, m_b, s_b, d) with s_x = Σ exp(x − m_x) and
/// d = Σ exp(a − m_a)·(b − m_b), so the value is log s_b − d / s_a, free of
/// the cancellation lse_b − E_a[b] would suffer. When m_a grows to M_a, d
/// scales by exp(m_a − M_a); when m_b grows to M_b, every (b − m_b) gains
/// (m_b − M_b): d' = d + s_a·(m_b − M_b).
class SoftmaxCross : public StatKindRules {
public:
  /// (a, b) = (u, z) for the forward cross-entropy, (z, u) for the reverse.
  explicit SoftmaxCross(bool reverse) : reverse(reverse) {}
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"xf_am", kNegInf}, {"xf_as", 0.0}, {"xf_bm", kNegInf},
                                  {"xf_bs", 0.0}, {"xf_d", 0.0}};
    static const StatField r[] = {{"xr_am", kNegInf}, {"xr_as", 0.0}, {"xr_bm", kNegInf},
                                  {"xr_bs", 0.0}, {"xr_d", 0.0}};
    return reverse ? llvm::ArrayRef<StatField>(r) : llvm::ArrayRef<StatField>(f);
  }
  bool provides(loss::Statistic what) const override {
    return what == (reverse ? loss::Statistic::reverse_cross_entropy
                            : loss::Statistic::cross_entropy);
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &in) const override {
    Value a = reverse ? z : in.teacher, b = reverse ? in.teacher : z;
    return merge(e, state, {a, e.real(1.0), b, e.real(1.0), e.real(0.0)});
  }
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs> in) const override {
    return pushEachInOrder(*this, e, state, z, valid, in);
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange x, ValueRange y) const override {
    Value ma = e.maxF(x[0], y[0]), mb = e.maxF(x[2], y[2]);
    Value rx = rescale(e, x[0], ma), ry = rescale(e, y[0], ma);
    Value sa = e.addF(e.mulF(x[1], rx), e.mulF(y[1], ry));
    Value sb = e.addF(e.mulF(x[3], rescale(e, x[2], mb)), e.mulF(y[3], rescale(e, y[2], mb)));
    Value d = e.addF(moved(e, x, ma, mb, rx), moved(e, y, ma, mb, ry));
    return {ma, sa, mb, sb, d};
  }
  Value finish(KernelEmitter &e, ValueRange state, loss::Statistic) const override {
    return e.subF(e.log(state[3]), e.divF(state[4], state[1]));
  }
  /// (m_a, s_a, comp_a, m_b, s_b, comp_b, d, comp_d).
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField f[] = {{"xf_am", kNegInf}, {"xf_as", 0.0}, {"xf_ac", 0.0},
                                  {"xf_bm", kNegInf}, {"xf_bs", 0.0}, {"xf_bc", 0.0},
                                  {"xf_d", 0.0},      {"xf_dc", 0.0}};
    static const StatField r[] = {{"xr_am", kNegInf}, {"xr_as", 0.0}, {"xr_ac", 0.0},
                                  {"xr_bm", kNegInf}, {"xr_bs", 0.0}, {"xr_bc", 0.0},
                                  {"xr_d", 0.0},      {"xr_dc", 0.0}};
    return reverse ? llvm::ArrayRef<StatField>(r) : llvm::ArrayRef<StatField>(f);
  }
  SmallVector<Value> mergeWide(KernelEmitter &e, ValueRange w, ValueRange p) const override {
    Value ma = e.maxF(w[0], p[0]), mb = e.maxF(w[3], p[2]);
    Value keepA = rescale(e, w[0], ma), keepB = rescale(e, w[3], mb);
    Value partA = rescale(e, p[0], ma), partB = rescale(e, p[2], mb);
    auto compensated = [&](Value sum, Value comp, Value keep, Value added) {
      Value carried = e.mulF(sum, keep);
      Value total = e.addF(carried, added);
      return std::pair<Value, Value>{
          total, e.addF(e.mulF(comp, keep), e.addError(carried, added, total))};
    };
    auto [sa, ca] = compensated(w[1], w[2], keepA, e.mulF(p[1], partA));
    auto [sb, cb] = compensated(w[4], w[5], keepB, e.mulF(p[3], partB));
    // d of the wide state moved to (ma, mb): its full s_a (sum + comp).
    Value wideState[] = {w[0], e.addF(w[1], w[2]), w[3], e.addF(w[4], w[5]), w[6]};
    Value carriedD = moved(e, wideState, ma, mb, keepA);
    Value addedD = moved(e, p, ma, mb, partA);
    Value d = e.addF(carriedD, addedD);
    Value cd = e.addF(e.mulF(w[7], keepA), e.addError(carriedD, addedD, d));
    return {ma, sa, ca, mb, sb, cb, d, cd};
  }
  Value finishWide(KernelEmitter &e, ValueRange w, loss::Statistic) const override {
    return e.subF(e.log(e.addF(w[4], w[5])), e.divF(e.addF(w[6], w[7]), e.addF(w[1], w[2])));
  }

private:
  /// d of state (m_a, s_a, m_b, s_b, d) moved to the maxima (M_a, M_b)
  /// (keepA = exp(m_a − M_a)): keepA·(d + s_a·(m_b − M_b)); 0 when empty.
  static Value moved(KernelEmitter &e, ValueRange x, Value ma, Value mb, Value keepA) {
    Value emptyA = e.cmpF(arith::CmpFPredicate::OEQ, x[0], e.negInf());
    Value emptyB = e.cmpF(arith::CmpFPredicate::OEQ, x[2], e.negInf());
    Value value = e.mulF(keepA, e.fma(x[1], e.subF(x[2], mb), x[4]));
    return e.select(arith::OrIOp::create(e.builder(), e.location(), emptyA, emptyB),
                    e.real(0.0), value);
  }
  bool reverse;
};

/// The mixture's dependent sums over (z, u) with the finished lse of both
/// streams: per logit log p = z − lse, log q = u − lse', M = β q +
/// (1 − β) p, and
///   jsd term        β q (log q − log M) + (1 − β) p (log p − log M)
///   mixture_kl term p (log p − log M)
///   mixture_p2 term p² / M
/// (a term whose probability is 0 adds 0; M = 0 only where both are).
/// Written against log M rather than as Σ p log p − M log M, so rows whose
/// two distributions agree sum small terms instead of cancelling large
/// ones. Plain sums, compensated across tiles.
class MixtureSums : public StatKindRules {
public:
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"jsum", 0.0}, {"ksum", 0.0}, {"ssum", 0.0}};
    return f;
  }
  bool provides(loss::Statistic what) const override {
    return what == loss::Statistic::jsd || what == loss::Statistic::mixture_kl ||
           what == loss::Statistic::mixture_p2;
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &in) const override {
    Value zero = e.real(0.0);
    Value logp = e.subF(z, in.lse), logq = e.subF(in.teacher, in.teacherLse);
    Value p = e.exp(logp), q = e.exp(logq);
    Value mix = e.fma(in.beta, e.subF(q, p), p); // β q + (1 − β) p
    Value positive = e.cmpF(arith::CmpFPredicate::OGT, mix, zero);
    Value safeMix = e.select(positive, mix, e.real(1.0));
    Value logMix = e.log(safeMix);
    // A term whose probability is 0 (a −inf logit: log p = −inf) adds 0.
    auto counts = [&](Value prob) {
      return arith::AndIOp::create(e.builder(), e.location(), positive,
                                   e.cmpF(arith::CmpFPredicate::OGT, prob, zero));
    };
    auto term = [&](Value prob, Value logProb) {
      return e.select(counts(prob), e.mulF(prob, e.subF(logProb, logMix)), zero);
    };
    Value studentTerm = term(p, logp), teacherTerm = term(q, logq);
    Value jsd = e.fma(in.beta, e.subF(teacherTerm, studentTerm), studentTerm);
    Value square = e.select(counts(p), e.divF(e.mulF(p, p), safeMix), zero);
    return {e.addF(state[0], jsd), e.addF(state[1], studentTerm), e.addF(state[2], square)};
  }
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs> in) const override {
    return pushEachInOrder(*this, e, state, z, valid, in);
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange a, ValueRange b) const override {
    return {e.addF(a[0], b[0]), e.addF(a[1], b[1]), e.addF(a[2], b[2])};
  }
  Value finish(KernelEmitter &, ValueRange state, loss::Statistic what) const override {
    return state[position(what)];
  }
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField f[] = {{"jsum", 0.0}, {"jcomp", 0.0}, {"ksum", 0.0},
                                  {"kcomp", 0.0}, {"ssum", 0.0}, {"scomp", 0.0}};
    return f;
  }
  SmallVector<Value> mergeWide(KernelEmitter &e, ValueRange wide,
                               ValueRange part) const override {
    SmallVector<Value> out;
    for (unsigned k = 0; k < 3; ++k) {
      Value sum = e.addF(wide[2 * k], part[k]);
      out.push_back(sum);
      out.push_back(e.addF(wide[2 * k + 1], e.addError(wide[2 * k], part[k], sum)));
    }
    return out;
  }
  Value finishWide(KernelEmitter &e, ValueRange wide, loss::Statistic what) const override {
    unsigned at = 2 * position(what);
    Value finite = e.cmpF(arith::CmpFPredicate::OLT, e.absF(wide[at]),
                          e.real(std::numeric_limits<double>::infinity()));
    return e.select(finite, e.addF(wide[at], wide[at + 1]), wide[at]);
  }

private:
  static unsigned position(loss::Statistic what) {
    return what == loss::Statistic::jsd ? 0 : what == loss::Statistic::mixture_kl ? 1 : 2;
  }
};

/// Adding a statistic: a StatKind value (RowStats.h), its class above, and
/// its row here.
const StatKindRules *lookup(StatKind kind) {
  static const LogSumExp logSumExp(/*teacher=*/false), teacherLogSumExp(/*teacher=*/true);
  static const SoftmaxEntropy softmaxEntropy(/*teacher=*/false),
      teacherSoftmaxEntropy(/*teacher=*/true);
  static const LogitSum logitSum(/*targets=*/false), targetLogitSum(/*targets=*/true);
  static const SoftmaxCross crossForward(/*reverse=*/false), crossReverse(/*reverse=*/true);
  static const MixtureSums mixtureSums;
  switch (kind) {
  case StatKind::LogSumExp:
    return &logSumExp;
  case StatKind::SoftmaxEntropy:
    return &softmaxEntropy;
  case StatKind::TeacherLogSumExp:
    return &teacherLogSumExp;
  case StatKind::TeacherSoftmaxEntropy:
    return &teacherSoftmaxEntropy;
  case StatKind::CrossEntropyForward:
    return &crossForward;
  case StatKind::CrossEntropyReverse:
    return &crossReverse;
  case StatKind::LogitSum:
    return &logitSum;
  case StatKind::TargetLogitSum:
    return &targetLogitSum;
  case StatKind::MixtureSums:
    return &mixtureSums;
  }
  return nullptr;
}
} // namespace

const StatKindRules &lossjit::statKindRules(StatKind kind) { return *lookup(kind); }
