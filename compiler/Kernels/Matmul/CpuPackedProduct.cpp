//===- CpuPackedProduct.cpp - packed dX = dZ·W and dW = dZᵀ·X on the host --===//
//
// The GEMM loop nest of the host backward (Goto/BLIS): per block of nc
// columns and kc steps of k, B is packed once into NR-column k-major panels
// (kept in L2), then each MR-row panel of A is packed (kept in L1) and
// swept over every B panel by a register tile of MR vector<NR>
// accumulators. C is read and written once per k block, so a k block is a
// run of each element's fma chain, resumed exactly (C is f32): the blocking
// changes where the chain pauses, never its order.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/Matmul/CpuVector.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace lossjit;

namespace {
Type elementOf(Value memref) { return cast<MemRefType>(memref.getType()).getElementType(); }

/// A static stack buffer of `count` compute elements, 64-byte aligned,
/// seen as the flat memref<?xT> every kernel argument is.
Value alignedStack(KernelEmitter &e, int64_t count) {
  OpBuilder &b = e.builder();
  auto fixed = MemRefType::get({count}, e.compute());
  Value buffer = memref::AllocaOp::create(b, e.location(), fixed, b.getI64IntegerAttr(64));
  return memref::CastOp::create(b, e.location(),
                                MemRefType::get({ShapedType::kDynamic}, e.compute()), buffer);
}

VectorType computeVector(KernelEmitter &e, int64_t lanes) {
  return VectorType::get({lanes}, e.compute());
}

Value zeroVector(KernelEmitter &e, int64_t lanes) {
  auto type = computeVector(e, lanes);
  return arith::ConstantOp::create(e.builder(), e.location(),
                                   cast<TypedAttr>(e.builder().getZeroAttr(type)));
}

/// vector<lanes> of `mem` at `off`, widened to the compute type.
Value loadWide(KernelEmitter &e, Value mem, Value off, int64_t lanes) {
  OpBuilder &b = e.builder();
  Type elem = elementOf(mem);
  Value raw =
      vector::LoadOp::create(b, e.location(), VectorType::get({lanes}, elem), mem, ValueRange{off});
  return elem == e.compute() ? raw
                             : arith::ExtFOp::create(b, e.location(), computeVector(e, lanes), raw);
}

void storeVector(KernelEmitter &e, Value v, Value mem, Value off) {
  vector::StoreOp::create(e.builder(), e.location(), v, mem, ValueRange{off});
}

/// The elementwise interleave of equally long vectors v_0 … v_{n−1} (n a
/// power of 2): out[t·n + i] = v_i[t]. Zipping v_i with v_{i+n/2} halves
/// the count and keeps the order, so log2(n) rounds of two-input shuffles.
Value interleave(KernelEmitter &e, SmallVector<Value> vs) {
  while (vs.size() > 1) {
    const size_t half = vs.size() / 2;
    const int64_t len = cast<VectorType>(vs[0].getType()).getNumElements();
    SmallVector<int64_t> zip;
    for (int64_t t = 0; t < len; ++t)
      zip.append({t, len + t});
    SmallVector<Value> next;
    for (size_t i = 0; i < half; ++i)
      next.push_back(
          vector::ShuffleOp::create(e.builder(), e.location(), vs[i], vs[i + half], zip));
    vs = std::move(next);
  }
  return vs.front();
}

/// ⌈x / m⌉·m.
Value roundUp(KernelEmitter &e, Value x, int64_t m) {
  return e.mul(e.ceilDiv(x, e.index(m)), e.index(m));
}
} // namespace

CpuVector::PackBuffers CpuVector::packBuffers(KernelEmitter &e, const PackedShape &shape) const {
  const int64_t nr = shape.groups * lanes;
  assert(shape.maxCols % nr == 0 && "column blocks are whole panels");
  assert(shape.blockRows % shape.rows == 0 && "row blocks are whole panels");
  assert(shape.blockFloats >= shape.maxCols * shape.minK && "room for the smallest k block");
  return {alignedStack(e, shape.blockRows * shape.maxK),
          alignedStack(e, std::max(shape.blockFloats, nr * shape.maxK)),
          alignedStack(e, shape.rows * nr)};
}

void CpuVector::packPanels(KernelEmitter &e, const MatrixOperand &op, Value first, Value count,
                           Value limit, int64_t width, Value k0, Value kLen, Value kc,
                           Value dest) const {
  Value last = e.sub(limit, e.index(1));
  e.forLoop(e.index(0), count, e.index(width), {}, [&](KernelEmitter &pe, Value p0, ValueRange) {
    Value line = pe.add(first, p0);
    Value base = pe.mul(p0, kc);
    if (!op.lineStride) {
      // Lines contiguous (dX's W, dW's X and dZᵀ): one vector per k step.
      Value whole = pe.cmpI(arith::CmpIPredicate::ule, pe.add(line, pe.index(width)), limit);
      pe.ifThenElse(
          whole,
          [&](KernelEmitter &we) {
            we.forLoop(
                we.index(0), kLen, we.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
                  Value v = loadWide(ke, op.buffer, op.offset(ke, line, ke.add(k0, k)), width);
                  storeVector(ke, v, dest, ke.add(base, ke.mul(k, ke.index(width))));
                  return SmallVector<Value>{};
                });
          },
          [&](KernelEmitter &re) {
            // The last panel: lines past the limit are zeros (reads clamped
            // in bounds).
            re.forLoop(
                re.index(0), kLen, re.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
                  SmallVector<Value> lanesOf;
                  for (int64_t j = 0; j < width; ++j) {
                    Value l = ke.add(line, ke.index(j));
                    Value x =
                        ke.loadReal(op.buffer, op.offset(ke, ke.minUI(l, last), ke.add(k0, k)));
                    lanesOf.push_back(
                        ke.select(ke.cmpI(arith::CmpIPredicate::ult, l, limit), x, ke.real(0.0)));
                  }
                  Value v = vector::FromElementsOp::create(ke.builder(), ke.location(),
                                                           computeVector(ke, width), lanesOf);
                  storeVector(ke, v, dest, ke.add(base, ke.mul(k, ke.index(width))));
                  return SmallVector<Value>{};
                });
          });
      return SmallVector<Value>{};
    }
    assert(!op.kStride && "a packed operand is contiguous along its lines or along k");
    // Contiguous along k (dX's dZ): transposed through vector shuffles.
    SmallVector<Value> valid, start;
    for (int64_t j = 0; j < width; ++j) {
      Value l = pe.add(line, pe.index(j));
      valid.push_back(pe.cmpI(arith::CmpIPredicate::ult, l, limit));
      start.push_back(op.lineStart(pe, pe.minUI(l, last)));
    }
    packLinesKMajor(
        pe, op.buffer, width,
        [&](KernelEmitter &ke, int64_t j, Value k) {
          return op.alongK(ke, start[j], ke.add(k0, k));
        },
        valid, kLen, dest, base);
    return SmallVector<Value>{};
  });
}

void CpuVector::packLinesKMajor(KernelEmitter &e, Value mem, int64_t width,
                                const std::function<Value(KernelEmitter &, int64_t, Value)> &at,
                                ArrayRef<Value> valid, Value kLen, Value dest, Value base) const {
  const int64_t kChunk = 16;
  int64_t group = 1;
  while (group < 16 && width % (group * 2) == 0)
    group *= 2;
  Value kMain = e.mul(e.divUI(kLen, e.index(kChunk)), e.index(kChunk));
  e.forLoop(e.index(0), kMain, e.index(kChunk), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    Value row = ke.add(base, ke.mul(k, ke.index(width)));
    for (int64_t j0 = 0; j0 < width; j0 += group) {
      SmallVector<Value> lines;
      for (int64_t j = j0; j < j0 + group; ++j) {
        Value v = loadWide(ke, mem, at(ke, j, k), kChunk);
        lines.push_back(valid.empty() ? v : ke.select(valid[j], v, zeroVector(ke, kChunk)));
      }
      // Element t·group + i of the interleave is line j0 + i at k + t.
      Value v = interleave(ke, lines);
      if (group == width) {
        storeVector(ke, v, dest, row);
        continue;
      }
      for (int64_t t = 0; t < kChunk; ++t) {
        Value piece = vector::ExtractStridedSliceOp::create(
            ke.builder(), ke.location(), v, ArrayRef<int64_t>{t * group}, ArrayRef<int64_t>{group},
            ArrayRef<int64_t>{1});
        storeVector(ke, piece, dest, ke.add(row, ke.index(t * width + j0)));
      }
    }
    return SmallVector<Value>{};
  });
  e.forLoop(kMain, kLen, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    for (int64_t j = 0; j < width; ++j) {
      Value x = ke.loadReal(mem, at(ke, j, k));
      if (!valid.empty())
        x = ke.select(valid[j], x, ke.real(0.0));
      ke.store(x, dest, ke.add(base, ke.add(ke.mul(k, ke.index(width)), ke.index(j))));
    }
    return SmallVector<Value>{};
  });
}

void CpuVector::microTile(KernelEmitter &e, const PackedShape &shape, const PackBuffers &buffers,
                          Value aOff, Value bOff, Value kLen, Value c, ArrayRef<Value> cOff,
                          Value fresh) const {
  const int64_t mr = shape.rows, groups = shape.groups, nr = groups * lanes;
  auto vt = computeVector(e, lanes);
  Value zero = zeroVector(e, lanes);
  SmallVector<Value> init;
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      Value old = vector::LoadOp::create(e.builder(), e.location(), vt, c,
                                         ValueRange{e.add(cOff[i], e.index(g * lanes))});
      init.push_back(e.select(fresh, zero, old));
    }
  // Per k: `groups` vectors of packed B, MR broadcasts of packed A, MR·groups
  // fmas — each accumulator element one fma per term, in ascending k.
  SmallVector<Value> sums = e.forLoop(
      e.index(0), kLen, e.index(1), init, [&](KernelEmitter &ke, Value k, ValueRange acc) {
        OpBuilder &ob = ke.builder();
        Value bk = ke.add(bOff, ke.mul(k, ke.index(nr)));
        SmallVector<Value> bv;
        for (int64_t g = 0; g < groups; ++g)
          bv.push_back(vector::LoadOp::create(ob, ke.location(), vt, buffers.b,
                                              ValueRange{ke.add(bk, ke.index(g * lanes))}));
        Value ak = ke.add(aOff, ke.mul(k, ke.index(mr)));
        SmallVector<Value> next;
        for (int64_t i = 0; i < mr; ++i) {
          Value a = ke.load(buffers.a, ke.add(ak, ke.index(i)));
          Value splat = vector::BroadcastOp::create(ob, ke.location(), vt, a);
          for (int64_t g = 0; g < groups; ++g)
            next.push_back(
                math::FmaOp::create(ob, ke.location(), splat, bv[g], acc[i * groups + g]));
        }
        return next;
      });
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t g = 0; g < groups; ++g)
      storeVector(e, sums[i * groups + g], c, e.add(cOff[i], e.index(g * lanes)));
}

void CpuVector::accumulatePacked(KernelEmitter &e, const PackedShape &shape,
                                 const PackBuffers &buffers, const MatrixOperand &a,
                                 const MatrixOperand &b, Value mBegin, Value mEnd, Value nEnd,
                                 Value kBegin, Value kEnd, const Accumulator &c,
                                 Value fresh) const {
  const int64_t mr = shape.rows, nr = shape.groups * lanes, mc = shape.blockRows;
  // nc: all of N up to maxCols (fewer packs of A; at least one panel, so
  // the loop steps); kc: what fills the B block within [minK, maxK], so
  // wide rows take shorter k blocks.
  Value wide = roundUp(e, nEnd, nr);
  Value nc = e.select(e.cmpI(arith::CmpIPredicate::ult, wide, e.index(nr)), e.index(nr),
                      e.minUI(wide, e.index(shape.maxCols)));
  Value kc = e.minUI(e.divUI(e.index(shape.blockFloats), nc), e.index(shape.maxK));
  kc =
      e.select(e.cmpI(arith::CmpIPredicate::ult, kc, e.index(shape.minK)), e.index(shape.minK), kc);
  // Blocks of equal length (at most kc): no short last block.
  Value kTotal = e.sub(kEnd, kBegin);
  Value blocks = e.ceilDiv(kTotal, kc);
  blocks = e.select(e.cmpI(arith::CmpIPredicate::ult, blocks, e.index(1)), e.index(1), blocks);
  kc = e.ceilDiv(kTotal, blocks);
  kc = e.select(e.cmpI(arith::CmpIPredicate::ult, kc, e.index(1)), e.index(1), kc);
  // No terms at all: the sums are their start, 0 where fresh.
  e.ifThen(e.andI(fresh, e.cmpI(arith::CmpIPredicate::eq, kBegin, kEnd)), [&](KernelEmitter &ze) {
    ze.forLoop(mBegin, mEnd, ze.index(1), {}, [&](KernelEmitter &re, Value m, ValueRange) {
      Value row = c.rowStart(re, m);
      re.forLoop(re.index(0), nEnd, re.index(1), {}, [&](KernelEmitter &le, Value n, ValueRange) {
        le.store(le.real(0.0), c.buffer, le.add(row, n));
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
  });
  Value mLast = e.sub(mEnd, e.index(1));
  e.forLoop(e.index(0), nEnd, nc, {}, [&](KernelEmitter &je, Value jc, ValueRange) {
    Value nPanels = roundUp(je, je.minUI(nc, je.sub(nEnd, jc)), nr);
    je.forLoop(kBegin, kEnd, kc, {}, [&](KernelEmitter &pe, Value pc, ValueRange) {
      Value kLen = pe.minUI(kc, pe.sub(kEnd, pc));
      Value first = pe.andI(fresh, pe.cmpI(arith::CmpIPredicate::eq, pc, kBegin));
      packPanels(pe, b, jc, nPanels, nEnd, nr, pc, kLen, kc, buffers.b);
      // A in blocks of mc lines (a strided operand is read in runs of mc
      // elements), each MR-row panel of the block then sweeping B.
      pe.forLoop(mBegin, mEnd, pe.index(mc), {}, [&](KernelEmitter &be, Value mb, ValueRange) {
        Value lines = roundUp(be, be.minUI(be.index(mc), be.sub(mEnd, mb)), mr);
        packPanels(be, a, mb, lines, mEnd, mr, pc, kLen, kc, buffers.a);
        be.forLoop(
            be.index(0), lines, be.index(mr), {}, [&](KernelEmitter &ie, Value ir, ValueRange) {
              Value m0 = ie.add(mb, ir), aOff = ie.mul(ir, kc);
              Value rowsWhole = ie.cmpI(arith::CmpIPredicate::ule, ie.add(m0, ie.index(mr)), mEnd);
              SmallVector<Value> rowStart;
              for (int64_t i = 0; i < mr; ++i)
                rowStart.push_back(c.rowStart(ie, ie.minUI(ie.add(m0, ie.index(i)), mLast)));
              // The MR-row panel of A stays in L1 while it sweeps every B panel.
              ie.forLoop(
                  ie.index(0), nPanels, ie.index(nr), {},
                  [&](KernelEmitter &te, Value jr, ValueRange) {
                    Value n0 = te.add(jc, jr), bOff = te.mul(jr, kc);
                    Value whole = te.andI(rowsWhole, te.cmpI(arith::CmpIPredicate::ule,
                                                             te.add(n0, te.index(nr)), nEnd));
                    te.ifThenElse(
                        whole,
                        [&](KernelEmitter &fe) {
                          SmallVector<Value> cOff;
                          for (Value r : rowStart)
                            cOff.push_back(fe.add(r, n0));
                          microTile(fe, shape, buffers, aOff, bOff, kLen, c.buffer, cOff, first);
                        },
                        [&](KernelEmitter &ee) {
                          edgeTile(ee, shape, buffers, aOff, bOff, kLen, c, rowStart, m0, mEnd, n0,
                                   nEnd, first);
                        });
                    return SmallVector<Value>{};
                  });
              return SmallVector<Value>{};
            });
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
}

void CpuVector::edgeTile(KernelEmitter &e, const PackedShape &shape, const PackBuffers &buffers,
                         Value aOff, Value bOff, Value kLen, const Accumulator &c,
                         ArrayRef<Value> rowStart, Value m0, Value mEnd, Value n0, Value nEnd,
                         Value fresh) const {
  const int64_t mr = shape.rows, nr = shape.groups * lanes;
  // The tile's elements inside C, copied to a zero-padded MR×NR tile, run
  // through the same micro-kernel, and copied back: the padding's sums are
  // dropped, the others are the same fma chains.
  Value cols = e.minUI(e.index(nr), e.sub(nEnd, n0));
  SmallVector<Value> rowValid, cOff;
  for (int64_t i = 0; i < mr; ++i) {
    rowValid.push_back(e.cmpI(arith::CmpIPredicate::ult, e.add(m0, e.index(i)), mEnd));
    cOff.push_back(e.index(i * nr));
    Value at = cOff.back();
    e.forLoop(e.index(0), e.index(nr), e.index(1), {}, [&](KernelEmitter &le, Value j, ValueRange) {
      Value inside = le.andI(rowValid[i], le.cmpI(arith::CmpIPredicate::ult, j, cols));
      Value x = le.ifElse(
          inside,
          [&](KernelEmitter &re) { return re.load(c.buffer, re.add(rowStart[i], re.add(n0, j))); },
          [](KernelEmitter &ze) { return ze.real(0.0); });
      le.store(x, buffers.edge, le.add(at, j));
      return SmallVector<Value>{};
    });
  }
  microTile(e, shape, buffers, aOff, bOff, kLen, buffers.edge, cOff, fresh);
  for (int64_t i = 0; i < mr; ++i)
    e.ifThen(rowValid[i], [&](KernelEmitter &se) {
      se.forLoop(se.index(0), cols, se.index(1), {}, [&](KernelEmitter &le, Value j, ValueRange) {
        le.store(le.load(buffers.edge, le.add(cOff[i], j)), c.buffer,
                 le.add(rowStart[i], le.add(n0, j)));
        return SmallVector<Value>{};
      });
    });
}
