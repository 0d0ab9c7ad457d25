//===- BF16MmaSyncToNVVM.cpp - bf16 nvgpu.mma.sync → nvvm.mma.sync --------===//

#include "compiler/Conversion/Passes.h"

#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSBF16MMASYNCTONVVM
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// The .bf16x2 registers of a fragment vector<R x 2 x bf16>, as i32.
SmallVector<Value> packedRegisters(PatternRewriter &rewriter, Location loc, Value fragment) {
  auto type = cast<VectorType>(fragment.getType());
  auto word = VectorType::get({1}, rewriter.getI32Type());
  SmallVector<Value> registers;
  for (int64_t r = 0; r < type.getDimSize(0); ++r) {
    Value two = vector::ExtractOp::create(rewriter, loc, fragment, ArrayRef<int64_t>{r});
    Value packed = vector::BitCastOp::create(rewriter, loc, word, two);
    registers.push_back(vector::ExtractOp::create(rewriter, loc, packed, ArrayRef<int64_t>{0}));
  }
  return registers;
}

struct BF16MmaSync : OpRewritePattern<nvgpu::MmaSyncOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nvgpu::MmaSyncOp op, PatternRewriter &rewriter) const override {
    auto aType = cast<VectorType>(op.getMatrixA().getType());
    auto bType = cast<VectorType>(op.getMatrixB().getType());
    auto cType = cast<VectorType>(op.getMatrixC().getType());
    if (!aType.getElementType().isBF16() || !bType.getElementType().isBF16())
      return rewriter.notifyMatchFailure(op, "not bf16 operands: convert-nvgpu-to-nvvm lowers it");
    if (!cType.getElementType().isF32() || cType.getShape() != ArrayRef<int64_t>{2, 2})
      return rewriter.notifyMatchFailure(op, "bf16 mma.sync accumulates in vector<2x2xf32> only");
    if (aType.getRank() != 2 || aType.getDimSize(1) != 2 || bType.getRank() != 2 ||
        bType.getDimSize(1) != 2)
      return rewriter.notifyMatchFailure(op, "fragments must be vector<Rx2xbf16> registers");
    SmallVector<int64_t> shape = llvm::map_to_vector(
        op.getMmaShape().getAsRange<IntegerAttr>(), [](IntegerAttr a) { return a.getInt(); });
    Location loc = op.getLoc();
    SmallVector<Value> a = packedRegisters(rewriter, loc, op.getMatrixA());
    SmallVector<Value> b = packedRegisters(rewriter, loc, op.getMatrixB());
    SmallVector<Value> c;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t q = 0; q < 2; ++q)
        c.push_back(vector::ExtractOp::create(rewriter, loc, op.getMatrixC(),
                                              ArrayRef<int64_t>{h, q}));
    Type f32 = rewriter.getF32Type();
    auto result = LLVM::LLVMStructType::getLiteral(getContext(), {f32, f32, f32, f32});
    auto mma = NVVM::MmaOp::create(
        rewriter, loc, result, a, b, c, shape, std::nullopt, std::nullopt,
        std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
    SmallVector<Value> d;
    for (int64_t i = 0; i < 4; ++i)
      d.push_back(LLVM::ExtractValueOp::create(rewriter, loc, mma, ArrayRef<int64_t>{i}));
    rewriter.replaceOpWithNewOp<vector::FromElementsOp>(op, cType, d);
    return success();
  }
};

struct BF16MmaSyncToNVVMPass
    : lossjit::impl::LossBF16MmaSyncToNVVMBase<BF16MmaSyncToNVVMPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<BF16MmaSync>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace
