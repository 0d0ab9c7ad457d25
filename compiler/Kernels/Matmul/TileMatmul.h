//===- TileMatmul.h - how a block multiplies one tile -----------*- C++ -*-===//
//
// The three products of the fused loss are one shape, C = A·Bᵀ over a
// reduction index k, with operands read from memory:
//
//   logits     Z  = X·Wᵀ    A = X  [rows × D],  B = W  [vocab × D]
//   dX         dX = dZ·W    A = dZ [rows × V],  B = Wᵀ [D × V]
//   dW         dW = dZᵀ·X   A = dZᵀ[vocab × C], B = Xᵀ [D × C]
//
// A schedule asks for one block tile of C and gets back the fragment the
// calling thread owns: its accumulators with their (row, col) coordinates.
// It never sees how the product was formed, so a strategy (SIMT FMA,
// mma.sync, wgmma) is one file plus one registration in
// TileMatmul.cpp; the epilogues (row statistics, gradients) consume the
// fragment the same way whatever produced it.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_MATMUL_TILEMATMUL_H
#define LOSSJIT_COMPILER_KERNELS_MATMUL_TILEMATMUL_H

#include "compiler/Kernels/Support/KernelEmitter.h"
#include "compiler/Kernels/Support/TileConfig.h"

#include <memory>

namespace lossjit {

/// An operand in memory: element (line, k) is
///   buffer[(line − lineOrigin)·lineStride + (k − kOrigin)·kStride],
/// read widened to f32. Null origins are 0, null strides 1 (the origins
/// express chunk-relative workspaces such as the [C, V] dZ).
struct MatrixOperand {
  mlir::Value buffer;
  mlir::Value lineStride;
  mlir::Value kStride;
  mlir::Value lineOrigin;
  mlir::Value kOrigin;
  /// A TMA tensor map of `buffer` as [lines × k] (an !llvm.ptr kernel
  /// argument, PlanTensorMap) and the index that is 1 when the runtime
  /// encoded it; null when the operand has none. Strategies that copy by TMA
  /// use it when set and ready, and their cp.async ring otherwise.
  mlir::Value tensorMap;
  mlir::Value tensorMapReady;

  /// The element's flat offset.
  mlir::Value offset(KernelEmitter &e, mlir::Value line, mlir::Value k) const;
  /// The offset of (line, kOrigin): where the line starts.
  mlir::Value lineStart(KernelEmitter &e, mlir::Value line) const;
  /// The offset of (line, k) from the line's start.
  mlir::Value alongK(KernelEmitter &e, mlir::Value start, mlir::Value k) const;
};

/// One block tile of C: rows [rowBegin, rowBegin + rows) of A and columns
/// [colBegin, colBegin + cols) of B. Lines at or past a limit are clamped
/// onto limit − 1 (loads stay in bounds) and reported invalid.
struct BlockTile {
  mlir::Value rowBegin;
  int64_t rows = 1;
  mlir::Value rowLimit;
  mlir::Value colBegin;
  int64_t cols = 1;
  mlir::Value colLimit;
};

/// How the threads of a block share the rows of a tile, so that a schedule
/// can merge per-row states (RowStats::mergeFragmentRows) in a fixed order.
struct RowSharing {
  /// Every thread holds every row of the tile (SIMT): `groups` threads
  /// merge through a block tree.
  bool everyThread = true;
  /// Otherwise: lanes of a warp holding the same rows are merged first, by
  /// xor shuffles with these masks in order; then the `leader` lanes write
  /// fragment row i's state to slot tileRows[i]·groups + group, and the
  /// groups of a row are merged in ascending order.
  llvm::SmallVector<int32_t> laneXor;
  llvm::SmallVector<mlir::Value> tileRows; ///< per fragment row, in [0, tile rows).
  mlir::Value lane, leader, group;         ///< lane id, i1, index.
  int64_t groups = 1;
};

/// The accumulators one thread owns after a tile product. Slot (i, j) holds
/// C[row(i), col(j)]; values are f32.
struct Fragment {
  llvm::SmallVector<mlir::Value> rows, cols;         ///< clamped lines.
  llvm::SmallVector<mlir::Value> rowValid, colValid; ///< i1: inside the limits.
  llvm::SmallVector<mlir::Value> values;             ///< rows.size() × cols.size().
  RowSharing sharing;
  /// i1: every column is inside the limits (a tile wholly inside them, on a
  /// thread that holds C), where the strategy tells (null otherwise). An
  /// epilogue then folds without masks or clamps (foldColumns()).
  mlir::Value colsInside;
  /// With colsInside: the columns unclamped, each the tile's first column
  /// plus an offset (addresses a constant apart), equal to `cols` wherever
  /// colsInside holds.
  llvm::SmallVector<mlir::Value> openCols;
  /// With openCols, where the strategy gives them: openCols[j] is colFirst
  /// + colOffsets[j], and colLast the last column inside the limits. The
  /// masked side of foldColumns() then clamps column j as base +
  /// min(colOffsets[j], colLast − base), base = min(colFirst, colLast):
  /// the same columns as min(openCols[j], colLast), with a constant in
  /// each min (see foldColumns()).
  mlir::Value colFirst, colLast;
  llvm::SmallVector<int64_t> colOffsets;

  mlir::Value &at(size_t i, size_t j) { return values[i * cols.size() + j]; }
  mlir::Value at(size_t i, size_t j) const { return values[i * cols.size() + j]; }
};

/// `fold` of a copy of `z`; where the strategy tells whether every column of
/// `z` is inside the limits (colsInside, false on a producer's threads),
/// under an if on it: on that side `fold` sees the unclamped columns and
/// constant-true column masks, so a masked epilogue of a whole tile neither
/// selects nor clamps per column (the registers of wgmma logits: 128×256
/// tiles on tma=3 spilled 560 bytes in lce_partial with the masks; 128×128
/// ones took 203–255 registers, now 139–168). Both sides give the same
/// bits on a whole tile: a mask that holds selects the value it guards.
/// With colFirst, the masked side clamps its columns from the thread's
/// first one (constant mins): lce_partial's ragged fold then keeps fewer
/// registers live (ptxas sm_90a: 128×256 logits with a bias, and tma=2
/// with a bias and a softcap, no longer spill).
/// `fold` must synchronize nothing (the condition differs between a
/// block's warpgroups).
llvm::SmallVector<mlir::Value>
foldColumns(KernelEmitter &e, const Fragment &z,
            const std::function<llvm::SmallVector<mlir::Value>(KernelEmitter &, Fragment &)> &fold);

/// Shared memory a strategy stages operands in: `elements` of `type`,
/// aligned to `align` bytes (0: the element's alignment). Schedules place
/// these in dynamic shared memory (views at most kDynamicSharedAlign = 16
/// bytes aligned, KernelSignature.h).
struct ScratchBuffer {
  int64_t elements;
  mlir::Type type;
  int64_t align = 0;
  /// When set, the buffer is 2-D: rows of this many elements (TMA copies
  /// boxes into 2-D shared memory).
  int64_t rowElements = 0;
};

/// The tiles one block multiplies in turn: for iv = begin, begin + step, …
/// below end, the tile `tileAt(iv)` (all of the strategy's block shape).
struct TileSweep {
  mlir::Value begin, end, step;
  std::function<BlockTile(KernelEmitter &, mlir::Value iv)> tileAt;
  /// Whether each tile reads the thread's id afresh (opaqueThreadIdx):
  /// otherwise LLVM hoists the lane offsets of the operand copies and of
  /// the fragment out of the tile loop, where they stay live through every
  /// epilogue (a persistent 128-column wgmma dW spills 88 bytes at 255
  /// registers; 176 without the loop).
  bool pinThread = false;

  /// How many tiles: ⌈(end − begin) / step⌉, 0 when begin ≥ end (a
  /// persistent block past the tiles of a short last chunk: the grid is
  /// sized for a full one).
  mlir::Value count(KernelEmitter &e) const {
    mlir::Value past = e.cmpI(mlir::arith::CmpIPredicate::uge, begin, end);
    return e.select(past, e.index(0), e.ceilDiv(e.sub(end, begin), step));
  }
  /// iv of the t-th tile.
  mlir::Value at(KernelEmitter &e, mlir::Value t) const { return e.add(begin, e.mul(t, step)); }
  /// `e` for one tile's body: with pinThread, reading the thread's id anew.
  KernelEmitter pinned(KernelEmitter &e) const;
};

/// What a sweep does with each tile's product: the carried state after the
/// tile, from its fragment (values filled) and the state before it.
using TileEpilogue = std::function<llvm::SmallVector<mlir::Value>(
    KernelEmitter &, const BlockTile &, Fragment &, mlir::ValueRange state)>;

/// A strategy for multiplying block tiles.
class TileMatmul {
public:
  virtual ~TileMatmul() = default;

  /// The workgroup buffers multiply() needs for operands of `storage`
  /// type, declared by the kernel and passed back as `scratch`.
  virtual llvm::SmallVector<ScratchBuffer> scratch(mlir::Type storage) const { return {}; }
  /// Once at the start of a kernel whose operands carry tensor maps, after
  /// the scratch buffers exist: what TMA copies need besides them (the
  /// mbarrier ring, initialized), appended to `scratch` for multiply().
  virtual void prepare(KernelEmitter &e, llvm::SmallVectorImpl<mlir::Value> &scratch) const {}
  /// f32 slots per carried field that merging the rows of a `rows`-row
  /// tile across the block needs (RowStats::mergeFragmentRows).
  virtual int64_t rowMergeSlots(int64_t rows) const = 0;

  /// The fragment layout of `tile` for the calling thread (lines, validity)
  /// without multiplying: what multiply() will return coordinates for, so a
  /// schedule can load start values or row facts first.
  virtual Fragment layout(KernelEmitter &e, const BlockTile &tile) const = 0;

  /// C_tile = init + Σ_{k ∈ [kBegin, kEnd)} A(row, k)·B(col, k) in f32, each
  /// element summed in ascending k with one fma per term (the order that
  /// fixes the bits; tensor-core strategies sum each k step's products in
  /// the unit's own order). `init` holds a start value per fragment slot, or
  /// is empty for zeros. `scratch` holds the buffers scratch() asked for.
  virtual Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                            const BlockTile &tile, mlir::Value kBegin, mlir::Value kEnd,
                            mlir::ValueRange init = {},
                            llvm::ArrayRef<mlir::Value> scratch = {}) const = 0;

  /// For each tile t of `tiles` in order: its product over [kBegin, kEnd)
  /// from zero (multiply()), then `epilogue`, which carries `init` through
  /// the tiles; returns the final state. By default a loop of multiply()
  /// and epilogue. With `overlap`, the caller promises that the epilogue
  /// synchronizes nothing (no block barrier, no product of its own, no
  /// shared memory) and reads nothing another thread's epilogue writes: a
  /// strategy may then run the products ahead of the epilogues (tma=2: the
  /// producer warp copies tile t + 1's operands while the consumers finish
  /// tile t), and a thread that owns no element of C (the producer warp)
  /// may skip the epilogues and return `init`.
  virtual llvm::SmallVector<mlir::Value>
  sweep(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b, const TileSweep &tiles,
        mlir::Value kBegin, mlir::Value kEnd, mlir::ValueRange init,
        llvm::ArrayRef<mlir::Value> scratch, const TileEpilogue &epilogue,
        bool overlap = false) const;
};

/// The strategy `kind` names, for blocks of `tile.threads` threads.
std::unique_ptr<TileMatmul> createTileMatmul(const TileConfig &tile);

/// SIMT f32 FMA: thread t owns column colBegin + t of the tile (cols must
/// equal the block's threads) and every row; k runs in a scalar loop.
std::unique_ptr<TileMatmul> createSimtFmaMatmul(const TileConfig &tile);

/// Tensor cores (sm_80+): warps of 32×32 tiles of mma.sync m16n8k16 on
/// f16/bf16 operands staged through a cp.async ring in shared memory and
/// read with ldmatrix; f32 accumulators. Operands must be contiguous along
/// k (x·wᵀ); the operand rows of a tile are padded by 8 elements so the
/// ldmatrix row reads are free of bank conflicts.
std::unique_ptr<TileMatmul> createMmaSyncMatmul(const TileConfig &tile);

/// Hopper tensor cores (sm_90a): warpgroups of 64 rows × BN columns, one
/// wgmma.mma_async m64nBNk16 per k16 step from f16/bf16 operands staged
/// through a cp.async ring in the canonical core-matrix layout (K-major or
/// MN-major, no swizzle), or with tile tma=1 and operands that carry tensor
/// maps, copied by TMA into swizzled stages on an mbarrier ring (MN-major
/// ones with block_k 64) — with tma=2 by a producer warp of its own, the
/// consumers releasing stages on a second ring, with tma=3 by a producer
/// warpgroup that lends the consumers its registers; f32 accumulators in
/// registers.
std::unique_ptr<TileMatmul> createWgmmaMatmul(const TileConfig &tile);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_MATMUL_TILEMATMUL_H
