//===- ExternDynamicSharedMemory.cpp - PTX .extern .shared for the base ---===//
//
// See LossExternDynamicSharedMemory in Passes.td: without it the dynamic
// shared-memory base of a kernel is a one-byte static variable in PTX.
//
//===----------------------------------------------------------------------===//

#include "compiler/Conversion/Passes.h"
#include "dialects/Loss/LoweringConfig.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSEXTERNDYNAMICSHAREDMEMORY
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// A zero-length array in shared memory: what gpu.dynamic_shared_memory
/// lowers to (there is nothing else a zero-length shared global can be).
bool isDynamicSharedBase(LLVM::GlobalOp global) {
  auto array = dyn_cast<LLVM::LLVMArrayType>(global.getGlobalType());
  return array && array.getNumElements() == 0 &&
         global.getAddrSpace() == static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared);
}

/// The largest loss.dynamic_shared_align of the functions beside `global`
/// (its module's kernels: TMA's swizzled stages need 1024), or 0.
uint64_t kernelAlignment(LLVM::GlobalOp global) {
  uint64_t align = 0;
  Operation *table = SymbolTable::getNearestSymbolTable(global);
  if (!table)
    return 0;
  for (Region &region : table->getRegions())
    for (Operation &op : region.getOps())
      if (auto a = op.getAttrOfType<IntegerAttr>(loss::kDynamicSharedAlignAttrName))
        align = std::max<uint64_t>(align, static_cast<uint64_t>(a.getInt()));
  return align;
}

struct ExternDynamicSharedMemoryPass
    : lossjit::impl::LossExternDynamicSharedMemoryBase<ExternDynamicSharedMemoryPass> {
  using Base::Base;

  void runOnOperation() override {
    if (alignment < 1 || !llvm::isPowerOf2_64(static_cast<uint64_t>(alignment))) {
      getOperation()->emitError() << "loss-extern-dynamic-shared-memory: alignment must be a "
                                     "power of two, got "
                                  << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    getOperation()->walk([&](LLVM::GlobalOp global) {
      if (!isDynamicSharedBase(global) || global.getLinkage() != LLVM::Linkage::Internal)
        return;
      global.setLinkage(LLVM::Linkage::External);
      uint64_t want = std::max<uint64_t>(static_cast<uint64_t>(alignment), kernelAlignment(global));
      uint64_t have = global.getAlignment().value_or(0);
      if (have < want)
        global.setAlignment(want);
    });
  }
};
} // namespace
