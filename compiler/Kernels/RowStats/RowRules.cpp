//===- RowRules.cpp -------------------------------------------------------===//

#include "compiler/Kernels/RowStats/RowRules.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
Value isIgnored(KernelEmitter &e, const LceSpec &spec, Value label) {
  return e.cmpI(arith::CmpIPredicate::eq, label, e.index(spec.ignoreIndex));
}
Value nan(KernelEmitter &e) { return e.real(std::numeric_limits<double>::quiet_NaN()); }
} // namespace

Value lossjit::emitCountedI32(KernelEmitter &e, const LceSpec &spec, Value label) {
  return e.select(isIgnored(e, spec, label), e.i32(0), e.i32(1));
}

Value lossjit::emitRowRule(KernelEmitter &e, const LceSpec &spec, Value label, Value v,
                           const std::function<Value(KernelEmitter &)> &value, bool lazy) {
  if (!lazy) {
    Value inRange = e.cmpI(arith::CmpIPredicate::ult, label, v);
    Value valid = e.select(inRange, value(e), nan(e));
    return e.select(isIgnored(e, spec, label), e.real(0.0), valid);
  }
  return e.ifElse(
      isIgnored(e, spec, label), [](KernelEmitter &ie) { return ie.real(0.0); },
      [&](KernelEmitter &ce) {
        return ce.ifElse(ce.cmpI(arith::CmpIPredicate::ult, label, v), value,
                         [](KernelEmitter &ne) { return nan(ne); });
      });
}

Value lossjit::emitGradScale(KernelEmitter &e, const LceSpec &spec, Value gradLoss,
                             Value countI32) {
  if (spec.reduction == loss::Reduction::none)
    return {};
  // Without a grad_loss buffer (the fused forward+backward) the gradients
  // are those of grad_loss = 1; the caller rescales them.
  Value g = gradLoss ? e.load(gradLoss, e.index(0)) : e.real(1.0);
  if (spec.reduction == loss::Reduction::sum)
    return g;
  return e.divF(g, e.i32ToReal(countI32));
}

Value lossjit::emitRowFactor(KernelEmitter &e, const LceSpec &spec, Value labels, Value gradLoss,
                             Value scale, Value row, Value v) {
  Value label = e.loadLabel(labels, row);
  return emitRowRule(
      e, spec, label, v,
      [&](KernelEmitter &ge) {
        return spec.reduction == loss::Reduction::none ? ge.load(gradLoss, row) : scale;
      },
      /*lazy=*/false);
}

Value lossjit::emitRowLoss(KernelEmitter &e, const LceSpec &spec, Value label, Value v, Value lse,
                           const std::function<Value(KernelEmitter &)> &targetRaw) {
  return emitRowRule(
      e, spec, label, v,
      [&](KernelEmitter &te) { return te.subF(lse, emitLogit(te, spec, targetRaw(te))); },
      /*lazy=*/true);
}

void lossjit::declareRowOutputs(KernelSignature &sig, const LceSpec &spec, Type real) {
  MemRefType rows = KernelSink::flat(real);
  if (!spec.isVocabReduce()) {
    sig.arg("lse", rows).arg("loss_rows", rows, spec.rowLossBuffer());
    return;
  }
  for (loss::Statistic kind : spec.statistics)
    sig.arg(loss::stringifyStatistic(kind), rows);
}

void lossjit::declareRowInputs(KernelSignature &sig, const LceSpec &spec) {
  if (spec.hasLabels)
    sig.arg("labels", KernelSink::flat(spec.labelType));
  sig.argIf(spec.isVocabReduce() && spec.hasClassWeights, "class_weights",
            KernelSink::flat(spec.compute));
  if (spec.hasTargets())
    sig.arg("targets", KernelSink::flat(spec.targetsType));
  declareTeacherInputs(sig, spec);
}

void lossjit::declareTeacherInputs(KernelSignature &sig, const LceSpec &spec) {
  if (!spec.hasTeacher)
    return;
  MemRefType stored = KernelSink::flat(spec.storage);
  sig.arg("teacher_x", stored).arg("teacher_w", stored);
  sig.argIf(spec.hasTeacherBias, "teacher_bias", stored);
  sig.arg("T", mlir::IndexType::get(spec.storage.getContext()));
}

void lossjit::emitRowOutputs(
    KernelEmitter &e, const LceSpec &spec, const KernelArgs &a, Value row, Value v,
    const std::function<Value(KernelEmitter &, loss::Statistic)> &finish,
    const std::function<Value(KernelEmitter &, Value)> &labelRaw,
    const std::function<bool(loss::Statistic)> &writes) {
  if (!spec.isVocabReduce()) {
    Value lse = finish(e, loss::Statistic::lse);
    e.store(lse, a["lse"], row);
    Value label = e.loadLabel(a["labels"], row);
    e.store(emitRowLoss(e, spec, label, v, lse,
                        [&](KernelEmitter &te) { return labelRaw(te, label); }),
            a["loss_rows"], row);
    return;
  }
  for (loss::Statistic kind : spec.statistics) {
    if (writes && !writes(kind))
      continue;
    Value out = a[loss::stringifyStatistic(kind)];
    if (kind != loss::Statistic::label_logit) {
      e.store(finish(e, kind), out, row);
      continue;
    }
    // The row's K labels in order (K = 1 for labels [N]).
    const int64_t k = spec.labelCount();
    Value first = e.mul(row, e.index(k));
    e.forLoop(first, e.add(first, e.index(k)), e.index(1), {},
              [&](KernelEmitter &le, Value at, ValueRange) {
                Value label = le.loadLabel(a["labels"], at);
                le.store(emitRowRule(
                             le, spec, label, v,
                             [&](KernelEmitter &te) {
                               return emitLogit(te, spec, labelRaw(te, label));
                             },
                             /*lazy=*/true),
                         out, at);
                return SmallVector<Value>{};
              });
  }
}

void lossjit::emitRowFromRawLogits(KernelEmitter &e, const LceSpec &spec, const RowStats &stats,
                                   Value raw, Value base, Value v, Value labels, Value row,
                                   Value lseOut, Value lossOut, const RawTileFold &foldTile) {
  // Tiles of kRawTile columns, each folded in order from empty and merged
  // into a compensated wide state: the error does not grow with V.
  constexpr int64_t kRawTile = 512;
  SmallVector<Value> wide = e.forLoop(
      e.index(0), v, e.index(kRawTile), stats.identityWide(e),
      [&](KernelEmitter &te, Value t0, ValueRange carried) {
        Value tileEnd = te.minUI(te.add(t0, te.index(kRawTile)), v);
        SmallVector<Value> part =
            foldTile ? foldTile(te, t0, tileEnd)
                     : te.forLoop(t0, tileEnd, te.index(1), stats.identity(te),
                                  [&](KernelEmitter &le, Value j, ValueRange it) {
                                    return stats.push(
                                        le, it, emitLogit(le, spec, le.load(raw, le.add(base, j))));
                                  });
        return stats.mergeWide(te, carried, part);
      });
  Value lse = stats.finishWide(e, wide, loss::Statistic::lse);
  e.store(lse, lseOut, row);
  Value label = e.loadLabel(labels, row);
  e.store(emitRowLoss(e, spec, label, v, lse,
                      [&](KernelEmitter &te) { return te.load(raw, te.add(base, label)); }),
          lossOut, row);
}

SmallVector<Value> lossjit::emitLaneLossAndCount(KernelEmitter &e, const LceSpec &spec,
                                                 Value labels, Value lossRows, Value first, Value n,
                                                 Value step) {
  return e.forLoop(first, n, step, {e.real(0.0), e.real(0.0), e.i32(0)},
                   [&](KernelEmitter &le, Value r, ValueRange it) {
                     Value counted = emitCountedI32(le, spec, le.loadLabel(labels, r));
                     Value x = le.load(lossRows, r);
                     Value sum = le.addF(it[0], x);
                     Value comp = le.addF(it[1], le.addError(it[0], x, sum));
                     return SmallVector<Value>{sum, comp, le.addI32(it[2], counted)};
                   });
}

void lossjit::emitMergeLossAndCount(KernelEmitter &e, Value sums, Value comps, Value counts,
                                    Value dst, Value src) {
  Value a = e.load(sums, dst), b = e.load(sums, src);
  Value sum = e.addF(a, b);
  Value comp = e.addF(e.addF(e.load(comps, dst), e.load(comps, src)), e.addError(a, b, sum));
  e.store(sum, sums, dst);
  e.store(comp, comps, dst);
  e.store(e.addI32(e.load(counts, dst), e.load(counts, src)), counts, dst);
}

Value lossjit::emitReducedLoss(KernelEmitter &e, const LceSpec &spec, Value sum, Value comp,
                               Value countI32) {
  // inf − inf in the compensation would turn an infinite total into NaN.
  Value finite = e.cmpF(arith::CmpFPredicate::OLT, e.absF(sum), e.real(std::numeric_limits<double>::infinity()));
  Value total = e.select(finite, e.addF(sum, comp), sum);
  if (spec.reduction == loss::Reduction::mean)
    return e.divF(total, e.i32ToReal(countI32));
  return total;
}
