//===- Adjoints.cpp -------------------------------------------------------===//

#include "compiler/Kernels/RowStats/Adjoints.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowRules.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
std::string adjointName(loss::Statistic kind) {
  return "grad_" + loss::stringifyStatistic(kind).str();
}
/// dz plus the mixture's terms at one logit (p, log p; the teacher's
/// log q): with M = β q + (1 − β) p, r = log p − log M,
///   ḡ_J · (1 − β) p (r − K) + ḡ_K · p (r − (1 − β) p/M − K + (1 − β) S);
/// a column with p = 0 (a −inf logit, or M = 0) adds 0.
Value emitMixtureGrad(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row, Value p,
                      Value logp, Value logq, Value dz) {
  const double beta = spec.jsdBeta;
  Value zero = e.real(0.0);
  Value mix = e.fma(e.real(beta), e.subF(e.exp(logq), p), p);
  Value counts = arith::AndIOp::create(e.builder(), e.location(),
                                       e.cmpF(arith::CmpFPredicate::OGT, mix, zero),
                                       e.cmpF(arith::CmpFPredicate::OGT, p, zero));
  Value safeMix = e.select(counts, mix, e.real(1.0));
  Value ratio = e.subF(e.subF(logp, e.log(safeMix)), row.mixtureKl); // r − K
  Value sum = zero;
  if (row.gJsd)
    sum = e.mulF(e.mulF(row.gJsd, e.real(1.0 - beta)), ratio);
  if (row.gMixtureKl) {
    // r − K − (1 − β)(p/M − S)
    Value shift = e.mulF(e.real(1.0 - beta), e.subF(e.divF(p, safeMix), row.mixtureP2));
    sum = e.fma(row.gMixtureKl, e.subF(ratio, shift), sum);
  }
  return e.addF(dz, e.select(counts, e.mulF(p, sum), zero));
}
} // namespace

void lossjit::declareAdjointInputs(KernelSignature &sig, const LceSpec &spec, Type real) {
  MemRefType rowValues = KernelSink::flat(real);
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
  if (spec.hasTargets())
    sig.arg("targets", KernelSink::flat(spec.targetsType));
  if (spec.gradientReadsTeacher()) {
    sig.arg("teacher_lse", rowValues);
    sig.argIf(spec.hasStatistic(loss::Statistic::reverse_cross_entropy),
              "reverse_cross_entropy", rowValues);
    for (loss::Statistic saved : {loss::Statistic::mixture_kl, loss::Statistic::mixture_p2})
      sig.argIf(spec.gradientReadsSaved(saved), loss::stringifyStatistic(saved), rowValues);
    declareTeacherInputs(sig, spec);
  }
}

RowAdjoint lossjit::loadRowAdjoint(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a,
                                   Value row, bool labels) {
  auto load = [&](llvm::StringRef name) {
    Value buffer = a[name];
    return buffer ? e.load(buffer, row) : Value();
  };
  RowAdjoint r;
  r.lse = load("lse");
  // Labels [N, K]: the row's K labels (and label-logit adjoints) at row·K + k.
  const int64_t k = spec.labelCount();
  auto atLabel = [&](int64_t i) {
    return k == 1 ? row : e.add(e.mul(row, e.index(k)), e.index(i));
  };
  if (Value buffer = a["labels"]; buffer && labels)
    for (int64_t i = 0; i < k; ++i)
      r.labels.push_back(e.loadLabel(buffer, atLabel(i)));
  if (!spec.isVocabReduce()) {
    r.g = load("grow");
    r.lseGrad = load("grad_lse");
    return r;
  }
  r.gLse = load(adjointName(loss::Statistic::lse));
  if (Value g = a[adjointName(loss::Statistic::label_logit)]; g && labels)
    for (int64_t i = 0; i < k; ++i)
      r.gLabels.push_back(e.load(g, atLabel(i)));
  r.gSum = load(adjointName(loss::Statistic::logit_sum));
  r.gTargetSum = load(adjointName(loss::Statistic::target_logit_sum));
  if (spec.gradientReadsTeacher()) {
    r.gCross = load(adjointName(loss::Statistic::cross_entropy));
    r.gReverse = load(adjointName(loss::Statistic::reverse_cross_entropy));
    r.teacherLse = load("teacher_lse");
    r.reverseValue = load("reverse_cross_entropy");
    r.gJsd = load(adjointName(loss::Statistic::jsd));
    r.gMixtureKl = load(adjointName(loss::Statistic::mixture_kl));
    r.mixtureKl = load("mixture_kl");
    r.mixtureP2 = load("mixture_p2");
    r.row = row;
    r.teacherX = a["teacher_x"];
    r.teacherW = a["teacher_w"];
    r.teacherBias = a["teacher_bias"];
    r.teacherDim = a["T"];
  }
  if (r.gTargetSum) {
    r.targets = a["targets"];
    r.targetBase = e.mul(row, a["V"]);
  }
  r.gMixtureP2 = load(adjointName(loss::Statistic::mixture_p2));
  r.gEntropy = load(adjointName(loss::Statistic::entropy));
  r.entropy = load("entropy");
  return r;
}

Value lossjit::emitRowActive(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row) {
  Value active;
  // (The teacher statistics' own adjoints reach no gradient: the teacher
  // is not differentiated.)
  SmallVector<Value> adjoints = {row.g,          row.lseGrad,    row.gLse,   row.gSum,
                                 row.gEntropy,   row.gTargetSum, row.gCross, row.gReverse,
                                 row.gJsd,       row.gMixtureKl, row.gMixtureP2};
  llvm::append_range(adjoints, row.gLabels);
  for (Value g : adjoints) {
    if (!g)
      continue;
    // UNE: a NaN adjoint counts as active (it must reach the gradients).
    Value nonzero = e.cmpF(arith::CmpFPredicate::UNE, g, e.real(0.0));
    active = active ? arith::OrIOp::create(e.builder(), e.location(), active, nonzero) : nonzero;
  }
  // (Every op has an adjoint; a row with none would be active.)
  return active ? active : e.cmpI(arith::CmpIPredicate::eq, e.index(0), e.index(0));
}

Value lossjit::loadColumnWeight(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a,
                                Value col) {
  if (!spec.isVocabReduce() || !spec.hasClassWeights)
    return {};
  return e.loadReal(a["class_weights"], col);
}

Value lossjit::emitRawGrad(KernelEmitter &e, const LceSpec &spec, const RowAdjoint &row, Value raw,
                           Value col, Value colWeight) {
  if (!spec.isVocabReduce())
    return emitLogitGrad(e, spec, raw, row.lse, row.g,
                         e.cmpI(arith::CmpIPredicate::eq, row.labels.front(), col), row.lseGrad);
  LogitAndSlope logit = emitLogitAndSlope(e, spec, raw);
  Value dz = e.real(0.0);
  if (row.lse) {
    Value logp = e.subF(logit.z, row.lse);
    Value p = e.exp(logp);
    if (row.gLse)
      dz = e.mulF(row.gLse, p);
    // −ḡ_H · p (log p + H)
    if (row.gEntropy)
      dz = e.subF(dz, e.mulF(e.mulF(row.gEntropy, p), e.addF(logp, row.entropy)));
    if (row.gCross || row.gReverse || row.gJsd || row.gMixtureKl) {
      Value u = row.teacherAt ? row.teacherAt(e, col)
                              : emitTeacherLogit(e, spec, row.teacherX, row.teacherW,
                                                 row.teacherBias, row.teacherDim, row.row, col,
                                                 row.teacherDot);
      Value logq = e.subF(u, row.teacherLse);
      // ḡ_x · (p − q)
      if (row.gCross)
        dz = e.fma(row.gCross, e.subF(p, e.exp(logq)), dz);
      // −ḡ_r · p (log q + X)
      if (row.gReverse)
        dz = e.subF(dz, e.mulF(e.mulF(row.gReverse, p), e.addF(logq, row.reverseValue)));
      if (row.gJsd || row.gMixtureKl)
        dz = emitMixtureGrad(e, spec, row, p, logp, logq, dz);
    }
  }
  // mixture_p2 is saved for mixture_kl's rule, not differentiated (its
  // gradient would need Σ p³/M², and that one another sum): a non-zero
  // adjoint makes the row's gradient NaN instead of silently dropping it.
  if (row.gMixtureP2)
    dz = e.addF(dz, e.select(e.cmpF(arith::CmpFPredicate::UNE, row.gMixtureP2, e.real(0.0)),
                             e.real(std::numeric_limits<double>::quiet_NaN()), e.real(0.0)));
  // One term per label, in label order (a column repeated among a row's
  // labels gets each of its adjoints).
  for (auto [label, g] : llvm::zip_equal(row.labels, row.gLabels))
    dz = e.addF(dz, e.select(e.cmpI(arith::CmpIPredicate::eq, label, col), g, e.real(0.0)));
  if (row.labelAt)
    dz = e.addF(dz, row.labelAt(e, col));
  if (row.gSum)
    dz = colWeight ? e.fma(row.gSum, colWeight, dz) : e.addF(dz, row.gSum);
  if (row.gTargetSum) {
    Value t = e.loadReal(row.targets, e.add(row.targetBase, col));
    Value factor = colWeight ? e.mulF(colWeight, t) : t;
    dz = e.fma(row.gTargetSum, factor, dz);
  }
  return logit.dzdraw ? e.mulF(dz, logit.dzdraw) : dz;
}
