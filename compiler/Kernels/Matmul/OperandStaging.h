//===- OperandStaging.h - operands into shared memory by cp.async -*- C++ -*-===//
//
// What the tensor-core strategies share: an operand tile [first, first +
// lines) × [k0, k0 + BK) is copied into a shared-memory stage in 16-byte
// pieces (8 elements) along the operand's contiguous axis — k for a K-major
// operand, its lines for an MN-major one — by cp.async when every piece is
// 16-byte aligned in memory and by plain loads and stores otherwise, with
// lines at or past `limit` and k at or past kEnd read as zero. Only where a
// piece lands differs between strategies (mma.sync: padded rows for
// ldmatrix; wgmma: the canonical core-matrix layout its descriptors name),
// so that is a callback.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_MATMUL_OPERANDSTAGING_H
#define LOSSJIT_COMPILER_KERNELS_MATMUL_OPERANDSTAGING_H

#include "compiler/Kernels/Matmul/TileMatmul.h"

#include "llvm/ADT/STLFunctionalExtras.h"

namespace lossjit {

/// Elements of one 16-byte piece (16-bit operands).
inline constexpr int64_t kStagingPiece = 8;

/// Whether `op` is contiguous along k (a null k stride); otherwise it must
/// be contiguous along its lines.
bool isKMajor(const MatrixOperand &op);

/// Whether every 16-byte piece cp.async would copy starts 16-byte aligned:
/// the outer stride is a multiple of 8 elements, and so is where the pieces
/// start along the contiguous axis (`begin`: the first k of a K-major
/// operand, the first line of an MN-major one) relative to its origin.
mlir::Value piecesAligned(KernelEmitter &e, const MatrixOperand &op, mlir::Value begin);

/// Appends line `line` clamped into [0, limit) to `lines` and whether it
/// was inside to `valid`.
void clampLine(KernelEmitter &e, mlir::Value line, mlir::Value limit,
               llvm::SmallVectorImpl<mlir::Value> &lines, llvm::SmallVectorImpl<mlir::Value> &valid);

/// The indices of flat element `element` of `ring`: itself for a 1-D ring,
/// (row, column) for a 2-D one (TMA's stages).
llvm::SmallVector<mlir::Value, 2> ringIndices(KernelEmitter &e, mlir::Value ring,
                                              mlir::Value element);

/// Closes the calling thread's pending cp.async copies into a group.
mlir::Value commitCopies(KernelEmitter &e);

/// Where piece `piece` of a stage comes from and goes: `row` indexes the
/// pieces' rows (a line of a K-major operand, a k of an MN-major one),
/// `along` the first of its 8 elements on the contiguous axis (a multiple
/// of 8), `dst` its first element in the ring.
struct PiecePlace {
  mlir::Value row, along, dst;
};
using PiecePlacer = llvm::function_ref<PiecePlace(KernelEmitter &, mlir::Value piece)>;

/// The tile an operand stage holds.
struct StageTile {
  mlir::Value ring;  ///< the workgroup buffer.
  bool kMajor = true;
  int64_t pieces = 0; ///< lines · BK / 8.
  mlir::Value k0, kEnd, first, limit;
  mlir::Value aligned; ///< piecesAligned() for this product.
};

/// The k loop of a staged tile product: the k tiles [kBegin, kEnd) in steps
/// of `bk`, tile kt in stage kt % `stages` of each operand's ring, and
/// whether each operand's pieces are aligned for cp.async.
struct KTiles {
  KTiles(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b, const BlockTile &tile,
         mlir::Value kBegin, mlir::Value kEnd, int64_t bk, int64_t stages);

  /// Copies k tile `kt` when it exists (copy(e, stage, k0)) and closes a
  /// group of copies — an empty one past the end, so that every call adds
  /// exactly one group and the wait counts stay exact.
  mlir::Value fill(KernelEmitter &e, mlir::Value kt,
                   llvm::function_ref<void(KernelEmitter &, mlir::Value stage, mlir::Value k0)>
                       copy) const;

  mlir::Value kBegin, kEnd, numK;
  mlir::Value alignedA, alignedB; ///< piecesAligned() of each operand.
  int64_t bk, stages;
};

/// Copies the stage's pieces, `threads` threads of the block taking pieces
/// tid, tid + threads, …; k0 < kEnd, and the operand has a line below
/// limit (the tile's lines may all lie past it: a cluster's padding block,
/// which reads zeros). The copies are issued, not committed.
void stagePieces(KernelEmitter &e, const MatrixOperand &op, const StageTile &stage,
                 int64_t threads, mlir::Value tid, PiecePlacer place);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_MATMUL_OPERANDSTAGING_H
