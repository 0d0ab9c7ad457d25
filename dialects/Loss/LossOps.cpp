//===- LossOps.cpp - verifiers and canonicalizations of `loss` ops -------===//

#include "dialects/Loss/LossOps.h"
#include "dialects/Loss/VerifyUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace lossjit::loss;
using namespace lossjit::loss::detail;

bool lossjit::loss::isStorageType(Type type) {
  return type.isF16() || type.isBF16() || type.isF32() || type.isF64();
}

Type lossjit::loss::computeTypeFor(Type storage) {
  if (storage.isF64())
    return storage;
  return Float32Type::get(storage.getContext());
}

StringRef lossjit::loss::storageTypeName(Type type) {
  if (type.isF16())
    return "f16";
  if (type.isBF16())
    return "bf16";
  if (type.isF32())
    return "f32";
  if (type.isF64())
    return "f64";
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
  if (failed(verifyStorageAndCompute(*this, storage, getCompute(), getInput())))
    return failure();
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
  if (failed(verifyStorageAndCompute(*this, storage, getCompute(), getInput())))
    return failure();
  StringRef strategy = getStrategy();
  if (strategy != "auto" && strategy != "chunked" && strategy != "vocab_chunked" &&
      strategy != "recompute")
    return emitOpError() << "strategy must be auto, chunked, vocab_chunked or recompute, got '"
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
  if (failed(verifyStorageAndCompute(*this, storage, getCompute(), getInput())))
    return failure();
  StringRef strategy = getStrategy();
  if (strategy != "auto" && strategy != "chunked" && strategy != "vocab_chunked")
    return emitOpError() << "strategy must be auto, chunked or vocab_chunked (the fused "
                            "forward+backward has no recompute schedule), got '"
                         << strategy << "'";
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

//===----------------------------------------------------------------------===//
// FusedOpInterface of the cross-entropy ops
//===----------------------------------------------------------------------===//

KernelPass LinearCrossEntropyOp::getKernelPass() { return KernelPass::forward; }
StringRef LinearCrossEntropyOp::getGradientStrategy() { return ""; }
KernelPass LinearCrossEntropyGradOp::getKernelPass() { return KernelPass::backward; }
StringRef LinearCrossEntropyGradOp::getGradientStrategy() { return getStrategy(); }
KernelPass LinearCrossEntropyWithGradOp::getKernelPass() { return KernelPass::forward_backward; }
StringRef LinearCrossEntropyWithGradOp::getGradientStrategy() { return getStrategy(); }

#define GET_OP_CLASSES
#include "dialects/Loss/LossOps.cpp.inc"
