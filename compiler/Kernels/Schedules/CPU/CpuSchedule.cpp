//===- CpuSchedule.cpp - pieces the host schedules share ------------------===//

#include "compiler/Kernels/Schedules/CPU/CpuSchedule.h"
#include "compiler/Kernels/RowStats/Adjoints.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace lossjit;

Value CpuSchedule::always(KernelEmitter &e) const { return e.truth(); }

Value lossjit::stackReal(KernelEmitter &e, Value count) {
  return memref::AllocaOp::create(e.builder(), e.location(),
                                  KernelSink::flat(e.compute()), ValueRange{count});
}

void CpuSchedule::dzInputs(KernelSignature &sig) const {
  sig.arg("x", flat(storage())).arg("w", flat(storage()));
  sig.argIf(spec.hasBias, "bias", flat(storage()));
  declareAdjointInputs(sig, spec, compute());
}

namespace {
void addBias(KernelEmitter &e, const KernelArgs &a, Fragment &z, const char *name = "bias") {
  if (Value bias = a[name])
    for (size_t j = 0; j < z.cols.size(); ++j) {
      Value bv = e.loadReal(bias, z.cols[j]);
      for (size_t i = 0; i < z.rows.size(); ++i)
        z.at(i, j) = e.addF(z.at(i, j), bv);
    }
}
} // namespace

Fragment CpuSchedule::logits(KernelEmitter &e, const KernelArgs &a, const BlockTile &tile) const {
  Value d = a["D"];
  Fragment z = matmul.multiply(e, {a["x"], d}, {a["w"], d}, tile, e.index(0), d);
  addBias(e, a, z);
  return z;
}

CpuSchedule::LogitPack CpuSchedule::logitPack(KernelEmitter &e, Value d) const {
  Value floats = e.mul(e.index(tile.vocabTile), d);
  Value enabled = e.cmpI(arith::CmpIPredicate::ule, floats, e.index(elements(kMaxPackFloats)));
  LogitPack pack{stackReal(e, e.select(enabled, floats, e.index(1))), enabled,
                 stackReal(e, e.index(tile.blockRows * tile.blockCols * tile.vectorWidth)),
                 Value(), e.index(tile.blockRows * tile.panelBlocks)};
  if (spec.storesCompute())
    return pack;
  // As many whole register blocks as fit (a single row when not even one
  // block does).
  const int64_t br = tile.blockRows;
  // D = 0 (no features) fits any number of rows: divide by at least one.
  Value fit = e.divUI(e.index(elements(kWideRowFloats)), e.maxUI(d, e.index(1)));
  Value blocks = e.mul(e.divUI(fit, e.index(br)), e.index(br));
  Value rows = e.select(e.cmpI(arith::CmpIPredicate::ult, fit, e.index(br)), fit, blocks);
  rows = e.select(e.cmpI(arith::CmpIPredicate::ult, rows, e.index(1)), e.index(1), rows);
  pack.panelRows = e.minUI(rows, pack.panelRows);
  pack.rows = stackReal(e, e.mul(pack.panelRows, d));
  return pack;
}

CpuSchedule::TeacherTile CpuSchedule::teacherTile(KernelEmitter &e, const KernelArgs &a) const {
  Value t = a["T"];
  Value floats = e.mul(e.index(tile.vocabTile), t);
  Value enabled = e.cmpI(arith::CmpIPredicate::ule, floats, e.index(elements(kMaxTeacherPackFloats)));
  LogitPack pack{stackReal(e, e.select(enabled, floats, e.index(1))), enabled,
                 stackReal(e, e.index(tile.blockRows * tile.blockCols * tile.vectorWidth)),
                 Value(), Value()};
  return {pack, stackReal(e, e.index(tile.blockRows * tile.vocabTile))};
}

void CpuSchedule::packTeacher(KernelEmitter &e, const KernelArgs &a, const TeacherTile &t,
                              Value vt, Value vtEnd) const {
  packLogits(e, a, t.pack, vt, vtEnd, kTeacher);
}

void CpuSchedule::formTeacherTile(KernelEmitter &e, const KernelArgs &a, const TeacherTile &t,
                                  Value pb, Value rb, Value rowLimit, Value vt,
                                  Value vtEnd) const {
  forLogitTiles(
      e, a, t.pack, pb, rb, rowLimit, vt, vtEnd, {},
      [&](KernelEmitter &ve, Fragment &u, ValueRange) {
        for (size_t j = 0; j < u.cols.size(); ++j)
          for (size_t i = 0; i < u.rows.size(); ++i) {
            Value raw = u.at(i, j);
            Value scaled =
                spec.teacherScale == 1.0 ? raw : ve.mulF(raw, ve.real(spec.teacherScale));
            ve.store(scaled, t.values,
                     ve.add(ve.index(static_cast<int64_t>(i) * tile.vocabTile),
                            ve.sub(u.cols[j], vt)));
          }
        return SmallVector<Value>{};
      },
      kTeacher);
}

Value CpuSchedule::teacherLogitAt(KernelEmitter &e, const TeacherTile &t, int64_t i, Value col,
                                  Value vt) const {
  return e.load(t.values, e.add(e.index(i * tile.vocabTile), e.sub(col, vt)));
}

void CpuSchedule::widenRows(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack,
                            Value pb, Value pe) const {
  if (!pack.rows)
    return;
  Value d = a["D"];
  // The panel's rows are contiguous in x and in the copy.
  Value count = e.mul(e.sub(pe, pb), d), from = e.mul(pb, d);
  const int64_t lanes = 16;
  Value main = e.mul(e.divUI(count, e.index(lanes)), e.index(lanes));
  e.forLoop(e.index(0), main, e.index(lanes), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    matmul.storeGroup(ke, matmul.loadGroup(ke, a["x"], ke.add(from, k), lanes), pack.rows, k);
    return SmallVector<Value>{};
  });
  e.forLoop(main, count, e.index(1), {}, [&](KernelEmitter &ke, Value k, ValueRange) {
    ke.store(ke.loadReal(a["x"], ke.add(from, k)), pack.rows, k);
    return SmallVector<Value>{};
  });
}

void CpuSchedule::packLogits(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack,
                             Value vt, Value vtEnd, const LogitStream &stream) const {
  Value d = a[stream.dim];
  matmul.packColumns(e, {a[stream.w], d}, vt, vtEnd, d, tile.blockCols, pack.enabled,
                     pack.buffer);
}

MatrixOperand CpuSchedule::logitRows(const KernelArgs &a, const LogitPack &pack, Value pb,
                                     const LogitStream &stream) const {
  // In place, or the panel's widened copy (row r at (r − pb)·D).
  Value d = a[stream.dim];
  return pack.rows ? MatrixOperand{pack.rows, d, Value(), pb} : MatrixOperand{a[stream.x], d};
}

void CpuSchedule::formLogitTile(KernelEmitter &e, const KernelArgs &a, const LogitPack &pack,
                                Value pb, Value rb, Value rowLimit, Value vt, Value vtEnd,
                                Value values) const {
  Value d = a["D"];
  MatrixOperand xs = logitRows(a, pack, pb, kStudent);
  const int64_t stride = tile.vocabTile;
  matmul.forPackedColumns(
      e, vt, vtEnd, d, tile.blockCols, pack.enabled, {},
      [&](KernelEmitter &ve, Value c0, int64_t cols, Value packedOff, ValueRange) {
        BlockTile t{rb, tile.blockRows, rowLimit, c0, cols, Value()};
        Value at = ve.sub(c0, vt);
        if (packedOff) {
          matmul.multiplyPackedInto(ve, xs, t, pack.buffer, packedOff, d, values, at, stride);
          return SmallVector<Value>{};
        }
        Fragment z = matmul.multiply(ve, xs, {a["w"], d}, t, ve.index(0), d);
        for (size_t i = 0; i < z.rows.size(); ++i)
          for (size_t j = 0; j < z.cols.size(); ++j)
            ve.store(z.at(i, j), values,
                     ve.add(at, ve.index(static_cast<int64_t>(i) * stride +
                                         static_cast<int64_t>(j))));
        return SmallVector<Value>{};
      });
}

CpuSchedule::LogitGroups CpuSchedule::logitGroups(KernelEmitter &e, const KernelArgs &a) const {
  auto zeroed = [&](int64_t count) {
    Value buffer = stackReal(e, e.index(count));
    e.forLoop(e.index(0), e.index(count), e.index(1), {},
              [&](KernelEmitter &ze, Value at, ValueRange) {
                ze.store(ze.real(0.0), buffer, at);
                return SmallVector<Value>{};
              });
    return buffer;
  };
  const int64_t lanes = RowStats::kGroupLanes;
  LogitGroups groups;
  groups.values = zeroed(tile.blockRows * tile.vocabTile + lanes);
  if (a["bias"])
    groups.bias = zeroed(tile.vocabTile + lanes);
  return groups;
}

void CpuSchedule::formGroupBias(KernelEmitter &e, const KernelArgs &a, const LogitGroups &groups,
                                Value vt, Value vtEnd) const {
  if (!groups.bias)
    return;
  e.forLoop(e.index(0), e.sub(vtEnd, vt), e.index(1), {},
            [&](KernelEmitter &be, Value j, ValueRange) {
              be.store(be.loadReal(a["bias"], be.add(vt, j)), groups.bias, j);
              return SmallVector<Value>{};
            });
}

SmallVector<Value> CpuSchedule::forTileGroups(KernelEmitter &e, const LogitGroups &groups,
                                              Value vt, Value vtEnd, ValueRange iters,
                                              const TileGroupBody &body) const {
  constexpr int64_t lanes = RowStats::kGroupLanes;
  Value count = e.sub(vtEnd, vt);
  return e.forLoop(e.index(0), count, e.index(lanes), iters,
                   [&](KernelEmitter &ge, Value g, ValueRange it) {
                     OpBuilder &b = ge.builder();
                     auto realVector = VectorType::get({lanes}, ge.compute());
                     auto load = [&](Value buffer, Value at) -> Value {
                       return vector::LoadOp::create(b, ge.location(), realVector, buffer,
                                                     ValueRange{at});
                     };
                     Value left = ge.sub(count, g);
                     Value valid = vector::CreateMaskOp::create(
                         b, ge.location(), VectorType::get({lanes}, b.getI1Type()),
                         ValueRange{left});
                     Value full = ge.cmpI(arith::CmpIPredicate::uge, left, ge.index(lanes));
                     Value bias = groups.bias ? load(groups.bias, g) : Value();
                     KernelEmitter lane = ge.lanes(lanes);
                     auto raw = [&](int64_t i) {
                       Value z = load(groups.values, ge.add(g, ge.index(i * tile.vocabTile)));
                       return bias ? lane.addF(z, bias) : z;
                     };
                     return body(ge, g, valid, full, raw, it);
                   });
}

SmallVector<Value> CpuSchedule::pushLogitGroups(KernelEmitter &e, const RowStats &stats,
                                                const LogitGroups &groups, Value vt, Value vtEnd,
                                                ValueRange state) const {
  const int64_t width = stats.width();
  return forTileGroups(
      e, groups, vt, vtEnd, state,
      [&](KernelEmitter &ge, Value, Value valid, Value, const std::function<Value(int64_t)> &raw,
          ValueRange it) {
        KernelEmitter lane = ge.lanes(RowStats::kGroupLanes);
        SmallVector<Value> next(it.begin(), it.end());
        for (int64_t i = 0; i < tile.blockRows; ++i) {
          Value z = lane.select(valid, emitLogit(lane, spec, raw(i)), lane.negInf());
          SmallVector<Value> pushed = stats.pushGroup(ge, stats.row(next, i), z);
          std::copy(pushed.begin(), pushed.end(), next.begin() + i * width);
        }
        return next;
      });
}

void CpuSchedule::storeLogitGroups(
    KernelEmitter &e, const KernelArgs &a, const LogitGroups &groups, const Fragment &rows,
    Value vt, Value vtEnd, Value out,
    const std::function<Value(KernelEmitter &, Value)> &rowStart, bool grad) const {
  std::vector<RowAdjoint> adjoints;
  SmallVector<Value> starts;
  for (Value row : rows.rows) {
    if (grad)
      adjoints.push_back(loadRowAdjoint(e, spec, a, row, /*labels=*/true));
    starts.push_back(rowStart(e, row));
  }
  forTileGroups(e, groups, vt, vtEnd, {},
                [&](KernelEmitter &ge, Value g, Value valid, Value full,
                    const std::function<Value(int64_t)> &raw, ValueRange) {
                  for (size_t i = 0; i < rows.rows.size(); ++i) {
                    Value z = raw(static_cast<int64_t>(i));
                    if (grad) {
                      const RowAdjoint &row = adjoints[i];
                      z = groupLogitGrad(ge, z, ge.add(vt, g), row.lse, row.g,
                                         row.labels.front(), row.lseGrad);
                    }
                    storeRowGroup(ge, z, out, ge.add(starts[i], g), valid, full);
                  }
                  return SmallVector<Value>{};
                });
}

SmallVector<Value> CpuSchedule::forRowGroups(KernelEmitter &e, Value buffer, Value base,
                                             Value begin, Value end, ValueRange iters,
                                             const RowGroupBody &body) const {
  constexpr int64_t lanes = RowStats::kGroupLanes;
  return e.forLoop(begin, end, e.index(lanes), iters, [&](KernelEmitter &ge, Value c, ValueRange it) {
    OpBuilder &b = ge.builder();
    auto realVector = VectorType::get({lanes}, ge.compute());
    Value left = ge.sub(end, c), at = ge.add(base, c);
    Value valid = vector::CreateMaskOp::create(b, ge.location(),
                                               VectorType::get({lanes}, b.getI1Type()),
                                               ValueRange{left});
    Value full = ge.cmpI(arith::CmpIPredicate::uge, left, ge.index(lanes));
    Value values = ge.ifElse(
        full,
        [&](KernelEmitter &fe) -> Value {
          return vector::LoadOp::create(fe.builder(), fe.location(), realVector, buffer,
                                        ValueRange{at});
        },
        [&](KernelEmitter &me) -> Value {
          Value zero = me.lanes(lanes).real(0.0);
          return vector::MaskedLoadOp::create(me.builder(), me.location(), realVector, buffer,
                                              ValueRange{at}, valid, zero);
        });
    return body(ge, c, values, valid, full, it);
  });
}

void CpuSchedule::storeRowGroup(KernelEmitter &e, Value values, Value buffer, Value at,
                                Value valid, Value full) const {
  e.ifThenElse(
      full,
      [&](KernelEmitter &fe) {
        vector::StoreOp::create(fe.builder(), fe.location(), values, buffer, ValueRange{at});
      },
      [&](KernelEmitter &me) {
        vector::MaskedStoreOp::create(me.builder(), me.location(), buffer, ValueRange{at}, valid,
                                      values);
      });
}

Value CpuSchedule::groupLogitGrad(KernelEmitter &e, Value raw, Value c, Value lse, Value g,
                                  Value label, Value lseGrad) const {
  constexpr int64_t lanes = RowStats::kGroupLanes;
  OpBuilder &b = e.builder();
  KernelEmitter lane = e.lanes(lanes);
  auto splat = [&](Value scalar) -> Value {
    if (!scalar)
      return Value();
    return vector::BroadcastOp::create(b, e.location(), VectorType::get({lanes}, scalar.getType()),
                                       scalar);
  };
  // Lane l is column c + l: the label's lane is where label − c equals l.
  auto indexVector = VectorType::get({lanes}, b.getIndexType());
  SmallVector<Attribute> ids;
  for (int64_t l = 0; l < lanes; ++l)
    ids.push_back(b.getIndexAttr(l));
  Value laneIds =
      arith::ConstantOp::create(b, e.location(), DenseElementsAttr::get(indexVector, ids));
  Value isTarget = lane.cmpI(arith::CmpIPredicate::eq, laneIds, splat(e.sub(label, c)));
  return emitLogitGrad(lane, spec, raw, splat(lse), splat(g), isTarget, splat(lseGrad));
}

SmallVector<Value> CpuSchedule::forLogitTiles(
    KernelEmitter &e, const KernelArgs &a, const LogitPack &pack, Value pb, Value rb,
    Value rowLimit, Value vt, Value vtEnd, ValueRange iters,
    const std::function<SmallVector<Value>(KernelEmitter &, Fragment &, ValueRange)> &body,
    const LogitStream &stream) const {
  Value d = a[stream.dim];
  MatrixOperand xs = logitRows(a, pack, pb, stream);
  return matmul.forPackedColumns(
      e, vt, vtEnd, d, tile.blockCols, pack.enabled, iters,
      [&](KernelEmitter &ve, Value c0, int64_t cols, Value packedOff, ValueRange it) {
        BlockTile t{rb, tile.blockRows, rowLimit, c0, cols, Value()};
        if (!packedOff) {
          Fragment z = matmul.multiply(ve, xs, {a[stream.w], d}, t, ve.index(0), d);
          addBias(ve, a, z, stream.bias);
          return body(ve, z, it);
        }
        Fragment lines =
            matmul.multiplyPackedInto(ve, xs, t, pack.buffer, packedOff, d, pack.tile,
                                      ve.index(0), cols);
        // The columns of the tile in ascending order, each row's logit read
        // back from the spilled accumulators.
        return ve.forLoop(
            ve.index(0), ve.index(cols), ve.index(1), it,
            [&](KernelEmitter &je, Value j, ValueRange jt) {
              Fragment z;
              z.rows = lines.rows, z.rowValid = lines.rowValid;
              z.cols = {je.add(c0, j)};
              z.colValid = {Value()};
              for (size_t i = 0; i < lines.rows.size(); ++i)
                z.values.push_back(je.load(
                    pack.tile, je.add(je.index(static_cast<int64_t>(i) * cols), j)));
              addBias(je, a, z, stream.bias);
              return body(je, z, jt);
            });
      });
}

DotProduct CpuSchedule::teacherDot() const {
  constexpr int64_t kLanes = 16, kChains = 4, kStep = kLanes * kChains;
  const CpuVector &vec = matmul;
  return [&vec](KernelEmitter &e, Value x, Value xOff, Value w, Value wOff, Value n) -> Value {
    // Independent FMA chains: one chain is bound by the FMA latency.
    Value main = e.mul(e.divUI(n, e.index(kStep)), e.index(kStep));
    SmallVector<Value> zero(kChains, vec.zeroGroup(e, kLanes));
    SmallVector<Value> acc = e.forLoop(
        e.index(0), main, e.index(kStep), zero, [&](KernelEmitter &ke, Value k, ValueRange it) {
          SmallVector<Value> next;
          for (int64_t c = 0; c < kChains; ++c) {
            Value at = ke.add(k, ke.index(c * kLanes));
            next.push_back(ke.fma(vec.loadGroup(ke, x, ke.add(xOff, at), kLanes),
                                  vec.loadGroup(ke, w, ke.add(wOff, at), kLanes), it[c]));
          }
          return next;
        });
    // A fixed tree: the chains pairwise, then the lanes pairwise.
    Value sum = e.addF(e.addF(acc[0], acc[1]), e.addF(acc[2], acc[3]));
    SmallVector<Value> lanes;
    for (int64_t l = 0; l < kLanes; ++l)
      lanes.push_back(vector::ExtractOp::create(e.builder(), e.location(), sum,
                                                ArrayRef<int64_t>{l}));
    while (lanes.size() > 1) {
      SmallVector<Value> half;
      for (size_t l = 0; l < lanes.size(); l += 2)
        half.push_back(e.addF(lanes[l], lanes[l + 1]));
      lanes = std::move(half);
    }
    return e.forLoop(main, n, e.index(1), {lanes.front()},
                     [&](KernelEmitter &ke, Value k, ValueRange it) {
                       Value xv = ke.loadReal(x, ke.add(xOff, k));
                       Value wv = ke.loadReal(w, ke.add(wOff, k));
                       return SmallVector<Value>{ke.fma(xv, wv, it[0])};
                     })[0];
  };
}

std::optional<CpuSchedule::LabelTile> CpuSchedule::labelTile(KernelEmitter &e) const {
  if (!spec.isVocabReduce() || !spec.gradient || spec.labelsPerRow <= 1)
    return std::nullopt;
  return LabelTile{stackReal(e, e.index(tile.blockRows * tile.vocabTile))};
}

void CpuSchedule::formLabelTile(KernelEmitter &e, const KernelArgs &a, const LabelTile &t,
                                Value rb, Value rowLimit, Value vt, Value vtEnd) const {
  const int64_t br = tile.blockRows, k = spec.labelsPerRow;
  e.forLoop(e.index(0), e.index(br * tile.vocabTile), e.index(1), {},
            [&](KernelEmitter &ze, Value at, ValueRange) {
              ze.store(ze.real(0.0), t.values, at);
              return SmallVector<Value>{};
            });
  Value width = e.sub(vtEnd, vt);
  Fragment rows = matmul.layout(e, {rb, br, rowLimit, vt, 1, Value()});
  for (int64_t i = 0; i < br; ++i) {
    Value first = e.mul(rows.rows[i], e.index(k));
    e.forLoop(first, e.add(first, e.index(k)), e.index(1), {},
              [&](KernelEmitter &le, Value at, ValueRange) {
                // Labels below vt (ignore_index among them) wrap around and
                // fail the unsigned compare, like those at or past vtEnd.
                Value offset = le.sub(le.loadLabel(a["labels"], at), vt);
                le.ifThen(le.cmpI(arith::CmpIPredicate::ult, offset, width),
                          [&](KernelEmitter &se) {
                            Value slot = se.add(se.index(i * tile.vocabTile), offset);
                            Value g = se.load(a["grad_label_logit"], at);
                            se.store(se.addF(se.load(t.values, slot), g), t.values, slot);
                          });
                return SmallVector<Value>{};
              });
  }
}

SmallVector<Value> CpuSchedule::rowGrads(KernelEmitter &e, const KernelArgs &a,
                                         const Fragment &raw, const TeacherTile *teacher,
                                         Value vt, const LabelTile *labels) const {
  SmallVector<Value> dz(raw.values.size()), weights;
  for (Value col : raw.cols)
    weights.push_back(loadColumnWeight(e, spec, a, col));
  for (size_t i = 0; i < raw.rows.size(); ++i) {
    RowAdjoint row = loadRowAdjoint(e, spec, a, raw.rows[i], /*labels=*/!labels);
    row.teacherDot = teacherDot();
    if (teacher)
      row.teacherAt = [this, teacher, i, vt](KernelEmitter &te, Value col) {
        return teacherLogitAt(te, *teacher, static_cast<int64_t>(i), col, vt);
      };
    if (labels)
      row.labelAt = [this, labels, i, vt](KernelEmitter &le, Value col) {
        return le.load(labels->values,
                       le.add(le.index(static_cast<int64_t>(i) * tile.vocabTile), le.sub(col, vt)));
      };
    for (size_t j = 0; j < raw.cols.size(); ++j)
      dz[i * raw.cols.size() + j] = emitRawGrad(e, spec, row, raw.at(i, j), raw.cols[j], weights[j]);
  }
  return dz;
}

Value CpuSchedule::panelRows(KernelEmitter &e, Value d, int64_t most, int64_t budgetFloats) const {
  const int64_t br = tile.blockRows;
  Value perRow = e.maxUI(d, e.index(1)); // D = 0: rows of nothing
  Value fit =
      e.mul(e.divUI(e.divUI(e.index(elements(budgetFloats)), perRow), e.index(br)), e.index(br));
  Value capped = e.minUI(fit, e.index(most));
  return e.select(e.cmpI(arith::CmpIPredicate::ult, capped, e.index(br)), e.index(br), capped);
}

CpuVector::PackedShape CpuSchedule::packedShape() const {
  // A packed in blocks of 64 lines (a strided dZᵀ is read in runs of 64
  // columns); columns in blocks of up to 2048 (all of D for D ≤ 2048, so
  // each packed panel of A serves every column); k in blocks that keep
  // the packed B block at 1 MiB in L2 (256 steps at D = 1024, at most
  // 512). Measured at 4096×32000×1024 (docs/benchmarks.md).
  const int64_t mr = tile.blockRows, nr = tile.blockCols * tile.vectorWidth;
  CpuVector::PackedShape shape;
  shape.rows = mr, shape.groups = tile.blockCols;
  shape.blockRows = (64 + mr - 1) / mr * mr;
  shape.maxCols = (2048 + nr - 1) / nr * nr;
  shape.blockFloats = elements(256 * 1024);
  shape.maxK = 512;
  shape.minK = std::max<int64_t>(1, std::min(shape.maxK, shape.blockFloats / shape.maxCols));
  return shape;
}
