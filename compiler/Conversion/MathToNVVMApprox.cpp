//===- MathToNVVMApprox.cpp - exp2/log2 → ex2/lg2.approx.f32; f64 expanded ===//

#include "compiler/Conversion/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSMATHTONVVMAPPROX
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// Rewrites a scalar f32 (or, with an f64 name, f64) math op into a call of
/// an LLVM/NVVM intrinsic.
template <typename MathOp>
struct ToIntrinsic : OpRewritePattern<MathOp> {
  ToIntrinsic(MLIRContext *ctx, StringRef f32Intrinsic, StringRef f64Intrinsic = "")
      : OpRewritePattern<MathOp>(ctx), f32Intrinsic(f32Intrinsic), f64Intrinsic(f64Intrinsic) {}
  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    StringRef intrinsic = type.isF32()                            ? StringRef(f32Intrinsic)
                          : type.isF64() && !f64Intrinsic.empty() ? StringRef(f64Intrinsic)
                                                                  : StringRef();
    if (intrinsic.empty())
      return rewriter.notifyMatchFailure(
          op, "no intrinsic for this type; other types keep the libdevice path");
    auto call = LLVM::CallIntrinsicOp::create(
        rewriter, op.getLoc(), type, rewriter.getStringAttr(intrinsic), op->getOperands());
    rewriter.replaceOp(op, call.getResults());
    return success();
  }
  std::string f32Intrinsic, f64Intrinsic;
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
  // generic intrinsic becomes fma.rn.f32 (fma.rn.f64) directly.
  patterns.add<ToIntrinsic<math::FmaOp>>(ctx, "llvm.fma.f32", "llvm.fma.f64");
  // f64 (f64 storage, SIMT kernels): PTX has no f64 ex2/lg2; the host's
  // arithmetic expansion, whose fmas the pattern above takes.
  populateExpandF64MathPatterns(patterns);
}
