//===- GpuSchedule.h - shared state of the GPU schedules --------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_SCHEDULES_GPU_GPUSCHEDULE_H
#define LOSSJIT_COMPILER_KERNELS_SCHEDULES_GPU_GPUSCHEDULE_H

#include "compiler/Kernels/Matmul/TileMatmul.h"
#include "compiler/Kernels/RowStats/RowStats.h"
#include "compiler/Kernels/Support/KernelSignature.h"
#include "compiler/Kernels/Support/LceSpec.h"
#include "dialects/Loss/LoweringConfig.h"

#include <array>
#include <cassert>
#include <string>

namespace lossjit {

/// What every GPU kernel builder of one variant reads.
struct GpuSchedule {
  GpuKernelSink &sink;
  const LceSpec &spec;
  /// The configured tile and strategy: the kernels whose product is the
  /// logits X·Wᵀ (lce_partial, lce_bwd_dz, lce_fused_z) use them.
  const TileConfig &tile;
  const TileMatmul &matmul;
  /// The tile and strategy of the row and element kernels (and of the
  /// gradient products when the logits strategy is SIMT): SIMT with the
  /// configured threads. The same objects as tile / matmul when those are
  /// SIMT.
  const TileConfig &simtTile;
  const TileMatmul &simtMatmul;
  /// The tile and strategy of the gradient products on tensor cores
  /// (TileConfig::gradientTile: grad_cols columns); tile / matmul when it
  /// equals the logits tile.
  const TileConfig &productTile;
  const TileMatmul &productMatmul;
  /// The statistics the vocabulary sweep carries.
  RowStats stats = RowStats::forSpec(spec);

  /// Whether the gradient products dZ·W and dZᵀ·X run on tensor cores
  /// too: they then read dZ in the storage type (tensor cores multiply
  /// 16-bit operands), prescaled by a power of two (gradScale()).
  /// (A vocabulary reduction's dZ has no bound lce_bwd_scale could form
  /// from its adjoints yet: its products stay SIMT on f32 dZ.)
  bool tensorCoreGradients() const {
    return loss::isTensorCoreMatmul(tile.matmul) && !spec.isVocabReduce();
  }
  /// The tile and strategy of dZ·W and dZᵀ·X.
  const TileConfig &gradTile() const { return tensorCoreGradients() ? productTile : simtTile; }
  const TileMatmul &gradMatmul() const {
    return tensorCoreGradients() ? productMatmul : simtMatmul;
  }
  /// The element type of the dZ the gradient products read.
  mlir::Type dzType() const { return tensorCoreGradients() ? storage() : compute(); }

  mlir::Type storage() const { return spec.storage; }
  /// The arithmetic's type (LceSpec::compute): f32, or f64 for f64 storage (SIMT only).
  mlir::Type compute() const { return spec.compute; }
  mlir::Type index() const { return sink.builder().getIndexType(); }
  mlir::MemRefType flat(mlir::Type t) const { return KernelSink::flat(t); }
  /// Static shared memory of `count` elements.
  mlir::MemRefType shared(int64_t count, mlir::Type t) const {
    return GpuKernelSink::shared(sink.builder().getContext(), count, t);
  }
  /// Adds the operand staging `product` (default: the logits strategy;
  /// else gradMatmul()) needs (a cp.async ring) to `launch`'s dynamic
  /// shared memory — static shared memory stops at 48 KiB — and its block
  /// size (a producer warp with tma=2). staged() gives the buffers
  /// once the kernel has begun.
  void stageOperands(LaunchShape &launch, const TileMatmul *product = nullptr) const;
  /// The staged buffers of a kernel that has begun; when it takes the
  /// operands' tensor maps (declareOperandMaps), also what the logits
  /// strategy prepares for TMA (its mbarrier ring).
  llvm::SmallVector<mlir::Value> staged(const KernelArgs &args, const LaunchShape &launch,
                                        const TileMatmul *product = nullptr) const;
  /// With tile tma=1: the arguments x_map and w_map (the plan's tensor maps
  /// of x and w in boxes of the logits tile, recorded in the plan once) and
  /// tma_ready (kTensorMapsReadyBinding). Nothing otherwise. `wLines`: the
  /// lines of w's box when not the tile's columns (a cluster's halves).
  void declareOperandMaps(KernelSignature &sig, int64_t wLines = 0) const;
  /// Blocks per cluster of lce_partial (tile cluster = 2 with a
  /// warp-specialized TMA ring, one sweep per block: not the teacher's
  /// or the dependent sweep, whose epilogues form products of their own),
  /// else 0.
  int64_t partialCluster(bool dependent) const {
    return tile.cluster > 1 && tile.tma >= 2 && !dependent && !spec.hasTeacher ? tile.cluster : 0;
  }
  /// Blocks per cluster of the logits product kernels (lce_bwd_dz,
  /// lce_fused_z): row blocks x, x + 1 of a column share its W tile — with
  /// a block per tile, or persistent or banded, where the blocks of a
  /// cluster take their tiles together (forEachTile). Not with a teacher's
  /// second product; else 0.
  int64_t logitsCluster() const {
    return tile.cluster > 1 && tile.tma >= 2 && !spec.hasTeacher ? tile.cluster : 0;
  }
  /// Blocks per cluster of the gradient products (lce_bwd_dx: row blocks
  /// of a dX column block share its Wᵀ tile; lce_bwd_dw: vocabulary row
  /// blocks of a dW column block share its Xᵀ tile) on a warp-specialized
  /// TMA ring, tiles taken as logitsCluster's are; else 0. Their shared
  /// operand is MN-major, copied in boxes of 64 lines, so the tile's
  /// columns must make whole boxes for each block of the cluster
  /// (Wgmma.cpp, "Clusters").
  int64_t gradientCluster(bool weightGradient) const {
    const TileConfig &g = gradTile();
    return tile.cluster > 1 && g.tma >= 2 && gradientMapsFit(weightGradient) &&
                   g.tileCols() % (kGradientBox * tile.cluster) == 0
               ? tile.cluster
               : 0;
  }
  /// Lines of the gradient products' TMA boxes (their k tile and the
  /// MN-major boxes' lines): 64 16-bit elements, one 128-byte swizzle span.
  static constexpr int64_t kGradientBox = 64;
  /// Whether TMA boxes can fill the operands of lce_bwd_dx (or with
  /// `weightGradient` lce_bwd_dw): tensor-core gradient products whose
  /// tile has block_k kGradientBox and columns in whole boxes (the MN-major
  /// Wᵀ, Xᵀ), and for dW rows in whole boxes too (its MN-major dZᵀ). What
  /// declareGradientMaps, declareWeightGradientMaps and gradientCluster
  /// all ask, whatever the tile's tma.
  bool gradientMapsFit(bool weightGradient) const {
    const TileConfig &g = gradTile();
    return tensorCoreGradients() && g.blockK == kGradientBox && g.tileCols() % kGradientBox == 0 &&
           (!weightGradient || g.blockRows % kGradientBox == 0);
  }
  /// Runs `launch`'s row blocks (grid x) in clusters of `cluster` blocks,
  /// or leaves it alone for 0: grid x covers `lines` (a formula) in
  /// blocks of `blockRows` rounded up to whole clusters — a padding block
  /// past the lines holds none of them — and the kernel carries the
  /// cluster size (LaunchShape::cluster).
  static void clusterRowBlocks(LaunchShape &launch, int64_t cluster, const std::string &lines,
                               int64_t blockRows) {
    if (!cluster)
      return;
    launch.grid[0] = std::to_string(cluster) + "*cdiv(" + lines + "," +
                     std::to_string(cluster * blockRows) + ")";
    launch.cluster = cluster;
  }
  /// With tile tma=1 and tensor-core gradient products whose tile TMA can
  /// fill (block_k 64, columns a multiple of 64): dX's operands as tensor
  /// maps — `dz_map` over the dZ workspace `dzName` (K-major: rows of V,
  /// min(C, N) rows, boxes of 64 k × BM rows) and `wt_map` over w read as
  /// Wᵀ (MN-major: boxes of 64 columns of D × 64 rows of W) — and
  /// tma_ready. Nothing otherwise.
  void declareGradientMaps(KernelSignature &sig, llvm::StringRef dzName) const;
  /// The dZ workspace's dims as a tensor map (contiguous, rows): V × min(C,
  /// N) for row chunks; C × N for vocabulary chunks, whose dX reads k (the
  /// chunk's columns) from cb on and past the chunk's width zeros (but in
  /// the last chunk, where W's rows past V are the zeros).
  std::array<std::string, 2> dzMapDims() const;
  /// Likewise for dW = dZᵀ·X, both operands MN-major: `dzt_map` over the dZ
  /// workspace and `xt_map` over x, boxes of 64 lines (vocabulary rows of
  /// dZ, columns of X) × 64 rows. Row chunks: k runs over the chunk's rows,
  /// and a box reads up to 63 rows past the chunk's end, but every such
  /// term has a zero factor: dZ's rows past min(C, N) are the box's zero
  /// fill, and in the last chunk (the only one shorter than C) X's rows past
  /// N are. Vocabulary chunks: k runs over all N rows (both maps zero past
  /// N); lines past a short last chunk are dW rows never stored.
  /// Also needs block_rows a multiple of 64.
  void declareWeightGradientMaps(KernelSignature &sig, llvm::StringRef dzName) const;
  /// x and w as the logits product's operands (rows of d elements), with
  /// their tensor maps when the kernel declared them.
  MatrixOperand operandX(const KernelArgs &a, mlir::Value d) const {
    return {a["x"], d, {}, {}, {}, a["x_map"], a["tma_ready"]};
  }
  MatrixOperand operandW(const KernelArgs &a, mlir::Value d) const {
    return {a["w"], d, {}, {}, {}, a["w_map"], a["tma_ready"]};
  }
  /// The teacher's raw logits x'·w'ᵀ of a logit tile (a kernel with the
  /// teacher's arguments): `product`'s tile product over T, so u.at(i, j)
  /// pairs with the student's z.at(i, j) of the same tile, on tensor cores
  /// when the student's product is (the same operand ring: each product
  /// waits for the previous one's readers). `vocabRows`: the tile's rows are
  /// vocabulary entries and its columns tokens (A = W', B = X').
  Fragment teacherTile(KernelEmitter &e, const KernelArgs &a, const TileMatmul &product,
                       const BlockTile &tile, llvm::ArrayRef<mlir::Value> scratch = {},
                       bool vocabRows = false) const {
    MatrixOperand xs{a["teacher_x"], a["T"]}, ws{a["teacher_w"], a["T"]};
    return product.multiply(e, vocabRows ? ws : xs, vocabRows ? xs : ws, tile, e.index(0),
                            a["T"], {}, scratch);
  }
  /// Whether the product kernels of `product` (a tile of this schedule)
  /// are persistent: tile persistent set and `product` on tensor cores.
  bool persistent(const TileConfig &product) const {
    return tile.persistent && loss::isTensorCoreMatmul(product.matmul);
  }
  /// The launch (per chunk) of a product kernel of `product` over `lines`
  /// (a formula) in row blocks of product.blockRows × `colBlocks` (a
  /// formula) column blocks, in clusters of `cluster` row blocks (0: none):
  /// a block per tile (x: row blocks, rounded up to whole clusters — a
  /// padding block holds no row —, y: column blocks), or when
  /// persistent(product) at most tile.persistent blocks along x, in whole
  /// clusters, at least one (forEachTile).
  LaunchShape productLaunch(const TileConfig &product, const std::string &lines,
                            const std::string &colBlocks, int64_t cluster) const;
  /// Whether `product`'s tiles run in bands (tile band, tensor cores).
  bool banded(const TileConfig &product) const {
    return tile.band && loss::isTensorCoreMatmul(product.matmul);
  }
  /// The tile (row block, column block) that runs `linear`-th of a product
  /// kernel's rowBlocks × colBlocks tiles over depth [kBegin, kEnd): row
  /// blocks first through the grid; with tile band B (tensor cores) in
  /// bands of G row blocks — as many A slabs of product.blockRows rows ×
  /// the depth in 16-bit as fit B KiB, at least one — each band column by
  /// column, row blocks first within a column. A band's A rows then stay in
  /// L2 while its columns' B streams through once (row blocks first through
  /// a grid whose A exceeds L2 re-reads all of A once per column block). The
  /// order changes which block makes a tile, never its bits. In clusters
  /// of `cluster` blocks the rows are groups of `cluster` row blocks (slabs
  /// of cluster·BM rows), which the cluster's blocks take together.
  std::pair<mlir::Value, mlir::Value> tileOrder(KernelEmitter &e, const TileConfig &product,
                                                mlir::Value linear, mlir::Value rowBlocks,
                                                mlir::Value colBlocks, mlir::Value kBegin,
                                                mlir::Value kEnd, int64_t cluster = 1) const;
  /// What a product kernel does with each of its tiles' fragments.
  using TileBody = std::function<void(KernelEmitter &, const BlockTile &, Fragment &)>;
  /// The tile (rowBlock, colBlock) of a product kernel's grid.
  using TileOf =
      std::function<BlockTile(KernelEmitter &, mlir::Value rowBlock, mlir::Value colBlock)>;
  /// Multiplies the tiles of a kernel launched on productLaunch(): its own
  /// (the tileOrder() of blockIdx.x + blockIdx.y · gridDim.x), or when
  /// persistent(product) the tiles blockIdx.x, + gridDim.x, … in
  /// tileOrder() (the order a block per tile runs in), as one
  /// TileMatmul::sweep (a tma=2 ring through all of them when `overlap`,
  /// see TileMatmul::sweep). With tma=3 and `overlap` a block per tile
  /// sweeps its one tile, so that its producer warpgroup lends the
  /// consumers its registers there. `body` takes each product (over [kBegin, kEnd)
  /// from zero).
  ///
  /// In clusters of `cluster` blocks (productLaunch's, 0: none) the blocks
  /// of a cluster multicast the B tile they share, so they must take tiles
  /// of one column block at the same step, as many as each other: a
  /// cluster takes groups of `cluster` row blocks — the block of rank r the
  /// group's r-th, a padding block past the row blocks holding no row — in
  /// the order above (a block per group, or persistent clusters through
  /// the groups blockIdx.x / cluster, + gridDim.x / cluster, …).
  void forEachTile(KernelEmitter &e, const TileConfig &product, const TileMatmul &matmul,
                   const MatrixOperand &a, const MatrixOperand &b, mlir::Value rowBlocks,
                   mlir::Value colBlocks, const TileOf &tileOf, mlir::Value kBegin,
                   mlir::Value kEnd, llvm::ArrayRef<mlir::Value> scratch, const TileBody &body,
                   bool overlap, int64_t cluster = 0) const;
  std::string bn() const { return std::to_string(tile.blockRows); }
  std::string simtBn() const { return std::to_string(simtTile.blockRows); }
  std::string threads() const { return std::to_string(tile.threads); }
};

/// z.at(i, j) += bias[z.cols[j]] for every fragment element (no-op without
/// a bias), one column at a time: each bias value is dead once added, so a
/// logit epilogue never holds a tile's worth of them (at 128 columns they
/// spill).
void addBias(KernelEmitter &e, mlir::Value bias, Fragment &z);

class PlanBuilder;

/// lce_partial + lce_combine (+ lce_reduce), and the forward plan.
void buildGpuForward(GpuSchedule &s);
/// The forward's statistics of every row into `plan` (begun): the splits S,
/// the partials' workspaces and lce_partial + lce_combine (and a dependent
/// sweep's pair), which write lse and the row losses ("loss_rows", a
/// workspace where the loss is reduced). The forward and the fused op in
/// vocabulary chunks (lse before any dZ) share them.
void buildGpuRowStatistics(GpuSchedule &s, PlanBuilder &plan);
/// lce_reduce(labels, loss_rows, loss, N): one block, thread t sums rows
/// t, t+T, … in order, then a tree (the forward and the fused op share it).
void buildGpuReduceKernel(GpuSchedule &s);
/// The backward (chunked, vocab_chunked or recompute) or fused forward+backward,
/// and plan.
llvm::Error buildGpuBackward(GpuSchedule &s);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SCHEDULES_GPU_GPUSCHEDULE_H
