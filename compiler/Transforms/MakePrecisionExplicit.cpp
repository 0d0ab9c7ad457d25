//===- MakePrecisionExplicit.cpp - f32 compute via explicit casts --------===//

#include "compiler/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSMAKEPRECISIONEXPLICIT
#include "compiler/Transforms/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;
using namespace lossjit::loss;

namespace {
/// `type` with its element type replaced by its compute type (f32, or f64
/// for f64).
RankedTensorType withCompute(Type type) {
  auto t = cast<RankedTensorType>(type);
  return t.clone(computeTypeFor(t.getElementType()));
}

/// Whether `value`'s elements are already of their compute type.
bool computesInPlace(Value value) {
  Type elem = cast<RankedTensorType>(value.getType()).getElementType();
  return elem == computeTypeFor(elem);
}

/// Returns `value` itself when it is of its compute type, else an explicit
/// cast of it to f32.
Value castToCompute(OpBuilder &b, Location loc, Value value) {
  if (computesInPlace(value))
    return value;
  return CastOp::create(b, loc, withCompute(value.getType()), value);
}

/// Makes a unary softmax-path op (log_softmax, logsumexp, scale, softcap)
/// compute in f32; a 16-bit result type is produced by an explicit narrowing
/// cast so every user sees the same type. Attributes are kept.
void widenUnary(Operation *op) {
  Value in = op->getOperand(0);
  if (computesInPlace(in))
    return;
  OpBuilder b(op);
  Value wide = castToCompute(b, op->getLoc(), in);
  Type oldResultType = op->getResult(0).getType();
  OperationState state(op->getLoc(), op->getName());
  state.addOperands(wide);
  state.addTypes(withCompute(oldResultType));
  state.addAttributes(op->getAttrs());
  Value replacement = b.create(state)->getResult(0);
  if (replacement.getType() != oldResultType)
    replacement = CastOp::create(b, op->getLoc(), oldResultType, replacement);
  op->getResult(0).replaceAllUsesWith(replacement);
  op->erase();
}

/// NLL-like ops already return the compute type; only their score operand
/// is widened.
template <typename OpTy>
void widenScores(OpTy op, OpOperand &scores) {
  OpBuilder b(op);
  scores.set(castToCompute(b, op.getLoc(), scores.get()));
}

struct MakePrecisionExplicitPass
    : lossjit::impl::LossMakePrecisionExplicitBase<MakePrecisionExplicitPass> {
  void runOnOperation() override {
    SmallVector<Operation *> worklist;
    getOperation()->walk([&](Operation *op) {
      if (isa<LogSoftmaxOp, LogSumExpOp, ScaleOp, SoftcapOp, NllOp, CrossEntropyOp>(op))
        worklist.push_back(op);
    });
    for (Operation *op : worklist) {
      if (isa<LogSoftmaxOp, LogSumExpOp, ScaleOp, SoftcapOp>(op))
        widenUnary(op);
      else if (auto nll = dyn_cast<NllOp>(op))
        widenScores(nll, nll.getLogpMutable());
      else if (auto ce = dyn_cast<CrossEntropyOp>(op))
        widenScores(ce, ce.getLogitsMutable());
    }
  }
};
} // namespace
