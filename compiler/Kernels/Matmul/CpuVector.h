//===- CpuVector.h - tile products of the host kernels ---------*- C++ -*-===//
//
// The CPU strategy: products vectorized over k (or over the output row) in
// vector<L x f32>, ⌊K/L⌋·L elements as vector operations and a scalar tail
// doing the same per-element operation, with the lanes of a dot product
// reduced by an ordered horizontal add. The bits depend on L (the tile
// config's vector width) and never on the target CPU.
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

  /// Dot products over k: operands contiguous along k (null kStride); per
  /// column, one vector accumulator per row, reduced in lane order, then the
  /// scalar tail. `init` must be empty (sums start at 0).
  Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                    const BlockTile &tile, mlir::Value kBegin, mlir::Value kEnd,
                    mlir::ValueRange init = {},
                    llvm::ArrayRef<mlir::Value> scratch = {}) const override;

  /// One host thread holds every row: nothing to merge across threads.
  int64_t rowMergeSlots(int64_t) const override { return 0; }

  /// The outer-product form the host uses for dX = dZ·W and dW = dZᵀ·X,
  /// with f32 accumulator rows in memory: acc[accOff_i + k] += scale_i ·
  /// src[srcOff + k] for k < d (dMain = ⌊d/L⌋·L from mainExtent()).
  void rankOneUpdate(KernelEmitter &e, mlir::Value acc, llvm::ArrayRef<mlir::Value> accOff,
                     llvm::ArrayRef<mlir::Value> scale, mlir::Value src, mlir::Value srcOff,
                     mlir::Value d, mlir::Value dMain) const;

  /// The outer-product register tile of dX = dZ·W and dW = dZᵀ·X:
  ///   acc(i, g) = init(i, g) + Σ_{k ∈ [kBegin, kEnd)} scalar(i, k) · vec(g, k)
  /// for `rows` rows and `groups` column groups of `groupLanes` columns
  /// (vector<groupLanes x f32>, or f32 for 1 lane), each element summing its
  /// terms in ascending k with one fma (the order rankOneUpdate gives), the
  /// accumulators in registers. Results row-major over (i, g).
  llvm::SmallVector<mlir::Value>
  outerTile(KernelEmitter &e, int64_t rows, int64_t groups, int64_t groupLanes, mlir::Value kBegin,
            mlir::Value kEnd, mlir::ValueRange init,
            const std::function<mlir::Value(KernelEmitter &, int64_t, mlir::Value)> &scalar,
            const std::function<mlir::Value(KernelEmitter &, int64_t, mlir::Value)> &vec) const;

  /// Columns [0, d) in blocks for outerTile: `groups` vectors of L at a
  /// time, then single vectors, then single columns:
  /// body(e, firstColumn, groupsInBlock, lanesPerGroup).
  void forColumnGroups(
      KernelEmitter &e, mlir::Value d, int64_t groups,
      const std::function<void(KernelEmitter &, mlir::Value, int64_t, int64_t)> &body) const;

  /// A vector<lanes> (or f32 for 1 lane) of `mem` at `off`, widened to f32.
  mlir::Value loadGroup(KernelEmitter &e, mlir::Value mem, mlir::Value off, int64_t lanes) const;
  /// Stores an f32 group (vector or scalar) to an f32 buffer.
  void storeGroup(KernelEmitter &e, mlir::Value value, mlir::Value mem, mlir::Value off) const;
  /// The zero of a group of `lanes`.
  mlir::Value zeroGroup(KernelEmitter &e, int64_t lanes) const;

  /// ⌊d/L⌋·L: where the vector part of a row of d elements ends.
  mlir::Value mainExtent(KernelEmitter &e, mlir::Value d) const;

  int64_t vectorWidth() const { return lanes; }

private:
  /// Σₖ a[aOff_i+k]·b[bOff_j+k] for every (i, j), k ∈ [kBegin, d), row-major
  /// over (i, j); dMain ends the vector part.
  llvm::SmallVector<mlir::Value> dot(KernelEmitter &e, mlir::Value a,
                                     llvm::ArrayRef<mlir::Value> aOff, mlir::Value b,
                                     llvm::ArrayRef<mlir::Value> bOff, mlir::Value kBegin,
                                     mlir::Value d, mlir::Value dMain) const;
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
