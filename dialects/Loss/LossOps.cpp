//===- LossOps.cpp - verifiers and canonicalizations of `loss` ops -------===//

#include "dialects/Loss/LossOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace lossjit::loss;

bool lossjit::loss::isStorageType(Type type) {
  return type.isF16() || type.isBF16() || type.isF32();
}

StringRef lossjit::loss::storageTypeName(Type type) {
  if (type.isF16())
    return "f16";
  if (type.isBF16())
    return "bf16";
  if (type.isF32())
    return "f32";
  return "unsupported";
}

std::string lossjit::loss::formatF64(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  if (value == 0)
    return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits from to_chars, laid out by repr()'s rules:
  // scientific when the decimal point is before the 4th zero or after the
  // 16th digit, else positional with at least one fractional digit.
  char buffer[64];
  auto done = std::to_chars(buffer, buffer + sizeof(buffer), std::fabs(value),
                            std::chars_format::scientific);
  std::string sci(buffer, done.ptr); // d[.ddd]e±XX
  size_t e = sci.find('e');
  int exp10 = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.')
      digits += c;
  int point = exp10 + 1; // value = 0.digits × 10^point
  std::string out;
  if (point <= -4 || point > 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char tail[16];
    std::snprintf(tail, sizeof(tail), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += tail;
  } else if (point <= 0) {
    out = "0." + std::string(-point, '0') + digits;
  } else if (static_cast<size_t>(point) >= digits.size()) {
    out = digits + std::string(point - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, point) + "." + digits.substr(point);
  }
  return value < 0 ? "-" + out : out;
}

namespace {
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
} // namespace

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  if (failed(verifyLinearOperands(*this, getInput(), getWeight(), getBias())) ||
      failed(expectRank(*this, getResult(), 2, "result ([N,V])")))
    return failure();
  auto x = rankedType(getInput()), w = rankedType(getWeight());
  auto r = rankedType(getResult());
  if (r.getElementType() != x.getElementType())
    return emitOpError() << "result keeps the storage type of input ("
                         << x.getElementType() << "), got "
                         << r.getElementType() << "; use loss.cast to change it";
  if (failed(expectDim(*this, r.getDimSize(0), x.getDimSize(0),
                       "result rows differ from input rows N")))
    return failure();
  return expectDim(*this, r.getDimSize(1), w.getDimSize(0),
                   "result columns differ from weight rows V");
}

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  auto in = rankedType(getInput()), out = rankedType(getResult());
  if (in.getRank() != out.getRank())
    return emitOpError() << "changes only the element type; rank " << in.getRank()
                         << " vs " << out.getRank();
  for (auto [a, b] : llvm::zip(in.getShape(), out.getShape()))
    if (failed(expectDim(*this, a, b, "changes only the element type; shapes differ")))
      return failure();
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// ScaleOp / SoftcapOp
//===----------------------------------------------------------------------===//

LogicalResult ScaleOp::verify() {
  double factor = getFactor().convertToDouble();
  if (!std::isfinite(factor) || factor == 0)
    return emitOpError() << "factor must be finite and nonzero, got " << formatF64(factor);
  return verifySameType(*this, getInput(), getResult());
}

OpFoldResult ScaleOp::fold(FoldAdaptor) {
  if (getFactor().convertToDouble() == 1.0 && getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult SoftcapOp::verify() {
  double cap = getCap().convertToDouble();
  if (!std::isfinite(cap) || cap <= 0)
    return emitOpError() << "cap must be positive and finite, got " << formatF64(cap);
  return verifySameType(*this, getInput(), getResult());
}

//===----------------------------------------------------------------------===//
// LogSoftmaxOp / LogSumExpOp
//===----------------------------------------------------------------------===//

LogicalResult LogSoftmaxOp::verify() {
  if (rankedType(getInput()).getRank() < 1)
    return emitOpError() << "needs at least one axis (the vocabulary)";
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal input type "
                         << getInput().getType() << ", got "
                         << getResult().getType();
  return success();
}

LogicalResult LogSumExpOp::verify() {
  auto in = rankedType(getInput()), out = rankedType(getResult());
  if (in.getRank() < 1)
    return emitOpError() << "needs at least one axis (the vocabulary)";
  if (out.getRank() != in.getRank() - 1)
    return emitOpError() << "drops the last axis: result rank must be "
                         << in.getRank() - 1 << ", got " << out.getRank();
  if (out.getElementType() != in.getElementType())
    return emitOpError() << "result element type must equal input's ("
                         << in.getElementType() << ")";
  for (auto [a, b] : llvm::zip(in.getShape().drop_back(), out.getShape()))
    if (failed(expectDim(*this, a, b, "leading dims of input and result differ")))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// NllOp / CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult NllOp::verify() {
  return verifyNllLike(*this, getLogp(), "logp ([N,V])", getLabels(), getResult(),
                       getReduction());
}

LogicalResult CrossEntropyOp::verify() {
  return verifyNllLike(*this, getLogits(), "logits ([N,V])", getLabels(), getResult(),
                       getReduction());
}

namespace {
/// cross_entropy(z, y) → nll(log_softmax(z), y) with the same options.
struct ExpandCrossEntropy : OpRewritePattern<CrossEntropyOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CrossEntropyOp op,
                                PatternRewriter &rewriter) const override {
    Value logits = op.getLogits();
    auto logp = LogSoftmaxOp::create(rewriter, op.getLoc(), logits.getType(),
                                     logits);
    rewriter.replaceOpWithNewOp<NllOp>(op, op.getResult().getType(), logp,
                                       op.getLabels(), op.getIgnoreIndexAttr(),
                                       op.getReductionAttr());
    return success();
  }
};
} // namespace

void CrossEntropyOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                 MLIRContext *context) {
  results.add<ExpandCrossEntropy>(context);
}

//===----------------------------------------------------------------------===//
// LinearCrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult LinearCrossEntropyOp::verify() {
  if (failed(verifyLinearOperands(*this, getInput(), getWeight(), getBias())) ||
      failed(verifyNllLike(*this, getInput(), "input (x, [N,D])", getLabels(), getLoss(),
                           getReduction())))
    return failure();
  Type storage = getStorage();
  if (!isStorageType(storage))
    return emitOpError() << "storage must be f16, bf16 or f32, got " << storage;
  Type elem = rankedType(getInput()).getElementType();
  if (elem != storage)
    return emitOpError() << "storage attribute " << storage
                         << " differs from the input element type " << elem;
  if (!getCompute().isF32())
    return emitOpError() << "compute must be f32 (fp16/bf16 storage never "
                            "means fp16 math), got "
                         << getCompute();
  if (failed(expectRank(*this, getLse(), 1, "lse ([N] f32)")) ||
      failed(expectDim(*this, rankedType(getLse()).getDimSize(0),
                       rankedType(getInput()).getDimSize(0),
                       "lse length differs from row count N")))
    return failure();
  return verifyLogitTransforms(*this, getLogitScale().convertToDouble(),
                               getSoftcap().convertToDouble());
}

//===----------------------------------------------------------------------===//
// LinearCrossEntropyGradOp
//===----------------------------------------------------------------------===//

LogicalResult LinearCrossEntropyGradOp::verify() {
  if (failed(verifyLinearOperands(*this, getInput(), getWeight(), getBias())) ||
      failed(expectRank(*this, getLabels(), 1, "labels ([N])")) ||
      failed(expectRank(*this, getLse(), 1, "lse ([N] f32)")))
    return failure();
  auto x = rankedType(getInput()), w = rankedType(getWeight());
  int64_t n = x.getDimSize(0);
  if (failed(expectDim(*this, rankedType(getLabels()).getDimSize(0), n,
                       "row count N of labels differs")) ||
      failed(expectDim(*this, rankedType(getLse()).getDimSize(0), n,
                       "lse length differs from row count N")))
    return failure();
  int64_t gradRank = getReduction() == Reduction::none ? 1 : 0;
  if (failed(expectRank(*this, getGradLoss(), gradRank,
                        getReduction() == Reduction::none
                            ? "grad_loss of reduction = none ([N])"
                            : "grad_loss of reduction = mean/sum (0-d)")))
    return failure();
  if (gradRank == 1 &&
      failed(expectDim(*this, rankedType(getGradLoss()).getDimSize(0), n,
                       "grad_loss length differs from row count N")))
    return failure();
  if (Value gradLse = getGradLse())
    if (failed(expectRank(*this, gradLse, 1, "grad_lse ([N] f32)")) ||
        failed(expectDim(*this, rankedType(gradLse).getDimSize(0), n,
                         "grad_lse length differs from row count N")))
      return failure();
  Type storage = getStorage();
  if (!isStorageType(storage) || x.getElementType() != storage)
    return emitOpError() << "storage attribute " << storage
                         << " must be f16, bf16 or f32 and equal the input "
                            "element type "
                         << x.getElementType();
  if (!getCompute().isF32())
    return emitOpError() << "compute must be f32, got " << getCompute();
  StringRef strategy = getStrategy();
  if (strategy != "auto" && strategy != "chunked" && strategy != "recompute")
    return emitOpError() << "strategy must be auto, chunked or recompute, got '"
                         << strategy << "'";
  if (getWorkspaceBytes() < 1)
    return emitOpError() << "workspace_bytes must be positive, got "
                         << getWorkspaceBytes();
  if (failed(verifyLogitTransforms(*this, getLogitScale().convertToDouble(),
                                   getSoftcap().convertToDouble())))
    return failure();
  return verifyGradientResults(*this, getInput(), getWeight(), getBias(), storage,
                               getNeedsInput(), getNeedsWeight(), getGradients());
}

//===----------------------------------------------------------------------===//
// LinearCrossEntropyWithGradOp
//===----------------------------------------------------------------------===//

LogicalResult LinearCrossEntropyWithGradOp::verify() {
  if (failed(verifyLinearOperands(*this, getInput(), getWeight(), getBias())) ||
      failed(verifyNllLike(*this, getInput(), "input (x, [N,D])", getLabels(), getLoss(),
                           getReduction())))
    return failure();
  if (getReduction() == Reduction::none)
    return emitOpError() << "needs reduction mean or sum: with none every row has "
                            "its own loss gradient, so the gradients cannot be "
                            "rescaled after the fact (use "
                            "loss.linear_cross_entropy_grad)";
  Type storage = getStorage();
  if (!isStorageType(storage) || rankedType(getInput()).getElementType() != storage)
    return emitOpError() << "storage attribute " << storage
                         << " must be f16, bf16 or f32 and equal the input "
                            "element type "
                         << rankedType(getInput()).getElementType();
  if (!getCompute().isF32())
    return emitOpError() << "compute must be f32, got " << getCompute();
  if (getWorkspaceBytes() < 1)
    return emitOpError() << "workspace_bytes must be positive, got "
                         << getWorkspaceBytes();
  if (failed(verifyLogitTransforms(*this, getLogitScale().convertToDouble(),
                                   getSoftcap().convertToDouble())) ||
      failed(expectRank(*this, getLse(), 1, "lse ([N] f32)")) ||
      failed(expectDim(*this, rankedType(getLse()).getDimSize(0),
                       rankedType(getInput()).getDimSize(0),
                       "lse length differs from row count N")))
    return failure();
  return verifyGradientResults(*this, getInput(), getWeight(), getBias(), storage,
                               getNeedsInput(), getNeedsWeight(), getGradients());
}

#define GET_OP_CLASSES
#include "dialects/Loss/LossOps.cpp.inc"
