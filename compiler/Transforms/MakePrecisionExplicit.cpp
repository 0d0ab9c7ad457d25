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
/// `type` with its element type replaced by f32.
RankedTensorType withF32(Type type) {
  auto t = cast<RankedTensorType>(type);
  return t.clone(Float32Type::get(t.getContext()));
}

/// Returns `value` itself when it is f32, else an explicit cast of it to f32.
Value castToF32(OpBuilder &b, Location loc, Value value) {
  auto t = cast<RankedTensorType>(value.getType());
  if (t.getElementType().isF32())
    return value;
  return CastOp::create(b, loc, withF32(t), value);
}

/// Makes a unary softmax-path op (log_softmax, logsumexp, scale, softcap)
/// compute in f32; a 16-bit result type is produced by an explicit narrowing
/// cast so every user sees the same type. Attributes are kept.
void widenUnary(Operation *op) {
  Value in = op->getOperand(0);
  if (cast<RankedTensorType>(in.getType()).getElementType().isF32())
    return;
  OpBuilder b(op);
  Value wide = castToF32(b, op->getLoc(), in);
  Type oldResultType = op->getResult(0).getType();
  OperationState state(op->getLoc(), op->getName());
  state.addOperands(wide);
  state.addTypes(withF32(oldResultType));
  state.addAttributes(op->getAttrs());
  Value replacement = b.create(state)->getResult(0);
  if (replacement.getType() != oldResultType)
    replacement = CastOp::create(b, op->getLoc(), oldResultType, replacement);
  op->getResult(0).replaceAllUsesWith(replacement);
  op->erase();
}

/// NLL-like ops already return f32; only their score operand is widened.
template <typename OpTy>
void widenScores(OpTy op, OpOperand &scores) {
  OpBuilder b(op);
  scores.set(castToF32(b, op.getLoc(), scores.get()));
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
