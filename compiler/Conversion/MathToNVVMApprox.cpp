//===- MathToNVVMApprox.cpp - exp2/log2 → ex2/lg2.approx.f32 --------------===//

#include "compiler/Conversion/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSMATHTONVVMAPPROX
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// Rewrites a scalar f32 math op into a call of an LLVM/NVVM intrinsic.
template <typename MathOp>
struct ToIntrinsic : OpRewritePattern<MathOp> {
  ToIntrinsic(MLIRContext *ctx, StringRef intrinsic)
      : OpRewritePattern<MathOp>(ctx), intrinsic(intrinsic) {}
  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.getType().isF32())
      return rewriter.notifyMatchFailure(
          op, "only scalar f32 has an approx intrinsic; other types keep the "
              "libdevice path");
    auto call = LLVM::CallIntrinsicOp::create(
        rewriter, op.getLoc(), op.getType(), rewriter.getStringAttr(intrinsic),
        op->getOperands());
    rewriter.replaceOp(op, call.getResults());
    return success();
  }
  std::string intrinsic;
};

struct MathToNVVMApproxPass
    : lossjit::impl::LossMathToNVVMApproxBase<MathToNVVMApproxPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathToNVVMApproxPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void lossjit::populateMathToNVVMApproxPatterns(RewritePatternSet &patterns) {
  MLIRContext *ctx = patterns.getContext();
  // Names as LLVM 22 spells them: ex2 is overloaded on its type, lg2 is not.
  patterns.add<ToIntrinsic<math::Exp2Op>>(ctx, "llvm.nvvm.ex2.approx.f32");
  patterns.add<ToIntrinsic<math::Log2Op>>(ctx, "llvm.nvvm.lg2.approx.f");
  // convert-gpu-to-nvvm would turn math.fma into libdevice's __nv_fmaf,
  // which only links when CUDA_HOME happens to point at libdevice; the
  // generic intrinsic becomes fma.rn.f32 directly.
  patterns.add<ToIntrinsic<math::FmaOp>>(ctx, "llvm.fma.f32");
}
