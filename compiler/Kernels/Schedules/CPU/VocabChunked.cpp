//===- VocabChunked.cpp - the host backward in vocabulary chunks ----------===//
//
// Chunks cut the vocabulary instead of the rows. Per chunk of C columns:
//   lce_bwd_dz_v  (rows)  dZ[N × C] of every row for the chunk's columns;
//   lce_bwd_dx_v  (rows)  dX_acc += dZ·W[chunk] into an N×D f32 accumulator
//                         (grad_x itself for f32 storage), rounded after the
//                         last chunk;
//   lce_bwd_dw_v  (vocab) dW[chunk] = dZᵀ·X over all N rows at once, rounded
//                         straight into grad_w (no V×D accumulator).
// Every element still sums its terms in the order the row-chunked schedule
// uses (dX over j ascending, dW over rows ascending), so the gradients are
// the same bits; the memory is N·D·4 + C·(N + D)·4 bytes for 16-bit storage
// instead of a V·D·4 dW accumulator next to the dZ chunk.
//
// The fused forward+backward on this schedule runs the forward's statistics
// first (lce_stats: lse of every row), takes each row's raw target logit
// from the dZ kernel of the chunk holding its label, and forms the row
// losses from those, the values the row-chunked fused op forms them from.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowRules.h"
#include "compiler/Kernels/Schedules/CPU/CpuSchedule.h"

using namespace mlir;
using namespace lossjit;

namespace {
LaunchShape perChunk(llvm::StringRef parallel) {
  return {{"1", "1", "1"}, parallel.str(), /*perChunk=*/true};
}

struct VocabChunked {
  CpuSchedule &s;
  Type st() const { return s.storage(); }
  MemRefType flat(Type t) const { return s.flat(t); }
  KernelEmitter emitter() { return KernelEmitter(s.sink.builder(), s.sink.location(), s.spec.compute); }
  bool fused() const { return s.spec.fusedForward; }

  /// lce_bwd_dz_v (rows, per chunk): dZ of rows [row_begin, row_end) for the
  /// chunk's columns into dz[row·C' + (col − chunk_begin)], C' the chunk's
  /// width; in the fused op also each row's raw logit at its label when the
  /// label is in the chunk.
  void buildDz() {
    KernelSignature sig("lce_bwd_dz_v");
    s.dzInputs(sig);
    sig.arg("dz", flat(s.compute())).argIf(fused(), "target_raw", flat(s.compute()));
    sig.arg("row_begin", s.index()).arg("row_end", s.index());
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index());
    sig.arg("V", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, perChunk("rows"));
    const int64_t br = s.tile.blockRows, vtile = s.tile.vocabTile;
    KernelEmitter e = emitter();
    Value cb = a["chunk_begin"], ce = a["chunk_end"], rowEnd = a["row_end"];
    Value width = e.sub(ce, cb);
    CpuSchedule::LogitPack pack = s.logitPack(e, a["D"]);
    std::optional<CpuSchedule::TeacherTile> teacher;
    if (s.spec.gradientReadsTeacher())
      teacher = s.teacherTile(e, a);
    std::optional<CpuSchedule::LabelTile> labels = s.labelTile(e);
    // Panels of rows sweep the chunk tile by tile (each W tile packed once
    // per panel).
    e.forLoop(
        a["row_begin"], rowEnd, pack.panelRows, {}, [&](KernelEmitter &pe, Value pb, ValueRange) {
          Value panelEnd = pe.minUI(pe.add(pb, pack.panelRows), rowEnd);
          s.widenRows(pe, a, pack, pb, panelEnd);
          pe.forLoop(cb, ce, pe.index(vtile), {}, [&](KernelEmitter &te, Value vt, ValueRange) {
            Value vtEnd = te.minUI(te.add(vt, te.index(vtile)), ce);
            s.packLogits(te, a, pack, vt, vtEnd);
            if (teacher)
              s.packTeacher(te, a, *teacher, vt, vtEnd);
            te.forLoop(
                pb, panelEnd, te.index(br), {}, [&](KernelEmitter &re, Value rb, ValueRange) {
                  if (teacher)
                    s.formTeacherTile(re, a, *teacher, pb, rb, panelEnd, vt, vtEnd);
                  if (labels)
                    s.formLabelTile(re, a, *labels, rb, panelEnd, vt, vtEnd);
                  s.forLogitTiles(
                      re, a, pack, pb, rb, panelEnd, vt, vtEnd, {},
                      [&](KernelEmitter &ve, Fragment &z, ValueRange) {
                        SmallVector<Value> dz = s.rowGrads(
                            ve, a, z, teacher ? &*teacher : nullptr, vt, labels ? &*labels : nullptr);
                        // Clamped duplicates rewrite their row's own value.
                        for (int64_t i = 0; i < br; ++i)
                          for (size_t j = 0; j < z.cols.size(); ++j)
                            ve.store(dz[i * z.cols.size() + j], a["dz"],
                                     ve.add(ve.mul(z.rows[i], width), ve.sub(z.cols[j], cb)));
                        if (fused())
                          captureTargets(ve, a, z);
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

  /// target_raw[row] = the tile's raw logit at the row's label, for rows
  /// whose label is one of the tile's columns.
  void captureTargets(KernelEmitter &e, const KernelArgs &a, const Fragment &z) {
    for (size_t i = 0; i < z.rows.size(); ++i) {
      Value label = e.loadLabel(a["labels"], z.rows[i]);
      Value hit = e.cmpI(arith::CmpIPredicate::eq, label, z.cols[0]);
      Value raw = z.at(i, 0);
      for (size_t j = 1; j < z.cols.size(); ++j) {
        Value here = e.cmpI(arith::CmpIPredicate::eq, label, z.cols[j]);
        raw = e.select(here, z.at(i, j), raw);
        hit = e.select(here, here, hit);
      }
      e.ifThen(hit, [&](KernelEmitter &se) { se.store(raw, a["target_raw"], z.rows[i]); });
    }
  }

  /// lce_bwd_dx_v (rows, per chunk): dX_acc rows (+)= dZ rows · W[chunk] as
  /// a packed product (CpuVector::accumulatePacked, j ascending across the
  /// chunks). After the last chunk, 16-bit storage rounds the accumulator
  /// into grad_x.
  void buildDx(llvm::StringRef accName) {
    KernelSignature sig("lce_bwd_dx_v");
    sig.arg("dz", flat(s.compute())).arg("w", flat(st()));
    sig.arg("dx_acc", flat(s.compute()), accName).argIf(accName != "grad_x", "grad_x", flat(st()));
    sig.arg("row_begin", s.index()).arg("row_end", s.index());
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index());
    sig.arg("V", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, perChunk("rows"));
    KernelEmitter e = emitter();
    Value d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value acc = a["dx_acc"];
    CpuVector::PackedShape shape = s.packedShape();
    CpuVector::PackBuffers buffers = s.matmul.packBuffers(e, shape);
    // A = dZ (rows of the chunk's width, k = the chunk's columns), B = Wᵀ.
    MatrixOperand dz{a["dz"], e.sub(ce, cb), Value(), Value(), cb};
    MatrixOperand wt{a["w"], Value(), d};
    s.matmul.accumulatePacked(
        e, shape, buffers, dz, wt, a["row_begin"], a["row_end"], d, cb, ce,
        {acc, [&](KernelEmitter &le, Value m) { return le.mul(m, d); }},
        e.cmpI(arith::CmpIPredicate::eq, cb, e.index(0)));
    if (Value out = a["grad_x"])
      e.ifThen(e.cmpI(arith::CmpIPredicate::eq, ce, a["V"]), [&](KernelEmitter &le) {
        le.forLoop(a["row_begin"], a["row_end"], le.index(1), {},
                   [&](KernelEmitter &se, Value row, ValueRange) {
                     emitCopyRow(se, acc, se.mul(row, d), out, se.mul(row, d), d);
                     return SmallVector<Value>{};
                   });
      });
    s.sink.end();
  }

  /// lce_bwd_dw_v (vocab, per chunk): dW rows of [col_begin, col_end) ⊂
  /// chunk = Σ over all N rows of dZ[r, j]·X[r], in row order, as a packed
  /// product; the sums live in `dw_acc` (the chunk's f32 rows, or grad_w
  /// itself for f32) and are rounded into grad_w. db likewise.
  void buildDw(llvm::StringRef accName) {
    KernelSignature sig("lce_bwd_dw_v");
    sig.arg("dz", flat(s.compute())).arg("x", flat(st()));
    sig.arg("dw_acc", flat(s.compute()), accName).argIf(accName != "grad_w", "grad_w", flat(st()));
    sig.argIf(s.spec.needsGradBias(), "grad_bias", flat(st()));
    sig.arg("col_begin", s.index()).arg("col_end", s.index());
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index());
    sig.arg("N", s.index()).arg("D", s.index());
    KernelArgs a = s.sink.begin(sig, perChunk("vocab"));
    KernelEmitter e = emitter();
    Value d = a["D"], n = a["N"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value colEnd = a["col_end"], acc = a["dw_acc"], width = e.sub(ce, cb);
    // The accumulator row of column j: the chunk's own rows, or grad_w's.
    const bool separate = accName != "grad_w";
    auto accRow = [&](KernelEmitter &le, Value j) {
      return le.mul(separate ? le.sub(j, cb) : j, d);
    };
    CpuVector::PackedShape shape = s.packedShape();
    CpuVector::PackBuffers buffers = s.matmul.packBuffers(e, shape);
    // A = dZᵀ (the chunk's columns contiguous, k = every row), B = Xᵀ.
    MatrixOperand dzT{a["dz"], Value(), width, cb, Value()};
    MatrixOperand xT{a["x"], Value(), d};
    s.matmul.accumulatePacked(e, shape, buffers, dzT, xT, a["col_begin"], colEnd, d, e.index(0),
                              n, {acc, accRow}, s.always(e));
    // One rounding per element, and db in row order, per column.
    e.forLoop(a["col_begin"], colEnd, e.index(1), {}, [&](KernelEmitter &ce2, Value j, ValueRange) {
      if (Value out = a["grad_w"])
        emitCopyRow(ce2, acc, accRow(ce2, j), out, ce2.mul(j, d), d);
      if (Value gb = a["grad_bias"]) {
        Value db = ce2.forLoop(ce2.index(0), n, ce2.index(1), {ce2.real(0.0)},
                               [&](KernelEmitter &ke, Value r, ValueRange it) {
                                 Value at = ke.add(ke.mul(r, width), ke.sub(j, cb));
                                 return SmallVector<Value>{ke.addF(it[0], ke.load(a["dz"], at))};
                               })[0];
        ce2.store(ce2.toStorage(db, st()), gb, j);
      }
      return SmallVector<Value>{};
    });
    s.sink.end();
  }

  /// lce_fused_loss (rows): the row losses from lse and the captured raw
  /// target logits, under the row rule.
  void buildFusedLoss() {
    KernelSignature sig("lce_fused_loss");
    sig.arg("labels", flat(s.spec.labelType)).arg("lse", flat(s.compute()));
    sig.arg("target_raw", flat(s.compute())).arg("loss_rows", flat(s.compute()));
    sig.arg("row_begin", s.index()).arg("row_end", s.index()).arg("V", s.index());
    KernelArgs a = s.sink.begin(sig, {{"1", "1", "1"}, "rows"});
    KernelEmitter e = emitter();
    e.forLoop(a["row_begin"], a["row_end"], e.index(1), {},
              [&](KernelEmitter &re, Value row, ValueRange) {
                Value label = re.loadLabel(a["labels"], row);
                Value loss =
                    emitRowLoss(re, s.spec, label, a["V"], re.load(a["lse"], row),
                                [&](KernelEmitter &te) { return te.load(a["target_raw"], row); });
                re.store(loss, a["loss_rows"], row);
                return SmallVector<Value>{};
              });
    s.sink.end();
  }
};
} // namespace

llvm::Error lossjit::buildCpuVocabChunkedBackward(CpuSchedule &s, PlanBuilder &plan) {
  const LceSpec &spec = s.spec;
  VocabChunked v{s};
  // Budget: the threads' scratch; grow and (fused) loss_rows and target_raw
  // [N]; 16-bit storage an N×D f32 dX accumulator; per chunk column dZ [N]
  // and (16-bit) a dW row [D]; all of the compute type.
  const std::string eb = std::to_string(spec.computeBytes());
  std::string fixed = "N*" + std::to_string(spec.computeBytes() * (spec.fusedForward ? 3 : 1));
  fixed += "+" + std::string(CpuSchedule::kScratchReserve);
  std::string dxAcc = spec.storesCompute() || !spec.needsGradX ? "grad_x" : "dx_acc";
  std::string dwAcc = spec.storesCompute() || !spec.needsGradW ? "grad_w" : "dw_acc";
  if (dxAcc == "dx_acc")
    fixed += "+N*D*" + eb;
  // max(1,…): with N = 0 (no rows, zero gradients), and D = 0 too, the
  // chunks are still well defined.
  std::string perColumn = dwAcc == "dw_acc" ? "max(1,N+D)*" + eb : "max(1,N)*" + eb;
  plan.vocabChunks(spec, "max(1,min(V,(WB-(" + fixed + "))/(" + perColumn + ")))");
  if (dxAcc == "dx_acc")
    plan.workspace("dx_acc", spec.computeName(), "N*D");
  if (dwAcc == "dw_acc")
    plan.workspace("dw_acc", spec.computeName(), "C*D");
  if (spec.fusedForward) {
    plan.workspace("loss_rows", spec.computeName(), "N");
    plan.workspace("target_raw", spec.computeName(), "N");
    buildCpuRowsKernel(s);
  }
  if (!spec.isVocabReduce())
    buildCpuScaleKernel(s);
  v.buildDz();
  if (spec.needsGradX)
    v.buildDx(dxAcc);
  if (spec.needsGradW)
    v.buildDw(dwAcc);
  if (spec.fusedForward) {
    v.buildFusedLoss();
    buildCpuReduceKernel(s);
  }
  return llvm::Error::success();
}
