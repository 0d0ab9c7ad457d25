//===- Wgmma.cpp - tile products on Hopper's warpgroup MMA (sm_90a) -------===//
//
// A block of G warpgroups (128·G threads) computes a BM × BN tile of C = A·Bᵀ,
// BM = 64·G: warpgroup g owns rows 64g … 64g + 63 and every column, as one
// wgmma.mma_async m64nBNk16 per k16 step with f32 accumulators in registers
// (BN/2 per thread).
//
// Operands reach the tensor cores through shared memory in the PTX ISA's
// canonical no-swizzle layout: a stage of an operand with L lines holds
// (L/8)·(BK/8) core matrices of 8 × 8 elements (128 contiguous bytes), core
// matrix (line/8, k/8) at element ((k/8)·(L/8) + line/8)·64, its rows 8
// lines of 8 k (K-major operand) or 8 k of 8 lines (MN-major). Both majors
// then have the same strides: SBO (the next 8 lines) 128 bytes, LBO (the
// next 8 k) L·16 bytes; wgmma's transpose flags (imm-trans-a/b) say which
// one a matrix is, so no operand is transposed in memory.
//
// The ring of `stages` stages is filled by cp.async as for mma.sync
// (OperandStaging.h). With three or more stages one wgmma group stays in
// flight: L = stages − 2 k tiles are copied ahead; step kt waits for tile
// kt, fences the generic proxy's writes for the async proxy that wgmma reads
// through (fence.proxy.async.shared::cta, each thread after its own copies
// landed), barriers, issues tile kt + L into the stage step kt − 2 read
// (its group retired by the previous step's wait_group 1), multiplies tile
// kt and commits, waiting until at most one group is in flight; the tensor
// cores work on step kt while the threads reach step kt + 1. Two stages:
// L = 1 and wait_group 0. The k loop and the wait after it sit under
// numK > 0 (retiredLoop): ptxas serializes every wgmma of a kernel where a
// group in flight meets the no-k path's zeroed accumulators.
//
// Fragments (PTX ISA, "wgmma .m64nNk16 register fragment layout for
// accumulator matrix D"): thread t of warpgroup g holds rows 64g + 16·(t/32)
// + (t%32)/4 and + 8, columns 8j + 2·(t%4) + {0, 1} of each n8 block j, in
// registers 4j + {0, 1} (first row) and 4j + {2, 3}.
//
// TMA (tile tma=1, both operands with tensor maps the runtime encoded): one
// thread copies each k tile into a stage of 2-D rings whose rows are BK
// elements. A K-major operand is one box of BK × lines: rows of one swizzle
// span S = 2·BK bytes (128, 64 or 32). An MN-major one (BK = 64 only) is a
// box of 64 lines × BK per 64 lines, each a run of BK rows of 128 bytes
// (the 128-byte swizzle). The hardware swizzles in atoms of 8 rows (8·S
// bytes, atom-aligned: the base is 1024-byte aligned and every stage and
// box a whole number of atoms). Each stage has an mbarrier
// (arrival count 1): the copying thread arrives with the stage's bytes as
// its transaction count and the copies complete it; every thread waits on
// the parity of the tile's use of the stage, then the block barrier that
// also retires the stage the next copy overwrites, as in the cp.async ring.
// The descriptors name the swizzle: K-major, SBO = 8·S (the next 8 rows),
// the k16 step at +32 bytes in the row; MN-major, LBO = the next box of 64
// lines, SBO = 1024 bytes (the next 8 k rows), the k16 step at +16 rows. No
// fence is needed, as TMA writes and wgmma reads through the async proxy.
// A product leaves every stage's barrier at an even phase count (an extra
// arrival where a stage was used an odd number of times, after a block
// barrier so no thread still waits on it), so the next product's parities
// start at 0. When the runtime could not encode the maps (tensorMapReady
// 0) the same rings, read as flat buffers, take the cp.async path.
//
// Box coordinates are relative to the operands' origins (a chunk's dZ);
// past a map's bounds the boxes read zeros, which is what makes the k rows
// past a chunk's end harmless in dW (GpuSchedule::declareWeightGradientMaps).
//
// Warp specialization (tile tma=2): a producer warp follows the consumer
// warpgroups (128·G + 32 threads). Its first thread copies every k tile
// into its stage as above, but first waits on a second ring of mbarriers,
// "empty" (G arrivals per phase), for the consumers' release of the stage's
// previous use. The consumers wait on "full", multiply, and once a wait
// retired the wgmma group that read a stage, release it: one arrival per
// warpgroup, by its first thread. No block barrier in the k loop, so the
// copies run up to `stages` k tiles ahead of the tensor cores. Both rings
// end a product at even phase counts. The producer warp holds an empty
// fragment (every line invalid) and joins the epilogue. A warp, not a
// warpgroup, but it costs the consumers as much: a launch counts a block's
// warps rounded up to the SM's 4 sub-partitions, so 288 threads get the
// registers of 384, 168 each (ptxas's own cap for .maxntid 288; more, e.g.
// nvvm.maxnreg 224, assembles but fails every launch with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, seen on an H200). More registers for
// the consumers need a producer warpgroup that gives its own back
// (setmaxnreg: tile tma=3, below). The interpreter runs the two roles as
// tasks that wait on each other (testing/simt/ExecTasks.cpp).
//
// A sweep of tiles (sweep(): lce_partial's column tiles) with tma ≥ 2 and an
// epilogue that synchronizes nothing is one ring sequence through all its
// tiles: copy g is k tile g mod numK of tile g / numK, in stage g mod
// stages, so the producer copies the next tile's first k tiles while the
// consumers retire this tile's last group and fold it; the ring does not
// drain at every tile boundary as separate products would.
//
// The persistent product kernels (tile persistent, GpuSchedule::forEachTile)
// are such sweeps over the tiles blockIdx.x, + gridDim.x, … (but for a
// teacher's dZ, whose second product per tile keeps it tile by tile).
//
// A producer warpgroup that lends its registers (tile tma=3): 128·G + 128
// threads launched with nvvm.maxnreg 168 (G = 2). Around a sweep with ready
// maps (pipelinedSweep) or on the cp.async fallback (consumersSweep) the
// roles are the two branches of one if/else, each between two setmaxnregs
// (withRegisters): the producer keeps 40, the consumers take 232 and run
// the epilogues in them — the registers of 128×256 gradient tiles. The
// consumers give theirs back first and say so on a named barrier the
// producer waits on before it takes its own back.
//
// layout() says whether a tile lies wholly inside its column limits
// (colsInside) and gives the unclamped columns, so an epilogue can fold a
// whole tile without masks (foldColumns): the registers of 128×256 logits.
//
// Clusters (tile cluster=C, 2 or 4, and tma ≥ 2; the kernel's
// known_cluster_size says so: lce_partial, Forward.cpp; lce_bwd_dz /
// lce_fused_z, lce_bwd_dx and lce_bwd_dw, Backward.cpp): the C blocks of a
// cluster are row blocks of one vocabulary split (or column block), so they
// read the same B tiles (W; dX's Wᵀ; dW's Xᵀ). Each block's producer
// copies its own A tile and its share of the B tile into every block's
// stages (TMA multicast, mask 2^C − 1): lines rank·BN/C … of a K-major
// box, or of an MN-major tile's boxes of 64 lines the rank-th C-th. Each
// block's full barrier expects the whole stage as before. A stage of any
// block is refilled by every producer, so each "empty" barrier counts the
// consumer warpgroups of all blocks (C·G), and a consumer releases a stage
// on every block's barrier (the address by nvgpu.mbarrier.get, mapped by
// nvvm.mapa, arrived on at shared::cluster). fence.mbarrier_init and a
// cluster barrier after the inits make the barriers the peers use visible
// before their first copy; a cluster barrier after the sweep keeps each
// block alive until its peers are done with it. B then leaves L2 once per
// cluster of row blocks. Every block of a cluster runs the same slots with
// the same B tiles: a persistent or banded product's clusters take their
// tiles together (GpuSchedule::forEachTile).
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/Matmul/OperandStaging.h"
#include "compiler/Kernels/Matmul/TileMatmul.h"
#include "compiler/Kernels/Support/BlockReduce.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

using namespace mlir;
using namespace lossjit;

namespace {
constexpr int64_t kWarpgroup = 128; ///< threads of a warpgroup.
constexpr int64_t kGroupRows = 64;  ///< rows of C one warpgroup owns (wgmma's M).
constexpr int64_t kStepK = 16;      ///< k of one wgmma.
constexpr int64_t kCore = 64;       ///< elements of an 8 × 8 core matrix.
constexpr int64_t kCoreBytes = 128;
/// Alignment of TMA's swizzled stages: the 128-byte swizzle's atom.
constexpr int64_t kTmaAlign = 1024;
/// Lines of an MN-major TMA box: one 128-byte swizzle span of 16-bit elements.
constexpr int64_t kMnBoxLines = 64;
/// try_wait.parity's suspend-time hint (nanoseconds; the wait loops anyway).
constexpr int64_t kWaitTicks = 1000000;
/// Named barriers of the tma=3 roles (0 is the block's): the consumer
/// warpgroups', and the one on which the consumers hand the registers back.
constexpr int32_t kConsumerBarrier = 1, kHandbackBarrier = 2;

class Wgmma : public TileMatmul {
  /// Where the calling thread sits in the block.
  struct Lanes {
    Value tid, lane, group, quad; ///< lane / 4 and lane % 4.
    Value warpgroupRow;           ///< 64 · warpgroup: its first tile row.
    Value warpRow;                ///< the warp's first tile row.
    Value consumer;               ///< i1, tile tma ≥ 2: a consumer warpgroup's thread.
  };

  /// One operand's ring: `lines` lines per stage.
  struct Staged {
    Value ring;
    int64_t lines;
    bool kMajor;
  };

public:
  explicit Wgmma(const TileConfig &tile)
      : bm(tile.blockRows), bn(tile.blockCols), bk(tile.blockK), stages(tile.stages),
        threads(tile.threads), tma(tile.tma != 0), ws(tile.tma >= 2),
        registers(tile.warpgroupRegisters()) {}

  SmallVector<ScratchBuffer> scratch(Type storage) const override {
    // TMA: rows of BK elements, stages on swizzle atoms.
    if (tma)
      return {{stages * bm * bk, storage, kTmaAlign, bk}, {stages * bn * bk, storage, kTmaAlign, bk}};
    // Core matrices are read as whole 16-byte rows: 16-byte aligned stages.
    return {{stages * bm * bk, storage, 16}, {stages * bn * bk, storage, 16}};
  }

  void prepare(KernelEmitter &e, SmallVectorImpl<Value> &scratch) const override {
    if (!tma)
      return;
    OpBuilder &b = e.builder();
    Value bars = nvgpu::MBarrierCreateOp::create(b, e.location(), barrierType(b.getContext()));
    // One arrival per phase: the copying thread's expect_tx.
    e.ifThen(e.cmpI(arith::CmpIPredicate::eq, gpuThreadIdx(e), e.index(0)),
             [&](KernelEmitter &ie) {
               for (int64_t s = 0; s < stages; ++s)
                 nvgpu::MBarrierInitOp::create(ie.builder(), ie.location(), bars, ie.index(1),
                                               ie.index(s), Value());
               // The copies complete on these barriers through the async
               // proxy: the generic-proxy inits must be visible to it.
               NVVM::FenceProxyOp::create(
                   ie.builder(), ie.location(),
                   NVVM::ProxyKindAttr::get(ie.builder().getContext(),
                                            NVVM::ProxyKind::async_shared),
                   NVVM::SharedSpaceAttr::get(ie.builder().getContext(),
                                              NVVM::SharedSpace::shared_cta));
             });
    Value empty;
    const int64_t cluster = clusterBlocks(scratch.front());
    if (ws) {
      // One arrival per consumer warpgroup and use: its first thread, once
      // the wgmma group that read the stage retired; in a cluster, the
      // consumers of every block, whose stages this block's copies fill.
      empty = nvgpu::MBarrierCreateOp::create(b, e.location(), barrierType(b.getContext()));
      e.ifThen(e.cmpI(arith::CmpIPredicate::eq, gpuThreadIdx(e), e.index(0)),
               [&](KernelEmitter &ie) {
                 for (int64_t s = 0; s < stages; ++s)
                   nvgpu::MBarrierInitOp::create(ie.builder(), ie.location(), empty,
                                                 ie.index(consumers() * cluster), ie.index(s),
                                                 Value());
                 // The peer's copies and arrivals reach these barriers: the
                 // inits must be visible at cluster scope.
                 if (cluster > 1)
                   NVVM::FenceMbarrierInitOp::create(ie.builder(), ie.location());
               });
    }
    // Before a peer's first copy lands here, every block's barriers exist.
    if (cluster > 1)
      clusterBarrier(e);
    else
      gpuBarrier(e);
    scratch.push_back(bars);
    if (empty)
      scratch.push_back(empty);
  }

  /// Every row lives in one warp's quads: one merge slot per row.
  int64_t rowMergeSlots(int64_t rows) const override { return rows; }

  Fragment layout(KernelEmitter &e, const BlockTile &tile) const override {
    assert(tile.rows == bm && tile.cols == bn && "wgmma: one BM x BN tile per block");
    Lanes l = lanes(e);
    Fragment f;
    for (int64_t h = 0; h < 2; ++h) {
      Value tileRow = e.add(l.warpRow, e.add(e.index(h * 8), l.group));
      f.sharing.tileRows.push_back(tileRow);
      clampLine(e, e.add(tile.rowBegin, tileRow), tile.rowLimit, f.rows, f.rowValid);
    }
    f.colFirst = e.add(tile.colBegin, e.mul(l.quad, e.index(2)));
    f.colLast = e.sub(tile.colLimit, e.index(1));
    for (int64_t j = 0; j < bn / 8; ++j)
      for (int64_t q = 0; q < 2; ++q) {
        f.colOffsets.push_back(j * 8 + q);
        f.openCols.push_back(e.add(f.colFirst, e.index(j * 8 + q)));
        clampLine(e, f.openCols.back(), tile.colLimit, f.cols, f.colValid);
      }
    f.colsInside =
        e.cmpI(arith::CmpIPredicate::ule, e.add(tile.colBegin, e.index(bn)), tile.colLimit);
    f.sharing.everyThread = false;
    f.sharing.laneXor = {1, 2}; // the four lanes of a quad share rows
    f.sharing.lane = l.lane;
    f.sharing.leader = e.cmpI(arith::CmpIPredicate::eq, l.quad, e.index(0));
    if (ws) {
      // The producer's threads (tma=2's warp, tma=3's warpgroup) hold no
      // element of C: their fragment is empty (every line invalid, no merge
      // slot written).
      Value consumer = isConsumer(e, l);
      for (Value &valid : f.rowValid)
        valid = e.andI(valid, consumer);
      for (Value &valid : f.colValid)
        valid = e.andI(valid, consumer);
      f.colsInside = e.andI(f.colsInside, consumer);
      f.sharing.leader = e.andI(f.sharing.leader, consumer);
    }
    f.sharing.group = e.index(0);
    f.sharing.groups = 1;
    return f;
  }

  Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                    const BlockTile &tile, Value kBegin, Value kEnd, ValueRange init,
                    ArrayRef<Value> buffers) const override {
    return product(e, a, b, tile, kBegin, kEnd, init, buffers, /*allowTma=*/true);
  }

  SmallVector<Value> sweep(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                           const TileSweep &tiles, Value kBegin, Value kEnd, ValueRange init,
                           ArrayRef<Value> buffers, const TileEpilogue &epilogue,
                           bool overlap) const override {
    assert(buffers.size() >= 2 && "wgmma: the operand rings");
    Staged sa{buffers[0], bm, isKMajor(a)}, sb{buffers[1], bn, isKMajor(b)};
    // Operands without tensor maps (tiles TMA cannot fill): with tma=3 the
    // consumers alone, in the lent registers, on the cp.async ring.
    const bool mapped = byTma(a, b, sa, sb, buffers);
    if (registers.launch && overlap && !mapped) {
      gpuBarrier(e);
      return consumersSweep(e, a, b, tiles, kBegin, kEnd, init, sa, sb, epilogue);
    }
    const int64_t cluster = clusterBlocks(buffers[0]);
    assert((cluster == 1 || (ws && overlap && mapped)) &&
           "clusters: a warp-specialized sweep on TMA (GpuSchedule::partialCluster, "
           "logitsCluster, gradientCluster)");
    if (!ws || !overlap || !mapped)
      return TileMatmul::sweep(e, a, b, tiles, kBegin, kEnd, init, buffers, epilogue, overlap);
    // The previous product's last reads of the ring.
    gpuBarrier(e);
    SmallVector<Value> state = e.ifElseValues(
        e.cmpI(arith::CmpIPredicate::ne, e.andI(a.tensorMapReady, b.tensorMapReady), e.index(0)),
        [&](KernelEmitter &te) {
          return pipelinedSweep(te, a, b, tiles, kBegin, kEnd, init, sa, sb, buffers[2], buffers[3],
                                epilogue, cluster);
        },
        [&](KernelEmitter &ce) {
          // The maps could not be encoded: tile by tile through cp.async.
          if (registers.launch)
            return consumersSweep(ce, a, b, tiles, kBegin, kEnd, init, sa, sb, epilogue);
          return ce.forLoop(tiles.begin, tiles.end, tiles.step, init,
                            [&](KernelEmitter &le, Value iv, ValueRange state) {
                              KernelEmitter te = tiles.pinned(le);
                              const BlockTile tile = tiles.tileAt(te, iv);
                              Fragment f = product(te, a, b, tile, kBegin, kEnd, {}, buffers,
                                                   /*allowTma=*/false);
                              return epilogue(te, tile, f, state);
                            });
        });
    // No block of the cluster leaves while its peer may still copy into it
    // or arrive on its barriers.
    if (cluster > 1)
      clusterBarrier(e);
    return state;
  }

private:
  /// Blocks per cluster of the kernel that holds `ring` (its
  /// known_cluster_size; 1 without): the products' pairs of row blocks
  /// (Forward.cpp, Backward.cpp). Asked of a ring, defined where the kernel began: the
  /// builder may sit in a region of an op under construction, which has
  /// no parent yet.
  static int64_t clusterBlocks(Value ring) {
    Operation *op = ring.getParentBlock()->getParentOp();
    auto func = dyn_cast<gpu::GPUFuncOp>(op);
    if (!func)
      func = op->getParentOfType<gpu::GPUFuncOp>();
    std::optional<ArrayRef<int32_t>> size = func ? func.getKnownClusterSize() : std::nullopt;
    return size ? int64_t((*size)[0]) * (*size)[1] * (*size)[2] : 1;
  }

  /// barrier.cluster.arrive and .wait: every thread of the cluster (a
  /// block barrier too).
  static void clusterBarrier(KernelEmitter &e) {
    NVVM::ClusterArriveOp::create(e.builder(), e.location(), UnitAttr());
    NVVM::ClusterWaitOp::create(e.builder(), e.location(), UnitAttr());
  }

  /// One arrival on barrier `stage` of `bars` in every block of a cluster
  /// of `cluster` (the own one too, through its shared::cluster address);
  /// without clusters a plain local arrival.
  static void arriveEverywhere(KernelEmitter &e, Value bars, Value stage, int64_t cluster) {
    OpBuilder &b = e.builder();
    MLIRContext *context = b.getContext();
    if (cluster == 1) {
      nvgpu::MBarrierArriveOp::create(b, e.location(), nvgpu::MBarrierTokenType::get(context), bars,
                                      stage);
      return;
    }
    Value address = nvgpu::MBarrierGetOp::create(b, e.location(), b.getI64Type(), bars, stage);
    Value local =
        LLVM::IntToPtrOp::create(b, e.location(), LLVM::LLVMPointerType::get(context, 3), address);
    for (int64_t rank = 0; rank < cluster; ++rank) {
      Value remote = NVVM::MapaOp::create(b, e.location(), LLVM::LLVMPointerType::get(context, 7),
                                          local, e.i32(int32_t(rank)));
      NVVM::MBarrierArriveOp::create(b, e.location(), Type(), remote, Value());
    }
  }

  /// Whether a product of `a` and `b` may copy by TMA: tile tma ≥ 1, the
  /// ring's mbarriers prepared, both operands with tensor maps whose boxes
  /// fill the stages.
  bool byTma(const MatrixOperand &a, const MatrixOperand &b, const Staged &sa, const Staged &sb,
             ArrayRef<Value> buffers) const {
    return tma && buffers.size() == (ws ? 4u : 3u) && a.tensorMap && b.tensorMap &&
           tmaCopies(sa) && tmaCopies(sb);
  }

  /// multiply(); without `allowTma`, through the cp.async ring only.
  Fragment product(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                   const BlockTile &tile, Value kBegin, Value kEnd, ValueRange init,
                   ArrayRef<Value> buffers, bool allowTma) const {
    assert(buffers.size() >= 2 && "wgmma: the operand rings");
    Fragment f = layout(e, tile);
    Lanes l = lanes(e);
    Staged sa{buffers[0], bm, isKMajor(a)}, sb{buffers[1], bn, isKMajor(b)};
    // In a cluster (its empty barriers count every block's consumers) a
    // product shares W as a sweep does.
    const int64_t cluster = clusterBlocks(buffers[0]);
    // The previous tile's last products may still read the ring.
    gpuBarrier(e);
    Value acc = initialAccumulator(e, init, f);
    Value result;
    if (allowTma && byTma(a, b, sa, sb, buffers))
      result = e.ifElse(
          e.cmpI(arith::CmpIPredicate::ne, e.andI(a.tensorMapReady, b.tensorMapReady), e.index(0)),
          [&](KernelEmitter &te) {
            if (ws)
              return specializedProduct(te, a, b, tile, kBegin, kEnd, acc, sa, sb, buffers[2],
                                        buffers[3], l, cluster);
            return tmaProduct(te, a, b, tile, kBegin, kEnd, acc, sa, sb, buffers[2], l);
          },
          [&](KernelEmitter &ce) {
            return copiedProduct(ce, a, b, tile, kBegin, kEnd, acc, sa, sb, l);
          });
    else
      result = copiedProduct(e, a, b, tile, kBegin, kEnd, acc, sa, sb, l);

    fillFragment(e, f, result);
    return f;
  }

  /// `f`'s values from the accumulator struct `acc`.
  void fillFragment(KernelEmitter &e, Fragment &f, Value acc) const {
    OpBuilder &b = e.builder();
    f.values.assign(f.rows.size() * f.cols.size(), Value());
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = 0; j < bn / 8; ++j)
        for (int64_t q = 0; q < 2; ++q)
          f.at(h, j * 2 + q) = LLVM::ExtractValueOp::create(b, e.location(), acc,
                                                           ArrayRef<int64_t>{register_(h, j, q)});
  }

  /// The product through the cp.async ring in the no-swizzle layout: `acc`
  /// plus A·Bᵀ over [kBegin, kEnd), as the accumulator struct.
  /// `consumersAlone`: only the consumer warpgroups run it (tile tma=3's
  /// role branch), synchronizing on their named barrier.
  Value copiedProduct(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                      const BlockTile &tile, Value kBegin, Value kEnd, Value acc, const Staged &sa,
                      const Staged &sb, const Lanes &l, bool consumersAlone = false) const {
    KTiles k(e, a, b, tile, kBegin, kEnd, bk, stages);
    Value numK = k.numK;
    // Shared-window byte addresses of the rings, for the descriptors.
    Value ringA = ringAddress(e, sa), ringB = ringAddress(e, sb);

    // Each step's copies read the thread's id afresh (opaqueThreadIdx):
    // otherwise LLVM hoists their pieces' offsets (64-bit, several per
    // operand) out of the k loop, live through every wgmma and the
    // epilogue. Recomputing them costs a few integer ops per step; keeping
    // them cost lce_partial up to 264 bytes of spills (128 columns, bias)
    // and dX/dW 50 registers.
    auto fill = [&](KernelEmitter &fe, Value kt) {
      return k.fill(fe, kt, [&](KernelEmitter &ie, Value stage, Value k0) {
        KernelEmitter pe = ie.withThreadId(opaqueThreadIdx(ie));
        const Lanes pl = lanes(pe);
        fillOperand(pe, a, sa, stage, k0, kEnd, tile.rowBegin, tile.rowLimit, k.alignedA, pl);
        fillOperand(pe, b, sb, stage, k0, kEnd, tile.colBegin, tile.colLimit, k.alignedB, pl);
      });
    };
    // With three or more stages one wgmma group stays in flight while the
    // next step synchronizes and issues its copies; the stage a fill
    // overwrites must then be one the group before it read. Not in the
    // fallback of tile tma ≥ 2, whose wgmmas sit under the consumers' branch
    // inside the loop: a group in flight across that branch's join makes
    // ptxas serialize every wgmma of the kernel (C7514/C7517).
    const int64_t inFlight = stages >= 3 && (!ws || consumersAlone) ? 1 : 0;
    const int64_t lookahead = stages - 1 - inFlight; // k tiles copied ahead
    Value token;
    for (int64_t s = 0; s < lookahead; ++s)
      token = fill(e, e.index(s));

    OpBuilder &b0 = e.builder();
    Value result = retiredLoop(e, numK, acc, [&](KernelEmitter &ie) {
    SmallVector<Value> carried{acc};
    carried = ie.forLoop(ie.index(0), numK, ie.index(1), carried,
                        [&](KernelEmitter &le, Value kt, ValueRange it) {
      OpBuilder &lb = le.builder();
      nvgpu::DeviceAsyncWaitOp::create(lb, le.location(), token,
                                       lb.getI32IntegerAttr(lookahead - 1));
      // This thread's copies have landed; make them visible to the async
      // proxy before the barrier publishes them to the warpgroups.
      NVVM::FenceProxyOp::create(
          lb, le.location(), NVVM::ProxyKindAttr::get(lb.getContext(), NVVM::ProxyKind::async_shared),
          NVVM::SharedSpaceAttr::get(lb.getContext(), NVVM::SharedSpace::shared_cta));
      ringBarrier(le, consumersAlone);
      // Stage (kt + lookahead) % stages was last read by step kt − 1 −
      // inFlight, whose group the previous step's wait retired.
      fill(le, le.add(kt, le.index(lookahead)));
      Value stage = le.remUI(kt, le.index(stages));
      return SmallVector<Value>{consumersOnly(le, l, it[0], consumersAlone, [&](KernelEmitter &pe) {
        return stageProduct(pe, it[0], ringA, ringB, sa, sb, stage, l, inFlight,
                            /*swizzled=*/false);
      })};
    });
    // The accumulators are read next. Nothing reads them before the wait:
    // it is a side-effecting asm with no data link to them, so they pass
    // through one that comes after it (CUTLASS's warpgroup_fence_operand).
    return consumersOnly(ie, l, carried[0], consumersAlone, [&](KernelEmitter &we) {
      NVVM::WgmmaWaitGroupSyncOp::create(we.builder(), we.location(), 0);
      return fenceAccumulators(we, carried[0]);
    });
    });
    // Nothing may stay in flight into the caller's shared memory reuse.
    nvgpu::DeviceAsyncWaitOp::create(b0, e.location(), token, b0.getI32IntegerAttr(0));
    return result;
  }

  /// `loop(e)` — a k loop from `acc` and the wait that retires its last
  /// wgmma group — when numK > 0, else `acc`. With the wait inside, the
  /// loop's exit joins the path that skips the loop only after the group
  /// retired: a join of that path's accumulators (zeros, set by moves)
  /// with a group still in flight makes ptxas serialize every wgmma of the
  /// kernel (advisory C7515).
  static Value retiredLoop(KernelEmitter &e, Value numK, Value acc,
                           const std::function<Value(KernelEmitter &)> &loop) {
    return e.ifElse(e.cmpI(arith::CmpIPredicate::ugt, numK, e.index(0)), loop,
                    [&](KernelEmitter &) { return acc; });
  }

  /// `acc` + the products of stage `stage` (one wgmma per k16 step and
  /// warpgroup), committed as a group; waits until at most `inFlight` groups
  /// are in flight. `swizzled`: TMA's stages, else the no-swizzle layout.
  Value stageProduct(KernelEmitter &e, Value acc, Value ringA, Value ringB, const Staged &sa,
                     const Staged &sb, Value stage, const Lanes &l, int64_t inFlight,
                     bool swizzled) const {
    OpBuilder &b = e.builder();
    // Every accumulator register is settled before the fence (the
    // registers a wgmma reads must not be written after it).
    Value d = fenceAccumulators(e, acc);
    NVVM::WgmmaFenceAlignedOp::create(b, e.location());
    for (int64_t kk = 0; kk < bk / kStepK; ++kk) {
      Value descA = swizzled ? swizzledDescriptor(e, ringA, sa, stage, l.warpgroupRow, kk)
                             : descriptor(e, ringA, sa, stage, l.warpgroupRow, kk);
      Value descB = swizzled ? swizzledDescriptor(e, ringB, sb, stage, e.index(0), kk)
                             : descriptor(e, ringB, sb, stage, e.index(0), kk);
      d = product(e, descA, descB, d, sa, sb);
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(b, e.location());
    NVVM::WgmmaWaitGroupSyncOp::create(b, e.location(), inFlight);
    return d;
  }

  /// The product through TMA copies into swizzled stages on the mbarrier
  /// ring `bars` (see the file comment).
  Value tmaProduct(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                   const BlockTile &tile, Value kBegin, Value kEnd, Value acc, const Staged &sa,
                   const Staged &sb, Value bars, const Lanes &l) const {
    OpBuilder &b0 = e.builder();
    Value numK = e.ceilDiv(e.sub(kEnd, kBegin), e.index(bk));
    Value leader = e.cmpI(arith::CmpIPredicate::eq, l.tid, e.index(0));
    TmaTiles copies = tmaTiles(e, a, b, tile, kBegin, sa, sb, bars);
    Value ringA = ringAddress(e, sa), ringB = ringAddress(e, sb);
    auto fill = [&](KernelEmitter &fe, Value kt) {
      fe.ifThen(fe.andI(fe.cmpI(arith::CmpIPredicate::ult, kt, numK), leader),
                [&](KernelEmitter &ie) { copyTile(ie, copies, kt); });
    };
    const int64_t inFlight = stages >= 3 ? 1 : 0;
    const int64_t lookahead = stages - 1 - inFlight;
    for (int64_t s = 0; s < lookahead; ++s)
      fill(e, e.index(s));
    Value result = retiredLoop(e, numK, acc, [&](KernelEmitter &ie) {
    SmallVector<Value> carried{acc};
    carried = ie.forLoop(ie.index(0), numK, ie.index(1), carried,
                        [&](KernelEmitter &le, Value kt, ValueRange it) {
      Value stage = le.remUI(kt, le.index(stages));
      waitForUse(le, bars, kt, 0);
      // Every warpgroup retired the stage the next copy overwrites (read by
      // step kt − 1 − inFlight) and passed its wait on that stage's phase.
      gpuBarrier(le);
      fill(le, le.add(kt, le.index(lookahead)));
      return SmallVector<Value>{
          stageProduct(le, it[0], ringA, ringB, sa, sb, stage, l, inFlight, /*swizzled=*/true)};
    });
    NVVM::WgmmaWaitGroupSyncOp::create(ie.builder(), ie.location(), 0);
    return fenceAccumulators(ie, carried[0]);
    });
    // Even phase counts for the next product, once no thread waits on any
    // of this product's phases.
    gpuBarrier(e);
    e.ifThen(leader, [&](KernelEmitter &ie) { evenPhases(ie, bars, numK); });
    return result;
  }

  /// The warp-specialized product (tile tma ≥ 2): the producer's first
  /// thread copies every k tile by TMA into the `full` ring, waiting on
  /// `empty` before it refills a stage; the consumer warpgroups wait on
  /// `full`, multiply, and release each stage on `empty` (one arrival per
  /// warpgroup, by its first thread) once the wgmma group that read it
  /// retired. No block barrier inside the k loop: the producer runs up to
  /// `stages` tiles ahead.
  Value specializedProduct(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                           const BlockTile &tile, Value kBegin, Value kEnd, Value acc,
                           const Staged &sa, const Staged &sb, Value full, Value empty,
                           const Lanes &l, int64_t cluster = 1) const {
    OpBuilder &b0 = e.builder();
    Value numK = e.ceilDiv(e.sub(kEnd, kBegin), e.index(bk));
    TmaTiles copies = tmaTiles(e, a, b, tile, kBegin, sa, sb, full, cluster);
    Value ringA = ringAddress(e, sa), ringB = ringAddress(e, sb);
    Value warpgroupLeader = e.cmpI(arith::CmpIPredicate::eq, e.remUI(l.tid, e.index(kWarpgroup)),
                                   e.index(0));
    Value result = e.ifElse(
        isConsumer(e, l),
        [&](KernelEmitter &ce) {
          return retiredLoop(ce, numK, acc, [&](KernelEmitter &ie) {
            return consumeSlots(ie, ie.index(0), numK, acc, ringA, ringB, sa, sb, full, empty,
                                warpgroupLeader, l, cluster);
          });
        },
        [&](KernelEmitter &pe) {
          Value producerLeader = pe.cmpI(arith::CmpIPredicate::eq, l.tid,
                                         pe.index(consumers() * kWarpgroup));
          pe.ifThen(producerLeader, [&](KernelEmitter &ie) {
            ie.forLoop(ie.index(0), numK, ie.index(1), {},
                       [&](KernelEmitter &le, Value kt, ValueRange) {
              // Use u ≥ 1 of a stage waits for the consumers' release of
              // use u − 1 (phase u − 1 of its `empty` barrier).
              le.ifThen(le.cmpI(arith::CmpIPredicate::uge, kt, le.index(stages)),
                        [&](KernelEmitter &we) { waitForUse(we, empty, kt, 1); });
              copyTile(le, copies, kt);
              return SmallVector<Value>{};
            });
          });
          return acc;
        });
    evenBothRings(e, l, full, empty, numK, warpgroupLeader, cluster);
    // The peer's copies and arrivals into this block are done before the
    // next product refills the ring, or the block ends.
    if (cluster > 1)
      clusterBarrier(e);
    return result;
  }

  /// Even phase counts on both rings of a warp-specialized product or
  /// sweep that used `uses` slots (full: one arrival by thread 0; empty: one
  /// per consumer warpgroup), after a block barrier so that no thread still
  /// waits on any of their phases: the next product's parities start at 0.
  void evenBothRings(KernelEmitter &e, const Lanes &l, Value full, Value empty, Value uses,
                     Value warpgroupLeader, int64_t cluster = 1) const {
    // (In a cluster the empty ring's extra arrivals reach the peer after a
    // block barrier only: they may complete its last uses' phases early,
    // which no producer waits for any more; a cluster barrier follows the
    // sweep before the ring could be used again.)
    gpuBarrier(e);
    e.ifThen(e.cmpI(arith::CmpIPredicate::eq, l.tid, e.index(0)),
             [&](KernelEmitter &ie) { evenPhases(ie, full, uses); });
    // The consumers by thread id, not by lane 0's warp index (l.consumer):
    // nothing here is a wgmma that needs a warp-uniform branch, and that
    // index would otherwise stay live through the sweep.
    Value consumerThread =
        e.cmpI(arith::CmpIPredicate::ult, l.tid, e.index(consumers() * kWarpgroup));
    // (In a cluster each empty barrier counts every block's consumers.)
    e.ifThen(e.andI(warpgroupLeader, consumerThread),
             [&](KernelEmitter &ie) { evenPhases(ie, empty, uses, cluster); });
  }

  /// `role(e)` for the consumer warpgroups (`consumer`) or the producer
  /// warpgroup, with tile tma=3 between two setmaxnregs (else just
  /// role(e)): the consumers take registers->consumer and the producer
  /// keeps registers->producer, then each returns to the launch's count.
  /// The consumers' increase waits for the producer's release. The
  /// producer may give its registers back only once the consumers gave
  /// theirs: otherwise, done first (an empty sweep, or copies that all fit
  /// the ring), it would take back what it released before the consumers'
  /// increase took it, and they would wait forever. So the consumers
  /// arrive on the handback barrier (bar.arrive, no wait) after their
  /// decrease and the producer waits on it (bar.sync) before its increase.
  /// That wait is also the producer warpgroup's synchronization between
  /// its two setmaxnregs, which the PTX ISA asks for; the consumers get
  /// theirs from a barrier of their own. ptxas allocates each role's code
  /// within its count (the roles are the two branches of one if/else).
  SmallVector<Value>
  withRegisters(KernelEmitter &e, bool consumer,
                const std::function<SmallVector<Value>(KernelEmitter &)> &role) const {
    if (!registers.launch)
      return role(e);
    auto set = [&](int64_t from, int64_t to) {
      NVVM::SetMaxRegisterOp::create(e.builder(), e.location(), int32_t(to),
                                     to > from ? NVVM::SetMaxRegisterAction::increase
                                               : NVVM::SetMaxRegisterAction::decrease);
    };
    const int64_t count = consumer ? registers.consumer : registers.producer;
    const int64_t blockThreads = consumers() * kWarpgroup + kWarpgroup;
    set(registers.launch, count);
    SmallVector<Value> results = role(e);
    if (consumer) {
      ringBarrier(e, /*consumersAlone=*/true);
      set(count, registers.launch);
      NVVM::BarrierArriveOp::create(e.builder(), e.location(), e.i32(kHandbackBarrier),
                                    e.i32(int32_t(blockThreads)));
    } else {
      namedBarrier(e, kHandbackBarrier, blockThreads);
      set(count, registers.launch);
    }
    return results;
  }

  /// sweep() through the cp.async ring with tile tma=3: the consumers
  /// copy and multiply tile by tile on their own named barrier, with the
  /// registers the producer warpgroup lends them while it idles (at the
  /// launch's 168 their accumulators and the copies' addresses spill).
  SmallVector<Value> consumersSweep(KernelEmitter &e, const MatrixOperand &a,
                                    const MatrixOperand &b, const TileSweep &tiles, Value kBegin,
                                    Value kEnd, ValueRange init, const Staged &sa, const Staged &sb,
                                    const TileEpilogue &epilogue) const {
    Lanes l = lanes(e);
    return e.ifElseValues(
        isConsumer(e, l),
        [&](KernelEmitter &ce) {
          return withRegisters(ce, /*consumer=*/true, [&](KernelEmitter &re) {
            return re.forLoop(tiles.begin, tiles.end, tiles.step, init,
                              [&](KernelEmitter &le, Value iv, ValueRange state) {
                                KernelEmitter te = tiles.pinned(le);
                                const BlockTile tile = tiles.tileAt(te, iv);
                                Fragment f = layout(te, tile);
                                // The previous tile's last products may
                                // still read the ring.
                                ringBarrier(te, /*consumersAlone=*/true);
                                Value acc = initialAccumulator(te, {}, f);
                                acc = copiedProduct(te, a, b, tile, kBegin, kEnd, acc, sa, sb,
                                                    lanes(te), /*consumersAlone=*/true);
                                fillFragment(te, f, acc);
                                return epilogue(te, tile, f, state);
                              });
          });
        },
        [&](KernelEmitter &pe) {
          return withRegisters(pe, /*consumer=*/false,
                               [&](KernelEmitter &) { return SmallVector<Value>(init); });
        });
  }

  /// sweep() with tile tma ≥ 2 and ready maps: one ring sequence through
  /// every tile of the sweep. Copy g (k tile g mod numK of tile g / numK)
  /// takes stage g mod stages at use g / stages, so the producer warp runs
  /// up to `stages` k tiles ahead across tile boundaries: it copies tile
  /// t + 1's first k tiles while the consumers run tile t's epilogue. The
  /// consumers retire each tile's last wgmma group before its epilogue;
  /// the producer warp skips the epilogues (its fragment is empty) and
  /// returns `init`. With tma=3 (a producer warpgroup) the two roles trade
  /// registers around it (withRegisters).
  SmallVector<Value> pipelinedSweep(KernelEmitter &e, const MatrixOperand &a,
                                    const MatrixOperand &b, const TileSweep &tiles, Value kBegin,
                                    Value kEnd, ValueRange init, const Staged &sa, const Staged &sb,
                                    Value full, Value empty, const TileEpilogue &epilogue,
                                    int64_t cluster) const {
    Lanes l = lanes(e);
    Value numK = e.ceilDiv(e.sub(kEnd, kBegin), e.index(bk));
    Value count = tiles.count(e);
    Value total = e.mul(count, numK);
    Value ringA = ringAddress(e, sa), ringB = ringAddress(e, sb);
    Type elem = cast<MemRefType>(sa.ring.getType()).getElementType();
    // In a cluster each block copies its share of every W box.
    Value mapA = mapOf(e, a, sa, elem), mapB = mapOf(e, b, sb, elem, sb.lines / cluster);
    Value warpgroupLeader = e.cmpI(arith::CmpIPredicate::eq, e.remUI(l.tid, e.index(kWarpgroup)),
                                   e.index(0));
    SmallVector<Value> state = e.ifElseValues(
        isConsumer(e, l),
        [&](KernelEmitter &ce) {
          return withRegisters(ce, /*consumer=*/true, [&](KernelEmitter &re) {
            return re.forLoop(re.index(0), count, re.index(1), init,
                              [&](KernelEmitter &oe, Value t, ValueRange carried) {
                                KernelEmitter te = tiles.pinned(oe);
                                const Lanes tl = lanes(te);
                                const BlockTile tile = tiles.tileAt(te, tiles.at(te, t));
                                Fragment f = layout(te, tile);
                                Value first = te.mul(t, numK); // the tile's first slot
                                Value acc = initialAccumulator(te, {}, f);
                                acc = retiredLoop(te, numK, acc, [&](KernelEmitter &ie) {
                                  return consumeSlots(ie, first, numK, acc, ringA, ringB, sa, sb,
                                                      full, empty, warpgroupLeader, tl, cluster);
                                });
                                fillFragment(te, f, acc);
                                return epilogue(te, tile, f, carried);
                              });
          });
        },
        [&](KernelEmitter &pe) {
          return withRegisters(pe, /*consumer=*/false, [&](KernelEmitter &re) {
            Value producerLeader =
                re.cmpI(arith::CmpIPredicate::eq, l.tid, re.index(consumers() * kWarpgroup));
            re.ifThen(producerLeader, [&](KernelEmitter &ie) {
              ie.forLoop(ie.index(0), total, ie.index(1), {},
                         [&](KernelEmitter &le, Value slot, ValueRange) {
                           Value t = le.divUI(slot, numK);
                           const BlockTile tile = tiles.tileAt(le, tiles.at(le, t));
                           // Use u ≥ 1 of a stage waits for the consumers' release of
                           // use u − 1.
                           le.ifThen(le.cmpI(arith::CmpIPredicate::uge, slot, le.index(stages)),
                                     [&](KernelEmitter &we) { waitForUse(we, empty, slot, 1); });
                           TmaTiles copies{a, b, tile, kBegin, sa, sb, mapA, mapB, full};
                           copies.cluster = cluster;
                           copyTile(le, copies, le.sub(slot, le.mul(t, numK)), slot);
                           return SmallVector<Value>{};
                         });
            });
            return SmallVector<Value>(init);
          });
        });
    evenBothRings(e, l, full, empty, total, warpgroupLeader, cluster);
    return state;
  }

  /// The consumers' k loop of a warp-specialized product: `acc` plus the
  /// products of the k tiles in ring slots first … first + numK − 1, each
  /// waited for on `full` and its stage released on `empty` (one arrival
  /// per warpgroup, by its first thread) once the wgmma group that read it
  /// retired; then the wait that retires the last group. numK > 0 (under
  /// retiredLoop): every slot is released exactly once.
  Value consumeSlots(KernelEmitter &e, Value first, Value numK, Value acc, Value ringA, Value ringB,
                     const Staged &sa, const Staged &sb, Value full, Value empty,
                     Value warpgroupLeader, const Lanes &l, int64_t cluster = 1) const {
    const int64_t inFlight = stages >= 3 ? 1 : 0;
    // In a cluster every producer refills this block's stages: release each
    // stage to all.
    auto release = [&](KernelEmitter &re, Value slot) {
      re.ifThen(warpgroupLeader, [&](KernelEmitter &ie) {
        arriveEverywhere(ie, empty, ie.remUI(slot, ie.index(stages)), cluster);
      });
    };
    SmallVector<Value> it{acc};
    it = e.forLoop(e.index(0), numK, e.index(1), it,
                   [&](KernelEmitter &le, Value kt, ValueRange c) {
                     Value slot = le.add(first, kt);
                     waitForUse(le, full, slot, 0);
                     Value d = stageProduct(le, c[0], ringA, ringB, sa, sb,
                                            le.remUI(slot, le.index(stages)), l, inFlight,
                                            /*swizzled=*/true);
                     // The group of step kt − inFlight retired: its stage is free.
                     if (inFlight)
                       le.ifThen(le.cmpI(arith::CmpIPredicate::uge, kt, le.index(inFlight)),
                                 [&](KernelEmitter &re) {
                                   release(re, re.sub(slot, re.index(inFlight)));
                                 });
                     else
                       release(le, slot);
                     return SmallVector<Value>{d};
                   });
    NVVM::WgmmaWaitGroupSyncOp::create(e.builder(), e.location(), 0);
    Value done = fenceAccumulators(e, it[0]);
    if (inFlight)
      release(e, e.sub(e.add(first, numK), e.index(inFlight)));
    return done;
  }

  /// What copying a k tile by TMA needs.
  struct TmaTiles {
    const MatrixOperand &a, &b;
    const BlockTile &tile;
    Value kBegin;
    const Staged &sa, &sb;
    Value mapA, mapB, bars;
    /// Blocks of the cluster that share each B tile (K-major: mapB's box
    /// is their share of the lines; MN-major: each copies its share of the
    /// tile's 64-line boxes).
    int64_t cluster = 1;
  };
  TmaTiles tmaTiles(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                    const BlockTile &tile, Value kBegin, const Staged &sa, const Staged &sb,
                    Value bars, int64_t cluster = 1) const {
    Type elem = cast<MemRefType>(sa.ring.getType()).getElementType();
    return {a,  b, tile, kBegin, sa, sb, mapOf(e, a, sa, elem), mapOf(e, b, sb, elem, sb.lines / cluster),
            bars, cluster};
  }

  /// By one thread: k tile `kt` into its stage — the arrival that expects
  /// the stage's bytes, then the boxes (coordinates relative to the
  /// operands' origins, a chunk's dZ). `slot`: the copy's place in the
  /// ring's sequence when it differs from kt (a sweep's later tiles).
  void copyTile(KernelEmitter &e, const TmaTiles &c, Value kt, Value slot = {}) const {
    const int64_t stageBytes = (bm + bn) * bk * 2;
    auto relative = [](KernelEmitter &ce, Value v, Value origin) {
      return origin ? ce.sub(v, origin) : v;
    };
    Value stage = e.remUI(slot ? slot : kt, e.index(stages));
    Value k0 = e.add(c.kBegin, e.mul(kt, e.index(bk)));
    nvgpu::MBarrierArriveExpectTxOp::create(e.builder(), e.location(), c.bars,
                                            e.index(stageBytes), stage, Value());
    copyStage(e, c.sa, c.mapA, c.bars, stage, relative(e, k0, c.a.kOrigin),
              relative(e, c.tile.rowBegin, c.a.lineOrigin));
    Value bk0 = relative(e, k0, c.b.kOrigin), line0 = relative(e, c.tile.colBegin, c.b.lineOrigin);
    if (c.cluster == 1)
      return copyStage(e, c.sb, c.mapB, c.bars, stage, bk0, line0);
    // This block's share of the B tile, into the same place of every
    // block's stage; their full barriers expect it with the rest of the
    // stage.
    OpBuilder &b = e.builder();
    Value mask =
        arith::ConstantOp::create(b, e.location(), b.getI16IntegerAttr((1 << c.cluster) - 1));
    Value rank = gpuClusterBlockIdx(e);
    if (!c.sb.kMajor) {
      // MN-major (dX's Wᵀ, dW's Xᵀ): boxes of 64 lines, box g after box
      // g − 1 in the stage; block r copies boxes r·n … r·n + n − 1 of the
      // tile's cluster·n.
      const int64_t boxes = c.sb.lines / kMnBoxLines, share = boxes / c.cluster;
      assert(boxes % c.cluster == 0 && "clusters: whole MN-major boxes per block");
      for (int64_t i = 0; i < share; ++i) {
        Value g = e.add(e.mul(rank, e.index(share)), e.index(i));
        Value row = e.add(e.mul(stage, e.index(c.sb.lines)), e.mul(g, e.index(bk)));
        nvgpu::TmaAsyncLoadOp::create(
            b, e.location(), rowsView(e, c.sb.ring, row, bk), c.bars, c.mapB,
            ValueRange{e.add(line0, e.mul(g, e.index(kMnBoxLines))), bk0}, stage, mask, Value());
      }
      return;
    }
    const int64_t share = c.sb.lines / c.cluster;
    Value first = e.mul(rank, e.index(share));
    Value row = e.add(e.mul(stage, e.index(c.sb.lines)), first);
    nvgpu::TmaAsyncLoadOp::create(b, e.location(), rowsView(e, c.sb.ring, row, share), c.bars,
                                  c.mapB, ValueRange{bk0, e.add(line0, first)}, stage, mask,
                                  Value());
  }

  /// `rows` rows of `ring` (rows of BK elements) from row `row`: where a
  /// multicast copy lands in every block of the cluster.
  Value rowsView(KernelEmitter &e, Value ring, Value row, int64_t rows) const {
    OpBuilder &b = e.builder();
    SmallVector<OpFoldResult> offsets{row, b.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes{b.getIndexAttr(rows), b.getIndexAttr(bk)};
    SmallVector<OpFoldResult> strides{b.getIndexAttr(1), b.getIndexAttr(1)};
    return memref::SubViewOp::create(b, e.location(), ring, offsets, sizes, strides);
  }

  /// This block's rank in its cluster (cluster_block_id.x: the clusters
  /// run along x).
  static Value gpuClusterBlockIdx(KernelEmitter &e) {
    return gpu::ClusterBlockIdOp::create(e.builder(), e.location(), gpu::Dimension::x);
  }

  /// Waits for the phase of barrier kt % stages that use kt / stages − `back`
  /// of the stage completed (every product starts at even phase counts).
  void waitForUse(KernelEmitter &e, Value bars, Value kt, int64_t back) const {
    Value use = e.sub(e.divUI(kt, e.index(stages)), e.index(back));
    Value parity = e.cmpI(arith::CmpIPredicate::ne, e.remUI(use, e.index(2)), e.index(0));
    nvgpu::MBarrierTryWaitParityOp::create(e.builder(), e.location(), bars, parity,
                                           e.index(kWaitTicks), e.remUI(kt, e.index(stages)));
  }

  /// One arrival on each barrier of `bars` whose stage `numK` k tiles used
  /// an odd number of times: with one arrival per phase from each caller,
  /// every phase count is even again.
  void evenPhases(KernelEmitter &e, Value bars, Value numK, int64_t cluster = 1) const {
    for (int64_t s = 0; s < stages; ++s) {
      // Uses of stage s: the k tiles s, s + stages, … below numK.
      Value used = e.cmpI(arith::CmpIPredicate::ugt, numK, e.index(s));
      Value uses = e.select(
          used, e.add(e.divUI(e.sub(numK, e.index(s + 1)), e.index(stages)), e.index(1)),
          e.index(0));
      e.ifThen(e.cmpI(arith::CmpIPredicate::ne, e.remUI(uses, e.index(2)), e.index(0)),
               [&](KernelEmitter &pe) { arriveEverywhere(pe, bars, pe.index(s), cluster); });
    }
  }

  /// `product(e)` in the consumer warpgroups; `acc` unchanged in the
  /// producer (tile tma ≥ 2), which issues no wgmma. `consumersAlone`:
  /// only the consumers run here already.
  Value consumersOnly(KernelEmitter &e, const Lanes &l, Value acc, bool consumersAlone,
                      const std::function<Value(KernelEmitter &)> &product) const {
    if (!ws || consumersAlone)
      return product(e);
    return e.ifElse(isConsumer(e, l), product, [&](KernelEmitter &) { return acc; });
  }

  /// The barrier of a cp.async ring's users: the block's, or with
  /// `consumersAlone` the consumer warpgroups' named barrier.
  void ringBarrier(KernelEmitter &e, bool consumersAlone) const {
    if (!consumersAlone)
      return gpuBarrier(e);
    namedBarrier(e, kConsumerBarrier, consumers() * kWarpgroup);
  }

  /// bar.sync `id`, `threads`: a barrier of the threads of one role.
  static void namedBarrier(KernelEmitter &e, int32_t id, int64_t threads) {
    NVVM::BarrierOp::create(e.builder(), e.location(), Type(), e.i32(id), e.i32(int32_t(threads)),
                            NVVM::BarrierReductionAttr(), Value());
  }

  /// Warpgroups that multiply: all of them; with tile tma ≥ 2 a producer
  /// (a warp, or with tma=3 a warpgroup) follows them.
  int64_t consumers() const { return bm / kGroupRows; }
  /// Whether this thread multiplies (not tma ≥ 2's producer).
  Value isConsumer(KernelEmitter &e, const Lanes &l) const { return l.consumer; }
  /// The mbarrier ring's type: one barrier per stage, in shared memory.
  nvgpu::MBarrierGroupType barrierType(MLIRContext *context) const {
    return nvgpu::MBarrierGroupType::get(
        context, gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup), stages);
  }

  /// The swizzle of a row of BK 16-bit elements.
  nvgpu::TensorMapSwizzleKind swizzleKind() const {
    return bk == 64   ? nvgpu::TensorMapSwizzleKind::SWIZZLE_128B
           : bk == 32 ? nvgpu::TensorMapSwizzleKind::SWIZZLE_64B
                      : nvgpu::TensorMapSwizzleKind::SWIZZLE_32B;
  }

  /// Whether TMA can fill `ring`'s stages: K-major boxes of BK × lines
  /// (rows of one swizzle span); MN-major boxes of 64 lines (the 128-byte
  /// span) × BK, which land as rows of 64 elements only when BK is 64 too
  /// (the ring's rows), and whole ones: lines a multiple of 64.
  bool tmaCopies(const Staged &ring) const {
    return ring.kMajor || (bk == kMnBoxLines && ring.lines % kMnBoxLines == 0);
  }

  /// `op`'s tensor map as the descriptor type of its box: BK × lines
  /// (K-major) or 64 lines × BK (MN-major), as [outer, inner] elements.
  /// `lines`: the box's lines when not the ring's (a cluster's share).
  Value mapOf(KernelEmitter &e, const MatrixOperand &op, const Staged &ring, Type elem,
              int64_t lines = 0) const {
    MLIRContext *context = e.builder().getContext();
    SmallVector<int64_t, 2> shape = ring.kMajor
                                        ? SmallVector<int64_t, 2>{lines ? lines : ring.lines, bk}
                                        : SmallVector<int64_t, 2>{bk, kMnBoxLines};
    auto box = MemRefType::get(shape, elem, MemRefLayoutAttrInterface{},
                               IntegerAttr::get(IntegerType::get(context, 64), 3));
    auto type = nvgpu::TensorMapDescriptorType::get(
        context, box, ring.kMajor ? swizzleKind() : nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
        nvgpu::TensorMapL2PromoKind::L2PROMO_NONE, nvgpu::TensorMapOOBKind::OOB_ZERO,
        nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
    return UnrealizedConversionCastOp::create(e.builder(), e.location(), type, op.tensorMap)
        .getResult(0);
  }

  /// The copies of one k tile into stage `stage` of `ring`: one box
  /// (K-major, at (k, line0)) or one per 64 lines (MN-major, at (line0 +
  /// 64g, k), box g after box g − 1 in the stage).
  void copyStage(KernelEmitter &e, const Staged &ring, Value map, Value bars, Value stage,
                 Value k, Value line0) const {
    OpBuilder &b = e.builder();
    if (ring.kMajor) {
      nvgpu::TmaAsyncLoadOp::create(b, e.location(), stageView(e, ring, stage, 0, ring.lines),
                                    bars, map, ValueRange{k, line0}, stage, Value(), Value());
      return;
    }
    for (int64_t g = 0; g < ring.lines / kMnBoxLines; ++g)
      nvgpu::TmaAsyncLoadOp::create(
          b, e.location(), stageView(e, ring, stage, g * bk, bk), bars, map,
          ValueRange{e.add(line0, e.index(g * kMnBoxLines)), k}, stage, Value(), Value());
  }

  /// Rows [first, first + rows) of stage `stage` of a 2-D ring (rows of BK
  /// elements; a stage holds lines · BK of them).
  Value stageView(KernelEmitter &e, const Staged &ring, Value stage, int64_t first,
                  int64_t rows) const {
    return rowsView(e, ring.ring, e.add(e.mul(stage, e.index(ring.lines)), e.index(first)), rows);
  }

  /// The K-major swizzled descriptor of the 8-row groups from `line0` at
  /// k16 step `kk` of stage `stage`: start address (+32 bytes per k16 step
  /// within the S-byte row), LBO unused (1), SBO = 8·S, layout type
  /// (bits 62–63) 1, 2 or 3 for the 128-, 64- or 32-byte swizzle, base
  /// offset 0 (atom-aligned stages).
  ///
  /// MN-major (boxes of 64 lines × BK rows of 128 bytes, BK = 64): start
  /// at k row 16·kk of the stage (+2048 bytes per k16 step), LBO = the next
  /// 64 lines (the next box, BK · 128 bytes), SBO = the next 8 k rows (1024
  /// bytes), 128-byte swizzle; line0 must be a multiple of 64.
  Value swizzledDescriptor(KernelEmitter &e, Value ringAddress, const Staged &ring, Value stage,
                           Value line0, int64_t kk) const {
    if (!ring.kMajor)
      return mnSwizzledDescriptor(e, ringAddress, ring, stage, line0, kk);
    const int64_t span = bk * 2;
    Value element = e.add(e.mul(stage, e.index(ring.lines * bk)), e.mul(line0, e.index(bk)));
    Value address =
        e.add(ringAddress, e.add(e.mul(element, e.index(2)), e.index(kk * kStepK * 2)));
    return packDescriptor(e, address, 16, 8 * span, span == 128 ? 1 : span == 64 ? 2 : 3);
  }

  Value mnSwizzledDescriptor(KernelEmitter &e, Value ringAddress, const Staged &ring, Value stage,
                             Value line0, int64_t kk) const {
    const int64_t rowBytes = kMnBoxLines * 2, boxBytes = bk * rowBytes;
    Value box = e.divUI(line0, e.index(kMnBoxLines));
    Value offset = e.add(e.mul(stage, e.index(ring.lines * bk * 2)),
                         e.add(e.mul(box, e.index(boxBytes)), e.index(kk * kStepK * rowBytes)));
    return packDescriptor(e, e.add(ringAddress, offset), boxBytes, 8 * rowBytes, 1);
  }

  /// A wgmma matrix descriptor: the shared-window byte `address` (bits
  /// 0–13, >> 4), LBO and SBO in bytes (bits 16–29 and 32–45, >> 4), base
  /// offset 0, `layout` in bits 62–63 (0 none, 1/2/3 the 128/64/32-byte
  /// swizzle).
  static Value packDescriptor(KernelEmitter &e, Value address, uint64_t lboBytes,
                              uint64_t sboBytes, uint64_t layout) {
    OpBuilder &b = e.builder();
    Type i64 = b.getI64Type();
    auto constant = [&](uint64_t v) {
      return arith::ConstantOp::create(b, e.location(), b.getIntegerAttr(i64, int64_t(v)));
    };
    Value bits = arith::IndexCastUIOp::create(b, e.location(), i64, address);
    bits = arith::ShRUIOp::create(b, e.location(),
                                  arith::AndIOp::create(b, e.location(), bits, constant(0x3FFFF)),
                                  constant(4));
    return arith::OrIOp::create(
        b, e.location(), bits,
        constant((lboBytes >> 4) << 16 | (sboBytes >> 4) << 32 | layout << 62));
  }

  /// The accumulator register of fragment slot (h, 2j + q).
  static int64_t register_(int64_t h, int64_t j, int64_t q) { return 4 * j + 2 * h + q; }

  Lanes lanes(KernelEmitter &e) const {
    Lanes l;
    l.tid = gpuThreadIdx(e);
    Value inGroup = e.remUI(l.tid, e.index(kWarpgroup));
    l.lane = e.remUI(l.tid, e.index(32));
    l.group = e.divUI(l.lane, e.index(4));
    l.quad = e.remUI(l.lane, e.index(4));
    l.warpgroupRow = e.mul(e.divUI(l.tid, e.index(kWarpgroup)), e.index(kGroupRows));
    l.warpRow = e.add(l.warpgroupRow, e.mul(e.divUI(inGroup, e.index(32)), e.index(16)));
    if (ws) {
      // The role from lane 0's warp index (shfl.idx), as CUTLASS's
      // canonical_warp_group_idx: ptxas then knows every branch on it is
      // warp-uniform, and does not serialize the wgmmas under it (C7518:
      // "dependence on compiler-inserted WG.DP in divergent path").
      OpBuilder &b = e.builder();
      Value warp = arith::IndexCastUIOp::create(b, e.location(), b.getI32Type(),
                                                e.divUI(l.tid, e.index(32)));
      Value uniform =
          gpu::ShuffleOp::create(b, e.location(), warp, 0, 32, gpu::ShuffleMode::IDX)
              .getShuffleResult();
      l.consumer = arith::CmpIOp::create(b, e.location(), arith::CmpIPredicate::ult, uniform,
                                         e.i32(int32_t(consumers() * 4)));
    }
    return l;
  }

  Type accumulatorType(MLIRContext *context) const {
    return LLVM::LLVMStructType::getLiteral(
        context, SmallVector<Type>(size_t(bn / 2), Float32Type::get(context)));
  }

  /// `acc` through an empty side-effecting inline asm that ties every
  /// register ("=f" outputs tied to their inputs): the compiler may move no
  /// access of the accumulators across it, nor across the wgmma fences and
  /// waits, which are side-effecting asm too.
  Value fenceAccumulators(KernelEmitter &e, Value acc) const {
    OpBuilder &b = e.builder();
    const int64_t regs = bn / 2;
    SmallVector<Value> values;
    std::string constraints;
    for (int64_t r = 0; r < regs; ++r) {
      values.push_back(LLVM::ExtractValueOp::create(b, e.location(), acc, ArrayRef<int64_t>{r}));
      constraints += (r ? ",=f" : "=f");
    }
    for (int64_t r = 0; r < regs; ++r)
      constraints += "," + std::to_string(r);
    return LLVM::InlineAsmOp::create(b, e.location(), acc.getType(), values, "", constraints,
                                     /*has_side_effects=*/true, /*is_align_stack=*/false,
                                     LLVM::tailcallkind::TailCallKind::None,
                                     LLVM::AsmDialectAttr(), ArrayAttr())
        .getRes();
  }

  /// Zeros, or `init` (fragment slot order) in the accumulator registers.
  Value initialAccumulator(KernelEmitter &e, ValueRange init, const Fragment &f) const {
    OpBuilder &b = e.builder();
    Value acc = LLVM::ZeroOp::create(b, e.location(), accumulatorType(b.getContext()));
    if (init.empty())
      return acc;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = 0; j < bn / 8; ++j)
        for (int64_t q = 0; q < 2; ++q)
          acc = LLVM::InsertValueOp::create(b, e.location(), acc,
                                            init[size_t(h) * f.cols.size() + size_t(j * 2 + q)],
                                            ArrayRef<int64_t>{register_(h, j, q)});
    return acc;
  }

  /// The shared-window byte address of `ring`'s first element.
  static Value ringAddress(KernelEmitter &e, const Staged &ring) {
    return memref::ExtractAlignedPointerAsIndexOp::create(e.builder(), e.location(), ring.ring);
  }

  /// Stages the lines [first, first + lines) of `op` for k in [k0, k0 + BK)
  /// into stage `stage` in core matrices: piece c is row c % 8 of core matrix
  /// c / 8 in copy order — K-major: lines (c / BK)·8 + c % 8 at k 8·((c/8) %
  /// (BK/8)); MN-major: k (c / L)·8 + c % 8 at lines 8·((c/8) % (L/8)), which
  /// is also the order the core matrices lie in, so the piece lands at 8c.
  void fillOperand(KernelEmitter &e, const MatrixOperand &op, const Staged &ring, Value stage,
                   Value k0, Value kEnd, Value first, Value limit, Value aligned,
                   const Lanes &l) const {
    Value base = e.mul(stage, e.index(ring.lines * bk));
    StageTile tile{ring.ring, ring.kMajor, ring.lines * bk / kStagingPiece, k0, kEnd, first, limit,
                   aligned};
    // (With a producer the consumers alone copy: the pieces are
    // a multiple of their count.)
    if (ws) {
      e.ifThen(isConsumer(e, l), [&](KernelEmitter &ce) {
        fillPieces(ce, op, ring, tile, base, l);
      });
      return;
    }
    fillPieces(e, op, ring, tile, base, l);
  }

  /// fillOperand's copies by the threads that make them.
  void fillPieces(KernelEmitter &e, const MatrixOperand &op, const Staged &ring,
                  const StageTile &tile, Value base, const Lanes &l) const {
    const int64_t lineGroups = ring.lines / 8, kGroups = bk / 8;
    stagePieces(e, op, tile, threads, l.tid, [&](KernelEmitter &ce, Value c) {
      Value r8 = ce.remUI(c, ce.index(8));
      Value g = ce.divUI(c, ce.index(8));
      if (!ring.kMajor) {
        Value row = ce.add(ce.mul(ce.divUI(g, ce.index(lineGroups)), ce.index(8)), r8);
        Value along = ce.mul(ce.remUI(g, ce.index(lineGroups)), ce.index(8));
        return PiecePlace{row, along, ce.add(base, ce.mul(c, ce.index(8)))};
      }
      Value kc = ce.remUI(g, ce.index(kGroups));
      Value lineGroup = ce.divUI(g, ce.index(kGroups));
      Value row = ce.add(ce.mul(lineGroup, ce.index(8)), r8);
      Value core = ce.add(ce.mul(kc, ce.index(lineGroups)), lineGroup);
      Value dst = ce.add(base, ce.add(ce.mul(core, ce.index(kCore)), ce.mul(r8, ce.index(8))));
      return PiecePlace{row, ce.mul(kc, ce.index(8)), dst};
    });
  }

  /// The matrix descriptor of the 8-line groups from `line0` at k16 step
  /// `kk` of stage `stage`: start address (bits 0–13, >> 4), LBO = the next
  /// 8 k (bits 16–29), SBO = the next 8 lines (bits 32–45), no swizzle.
  Value descriptor(KernelEmitter &e, Value ringAddress, const Staged &ring, Value stage,
                   Value line0, int64_t kk) const {
    Value core = e.add(e.index(2 * kk * (ring.lines / 8)), e.divUI(line0, e.index(8)));
    Value element = e.add(e.mul(stage, e.index(ring.lines * bk)), e.mul(core, e.index(kCore)));
    Value address = e.add(ringAddress, e.mul(element, e.index(2)));
    return packDescriptor(e, address, uint64_t(ring.lines / 8 * kCoreBytes), kCoreBytes, 0);
  }

  /// d + A·B over one k16 step: the N of the instruction is BN, operands
  /// of the rings' element type; <row> A and <col> B are K-major.
  Value product(KernelEmitter &e, Value descA, Value descB, Value d, const Staged &sa,
                const Staged &sb) const {
    OpBuilder &b = e.builder();
    Type elem = cast<MemRefType>(sa.ring.getType()).getElementType();
    NVVM::WGMMATypes input = elem.isBF16() ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
    auto shape = NVVM::MMAShapeAttr::get(b.getContext(), kGroupRows, int(bn), kStepK);
    return NVVM::WgmmaMmaAsyncOp::create(
        b, e.location(), d.getType(), d, descA, descB, shape, input, input,
        NVVM::WGMMATypes::f32, NVVM::WGMMAScaleOut::one, NVVM::WGMMAScaleIn::one,
        NVVM::WGMMAScaleIn::one, sa.kMajor ? NVVM::MMALayout::row : NVVM::MMALayout::col,
        sb.kMajor ? NVVM::MMALayout::col : NVVM::MMALayout::row, NVVM::MMAIntOverflowAttr());
  }

  int64_t bm, bn, bk, stages, threads;
  bool tma, ws;
  /// tma=3: what the warpgroups hold, keep and take (all 0 otherwise).
  TileConfig::WarpgroupRegisters registers;
};
} // namespace

std::unique_ptr<TileMatmul> lossjit::createWgmmaMatmul(const TileConfig &tile) {
  return std::make_unique<Wgmma>(tile);
}
