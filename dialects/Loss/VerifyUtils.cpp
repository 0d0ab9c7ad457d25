//===- VerifyUtils.cpp ----------------------------------------------------===//

#include "dialects/Loss/VerifyUtils.h"
#include "dialects/Loss/LossOps.h"

#include <cmath>

using namespace mlir;
using namespace lossjit::loss;

namespace lossjit::loss::detail {
/// Two dimensions agree unless both are static and differ.
bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string dimString(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Checks `value` has `rank`; `what` names the operand in the diagnostic.
LogicalResult expectRank(Operation *op, Value value, int64_t rank,
                         StringRef what) {
  int64_t got = rankedType(value).getRank();
  if (got == rank)
    return success();
  return op->emitOpError() << what << " must have rank " << rank << ", got rank "
                           << got << " (" << value.getType() << ")";
}

LogicalResult expectDim(Operation *op, int64_t a, int64_t b, StringRef what) {
  if (dimsCompatible(a, b))
    return success();
  return op->emitOpError() << what << ": " << dimString(a) << " vs "
                           << dimString(b);
}

/// Shared checks of x [N,D], w [V,D], optional b [V] (linear and fused op).
LogicalResult verifyLinearOperands(Operation *op, Value input, Value weight,
                                   Value bias) {
  if (failed(expectRank(op, input, 2, "input (x, [N,D])")) ||
      failed(expectRank(op, weight, 2, "weight (w, [V,D])")))
    return failure();
  auto x = rankedType(input), w = rankedType(weight);
  if (failed(expectDim(op, x.getDimSize(1), w.getDimSize(1),
                       "reduction dim D of input and weight differ")))
    return failure();
  if (x.getElementType() != w.getElementType())
    return op->emitOpError() << "input and weight must share one storage type, "
                             << "got " << x.getElementType() << " and "
                             << w.getElementType();
  if (!bias)
    return success();
  if (failed(expectRank(op, bias, 1, "bias (b, [V])")))
    return failure();
  auto b = rankedType(bias);
  if (b.getElementType() != x.getElementType())
    return op->emitOpError() << "bias must have the storage type of input ("
                             << x.getElementType() << "), got "
                             << b.getElementType();
  return expectDim(op, b.getDimSize(0), w.getDimSize(0),
                   "bias length differs from vocabulary size V of weight");
}

/// Shared checks of NLL-style ops: scores [N,V], labels [N], result by reduction.
LogicalResult verifyNllLike(Operation *op, Value scores, StringRef scoresWhat,
                            Value labels, Value result, Reduction reduction) {
  if (failed(expectRank(op, scores, 2, scoresWhat)) ||
      failed(expectRank(op, labels, 1, "labels ([N])")))
    return failure();
  auto s = rankedType(scores), l = rankedType(labels);
  if (failed(expectDim(op, s.getDimSize(0), l.getDimSize(0),
                       "row count N of labels differs")))
    return failure();
  auto r = rankedType(result);
  Type compute = computeTypeFor(s.getElementType());
  if (r.getElementType() != compute)
    return op->emitOpError() << "result must be " << compute << " (the compute type of "
                             << s.getElementType() << "), got " << r.getElementType();
  if (reduction == Reduction::none) {
    if (failed(expectRank(op, result, 1, "result of reduction = none")))
      return failure();
    return expectDim(op, r.getDimSize(0), s.getDimSize(0),
                     "result length differs from row count N");
  }
  return expectRank(op, result, 0, "result of reduction = mean/sum");
}

/// The logit transforms of the fused ops: z = softcap(logit_scale · raw).
LogicalResult verifyLogitTransforms(Operation *op, double logitScale, double softcap) {
  if (!std::isfinite(logitScale) || logitScale == 0)
    return op->emitOpError() << "logit_scale must be finite and nonzero, got "
                             << formatF64(logitScale);
  if (!std::isfinite(softcap) || softcap < 0)
    return op->emitOpError() << "softcap must be 0 (none) or positive and finite, got "
                             << formatF64(softcap);
  return success();
}

/// Element-wise ops keep their operand's type exactly.
LogicalResult verifySameType(Operation *op, Value input, Value result) {
  if (input.getType() == result.getType())
    return success();
  return op->emitOpError() << "is element-wise: result type must equal input type "
                           << input.getType() << ", got " << result.getType();
}

/// Results of the gradient ops, in order: grad_input (if needed),
/// grad_weight (if needed), grad_bias (with a bias and grad_weight); each of
/// the input's storage type and the shape of what it differentiates.
LogicalResult verifyGradientResults(Operation *op, Value input, Value weight,
                                    Value bias, Type storage, bool needsInput,
                                    bool needsWeight, ValueRange gradients) {
  if (!needsInput && !needsWeight)
    return op->emitOpError() << "computes nothing: needs_input and needs_weight "
                                "are both false";
  SmallVector<std::pair<StringRef, RankedTensorType>> expected;
  if (needsInput)
    expected.push_back({"grad_input", rankedType(input)});
  if (needsWeight) {
    expected.push_back({"grad_weight", rankedType(weight)});
    if (bias)
      expected.push_back({"grad_bias", rankedType(bias)});
  }
  if (gradients.size() != expected.size())
    return op->emitOpError() << "expects " << expected.size()
                             << " gradient results for needs_input=" << needsInput
                             << " needs_weight=" << needsWeight
                             << (bias ? " with bias" : "") << ", got "
                             << gradients.size();
  for (auto [result, want] : llvm::zip(gradients, expected)) {
    auto got = rankedType(result);
    if (got.getElementType() != storage || got.getRank() != want.second.getRank())
      return op->emitOpError() << want.first << " must be a rank-"
                               << want.second.getRank() << " tensor of " << storage
                               << ", got " << result.getType();
    for (auto [a, b] : llvm::zip(got.getShape(), want.second.getShape()))
      if (failed(expectDim(op, a, b, (want.first + " shape differs").str())))
        return failure();
  }
  return success();
}

LogicalResult verifyStorageAndCompute(Operation *op, Type storage, Type compute, Value input) {
  Type elem = rankedType(input).getElementType();
  if (!isStorageType(storage) || elem != storage)
    return op->emitOpError() << "storage attribute " << storage
                             << " must be f16, bf16, f32 or f64 and equal the input element "
                                "type "
                             << elem;
  if (compute != computeTypeFor(storage))
    return op->emitOpError() << "compute must be " << computeTypeFor(storage) << " for "
                             << storage
                             << " storage (fp16/bf16 storage never means fp16 math; f64 "
                                "storage computes in f64), got "
                             << compute;
  // Row values (lse, losses, statistics, adjoints, class weights) are of
  // the compute type: any f32/f64 tensor that is not of the storage type.
  auto check = [&](Value v, StringRef role, unsigned i) -> LogicalResult {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t || t.getElementType() == storage || t.getElementType() == compute ||
        !(t.getElementType().isF32() || t.getElementType().isF64()))
      return success();
    return op->emitOpError() << role << " #" << i << " is " << t.getElementType()
                             << ": row values must be of the compute type " << compute;
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check(v, "operand", i)))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check(v, "result", i)))
      return failure();
  return success();
}

} // namespace lossjit::loss::detail
