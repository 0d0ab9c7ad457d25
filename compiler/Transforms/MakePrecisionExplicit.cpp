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

/// Makes a unary softmax-like op compute in f32; a 16-bit result type is
/// produced by an explicit narrowing cast so every user sees the same type.
template <typename OpTy>
void widenUnary(OpTy op) {
  Value in = op.getInput();
  if (cast<RankedTensorType>(in.getType()).getElementType().isF32())
    return;
  OpBuilder b(op);
  Value wide = castToF32(b, op.getLoc(), in);
  Type oldResultType = op.getResult().getType();
  auto widened = OpTy::create(b, op.getLoc(), withF32(oldResultType), wide);
  Value replacement = widened.getResult();
  if (replacement.getType() != oldResultType)
    replacement = CastOp::create(b, op.getLoc(), oldResultType, replacement);
  op.getResult().replaceAllUsesWith(replacement);
  op.erase();
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
      if (isa<LogSoftmaxOp, LogSumExpOp, NllOp, CrossEntropyOp>(op))
        worklist.push_back(op);
    });
    for (Operation *op : worklist) {
      if (auto ls = dyn_cast<LogSoftmaxOp>(op))
        widenUnary(ls);
      else if (auto lse = dyn_cast<LogSumExpOp>(op))
        widenUnary(lse);
      else if (auto nll = dyn_cast<NllOp>(op))
        widenScores(nll, nll.getLogpMutable());
      else if (auto ce = dyn_cast<CrossEntropyOp>(op))
        widenScores(ce, ce.getLogitsMutable());
    }
  }
};
} // namespace
