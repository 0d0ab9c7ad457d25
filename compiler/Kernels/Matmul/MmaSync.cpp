//===- MmaSync.cpp - tile products on tensor cores (sm_80+) --------------===//
//
// A block of W warps computes a BM × BN tile of C = A·Bᵀ in 32×32 warp
// tiles: warp w covers rows
// 32·(w / (BN/32)) … and columns 32·(w % (BN/32)) …, as 2 × 4 products
// mma.sync.m16n8k16 per k16 step with f32 accumulators.
//
// Operands reach the tensor cores through shared memory:
//  - a ring of `stages` buffers per operand. An operand contiguous along k
//    (K-major: X and W of the logits, dZ of dX) is staged as BM (or BN)
//    lines of BK elements; one contiguous along its lines (MN-major: W of
//    dX, dZᵀ and Xᵀ of dW) as BK rows of BM (or BN) lines, read back with
//    ldmatrix.trans. Staged rows are padded by 8 elements, so the eight
//    16-byte rows an ldmatrix reads fall in eight different bank quads;
//  - filled by cp.async (16 bytes, zero-filled past k = kEnd and past the
//    line limits) when the operand's outer stride is a multiple of 8 —
//    every 16-byte piece is then aligned — and by plain loads and stores
//    otherwise;
//  - the pipeline: stages − 1 k tiles in flight before the first product;
//    step kt waits for tile kt (cp.async.wait_group stages − 2), barriers,
//    issues tile kt + stages − 1 into the buffer step kt − 1 read, then
//    multiplies tile kt. One (possibly empty) commit group per step keeps
//    the group count exact.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"): A via
// ldmatrix.x4 — K-major: lane l addresses line l % 16, k half l / 16;
// MN-major (.trans): k row (l % 8) + 8·(l / 16), line half (l / 8) % 2 —
// and B via ldmatrix.x2 — K-major: line l % 8, k half (l / 8) % 2;
// MN-major (.trans): k row l % 16. Lane l then owns C rows l/4 and l/4 + 8
// of each m16 tile and columns 2·(l % 4) + {0, 1} of each n8 tile: per
// thread 4 rows × 8 columns.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/Matmul/OperandStaging.h"
#include "compiler/Kernels/Matmul/TileMatmul.h"
#include "compiler/Kernels/Support/BlockReduce.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace lossjit;

namespace {
constexpr int64_t kWarpTile = 32; ///< rows and columns of a warp tile.
constexpr int64_t kMmaM = 16, kMmaN = 8, kMmaK = 16;
constexpr int64_t kPad = 8;   ///< elements of padding per staged row.

class MmaSync : public TileMatmul {
public:
  explicit MmaSync(const TileConfig &tile)
      : bm(tile.blockRows), bn(tile.blockCols), bk(tile.blockK), stages(tile.stages),
        threads(tile.threads), warpsN(tile.blockCols / kWarpTile) {}

  SmallVector<ScratchBuffer> scratch(Type storage) const override {
    // 16-byte rows: cp.async destinations and ldmatrix row addresses. A
    // stage holds either layout of its operand.
    return {{stages * stageElements(bm), storage, 16}, {stages * stageElements(bn), storage, 16}};
  }

  int64_t rowMergeSlots(int64_t rows) const override { return rows * warpsN; }

  Fragment layout(KernelEmitter &e, const BlockTile &tile) const override {
    assert(tile.rows == bm && tile.cols == bn && "mma_sync: one BM x BN tile per block");
    Lanes l = lanes(e);
    Fragment f;
    for (int64_t mi = 0; mi < kWarpTile / kMmaM; ++mi)
      for (int64_t h = 0; h < 2; ++h) {
        Value tileRow = e.add(l.warpRow, e.add(e.index(mi * kMmaM + h * 8), l.group));
        f.sharing.tileRows.push_back(tileRow);
        clampLine(e, e.add(tile.rowBegin, tileRow), tile.rowLimit, f.rows, f.rowValid);
      }
    for (int64_t ni = 0; ni < kWarpTile / kMmaN; ++ni)
      for (int64_t q = 0; q < 2; ++q) {
        Value tileCol = e.add(l.warpCol, e.add(e.index(ni * kMmaN + q), e.mul(l.quad, e.index(2))));
        f.openCols.push_back(e.add(tile.colBegin, tileCol));
        clampLine(e, f.openCols.back(), tile.colLimit, f.cols, f.colValid);
      }
    f.colsInside =
        e.cmpI(arith::CmpIPredicate::ule, e.add(tile.colBegin, e.index(bn)), tile.colLimit);
    f.sharing.everyThread = false;
    f.sharing.laneXor = {1, 2}; // the four lanes of a quad share rows
    f.sharing.lane = l.lane;
    f.sharing.leader = e.cmpI(arith::CmpIPredicate::eq, l.quad, e.index(0));
    f.sharing.group = l.warpN;
    f.sharing.groups = warpsN;
    return f;
  }

  Fragment multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                    const BlockTile &tile, Value kBegin, Value kEnd, ValueRange init,
                    ArrayRef<Value> buffers) const override {
    assert(buffers.size() == 2 && "mma_sync: the operand rings");
    Fragment f = layout(e, tile);
    Lanes l = lanes(e);
    Staged sa{buffers[0], bm, isKMajor(a)}, sb{buffers[1], bn, isKMajor(b)};
    KTiles k(e, a, b, tile, kBegin, kEnd, bk, stages);
    Value numK = k.numK;

    // The previous tile's last products may still read the ring.
    gpuBarrier(e);
    auto fill = [&](KernelEmitter &fe, Value kt) {
      return k.fill(fe, kt, [&](KernelEmitter &ie, Value stage, Value k0) {
        fillOperand(ie, a, sa, stage, k0, kEnd, tile.rowBegin, tile.rowLimit, k.alignedA, l);
        fillOperand(ie, b, sb, stage, k0, kEnd, tile.colBegin, tile.colLimit, k.alignedB, l);
      });
    };
    Value token;
    for (int64_t s = 0; s + 1 < stages; ++s)
      token = fill(e, e.index(s));

    // Accumulators: [mi][ni] vector<2x2xf32>, from `init` or zeros.
    Type accType = VectorType::get({2, 2}, e.builder().getF32Type());
    SmallVector<Value> acc;
    for (int64_t mi = 0; mi < 2; ++mi)
      for (int64_t ni = 0; ni < 4; ++ni)
        acc.push_back(initialAccumulator(e, accType, init, f, mi, ni));

    acc = e.forLoop(e.index(0), numK, e.index(1), acc, [&](KernelEmitter &le, Value kt, ValueRange it) {
      nvgpu::DeviceAsyncWaitOp::create(le.builder(), le.location(), token,
                                       le.builder().getI32IntegerAttr(stages - 2));
      gpuBarrier(le);
      fill(le, le.add(kt, le.index(stages - 1)));
      Value stage = le.remUI(kt, le.index(stages));
      SmallVector<Value> next(it.begin(), it.end());
      for (int64_t kk = 0; kk < bk / kMmaK; ++kk)
        productStep(le, sa, sb, stage, kk, l, next);
      return next;
    });
    // Nothing may stay in flight into the caller's shared memory reuse.
    nvgpu::DeviceAsyncWaitOp::create(e.builder(), e.location(), token,
                                     e.builder().getI32IntegerAttr(0));

    f.values.assign(f.rows.size() * f.cols.size(), Value());
    for (int64_t mi = 0; mi < 2; ++mi)
      for (int64_t ni = 0; ni < 4; ++ni)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t q = 0; q < 2; ++q)
            f.at(mi * 2 + h, ni * 2 + q) = vector::ExtractOp::create(
                e.builder(), e.location(), acc[mi * 4 + ni], ArrayRef<int64_t>{h, q});
    return f;
  }

private:
  /// Where the calling thread sits in the block.
  struct Lanes {
    Value tid, lane, group, quad; ///< lane / 4 and lane % 4.
    Value warpN, warpRow, warpCol;
  };

  /// One operand's ring: `lines` lines per stage, staged K-major (lines of
  /// BK elements) or MN-major (BK rows of `lines` elements).
  struct Staged {
    Value ring;
    int64_t lines;
    bool kMajor;
  };

  /// Elements per staged row (padded) and per stage.
  int64_t rowElements(const Staged &s) const { return (s.kMajor ? bk : s.lines) + kPad; }
  int64_t stageElements(int64_t lines) const {
    return std::max(lines * (bk + kPad), bk * (lines + kPad));
  }

  Lanes lanes(KernelEmitter &e) const {
    Lanes l;
    l.tid = gpuThreadIdx(e);
    l.lane = e.remUI(l.tid, e.index(32));
    Value warp = e.divUI(l.tid, e.index(32));
    l.group = e.divUI(l.lane, e.index(4));
    l.quad = e.remUI(l.lane, e.index(4));
    l.warpN = e.remUI(warp, e.index(warpsN));
    l.warpRow = e.mul(e.divUI(warp, e.index(warpsN)), e.index(kWarpTile));
    l.warpCol = e.mul(l.warpN, e.index(kWarpTile));
    return l;
  }

  /// Stages the lines [first, first + lines) of `op` for k in [k0, k0 + BK)
  /// into buffer `stage` of `ring`: piece c is row c / perRow of the stage
  /// (a line, or a k for MN-major), at element 8·(c % perRow) of the row.
  void fillOperand(KernelEmitter &e, const MatrixOperand &op, const Staged &ring, Value stage,
                   Value k0, Value kEnd, Value first, Value limit, Value aligned,
                   const Lanes &l) const {
    const int64_t perRow = (ring.kMajor ? bk : ring.lines) / kStagingPiece;
    Value base = e.mul(stage, e.index(stageElements(ring.lines)));
    StageTile tile{ring.ring, ring.kMajor, ring.lines * bk / kStagingPiece, k0, kEnd, first, limit,
                   aligned};
    stagePieces(e, op, tile, threads, l.tid, [&](KernelEmitter &ce, Value c) {
      Value row = ce.divUI(c, ce.index(perRow));
      Value along = ce.mul(ce.remUI(c, ce.index(perRow)), ce.index(kStagingPiece));
      return PiecePlace{row, along,
                        ce.add(base, ce.add(ce.mul(row, ce.index(rowElements(ring))), along))};
    });
  }

  /// Where lane l's ldmatrix row address points in `ring`'s buffer `stage`
  /// for the 16 × 16 (A, x4) or 8 × 16 (B, x2) fragment of the tile lines
  /// from `line0` at k step `k` (see the header's fragment notes).
  Value fragmentRow(KernelEmitter &e, const Staged &ring, Value stage, Value line0, Value k,
                    bool isA, const Lanes &l) const {
    Value base = e.mul(stage, e.index(stageElements(ring.lines)));
    Value line, kRow;
    if (ring.kMajor) {
      // A: line l % 16, k half l / 16. B: line l % 8, k half (l / 8) % 2.
      line = isA ? e.remUI(l.lane, e.index(16)) : e.remUI(l.lane, e.index(8));
      Value half = isA ? e.divUI(l.lane, e.index(16))
                       : e.remUI(e.divUI(l.lane, e.index(8)), e.index(2));
      kRow = e.mul(half, e.index(kStagingPiece));
      return e.add(base, e.add(e.mul(e.add(line0, line), e.index(rowElements(ring))),
                               e.add(k, kRow)));
    }
    // .trans: A: k row (l % 8) + 8·(l / 16), line half (l / 8) % 2.
    // B: k row l % 16, the tile's eight lines.
    if (isA) {
      kRow = e.add(e.remUI(l.lane, e.index(8)), e.mul(e.divUI(l.lane, e.index(16)), e.index(8)));
      line = e.mul(e.remUI(e.divUI(l.lane, e.index(8)), e.index(2)), e.index(8));
    } else {
      kRow = e.remUI(l.lane, e.index(16));
      line = e.index(0);
    }
    return e.add(base, e.add(e.mul(e.add(k, kRow), e.index(rowElements(ring))),
                             e.add(line0, line)));
  }

  /// The 2 × 4 products of k16 step `kk` of the staged tile `stage`.
  void productStep(KernelEmitter &e, const Staged &sa, const Staged &sb, Value stage, int64_t kk,
                   const Lanes &l, SmallVector<Value> &acc) const {
    OpBuilder &b = e.builder();
    Type elem = cast<MemRefType>(sa.ring.getType()).getElementType();
    Value k = e.index(kk * kMmaK);
    SmallVector<Value> aFrag, bFrag;
    for (int64_t mi = 0; mi < 2; ++mi) {
      Value at = fragmentRow(e, sa, stage, e.add(l.warpRow, e.index(mi * kMmaM)), k, true, l);
      aFrag.push_back(nvgpu::LdMatrixOp::create(b, e.location(), VectorType::get({4, 2}, elem),
                                                sa.ring, ValueRange{at}, !sa.kMajor, 4));
    }
    for (int64_t ni = 0; ni < 4; ++ni) {
      Value at = fragmentRow(e, sb, stage, e.add(l.warpCol, e.index(ni * kMmaN)), k, false, l);
      bFrag.push_back(nvgpu::LdMatrixOp::create(b, e.location(), VectorType::get({2, 2}, elem),
                                                sb.ring, ValueRange{at}, !sb.kMajor, 2));
    }
    for (int64_t mi = 0; mi < 2; ++mi)
      for (int64_t ni = 0; ni < 4; ++ni)
        acc[mi * 4 + ni] = nvgpu::MmaSyncOp::create(b, e.location(), aFrag[mi], bFrag[ni],
                                                    acc[mi * 4 + ni],
                                                    ArrayRef<int64_t>{kMmaM, kMmaN, kMmaK});
  }

  /// Accumulator (mi, ni) from `init` (fragment slot order) or zeros.
  static Value initialAccumulator(KernelEmitter &e, Type accType, ValueRange init,
                                  const Fragment &f, int64_t mi, int64_t ni) {
    OpBuilder &b = e.builder();
    Value zero = arith::ConstantOp::create(
        b, e.location(), DenseElementsAttr::get(cast<VectorType>(accType), b.getF32FloatAttr(0)));
    if (init.empty())
      return zero;
    Value acc = zero;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t q = 0; q < 2; ++q)
        acc = vector::InsertOp::create(b, e.location(),
                                       init[(mi * 2 + h) * f.cols.size() + ni * 2 + q], acc,
                                       ArrayRef<int64_t>{h, q});
    return acc;
  }

  int64_t bm, bn, bk, stages, threads, warpsN;
};
} // namespace

std::unique_ptr<TileMatmul> lossjit::createMmaSyncMatmul(const TileConfig &tile) {
  return std::make_unique<MmaSync>(tile);
}
