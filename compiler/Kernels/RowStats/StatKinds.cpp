//===- StatKinds.cpp - the math of each row statistic ---------------------===//
//
// One class per StatKind and one row in the table at the end: that is all
// a new carried statistic needs. Which outputs (loss::Statistic) a kind
// provides is its finish().
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/RowStats.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// exp(m − M), but 0 when m is −inf (so −inf − −inf never makes a NaN).
Value rescale(KernelEmitter &e, Value m, Value maxAll) {
  Value isNegInf = e.cmpF(arith::CmpFPredicate::OEQ, m, e.negInf());
  return e.select(isNegInf, e.f32(0.0), e.exp(e.subF(m, maxAll)));
}

/// The logits whose `valid` bit is clear replaced by −inf (they add 0).
SmallVector<Value> maskInvalid(KernelEmitter &e, ArrayRef<Value> z, ArrayRef<Value> valid) {
  SmallVector<Value> masked;
  for (auto [value, ok] : llvm::zip_equal(z, valid))
    masked.push_back(e.select(ok, value, e.negInf()));
  return masked;
}

Value maxOf(KernelEmitter &e, ArrayRef<Value> values) {
  Value m = values.front();
  for (Value value : values.drop_front())
    m = e.maxF(m, value);
  return m;
}

/// Online log-sum-exp: (m, s) with lse = m + log s, s = Σ exp(z − m).
class LogSumExp : public StatKindRules {
public:
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"max", kNegInf}, {"sum", 0.0}};
    return f;
  }
  bool provides(loss::Statistic what) const override { return what == loss::Statistic::lse; }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &) const override {
    return mergeParts(e, state[0], state[1], z, e.f32(1.0));
  }
  /// The logits as one partial (m_t, s_t) — their max, then Σ exp(z − m_t)
  /// in order — merged into the state: one exponential per logit and one
  /// rescale per row instead of two exponentials per logit. Invalid logits
  /// count as −inf (they add 0; a tile with none leaves the state as is).
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs>) const override {
    SmallVector<Value> masked = maskInvalid(e, z, valid);
    Value m = maxOf(e, masked);
    Value s = rescale(e, masked.front(), m);
    for (Value value : ArrayRef<Value>(masked).drop_front())
      s = e.addF(s, rescale(e, value, m));
    return mergeParts(e, state[0], state[1], m, s);
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
    return f;
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
};

/// The softmax and its entropy together: (m, s, d) with s = Σ exp(z − m)
/// and d = Σ exp(z − m)·(z − m), so lse = m + log s and
/// H = −Σ p log p = log s − d / s. Shifting by the running max keeps d
/// free of the cancellation lse − E_p[z] would suffer for large logits.
/// When the max grows from m to M every term becomes
/// exp(m − M)·exp(z − m)·((z − m) + (m − M)): d' = exp(m − M)·(d + (m − M)·s).
class SoftmaxEntropy : public StatKindRules {
public:
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"max", kNegInf}, {"sum", 0.0}, {"dsum", 0.0}};
    return f;
  }
  bool provides(loss::Statistic what) const override {
    return what == loss::Statistic::lse || what == loss::Statistic::entropy;
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z,
                          const LogitInputs &) const override {
    return mergeParts(e, state, {z, e.f32(1.0), e.f32(0.0)});
  }
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid, ArrayRef<LogitInputs>) const override {
    SmallVector<Value> masked = maskInvalid(e, z, valid);
    Value m = maxOf(e, masked);
    Value s = e.f32(0.0), d = e.f32(0.0);
    for (Value value : masked) {
      Value t = rescale(e, value, m);
      s = e.addF(s, t);
      // A masked logit has t = 0 and z − m = −inf: its term is 0, not NaN.
      d = e.select(e.cmpF(arith::CmpFPredicate::OEQ, t, e.f32(0.0)), d,
                   e.fma(t, e.subF(value, m), d));
    }
    return mergeParts(e, state, {m, s, d});
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange a, ValueRange b) const override {
    return mergeParts(e, a, b);
  }
  Value finish(KernelEmitter &e, ValueRange state, loss::Statistic what) const override {
    if (what == loss::Statistic::lse)
      return e.addF(state[0], e.log(state[1]));
    return e.subF(e.log(state[1]), e.divF(state[2], state[1]));
  }
  /// (max, sum, comp, dsum, dcomp): both sums compensated over the tiles.
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField f[] = {
        {"max", kNegInf}, {"sum", 0.0}, {"comp", 0.0}, {"dsum", 0.0}, {"dcomp", 0.0}};
    return f;
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
    if (what == loss::Statistic::lse)
      return e.addF(wide[0], e.log(s));
    return e.subF(e.log(s), e.divF(e.addF(wide[3], wide[4]), s));
  }

private:
  /// d of a state with max m and sum s, moved to the max M (keep =
  /// exp(m − M)); 0 for an empty state (m = −inf).
  static Value shifted(KernelEmitter &e, Value m, Value s, Value d, Value maxAll, Value keep) {
    Value empty = e.cmpF(arith::CmpFPredicate::OEQ, m, e.negInf());
    Value moved = e.mulF(keep, e.fma(e.subF(m, maxAll), s, d));
    return e.select(empty, e.f32(0.0), moved);
  }
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
                          e.f32(std::numeric_limits<double>::infinity()));
    return e.select(finite, e.addF(wide[0], wide[1]), wide[0]);
  }

private:
  bool targets;
};

/// Adding a statistic: a StatKind value (RowStats.h), its class above, and
/// its row here.
const StatKindRules *lookup(StatKind kind) {
  static const LogSumExp logSumExp;
  static const SoftmaxEntropy softmaxEntropy;
  static const LogitSum logitSum(/*targets=*/false), targetLogitSum(/*targets=*/true);
  switch (kind) {
  case StatKind::LogSumExp:
    return &logSumExp;
  case StatKind::SoftmaxEntropy:
    return &softmaxEntropy;
  case StatKind::LogitSum:
    return &logitSum;
  case StatKind::TargetLogitSum:
    return &targetLogitSum;
  }
  return nullptr;
}
} // namespace

const StatKindRules &lossjit::statKindRules(StatKind kind) { return *lookup(kind); }
