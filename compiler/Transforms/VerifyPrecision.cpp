//===- VerifyPrecision.cpp - reject 16-bit math on the softmax path ------===//

#include "compiler/Transforms/Passes.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSVERIFYPRECISION
#include "compiler/Transforms/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;
using namespace lossjit::loss;

namespace {
/// The operand whose element type is the op's compute type, or null.
Value computeOperand(Operation *op) {
  if (auto o = dyn_cast<LogSoftmaxOp>(op))
    return o.getInput();
  if (auto o = dyn_cast<LogSumExpOp>(op))
    return o.getInput();
  if (auto o = dyn_cast<ScaleOp>(op))
    return o.getInput();
  if (auto o = dyn_cast<SoftcapOp>(op))
    return o.getInput();
  if (auto o = dyn_cast<NllOp>(op))
    return o.getLogp();
  if (auto o = dyn_cast<CrossEntropyOp>(op))
    return o.getLogits();
  return {};
}

struct VerifyPrecisionPass
    : lossjit::impl::LossVerifyPrecisionBase<VerifyPrecisionPass> {
  void runOnOperation() override {
    bool ok = true;
    getOperation()->walk([&](Operation *op) {
      if (auto fused = dyn_cast<LinearCrossEntropyOp>(op)) {
        if (fused.getCompute() != computeTypeFor(fused.getStorage())) {
          op->emitOpError() << "computes in " << fused.getCompute()
                          << "; the softmax path of " << fused.getStorage()
                          << " storage must compute in "
                          << computeTypeFor(fused.getStorage());
          ok = false;
        }
        return;
      }
      Value v = computeOperand(op);
      if (!v)
        return;
      Type elem = cast<RankedTensorType>(v.getType()).getElementType();
      if (elem == computeTypeFor(elem))
        return;
      op->emitOpError() << "computes in " << elem
                      << "; the softmax path must compute in f32 (f64 for f64 data; run "
                         "loss-make-precision-explicit first)";
      ok = false;
    });
    if (!ok)
      signalPassFailure();
  }
};
} // namespace
