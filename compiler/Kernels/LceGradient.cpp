//===- LceGradient.cpp ----------------------------------------------------===//

#include "compiler/Kernels/LceGradient.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

Value lossjit::emitGradScale(KernelEmitter &e, const LceSpec &spec, Value gradLoss,
                             Value countI32) {
  if (spec.reduction == loss::Reduction::none)
    return {};
  Value g = e.load(gradLoss, e.index(0));
  if (spec.reduction == loss::Reduction::sum)
    return g;
  Value count = arith::SIToFPOp::create(e.builder(), e.location(),
                                        e.builder().getF32Type(), countI32);
  return e.divF(g, count);
}

Value lossjit::emitRowFactor(KernelEmitter &e, const LceSpec &spec, Value labels,
                             Value gradLoss, Value scale, Value row, Value v) {
  Value label = e.loadLabel(labels, row);
  Value ignored = e.cmpI(arith::CmpIPredicate::eq, label, e.index(spec.ignoreIndex));
  Value inRange = e.cmpI(arith::CmpIPredicate::ult, label, v);
  Value g = spec.reduction == loss::Reduction::none ? e.load(gradLoss, row) : scale;
  Value valid = e.select(inRange, g, e.f32(std::numeric_limits<double>::quiet_NaN()));
  return e.select(ignored, e.f32(0.0), valid);
}

Value lossjit::emitLogit(KernelEmitter &e, const LceSpec &spec, Value raw) {
  (void)e;
  (void)spec;
  return raw;
}

Value lossjit::emitLogitGrad(KernelEmitter &e, const LceSpec &spec, Value raw, Value lse,
                             Value g, Value isTarget) {
  Value z = emitLogit(e, spec, raw);
  Value p = e.exp(e.subF(z, lse));
  Value target = e.select(isTarget, e.f32(1.0), e.f32(0.0));
  return e.mulF(g, e.subF(p, target));
}
