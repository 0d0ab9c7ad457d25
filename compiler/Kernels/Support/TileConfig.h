//===- TileConfig.h - the knobs of the fused-loss kernel builders -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_TILECONFIG_H
#define LOSSJIT_COMPILER_KERNELS_TILECONFIG_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace lossjit {

/// How the [BN × BV] logit tile is multiplied. Only SIMT f32 FMA exists so
/// far; tensor-core kinds plug in here without changing the kernel plan.
enum class MatmulKind { Simt };

/// Tile configuration of the GPU kernels. Kernels are specialized on it (and
/// on dtype and options) but stay generic in N, V and D.
struct TileConfig {
  /// Rows of x per thread block (BN): each thread keeps BN accumulators.
  int64_t blockRows = 4;
  /// Threads per block; a power of two so the block reductions are trees.
  int64_t threads = 128;
  /// Vocabulary splits (S): grid.y of the partial-LSE kernel.
  int64_t splits = 8;
  MatmulKind matmul = MatmulKind::Simt;

  /// Canonical text, e.g. "block_rows=4,threads=128,splits=8,matmul=simt";
  /// part of the cache key.
  std::string str() const;
  /// Checks the ranges every kernel builder relies on.
  llvm::Error validate() const;
  /// Parses `str()`'s format; keys may be omitted (defaults stay).
  static llvm::Expected<TileConfig> parse(llvm::StringRef text);
};

/// Options of the host kernels.
struct CpuTileConfig {
  int64_t blockRows = 8;   ///< rows sharing each loaded weight row.
  int64_t vectorWidth = 8; ///< f32 lanes of the dot product.
  /// Register blocks per panel: the forward sweeps the vocabulary in tiles
  /// for a panel of blockRows·panelBlocks rows, so each W tile is read once
  /// per panel.
  int64_t panelBlocks = 16;
  /// Vocabulary columns per tile (the W rows kept hot in cache).
  int64_t vocabTile = 64;
  /// Lanes of the fixed-order reduction; equal to the GPU block size so the
  /// two backends sum per-row losses in the same order.
  int64_t reduceLanes = 128;
  std::string str() const;
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_TILECONFIG_H
