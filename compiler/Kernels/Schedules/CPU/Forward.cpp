//===- Forward.cpp - the host forward: rows, reduce -----------------------===//

#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowRules.h"
#include "compiler/Kernels/Schedules/CPU/CpuSchedule.h"
#include "compiler/Kernels/Schedules/Schedules.h"
#include "compiler/Kernels/Support/BlockReduce.h"
#include "compiler/Kernels/Support/PlanBuilder.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace lossjit;

/// lce_rows over [row_begin, row_end) (the host may split rows between
/// threads): panels of rows sweep the vocabulary tile by tile; each tile of
/// W is packed once per panel and reused by every register block of it. Within a tile a row
/// folds its columns in order into a state that starts empty; the tile then
/// merges into the row's wide state (a compensated sum), so the error of
/// the sum of exponentials is bounded by the tile, not by V (2^25 equal
/// logits give log 2^25, not log 2^24). The bits depend on the vocabulary
/// tile, which is part of the plan, and not on the thread split.
void lossjit::buildCpuRowsKernel(CpuSchedule &s) {
  KernelSignature sig("lce_rows");
  sig.arg("x", s.flat(s.storage())).arg("w", s.flat(s.storage()));
  sig.argIf(s.spec.hasBias, "bias", s.flat(s.storage()));
  declareRowInputs(sig, s.spec);
  declareRowOutputs(sig, s.spec, s.compute());
  sig.arg("row_begin", s.index()).arg("row_end", s.index());
  sig.arg("V", s.index()).arg("D", s.index());
  KernelArgs a = s.sink.begin(sig, {{"1", "1", "1"}, "rows"});
  const int64_t br = s.tile.blockRows;
  const int64_t panel = br * s.tile.panelBlocks, vtile = s.tile.vocabTile;
  KernelEmitter e(s.sink.builder(), s.sink.location(), s.spec.compute);
  Value v = a["V"], d = a["D"], rowEnd = a["row_end"], bias = a["bias"];
  CpuSchedule::LogitPack pack = s.logitPack(e, d);
  std::optional<CpuSchedule::TeacherTile> teacher;
  if (s.spec.hasTeacher)
    teacher = s.teacherTile(e, a);
  // Each row's carried (wide) statistics while the panel sweeps the
  // vocabulary; with a dependent sum (jsd, mixture_kl) a second sweep
  // carries it, reading each row's finished lse of both streams.
  RowStats dependent = RowStats::dependentForSpec(s.spec);
  auto wideBuffer = [&](const RowStats &stats) {
    return memref::AllocaOp::create(e.builder(), e.location(),
                                    MemRefType::get({stats.wideWidth() * panel}, s.compute()))
        .getResult();
  };
  auto rowBuffer = [&]() {
    return memref::AllocaOp::create(e.builder(), e.location(), MemRefType::get({panel}, s.compute()))
        .getResult();
  };
  // The plain sweep (statistics of the logits alone) folds each row's
  // logits of a tile in groups of lanes from a buffer of the tile's
  // products: one exponential per logit, vectorized along the columns.
  const bool grouped = s.stats.pushesGroups() && !s.spec.readsClassWeights() &&
                       !s.spec.hasTargets() && !teacher;
  std::optional<CpuSchedule::LogitGroups> groups;
  if (grouped)
    groups = s.logitGroups(e, a);
  Value state = wideBuffer(s.stats);
  Value dependentState, rowLse, rowTeacherLse;
  if (!dependent.empty()) {
    dependentState = wideBuffer(dependent);
    rowLse = rowBuffer();
    rowTeacherLse = rowBuffer();
  }
  auto fieldAt = [&](KernelEmitter &le, Value slot, unsigned f) {
    return le.add(slot, le.index(f));
  };
  /// One row's wide state (of `stats` in `buffer`) at panel offset `at`.
  auto loadWide = [&](KernelEmitter &le, const RowStats &stats, Value buffer, Value at) {
    Value slot = le.mul(at, le.index(stats.wideWidth()));
    SmallVector<Value> fields;
    for (unsigned f = 0; f < stats.wideWidth(); ++f)
      fields.push_back(le.load(buffer, fieldAt(le, slot, f)));
    return fields;
  };
  // The panel's rows [pb, panelEnd) sweep the vocabulary once into `stats`'
  // wide states in `buffer`; `dependentSweep` adds each row's finished lse
  // pair to the logit's inputs.
  auto sweep = [&](KernelEmitter &pe, const RowStats &stats, Value buffer, Value pb,
                   Value panelEnd, bool dependentSweep) {
    const int64_t width = stats.width(), wideWidth = stats.wideWidth();
    pe.forLoop(pe.index(0), pe.index(wideWidth * panel), pe.index(wideWidth), {},
               [&](KernelEmitter &ie, Value slot, ValueRange) {
                 SmallVector<Value> empty = stats.identityWide(ie);
                 for (unsigned f = 0; f < wideWidth; ++f)
                   ie.store(empty[f], buffer, fieldAt(ie, slot, f));
                 return SmallVector<Value>{};
               });
    pe.forLoop(pe.index(0), v, pe.index(vtile), {}, [&](KernelEmitter &te, Value vt, ValueRange) {
      Value vtEnd = te.minUI(te.add(vt, te.index(vtile)), v);
      s.packLogits(te, a, pack, vt, vtEnd);
      if (teacher)
        s.packTeacher(te, a, *teacher, vt, vtEnd);
      if (groups && !dependentSweep)
        s.formGroupBias(te, a, *groups, vt, vtEnd);
      te.forLoop(pb, panelEnd, te.index(br), {}, [&](KernelEmitter &re, Value rb, ValueRange) {
        // Rows past the panel are clamped onto its last row and its state
        // slot, and compute that row's values again.
        Fragment rows = s.matmul.layout(re, {rb, br, panelEnd, vt, 1, Value()});
        SmallVector<Value> slots, lse, teacherLse;
        for (int64_t i = 0; i < br; ++i) {
          Value at = re.sub(rows.rows[i], pb);
          slots.push_back(re.mul(at, re.index(wideWidth)));
          if (dependentSweep) {
            lse.push_back(re.load(rowLse, at));
            teacherLse.push_back(re.load(rowTeacherLse, at));
          }
        }
        Value beta = dependentSweep ? re.real(s.spec.jsdBeta) : Value();
        SmallVector<Value> init = stats.identity(re, br);
        if (teacher)
          s.formTeacherTile(re, a, *teacher, pb, rb, panelEnd, vt, vtEnd);
        SmallVector<Value> st;
        if (groups && !dependentSweep) {
          s.formLogitTile(re, a, pack, pb, rb, panelEnd, vt, vtEnd, groups->values);
          st = s.pushLogitGroups(re, stats, *groups, vt, vtEnd, init);
        } else {
        // A register tile of rows × columns at a time; each row still
        // takes its columns in ascending order.
        st = s.forLogitTiles(
            re, a, pack, pb, rb, panelEnd, vt, vtEnd, init,
            [&](KernelEmitter &ve, Fragment &z, ValueRange it) {
              SmallVector<Value> next(it.begin(), it.end());
              for (size_t j = 0; j < z.cols.size(); ++j) {
                Value weight = !dependentSweep && s.spec.readsClassWeights()
                                   ? ve.loadReal(a["class_weights"], z.cols[j])
                                   : Value();
                for (int64_t i = 0; i < br; ++i) {
                  SmallVector<Value> row(stats.row(next, i));
                  LogitInputs in{weight, Value(), Value()};
                  if (!dependentSweep && s.spec.hasTargets())
                    in.target =
                        ve.loadReal(a["targets"], ve.add(ve.mul(z.rows[i], v), z.cols[j]));
                  if (teacher)
                    in.teacher = s.teacherLogitAt(ve, *teacher, i, z.cols[j], vt);
                  if (dependentSweep) {
                    in.lse = lse[i];
                    in.teacherLse = teacherLse[i];
                    in.beta = beta;
                  }
                  SmallVector<Value> pushed =
                      stats.push(ve, row, emitLogit(ve, s.spec, z.at(i, j)), in);
                  std::copy(pushed.begin(), pushed.end(), next.begin() + i * width);
                }
              }
              return next;
            });
        }
        // Every wide state is read before any is stored: a clamped
        // duplicate row must merge into the same start.
        SmallVector<SmallVector<Value>> wide(br);
        for (int64_t i = 0; i < br; ++i)
          for (unsigned f = 0; f < wideWidth; ++f)
            wide[i].push_back(re.load(buffer, fieldAt(re, slots[i], f)));
        for (int64_t i = 0; i < br; ++i) {
          SmallVector<Value> merged = stats.mergeWide(re, wide[i], stats.row(st, i));
          for (unsigned f = 0; f < wideWidth; ++f)
            re.store(merged[f], buffer, fieldAt(re, slots[i], f));
        }
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    });
  };
  // Panels of at most `panel` rows (fewer for 16-bit storage: its rows are
  // widened to f32 once per panel).
  e.forLoop(
      a["row_begin"], rowEnd, pack.panelRows, {}, [&](KernelEmitter &pe, Value pb, ValueRange) {
        Value panelEnd = pe.minUI(pe.add(pb, pack.panelRows), rowEnd);
        s.widenRows(pe, a, pack, pb, panelEnd);
        sweep(pe, s.stats, state, pb, panelEnd, /*dependentSweep=*/false);
        if (!dependent.empty()) {
          pe.forLoop(pb, panelEnd, pe.index(1), {}, [&](KernelEmitter &fe, Value row, ValueRange) {
            Value at = fe.sub(row, pb);
            SmallVector<Value> fields = loadWide(fe, s.stats, state, at);
            fe.store(s.stats.finishWide(fe, fields, loss::Statistic::lse), rowLse, at);
            fe.store(s.stats.finishWide(fe, fields, loss::Statistic::teacher_lse), rowTeacherLse,
                     at);
            return SmallVector<Value>{};
          });
          sweep(pe, dependent, dependentState, pb, panelEnd, /*dependentSweep=*/true);
        }
        pe.forLoop(pb, panelEnd, pe.index(1), {}, [&](KernelEmitter &se, Value row, ValueRange) {
          Value at = se.sub(row, pb);
          SmallVector<Value> fields = loadWide(se, s.stats, state, at);
          SmallVector<Value> dependentFields;
          if (!dependent.empty())
            dependentFields = loadWide(se, dependent, dependentState, at);
          emitRowOutputs(
              se, s.spec, a, row, v,
              [&](KernelEmitter &fe, loss::Statistic what) {
                return RowStats::isDependent(what)
                           ? dependent.finishWide(fe, dependentFields, what)
                           : s.stats.finishWide(fe, fields, what);
              },
              [&](KernelEmitter &te, Value label) {
                Value z = te.dot(a["x"], te.mul(row, d), a["w"], te.mul(label, d), d);
                return bias ? te.addF(z, te.loadReal(bias, label)) : z;
              });
          return SmallVector<Value>{};
        });
        return SmallVector<Value>{};
      });
  s.sink.end();
}

void lossjit::buildCpuReduceKernel(CpuSchedule &s) {
  KernelSignature sig("lce_reduce");
  sig.arg("labels", s.flat(s.spec.labelType)).arg("loss_rows", s.flat(s.compute()));
  sig.arg("loss", s.flat(s.compute())).arg("N", s.index());
  KernelArgs a = s.sink.begin(sig, {});
  const int64_t lanes = s.tile.reduceLanes;
  KernelEmitter e(s.sink.builder(), s.sink.location(), s.spec.compute);
  Type i32 = e.builder().getI32Type();
  Value sums =
      memref::AllocaOp::create(e.builder(), e.location(), MemRefType::get({lanes}, s.compute()));
  Value comps =
      memref::AllocaOp::create(e.builder(), e.location(), MemRefType::get({lanes}, s.compute()));
  Value counts = memref::AllocaOp::create(e.builder(), e.location(), MemRefType::get({lanes}, i32));
  // Lane t sums rows t, t+L, ... — exactly what GPU thread t does.
  e.forLoop(e.index(0), e.index(lanes), e.index(1), {},
            [&](KernelEmitter &le, Value t, ValueRange) {
              SmallVector<Value> acc = emitLaneLossAndCount(le, s.spec, a["labels"], a["loss_rows"],
                                                            t, a["N"], le.index(lanes));
              le.store(acc[0], sums, t);
              le.store(acc[1], comps, t);
              le.store(acc[2], counts, t);
              return SmallVector<Value>{};
            });
  emitCpuTree(e, lanes, [&](KernelEmitter &te, Value dst, Value src) {
    emitMergeLossAndCount(te, sums, comps, counts, dst, src);
  });
  Value first = e.index(0);
  e.store(emitReducedLoss(e, s.spec, e.load(sums, first), e.load(comps, first),
                          e.load(counts, first)),
          a["loss"], first);
  s.sink.end();
}

void lossjit::buildCpuForward(CpuSchedule &s) {
  PlanBuilder plan(s.sink.plan());
  plan.begin(s.spec, s.tile.str());
  if (s.spec.reduction != loss::Reduction::none)
    plan.workspace("loss_rows", s.spec.computeName(), "N");
  buildCpuRowsKernel(s);
  if (s.spec.reduction != loss::Reduction::none)
    buildCpuReduceKernel(s);
}

llvm::Error lossjit::buildCpuSchedule(OpBuilder &builder, Location loc, StringRef moduleName,
                                      const LceSpec &spec, const CpuTileConfig &tile,
                                      LaunchPlan &plan) {
  OpBuilder::InsertionGuard guard(builder);
  CpuKernelSink sink(builder, loc, plan, moduleName);
  CpuSchedule s{sink, spec, tile, CpuVector(tile.vectorWidth)};
  if (!spec.gradient) {
    buildCpuForward(s);
    return llvm::Error::success();
  }
  return buildCpuBackward(s);
}
