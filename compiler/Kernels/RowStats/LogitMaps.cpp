//===- LogitMaps.cpp ------------------------------------------------------===//

#include "compiler/Kernels/RowStats/LogitMaps.h"

using namespace mlir;
using namespace lossjit;

namespace {
using Logit = LogitAndSlope;

/// z = softcap(scale · raw). tanh is built from the emitter's exp (exp2), never
/// math.tanh, which lowers to libdevice's __nv_tanhf on the GPU: with
/// a = |u|, E = exp(2a) and q = 2 / (E + 1) = 1 − tanh a,
///   tanh u = sign(u) · (1 − q)      and      1 − tanh² u = q · (2 − q).
/// The derivative is accurate to f32 rounding for every u (no 1 − t²
/// cancellation), and E = +inf for large |u| gives q = 0: tanh = ±1,
/// derivative 0, never inf/inf or NaN. 1 − q cancels for small a (q → 1:
/// an absolute error of ~1 ulp of 1, so a relative error that grows as a
/// shrinks), so below a = 0.625 tanh is the odd polynomial
///   a + a³·P(a²)
/// (Cephes' tanhf coefficients; ≤ 0.78 ulp over (0, 0.625] in f32, checked
/// by scripts/numerics/softcap-tanh.py), whose relative error stays bounded
/// down to the smallest a. Above, 1 − q is within 1.7 ulp. In f64 the
/// small branch is Cephes' tanh rational a + a³·P(a²)/Q(a²) (relative
/// error ~2.5e-16 there), so f64 data keeps f64 accuracy.
Value emitSmallTanh(KernelEmitter &e, Value a) {
  auto horner = [&](llvm::ArrayRef<double> highToLow, Value x) {
    Value p = e.real(highToLow.front());
    for (double c : highToLow.drop_front())
      p = e.addF(e.mulF(p, x), e.real(c));
    return p;
  };
  Value s = e.mulF(a, a);
  if (e.compute().isF64()) {
    static constexpr double kP[] = {-9.64399179425052238628e-1, -9.92877231001918586564e1,
                                    -1.61468768441708447952e3};
    static constexpr double kQ[] = {1.0, 1.12811678491632931402e2, 2.23548839060100448583e3,
                                    4.84406305325125486048e3};
    Value ratio = e.divF(horner(kP, s), horner(kQ, s));
    return e.addF(e.mulF(e.mulF(ratio, s), a), a);
  }
  static constexpr double kTanhPoly[] = {-5.70498872745e-3, 2.06390887954e-2,
                                         -5.37397155531e-2, 1.33314422036e-1,
                                         -3.33332819422e-1};
  return e.addF(e.mulF(e.mulF(horner(kTanhPoly, s), s), a), a);
}

Value emitTanhOfNonNegative(KernelEmitter &e, Value a, Value q) {
  Value small = emitSmallTanh(e, a);
  Value isSmall = e.cmpF(arith::CmpFPredicate::OLT, a, e.real(0.625));
  return e.select(isSmall, small, e.subF(e.real(1.0), q));
}

Logit emitLogitParts(KernelEmitter &e, const LceSpec &spec, Value raw, bool wantGrad) {
  Value scale = spec.logitScale == 1.0 ? Value() : e.real(spec.logitScale);
  Value s = scale ? e.mulF(raw, scale) : raw;
  if (spec.softcap <= 0.0)
    return {s, scale};
  Value cap = e.real(spec.softcap);
  Value zero = e.real(0.0), one = e.real(1.0), two = e.real(2.0);
  Value u = e.divF(s, cap);
  Value negative = e.cmpF(arith::CmpFPredicate::OLT, u, zero);
  Value a = e.select(negative, e.subF(zero, u), u);
  Value q = e.divF(two, e.addF(e.exp(e.addF(a, a)), one));
  Value capped = e.mulF(cap, emitTanhOfNonNegative(e, a, q));
  Value z = e.select(negative, e.subF(zero, capped), capped);
  if (!wantGrad)
    return {z, Value()};
  Value sech2 = e.mulF(q, e.subF(two, q));
  return {z, scale ? e.mulF(sech2, scale) : sech2};
}
} // namespace

Value lossjit::emitLogit(KernelEmitter &e, const LceSpec &spec, Value raw) {
  return emitLogitParts(e, spec, raw, /*wantGrad=*/false).z;
}

LogitAndSlope lossjit::emitLogitAndSlope(KernelEmitter &e, const LceSpec &spec, Value raw) {
  return emitLogitParts(e, spec, raw, /*wantGrad=*/true);
}

Value lossjit::emitLogitGrad(KernelEmitter &e, const LceSpec &spec, Value raw, Value lse, Value g,
                             Value isTarget, Value lseGrad) {
  Logit logit = emitLogitParts(e, spec, raw, /*wantGrad=*/true);
  Value p = e.exp(e.subF(logit.z, lse));
  Value target = e.select(isTarget, e.real(1.0), e.real(0.0));
  Value dz = e.mulF(g, e.subF(p, target));
  if (lseGrad)
    dz = e.fma(lseGrad, p, dz);
  return logit.dzdraw ? e.mulF(dz, logit.dzdraw) : dz;
}

Value lossjit::emitTeacherLogit(KernelEmitter &e, const LceSpec &spec, Value teacherX,
                                Value teacherW, Value teacherBias, Value t, Value row,
                                Value col, const DotProduct &dot) {
  Value xOff = e.mul(row, t), wOff = e.mul(col, t);
  Value raw = dot ? dot(e, teacherX, xOff, teacherW, wOff, t)
                  : e.dot(teacherX, xOff, teacherW, wOff, t);
  return emitTeacherFromRaw(e, spec, raw, teacherBias, col);
}

Value lossjit::emitTeacherFromRaw(KernelEmitter &e, const LceSpec &spec, Value raw,
                                  Value teacherBias, Value col) {
  if (teacherBias)
    raw = e.addF(raw, e.loadReal(teacherBias, col));
  return spec.teacherScale == 1.0 ? raw : e.mulF(raw, e.real(spec.teacherScale));
}
