//===- CpuVector.cpp -----------------------------------------------------===//

#include "compiler/Kernels/Matmul/CpuVector.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace lossjit;

namespace {
Type elementOf(Value memref) { return cast<MemRefType>(memref.getType()).getElementType(); }

/// vector<L> load of memref[off] widened to the compute type.
Value loadVecReal(KernelEmitter &e, Value mem, Value off, int64_t lanes) {
  OpBuilder &b = e.builder();
  Type elem = elementOf(mem);
  Value raw =
      vector::LoadOp::create(b, e.location(), VectorType::get({lanes}, elem), mem, ValueRange{off});
  if (elem == e.compute())
    return raw;
  return arith::ExtFOp::create(b, e.location(), VectorType::get({lanes}, e.compute()), raw);
}
} // namespace

Fragment CpuVector::layout(KernelEmitter &e, const BlockTile &tile) const {
  Fragment f;
  auto lines = [&](Value begin, int64_t count, Value limit, SmallVector<Value> &out,
                   SmallVector<Value> &valid) {
    Value last = limit ? e.sub(limit, e.index(1)) : Value();
    for (int64_t i = 0; i < count; ++i) {
      Value line = e.add(begin, e.index(i));
      valid.push_back(limit ? e.cmpI(arith::CmpIPredicate::ult, line, limit) : Value());
      out.push_back(limit ? e.minUI(line, last) : line);
    }
  };
  lines(tile.rowBegin, tile.rows, tile.rowLimit, f.rows, f.rowValid);
  lines(tile.colBegin, tile.cols, tile.colLimit, f.cols, f.colValid);
  return f;
}

Value CpuVector::mainExtent(KernelEmitter &e, Value d) const {
  return e.mul(e.divUI(d, e.index(lanes)), e.index(lanes));
}

Fragment CpuVector::multiply(KernelEmitter &e, const MatrixOperand &a, const MatrixOperand &b,
                             const BlockTile &tile, Value kBegin, Value kEnd, ValueRange init,
                             ArrayRef<Value> scratch) const {
  assert(scratch.empty() && "host operands are read in place");
  assert(!a.kStride && !b.kStride && "host dots are contiguous in k");
  Fragment f = layout(e, tile);
  SmallVector<Value> aOff, bOff;
  for (Value row : f.rows)
    aOff.push_back(a.lineStart(e, row));
  for (Value col : f.cols)
    bOff.push_back(b.lineStart(e, col));
  const size_t rows = aOff.size(), cols = bOff.size();
  SmallVector<Value> start(init.begin(), init.end());
  if (start.empty())
    start.assign(rows * cols, e.real(0.0));
  // Every element in ascending k, one fma per term: the order of the
  // packed micro-kernel and of the GPU SIMT kernels.
  f.values = e.forLoop(kBegin, kEnd, e.index(1), start, [&](KernelEmitter &ke, Value k, ValueRange it) {
    SmallVector<Value> bs;
    for (Value off : bOff)
      bs.push_back(ke.loadReal(b.buffer, b.alongK(ke, off, k)));
    SmallVector<Value> next(rows * cols);
    for (size_t i = 0; i < rows; ++i) {
      Value as = ke.loadReal(a.buffer, a.alongK(ke, aOff[i], k));
      for (size_t j = 0; j < cols; ++j)
        next[i * cols + j] = ke.fma(as, bs[j], it[i * cols + j]);
    }
    return next;
  });
  return f;
}

namespace {
/// Where the packed blocks of [lo, hi) end: blocks of `wide` columns up to
/// the first, of `narrow` up to the second; both `lo` when not enabled.
std::pair<Value, Value> packedEnds(KernelEmitter &e, Value lo, Value hi, int64_t wide,
                                   int64_t narrow, Value enabled) {
  auto end = [&](Value from, int64_t step) {
    return e.add(from, e.mul(e.divUI(e.sub(hi, from), e.index(step)), e.index(step)));
  };
  Value wideEnd = wide > narrow ? end(lo, wide) : lo;
  Value narrowEnd = end(wideEnd, narrow);
  return {e.select(enabled, wideEnd, lo), e.select(enabled, narrowEnd, lo)};
}
} // namespace

void CpuVector::packColumns(KernelEmitter &e, const MatrixOperand &b, Value lo, Value hi, Value d,
                            int64_t groups, Value enabled, Value packed) const {
  assert(!b.kStride && "packed operands are contiguous in k");
  auto [wideEnd, narrowEnd] = packedEnds(e, lo, hi, groups * lanes, lanes, enabled);
  auto blocks = [&](Value from, Value to, int64_t width) {
    e.forLoop(from, to, e.index(width), {}, [&](KernelEmitter &be, Value c0, ValueRange) {
      Value base = be.mul(be.sub(c0, lo), d);
      SmallVector<Value> lines;
      for (int64_t j = 0; j < width; ++j)
        lines.push_back(b.lineStart(be, be.add(c0, be.index(j))));
      // Each line read once in vectors along k, not once per k (the
      // columns are D apart and would fight over the same L1 sets), and
      // transposed through vector shuffles.
      packLinesKMajor(
          be, b.buffer, width,
          [&](KernelEmitter &ke, int64_t j, Value k) { return b.alongK(ke, lines[j], k); }, {}, d,
          packed, base);
      return SmallVector<Value>{};
    });
  };
  if (groups > 1)
    blocks(lo, wideEnd, groups * lanes);
  blocks(wideEnd, narrowEnd, lanes);
}

SmallVector<Value> CpuVector::forPackedColumns(
    KernelEmitter &e, Value lo, Value hi, Value d, int64_t groups, Value enabled,
    ValueRange iters,
    const std::function<SmallVector<Value>(KernelEmitter &, Value, int64_t, Value, ValueRange)>
        &body) const {
  auto [wideEnd, narrowEnd] = packedEnds(e, lo, hi, groups * lanes, lanes, enabled);
  SmallVector<Value> carried(iters.begin(), iters.end());
  auto blocks = [&](Value from, Value to, int64_t width, bool isPacked) {
    carried = e.forLoop(from, to, e.index(width), carried,
                        [&](KernelEmitter &be, Value c0, ValueRange it) {
                          Value off = isPacked ? be.mul(be.sub(c0, lo), d) : Value();
                          return body(be, c0, width, off, it);
                        });
  };
  if (groups > 1)
    blocks(lo, wideEnd, groups * lanes, true);
  blocks(wideEnd, narrowEnd, lanes, true);
  blocks(narrowEnd, hi, 1, false);
  return carried;
}

SmallVector<Value> CpuVector::packedRows(KernelEmitter &e, const MatrixOperand &a,
                                         const Fragment &f, int64_t width, Value packed,
                                         Value packedOff, Value d) const {
  assert(!a.kStride && "packed products read x contiguous in k");
  SmallVector<Value> aOff;
  for (Value row : f.rows)
    aOff.push_back(a.lineStart(e, row));
  auto vt = VectorType::get({width}, e.compute());
  Value zero = arith::ConstantOp::create(e.builder(), e.location(),
                                         cast<TypedAttr>(e.builder().getZeroAttr(vt)));
  SmallVector<Value> init(aOff.size(), zero);
  // The register tile: MR vector<NR> accumulators; per k one vector of
  // packed W, MR broadcasts of x and MR fmas.
  return e.forLoop(e.index(0), d, e.index(1), init, [&](KernelEmitter &ke, Value k, ValueRange it) {
    OpBuilder &ob = ke.builder();
    Value wv = vector::LoadOp::create(ob, ke.location(), vt, packed,
                                      ValueRange{ke.add(packedOff, ke.mul(k, ke.index(width)))});
    SmallVector<Value> next;
    for (size_t i = 0; i < aOff.size(); ++i) {
      Value xs = ke.loadReal(a.buffer, a.alongK(ke, aOff[i], k));
      Value xb = vector::BroadcastOp::create(ob, ke.location(), vt, xs);
      next.push_back(math::FmaOp::create(ob, ke.location(), xb, wv, it[i]));
    }
    return next;
  });
}

Fragment CpuVector::multiplyPackedInto(KernelEmitter &e, const MatrixOperand &a,
                                       const BlockTile &tile, Value packed, Value packedOff,
                                       Value d, Value out, Value outOff,
                                       int64_t outStride) const {
  Fragment f = layout(e, tile);
  SmallVector<Value> rows = packedRows(e, a, f, tile.cols, packed, packedOff, d);
  for (size_t i = 0; i < rows.size(); ++i)
    vector::StoreOp::create(
        e.builder(), e.location(), rows[i], out,
        ValueRange{e.add(outOff, e.index(static_cast<int64_t>(i) * outStride))});
  return f;
}

Value CpuVector::loadGroup(KernelEmitter &e, Value mem, Value off, int64_t groupLanes) const {
  return groupLanes == 1 ? e.loadReal(mem, off) : loadVecReal(e, mem, off, groupLanes);
}

void CpuVector::storeGroup(KernelEmitter &e, Value value, Value mem, Value off) const {
  if (isa<VectorType>(value.getType()))
    vector::StoreOp::create(e.builder(), e.location(), value, mem, ValueRange{off});
  else
    e.store(value, mem, off);
}

Value CpuVector::zeroGroup(KernelEmitter &e, int64_t groupLanes) const {
  if (groupLanes == 1)
    return e.real(0.0);
  auto type = VectorType::get({groupLanes}, e.compute());
  return arith::ConstantOp::create(e.builder(), e.location(),
                                   cast<TypedAttr>(e.builder().getZeroAttr(type)));
}

void CpuVector::rankOneUpdate(KernelEmitter &e, Value acc, ArrayRef<Value> accOff,
                              ArrayRef<Value> scale, Value src, Value srcOff, Value d,
                              Value dMain) const {
  OpBuilder &ob = e.builder();
  auto vt = VectorType::get({lanes}, e.compute());
  SmallVector<Value> splats;
  for (Value s : scale)
    splats.push_back(vector::BroadcastOp::create(ob, e.location(), vt, s));
  e.forLoop(e.index(0), dMain, e.index(lanes), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    Value sv = loadVecReal(ke, src, ke.add(srcOff, k), lanes);
    for (size_t i = 0; i < accOff.size(); ++i) {
      Value at = ke.add(accOff[i], k);
      Value old = vector::LoadOp::create(ke.builder(), ke.location(), vt, acc, ValueRange{at});
      Value upd = math::FmaOp::create(ke.builder(), ke.location(), splats[i], sv, old);
      vector::StoreOp::create(ke.builder(), ke.location(), upd, acc, ValueRange{at});
    }
    return SmallVector<Value>{};
  });
  e.forLoop(dMain, d, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    Value sv = ke.loadReal(src, ke.add(srcOff, k));
    for (size_t i = 0; i < accOff.size(); ++i) {
      Value at = ke.add(accOff[i], k);
      ke.store(ke.fma(scale[i], sv, ke.load(acc, at)), acc, at);
    }
    return SmallVector<Value>{};
  });
}

void lossjit::emitCopyRow(KernelEmitter &e, Value src, Value srcOff, Value dst, Value dstOff,
                          Value d) {
  Type out = elementOf(dst);
  e.forLoop(e.index(0), d, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    Value v = ke.load(src, ke.add(srcOff, k));
    if (out != v.getType())
      v = arith::TruncFOp::create(ke.builder(), ke.location(), out, v);
    ke.store(v, dst, ke.add(dstOff, k));
    return SmallVector<Value>{};
  });
}

void lossjit::emitZeroRow(KernelEmitter &e, Value dst, Value dstOff, Value d) {
  e.forLoop(e.index(0), d, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    ke.store(ke.real(0.0), dst, ke.add(dstOff, k));
    return SmallVector<Value>{};
  });
}
