//===- MmaSync.cpp - tile products on tensor cores (sm_80+) --------------===//
//
// A block of W warps computes a BM × BN tile of C = A·Bᵀ with A and B
// contiguous along k, in 32×32 warp tiles: warp w covers rows
// 32·(w / (BN/32)) … and columns 32·(w % (BN/32)) …, as 2 × 4 products
// mma.sync.m16n8k16 per k16 step with f32 accumulators.
//
// Operands reach the tensor cores through shared memory:
//  - a ring of `stages` buffers per operand, each BM (or BN) rows of BK
//    elements padded to BK + 8, so the eight 16-byte rows an ldmatrix reads
//    fall in eight different bank quads;
//  - filled by cp.async (16 bytes, zero-filled past k = kEnd and past the
//    line limits) when D is a multiple of 8 — rows are then 16-byte aligned —
//    and by plain loads and stores otherwise;
//  - the pipeline: stages − 1 k tiles in flight before the first product;
//    step kt waits for tile kt (cp.async.wait_group stages − 2), barriers,
//    issues tile kt + stages − 1 into the buffer step kt − 1 read, then
//    multiplies tile kt. One (possibly empty) commit group per step keeps
//    the group count exact.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"): A via
// ldmatrix.x4 (lane l addresses row l % 16, k half l / 16), B via
// ldmatrix.x2 on the [n][k] rows of B (lane l addresses row l % 8, k half
// (l / 8) % 2). Lane l then owns C rows l/4 and l/4 + 8 of each m16 tile and
// columns 2·(l % 4) + {0, 1} of each n8 tile: per thread 4 rows × 8 columns.
//
//===----------------------------------------------------------------------===//

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
constexpr int64_t kChunk = 8; ///< elements per 16-byte copy.
constexpr int64_t kPad = 8;   ///< elements of padding per staged row.

class MmaSync : public TileMatmul {
public:
  explicit MmaSync(const TileConfig &tile)
      : bm(tile.blockRows), bn(tile.blockCols), bk(tile.blockK), stages(tile.stages),
        threads(tile.threads), warpsN(tile.blockCols / kWarpTile) {}

  SmallVector<ScratchBuffer> scratch(Type storage) const override {
    // 16-byte rows: cp.async destinations and ldmatrix row addresses.
    return {{stages * bm * ld(), storage, 16}, {stages * bn * ld(), storage, 16}};
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
        clamp(e, e.add(tile.rowBegin, tileRow), tile.rowLimit, f.rows, f.rowValid);
      }
    for (int64_t ni = 0; ni < kWarpTile / kMmaN; ++ni)
      for (int64_t q = 0; q < 2; ++q) {
        Value tileCol = e.add(l.warpCol, e.add(e.index(ni * kMmaN + q), e.mul(l.quad, e.index(2))));
        clamp(e, e.add(tile.colBegin, tileCol), tile.colLimit, f.cols, f.colValid);
      }
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
    assert(!a.kStride && !b.kStride && "mma_sync: operands contiguous along k");
    assert(buffers.size() == 2 && "mma_sync: the operand rings");
    Fragment f = layout(e, tile);
    Lanes l = lanes(e);
    Value sa = buffers[0], sb = buffers[1];
    Value numK = e.ceilDiv(e.sub(kEnd, kBegin), e.index(bk));
    // Whole 16-byte rows only when every row starts 16-byte aligned.
    Value aligned = e.cmpI(arith::CmpIPredicate::eq, e.remUI(kEnd, e.index(kChunk)), e.index(0));

    // The previous tile's last products may still read the ring.
    gpuBarrier(e);
    auto fill = [&](KernelEmitter &fe, Value kt) {
      Value stage = fe.remUI(kt, fe.index(stages));
      Value k0 = fe.add(kBegin, fe.mul(kt, fe.index(bk)));
      Value live = fe.cmpI(arith::CmpIPredicate::ult, kt, numK);
      fe.ifThen(live, [&](KernelEmitter &ie) {
        fillOperand(ie, a, sa, stage, k0, kEnd, tile.rowBegin, bm, tile.rowLimit, aligned, l);
        fillOperand(ie, b, sb, stage, k0, kEnd, tile.colBegin, bn, tile.colLimit, aligned, l);
      });
      return commitGroup(fe);
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

  int64_t ld() const { return bk + kPad; }

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

  static void clamp(KernelEmitter &e, Value line, Value limit, SmallVector<Value> &lines,
                    SmallVector<Value> &valid) {
    valid.push_back(e.cmpI(arith::CmpIPredicate::ult, line, limit));
    lines.push_back(e.minUI(line, e.sub(limit, e.index(1))));
  }

  Value commitGroup(KernelEmitter &e) const {
    auto token = nvgpu::DeviceAsyncTokenType::get(e.builder().getContext());
    return nvgpu::DeviceAsyncCreateGroupOp::create(e.builder(), e.location(), token, ValueRange{});
  }

  /// Stages `lines` lines of `op` from `first` (lines ≥ limit and k ≥ kEnd
  /// read as zero) for k in [k0, k0 + BK) into `ring`'s buffer `stage`.
  void fillOperand(KernelEmitter &e, const MatrixOperand &op, Value ring, Value stage, Value k0,
                   Value kEnd, Value first, int64_t lines, Value limit, Value aligned,
                   const Lanes &l) const {
    const int64_t perLine = bk / kChunk, chunks = lines * perLine;
    Value base = e.mul(stage, e.index(lines * ld()));
    for (int64_t c0 = 0; c0 < chunks; c0 += threads) {
      Value c = e.add(l.tid, e.index(c0));
      auto body = [&](KernelEmitter &ce) {
        Value r = ce.divUI(c, ce.index(perLine));
        Value kc = ce.mul(ce.remUI(c, ce.index(perLine)), ce.index(kChunk));
        Value line = ce.add(first, r);
        Value lineOk = ce.cmpI(arith::CmpIPredicate::ult, line, limit);
        Value safeLine = ce.minUI(line, ce.sub(limit, ce.index(1)));
        Value k = ce.add(k0, kc);
        Value left = ce.select(ce.cmpI(arith::CmpIPredicate::ult, k, kEnd), ce.sub(kEnd, k),
                               ce.index(0));
        Value count = ce.select(lineOk, ce.minUI(left, ce.index(kChunk)), ce.index(0));
        Value dst = ce.add(base, ce.add(ce.mul(r, ce.index(ld())), kc));
        Value start = op.lineStart(ce, safeLine);
        ce.ifThenElse(
            aligned,
            [&](KernelEmitter &ae) {
              // An empty copy still names an aligned address: the line's start.
              Value src = ae.select(ae.cmpI(arith::CmpIPredicate::eq, count, ae.index(0)), start,
                                    op.alongK(ae, start, k));
              auto token = nvgpu::DeviceAsyncTokenType::get(ae.builder().getContext());
              nvgpu::DeviceAsyncCopyOp::create(ae.builder(), ae.location(), token, ring,
                                               ValueRange{dst}, op.buffer, ValueRange{src},
                                               ae.builder().getIndexAttr(kChunk), count,
                                               ae.builder().getUnitAttr());
            },
            [&](KernelEmitter &se) {
              Type elem = cast<MemRefType>(ring.getType()).getElementType();
              Value zero = arith::ConstantOp::create(se.builder(), se.location(),
                                                     se.builder().getFloatAttr(elem, 0.0));
              for (int64_t j = 0; j < kChunk; ++j) {
                Value in = se.cmpI(arith::CmpIPredicate::ult, se.index(j), count);
                Value at = se.select(in, op.alongK(se, start, se.add(k, se.index(j))), start);
                Value v = se.select(in, se.load(op.buffer, at), zero);
                se.store(v, ring, se.add(dst, se.index(j)));
              }
            });
      };
      if ((c0 + threads) <= chunks)
        body(e);
      else
        e.ifThen(e.cmpI(arith::CmpIPredicate::ult, c, e.index(chunks)), body);
    }
  }

  /// The 2 × 4 products of k16 step `kk` of the staged tile `stage`.
  void productStep(KernelEmitter &e, Value sa, Value sb, Value stage, int64_t kk, const Lanes &l,
                   SmallVector<Value> &acc) const {
    OpBuilder &b = e.builder();
    Type elem = cast<MemRefType>(sa.getType()).getElementType();
    Value k = e.index(kk * kMmaK);
    SmallVector<Value> aFrag, bFrag;
    Value aBase = e.mul(stage, e.index(bm * ld()));
    Value aRow = e.add(l.warpRow, e.remUI(l.lane, e.index(16)));
    Value aK = e.add(k, e.mul(e.divUI(l.lane, e.index(16)), e.index(kChunk)));
    for (int64_t mi = 0; mi < 2; ++mi) {
      Value at = e.add(aBase, e.add(e.mul(e.add(aRow, e.index(mi * kMmaM)), e.index(ld())), aK));
      aFrag.push_back(nvgpu::LdMatrixOp::create(b, e.location(), VectorType::get({4, 2}, elem), sa,
                                                ValueRange{at}, false, 4));
    }
    Value bBase = e.mul(stage, e.index(bn * ld()));
    Value bRow = e.add(l.warpCol, e.remUI(l.lane, e.index(8)));
    Value bK =
        e.add(k, e.mul(e.remUI(e.divUI(l.lane, e.index(8)), e.index(2)), e.index(kChunk)));
    for (int64_t ni = 0; ni < 4; ++ni) {
      Value at = e.add(bBase, e.add(e.mul(e.add(bRow, e.index(ni * kMmaN)), e.index(ld())), bK));
      bFrag.push_back(nvgpu::LdMatrixOp::create(b, e.location(), VectorType::get({2, 2}, elem), sb,
                                                ValueRange{at}, false, 2));
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
