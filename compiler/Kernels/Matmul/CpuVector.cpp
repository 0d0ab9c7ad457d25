//===- CpuVector.cpp -----------------------------------------------------===//

#include "compiler/Kernels/Matmul/CpuVector.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace lossjit;

namespace {
Type elementOf(Value memref) { return cast<MemRefType>(memref.getType()).getElementType(); }

/// vector<L> load of memref[off] widened to f32.
Value loadVecF32(KernelEmitter &e, Value mem, Value off, int64_t lanes) {
  OpBuilder &b = e.builder();
  Type elem = elementOf(mem);
  Value raw =
      vector::LoadOp::create(b, e.location(), VectorType::get({lanes}, elem), mem, ValueRange{off});
  if (elem.isF32())
    return raw;
  return arith::ExtFOp::create(b, e.location(), VectorType::get({lanes}, b.getF32Type()), raw);
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
  assert(init.empty() && !a.kStride && !b.kStride && "host dots start at 0, contiguous in k");
  Fragment f = layout(e, tile);
  SmallVector<Value> aOff, bOff;
  for (Value row : f.rows)
    aOff.push_back(a.lineStart(e, row));
  for (Value col : f.cols)
    bOff.push_back(b.lineStart(e, col));
  Value kMain = e.add(kBegin, mainExtent(e, e.sub(kEnd, kBegin)));
  f.values = dot(e, a.buffer, aOff, b.buffer, bOff, kBegin, kEnd, kMain);
  return f;
}

SmallVector<Value> CpuVector::dot(KernelEmitter &e, Value a, ArrayRef<Value> aOff, Value b,
                                  ArrayRef<Value> bOff, Value kBegin, Value d, Value dMain) const {
  OpBuilder &ob = e.builder();
  Location loc = e.location();
  auto f32v = VectorType::get({lanes}, ob.getF32Type());
  Value zero = arith::ConstantOp::create(ob, loc, cast<TypedAttr>(ob.getZeroAttr(f32v)));
  const size_t rows = aOff.size(), cols = bOff.size();
  // The register tile: one vector accumulator per (row, col), each summing
  // its own lanes over k exactly as a lone dot product would.
  SmallVector<Value> init(rows * cols, zero);
  SmallVector<Value> acc = e.forLoop(
      kBegin, dMain, e.index(lanes), init, [&](KernelEmitter &ke, Value k, ValueRange it) {
        SmallVector<Value> bv;
        for (Value off : bOff)
          bv.push_back(loadVecF32(ke, b, ke.add(off, k), lanes));
        SmallVector<Value> next(rows * cols);
        for (size_t i = 0; i < rows; ++i) {
          Value av = loadVecF32(ke, a, ke.add(aOff[i], k), lanes);
          for (size_t j = 0; j < cols; ++j)
            next[i * cols + j] =
                math::FmaOp::create(ke.builder(), ke.location(), av, bv[j], it[i * cols + j]);
        }
        return next;
      });
  SmallVector<Value> sums;
  for (Value v : acc)
    sums.push_back(vector::ReductionOp::create(ob, loc, vector::CombiningKind::ADD, v));
  return e.forLoop(dMain, d, e.index(1), sums, [&](KernelEmitter &ke, Value k, ValueRange it) {
    SmallVector<Value> bs;
    for (Value off : bOff)
      bs.push_back(ke.loadF32(b, ke.add(off, k)));
    SmallVector<Value> next(rows * cols);
    for (size_t i = 0; i < rows; ++i) {
      Value as = ke.loadF32(a, ke.add(aOff[i], k));
      for (size_t j = 0; j < cols; ++j)
        next[i * cols + j] = ke.fma(as, bs[j], it[i * cols + j]);
    }
    return next;
  });
}

SmallVector<Value>
CpuVector::outerTile(KernelEmitter &e, int64_t rows, int64_t groups, int64_t groupLanes,
                     Value kBegin, Value kEnd, ValueRange init,
                     const std::function<Value(KernelEmitter &, int64_t, Value)> &scalar,
                     const std::function<Value(KernelEmitter &, int64_t, Value)> &vec) const {
  auto groupType = VectorType::get({groupLanes}, e.builder().getF32Type());
  return e.forLoop(kBegin, kEnd, e.index(1), init, [&](KernelEmitter &ke, Value k, ValueRange it) {
    SmallVector<Value> b;
    for (int64_t g = 0; g < groups; ++g)
      b.push_back(vec(ke, g, k));
    SmallVector<Value> next(rows * groups);
    for (int64_t i = 0; i < rows; ++i) {
      Value a = scalar(ke, i, k);
      if (groupLanes > 1)
        a = vector::BroadcastOp::create(ke.builder(), ke.location(), groupType, a);
      for (int64_t g = 0; g < groups; ++g)
        next[i * groups + g] =
            math::FmaOp::create(ke.builder(), ke.location(), a, b[g], it[i * groups + g]);
    }
    return next;
  });
}

void CpuVector::forColumnGroups(
    KernelEmitter &e, Value d, int64_t groups,
    const std::function<void(KernelEmitter &, Value, int64_t, int64_t)> &body) const {
  auto blocks = [&](Value lo, Value hi, int64_t step, int64_t n, int64_t width) {
    e.forLoop(lo, hi, e.index(step), {}, [&](KernelEmitter &be, Value c0, ValueRange) {
      body(be, c0, n, width);
      return SmallVector<Value>{};
    });
  };
  // ⌊d / step⌋·step: where blocks of `step` columns end.
  auto end = [&](Value lo, int64_t step) {
    return e.add(lo, e.mul(e.divUI(e.sub(d, lo), e.index(step)), e.index(step)));
  };
  Value zero = e.index(0);
  Value wideEnd = groups > 1 ? end(zero, groups * lanes) : zero;
  if (groups > 1)
    blocks(zero, wideEnd, groups * lanes, groups, lanes);
  Value vectorEnd = end(wideEnd, lanes);
  blocks(wideEnd, vectorEnd, lanes, 1, lanes);
  blocks(vectorEnd, d, 1, 1, 1);
}

Value CpuVector::loadGroup(KernelEmitter &e, Value mem, Value off, int64_t groupLanes) const {
  return groupLanes == 1 ? e.loadF32(mem, off) : loadVecF32(e, mem, off, groupLanes);
}

void CpuVector::storeGroup(KernelEmitter &e, Value value, Value mem, Value off) const {
  if (isa<VectorType>(value.getType()))
    vector::StoreOp::create(e.builder(), e.location(), value, mem, ValueRange{off});
  else
    e.store(value, mem, off);
}

Value CpuVector::zeroGroup(KernelEmitter &e, int64_t groupLanes) const {
  if (groupLanes == 1)
    return e.f32(0.0);
  auto type = VectorType::get({groupLanes}, e.builder().getF32Type());
  return arith::ConstantOp::create(e.builder(), e.location(),
                                   cast<TypedAttr>(e.builder().getZeroAttr(type)));
}

void CpuVector::rankOneUpdate(KernelEmitter &e, Value acc, ArrayRef<Value> accOff,
                              ArrayRef<Value> scale, Value src, Value srcOff, Value d,
                              Value dMain) const {
  OpBuilder &ob = e.builder();
  auto f32v = VectorType::get({lanes}, ob.getF32Type());
  SmallVector<Value> splats;
  for (Value s : scale)
    splats.push_back(vector::BroadcastOp::create(ob, e.location(), f32v, s));
  e.forLoop(e.index(0), dMain, e.index(lanes), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    Value sv = loadVecF32(ke, src, ke.add(srcOff, k), lanes);
    for (size_t i = 0; i < accOff.size(); ++i) {
      Value at = ke.add(accOff[i], k);
      Value old = vector::LoadOp::create(ke.builder(), ke.location(), f32v, acc, ValueRange{at});
      Value upd = math::FmaOp::create(ke.builder(), ke.location(), splats[i], sv, old);
      vector::StoreOp::create(ke.builder(), ke.location(), upd, acc, ValueRange{at});
    }
    return SmallVector<Value>{};
  });
  e.forLoop(dMain, d, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    Value sv = ke.loadF32(src, ke.add(srcOff, k));
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
    if (!out.isF32())
      v = arith::TruncFOp::create(ke.builder(), ke.location(), out, v);
    ke.store(v, dst, ke.add(dstOff, k));
    return SmallVector<Value>{};
  });
}

void lossjit::emitZeroRow(KernelEmitter &e, Value dst, Value dstOff, Value d) {
  e.forLoop(e.index(0), d, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    ke.store(ke.f32(0.0), dst, ke.add(dstOff, k));
    return SmallVector<Value>{};
  });
}
