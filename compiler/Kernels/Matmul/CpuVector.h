//===- CpuVector.h - tile products of the host kernels ---------*- C++ -*-===//
//
// The CPU strategy: every product is an outer product, each element of C
// summed in ascending k with one fma per term from 0 (or from its start
// value) — TileMatmul's multiply() contract, the order of the GPU SIMT
// kernels. The logits X·Wᵀ run a packed micro-kernel: a vocabulary tile of W
// is packed (widened to f32) k-major in blocks of NR = groups·L columns, so
// each k step loads one vector<NR> of W and broadcasts MR rows of x into MR
// vector accumulators. dX and dW run a packed GEMM loop nest around a
// register tile of the same shape (accumulatePacked, CpuPackedProduct.cpp).
// Since no sum is split into lanes, the bits depend neither on L nor on the
// register tile or the cache blocks, nor on the target CPU.
//
// "f32" below is the compute type (KernelEmitter::compute()): f64 for f64
// storage, whose operands need no widening (the same code, f64 vectors).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_MATMUL_CPUVECTOR_H
#define LOSSJIT_COMPILER_KERNELS_MATMUL_CPUVECTOR_H

#include "compiler/Kernels/Matmul/TileMatmul.h"

namespace lossjit {

class CpuVector : public TileMatmul {
public:
  explicit CpuVector(int64_t lanes) : lanes(lanes) {}

  /// Every row and column of the tile belongs to the (only) host thread.
  /// Null limits mean the tile lies inside the operands.
  Fragment layout(KernelEmitter &e, const BlockTile &tile) const override;

  /// Dot products over k in ascending order, one scalar fma per term
  /// (operands contiguous along k: null kStride), from `init` or 0. The
  /// unpacked form: for the columns a packed tile leaves over and the
  /// recompute kernels.
  Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                    const BlockTile &tile, mlir::Value kBegin, mlir::Value kEnd,
                    mlir::ValueRange init = {},
                    llvm::ArrayRef<mlir::Value> scratch = {}) const override;

  /// The packed micro-kernel of the logits. Columns [lo, hi) of B (a
  /// vocabulary tile, lines contiguous along k) are covered in blocks of
  /// NR = groups·L columns, then of L columns, each packed k-major at
  /// packed[(c0 − lo)·d + k·width + j] = B(c0 + j, k) widened to f32; the
  /// columns left over (fewer than L) are not packed. With `enabled` false
  /// (i1) nothing is packed.
  void packColumns(KernelEmitter &e, const MatrixOperand &b, mlir::Value lo, mlir::Value hi,
                   mlir::Value d, int64_t groups, mlir::Value enabled, mlir::Value packed) const;
  /// Columns [lo, hi) in the blocks packColumns() packed, in ascending
  /// order, then the rest one at a time: body(e, c0, cols, packedOffset
  /// (null for an unpacked column), iters) → iters.
  llvm::SmallVector<mlir::Value> forPackedColumns(
      KernelEmitter &e, mlir::Value lo, mlir::Value hi, mlir::Value d, int64_t groups,
      mlir::Value enabled, mlir::ValueRange iters,
      const std::function<llvm::SmallVector<mlir::Value>(KernelEmitter &, mlir::Value, int64_t,
                                                         mlir::Value, mlir::ValueRange)> &body)
      const;
  /// The packed micro-kernel over k ∈ [0, d): tile.rows accumulators of
  /// vector<tile.cols> (tile.cols columns of a packed block at
  /// `packedOff`), x broadcast, one fma per term in ascending k — the same
  /// bits as multiply() — with row i's accumulators stored at
  /// out[outOff + i·outStride] (an f32 buffer): for epilogues that loop
  /// over the tile's columns rather than unroll them. The fragment has the
  /// tile's lines and no values.
  Fragment multiplyPackedInto(KernelEmitter &e, const MatrixOperand &a, const BlockTile &tile,
                              mlir::Value packed, mlir::Value packedOff, mlir::Value d,
                              mlir::Value out, mlir::Value outOff, int64_t outStride) const;

  /// The register tile and cache blocks of accumulatePacked(): MR = rows
  /// of A by NR = groups·L columns of B per micro-kernel. A is packed
  /// blockRows lines at a time; the columns go in blocks of nc = min(N
  /// rounded up to NR, maxCols) and k in equal blocks of at most kc =
  /// blockFloats / nc (within [minK, maxK]), so a packed B block stays in
  /// L2 while the MR-row panels of A sweep all of it. Speed only: no bit
  /// depends on any of them.
  struct PackedShape {
    int64_t rows = 8, groups = 1;
    int64_t blockRows = 64;
    int64_t maxCols = 2048, blockFloats = 256 * 1024, minK = 64, maxK = 512;
  };
  /// The stack room of accumulatePacked() for `shape`: one packed block of
  /// A (blockRows·maxK), one of B and an edge tile (MR·NR), all f32.
  /// Allocated once, outside the kernel's loops.
  struct PackBuffers {
    mlir::Value a, b, edge;
  };
  PackBuffers packBuffers(KernelEmitter &e, const PackedShape &shape) const;
  /// f32 rows of C in memory: element (m, n) at rowStart(m) + n.
  struct Accumulator {
    mlir::Value buffer;
    std::function<mlir::Value(KernelEmitter &, mlir::Value)> rowStart;
  };
  /// The packed product of dX = dZ·W and dW = dZᵀ·X:
  ///   C(m, n) = start(m, n) + Σ_{k ∈ [kBegin, kEnd)} A(m, k)·B(n, k)
  /// for m ∈ [mBegin, mEnd), n ∈ [0, nEnd), start = C(m, n), or 0 where
  /// `fresh` (i1). Every element sums its terms in ascending k with one fma
  /// per term, the order of multiply() and rankOneUpdate(), so the blocking
  /// moves no bit. B is packed per (nc, kc) block and A per MR-row panel,
  /// k-major and widened to f32; one operand of each must be contiguous
  /// along its lines or along k (null stride). A register tile of MR
  /// vector<NR> accumulators loads C once per k block; tiles at the edges
  /// of M or N run on a zero-padded copy. An empty k range with `fresh`
  /// zeroes C.
  void accumulatePacked(KernelEmitter &e, const PackedShape &shape, const PackBuffers &buffers,
                        const MatrixOperand &a, const MatrixOperand &b, mlir::Value mBegin,
                        mlir::Value mEnd, mlir::Value nEnd, mlir::Value kBegin, mlir::Value kEnd,
                        const Accumulator &c, mlir::Value fresh) const;

  /// One host thread holds every row: nothing to merge across threads.
  int64_t rowMergeSlots(int64_t) const override { return 0; }

  /// The outer-product form the host uses for dX = dZ·W and dW = dZᵀ·X,
  /// with f32 accumulator rows in memory: acc[accOff_i + k] += scale_i ·
  /// src[srcOff + k] for k < d (dMain = ⌊d/L⌋·L from mainExtent()).
  void rankOneUpdate(KernelEmitter &e, mlir::Value acc, llvm::ArrayRef<mlir::Value> accOff,
                     llvm::ArrayRef<mlir::Value> scale, mlir::Value src, mlir::Value srcOff,
                     mlir::Value d, mlir::Value dMain) const;

  /// A vector<lanes> (or f32 for 1 lane) of `mem` at `off`, widened to f32.
  mlir::Value loadGroup(KernelEmitter &e, mlir::Value mem, mlir::Value off, int64_t lanes) const;
  /// Stores an f32 group (vector or scalar) to an f32 buffer.
  void storeGroup(KernelEmitter &e, mlir::Value value, mlir::Value mem, mlir::Value off) const;
  /// The zero of a group of `lanes`.
  mlir::Value zeroGroup(KernelEmitter &e, int64_t lanes) const;

  /// Packs `width` lines that are contiguous along k, k-major:
  /// dest[base + k·width + j] = line j at k (widened to f32; 0 where
  /// valid[j] is false, an empty `valid` meaning all) for k ∈ [0, kLen),
  /// where `at`(e, j, k) is the offset of line j's element k in `mem`.
  /// Chunks of 16 k steps: groups of lines (the largest power of two
  /// dividing width, at most 16) are read one vector<16> each and
  /// interleaved with vector shuffles, then stored a k step at a time.
  void packLinesKMajor(KernelEmitter &e, mlir::Value mem, int64_t width,
                       const std::function<mlir::Value(KernelEmitter &, int64_t, mlir::Value)> &at,
                       llvm::ArrayRef<mlir::Value> valid, mlir::Value kLen, mlir::Value dest,
                       mlir::Value base) const;

  /// ⌊d/L⌋·L: where the vector part of a row of d elements ends.
  mlir::Value mainExtent(KernelEmitter &e, mlir::Value d) const;

  int64_t vectorWidth() const { return lanes; }

private:
  /// Packs lines [first, first + count) (count a multiple of `width`) of
  /// `op` at k ∈ [k0, k0 + kLen) to dest[p·kc·width + (k − k0)·width + j]
  /// for line first + p·width + j, widened to f32; lines at or past `limit`
  /// are zeros.
  void packPanels(KernelEmitter &e, const MatrixOperand &op, mlir::Value first,
                  mlir::Value count, mlir::Value limit, int64_t width, mlir::Value k0,
                  mlir::Value kLen, mlir::Value kc, mlir::Value dest) const;
  /// One MR×NR register tile over packed panels: acc(i, ·) = C[cOff[i] ..
  /// + NR] (or 0 where `fresh`) + Σ_{k < kLen} Ã[aOff + k·MR + i]·B̃[bOff +
  /// k·NR ..], stored back to C.
  void microTile(KernelEmitter &e, const PackedShape &shape, const PackBuffers &buffers,
                 mlir::Value aOff, mlir::Value bOff, mlir::Value kLen, mlir::Value c,
                 llvm::ArrayRef<mlir::Value> cOff, mlir::Value fresh) const;
  /// microTile() for a tile that C's rows [m0, mEnd) or columns [n0, nEnd)
  /// end inside, on a zero-padded copy of its elements (rowStart: the C
  /// row of each tile row, clamped into C).
  void edgeTile(KernelEmitter &e, const PackedShape &shape, const PackBuffers &buffers,
                mlir::Value aOff, mlir::Value bOff, mlir::Value kLen, const Accumulator &c,
                llvm::ArrayRef<mlir::Value> rowStart, mlir::Value m0, mlir::Value mEnd,
                mlir::Value n0, mlir::Value nEnd, mlir::Value fresh) const;
  /// The accumulators of multiplyPackedInto, one vector<cols> per row.
  llvm::SmallVector<mlir::Value> packedRows(KernelEmitter &e, const MatrixOperand &a,
                                            const Fragment &f, int64_t cols, mlir::Value packed,
                                            mlir::Value packedOff, mlir::Value d) const;
  int64_t lanes;
};

/// dst[dstOff+k] = src[srcOff+k] for k < d, converting f32 → dst's element
/// type (one rounding) or f32 → f32.
void emitCopyRow(KernelEmitter &e, mlir::Value src, mlir::Value srcOff, mlir::Value dst,
                 mlir::Value dstOff, mlir::Value d);

/// dst[dstOff+k] = 0 for k < d (f32).
void emitZeroRow(KernelEmitter &e, mlir::Value dst, mlir::Value dstOff, mlir::Value d);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_MATMUL_CPUVECTOR_H
