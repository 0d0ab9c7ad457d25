//===- TileMatmul.cpp - operands and the strategy registry ---------------===//

#include "compiler/Kernels/Matmul/TileMatmul.h"
#include "compiler/Kernels/Support/BlockReduce.h"

using namespace mlir;
using namespace lossjit;

Value MatrixOperand::lineStart(KernelEmitter &e, Value line) const {
  Value rel = lineOrigin ? e.sub(line, lineOrigin) : line;
  return lineStride ? e.mul(rel, lineStride) : rel;
}

Value MatrixOperand::alongK(KernelEmitter &e, Value start, Value k) const {
  Value rel = kOrigin ? e.sub(k, kOrigin) : k;
  return e.add(start, kStride ? e.mul(rel, kStride) : rel);
}

Value MatrixOperand::offset(KernelEmitter &e, Value line, Value k) const {
  return alongK(e, lineStart(e, line), k);
}

KernelEmitter TileSweep::pinned(KernelEmitter &e) const {
  return pinThread ? e.withThreadId(opaqueThreadIdx(e)) : e.at(e.builder(), e.location());
}

namespace {
/// `z`'s columns clamped to colLast as base + min(offset, room): equal to
/// min(openCols[j], colLast) (when colFirst ≤ colLast, base is colFirst;
/// else every column is colLast).
SmallVector<Value> clampFromFirst(KernelEmitter &e, const Fragment &z) {
  assert(z.colOffsets.size() == z.cols.size() && "colFirst without the offsets");
  Value base = e.minUI(z.colFirst, z.colLast);
  Value room = e.sub(z.colLast, base);
  SmallVector<Value> cols;
  for (int64_t offset : z.colOffsets)
    cols.push_back(e.add(base, e.minUI(e.index(offset), room)));
  return cols;
}
} // namespace

SmallVector<Value>
lossjit::foldColumns(KernelEmitter &e, const Fragment &z,
                     const std::function<SmallVector<Value>(KernelEmitter &, Fragment &)> &fold) {
  // Each side folds a copy: `fold` may rewrite the values (a bias), and
  // neither side may see what the other defined.
  Fragment masked = z;
  if (!z.colsInside)
    return fold(e, masked);
  assert(z.openCols.size() == z.cols.size() && "colsInside without the open columns");
  return e.ifElseValues(
      z.colsInside,
      [&](KernelEmitter &ie) {
        Fragment inside = z;
        inside.cols = z.openCols;
        Value holds = ie.truth();
        for (Value &valid : inside.colValid)
          valid = holds;
        inside.colsInside = holds;
        return fold(ie, inside);
      },
      [&](KernelEmitter &oe) {
        if (z.colFirst)
          masked.cols = clampFromFirst(oe, z);
        return fold(oe, masked);
      });
}

SmallVector<Value> TileMatmul::sweep(KernelEmitter &e, const MatrixOperand &a,
                                     const MatrixOperand &b, const TileSweep &tiles,
                                     Value kBegin, Value kEnd, ValueRange init,
                                     ArrayRef<Value> scratch, const TileEpilogue &epilogue,
                                     bool /*overlap*/) const {
  return e.forLoop(tiles.begin, tiles.end, tiles.step, init,
                   [&](KernelEmitter &le, Value iv, ValueRange state) {
                     KernelEmitter te = tiles.pinned(le);
                     const BlockTile tile = tiles.tileAt(te, iv);
                     Fragment f = multiply(te, a, b, tile, kBegin, kEnd, {}, scratch);
                     return epilogue(te, tile, f, state);
                   });
}

namespace {
/// One registered strategy: the config value that selects it and its
/// constructor (in its own file under Matmul/).
struct Strategy {
  loss::MatmulKind kind;
  std::unique_ptr<TileMatmul> (*create)(const TileConfig &);
};

/// Adding a strategy: a MatmulKind case (dialects/Loss/LoweringConfig.td), its file
/// here in Matmul/, and one row below.
constexpr Strategy kStrategies[] = {
    {loss::MatmulKind::simt, createSimtFmaMatmul},
    {loss::MatmulKind::mma_sync, createMmaSyncMatmul},
    {loss::MatmulKind::wgmma, createWgmmaMatmul},
};
} // namespace

std::unique_ptr<TileMatmul> lossjit::createTileMatmul(const TileConfig &tile) {
  for (const Strategy &s : kStrategies)
    if (s.kind == tile.matmul)
      return s.create(tile);
  return nullptr;
}
