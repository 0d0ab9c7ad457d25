//===- SimtProgram.h - decoded form of a gpu.func (internal) ----*- C++ -*-===//
//
// The interpreter's instruction set: one Instr per MLIR op, operands and
// results as register slots (a value with L vector lanes occupies L
// consecutive slots), nested regions laid out inline after their parent
// (`next` skips them). The opcodes are listed once, in SimtOps.def. Internal
// to testing/simt.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_SIMTPROGRAM_H
#define LOSSJIT_TESTING_SIMT_SIMTPROGRAM_H

#include "testing/simt/AsyncTransferModel.h"
#include "testing/simt/FloatFormats.h"
#include "testing/simt/SimtInterpreter.h"
#include "testing/simt/SimtTypes.h"
#include "testing/simt/WarpMatrix.h"
#include "testing/simt/WarpgroupMatrix.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <array>
#include <bit>
#include <string>
#include <vector>

namespace lossjit::simt::detail {

inline constexpr uint32_t kNoSlot = ~0u;
inline constexpr unsigned kMaxRank = 4;

/// The interpreter's opcodes, in SimtOps.def's order.
enum class Opc : uint16_t {
#define SIMT_OP(NAME, MLIR_NAME, FAMILY) NAME,
#include "testing/simt/SimtOps.def"
};

/// The groups of opcodes that one executor routine runs (SimtOps.def).
enum class OpFamily : uint8_t { Id, Int, Float, Cast, Vector, Memory, Control, Warp, Cluster };

/// The family of `opc`.
constexpr OpFamily getOpFamily(Opc opc) {
  switch (opc) {
#define SIMT_OP(NAME, MLIR_NAME, FAMILY)                                                           \
  case Opc::NAME:                                                                                  \
    return OpFamily::FAMILY;
#include "testing/simt/SimtOps.def"
  }
  return OpFamily::Control;
}

/// The MLIR op `opc` is decoded from, or "" when there are several or none
/// (SimtOps.def); elementwise aliases (arith.trunci → IntCastS) are not
/// included.
constexpr llvm::StringLiteral getOpcodeMlirName(Opc opc) {
  switch (opc) {
#define SIMT_OP(NAME, MLIR_NAME, FAMILY)                                                           \
  case Opc::NAME:                                                                                  \
    return MLIR_NAME;
#include "testing/simt/SimtOps.def"
  }
  return "";
}

struct Instr {
  Opc opc = Opc::Nop;
  ElementType ty = ElementType::I1;  ///< operand element type
  ElementType rty = ElementType::I1; ///< result element type
  uint8_t mode = 0;                  ///< predicate, dimension, combining kind, ...
  uint8_t width = 0;                 ///< integer bit width of `ty`
  uint32_t lanes = 1;
  uint32_t next = 0;
  uint32_t res = kNoSlot, res2 = kNoSlot;
  uint32_t a = kNoSlot, b = kNoSlot, c = kNoSlot;
  uint32_t aux = 0; ///< index into an op-specific side table
  int64_t imm = 0;
  mlir::Operation *op = nullptr;
};

/// Copies of values between slots (yields, loop entry): `count` entries of
/// Program::copies starting at `begin`. `viaTemp` when a destination is also
/// a source of another copy, so all sources must be read first.
struct CopySet {
  uint32_t begin = 0, count = 0;
  bool viaTemp = false;
};
struct Copy {
  uint32_t src, dst, lanes;
};

struct InstrRange {
  uint32_t begin = 0, end = 0;
};

struct IfInfo {
  uint32_t cond;
  InstrRange thenRegion, elseRegion;
};

/// scf.for: the iteration arguments and the loop results share slots.
struct ForInfo {
  uint32_t lb, ub, step, iv;
  ElementType ivType;
  bool unsignedCmp;
  uint32_t init; ///< CopySet index: init operands → iteration arguments
  InstrRange body;
};

struct WhileInfo {
  uint32_t init; ///< CopySet: inits → before-region arguments
  InstrRange before, after;
  uint32_t cond;     ///< scf.condition's i1 operand
  uint32_t toAfter;  ///< CopySet: condition args → after-region arguments
  uint32_t toResult; ///< CopySet: condition args → results
};

/// A position in a memref: `rank` index slots starting at
/// Program::slots[indices].
struct MemAccess {
  uint32_t memref = kNoSlot;
  uint32_t indices = 0;
  uint8_t rank = 0;
  uint32_t value = kNoSlot; ///< result (loads) or stored value (stores)
  uint32_t lanes = 1;       ///< consecutive elements along the last dim
  uint32_t pad = kNoSlot;   ///< transfer_read padding
  uint32_t mask = kNoSlot;  ///< transfer op mask (vector<lanes x i1>)
  bool inBounds = true;     ///< transfer ops: out-of-bounds lanes are an error
};

/// A static-or-dynamic integer: `slot` when dynamic, else `value`.
struct MixedInt {
  int64_t value = 0;
  uint32_t slot = kNoSlot;
};

/// memref.alloca / private attribution: one buffer per (producer, thread).
struct AllocaInfo {
  ElementType type;
  uint8_t rank;
  MixedInt sizes[kMaxRank];
  uint32_t producer; ///< per-thread descriptor block index
  uint32_t slot;     ///< the memref value
  std::string name;
};

struct SubviewInfo {
  uint32_t source;
  uint8_t sourceRank, resultRank;
  MixedInt offsets[kMaxRank], sizes[kMaxRank], strides[kMaxRank];
  bool dropped[kMaxRank];
  uint32_t producer;
};

/// vector.extract / vector.insert: lane offset = Σ position_d * stride_d.
struct PositionInfo {
  uint8_t count = 0;
  MixedInt positions[kMaxRank];
  int64_t strides[kMaxRank];
  int64_t dims[kMaxRank];
  uint32_t chunk = 1; ///< lanes moved
};

struct AsyncCopyInfo {
  MemAccess dst, src;
  int64_t dstElements;
  uint32_t srcElements = kNoSlot;
};

struct MmaInfo {
  MmaConfig config;
  bool f16Accumulator;
};

/// nvvm.wgmma.mma_async m64nNk16 with f16/bf16 operands from shared-memory
/// descriptors and an f32 accumulator of N/2 registers per thread.
struct WgmmaInfo {
  int n = 8;
  ElementType input = ElementType::F16;
  bool aKMajor = true, bKMajor = true;
  bool accumulate = true; ///< scale-d one: D = A·B + D; zero: D = A·B
};
struct LdMatrixInfo {
  MemAccess access;
  int numTiles;
  bool transpose;
};

/// A memref parameter or workgroup attribution: its slot and static type.
struct MemrefParam {
  uint32_t slot;
  ElementType type;
  uint8_t rank;
  int64_t shape[kMaxRank]; ///< mlir::ShapedType::kDynamic when dynamic
  /// Workgroup attributions: the byte alignment `llvm.align` gives the
  /// buffer (0: its element size, what the lowering gives without it).
  int64_t align = 0;
  /// Views of dynamic shared memory: the byte offset in it; -1 otherwise.
  int64_t dynamicOffset = -1;
};

/// Byte alignment of the dynamic shared-memory base as the compiler's
/// lowering gives it (loss-extern-dynamic-shared-memory).
inline constexpr int64_t kDynamicSharedBaseAlign = 16;
/// The shared-window address the model gives the dynamic shared-memory base
/// (memref.extract_aligned_pointer_as_index of a view is this plus the
/// view's offset): 16-byte aligned and nothing more, like the real base
/// after any static shared memory.
inline constexpr int64_t kDynamicSharedWindowBase = 1040;
/// The window base of a kernel whose base needs `align` bytes.
inline int64_t dynamicSharedWindowBase(int64_t align) {
  return (kDynamicSharedWindowBase + align - 1) / align * align;
}

struct ScalarParam {
  uint32_t slot;
  ElementType type;
  /// An !llvm.ptr parameter: a TMA tensor map (SimtArg::tensorMap); the
  /// slot holds the launch's tensor-map index.
  bool tensorMap = false;
};
/// nvgpu.tma.async.load: the box the descriptor type promises, the
/// coordinates (innermost first) and the destination.
struct TmaLoadInfo {
  ElementType type = ElementType::F16;
  llvm::SmallVector<int64_t, 5> box; ///< innermost first
  int swizzle = 0;                   ///< TmaSwizzle
  bool nanFill = false;
  uint32_t coords = 0;               ///< Program::slots index, box.size() of them
  MemAccess dst;                     ///< the destination view (indices: none)
  uint32_t predicate = kNoSlot;
  uint32_t multicast = kNoSlot; ///< the i16 mask of block ranks, if any
};

struct Program {
  std::string name;
  mlir::Operation *func = nullptr;
  /// The dynamic shared-memory base's alignment (loss.dynamic_shared_align,
  /// else kDynamicSharedBaseAlign); the window base is aligned up to it.
  int64_t dynamicSharedAlign = kDynamicSharedBaseAlign;
  std::vector<Instr> instrs;
  uint32_t numSlots = 0;
  /// Per function argument: index into memrefParams or scalarParams.
  std::vector<std::pair<bool, uint32_t>> args; ///< (isMemref, index)
  std::vector<MemrefParam> memrefParams;
  /// Per memref parameter: whether the kernel may write through it (stores,
  /// transfer writes, async copy destinations). Buffers bound only to
  /// read-only parameters need no race records: nothing can race on them.
  std::vector<bool> memrefParamWritten;
  std::vector<ScalarParam> scalarParams;
  /// Workgroup attributions, then the views of dynamic shared memory.
  std::vector<MemrefParam> workgroup;
  std::vector<uint32_t> privateAttributions; ///< AllocaInfo indices
  /// Slots filled once per launch for every thread.
  std::vector<std::pair<uint32_t, uint64_t>> constants;
  uint32_t numProducers = 0; ///< per-thread memref descriptor blocks
  unsigned maxDepth = 0;     ///< deepest region nesting
  uint32_t maxCopyLanes = 0; ///< largest CopySet (lanes), for temporaries

  std::vector<uint32_t> slots; ///< operand lists
  std::vector<int64_t> ints;   ///< static integer tables
  std::vector<Copy> copies;
  std::vector<CopySet> copySets;
  std::vector<IfInfo> ifs;
  std::vector<ForInfo> fors;
  std::vector<WhileInfo> whiles;
  std::vector<MemAccess> accesses;
  std::vector<AllocaInfo> allocas;
  std::vector<SubviewInfo> subviews;
  std::vector<PositionInfo> positions;
  std::vector<AsyncCopyInfo> asyncCopies;
  std::vector<MmaInfo> mmas;
  std::vector<LdMatrixInfo> ldmatrices;
  std::vector<WgmmaInfo> wgmmas;
  /// Barriers per nvgpu.mbarrier.create, in decode order.
  std::vector<uint32_t> mbarrierGroups;
  /// The kernel has nvvm.setmaxregister; its warpgroups start with
  /// launchRegisters (nvvm.maxnreg) registers per thread.
  bool setsMaxRegisters = false;
  uint32_t launchRegisters = 0;
  /// The kernel has named barriers (nvvm.barrier / nvvm.barrier.arrive
  /// with an id): a bar.sync may wait for arrivals of divergent threads.
  bool namedBarriers = false;
  /// The kernel has cluster barriers (nvvm.cluster.arrive / wait).
  bool clusterBarriers = false;
  /// gpu.func's known_cluster_size, where it has one.
  std::optional<std::array<int64_t, 3>> knownClusterSize;
  std::vector<TmaLoadInfo> tmaLoads;
};

/// "'op.name' at loc(...)" for error messages.
std::string describeOp(mlir::Operation *op);

/// Decodes `func` into `program` (SimtDecoder.cpp).
llvm::Error decodeProgram(mlir::gpu::GPUFuncOp func, Program &program);

/// Runs `program` (SimtExecutor.cpp).
llvm::Error executeProgram(const Program &program, const std::array<int64_t, 3> &grid,
                           const std::array<int64_t, 3> &block, llvm::ArrayRef<SimtArg> args,
                           const SimtOptions &options);

/// Rounds `value` to float type `type` and encodes it as a register word.
inline uint64_t makeFloatWord(ElementType type, double value) {
  switch (type) {
  case ElementType::F64:
    return std::bit_cast<uint64_t>(value);
  case ElementType::F32:
    return std::bit_cast<uint32_t>(float(value));
  case ElementType::F16:
    return std::bit_cast<uint32_t>(float(roundToHalf(value)));
  default:
    return std::bit_cast<uint32_t>(float(roundToBFloat16(value)));
  }
}

/// The value of a float register word of type `type`.
inline double floatWordValue(ElementType type, uint64_t word) {
  if (type == ElementType::F64)
    return std::bit_cast<double>(word);
  return std::bit_cast<float>(uint32_t(word));
}

/// All-ones in the low `width` bits.
inline uint64_t widthMask(unsigned width) {
  return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
}

/// Sign-extends the low `width` bits of `word`.
inline int64_t signExtend(uint64_t word, unsigned width) {
  if (width >= 64)
    return int64_t(word);
  unsigned shift = 64 - width;
  return int64_t(word << shift) >> shift;
}

} // namespace lossjit::simt::detail

#endif // LOSSJIT_TESTING_SIMT_SIMTPROGRAM_H
