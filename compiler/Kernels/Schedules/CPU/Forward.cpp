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
  declareRowOutputs(sig, s.spec, s.f32());
  sig.arg("row_begin", s.index()).arg("row_end", s.index());
  sig.arg("V", s.index()).arg("D", s.index());
  KernelArgs a = s.sink.begin(sig, {{"1", "1", "1"}, "rows"});
  const int64_t br = s.tile.blockRows, width = s.stats.width();
  const int64_t panel = br * s.tile.panelBlocks, vtile = s.tile.vocabTile;
  KernelEmitter e(s.sink.builder(), s.sink.location());
  Value v = a["V"], d = a["D"], rowEnd = a["row_end"], bias = a["bias"];
  CpuSchedule::LogitPack pack = s.logitPack(e, d);
  std::optional<CpuSchedule::TeacherTile> teacher;
  if (s.spec.hasTeacher)
    teacher = s.teacherTile(e, a);
  // Each row's carried (wide) statistics while the panel sweeps the
  // vocabulary.
  const int64_t wideWidth = s.stats.wideWidth();
  Value state = memref::AllocaOp::create(e.builder(), e.location(),
                                         MemRefType::get({wideWidth * panel}, s.f32()));
  auto fieldAt = [&](KernelEmitter &le, Value slot, unsigned f) {
    return le.add(slot, le.index(f));
  };
  // Panels of at most `panel` rows (fewer for 16-bit storage: its rows are
  // widened to f32 once per panel).
  e.forLoop(
      a["row_begin"], rowEnd, pack.panelRows, {}, [&](KernelEmitter &pe, Value pb, ValueRange) {
        Value panelEnd = pe.minUI(pe.add(pb, pack.panelRows), rowEnd);
        s.widenRows(pe, a, pack, pb, panelEnd);
        pe.forLoop(pe.index(0), pe.index(wideWidth * panel), pe.index(wideWidth), {},
                   [&](KernelEmitter &ie, Value slot, ValueRange) {
                     SmallVector<Value> empty = s.stats.identityWide(ie);
                     for (unsigned f = 0; f < wideWidth; ++f)
                       ie.store(empty[f], state, fieldAt(ie, slot, f));
                     return SmallVector<Value>{};
                   });
        pe.forLoop(
            pe.index(0), v, pe.index(vtile), {}, [&](KernelEmitter &te, Value vt, ValueRange) {
              Value vtEnd = te.minUI(te.add(vt, te.index(vtile)), v);
              s.packLogits(te, a, pack, vt, vtEnd);
              if (teacher)
                s.packTeacher(te, a, *teacher, vt, vtEnd);
              te.forLoop(
                  pb, panelEnd, te.index(br), {}, [&](KernelEmitter &re, Value rb, ValueRange) {
                    // Rows past the panel are clamped onto its last row and its state
                    // slot, and compute that row's values again.
                    Fragment rows = s.matmul.layout(re, {rb, br, panelEnd, vt, 1, Value()});
                    SmallVector<Value> slots;
                    for (int64_t i = 0; i < br; ++i)
                      slots.push_back(re.mul(re.sub(rows.rows[i], pb), re.index(wideWidth)));
                    SmallVector<Value> init = s.stats.identity(re, br);
                    if (teacher)
                      s.formTeacherTile(re, a, *teacher, pb, rb, panelEnd, vt, vtEnd);
                    // A register tile of rows × columns at a time; each row
                    // still takes its columns in ascending order.
                    SmallVector<Value> st = s.forLogitTiles(
                        re, a, pack, pb, rb, panelEnd, vt, vtEnd, init,
                        [&](KernelEmitter &ve, Fragment &z, ValueRange it) {
                          SmallVector<Value> next(it.begin(), it.end());
                          for (size_t j = 0; j < z.cols.size(); ++j) {
                            Value weight = s.spec.readsClassWeights()
                                               ? ve.loadF32(a["class_weights"], z.cols[j])
                                               : Value();
                            for (int64_t i = 0; i < br; ++i) {
                              SmallVector<Value> row(s.stats.row(next, i));
                              LogitInputs in{weight, Value(), Value()};
                              if (s.spec.hasTargets())
                                in.target = ve.loadF32(
                                    a["targets"], ve.add(ve.mul(z.rows[i], v), z.cols[j]));
                              if (teacher)
                                in.teacher = s.teacherLogitAt(ve, *teacher, i, z.cols[j], vt);
                              SmallVector<Value> pushed = s.stats.push(
                                  ve, row, emitLogit(ve, s.spec, z.at(i, j)), in);
                              std::copy(pushed.begin(), pushed.end(), next.begin() + i * width);
                            }
                          }
                          return next;
                        });
                    // Every wide state is read before any is stored: a
                    // clamped duplicate row must merge into the same start.
                    SmallVector<SmallVector<Value>> wide(br);
                    for (int64_t i = 0; i < br; ++i)
                      for (unsigned f = 0; f < wideWidth; ++f)
                        wide[i].push_back(re.load(state, fieldAt(re, slots[i], f)));
                    for (int64_t i = 0; i < br; ++i) {
                      SmallVector<Value> merged =
                          s.stats.mergeWide(re, wide[i], s.stats.row(st, i));
                      for (unsigned f = 0; f < wideWidth; ++f)
                        re.store(merged[f], state, fieldAt(re, slots[i], f));
                    }
                    return SmallVector<Value>{};
                  });
              return SmallVector<Value>{};
            });
        pe.forLoop(pb, panelEnd, pe.index(1), {}, [&](KernelEmitter &se, Value row, ValueRange) {
          Value slot = se.mul(se.sub(row, pb), se.index(wideWidth));
          SmallVector<Value> fields;
          for (unsigned f = 0; f < wideWidth; ++f)
            fields.push_back(se.load(state, fieldAt(se, slot, f)));
          emitRowOutputs(
              se, s.spec, a, row, v,
              [&](KernelEmitter &fe, loss::Statistic what) {
                return s.stats.finishWide(fe, fields, what);
              },
              [&](KernelEmitter &te, Value label) {
                Value z = te.dot(a["x"], te.mul(row, d), a["w"], te.mul(label, d), d);
                return bias ? te.addF(z, te.loadF32(bias, label)) : z;
              });
          return SmallVector<Value>{};
        });
        return SmallVector<Value>{};
      });
  s.sink.end();
}

void lossjit::buildCpuReduceKernel(CpuSchedule &s) {
  KernelSignature sig("lce_reduce");
  sig.arg("labels", s.flat(s.spec.labelType)).arg("loss_rows", s.flat(s.f32()));
  sig.arg("loss", s.flat(s.f32())).arg("N", s.index());
  KernelArgs a = s.sink.begin(sig, {});
  const int64_t lanes = s.tile.reduceLanes;
  KernelEmitter e(s.sink.builder(), s.sink.location());
  Type i32 = e.builder().getI32Type();
  Value sums =
      memref::AllocaOp::create(e.builder(), e.location(), MemRefType::get({lanes}, s.f32()));
  Value comps =
      memref::AllocaOp::create(e.builder(), e.location(), MemRefType::get({lanes}, s.f32()));
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
    plan.workspace("loss_rows", "f32", "N");
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
