//===- SimtFma.cpp - tile products as per-thread f32 FMA loops ------------===//
//
// The reference strategy, on every GPU: a block of T threads computes a
// rows × T tile; thread t owns column colBegin + t of every row, and sums
// its dot products over k in order with one fma per term, reading A and B
// straight from memory (global or shared). This is the one SIMT GEMM loop
// of the kernels: logits, dX and dW all come through here.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/Matmul/TileMatmul.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace lossjit;

namespace {
/// Lines [begin, begin + count) clamped below `limit`, with validity.
void clampLines(KernelEmitter &e, Value begin, int64_t count, Value limit,
                SmallVector<Value> &lines, SmallVector<Value> &valid) {
  Value last = e.sub(limit, e.index(1));
  for (int64_t i = 0; i < count; ++i) {
    Value line = e.add(begin, e.index(i));
    valid.push_back(e.cmpI(arith::CmpIPredicate::ult, line, limit));
    lines.push_back(e.minUI(line, last));
  }
}

class SimtFma : public TileMatmul {
public:
  explicit SimtFma(int64_t threads) : threads(threads) {}

  int64_t rowMergeSlots(int64_t rows) const override { return rows * threads; }

  Fragment layout(KernelEmitter &e, const BlockTile &tile) const override {
    assert(tile.cols == threads && "SIMT: one column per thread");
    Fragment f;
    clampLines(e, tile.rowBegin, tile.rows, tile.rowLimit, f.rows, f.rowValid);
    Value tid = gpu::ThreadIdOp::create(e.builder(), e.location(), gpu::Dimension::x);
    clampLines(e, e.add(tile.colBegin, tid), 1, tile.colLimit, f.cols, f.colValid);
    f.sharing.everyThread = true;
    f.sharing.groups = threads;
    return f;
  }

  Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                    const BlockTile &tile, Value kBegin, Value kEnd, ValueRange init,
                    ArrayRef<Value> scratch) const override {
    (void)scratch;
    Fragment f = layout(e, tile);
    SmallVector<Value> aStart;
    for (Value row : f.rows)
      aStart.push_back(a.lineStart(e, row));
    Value bStart = b.lineStart(e, f.cols.front());
    SmallVector<Value> start(init.begin(), init.end());
    if (start.empty())
      start.assign(f.rows.size(), e.real(0.0));
    f.values =
        e.forLoop(kBegin, kEnd, e.index(1), start, [&](KernelEmitter &ke, Value k, ValueRange acc) {
          Value bv = ke.loadReal(b.buffer, b.alongK(ke, bStart, k));
          SmallVector<Value> next;
          for (size_t i = 0; i < aStart.size(); ++i)
            next.push_back(ke.fma(ke.loadReal(a.buffer, a.alongK(ke, aStart[i], k)), bv, acc[i]));
          return next;
        });
    return f;
  }

private:
  int64_t threads;
};
} // namespace

std::unique_ptr<TileMatmul> lossjit::createSimtFmaMatmul(const TileConfig &tile) {
  return std::make_unique<SimtFma>(tile.threads);
}
