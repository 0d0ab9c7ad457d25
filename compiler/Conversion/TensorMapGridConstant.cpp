//===- TensorMapGridConstant.cpp - TMA tensor maps as grid constants ------===//
//
// See LossTensorMapGridConstant in Passes.td: the 128-byte CUtensorMap of a
// TMA copy reaches the kernel by value in param space.
//
//===----------------------------------------------------------------------===//

#include "compiler/Conversion/Passes.h"
#include "dialects/Loss/LoweringConfig.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSTENSORMAPGRIDCONSTANT
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// Bytes and alignment of a CUtensorMap (CUDA driver API).
constexpr int64_t kTensorMapBytes = 128;
constexpr int64_t kTensorMapAlign = 64;

/// Whether parameter `i` of `func` is marked as a tensor map.
bool isTensorMapParam(LLVM::LLVMFuncOp func, unsigned i) {
  if (!isa<LLVM::LLVMPointerType>(func.getArgumentTypes()[i]))
    return false;
  auto align = func.getArgAttrOfType<IntegerAttr>(i, LLVM::LLVMDialect::getAlignAttrName());
  return align && align.getInt() == kTensorMapAlign;
}

struct TensorMapGridConstantPass
    : lossjit::impl::LossTensorMapGridConstantBase<TensorMapGridConstantPass> {
  using Base::Base;

  void runOnOperation() override {
    WalkResult result = getOperation()->walk([&](LLVM::LLVMFuncOp func) {
      auto count = func->getAttrOfType<IntegerAttr>(loss::kTensorMapsAttrName);
      if (!count)
        return WalkResult::advance();
      SmallVector<unsigned> params;
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        if (isTensorMapParam(func, i))
          params.push_back(i);
      if (int64_t(params.size()) != count.getInt()) {
        func.emitError() << "loss-tensor-map-grid-constant: @" << func.getName() << " declares "
                         << count.getInt() << " tensor map(s) (loss.tensor_maps) but has "
                         << params.size()
                         << " !llvm.ptr parameter(s) with llvm.align = 64, the tensor-map mark";
        return WalkResult::interrupt();
      }
      MLIRContext *context = func.getContext();
      auto bytes = LLVM::LLVMArrayType::get(IntegerType::get(context, 8), kTensorMapBytes);
      for (unsigned i : params) {
        func.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(), TypeAttr::get(bytes));
        func.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(), UnitAttr::get(context));
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
