//===- SimtInterpreter.h - CPU oracle for gpu.func kernels ------*- C++ -*-===//
//
// Executes the GPU kernel IR lossjit emits before NVVM lowering (gpu.func
// bodies using gpu, scf, arith, math, memref, vector and nvgpu ops) on the
// CPU for small shapes, so that the kernels' logic is checked in CI without a
// GPU (docs/ARCHITECTURE.md §7).
//
// Model. A kernel is decoded once into a flat instruction list whose operands
// are register slots; each slot holds one 64-bit word per thread of a block.
// The threads of a block run in lockstep: every instruction executes for the
// whole set of active threads before the next one starts. Structured control
// flow narrows the active set (scf.if runs each branch for the threads that
// take it; scf.for/scf.while iterate while any thread continues), so divergent
// code runs exactly as per-thread code would. Blocks run one after another
// (clusters: together, below).
//
// What is checked, each failure being an llvm::Error naming the op's location
// and the thread (x,y,z) and block (x,y,z):
//  - unsupported ops and types (at decode time, before anything runs):
//    "unsupported op 'X' at loc(...)";
//  - out-of-bounds accesses (buffer name, index, size);
//  - reads of never-written elements of shared, private and workspace memory;
//  - gpu.barrier reached by only some threads of a block (divergence);
//  - warp-level ops (gpu.shuffle, nvgpu.mma.sync, nvgpu.ldmatrix) without the
//    lanes they require active;
//  - data races (SimtOptions::detectRaces): two accesses of one element by
//    different threads of a launch, at least one a write, with no gpu.barrier
//    between them (same block) or in different blocks; reads of the
//    destination of an nvgpu.device_async_copy before the issuing thread's
//    nvgpu.device_async_wait covered it (the copy itself happens at issue);
//  - integer UB (division by zero, out-of-range shifts and float-to-int
//    conversions) and runaway loops (SimtOptions::maxSteps).
//
// Numerics. f32/f64 arithmetic is IEEE with round-to-nearest-even; f16/bf16
// results are rounded from the exact (or f32) result; math.fma is fused;
// transcendental functions are evaluated in f64 and rounded once to the
// result type. nvgpu.mma.sync sums the exact products in f64 and rounds once.
//
// Warp level. A warp is 32 consecutive linear thread ids of a block.
// gpu.shuffle follows the gpu dialect's definition (lanes >= width and
// out-of-range sources give valid = false and, like shfl.sync, the lane's own
// value); the first `width` lanes must be active and agree on the width.
// nvgpu.mma.sync and nvgpu.ldmatrix need all 32 lanes active; fragment
// layouts are the PTX ISA's (WarpMatrix.h); tf32 inputs ignore their low 13
// mantissa bits. ldmatrix row addresses come from lanes 8i..8i+7 of tile i
// and must be 16-byte aligned rows of 8 contiguous elements in shared memory.
// A workgroup buffer starts where the lowering would place it: aligned to
// its attribution's `llvm.align`, else only to its element size, so an
// ldmatrix or cp.async into an under-aligned buffer is an error here as it
// is a fault on hardware.
// TMA loads copy their box at issue (out-of-bounds elements zero or NaN, the
// destination swizzled by its shared-window address, which must be 128-byte
// aligned) and complete their bytes on the mbarrier; the destination stays in
// flight until that mbarrier's phase completes. mbarrier waits must find
// their phase complete (threads run in lockstep: a wait that would block is a
// deadlock here). The tensor map bound at launch must pass the driver's rules
// and match the descriptor type the kernel was compiled with.
// device_async_copy copies at issue; the destination stays "in flight" until
// a device_async_wait of the issuing thread covers its group
// (device_async_create_group commits the thread's pending copies; a wait
// with numGroups = n leaves the n newest groups in flight).
//
// Clusters (SimtOptions::cluster). The blocks of a cluster run together, as
// one set of threads in lockstep (block c's threads after block c − 1's,
// each block's padded to a whole warpgroup), each with its own shared
// memory, mbarriers, named barriers, register pool and gpu.barrier; vector
// clocks then span the cluster, so what orders two threads of different
// blocks is what orders them on hardware: mbarrier phases and the cluster
// barrier (nvvm.cluster.arrive / nvvm.cluster.wait, every thread of the
// cluster). A multicast TMA load (multicast_mask bit r: block rank r of
// the cluster) writes its box into each named block's copy of the
// destination and completes its bytes on that block's mbarrier of the
// same group and index. nvgpu.mbarrier.get, llvm.inttoptr and nvvm.mapa
// give the address of a block's mbarrier in the cluster, and
// nvvm.mbarrier.arrive on it arrives there. A peer's multicast copy lands
// as a write by a thread that arrived in the phase it completed, so only
// the waiters of that phase are ordered after it. Checked besides: a
// peer's mbarrier is used only once its mbarrier.init reached the cluster
// (the initializing thread's fence.mbarrier_init or non-relaxed cluster
// arrival after the init, then that cluster barrier phase completed); no
// block ends while a peer may still touch its shared memory (a cluster
// barrier phase must complete after the last such access); cluster barrier
// arrivals alternate with waits. Stricter than the hardware: every thread
// of the cluster must arrive (exited threads do not count as arrived), and
// the blocks' threads wait in lockstep (a wait blocks until it may pass in
// every block that reached it).
//
// Supported ops:
//  gpu:    thread_id block_id block_dim grid_dim global_id lane_id subgroup_id
//          num_subgroups subgroup_size barrier shuffle(xor|up|down|idx) return
//          cluster_id cluster_dim cluster_block_id cluster_dim_blocks
//  scf:    for (iter_args, unsignedCmp) if while yield condition
//  arith:  constant (scalars, dense and splat vectors) addi subi muli divsi
//          divui remsi remui ceildivsi ceildivui floordivsi andi ori xori shli
//          shrsi shrui minsi maxsi minui maxui cmpi addf subf mulf divf remf
//          negf maximumf minimumf maxnumf minnumf cmpf select extsi extui
//          trunci index_cast index_castui sitofp uitofp fptosi fptoui extf
//          truncf bitcast
//  math:   exp exp2 expm1 log log2 log1p fma sqrt rsqrt tanh sin cos erf absf
//          absi floor ceil round roundeven trunc powf copysign
//  memref: load store alloca subview cast dim assume_alignment
//          extract_aligned_pointer_as_index (dynamic shared views only)
//  vector: load store transfer_read transfer_write (1-D, minor identity)
//          broadcast extract insert from_elements shape_cast fma reduction
//          step create_mask (1-D) constant_mask
//  nvvm:   wgmma.mma_async (m64nNk16, f16/bf16 → f32, descriptors into dynamic
//          shared memory) wgmma.fence/commit/wait fence.proxy (async.shared)
//          cluster.arrive(.relaxed) cluster.wait fence.mbarrier_init mapa
//          mbarrier.arrive (on an mbarrier.get address, local or mapped)
//  llvm:   mlir.zero extractvalue insertvalue (structs of one scalar type)
//          inttoptr (of an mbarrier.get address)
//  nvgpu:  mbarrier.create/init/arrive/arrive.expect_tx/try_wait.parity
//          mbarrier.get tma.async.load (tile mode, multicast in clusters; the descriptor an
//          !llvm.ptr parameter bound with SimtArg::tensorMap, cast by
//          builtin.unrealized_conversion_cast)
//          mma.sync (m16n8k16/m16n8k8 f16|bf16 → f32|f16, m16n8k8/m16n8k4
//          tf32 → f32) ldmatrix (x1/x2/x4, transpose) device_async_copy
//          device_async_create_group device_async_wait
//  ub:     poison (as zero)
// Not supported (reported as "unsupported op"): cf branches (unstructured
// control flow), gpu.subgroup_reduce / all_reduce, scf.forall / parallel,
// memref.alloc, tensor ops, integer and sparse mma. Memref parameters must
// have the identity layout; vector.load/store and transfer ops are 1-D.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_SIMTINTERPRETER_H
#define LOSSJIT_TESTING_SIMT_SIMTINTERPRETER_H

#include "testing/simt/AsyncTransferModel.h"
#include "testing/simt/SimtBuffer.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/Support/Error.h"

#include <array>
#include <memory>
#include <vector>

namespace lossjit::simt {

/// Knobs of a launch.
struct SimtOptions {
  /// Check for data races (costs a per-element record on every buffer).
  bool detectRaces = true;
  /// Upper bound on executed instructions per block (each instruction counts
  /// once however many threads run it); exceeding it is an error.
  uint64_t maxSteps = uint64_t(1) << 27;
  /// Bytes of dynamic shared memory the launch provides (the plan's
  /// shared_bytes); a view of gpu.dynamic_shared_memory past it is an error,
  /// as it would read or write past the block's shared memory on hardware.
  int64_t dynamicSharedBytes = 0;
  /// Blocks per thread-block cluster (sm_90): each dimension must divide the
  /// grid's, at most 8 blocks in all (the portable limit), and match the
  /// kernel's known_cluster_size where it has one. The blocks of a cluster
  /// run together (see "Clusters" above). Left at (1,1,1), a kernel with a
  /// known_cluster_size launches in clusters of that (as its PTX would).
  std::array<int64_t, 3> cluster = {1, 1, 1};
};

/// One kernel argument: a buffer for a memref parameter, or a scalar for an
/// integer, index or float parameter.
class SimtArg {
public:
  /// Binds `buffer` to a memref parameter. A parameter of dynamic rank-1
  /// shape takes the buffer's size; other dynamic shapes need `shape`.
  static SimtArg buffer(SimtBuffer &buffer,
                        llvm::ArrayRef<int64_t> shape = {}) {
    SimtArg arg;
    arg.buf = &buffer;
    arg.shape.assign(shape.begin(), shape.end());
    return arg;
  }
  /// An integer or index value.
  static SimtArg integer(int64_t value) {
    SimtArg arg;
    arg.intValue = value;
    return arg;
  }
  /// A TMA tensor map for an !llvm.ptr parameter: `map` describes `global`
  /// (both must outlive the launch), as cuTensorMapEncodeTiled would.
  static SimtArg tensorMap(const TensorMapDesc &map, SimtBuffer &global) {
    SimtArg arg;
    arg.buf = &global;
    arg.map = &map;
    return arg;
  }
  /// A tensor map parameter the launch could not encode (what the runtime
  /// passes, zeros, when a base or row stride does not meet TMA's rules): a
  /// TMA load through it is an error.
  static SimtArg unencodedTensorMap() {
    SimtArg arg;
    arg.unencoded = true;
    return arg;
  }
  /// A float value (for f16/bf16/f32/f64 parameters; rounded to the type).
  static SimtArg real(double value) {
    SimtArg arg;
    arg.isReal = true;
    arg.realValue = value;
    return arg;
  }

  SimtBuffer *buf = nullptr;
  std::vector<int64_t> shape;
  int64_t intValue = 0;
  bool isReal = false;
  double realValue = 0;
  const TensorMapDesc *map = nullptr;
  bool unencoded = false;
};

namespace detail {
struct Program;
} // namespace detail

/// A gpu.func decoded for interpretation; decode once, launch many times.
/// The decoded form does not reference the IR except for error locations, so
/// the module must outlive the kernel.
class SimtKernel {
public:
  /// Decodes `func`. Fails on the first unsupported op or type.
  static llvm::Expected<std::unique_ptr<SimtKernel>>
  decode(mlir::gpu::GPUFuncOp func);
  ~SimtKernel();

  /// Runs the kernel on `grid` blocks of `block` threads (at most 1024 per
  /// block). Fails with the first error any thread hits; buffers keep what
  /// was written up to that point.
  llvm::Error launch(std::array<int64_t, 3> grid, std::array<int64_t, 3> block,
                     llvm::ArrayRef<SimtArg> args,
                     const SimtOptions &options = {}) const;

  /// The gpu.func's symbol name.
  llvm::StringRef getName() const;
  /// Number of decoded instructions (for tests and statistics).
  size_t getNumInstructions() const;

private:
  SimtKernel();
  std::unique_ptr<detail::Program> program;
};

/// Finds kernel `kernelName` in `gpu.module @moduleName` under `root`.
llvm::Expected<mlir::gpu::GPUFuncOp> lookupKernel(mlir::Operation *root,
                                                  llvm::StringRef moduleName,
                                                  llvm::StringRef kernelName);

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_SIMTINTERPRETER_H
