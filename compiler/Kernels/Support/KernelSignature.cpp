//===- KernelSignature.cpp ------------------------------------------------===//

#include "compiler/Kernels/Support/KernelSignature.h"

#include "dialects/Loss/LoweringConfig.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace lossjit;

KernelSignature &KernelSignature::arg(llvm::StringRef name, Type type, llvm::StringRef binding) {
  args.push_back({name.str(), type, binding.empty() ? name.str() : binding.str()});
  return *this;
}

KernelSignature &KernelSignature::tensorMap(llvm::StringRef name, llvm::StringRef binding,
                                            MLIRContext *context) {
  args.push_back({name.str(), LLVM::LLVMPointerType::get(context), binding.str(), true});
  return *this;
}

KernelSignature &KernelSignature::argIf(bool present, llvm::StringRef name, Type type,
                                        llvm::StringRef binding) {
  return present ? arg(name, type, binding) : *this;
}

SmallVector<Type> KernelSignature::types() const {
  SmallVector<Type> out;
  for (const Arg &a : args)
    out.push_back(a.type);
  return out;
}

std::vector<std::string> KernelSignature::bindings() const {
  std::vector<std::string> out;
  for (const Arg &a : args)
    out.push_back(a.binding);
  return out;
}

int KernelSignature::position(llvm::StringRef name) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == name)
      return static_cast<int>(i);
  return -1;
}

Value KernelArgs::operator[](llvm::StringRef name) const {
  int i = signature.position(name);
  return i < 0 ? Value() : entry->getArgument(i);
}

Value KernelArgs::workgroup(unsigned i) const { return shared[i]; }

MemRefType KernelSink::flat(Type element) {
  return MemRefType::get({ShapedType::kDynamic}, element);
}

GpuKernelSink::GpuKernelSink(OpBuilder &b, Location loc, LaunchPlan &plan, llvm::StringRef prefix,
                             int64_t threads)
    : KernelSink(b, loc, plan), prefix(prefix.str()), blockThreads(threads),
      parent(b.getInsertionBlock()), at(b.getInsertionPoint()) {}

MemRefType GpuKernelSink::shared(MLIRContext *ctx, int64_t count, Type element) {
  auto space = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  return MemRefType::get({count}, element, MemRefLayoutAttrInterface{}, space);
}

KernelArgs GpuKernelSink::begin(const KernelSignature &signature, const LaunchShape &launch) {
  std::string moduleName = prefix + "_" + signature.name().str();
  b.setInsertionPoint(parent, at);
  auto module = gpu::GPUModuleOp::create(b, loc, moduleName);
  b.setInsertionPointToEnd(module.getBody());
  auto fn =
      gpu::GPUFuncOp::create(b, loc, signature.name(), b.getFunctionType(signature.types(), {}),
                             launch.workgroup, TypeRange{});
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  const int64_t threads = launch.threads ? launch.threads : blockThreads;
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({static_cast<int32_t>(threads), 1, 1}));
  if (launch.cluster > 1) {
    fn.setKnownClusterSizeAttr(
        b.getDenseI32ArrayAttr({static_cast<int32_t>(launch.cluster), 1, 1}));
    ++clustered;
  }
  if (launch.maxRegisters)
    fn->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(),
                b.getI32IntegerAttr(static_cast<int32_t>(launch.maxRegisters)));
  b.setInsertionPointToStart(&fn.getBody().front());
  // Tensor maps: 64-byte aligned pointers, counted for
  // loss-tensor-map-grid-constant.
  int64_t maps = 0;
  for (size_t i = 0; i < signature.size(); ++i)
    if (signature.isTensorMap(i)) {
      fn.setArgAttr(static_cast<unsigned>(i), LLVM::LLVMDialect::getAlignAttrName(),
                    b.getI64IntegerAttr(64));
      ++maps;
    }
  if (maps)
    fn->setAttr(loss::kTensorMapsAttrName, b.getI64IntegerAttr(maps));
  SmallVector<Value> shared(fn.getWorkgroupAttributions());
  int64_t dynamicBytes = dynamicViews(launch, shared);
  int64_t align = kDynamicSharedAlign;
  for (int64_t a : launch.dynamicAlign)
    align = std::max(align, a);
  if (align > kDynamicSharedAlign)
    fn->setAttr(loss::kDynamicSharedAlignAttrName, b.getI64IntegerAttr(align));
  launchPlan.kernels.push_back({signature.name().str(),
                                moduleName,
                                launch.grid,
                                {threads, 1, 1},
                                dynamicBytes,
                                signature.bindings(),
                                "none",
                                launch.perChunk,
                                std::max<int64_t>(launch.cluster, 1),
                                launch.persistent});
  KernelArgs args(signature, &fn.getBody().front());
  args.setWorkgroup(std::move(shared));
  return args;
}

int64_t GpuKernelSink::dynamicViews(const LaunchShape &launch, SmallVector<Value> &views) {
  ArrayRef<Type> buffers = launch.dynamicWorkgroup;
  if (buffers.empty())
    return 0;
  MLIRContext *ctx = b.getContext();
  auto space = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto baseType =
      MemRefType::get({ShapedType::kDynamic}, b.getI8Type(), MemRefLayoutAttrInterface{}, space);
  Value base = gpu::DynamicSharedMemoryOp::create(b, loc, baseType);
  int64_t offset = 0;
  for (auto [i, buffer] : llvm::enumerate(buffers)) {
    auto type = cast<MemRefType>(buffer);
    assert(type.hasStaticShape() && "dynamic shared buffers have static shapes");
    int64_t align = i < launch.dynamicAlign.size() ? launch.dynamicAlign[i] : 0;
    offset = llvm::alignTo(offset, std::max(align, kDynamicSharedAlign));
    Value at = arith::ConstantIndexOp::create(b, loc, offset);
    views.push_back(memref::ViewOp::create(b, loc, type, base, at, ValueRange{}));
    offset += type.getNumElements() * (type.getElementTypeBitWidth() / 8);
  }
  return static_cast<int64_t>(llvm::alignTo(offset, kDynamicSharedAlign));
}

void GpuKernelSink::end() { gpu::ReturnOp::create(b, loc); }

CpuKernelSink::CpuKernelSink(OpBuilder &b, Location loc, LaunchPlan &plan,
                               llvm::StringRef moduleName)
    : KernelSink(b, loc, plan), moduleName(moduleName.str()), module(b.getInsertionBlock()) {}

KernelArgs CpuKernelSink::begin(const KernelSignature &signature, const LaunchShape &launch) {
  b.setInsertionPointToEnd(module);
  auto fn =
      func::FuncOp::create(b, loc, signature.name(), b.getFunctionType(signature.types(), {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  launchPlan.kernels.push_back({signature.name().str(),
                                moduleName,
                                launch.grid,
                                {1, 1, 1},
                                0,
                                signature.bindings(),
                                launch.parallel,
                                launch.perChunk});
  return KernelArgs(signature, entry);
}

void CpuKernelSink::end() { func::ReturnOp::create(b, loc); }
