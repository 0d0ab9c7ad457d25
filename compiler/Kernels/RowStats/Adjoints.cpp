//===- Adjoints.cpp -------------------------------------------------------===//

#include "compiler/Kernels/RowStats/Adjoints.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"

using namespace mlir;
using namespace lossjit;

namespace {
std::string adjointName(loss::Statistic kind) {
  return "grad_" + loss::stringifyStatistic(kind).str();
}
} // namespace

void lossjit::declareAdjointInputs(KernelSignature &sig, const LceSpec &spec, Type f32) {
  MemRefType rowValues = KernelSink::flat(f32);
  if (!spec.isVocabReduce()) {
    sig.arg("labels", KernelSink::flat(spec.labelType)).arg("lse", rowValues);
    sig.arg("grow", rowValues).argIf(spec.hasGradLse, "grad_lse", rowValues);
    return;
  }
  if (spec.hasLabels)
    sig.arg("labels", KernelSink::flat(spec.labelType));
  sig.argIf(spec.gradientReadsLse(), "lse", rowValues);
  sig.argIf(spec.hasStatistic(loss::Statistic::entropy), "entropy", rowValues);
  for (loss::Statistic kind : spec.statistics)
    sig.arg(adjointName(kind), rowValues);
  sig.argIf(spec.hasClassWeights, "class_weights", rowValues);
}

RowAdjoint lossjit::loadRowAdjoint(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a,
                                   Value row) {
  auto load = [&](llvm::StringRef name) {
    Value buffer = a[name];
    return buffer ? e.load(buffer, row) : Value();
  };
  RowAdjoint r;
  r.lse = load("lse");
  if (a["labels"])
    r.label = e.loadLabel(a["labels"], row);
  if (!spec.isVocabReduce()) {
    r.g = load("grow");
    r.lseGrad = load("grad_lse");
    return r;
  }
  r.gLse = load(adjointName(loss::Statistic::lse));
  r.gLabel = load(adjointName(loss::Statistic::label_logit));
  r.gSum = load(adjointName(loss::Statistic::logit_sum));
  r.gEntropy = load(adjointName(loss::Statistic::entropy));
  r.entropy = load("entropy");
  return r;
}

Value lossjit::emitRowActive(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row) {
  Value active;
  for (Value g : {row.g, row.lseGrad, row.gLse, row.gLabel, row.gSum, row.gEntropy}) {
    if (!g)
      continue;
    // UNE: a NaN adjoint counts as active (it must reach the gradients).
    Value nonzero = e.cmpF(arith::CmpFPredicate::UNE, g, e.f32(0.0));
    active = active ? arith::OrIOp::create(e.builder(), e.location(), active, nonzero) : nonzero;
  }
  // (Every op has an adjoint; a row with none would be active.)
  return active ? active : e.cmpI(arith::CmpIPredicate::eq, e.index(0), e.index(0));
}

Value lossjit::loadColumnWeight(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a,
                                Value col) {
  if (!spec.isVocabReduce() || !spec.hasClassWeights)
    return {};
  return e.loadF32(a["class_weights"], col);
}

Value lossjit::emitRawGrad(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row, Value raw,
                           Value col, Value colWeight) {
  if (!spec.isVocabReduce())
    return emitLogitGrad(e, spec, raw, row.lse, row.g,
                         e.cmpI(arith::CmpIPredicate::eq, row.label, col), row.lseGrad);
  LogitAndSlope logit = emitLogitAndSlope(e, spec, raw);
  Value dz = e.f32(0.0);
  if (row.lse) {
    Value logp = e.subF(logit.z, row.lse);
    Value p = e.exp(logp);
    if (row.gLse)
      dz = e.mulF(row.gLse, p);
    // −ḡ_H · p (log p + H)
    if (row.gEntropy)
      dz = e.subF(dz, e.mulF(e.mulF(row.gEntropy, p), e.addF(logp, row.entropy)));
  }
  if (row.gLabel)
    dz = e.addF(dz, e.select(e.cmpI(arith::CmpIPredicate::eq, row.label, col), row.gLabel,
                             e.f32(0.0)));
  if (row.gSum)
    dz = colWeight ? e.fma(row.gSum, colWeight, dz) : e.addF(dz, row.gSum);
  return logit.dzdraw ? e.mulF(dz, logit.dzdraw) : dz;
}
