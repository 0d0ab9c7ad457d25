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
// It never sees how the product was formed, so a strategy (SIMT FMA today,
// mma.sync / wgmma next) is one file plus one registration in
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

/// The accumulators one thread owns after a tile product. Slot (i, j) holds
/// C[row(i), col(j)]; values are f32.
struct Fragment {
  llvm::SmallVector<mlir::Value> rows, cols;         ///< clamped lines.
  llvm::SmallVector<mlir::Value> rowValid, colValid; ///< i1: inside the limits.
  llvm::SmallVector<mlir::Value> values;             ///< rows.size() × cols.size().

  mlir::Value &at(size_t i, size_t j) { return values[i * cols.size() + j]; }
  mlir::Value at(size_t i, size_t j) const { return values[i * cols.size() + j]; }
};

/// A strategy for multiplying block tiles.
class TileMatmul {
public:
  virtual ~TileMatmul() = default;

  /// The fragment layout of `tile` for the calling thread (lines, validity)
  /// without multiplying: what multiply() will return coordinates for, so a
  /// schedule can load start values or row facts first.
  virtual Fragment layout(KernelEmitter &e, const BlockTile &tile) const = 0;

  /// C_tile = init + Σ_{k ∈ [kBegin, kEnd)} A(row, k)·B(col, k) in f32, each
  /// element summed in ascending k with one fma per term (the order that
  /// fixes the bits). `init` holds a start value per fragment slot, or is
  /// empty for zeros.
  virtual Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                            const BlockTile &tile, mlir::Value kBegin, mlir::Value kEnd,
                            mlir::ValueRange init = {}) const = 0;
};

/// The strategy `kind` names, for blocks of `tile.threads` threads.
std::unique_ptr<TileMatmul> createTileMatmul(const TileConfig &tile);

/// SIMT f32 FMA: thread t owns column colBegin + t of the tile (cols must
/// equal the block's threads) and every row; k runs in a scalar loop.
std::unique_ptr<TileMatmul> createSimtFmaMatmul(const TileConfig &tile);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_MATMUL_TILEMATMUL_H
