//===- SimtInternals.h - decoder and executor internals ---------*- C++ -*-===//
//
// The classes behind decodeProgram and executeProgram (SimtProgram.h), shared
// by the files that implement them one op family at a time:
//
//   Decoder   SimtDecoder.cpp (shared helpers, the per-op dispatcher),
//             DecodeArith.cpp, DecodeVector.cpp, DecodeMemory.cpp,
//             DecodeWarp.cpp, DecodeControl.cpp (regions, gpu.func).
//   Executor  SimtExecutor.cpp (launch set-up, the per-instruction loop),
//             ExecInt.cpp, ExecFloat.cpp, ExecCast.cpp, ExecVector.cpp,
//             ExecMemory.cpp, ExecWarp.cpp, ExecControl.cpp (ids, regions,
//             barriers), RaceDetector.cpp (the data-race checks).
//
// The executor runs an opcode with Executor::exec<Family>, Family being the
// opcode's column in SimtOps.def. Private to testing/simt: nothing outside it
// includes this header.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_SIMTINTERNALS_H
#define LOSSJIT_TESTING_SIMT_SIMTINTERNALS_H

#include "testing/simt/SimtBuffer.h"
#include "testing/simt/SimtInterpreter.h"
#include "testing/simt/SimtProgram.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mlir {
namespace scf {
class ForOp;
class IfOp;
class WhileOp;
} // namespace scf
namespace nvgpu {
class MmaSyncOp;
} // namespace nvgpu
namespace NVVM {
class WgmmaMmaAsyncOp;
} // namespace NVVM
namespace gpu {
class DynamicSharedMemoryOp;
} // namespace gpu
namespace memref {
class ViewOp;
} // namespace memref
} // namespace mlir

namespace lossjit::simt::detail {

//===----------------------------------------------------------------------===//
// Decoder
//===----------------------------------------------------------------------===//

/// What a value of some type occupies in the register file.
struct TypeInfo {
  /// Handle: one slot holding an index (a tensor map parameter, an
  /// nvgpu.mbarrier.group, an mbarrier token).
  enum Kind { Scalar, Vector, Memref, Token, Handle } kind = Scalar;
  ElementType elem = ElementType::I1;
  uint32_t lanes = 1;
  llvm::SmallVector<int64_t, 4> shape; // vector or memref shape
};

/// The register-file footprint of `type`, or std::nullopt when the
/// interpreter does not support it.
std::optional<TypeInfo> analyzeType(mlir::Type type);

/// Whether `type` is a memref in workgroup (shared) memory.
bool isWorkgroupMemref(mlir::Type type);

/// The opcode an elementwise op named `name` decodes into
/// (SIMT_ELEMENTWISE_OP and SIMT_ELEMENTWISE_ALIAS rows of SimtOps.def).
std::optional<Opc> lookupElementwiseOp(llvm::StringRef name);

/// Turns one gpu.func into a Program. Each Decode<Family>.cpp decodes one
/// family of ops; decodeOp hands every op to the family that claims it.
class Decoder {
public:
  explicit Decoder(Program &prog) : prog(prog) {}

  /// Decodes `func`'s parameters, attributions and body (DecodeControl.cpp).
  llvm::Error decodeFunc(mlir::gpu::GPUFuncOp func);

private:
  Program &prog;
  llvm::DenseMap<mlir::Value, uint32_t> slotOf;
  llvm::DenseMap<mlir::Value, uint32_t> lanesOf;
  /// gpu.dynamic_shared_memory results, and the byte ranges of their views.
  llvm::DenseSet<mlir::Value> dynamicBases;
  std::vector<std::pair<int64_t, int64_t>> dynamicRanges;
  /// The memref parameter a memref value views (through casts, subviews).
  llvm::DenseMap<mlir::Value, uint32_t> paramOf;
  unsigned depth = 0;

  //--- Errors (SimtDecoder.cpp) ---------------------------------------------

  /// "unsupported op 'X' at loc(...)".
  llvm::Error unsupportedOp(mlir::Operation *op);
  /// "unsupported `what` in 'X' at loc(...)".
  llvm::Error unsupported(mlir::Operation *op, const llvm::Twine &what);
  /// "unsupported type 'T' in 'X' at loc(...)".
  llvm::Error unsupportedType(mlir::Operation *op, mlir::Type type);

  //--- Slots and instructions (SimtDecoder.cpp) -----------------------------

  /// Allocates slots for `value`.
  llvm::Expected<uint32_t> define(mlir::Value value, mlir::Operation *owner);
  /// Allocates slots for the first result of `instr.op` into `instr.res`.
  llvm::Error defineResult(Instr &instr);
  /// Makes `value` live in the slots of `existing`.
  void alias(mlir::Value value, mlir::Value existing) {
    slotOf[value] = slotOf.lookup(existing);
    lanesOf[value] = lanesOf.lookup(existing);
  }
  /// The first slot of a value defined earlier.
  uint32_t use(mlir::Value value) {
    auto it = slotOf.find(value);
    assert(it != slotOf.end() && "use before definition");
    return it->second;
  }
  /// The number of slots (vector lanes) of `value`.
  uint32_t lanes(mlir::Value value) { return lanesOf.lookup(value); }

  /// Appends `instr`; returns its index.
  uint32_t emit(const Instr &instr);
  /// Makes the instruction at `index` skip everything emitted since it (the
  /// regions nested in it).
  void finishNested(uint32_t index) { prog.instrs[index].next = uint32_t(prog.instrs.size()); }

  /// Appends the slots of `values` to Program::slots; returns the first index.
  uint32_t pushSlots(mlir::ValueRange values);
  /// A CopySet moving `sources` into `dsts`; returns its index.
  uint32_t makeCopySet(mlir::ValueRange sources, llvm::ArrayRef<uint32_t> dsts);
  /// A static-or-dynamic integer operand of `op`.
  llvm::Expected<MixedInt> mixed(mlir::OpFoldResult value, mlir::Operation *op);

  //--- Dispatch (SimtDecoder.cpp) -------------------------------------------

  /// Decodes one op (not a terminator) with the family that claims it.
  llvm::Error decodeOp(mlir::Operation &op);

  // Each decode<Family>Op decodes `op` when it is one of the family's ops and
  // returns the outcome; it returns std::nullopt for any other op.

  /// arith and math ops, constants, ub.poison (DecodeArith.cpp).
  std::optional<llvm::Error> decodeArithOp(mlir::Operation &op);
  /// vector ops other than memory accesses (DecodeVector.cpp).
  std::optional<llvm::Error> decodeVectorOp(mlir::Operation &op);
  /// memref ops and vector memory accesses (DecodeMemory.cpp).
  std::optional<llvm::Error> decodeMemoryOp(mlir::Operation &op);
  /// gpu.dynamic_shared_memory and its memref.view uses (DecodeMemory.cpp).
  llvm::Error decodeDynamicSharedMemory(mlir::gpu::DynamicSharedMemoryOp base);
  llvm::Error decodeDynamicSharedView(mlir::memref::ViewOp view);
  /// gpu.shuffle and nvgpu ops (DecodeWarp.cpp).
  std::optional<llvm::Error> decodeWarpOp(mlir::Operation &op);
  /// gpu ids, gpu.barrier, scf regions (DecodeControl.cpp).
  std::optional<llvm::Error> decodeControlOp(mlir::Operation &op);

  //--- DecodeArith.cpp ------------------------------------------------------

  /// An op of SimtOps.def's elementwise rows, decoded into `opc`.
  llvm::Error decodeElementwise(mlir::Operation &op, Opc opc);
  /// A constant of value `attr`: hoisted into per-launch initializers.
  llvm::Error decodeConstant(mlir::Operation &op, mlir::Attribute attr);

  //--- DecodeVector.cpp -----------------------------------------------------

  /// vector.extract / vector.insert positions into a PositionInfo.
  llvm::Error decodePosition(mlir::Operation *op, llvm::ArrayRef<mlir::OpFoldResult> pos,
                             llvm::ArrayRef<int64_t> shape, uint32_t chunk, uint32_t &index);

  //--- DecodeMemory.cpp -----------------------------------------------------

  /// Records that the kernel may write through `memref`.
  void noteWrite(mlir::Value memref);
  /// `result` views the same memref parameter as `source`.
  void propagateParam(mlir::Value result, mlir::Value source) {
    auto it = paramOf.find(source);
    if (it != paramOf.end())
      paramOf[result] = it->second;
  }
  /// The memref and indices of an access.
  llvm::Error decodeMemAccess(mlir::Operation *op, mlir::Value memref, mlir::ValueRange indices,
                              MemAccess &access);
  /// memref.alloca or a private attribution: an AllocaInfo and its result.
  llvm::Error decodeAlloca(mlir::Operation *op, mlir::MemRefType type,
                           mlir::ValueRange dynamicSizes, mlir::Value result, std::string name,
                           uint32_t &allocaIndex);
  /// Emits `instr` as opcode `opc` with `access` as its side-table entry.
  llvm::Error emitAccess(Instr &instr, Opc opc, const MemAccess &access);

  //--- DecodeWarp.cpp -------------------------------------------------------

  /// nvgpu.mma.sync.
  llvm::Error decodeMma(mlir::nvgpu::MmaSyncOp op);
  /// nvvm.wgmma.mma_async.
  llvm::Error decodeWgmma(mlir::NVVM::WgmmaMmaAsyncOp op);
  /// nvgpu mbarriers and TMA loads, and the tensor-map parameter's cast to
  /// its descriptor type.
  std::optional<llvm::Error> decodeAsyncTransferOp(mlir::Operation &op);

  //--- DecodeControl.cpp ----------------------------------------------------

  /// The ops of `block` but its terminator.
  llvm::Error decodeBlockBody(mlir::Block &block);
  /// A single-block region whose scf.yield copies into `yieldDsts`.
  llvm::Error decodeRegion(mlir::Region &region, llvm::ArrayRef<uint32_t> yieldDsts,
                           InstrRange &range);
  /// scf.for.
  llvm::Error decodeFor(mlir::scf::ForOp op);
  /// scf.if.
  llvm::Error decodeIf(mlir::scf::IfOp op);
  /// scf.while.
  llvm::Error decodeWhile(mlir::scf::WhileOp op);
};

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

/// A memref value at run time: a view of a buffer.
struct MemrefDesc {
  SimtBuffer *buffer = nullptr;
  int64_t offset = 0;
  uint8_t rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

/// An nvgpu.device_async_copy whose destination is still in flight.
struct PendingCopy {
  SimtBuffer *buffer;
  int64_t begin, count;
  int64_t group; ///< -1 until a device_async_create_group commits it
};

/// The f32 in the low bits of a register word.
inline float asF32(uint64_t w) { return std::bit_cast<float>(uint32_t(w)); }
/// The register word of an f32.
inline uint64_t fromF32(float f) { return std::bit_cast<uint32_t>(f); }
/// The f64 of a register word.
inline double asF64(uint64_t w) { return std::bit_cast<double>(w); }
/// The register word of an f64.
inline uint64_t fromF64(double d) { return std::bit_cast<uint64_t>(d); }

/// arith.maximumf: NaN if either is NaN; +0 > -0.
template <typename T> T maximumF(T x, T y) {
  if (std::isnan(x))
    return x;
  if (std::isnan(y))
    return y;
  if (x == y)
    return std::signbit(x) ? y : x; // +0 > -0
  return x > y ? x : y;
}
/// arith.minimumf: NaN if either is NaN; -0 < +0.
template <typename T> T minimumF(T x, T y) {
  if (std::isnan(x))
    return x;
  if (std::isnan(y))
    return y;
  if (x == y)
    return std::signbit(x) ? x : y;
  return x < y ? x : y;
}
/// arith.maxnumf: the other operand if one is NaN.
template <typename T> T maxNumF(T x, T y) {
  if (std::isnan(x))
    return y;
  if (std::isnan(y))
    return x;
  return maximumF(x, y);
}
/// arith.minnumf: the other operand if one is NaN.
template <typename T> T minNumF(T x, T y) {
  if (std::isnan(x))
    return y;
  if (std::isnan(y))
    return x;
  return minimumF(x, y);
}

/// Runs a Program for one launch, block after block. Each instruction runs
/// for a sorted list of active threads (`act`, `n` of them); the exec<Family>
/// routines return false after recording the error.
class Executor {
public:
  Executor(const Program &prog, const SimtOptions &options, const std::array<int64_t, 3> &grid,
           const std::array<int64_t, 3> &block)
      : prog(prog), options(options), grid(grid), block(block), cluster(options.cluster),
        numCtas(uint32_t(cluster[0] * cluster[1] * cluster[2])),
        ctaThreads(uint32_t(block[0] * block[1] * block[2])),
        ctaStride(numCtas > 1 ? (ctaThreads + 127) / 128 * 128 : ctaThreads),
        numThreads(numCtas * ctaStride) {}

  /// Binds `args` and runs every block (SimtExecutor.cpp).
  llvm::Error run(llvm::ArrayRef<SimtArg> args);

private:
  const Program &prog;
  const SimtOptions &options;
  std::array<int64_t, 3> grid, block, cluster;
  /// Blocks of a cluster (1 without clusters), and the threads of a block.
  uint32_t numCtas, ctaThreads;
  /// Thread t of the cluster's thread space is thread t % ctaStride of its
  /// block t / ctaStride: a block's threads padded to a whole warpgroup
  /// (with more than one block), so that warps and warpgroups never span
  /// two blocks. The padding threads never run.
  uint32_t ctaStride;
  /// Threads of the cluster's thread space (numCtas · ctaStride).
  uint32_t numThreads;
  /// The block (rank in the cluster) of thread t.
  uint32_t ctaOf(uint32_t t) const { return t / ctaStride; }

  std::vector<uint64_t> regs;
  std::vector<MemrefDesc> descs;
  uint32_t numStaticDescs = 0;
  std::vector<std::unique_ptr<SimtBuffer>> sharedBuffers;
  std::vector<std::unique_ptr<SimtBuffer>> privateBuffers; // producer*T + t
  std::vector<uint64_t> temp;
  std::vector<uint8_t> activeFlags;
  std::vector<uint32_t> all; ///< every thread that runs (no padding)
  /// Per block of the cluster: its first thread in `all`'s order is
  /// c · ctaStride; the shared buffers of block c are
  /// sharedBuffers[c · workgroup.size() …].
  std::vector<std::array<int64_t, 3>> ctaBlockIds;
  std::vector<uint64_t> ctaSerials;
  std::vector<uint32_t> ctaEpochs;
  std::vector<uint32_t> threadIds[3];
  std::vector<std::vector<PendingCopy>> pending;
  std::vector<int64_t> committedGroups;
  /// Per thread: nvvm.fence.proxy (async.shared::cta) executed so far in
  /// the block; wgmma.mma_async issued since its last commit; committed
  /// wgmma groups no wait has covered yet.
  std::vector<uint32_t> proxyFences;
  std::vector<int64_t> wgmmaUncommitted, wgmmaGroups;
  /// Per warpgroup: wgmma groups committed so far in the block, and how
  /// many of them a wait has covered (the shared memory their operands were
  /// read from may be written again).
  std::vector<uint32_t> wgmmaCommitted, wgmmaRetired;
  /// Per warpgroup: registers per thread (setmaxnreg); and the registers
  /// released to the block's pool that no increase has taken yet.
  std::vector<uint32_t> warpgroupRegisters;
  std::vector<int64_t> freeRegisters; ///< per block
  /// Per warpgroup: it executed a setmaxnreg and has not passed a barrier
  /// of all its threads since (the PTX ISA asks for one before the next).
  std::vector<uint8_t> setRegistersUnsynced;
  /// The block's named barriers 1 … 15 (bar.sync / bar.arrive with an id):
  /// the open phase's thread count, arrivals and waiting threads (bar.sync
  /// arrivals), the phases completed, the vector clocks released into the
  /// open phase, and per completed phase whose waiters have not all woken
  /// its released clocks and the waiters left.
  struct NamedBarrierModel {
    uint32_t count = 0, arrived = 0, waiting = 0;
    uint64_t completed = 0;
    std::vector<uint32_t> pendingClocks;
    std::map<uint64_t, std::pair<std::vector<uint32_t>, uint32_t>> released;
  };
  std::vector<std::array<NamedBarrierModel, 16>> namedBarriers; ///< per block
  /// The launch's tensor maps (SimtArg::tensorMap), by parameter slot value.
  struct BoundTensorMap {
    const TensorMapDesc *map;
    SimtBuffer *global;
  };
  std::vector<BoundTensorMap> tensorMaps;
  /// Each block's mbarriers, per nvgpu.mbarrier.create: [block][group][id].
  std::vector<std::vector<std::vector<MbarrierModel>>> mbarriers;
  /// Per block, group and id: the cluster barrier phase whose completion
  /// publishes its mbarrier.init to the peers (they may use it once the
  /// completed phases exceed it); kUnpublished until the initializing
  /// thread's nvvm.fence.mbarrier.init or non-relaxed cluster arrival.
  std::vector<std::vector<std::vector<uint64_t>>> mbarrierInitPhase;
  static constexpr uint64_t kUnpublished = ~uint64_t(0);
  /// Per thread: the (block, group, id) of its mbarrier.inits that no
  /// fence or non-relaxed cluster arrival of it has published yet.
  std::vector<std::vector<std::array<uint64_t, 3>>> unpublishedInits;
  /// The cluster barrier (nvvm.cluster.arrive / wait): arrivals of the
  /// open phase, phases completed, per thread the phase it arrived on and
  /// has not waited for (~0: none), the clocks released into the open
  /// phase and those of the last completed one.
  struct ClusterBarrierModel {
    static constexpr uint64_t kNotArrived = ~uint64_t(0);
    uint32_t arrived = 0;
    uint64_t completed = 0;
    std::vector<uint64_t> arrivedOn;
    std::vector<uint32_t> pendingClocks, completedClocks;
  } clusterBarrier;
  /// The cluster barrier phases completed at the latest access of a block
  /// to a peer's shared memory or mbarriers (~0: none): a later phase must
  /// complete before the blocks end.
  uint64_t lastPeerAccessPhase = ~uint64_t(0);
  /// The cluster barrier phase that must complete to order what thread t
  /// does now for the other threads: the open one, or the one after the
  /// phase it arrived on and has not waited for (its arrival came first).
  uint64_t clusterPhaseAfter(uint32_t t) const {
    const uint64_t on = clusterBarrier.arrivedOn[t];
    return on != ClusterBarrierModel::kNotArrived ? on + 1 : clusterBarrier.completed;
  }
  /// TMA copies whose mbarrier phase has not completed: their destination
  /// elements stay in flight.
  struct PendingTma {
    SimtBuffer *buffer;
    std::vector<int64_t> elements;
    uint64_t group, barrier;
    uint32_t thread; ///< the issuing thread
    uint32_t cta;    ///< the block whose shared memory and mbarrier it targets
  };
  std::vector<PendingTma> pendingTma;

  uint64_t launchFirstSerial = 0;
  uint64_t steps = 0;
  /// The serial of thread t's block, and its gpu.barrier epoch.
  uint64_t serialOf(uint32_t t) const { return ctaSerials[ctaOf(t)]; }
  uint32_t epochOf(uint32_t t) const { return ctaEpochs[ctaOf(t)]; }
  /// Whether `serial` is a block of the running cluster other than t's.
  bool peerSerial(uint64_t serial, uint32_t t) const {
    return numCtas > 1 && serial != serialOf(t) &&
           std::find(ctaSerials.begin(), ctaSerials.end(), serial) != ctaSerials.end();
  }
  std::string error;

  /// The per-thread words of slot `s`.
  uint64_t *slot(uint32_t s) { return regs.data() + size_t(s) * numThreads; }

  //--- Concurrent tasks (ExecTasks.cpp) -------------------------------------

  struct Task;
  /// The second branch of a divergent scf.if, run after the first one
  /// unless the first one blocks (then as a task of its own).
  struct Deferred {
    InstrRange range;
    std::vector<uint32_t> threads;
    Task *task = nullptr; ///< set once started
  };
  /// Threads that run in lockstep, with their own thread-list arena. The
  /// block starts as one task (tasks[0], on the calling thread); a task that
  /// blocks hands the block to another task, or starts one for a deferred
  /// branch. One task runs at a time, switched only where one blocks, so a
  /// run is deterministic.
  struct Task {
    std::vector<uint32_t> arena;
    uint32_t arenaTop = 0;
    std::vector<Deferred *> deferred; ///< innermost last
    /// While blocked: whether it may go on, and why it waits (for a
    /// deadlock's message); or the deferred branch it joins.
    std::function<bool()> ready;
    std::function<std::string()> why;
    Deferred *joining = nullptr;
    bool blocked = false, done = false, ok = true;
    std::thread thread;
  };
  std::vector<std::unique_ptr<Task>> tasks;
  Task *current = nullptr;
  std::mutex taskMutex;
  std::condition_variable taskTurn;
  /// Set when a task failed or every task waits: blocked tasks unwind.
  bool aborted = false;

  /// Resets the tasks for a new block: one task of every thread.
  void resetTasks();
  /// Whether a divergent scf.if defers its second branch: only kernels with
  /// waits that block (mbarriers, setmaxnreg) need tasks.
  bool mayBlock() const {
    return !prog.mbarrierGroups.empty() || prog.setsMaxRegisters || prog.namedBarriers ||
           prog.clusterBarriers;
  }
  /// Blocks the running task until `ready` holds, running other tasks
  /// meanwhile; false (error recorded) on a deadlock or when the block
  /// aborts. `why` says what it waits for.
  bool blockUntil(const Instr &in, std::function<bool()> ready, std::function<std::string()> why);
  /// Runs `d` to its end: inline when no task started it, else waits for
  /// its task; false when it (or the block) failed.
  bool finishDeferred(Deferred &d);
  /// The task to run next after the running one blocked or finished (it may
  /// start a deferred branch); null on a deadlock, with the error recorded.
  Task *pickNext();
  /// Hands the block to `next` and waits for the running task's next turn.
  void switchTo(Task *next);
  /// Whether blocked task `t` may run now.
  bool runnable(const Task &t) const;

  /// `n` words of the running task's thread-list arena; released by
  /// resetting its arenaTop.
  uint32_t *arenaAlloc(uint32_t n) {
    assert(current->arenaTop + n <= current->arena.size() && "arena overflow");
    uint32_t *p = current->arena.data() + current->arenaTop;
    current->arenaTop += n;
    return p;
  }

  //--- Happens-before through mbarriers (RaceDetector.cpp) ------------------

  /// In kernels with mbarriers: vector clocks, clocks[t·T + u] being the
  /// latest clock of thread u that thread t has synchronized with (its own
  /// at [t·T + t], starting at 1). An arrival releases the arriving
  /// thread's clocks into the barrier's phase; a wait that passes acquires
  /// the completed phase's.
  std::vector<uint32_t> clocks;
  struct PhaseClocks {
    std::vector<uint32_t> pending;                ///< of the open phase
    std::array<std::vector<uint32_t>, 2> completed; ///< by the completed phase's parity
    /// A thread that arrived in the open phase, and in each completed one
    /// (~0: none): a peer's multicast copy lands as its write (landTma).
    uint32_t pendingArriver = ~0u;
    std::array<uint32_t, 2> completedArriver = {~0u, ~0u};
  };
  std::vector<std::vector<std::vector<PhaseClocks>>> barrierClocks; ///< [block][group][id]
  /// Whether accesses order through mbarriers (the kernel has some).
  bool syncClocks() const { return !clocks.empty(); }
  /// Thread t's clock of its own accesses.
  uint32_t ownClock(uint32_t t) const { return syncClocks() ? clocks[size_t(t) * numThreads + t] : 0; }
  /// Whether thread t has synchronized with thread u's access at `clock`.
  bool synchronizedWith(uint32_t t, uint32_t u, uint32_t clock) const {
    return syncClocks() && u < numThreads && clocks[size_t(t) * numThreads + u] >= clock;
  }
  /// Thread t arrives on barrier (group, id): releases its clocks.
  void releaseClocks(uint32_t c, uint64_t group, uint64_t id, uint32_t t);
  /// Thread t arrives on a barrier phase whose released clocks are `phase`
  /// (any barrier model: mbarrier, named, cluster): merges its clocks in
  /// and starts a new one of its own.
  void releaseInto(std::vector<uint32_t> &phase, uint32_t t);
  /// Thread t passed a wait on a completed phase that released `phase`
  /// (empty: nothing).
  void acquireFrom(const std::vector<uint32_t> &phase, uint32_t t);
  /// Thread t passed a wait on the phase of parity `parity`.
  void acquireClocks(uint32_t c, uint64_t group, uint64_t id, bool parity, uint32_t t);
  /// Barrier (group, id) completed a phase (now `phases` completed).
  void completePhaseClocks(uint32_t c, uint64_t group, uint64_t id, uint64_t phases);

  //--- Errors ---------------------------------------------------------------

  /// "(x,y,z)" of thread `t` of the block (and its block, in a cluster).
  std::string threadText(uint32_t t) const {
    std::string text =
        llvm::formatv("({0},{1},{2})", threadIds[0][t], threadIds[1][t], threadIds[2][t]);
    return numCtas > 1 ? text + " of block " + ctaText(ctaOf(t)) : text;
  }
  /// "(x,y,z)" of block `c` of the running cluster.
  std::string ctaText(uint32_t c) const {
    return llvm::formatv("({0},{1},{2})", ctaBlockIds[c][0], ctaBlockIds[c][1], ctaBlockIds[c][2]);
  }
  /// "(x,y,z)" of the running block (its cluster's first block).
  std::string blockText() const {
    return numCtas > 1 ? ctaText(0) + " (the cluster of " + std::to_string(numCtas) + " from it)"
                       : ctaText(0);
  }
  /// "(x,y,z)" of the block of this launch with serial `serial`.
  std::string blockTextOfSerial(uint64_t serial) const {
    int64_t linear = int64_t(serial - launchFirstSerial);
    return llvm::formatv("({0},{1},{2})", linear % grid[0], (linear / grid[0]) % grid[1],
                         linear / (grid[0] * grid[1]));
  }
  /// Records the error `message` of thread `t` at `in`; returns false.
  bool fail(const Instr &in, uint32_t t, const std::string &message) {
    error = message + ", thread " + threadText(t) +
            (numCtas > 1 ? std::string() : " block " + blockText()) + ", at " + describeOp(in.op);
    return false;
  }
  /// Records the error `message` of the whole block at `in`; returns false.
  bool failBlock(const Instr &in, const std::string &message) {
    error = message + ", block " + blockText() + ", at " + describeOp(in.op);
    return false;
  }

  //--- Data races (RaceDetector.cpp) ----------------------------------------

  /// Whether `buf` keeps race records.
  bool tracksRaces(const SimtBuffer &buf) const { return buf.trackRaces; }
  /// "element i of 'name' (space)".
  std::string elementText(const SimtBuffer &buf, int64_t i) const;
  /// Checks a read of element `i` of `buf` by thread `t` and records it.
  bool checkRead(const Instr &in, SimtBuffer &buf, int64_t i, uint32_t t);
  /// Checks a write of element `i` of `buf` by thread `t` and records it.
  bool checkWrite(const Instr &in, SimtBuffer &buf, int64_t i, uint32_t t);
  /// Whether thread t's access is ordered after the last write of `s`.
  bool writeOrdered(const AccessShadow &s, uint32_t t) const;
  /// Adds thread t to the readers of `s`'s epoch.
  void noteReader(AccessShadow &s, uint32_t t) const;
  /// Fresh vector clocks for a block (kernels with mbarriers).
  void resetClocks();
  /// What wrote the element `s` records last, for race messages.
  static const char *writeKind(const AccessShadow &s) {
    return s.peerTma    ? "peer block's multicast TMA copy, landed with the arrival"
           : s.tmaWrite ? "TMA copy issued"
                        : "write";
  }
  /// The message of a race of `access` with an `earlier` access.
  std::string raceText(const char *access, const SimtBuffer &buf, int64_t i, const char *earlier,
                       uint64_t otherBlock, uint32_t otherThread, uint32_t t) const;
  /// Turns race records on for exactly the argument buffers that some
  /// parameter the kernel may write through is bound to.
  void setUpRaceRecords(llvm::ArrayRef<SimtArg> args);
  /// Marks element `i` of `buf` as the destination of an async copy in flight.
  void markAsyncPending(SimtBuffer &buf, int64_t i);
  /// The data of `copy`, issued by thread `t`, lands: its elements count as
  /// written now.
  void landAsyncCopy(const PendingCopy &copy, uint32_t t);

  //--- Memory (ExecMemory.cpp) ----------------------------------------------

  /// Linear element of `idx` in `d`, or an out-of-bounds error.
  bool locate(const Instr &in, const char *what, const MemrefDesc &d, const int64_t *idx,
              uint32_t t, int64_t &linear);
  /// The descriptor in memref slot `memrefSlot` of thread `t`.
  const MemrefDesc &descOf(uint32_t memrefSlot, uint32_t t) { return descs[slot(memrefSlot)[t]]; }
  /// The indices of access `a` for thread `t`.
  void readIndices(const MemAccess &a, uint32_t t, int64_t *idx) {
    for (unsigned k = 0; k < a.rank; ++k)
      idx[k] = int64_t(slot(prog.slots[a.indices + k])[t]);
  }

  //--- Instructions ---------------------------------------------------------

  /// Runs instructions [pc, end) for the threads `act` (SimtExecutor.cpp).
  bool exec(uint32_t pc, uint32_t end, const uint32_t *act, uint32_t n);
  /// Starts a block: fresh shared memory, private attributions, then the
  /// body (SimtExecutor.cpp).
  bool runCluster();

  // One routine per family of SimtOps.def.

  /// Thread and block ids (ExecControl.cpp).
  bool execId(const Instr &in, const uint32_t *act, uint32_t n);
  /// Integer arithmetic and arith.cmpi (ExecInt.cpp).
  bool execInt(const Instr &in, const uint32_t *act, uint32_t n);
  /// Float arithmetic, math functions and arith.cmpf (ExecFloat.cpp).
  bool execFloat(const Instr &in, const uint32_t *act, uint32_t n);
  /// Conversions (ExecCast.cpp).
  bool execCast(const Instr &in, const uint32_t *act, uint32_t n);
  /// Selects, lane moves, reductions, masks (ExecVector.cpp).
  bool execVector(const Instr &in, const uint32_t *act, uint32_t n);
  /// Loads, stores, allocas, subviews, memref.dim (ExecMemory.cpp).
  bool execMemory(const Instr &in, const uint32_t *act, uint32_t n);
  /// Structured control flow and barriers (ExecControl.cpp).
  bool execControl(const Instr &in, const uint32_t *act, uint32_t n);
  /// Warp-level ops (ExecWarp.cpp).
  bool execWarp(const Instr &in, const uint32_t *act, uint32_t n);

  //--- ExecInt.cpp ----------------------------------------------------------

  /// Binary (and unary) integer ops, with their UB checks.
  bool execIntBinary(const Instr &in, const uint32_t *act, uint32_t n);
  /// arith.cmpi.
  bool execCmpI(const Instr &in, const uint32_t *act, uint32_t n);

  //--- ExecVector.cpp -------------------------------------------------------

  /// vector.extract and vector.insert.
  bool execExtractInsert(const Instr &in, const uint32_t *act, uint32_t n);
  /// vector.reduction.
  bool execReduction(const Instr &in, const uint32_t *act, uint32_t n);

  //--- ExecMemory.cpp -------------------------------------------------------

  /// Load, Store, TransferRead and TransferWrite.
  bool execAccess(const Instr &in, const uint32_t *act, uint32_t n);
  /// memref.alloca and private attributions: a fresh private buffer per
  /// thread.
  bool execAlloca(const Instr &in, const AllocaInfo &info, const uint32_t *act, uint32_t n);
  /// memref.subview.
  bool execSubview(const Instr &in, const uint32_t *act, uint32_t n);
  /// memref.dim.
  bool execDim(const Instr &in, const uint32_t *act, uint32_t n);
  /// memref.extract_aligned_pointer_as_index of a dynamic shared view.
  bool execSharedAddress(const Instr &in, const uint32_t *act, uint32_t n);

  //--- ExecControl.cpp ------------------------------------------------------

  /// Performs CopySet `setIndex` for the threads `act`.
  void copies(uint32_t setIndex, const uint32_t *act, uint32_t n);
  /// scf.if.
  bool execIf(const Instr &in, const uint32_t *act, uint32_t n);
  /// scf.for.
  bool execFor(const Instr &in, const uint32_t *act, uint32_t n);
  /// scf.while.
  bool execWhile(const Instr &in, const uint32_t *act, uint32_t n);
  /// gpu.barrier.
  bool execBarrier(const Instr &in, const uint32_t *act, uint32_t n);

  //--- ExecWarp.cpp ---------------------------------------------------------

  /// Fails unless `act` consists of whole warps.
  bool requireFullWarps(const Instr &in, const uint32_t *act, uint32_t n, const char *what);
  /// gpu.shuffle.
  bool execShuffle(const Instr &in, const uint32_t *act, uint32_t n);
  /// nvgpu.mma.sync.
  bool execMma(const Instr &in, const uint32_t *act, uint32_t n);
  /// nvgpu.ldmatrix.
  bool execLdMatrix(const Instr &in, const uint32_t *act, uint32_t n);
  /// nvgpu.device_async_copy, device_async_create_group, device_async_wait.
  bool execAsync(const Instr &in, const uint32_t *act, uint32_t n);
  /// Fails unless `act` consists of whole warpgroups (128 threads from a
  /// multiple of 128).
  bool requireFullWarpgroups(const Instr &in, const uint32_t *act, uint32_t n, const char *what);
  /// nvvm.wgmma.mma_async.
  bool execWgmma(const Instr &in, const uint32_t *act, uint32_t n);
  /// nvvm.setmaxregister.
  bool execSetMaxRegister(const Instr &in, const uint32_t *act, uint32_t n);
  /// nvvm.barrier / nvvm.barrier.arrive with an id: whole warps arrive on
  /// named barrier `id`, whose phase completes once `count` threads did; a
  /// bar.sync waits for that (running other tasks meanwhile). Arrivals
  /// release the threads' vector clocks into the phase; the waiters
  /// acquire the completed phase's.
  bool execNamedBarrier(const Instr &in, const uint32_t *act, uint32_t n);
  /// execNamedBarrier for the threads `act` of block `c`.
  bool namedBarrier(const Instr &in, uint32_t c, const uint32_t *act, uint32_t n);
  /// The warpgroups all of whose threads are in `act` passed a barrier of
  /// them all: they synchronized (the PTX ISA asks so between setmaxnregs).
  void noteWarpgroupsSynchronized(const uint32_t *act, uint32_t n);
  /// Errors for a named barrier some threads arrived on whose phase never
  /// completed, at the block's end.
  bool checkNamedBarriersDrained(const Instr &end);
  /// nvvm.wgmma.fence / commit_group / wait_group and nvvm.fence.proxy.
  bool execWgmmaSync(const Instr &in, const uint32_t *act, uint32_t n);
  /// The element of dynamic shared memory at shared-window address
  /// `address` that warpgroup thread `t`'s wgmma reads as an `input`
  /// operand, checked (initialized, no race, fenced for the async proxy).
  bool readAsyncProxy(const Instr &in, int64_t address, ElementType input, uint32_t t,
                      double &value);
  /// Fails when element `i` of `buf` is an operand of a wgmma still in
  /// flight (no wait has covered its group): writing it would change what
  /// the tensor cores read.
  bool checkWgmmaOperandRetired(const Instr &in, const SimtBuffer &buf, int64_t i, uint32_t t);
  /// Fails when a thread of the block still has wgmma groups or the block
  /// TMA copies in flight.
  bool checkAsyncDrained(const Instr &in);
  /// mbarrier inits, arrivals, parity waits and TMA loads
  /// (ExecAsyncTransfer.cpp).
  bool execAsyncTransfer(const Instr &in, const uint32_t *act, uint32_t n);
  /// Barrier `id` of group `group`, or null after failing.
  MbarrierModel *mbarrier(const Instr &in, uint32_t t, uint32_t c, uint64_t group, uint64_t id);
  /// nvgpu.mbarrier.try_wait.parity: blocks until every thread's phase
  /// completed, then acquires the phases' clocks.
  bool execMbarrierWait(const Instr &in, const uint32_t *act, uint32_t n);
  /// Barrier (group, id) completed a phase: its clocks and TMA copies.
  void completePhase(uint32_t c, uint64_t group, uint64_t id);
  /// Lands the TMA copies tracked by barrier (group, id), whose phase
  /// `phases` − 1 completed: ordered after the issuing thread's clock there.
  void landTma(uint32_t c, uint64_t group, uint64_t id, uint64_t phases);
  /// One nvgpu.tma.async.load by thread t.
  bool execTmaLoad(const Instr &in, uint32_t t);
  /// The part of a TMA load by thread t that block `c` receives.
  bool tmaLoadInto(const Instr &in, uint32_t t, uint32_t c);

  //--- Clusters (ExecCluster.cpp) -------------------------------------------

  /// Calls fn(c, first, count) for each block's run of the sorted `act`;
  /// false as soon as one call is.
  template <typename Fn> bool forEachCta(const uint32_t *act, uint32_t n, Fn fn) {
    for (uint32_t i = 0; i < n;) {
      const uint32_t c = ctaOf(act[i]);
      uint32_t j = i;
      while (j < n && ctaOf(act[j]) == c)
        ++j;
      if (!fn(c, act + i, j - i))
        return false;
      i = j;
    }
    return true;
  }
  /// nvvm.cluster.arrive(.relaxed), cluster.wait, fence.mbarrier_init,
  /// mbarrier.get, inttoptr, mapa and nvvm.mbarrier.arrive.
  bool execCluster(const Instr &in, const uint32_t *act, uint32_t n);
  /// Thread t touches block c's shared memory or mbarrier (group, id;
  /// group ~0: memory): fine in its own block; a peer's needs its
  /// mbarriers initialized before a cluster barrier, and is noted so that
  /// another cluster barrier must follow before the blocks end.
  bool notePeerAccess(const Instr &in, uint32_t t, uint32_t c, uint64_t group, uint64_t id);
  /// Thread t's unpublished mbarrier.inits reach the peers once cluster
  /// barrier phase `phase` completes.
  void publishInits(uint32_t t, uint64_t phase);
  /// At the cluster's end: no block ends while a peer may still touch it,
  /// no thread arrived on the cluster barrier without waiting.
  bool checkClusterDrained(const Instr &end);
};

} // namespace lossjit::simt::detail

#endif // LOSSJIT_TESTING_SIMT_SIMTINTERNALS_H
