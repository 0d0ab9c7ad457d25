//===- Backward.cpp - the host gradients: chunked, recompute, fused -------===//
//
// Rows-parallel kernels own rows of dX (and of the dZ chunk), vocab-parallel
// ones own rows of dW: the host may split either range between threads and
// every element still sees its terms in one order.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/Adjoints.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowRules.h"
#include "compiler/Kernels/Schedules/CPU/CpuSchedule.h"
#include "compiler/Kernels/Schedules/ChunkedBackward.h"
#include "compiler/Kernels/Support/PlanBuilder.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
LaunchShape rows(bool perChunk = false) { return {{"1", "1", "1"}, "rows", perChunk}; }
LaunchShape vocab(bool perChunk = false) { return {{"1", "1", "1"}, "vocab", perChunk}; }

struct Backward : ChunkedBackwardSteps {
  explicit Backward(CpuSchedule &s) : s(s) {}
  CpuSchedule &s;
  ChunkedAccumulators acc;

  std::string budgetReserve() const override { return CpuSchedule::kScratchReserve; }
  void scale() override { buildScale(); }
  /// No kernel: the host always runs a first chunk (empty when N = 0, see
  /// CpuCompiledOp::run), where lce_bwd_dw_chunk zeroes the sums itself.
  void zero(const ChunkedAccumulators &) override {}
  void dz(bool storeRaw) override { buildDz(storeRaw); }
  void fusedRows() override { buildFusedLse(); }
  void fusedDz() override { buildFusedDz(); }
  void dx() override { buildDxChunk(); }
  void dw(const ChunkedAccumulators &accumulators) override {
    acc = accumulators;
    buildDwChunk();
  }
  void finish() override { buildFinish(); }
  void reduce() override { buildCpuReduceKernel(s); }

  Type st() const { return s.storage(); }
  MemRefType flat(Type t) const { return s.flat(t); }
  KernelEmitter emitter() { return KernelEmitter(s.sink.builder(), s.sink.location(), s.spec.compute); }

  void dzInputs(KernelSignature &sig) { s.dzInputs(sig); }
  SmallVector<Value> rowGrads(KernelEmitter &e, const KernelArgs &a, const Fragment &raw) {
    return s.rowGrads(e, a, raw);
  }
  Fragment logits(KernelEmitter &e, const KernelArgs &a, const BlockTile &tile) {
    return s.logits(e, a, tile);
  }

  void buildScale() { buildCpuScaleKernel(s); }

  /// The dX skeleton both schedules share: rows in blocks of BR, f32
  /// accumulators on the stack, a sweep over the vocabulary adding
  /// dZ[r, j]·W[j] (dZ of column j from `dzOf`), one rounding per element.
  void emitDxRows(
      const KernelArgs &a,
      const std::function<SmallVector<Value>(KernelEmitter &, Value rowBlock, Value col)> &dzOf) {
    const int64_t br = s.tile.blockRows;
    KernelEmitter e = emitter();
    Value d = a["D"], rowEnd = a["row_end"];
    Value dMain = s.matmul.mainExtent(e, d);
    Value accRows = stackReal(e, e.mul(e.index(br), d));
    e.forLoop(
        a["row_begin"], rowEnd, e.index(br), {}, [&](KernelEmitter &re, Value rb, ValueRange) {
          SmallVector<Value> accOff;
          for (int64_t i = 0; i < br; ++i) {
            accOff.push_back(re.mul(re.index(i), d));
            emitZeroRow(re, accRows, accOff.back(), d);
          }
          re.forLoop(
              re.index(0), a["V"], re.index(1), {}, [&](KernelEmitter &ve, Value col, ValueRange) {
                SmallVector<Value> dz = dzOf(ve, rb, col);
                s.matmul.rankOneUpdate(ve, accRows, accOff, dz, a["w"], ve.mul(col, d), d, dMain);
                return SmallVector<Value>{};
              });
          for (int64_t i = 0; i < br; ++i) {
            Value row = re.add(rb, re.index(i));
            re.ifThen(re.cmpI(arith::CmpIPredicate::ult, row, rowEnd), [&](KernelEmitter &se) {
              emitCopyRow(se, accRows, accOff[i], a["grad_x"], se.mul(row, d), d);
            });
          }
          return SmallVector<Value>{};
        });
    s.sink.end();
  }

  /// Rows-parallel: dX of rows [row_begin, row_end), recomputing the logits.
  void buildDxRecompute() {
    KernelSignature sig("lce_bwd_dx");
    dzInputs(sig);
    sig.arg("grad_x", flat(st())).arg("row_begin", s.index()).arg("row_end", s.index());
    sig.arg("V", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, rows());
    const int64_t br = s.tile.blockRows;
    emitDxRows(a, [&](KernelEmitter &ve, Value rb, Value col) {
      Fragment z = logits(ve, a, {rb, br, a["row_end"], col, 1, Value()});
      return rowGrads(ve, a, z);
    });
  }

  /// Rows-parallel (per chunk): dX rows = dZ rows · W as a packed product
  /// (CpuVector::accumulatePacked), every element summed over j ascending.
  /// f32 storage sums in grad_x itself; 16-bit storage in f32 panels of
  /// rows on the stack, rounded once into grad_x.
  void buildDxChunk() {
    KernelSignature sig("lce_bwd_dx_chunk");
    sig.arg("dz", flat(s.compute())).arg("w", flat(st())).arg("grad_x", flat(st()));
    sig.arg("row_begin", s.index()).arg("row_end", s.index()).arg("chunk_begin", s.index());
    sig.arg("V", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, rows(/*perChunk=*/true));
    KernelEmitter e = emitter();
    Value d = a["D"], v = a["V"], rowEnd = a["row_end"];
    CpuVector::PackedShape shape = s.packedShape();
    CpuVector::PackBuffers buffers = s.matmul.packBuffers(e, shape);
    MatrixOperand dz{a["dz"], v, Value(), a["chunk_begin"]};
    MatrixOperand wt{a["w"], Value(), d};
    Value fresh = s.always(e);
    if (s.spec.storesCompute()) {
      s.matmul.accumulatePacked(e, shape, buffers, dz, wt, a["row_begin"], rowEnd, d, e.index(0),
                                v, {a["grad_x"], [&](KernelEmitter &le, Value m) {
                                      return le.mul(m, d);
                                    }},
                                fresh);
      s.sink.end();
      return;
    }
    // Panels of up to 1 MiB of f32 rows, as many rows as fit.
    Value panel = s.panelRows(e, d, std::numeric_limits<int32_t>::max(), 256 * 1024);
    Value accRows = stackReal(e, e.mul(panel, d));
    e.forLoop(a["row_begin"], rowEnd, panel, {}, [&](KernelEmitter &pe, Value pb, ValueRange) {
      Value panelEnd = pe.minUI(pe.add(pb, panel), rowEnd);
      s.matmul.accumulatePacked(pe, shape, buffers, dz, wt, pb, panelEnd, d, pe.index(0), v,
                                {accRows, [&](KernelEmitter &le, Value m) {
                                   return le.mul(le.sub(m, pb), d);
                                 }},
                                fresh);
      pe.forLoop(pb, panelEnd, pe.index(1), {}, [&](KernelEmitter &se, Value row, ValueRange) {
        emitCopyRow(se, accRows, se.mul(se.sub(row, pb), d), a["grad_x"], se.mul(row, d), d);
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
    s.sink.end();
  }

  /// Vocab-parallel: dW (and db) of vocab rows [col_begin, col_end),
  /// recomputing the logits; rows are summed in order 0..N-1.
  void buildDwRecompute() {
    KernelSignature sig("lce_bwd_dw");
    dzInputs(sig);
    sig.arg("grad_w", flat(st())).argIf(s.spec.needsGradBias(), "grad_bias", flat(st()));
    sig.arg("col_begin", s.index()).arg("col_end", s.index());
    // (V: the row's targets sit at row·V, see loadRowAdjoint.)
    sig.arg("N", s.index()).arg("D", s.index()).argIf(s.spec.hasTargets(), "V", s.index());
    KernelArgs a = s.sink.begin(sig, vocab());
    const int64_t br = s.tile.blockRows;
    KernelEmitter e = emitter();
    Value x = a["x"], w = a["w"], bias = a["bias"], d = a["D"], colEnd = a["col_end"];
    Value dMain = s.matmul.mainExtent(e, d);
    Value accRows = stackReal(e, e.mul(e.index(br), d));
    e.forLoop(
        a["col_begin"], colEnd, e.index(br), {}, [&](KernelEmitter &ce, Value cb, ValueRange) {
          // The block's vocab rows are lines of A = W; each token row is B.
          Fragment owned = s.matmul.layout(ce, {cb, br, colEnd, ce.index(0), 1, Value()});
          SmallVector<Value> accOff, bv, weights, dbInit;
          for (int64_t i = 0; i < br; ++i) {
            accOff.push_back(ce.mul(ce.index(i), d));
            emitZeroRow(ce, accRows, accOff.back(), d);
            if (bias)
              bv.push_back(ce.loadReal(bias, owned.rows[i]));
            weights.push_back(loadColumnWeight(ce, s.spec, a, owned.rows[i]));
            dbInit.push_back(ce.real(0.0));
          }
          SmallVector<Value> db = ce.forLoop(
              ce.index(0), a["N"], ce.index(1), dbInit,
              [&](KernelEmitter &re, Value row, ValueRange it) {
                RowAdjoint adj = loadRowAdjoint(re, s.spec, a, row);
                adj.teacherDot = s.teacherDot();
                // Rows whose adjoints are all 0 (ignored rows) add nothing:
                // skip their dot products.
                Value active = emitRowActive(re, s.spec, adj);
                auto ifOp =
                    scf::IfOp::create(re.builder(), re.location(), TypeRange(ValueRange(it)),
                                      active, /*withElseRegion=*/true);
                {
                  OpBuilder::InsertionGuard guard(re.builder());
                  re.builder().setInsertionPointToStart(&ifOp.getThenRegion().front());
                  KernelEmitter te = re.at(re.builder(), re.location());
                  Value xOff = te.mul(row, d);
                  Fragment z = s.matmul.multiply(te, {w, d}, {x, d},
                                                 {cb, br, colEnd, row, 1, Value()}, te.index(0), d);
                  SmallVector<Value> dz, sums;
                  for (int64_t i = 0; i < br; ++i) {
                    Value raw = bias ? te.addF(z.at(i, 0), bv[i]) : z.at(i, 0);
                    dz.push_back(emitRawGrad(te, s.spec, adj, raw, z.rows[i], weights[i]));
                    sums.push_back(te.addF(it[i], dz.back()));
                  }
                  s.matmul.rankOneUpdate(te, accRows, accOff, dz, x, xOff, d, dMain);
                  scf::YieldOp::create(te.builder(), te.location(), sums);
                  te.builder().setInsertionPointToStart(&ifOp.getElseRegion().front());
                  scf::YieldOp::create(te.builder(), te.location(), ValueRange(it));
                }
                return SmallVector<Value>(ifOp.getResults());
              });
          for (int64_t i = 0; i < br; ++i) {
            Value col = ce.add(cb, ce.index(i));
            ce.ifThen(ce.cmpI(arith::CmpIPredicate::ult, col, colEnd), [&](KernelEmitter &se) {
              emitCopyRow(se, accRows, accOff[i], a["grad_w"], se.mul(col, d), d);
              if (s.spec.needsGradBias())
                se.store(se.toStorage(db[i], st()), a["grad_bias"], col);
            });
          }
          return SmallVector<Value>{};
        });
    s.sink.end();
  }

  /// Rows-parallel (per chunk): dZ rows into the [C, V] workspace. With
  /// `storeRaw` (lce_fused_z) the raw logits x·w + b instead.
  void buildDz(bool storeRaw) {
    KernelSignature sig(storeRaw ? "lce_fused_z" : "lce_bwd_dz");
    if (storeRaw)
      sig.arg("x", flat(st())).arg("w", flat(st())).argIf(s.spec.hasBias, "bias", flat(st()));
    else
      dzInputs(sig);
    sig.arg("dz", flat(s.compute())).arg("row_begin", s.index()).arg("row_end", s.index());
    sig.arg("chunk_begin", s.index()).arg("V", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, rows(/*perChunk=*/true));
    const int64_t br = s.tile.blockRows;
    KernelEmitter e = emitter();
    Value v = a["V"], rowEnd = a["row_end"], chunkBegin = a["chunk_begin"];
    // Like the forward: panels of rows sweep the vocabulary tile by tile so
    // each W tile is read once per panel. Every dZ element is computed by
    // the same operations whatever the tiling.
    const int64_t vtile = s.tile.vocabTile;
    CpuSchedule::LogitPack pack = s.logitPack(e, a["D"]);
    std::optional<CpuSchedule::TeacherTile> teacher;
    if (!storeRaw && s.spec.gradientReadsTeacher())
      teacher = s.teacherTile(e, a);
    std::optional<CpuSchedule::LabelTile> labels;
    if (!storeRaw)
      labels = s.labelTile(e);
    // The raw logits, and the cross-entropy's gradient, leave the tile in
    // groups of lanes: the same operations per element as one at a time.
    std::optional<CpuSchedule::LogitGroups> groups;
    if (storeRaw || (!s.spec.isVocabReduce() && !teacher && !labels))
      groups = s.logitGroups(e, a);
    e.forLoop(
        a["row_begin"], rowEnd, pack.panelRows, {}, [&](KernelEmitter &pe, Value pb, ValueRange) {
          Value panelEnd = pe.minUI(pe.add(pb, pack.panelRows), rowEnd);
          s.widenRows(pe, a, pack, pb, panelEnd);
          pe.forLoop(
              pe.index(0), v, pe.index(vtile), {}, [&](KernelEmitter &te, Value vt, ValueRange) {
                Value vtEnd = te.minUI(te.add(vt, te.index(vtile)), v);
                s.packLogits(te, a, pack, vt, vtEnd);
                if (teacher)
                  s.packTeacher(te, a, *teacher, vt, vtEnd);
                if (groups)
                  s.formGroupBias(te, a, *groups, vt, vtEnd);
                te.forLoop(
                    pb, panelEnd, te.index(br), {}, [&](KernelEmitter &re, Value rb, ValueRange) {
                      if (groups) {
                        s.formLogitTile(re, a, pack, pb, rb, panelEnd, vt, vtEnd, groups->values);
                        Fragment rows = s.matmul.layout(re, {rb, br, panelEnd, vt, 1, Value()});
                        s.storeLogitGroups(
                            re, a, *groups, rows, vt, vtEnd, a["dz"],
                            [&](KernelEmitter &se, Value row) {
                              return se.add(se.mul(se.sub(row, chunkBegin), v), vt);
                            },
                            /*grad=*/!storeRaw);
                        return SmallVector<Value>{};
                      }
                      if (teacher)
                        s.formTeacherTile(re, a, *teacher, pb, rb, panelEnd, vt, vtEnd);
                      if (labels)
                        s.formLabelTile(re, a, *labels, rb, panelEnd, vt, vtEnd);
                      s.forLogitTiles(
                          re, a, pack, pb, rb, panelEnd, vt, vtEnd, {},
                          [&](KernelEmitter &ve, Fragment &z, ValueRange) {
                            SmallVector<Value> dz =
                                storeRaw ? SmallVector<Value>(z.values)
                                         : s.rowGrads(ve, a, z, teacher ? &*teacher : nullptr,
                                                      vt, labels ? &*labels : nullptr);
                            // Clamped duplicates rewrite their row's own value.
                            for (int64_t i = 0; i < br; ++i)
                              for (size_t j = 0; j < z.cols.size(); ++j)
                                ve.store(
                                    dz[i * z.cols.size() + j], a["dz"],
                                    ve.add(ve.mul(ve.sub(z.rows[i], chunkBegin), v), z.cols[j]));
                            return SmallVector<Value>{};
                          });
                      return SmallVector<Value>{};
                    });
                return SmallVector<Value>{};
              });
          return SmallVector<Value>{};
        });
    s.sink.end();
  }

  /// Rows-parallel (per chunk, fused): raw logits → lse and the row loss.
  void buildFusedLse() {
    KernelSignature sig("lce_fused_lse");
    sig.arg("labels", flat(s.spec.labelType)).arg("dz", flat(s.compute()));
    sig.arg("lse", flat(s.compute())).arg("loss_rows", flat(s.compute()));
    sig.arg("row_begin", s.index()).arg("row_end", s.index()).arg("chunk_begin", s.index());
    sig.arg("V", s.index());
    KernelArgs a = s.sink.begin(sig, rows(/*perChunk=*/true));
    KernelEmitter e = emitter();
    Value v = a["V"], cb = a["chunk_begin"];
    e.forLoop(a["row_begin"], a["row_end"], e.index(1), {},
              [&](KernelEmitter &re, Value row, ValueRange) {
                Value base = re.mul(re.sub(row, cb), v);
                // Groups of lanes per tile where the statistics fold them.
                RawTileFold groups;
                if (s.stats.pushesGroups())
                  groups = [&](KernelEmitter &te, Value begin, Value end) {
                    return s.forRowGroups(
                        te, a["dz"], base, begin, end, s.stats.identity(te),
                        [&](KernelEmitter &ge, Value, Value raw, Value valid, Value,
                            ValueRange it) {
                          KernelEmitter lane = ge.lanes(RowStats::kGroupLanes);
                          Value z = lane.select(valid, emitLogit(lane, s.spec, raw), lane.negInf());
                          return s.stats.pushGroup(ge, it, z);
                        });
                  };
                emitRowFromRawLogits(re, s.spec, s.stats, a["dz"], base, v, a["labels"], row,
                                     a["lse"], a["loss_rows"], groups);
                return SmallVector<Value>{};
              });
    s.sink.end();
  }

  /// Rows-parallel (per chunk, fused): raw logits → dZ in place.
  void buildFusedDz() {
    KernelSignature sig("lce_fused_dz");
    sig.arg("labels", flat(s.spec.labelType)).arg("lse", flat(s.compute()));
    sig.arg("grow", flat(s.compute())).arg("dz", flat(s.compute()));
    sig.arg("row_begin", s.index()).arg("row_end", s.index()).arg("chunk_begin", s.index());
    sig.arg("V", s.index());
    KernelArgs a = s.sink.begin(sig, rows(/*perChunk=*/true));
    KernelEmitter e = emitter();
    Value v = a["V"], cb = a["chunk_begin"];
    e.forLoop(a["row_begin"], a["row_end"], e.index(1), {},
              [&](KernelEmitter &re, Value row, ValueRange) {
                Value base = re.mul(re.sub(row, cb), v);
                Value lse = re.load(a["lse"], row), g = re.load(a["grow"], row);
                Value label = re.loadLabel(a["labels"], row);
                // Lane-wise: the same operations per element as one at a time.
                s.forRowGroups(re, a["dz"], base, re.index(0), v, {},
                               [&](KernelEmitter &ge, Value j, Value raw, Value valid, Value full,
                                   ValueRange) {
                                 s.storeRowGroup(ge, s.groupLogitGrad(ge, raw, j, lse, g, label),
                                                 a["dz"], ge.add(base, j), valid, full);
                                 return SmallVector<Value>{};
                               });
                return SmallVector<Value>{};
              });
    s.sink.end();
  }

  /// Vocab-parallel (per chunk): dW_acc[j] (+)= Σ_{r in chunk} dZ[r, j]·x_r
  /// in row order, starting from 0 at the first chunk, as a packed product
  /// (CpuVector::accumulatePacked); db likewise.
  void buildDwChunk() {
    KernelSignature sig("lce_bwd_dw_chunk");
    sig.arg("dz", flat(s.compute())).arg("x", flat(st())).arg("dw_acc", flat(s.compute()), acc.dw);
    sig.argIf(s.spec.needsGradBias(), "db_acc", flat(s.compute()), acc.db);
    sig.arg("col_begin", s.index()).arg("col_end", s.index());
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index());
    sig.arg("V", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, vocab(/*perChunk=*/true));
    KernelEmitter e = emitter();
    Value d = a["D"], v = a["V"], cb = a["chunk_begin"], ce = a["chunk_end"];
    CpuVector::PackedShape shape = s.packedShape();
    CpuVector::PackBuffers buffers = s.matmul.packBuffers(e, shape);
    Value firstChunk = e.cmpI(arith::CmpIPredicate::eq, cb, e.index(0));
    // A = dZᵀ (vocabulary lines contiguous, k = the chunk's rows), B = Xᵀ.
    MatrixOperand dzT{a["dz"], Value(), v, Value(), cb};
    MatrixOperand xT{a["x"], Value(), d};
    s.matmul.accumulatePacked(e, shape, buffers, dzT, xT, a["col_begin"], a["col_end"], d, cb, ce,
                              {a["dw_acc"], [&](KernelEmitter &le, Value j) {
                                 return le.mul(j, d);
                               }},
                              firstChunk);
    if (Value dbAcc = a["db_acc"])
      emitColumnSums(e, a["dz"], v, cb, ce, a["col_begin"], a["col_end"], dbAcc, firstChunk);
    s.sink.end();
  }

  /// sums[j] = (fresh ? 0 : sums[j]) + Σ_{r ∈ [rowBegin, rowEnd)} m[(r −
  /// rowBegin)·stride + j] in row order, for j ∈ [colBegin, colEnd):
  /// vectors of columns, then single columns (each column its own chain).
  void emitColumnSums(KernelEmitter &e, Value m, Value stride, Value rowBegin, Value rowEnd,
                      Value colBegin, Value colEnd, Value sums, Value fresh) {
    const int64_t lanes = s.tile.vectorWidth;
    Value vecEnd = e.add(colBegin, e.mul(e.divUI(e.sub(colEnd, colBegin), e.index(lanes)),
                                         e.index(lanes)));
    auto columns = [&](Value lo, Value hi, int64_t width) {
      e.forLoop(lo, hi, e.index(width), {}, [&](KernelEmitter &je, Value j, ValueRange) {
        Value start = je.ifElse(
            fresh, [&](KernelEmitter &z) { return s.matmul.zeroGroup(z, width); },
            [&](KernelEmitter &l) { return s.matmul.loadGroup(l, sums, j, width); });
        Value sum = je.forLoop(rowBegin, rowEnd, je.index(1), {start},
                               [&](KernelEmitter &ke, Value r, ValueRange it) {
                                 Value at = ke.add(ke.mul(ke.sub(r, rowBegin), stride), j);
                                 return SmallVector<Value>{
                                     ke.addF(it[0], s.matmul.loadGroup(ke, m, at, width))};
                               })[0];
        s.matmul.storeGroup(je, sum, sums, j);
        return SmallVector<Value>{};
      });
    };
    columns(colBegin, vecEnd, lanes);
    columns(vecEnd, colEnd, 1);
  }

  /// Vocab-parallel: one rounding of the f32 accumulators to storage.
  void buildFinish() {
    KernelSignature sig("lce_bwd_finish");
    sig.arg("dw_acc", flat(s.compute())).arg("grad_w", flat(st()));
    if (s.spec.needsGradBias())
      sig.arg("db_acc", flat(s.compute())).arg("grad_bias", flat(st()));
    sig.arg("col_begin", s.index()).arg("col_end", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, vocab());
    KernelEmitter e = emitter();
    Value d = a["D"];
    e.forLoop(a["col_begin"], a["col_end"], e.index(1), {},
              [&](KernelEmitter &ce, Value col, ValueRange) {
                emitCopyRow(ce, a["dw_acc"], ce.mul(col, d), a["grad_w"], ce.mul(col, d), d);
                if (s.spec.needsGradBias())
                  emitCopyRow(ce, a["db_acc"], col, a["grad_bias"], col, ce.index(1));
                return SmallVector<Value>{};
              });
    s.sink.end();
  }
};
} // namespace

void lossjit::buildCpuScaleKernel(CpuSchedule &s) {
  KernelSignature sig("lce_bwd_scale");
  // The fused forward+backward has no grad_loss: it computes the gradients
  // of grad_loss = 1, which the caller rescales later.
  sig.arg("labels", s.flat(s.spec.labelType));
  sig.argIf(!s.spec.fusedForward, "grad_loss", s.flat(s.compute()));
  sig.arg("grow", s.flat(s.compute())).arg("N", s.index()).arg("V", s.index());
  KernelArgs a = s.sink.begin(sig, {});
  KernelEmitter e(s.sink.builder(), s.sink.location(), s.spec.compute);
  Value n = a["N"];
  Value count = e.forLoop(e.index(0), n, e.index(1), {e.i32(0)},
                          [&](KernelEmitter &le, Value r, ValueRange it) {
                            Value one = emitCountedI32(le, s.spec, le.loadLabel(a["labels"], r));
                            return SmallVector<Value>{le.addI32(it[0], one)};
                          })[0];
  Value scale = emitGradScale(e, s.spec, a["grad_loss"], count);
  e.forLoop(e.index(0), n, e.index(1), {}, [&](KernelEmitter &le, Value r, ValueRange) {
    le.store(emitRowFactor(le, s.spec, a["labels"], a["grad_loss"], scale, r, a["V"]), a["grow"],
             r);
    return SmallVector<Value>{};
  });
  s.sink.end();
}

llvm::Error lossjit::buildCpuBackward(CpuSchedule &s) {
  const LceSpec &spec = s.spec;
  if (spec.fusedForward && spec.strategy == "recompute")
    return llvm::createStringError(
        "the fused forward+backward is a chunked schedule; strategy recompute does not apply");
  PlanBuilder plan(s.sink.plan());
  plan.begin(spec, s.tile.str());
  // The cross-entropy ops form g_r from grad_loss (lce_bwd_scale); a
  // reduction is handed its adjoints.
  if (!spec.isVocabReduce())
    plan.workspace("grow", s.spec.computeName(), "N");
  if (spec.vocabChunks)
    return buildCpuVocabChunkedBackward(s, plan);
  Backward b(s);
  if (spec.strategy == "recompute") {
    if (!spec.isVocabReduce())
      b.buildScale();
    if (spec.needsGradX)
      b.buildDxRecompute();
    if (spec.needsGradW)
      b.buildDwRecompute();
    return llvm::Error::success();
  }
  buildChunkedBackward(b, plan, spec);
  return llvm::Error::success();
}
