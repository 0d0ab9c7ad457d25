//===- SimtDecoder.cpp - gpu.func → interpreter instructions --------------===//
//
// Decoding resolves everything that does not depend on thread data once per
// kernel: SSA values become register slots, constants are hoisted into
// per-launch initializers, structured regions become instruction ranges,
// static shapes and lane permutations become tables. Every op and type the
// executor cannot run is rejected here, before any thread runs.
//
// This file holds what every family's decoder shares (types, slots, errors)
// and the dispatcher; the ops themselves are decoded in Decode<Family>.cpp.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::string lossjit::simt::detail::describeOp(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << op->getName() << "' at ";
  op->getLoc().print(os);
  return text;
}

std::optional<TypeInfo> lossjit::simt::detail::analyzeType(Type type) {
  TypeInfo info;
  if (auto vector = dyn_cast<VectorType>(type)) {
    if (vector.isScalable())
      return std::nullopt;
    auto elem = getElementType(vector.getElementType());
    if (!elem)
      return std::nullopt;
    info.kind = TypeInfo::Vector;
    info.elem = *elem;
    info.lanes = uint32_t(vector.getNumElements());
    info.shape.assign(vector.getShape().begin(), vector.getShape().end());
    return info;
  }
  if (auto memref = dyn_cast<MemRefType>(type)) {
    auto elem = getElementType(memref.getElementType());
    if (!elem || memref.getRank() > int64_t(kMaxRank))
      return std::nullopt;
    info.kind = TypeInfo::Memref;
    info.elem = *elem;
    info.shape.assign(memref.getShape().begin(), memref.getShape().end());
    return info;
  }
  // A literal struct of one scalar type (wgmma accumulators) is a vector.
  if (auto structType = dyn_cast<LLVM::LLVMStructType>(type)) {
    llvm::ArrayRef<Type> body = structType.getBody();
    if (structType.isIdentified() || body.empty() ||
        !llvm::all_equal(body) || !getElementType(body[0]))
      return std::nullopt;
    info.kind = TypeInfo::Vector;
    info.elem = *getElementType(body[0]);
    info.lanes = uint32_t(body.size());
    info.shape = {int64_t(body.size())};
    return info;
  }
  if (isa<nvgpu::TensorMapDescriptorType, nvgpu::MBarrierGroupType, nvgpu::MBarrierTokenType>(
          type) ||
      (isa<LLVM::LLVMPointerType>(type) &&
       llvm::is_contained({0u, 3u, 7u}, cast<LLVM::LLVMPointerType>(type).getAddressSpace()))) {
    // Generic pointers: tensor maps; shared and shared::cluster ones: the
    // addresses of mbarriers (nvgpu.mbarrier.get, nvvm.mapa).
    info.kind = TypeInfo::Handle;
    info.elem = ElementType::I64;
    return info;
  }
  if (isa<nvgpu::DeviceAsyncTokenType>(type)) {
    info.kind = TypeInfo::Token;
    return info;
  }
  auto elem = getElementType(type);
  if (!elem)
    return std::nullopt;
  info.elem = *elem;
  return info;
}

bool lossjit::simt::detail::isWorkgroupMemref(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  if (!memref)
    return false;
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(memref.getMemorySpace());
  if (space)
    return space.getValue() == gpu::AddressSpace::Workgroup;
  auto intSpace = dyn_cast_or_null<IntegerAttr>(memref.getMemorySpace());
  return intSpace && intSpace.getInt() == 3; // NVVM's shared address space
}

std::optional<Opc> lossjit::simt::detail::lookupElementwiseOp(llvm::StringRef name) {
  // Elementwise ops map one-to-one onto an opcode, by name.
  static const llvm::StringMap<Opc> table = {
#define SIMT_ELEMENTWISE_OP(NAME, MLIR_NAME, FAMILY) {MLIR_NAME, Opc::NAME},
#define SIMT_ELEMENTWISE_ALIAS(NAME, MLIR_NAME) {MLIR_NAME, Opc::NAME},
#include "testing/simt/SimtOps.def"
  };
  auto it = table.find(name);
  if (it == table.end())
    return std::nullopt;
  return it->second;
}

//===----------------------------------------------------------------------===//
// Errors, slots and instructions
//===----------------------------------------------------------------------===//

llvm::Error Decoder::unsupportedOp(Operation *op) {
  std::string loc;
  llvm::raw_string_ostream os(loc);
  op->getLoc().print(os);
  return llvm::createStringError("unsupported op '" + op->getName().getStringRef().str() + "' at " +
                                 loc);
}

llvm::Error Decoder::unsupported(Operation *op, const llvm::Twine &what) {
  return llvm::createStringError("unsupported " + what.str() + " in " + describeOp(op));
}

llvm::Error Decoder::unsupportedType(Operation *op, Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return unsupported(op, "type '" + text + "'");
}

llvm::Expected<uint32_t> Decoder::define(Value value, Operation *owner) {
  auto info = analyzeType(value.getType());
  if (!info)
    return unsupportedType(owner, value.getType());
  uint32_t lanes =
      info->kind == TypeInfo::Scalar || info->kind == TypeInfo::Vector ? info->lanes : 1;
  uint32_t slot = prog.numSlots;
  prog.numSlots += lanes;
  slotOf[value] = slot;
  lanesOf[value] = lanes;
  return slot;
}

llvm::Error Decoder::defineResult(Instr &instr) {
  auto slot = define(instr.op->getResult(0), instr.op);
  if (!slot)
    return slot.takeError();
  instr.res = *slot;
  return llvm::Error::success();
}

uint32_t Decoder::emit(const Instr &instr) {
  // SimtOps.def says which op each opcode comes from.
  assert((getOpcodeMlirName(instr.opc).empty() ||
          instr.op->getName().getStringRef() == getOpcodeMlirName(instr.opc) ||
          lookupElementwiseOp(instr.op->getName().getStringRef()) == instr.opc) &&
         "instruction from an op that SimtOps.def does not name for its opcode");
  prog.instrs.push_back(instr);
  prog.instrs.back().next = uint32_t(prog.instrs.size());
  return uint32_t(prog.instrs.size() - 1);
}

uint32_t Decoder::pushSlots(ValueRange values) {
  uint32_t begin = uint32_t(prog.slots.size());
  for (Value v : values)
    prog.slots.push_back(use(v));
  return begin;
}

uint32_t Decoder::makeCopySet(ValueRange sources, llvm::ArrayRef<uint32_t> dsts) {
  CopySet set;
  set.begin = uint32_t(prog.copies.size());
  uint32_t totalLanes = 0;
  for (auto [src, dst] : llvm::zip_equal(sources, dsts)) {
    uint32_t s = use(src);
    if (s == dst)
      continue; // the value already lives in its destination
    prog.copies.push_back({s, dst, lanes(src)});
    totalLanes += lanes(src);
  }
  set.count = uint32_t(prog.copies.size()) - set.begin;
  // Copies happen simultaneously (scf.yield %b, %a swaps): when a source
  // range overlaps a destination range, stage every source first.
  for (uint32_t i = 0; i < set.count && !set.viaTemp; ++i)
    for (uint32_t j = 0; j < set.count; ++j) {
      const Copy &a = prog.copies[set.begin + i];
      const Copy &b = prog.copies[set.begin + j];
      if (i != j && a.src < b.dst + b.lanes && b.dst < a.src + a.lanes) {
        set.viaTemp = true;
        break;
      }
    }
  prog.maxCopyLanes = std::max(prog.maxCopyLanes, totalLanes);
  prog.copySets.push_back(set);
  return uint32_t(prog.copySets.size() - 1);
}

llvm::Expected<MixedInt> Decoder::mixed(OpFoldResult value, Operation *op) {
  MixedInt result;
  if (auto attr = dyn_cast<Attribute>(value)) {
    auto intAttr = dyn_cast<IntegerAttr>(attr);
    if (!intAttr)
      return unsupported(op, "non-integer static operand");
    result.value = intAttr.getInt();
  } else {
    result.slot = use(cast<Value>(value));
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

llvm::Error Decoder::decodeOp(Operation &op) {
  // The families' ops are disjoint: at most one claims `op`.
  if (std::optional<llvm::Error> result = decodeArithOp(op))
    return std::move(*result);
  if (std::optional<llvm::Error> result = decodeVectorOp(op))
    return std::move(*result);
  if (std::optional<llvm::Error> result = decodeMemoryOp(op))
    return std::move(*result);
  if (std::optional<llvm::Error> result = decodeControlOp(op))
    return std::move(*result);
  if (std::optional<llvm::Error> result = decodeWarpOp(op))
    return std::move(*result);
  return unsupportedOp(&op);
}

llvm::Error lossjit::simt::detail::decodeProgram(gpu::GPUFuncOp func, Program &program) {
  return Decoder(program).decodeFunc(func);
}
