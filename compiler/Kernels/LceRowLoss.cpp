//===- LceRowLoss.cpp -----------------------------------------------------===//

#include "compiler/Kernels/LceRowLoss.h"
#include "compiler/Kernels/LceGradient.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

/// The per-row loss given lse: 0 for an ignored row, lse − z_target for a
/// label in [0, V), NaN for a label outside it (never an out-of-bounds read).
Value lossjit::emitRowLoss(KernelEmitter &e, const LceSpec &spec, Value x, Value w,
              Value bias, Value label, Value row, Value lse, Value v, Value d) {
  Value ignored = e.cmpI(arith::CmpIPredicate::eq, label, e.index(spec.ignoreIndex));
  return e.ifElse(
      ignored, [](KernelEmitter &ie) { return ie.f32(0.0); },
      [&](KernelEmitter &ce) {
        Value inRange = ce.cmpI(arith::CmpIPredicate::ult, label, v);
        return ce.ifElse(
            inRange,
            [&](KernelEmitter &te) {
              Value z = te.dot(x, te.mul(row, d), w, te.mul(label, d), d);
              if (bias)
                z = te.addF(z, te.loadF32(bias, label));
              return te.subF(lse, emitLogit(te, spec, z));
            },
            [](KernelEmitter &ne) {
              return ne.f32(std::numeric_limits<double>::quiet_NaN());
            });
      });
}


void lossjit::emitRowFromRawLogits(KernelEmitter &e, const LceSpec &spec, Value raw,
                                   Value base, Value v, Value labels, Value row,
                                   Value lseOut, Value lossOut) {
  SmallVector<Value> st = e.forLoop(
      e.index(0), v, e.index(1), {e.negInf(), e.f32(0.0)},
      [&](KernelEmitter &le, Value j, ValueRange it) {
        LseState next = le.push({it[0], it[1]}, emitLogit(le, spec, le.load(raw, le.add(base, j))));
        return SmallVector<Value>{next.max, next.sum};
      });
  Value lse = e.finish({st[0], st[1]});
  e.store(lse, lseOut, row);
  Value label = e.loadLabel(labels, row);
  Value ignored = e.cmpI(arith::CmpIPredicate::eq, label, e.index(spec.ignoreIndex));
  Value loss = e.ifElse(
      ignored, [](KernelEmitter &ie) { return ie.f32(0.0); },
      [&](KernelEmitter &ce) {
        return ce.ifElse(
            ce.cmpI(arith::CmpIPredicate::ult, label, v),
            [&](KernelEmitter &te) {
              return te.subF(lse, emitLogit(te, spec, te.load(raw, te.add(base, label))));
            },
            [](KernelEmitter &ne) { return ne.f32(std::numeric_limits<double>::quiet_NaN()); });
      });
  e.store(loss, lossOut, row);
}
