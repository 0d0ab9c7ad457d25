//===- CpuSchedule.cpp - pieces the host schedules share ------------------===//

#include "compiler/Kernels/Schedules/CPU/CpuSchedule.h"

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
