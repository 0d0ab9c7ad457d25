//===- CpuSchedule.cpp - pieces the host schedules share ------------------===//

#include "compiler/Kernels/Schedules/CPU/CpuSchedule.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace lossjit;

SmallVector<Value> lossjit::forColumnBlocks(
    KernelEmitter &e, Value lo, Value hi, int64_t cols, ValueRange iters,
    const std::function<SmallVector<Value>(KernelEmitter &, Value, int64_t, ValueRange)> &body) {
  SmallVector<Value> carried(iters.begin(), iters.end());
  Value main = lo;
  if (cols > 1) {
    main = e.add(lo, e.mul(e.divUI(e.sub(hi, lo), e.index(cols)), e.index(cols)));
    carried = e.forLoop(
        lo, main, e.index(cols), carried,
        [&](KernelEmitter &be, Value c0, ValueRange it) { return body(be, c0, cols, it); });
  }
  return e.forLoop(main, hi, e.index(1), carried,
                   [&](KernelEmitter &be, Value c, ValueRange it) { return body(be, c, 1, it); });
}

Value lossjit::stackF32(KernelEmitter &e, Value count) {
  return memref::AllocaOp::create(e.builder(), e.location(),
                                  KernelSink::flat(e.builder().getF32Type()), ValueRange{count});
}

void CpuSchedule::dzInputs(KernelSignature &sig) const {
  sig.arg("x", flat(storage())).arg("w", flat(storage()));
  sig.argIf(spec.hasBias, "bias", flat(storage()));
  sig.arg("labels", flat(spec.labelType)).arg("lse", flat(f32())).arg("grow", flat(f32()));
  sig.argIf(spec.hasGradLse, "grad_lse", flat(f32()));
}

Fragment CpuSchedule::logits(KernelEmitter &e, const KernelArgs &a, const BlockTile &tile) const {
  Value d = a["D"];
  Fragment z = matmul.multiply(e, {a["x"], d}, {a["w"], d}, tile, e.index(0), d);
  if (Value bias = a["bias"])
    for (size_t j = 0; j < z.cols.size(); ++j) {
      Value bv = e.loadF32(bias, z.cols[j]);
      for (size_t i = 0; i < z.rows.size(); ++i)
        z.at(i, j) = e.addF(z.at(i, j), bv);
    }
  return z;
}

SmallVector<Value> CpuSchedule::rowGrads(KernelEmitter &e, const KernelArgs &a,
                                         const Fragment &raw) const {
  SmallVector<Value> dz(raw.values.size());
  for (size_t i = 0; i < raw.rows.size(); ++i) {
    Value row = raw.rows[i];
    Value lse = e.load(a["lse"], row), g = e.load(a["grow"], row);
    Value lseGrad = a["grad_lse"] ? e.load(a["grad_lse"], row) : Value();
    Value label = e.loadLabel(a["labels"], row);
    for (size_t j = 0; j < raw.cols.size(); ++j)
      dz[i * raw.cols.size() + j] =
          emitLogitGrad(e, spec, raw.at(i, j), lse, g,
                        e.cmpI(arith::CmpIPredicate::eq, label, raw.cols[j]), lseGrad);
  }
  return dz;
}

Value CpuSchedule::panelRows(KernelEmitter &e, Value d, int64_t most, int64_t budgetFloats) const {
  const int64_t br = tile.blockRows;
  Value fit = e.mul(e.divUI(e.divUI(e.index(budgetFloats), d), e.index(br)), e.index(br));
  Value capped = e.minUI(fit, e.index(most));
  return e.select(e.cmpI(arith::CmpIPredicate::ult, capped, e.index(br)), e.index(br), capped);
}
