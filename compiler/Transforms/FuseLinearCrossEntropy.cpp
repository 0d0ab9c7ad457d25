//===- FuseLinearCrossEntropy.cpp - linear → log_softmax → nll fusion ----===//

#include "compiler/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace lossjit {
#define GEN_PASS_DEF_LOSSFUSELINEARCROSSENTROPY
#include "compiler/Transforms/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;
using namespace lossjit::loss;

namespace {
/// The pieces of a fusable chain feeding one loss.nll.
struct ChainMatch {
  LinearOp linear;
  double logitScale = 1.0; ///< product of the loss.scale factors on the chain.
  double softcap = 0.0;    ///< the loss.softcap cap, 0 without one.
};

/// Walks back through explicit casts that nobody else uses. The fused op
/// computes in f32 end to end, so dropping intermediate roundings only makes
/// the result more precise; a cast with another user must stay materialized.
Value skipCasts(Value v, std::string &why) {
  while (auto c = v.getDefiningOp<CastOp>()) {
    if (!c->hasOneUse()) {
      why = "a loss.cast on the chain has another user";
      return {};
    }
    v = c.getInput();
  }
  return v;
}

/// A logit transform whose result is needed elsewhere cannot be fused.
bool onlyUse(Operation *op, StringRef name, std::string &why) {
  if (op->hasOneUse())
    return true;
  why = ("the " + name + " result has another user, so the [N,V] tensor must be "
         "materialized").str();
  return false;
}

/// Matches nll(log_softmax([cast]([softcap]([scale]([cast](linear(x, w[, b]))))))),
/// casts anywhere, consecutive scales multiplied; on failure `why` says
/// what blocked the fusion.
FailureOr<ChainMatch> matchChain(NllOp nll, std::string &why) {
  Value v = skipCasts(nll.getLogp(), why);
  if (!v)
    return failure();
  auto ls = v.getDefiningOp<LogSoftmaxOp>();
  if (!ls) {
    why = "log-probabilities are not produced by loss.log_softmax";
    return failure();
  }
  if (!ls->hasOneUse()) {
    why = "the log-probabilities have another user, so the [N,V] tensor must "
          "be materialized";
    return failure();
  }
  ChainMatch m;
  bool sawScale = false;
  // From the softmax back to the linear layer: softcap first, then scales.
  for (v = skipCasts(ls.getInput(), why); v; v = skipCasts(v, why)) {
    if (auto cap = v.getDefiningOp<SoftcapOp>()) {
      if (sawScale) {
        why = "a loss.scale follows the loss.softcap; the fused op scales the "
              "logits before capping them (softcap(z * s)), so the scale "
              "must come first";
        return failure();
      }
      if (m.softcap != 0.0) {
        why = "the chain has two loss.softcap ops; the fused op applies one";
        return failure();
      }
      if (!onlyUse(cap, "loss.softcap", why))
        return failure();
      m.softcap = cap.getCap().convertToDouble();
      v = cap.getInput();
      continue;
    }
    if (auto scale = v.getDefiningOp<ScaleOp>()) {
      if (!onlyUse(scale, "loss.scale", why))
        return failure();
      m.logitScale *= scale.getFactor().convertToDouble();
      sawScale = true;
      v = scale.getInput();
      continue;
    }
    break;
  }
  if (!v)
    return failure();
  auto lin = v.getDefiningOp<LinearOp>();
  if (!lin) {
    why = "logits are not produced by loss.linear";
    return failure();
  }
  if (!lin->hasOneUse()) {
    why = "the logits have another user, so the [N,V] tensor must be "
          "materialized";
    return failure();
  }
  if (!std::isfinite(m.logitScale) || m.logitScale == 0) {
    why = "the product of the loss.scale factors is not a finite nonzero f64";
    return failure();
  }
  m.linear = lin;
  return m;
}

struct FuseNllChain : OpRewritePattern<NllOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(NllOp nll,
                                PatternRewriter &rewriter) const override {
    std::string why;
    FailureOr<ChainMatch> m = matchChain(nll, why);
    if (failed(m))
      return rewriter.notifyMatchFailure(nll, why);
    LinearOp lin = m->linear;
    auto x = cast<RankedTensorType>(lin.getInput().getType());
    Type compute = computeTypeFor(x.getElementType());
    auto lseType = RankedTensorType::get({x.getDimSize(0)}, compute);
    auto fused = LinearCrossEntropyOp::create(
        rewriter, nll.getLoc(), nll.getResult().getType(), lseType,
        lin.getInput(), lin.getWeight(), nll.getLabels(), lin.getBias(),
        nll.getIgnoreIndexAttr(), nll.getReductionAttr(),
        TypeAttr::get(x.getElementType()), TypeAttr::get(compute),
        rewriter.getF64FloatAttr(m->logitScale), rewriter.getF64FloatAttr(m->softcap));
    rewriter.replaceOp(nll, fused.getLoss());
    return success();
  }
};

struct FuseLinearCrossEntropyPass
    : lossjit::impl::LossFuseLinearCrossEntropyBase<FuseLinearCrossEntropyPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseLinearCrossEntropyPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) {
      getOperation()->emitError("fusion patterns did not converge");
      return signalPassFailure();
    }
    if (!emitRemarks)
      return;
    getOperation()->walk([](NllOp nll) {
      std::string why;
      if (failed(matchChain(nll, why)))
        nll.emitRemark() << "not fused into loss.linear_cross_entropy: " << why;
    });
  }
};
} // namespace

void lossjit::populateFuseLinearCrossEntropyPatterns(
    RewritePatternSet &patterns) {
  CrossEntropyOp::getCanonicalizationPatterns(patterns, patterns.getContext());
  patterns.add<FuseNllChain>(patterns.getContext());
}
