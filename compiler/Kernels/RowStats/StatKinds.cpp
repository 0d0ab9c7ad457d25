//===- StatKinds.cpp - the math of each row statistic ---------------------===//
//
// One class per StatKind and one row in the table at the end: that is all
// a new statistic (Σz for label smoothing, a teacher's lse, ...) needs.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/RowStats.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
/// Online log-sum-exp: (m, s) with lse = m + log s, s = Σ exp(z − m).
class LogSumExp : public StatKindRules {
public:
  llvm::ArrayRef<StatField> fields() const override {
    static const StatField f[] = {{"max", -std::numeric_limits<double>::infinity()}, {"sum", 0.0}};
    return f;
  }
  SmallVector<Value> push(KernelEmitter &e, ValueRange state, Value z) const override {
    return mergeParts(e, state[0], state[1], z, e.f32(1.0));
  }
  /// The logits as one partial (m_t, s_t) — their max, then Σ exp(z − m_t)
  /// in order — merged into the state: one exponential per logit and one
  /// rescale per row instead of two exponentials per logit. Invalid logits
  /// count as −inf (they add 0; a tile with none leaves the state as is).
  SmallVector<Value> pushMany(KernelEmitter &e, ValueRange state, ArrayRef<Value> z,
                              ArrayRef<Value> valid) const override {
    SmallVector<Value> masked;
    for (auto [value, ok] : llvm::zip_equal(z, valid))
      masked.push_back(e.select(ok, value, e.negInf()));
    Value m = masked.front();
    for (Value value : ArrayRef<Value>(masked).drop_front())
      m = e.maxF(m, value);
    Value s = rescale(e, masked.front(), m);
    for (Value value : ArrayRef<Value>(masked).drop_front())
      s = e.addF(s, rescale(e, value, m));
    return mergeParts(e, state[0], state[1], m, s);
  }
  SmallVector<Value> merge(KernelEmitter &e, ValueRange a, ValueRange b) const override {
    return mergeParts(e, a[0], a[1], b[0], b[1]);
  }
  Value finish(KernelEmitter &e, ValueRange state) const override {
    return e.addF(state[0], e.log(state[1]));
  }
  /// (max, sum, compensation): the sum of the tiles' rescaled sums is
  /// compensated, so its error stays that of one tile however long the
  /// row. (A rescale when the max grows rounds the carried sum once; the
  /// terms it scales shrink by that factor, so this does not accumulate.)
  llvm::ArrayRef<StatField> wideFields() const override {
    static const StatField f[] = {
        {"max", -std::numeric_limits<double>::infinity()}, {"sum", 0.0}, {"comp", 0.0}};
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
  Value finishWide(KernelEmitter &e, ValueRange wide) const override {
    return e.addF(wide[0], e.log(e.addF(wide[1], wide[2])));
  }

private:
  /// exp(m − M), but 0 when m is −inf (so −inf − −inf never makes a NaN).
  static Value rescale(KernelEmitter &e, Value m, Value maxAll) {
    Value isNegInf = e.cmpF(arith::CmpFPredicate::OEQ, m, e.negInf());
    return e.select(isNegInf, e.f32(0.0), e.exp(e.subF(m, maxAll)));
  }
  static SmallVector<Value> mergeParts(KernelEmitter &e, Value ma, Value sa, Value mb, Value sb) {
    Value m = e.maxF(ma, mb);
    Value s = e.addF(e.mulF(sa, rescale(e, ma, m)), e.mulF(sb, rescale(e, mb, m)));
    return {m, s};
  }
};

/// Adding a statistic: a StatKind value (RowStats.h), its class above, and
/// its row here.
const StatKindRules *lookup(StatKind kind) {
  static const LogSumExp logSumExp;
  switch (kind) {
  case StatKind::LogSumExp:
    return &logSumExp;
  }
  return nullptr;
}
} // namespace

const StatKindRules &lossjit::statKindRules(StatKind kind) { return *lookup(kind); }
