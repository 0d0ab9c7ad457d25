//===- LinearCrossEntropyBackwardCPU.cpp - host gradient kernels ----------===//

#include "compiler/Kernels/LinearCrossEntropyBackwardCPU.h"
#include "compiler/Kernels/CpuVectorOps.h"
#include "compiler/Kernels/LceBackwardPlan.h"
#include "compiler/Kernels/KernelEmitter.h"
#include "compiler/Kernels/LceGradient.h"
#include "compiler/Kernels/LceRowLoss.h"

#include <limits>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace lossjit;

namespace {
MemRefType flat(Type elem) { return MemRefType::get({ShapedType::kDynamic}, elem); }

/// A kernel function with named arguments; `arg(name)` finds one.
struct HostKernel {
  mutable func::FuncOp fn;
  std::vector<std::string> names;
  Value arg(llvm::StringRef name) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        return fn.getArgument(i);
    return {};
  }
};

HostKernel makeKernel(OpBuilder &b, Location loc, Block *module, StringRef name,
                      ArrayRef<std::pair<std::string, Type>> args) {
  b.setInsertionPointToEnd(module);
  SmallVector<Type> types;
  HostKernel k;
  for (const auto &[n, t] : args) {
    types.push_back(t);
    k.names.push_back(n);
  }
  k.fn = func::FuncOp::create(b, loc, name, b.getFunctionType(types, {}));
  b.setInsertionPointToStart(k.fn.addEntryBlock());
  return k;
}

/// Scratch of `count` f32 on the stack of the calling thread, hoisted to the
/// entry so loops do not grow the stack.
Value stackF32(OpBuilder &b, Location loc, Value count) {
  return memref::AllocaOp::create(b, loc, flat(b.getF32Type()), ValueRange{count});
}

struct BackwardBuilder {
  OpBuilder &b;
  Location loc;
  Block *module;
  const LceSpec &spec;
  const CpuTileConfig &tile;

  Type st() const { return spec.storage; }
  Type f32() const { return b.getF32Type(); }
  Type idx() const { return b.getIndexType(); }
  std::vector<std::pair<std::string, Type>> inputs(bool withBias) const {
    std::vector<std::pair<std::string, Type>> a = {{"x", flat(st())}, {"w", flat(st())}};
    if (withBias && spec.hasBias)
      a.push_back({"bias", flat(st())});
    a.push_back({"labels", flat(spec.labelType)});
    a.push_back({"lse", flat(f32())});
    a.push_back({"grow", flat(f32())});
    return a;
  }

  /// Offsets of `rows` rows starting at `first`, clamped to `last` (clamped
  /// rows recompute a valid row and are never stored).
  SmallVector<Value> clampedRows(KernelEmitter &e, Value first, Value last,
                                 int64_t rows) {
    SmallVector<Value> r;
    for (int64_t i = 0; i < rows; ++i)
      r.push_back(e.minUI(e.add(first, e.index(i)), last));
    return r;
  }

  void buildScale() {
    // The fused forward+backward has no grad_loss: it computes the gradients
    // of grad_loss = 1, which the caller rescales later.
    std::vector<std::pair<std::string, Type>> args = {{"labels", flat(spec.labelType)}};
    if (!spec.fusedForward)
      args.push_back({"grad_loss", flat(f32())});
    args.insert(args.end(), {{"grow", flat(f32())}, {"N", idx()}, {"V", idx()}});
    HostKernel k = makeKernel(b, loc, module, "lce_bwd_scale", args);
    KernelEmitter e(b, loc);
    Value labels = k.arg("labels"), n = k.arg("N");
    Value count = e.forLoop(e.index(0), n, e.index(1), {e.i32(0)},
                            [&](KernelEmitter &le, Value r, ValueRange it) {
                              Value counted = le.cmpI(arith::CmpIPredicate::ne,
                                                      le.loadLabel(labels, r),
                                                      le.index(spec.ignoreIndex));
                              return SmallVector<Value>{arith::AddIOp::create(
                                  le.builder(), le.location(), it[0],
                                  le.select(counted, le.i32(1), le.i32(0)))};
                            })[0];
    Value scale = emitGradScale(e, spec, k.arg("grad_loss"), count);
    e.forLoop(e.index(0), n, e.index(1), {}, [&](KernelEmitter &le, Value r, ValueRange) {
      le.store(emitRowFactor(le, spec, k.arg("labels"), k.arg("grad_loss"), scale, r,
                             k.arg("V")),
               k.arg("grow"), r);
      return SmallVector<Value>{};
    });
    func::ReturnOp::create(b, loc);
  }

  /// dZ of `rows` rows for vocab column `col`: g·(exp(z − lse) − [label = col]).
  SmallVector<Value> rowGrads(KernelEmitter &e, ArrayRef<Value> z, ArrayRef<Value> rows,
                              Value col, Value labels, Value lse, Value grow) {
    SmallVector<Value> dz;
    for (size_t i = 0; i < rows.size(); ++i)
      dz.push_back(emitLogitGrad(e, spec, z[i], e.load(lse, rows[i]), e.load(grow, rows[i]),
                                 e.cmpI(arith::CmpIPredicate::eq,
                                        e.loadLabel(labels, rows[i]), col)));
    return dz;
  }

  /// Rows-parallel: dX of rows [row_begin, row_end), recomputing the logits.
  void buildDxRecompute() {
    auto args = inputs(true);
    args.insert(args.end(), {{"grad_x", flat(st())}, {"row_begin", idx()},
                             {"row_end", idx()}, {"V", idx()}, {"D", idx()}});
    HostKernel k = makeKernel(b, loc, module, "lce_bwd_dx", args);
    const int64_t lanes = tile.vectorWidth;
    Value x = k.arg("x"), w = k.arg("w"), bias = k.arg("bias"), d = k.arg("D");
    emitDxRows(k, [&](KernelEmitter &ve, ArrayRef<Value> rows, Value col, Value dMain) {
      SmallVector<Value> xOff;
      for (Value row : rows)
        xOff.push_back(ve.mul(row, d));
      SmallVector<Value> z = emitBlockDot(ve, x, xOff, w, ve.mul(col, d), d, dMain, lanes);
      if (bias) {
        Value bv = ve.loadF32(bias, col);
        for (Value &zi : z)
          zi = ve.addF(zi, bv);
      }
      return rowGrads(ve, z, rows, col, k.arg("labels"), k.arg("lse"), k.arg("grow"));
    });
  }

  /// The dX skeleton both schedules share: rows in blocks of BR, f32
  /// accumulators on the stack, a sweep over the vocabulary adding
  /// dZ[r,j]·W[j] (dZ of column j from `dzOf`), one rounding per element.
  void emitDxRows(HostKernel &k,
                  const std::function<SmallVector<Value>(KernelEmitter &, ArrayRef<Value> rows,
                                                         Value col, Value dMain)> &dzOf) {
    const int64_t br = tile.blockRows, lanes = tile.vectorWidth;
    KernelEmitter e(b, loc);
    Value d = k.arg("D"), rowEnd = k.arg("row_end");
    Value dMain = e.mul(e.divUI(d, e.index(lanes)), e.index(lanes));
    Value acc = stackF32(b, loc, e.mul(e.index(br), d));
    e.forLoop(k.arg("row_begin"), rowEnd, e.index(br), {},
              [&](KernelEmitter &re, Value rb, ValueRange) {
                SmallVector<Value> rows = clampedRows(re, rb, re.sub(rowEnd, re.index(1)), br);
                SmallVector<Value> accOff;
                for (int64_t i = 0; i < br; ++i) {
                  accOff.push_back(re.mul(re.index(i), d));
                  emitZeroRow(re, acc, accOff.back(), d);
                }
                re.forLoop(re.index(0), k.arg("V"), re.index(1), {},
                           [&](KernelEmitter &ve, Value col, ValueRange) {
                             SmallVector<Value> dz = dzOf(ve, rows, col, dMain);
                             emitBlockAxpy(ve, acc, accOff, dz, k.arg("w"), ve.mul(col, d), d,
                                           dMain, lanes);
                             return SmallVector<Value>{};
                           });
                for (int64_t i = 0; i < br; ++i) {
                  Value row = re.add(rb, re.index(i));
                  re.ifThen(re.cmpI(arith::CmpIPredicate::ult, row, rowEnd), [&](KernelEmitter &se) {
                    emitCopyRow(se, acc, accOff[i], k.arg("grad_x"), se.mul(row, d), d);
                  });
                }
                return SmallVector<Value>{};
              });
    func::ReturnOp::create(b, loc);
  }


  /// Vocab-parallel: dW (and db) of vocab rows [col_begin, col_end),
  /// recomputing the logits; rows are summed in order 0..N-1.
  void buildDwRecompute() {
    auto args = inputs(true);
    args.push_back({"grad_w", flat(st())});
    if (spec.needsGradBias())
      args.push_back({"grad_bias", flat(st())});
    args.insert(args.end(), {{"col_begin", idx()}, {"col_end", idx()}, {"N", idx()},
                             {"D", idx()}});
    HostKernel k = makeKernel(b, loc, module, "lce_bwd_dw", args);
    const int64_t br = tile.blockRows, lanes = tile.vectorWidth;
    KernelEmitter e(b, loc);
    Value x = k.arg("x"), w = k.arg("w"), bias = k.arg("bias"), d = k.arg("D");
    Value colEnd = k.arg("col_end");
    Value dMain = e.mul(e.divUI(d, e.index(lanes)), e.index(lanes));
    Value acc = stackF32(b, loc, e.mul(e.index(br), d));
    e.forLoop(k.arg("col_begin"), colEnd, e.index(br), {},
              [&](KernelEmitter &ce, Value cb, ValueRange) {
                SmallVector<Value> cols = clampedRows(ce, cb, ce.sub(colEnd, ce.index(1)), br);
                SmallVector<Value> wOff, accOff, bv;
                SmallVector<Value> dbInit;
                for (int64_t i = 0; i < br; ++i) {
                  wOff.push_back(ce.mul(cols[i], d));
                  accOff.push_back(ce.mul(ce.index(i), d));
                  emitZeroRow(ce, acc, accOff.back(), d);
                  if (bias)
                    bv.push_back(ce.loadF32(bias, cols[i]));
                  dbInit.push_back(ce.f32(0.0));
                }
                SmallVector<Value> db = ce.forLoop(
                    ce.index(0), k.arg("N"), ce.index(1), dbInit,
                    [&](KernelEmitter &re, Value row, ValueRange it) {
                      Value g = re.load(k.arg("grow"), row);
                      Value active = re.cmpF(arith::CmpFPredicate::UNE, g, re.f32(0.0));
                      // Rows with g = 0 (ignored) add nothing: skip their dot products.
                      SmallVector<Value> next(it.begin(), it.end());
                      auto ifOp = scf::IfOp::create(
                          re.builder(), re.location(), TypeRange(ValueRange(it)), active,
                          /*withElseRegion=*/true);
                      {
                        OpBuilder::InsertionGuard guard(re.builder());
                        re.builder().setInsertionPointToStart(&ifOp.getThenRegion().front());
                        KernelEmitter te(re.builder(), re.location());
                        Value xOff = te.mul(row, d);
                        SmallVector<Value> z = emitBlockDot(te, w, wOff, x, xOff, d, dMain, lanes);
                        Value lse = te.load(k.arg("lse"), row);
                        Value label = te.loadLabel(k.arg("labels"), row);
                        SmallVector<Value> dz, sums;
                        for (int64_t i = 0; i < br; ++i) {
                          Value zi = bias ? te.addF(z[i], bv[i]) : z[i];
                          dz.push_back(emitLogitGrad(te, spec, zi, lse, g,
                                                     te.cmpI(arith::CmpIPredicate::eq, label, cols[i])));
                          sums.push_back(te.addF(it[i], dz.back()));
                        }
                        emitBlockAxpy(te, acc, accOff, dz, x, xOff, d, dMain, lanes);
                        scf::YieldOp::create(te.builder(), te.location(), sums);
                        te.builder().setInsertionPointToStart(&ifOp.getElseRegion().front());
                        scf::YieldOp::create(te.builder(), te.location(), ValueRange(it));
                      }
                      return SmallVector<Value>(ifOp.getResults());
                    });
                for (int64_t i = 0; i < br; ++i) {
                  Value col = ce.add(cb, ce.index(i));
                  ce.ifThen(ce.cmpI(arith::CmpIPredicate::ult, col, colEnd), [&](KernelEmitter &se) {
                    emitCopyRow(se, acc, accOff[i], k.arg("grad_w"), se.mul(col, d), d);
                    if (spec.needsGradBias()) {
                      Value v = db[i];
                      if (!spec.storesF32())
                        v = arith::TruncFOp::create(se.builder(), se.location(), st(), v);
                      se.store(v, k.arg("grad_bias"), col);
                    }
                  });
                }
                return SmallVector<Value>{};
              });
    func::ReturnOp::create(b, loc);
  }

  /// Rows-parallel (per chunk): dZ rows into the [C,V] workspace.
  /// With `storeRaw` (fused forward) the raw logits x·w + b go to the
  /// workspace instead of dZ.
  void buildDz(bool storeRaw = false) {
    std::vector<std::pair<std::string, Type>> args;
    if (storeRaw) {
      args = {{"x", flat(st())}, {"w", flat(st())}};
      if (spec.hasBias)
        args.push_back({"bias", flat(st())});
    } else {
      args = inputs(true);
    }
    args.insert(args.end(), {{"dz", flat(f32())}, {"row_begin", idx()}, {"row_end", idx()},
                             {"chunk_begin", idx()}, {"V", idx()}, {"D", idx()}});
    HostKernel k = makeKernel(b, loc, module, storeRaw ? "lce_fused_z" : "lce_bwd_dz", args);
    const int64_t br = tile.blockRows, lanes = tile.vectorWidth;
    KernelEmitter e(b, loc);
    Value x = k.arg("x"), w = k.arg("w"), bias = k.arg("bias"), d = k.arg("D"),
          v = k.arg("V");
    Value rowEnd = k.arg("row_end"), chunkBegin = k.arg("chunk_begin");
    Value dMain = e.mul(e.divUI(d, e.index(lanes)), e.index(lanes));
    // Like the forward: panels of rows sweep the vocabulary tile by tile so
    // each W tile is read once per panel. Every dZ element is computed by
    // the same operations whatever the tiling.
    const int64_t panel = br * tile.panelBlocks, vtile = tile.vocabTile;
    e.forLoop(
        k.arg("row_begin"), rowEnd, e.index(panel), {},
        [&](KernelEmitter &pe, Value pb, ValueRange) {
          Value panelEnd = pe.minUI(pe.add(pb, pe.index(panel)), rowEnd);
          pe.forLoop(
              pe.index(0), v, pe.index(vtile), {}, [&](KernelEmitter &te, Value vt, ValueRange) {
                Value vtEnd = te.minUI(te.add(vt, te.index(vtile)), v);
                te.forLoop(pb, panelEnd, te.index(br), {},
                           [&](KernelEmitter &re, Value rb, ValueRange) {
                             SmallVector<Value> rows =
                                 clampedRows(re, rb, re.sub(panelEnd, re.index(1)), br);
                             SmallVector<Value> xOff, dzOff;
                             for (int64_t i = 0; i < br; ++i) {
                               xOff.push_back(re.mul(rows[i], d));
                               dzOff.push_back(re.mul(re.sub(rows[i], chunkBegin), v));
                             }
                             re.forLoop(vt, vtEnd, re.index(1), {},
                                        [&](KernelEmitter &ve, Value col, ValueRange) {
                                          SmallVector<Value> z = emitBlockDot(
                                              ve, x, xOff, w, ve.mul(col, d), d, dMain, lanes);
                                          if (bias) {
                                            Value bv = ve.loadF32(bias, col);
                                            for (Value &zi : z)
                                              zi = ve.addF(zi, bv);
                                          }
                                          SmallVector<Value> dz =
                                              storeRaw ? z
                                                       : rowGrads(ve, z, rows, col, k.arg("labels"),
                                                                  k.arg("lse"), k.arg("grow"));
                                          // Clamped duplicates rewrite their row's own value.
                                          for (int64_t i = 0; i < br; ++i)
                                            ve.store(dz[i], k.arg("dz"), ve.add(dzOff[i], col));
                                          return SmallVector<Value>{};
                                        });
                             return SmallVector<Value>{};
                           });
                return SmallVector<Value>{};
              });
          return SmallVector<Value>{};
        });
    func::ReturnOp::create(b, loc);
  }

  /// Rows-parallel (per chunk, fused forward): raw logits → lse and the row
  /// loss, summing over the vocabulary in order.
  void buildFusedLse() {
    HostKernel k = makeKernel(b, loc, module, "lce_fused_lse",
                              {{"labels", flat(spec.labelType)},
                               {"dz", flat(f32())},
                               {"lse", flat(f32())},
                               {"loss_rows", flat(f32())},
                               {"row_begin", idx()},
                               {"row_end", idx()},
                               {"chunk_begin", idx()},
                               {"V", idx()}});
    KernelEmitter e(b, loc);
    Value v = k.arg("V"), cb = k.arg("chunk_begin");
    e.forLoop(k.arg("row_begin"), k.arg("row_end"), e.index(1), {},
              [&](KernelEmitter &re, Value row, ValueRange) {
                emitRowFromRawLogits(re, spec, k.arg("dz"), re.mul(re.sub(row, cb), v), v,
                                     k.arg("labels"), row, k.arg("lse"), k.arg("loss_rows"));
                return SmallVector<Value>{};
              });
    func::ReturnOp::create(b, loc);
  }

  /// Rows-parallel (per chunk, fused forward): raw logits → dZ in place.
  void buildFusedDz() {
    HostKernel k = makeKernel(b, loc, module, "lce_fused_dz",
                              {{"labels", flat(spec.labelType)}, {"lse", flat(f32())},
                               {"grow", flat(f32())}, {"dz", flat(f32())},
                               {"row_begin", idx()}, {"row_end", idx()},
                               {"chunk_begin", idx()}, {"V", idx()}});
    KernelEmitter e(b, loc);
    Value v = k.arg("V"), cb = k.arg("chunk_begin");
    e.forLoop(k.arg("row_begin"), k.arg("row_end"), e.index(1), {},
              [&](KernelEmitter &re, Value row, ValueRange) {
                Value base = re.mul(re.sub(row, cb), v);
                Value lse = re.load(k.arg("lse"), row), g = re.load(k.arg("grow"), row);
                Value label = re.loadLabel(k.arg("labels"), row);
                re.forLoop(re.index(0), v, re.index(1), {},
                           [&](KernelEmitter &le, Value j, ValueRange) {
                             Value at = le.add(base, j);
                             le.store(emitLogitGrad(le, spec, le.load(k.arg("dz"), at), lse, g,
                                                    le.cmpI(arith::CmpIPredicate::eq, label, j)),
                                      k.arg("dz"), at);
                             return SmallVector<Value>{};
                           });
                return SmallVector<Value>{};
              });
    func::ReturnOp::create(b, loc);
  }

  /// Rows-parallel (per chunk): dX rows = dZ rows · W.
  void buildDxChunk() {
    HostKernel k = makeKernel(b, loc, module, "lce_bwd_dx_chunk",
                              {{"dz", flat(f32())}, {"w", flat(st())}, {"grad_x", flat(st())},
                               {"row_begin", idx()}, {"row_end", idx()},
                               {"chunk_begin", idx()}, {"V", idx()}, {"D", idx()}});
    emitDxRows(k, [&](KernelEmitter &ve, ArrayRef<Value> rows, Value col, Value) {
      SmallVector<Value> dz;
      for (Value row : rows)
        dz.push_back(ve.load(k.arg("dz"),
                             ve.add(ve.mul(ve.sub(row, k.arg("chunk_begin")), k.arg("V")), col)));
      return dz;
    });
  }


  /// Vocab-parallel (per chunk): dW_acc[j] (+)= Σ_{r in chunk} dZ[r,j]·x_r,
  /// starting from 0 at the first chunk; db likewise.
  void buildDwChunk() {
    std::vector<std::pair<std::string, Type>> args = {
        {"dz", flat(f32())}, {"x", flat(st())}, {"dw_acc", flat(f32())}};
    if (spec.needsGradBias())
      args.push_back({"db_acc", flat(f32())});
    args.insert(args.end(), {{"col_begin", idx()}, {"col_end", idx()},
                             {"chunk_begin", idx()}, {"chunk_end", idx()},
                             {"V", idx()}, {"D", idx()}});
    HostKernel k = makeKernel(b, loc, module, "lce_bwd_dw_chunk", args);
    KernelEmitter e(b, loc);
    Value d = k.arg("D"), v = k.arg("V"), chunkBegin = k.arg("chunk_begin");
    const int64_t lanes = tile.vectorWidth;
    Value dMain = e.mul(e.divUI(d, e.index(lanes)), e.index(lanes));
    Value first = e.cmpI(arith::CmpIPredicate::eq, chunkBegin, e.index(0));
    e.forLoop(k.arg("col_begin"), k.arg("col_end"), e.index(1), {},
              [&](KernelEmitter &ce, Value col, ValueRange) {
                Value accOff = ce.mul(col, d);
                ce.ifThen(first, [&](KernelEmitter &ze) { emitZeroRow(ze, k.arg("dw_acc"), accOff, d); });
                Value db0 = ce.f32(0.0);
                if (Value dbAcc = k.arg("db_acc"))
                  db0 = ce.ifElse(first, [](KernelEmitter &z) { return z.f32(0.0); },
                                  [&](KernelEmitter &l) { return l.load(dbAcc, col); });
                Value db = ce.forLoop(chunkBegin, k.arg("chunk_end"), ce.index(1), {db0},
                                      [&](KernelEmitter &re, Value row, ValueRange it) {
                                        Value dz = re.load(k.arg("dz"),
                                                           re.add(re.mul(re.sub(row, chunkBegin), v), col));
                                        emitBlockAxpy(re, k.arg("dw_acc"), {accOff}, {dz}, k.arg("x"),
                                                      re.mul(row, d), d, dMain, lanes);
                                        return SmallVector<Value>{re.addF(it[0], dz)};
                                      })[0];
                if (Value dbAcc = k.arg("db_acc"))
                  ce.store(db, dbAcc, col);
                return SmallVector<Value>{};
              });
    func::ReturnOp::create(b, loc);
  }

  /// Vocab-parallel: one rounding of the f32 accumulators to storage.
  void buildFinish() {
    std::vector<std::pair<std::string, Type>> args = {{"dw_acc", flat(f32())},
                                                       {"grad_w", flat(st())}};
    if (spec.needsGradBias())
      args.insert(args.end(), {{"db_acc", flat(f32())}, {"grad_bias", flat(st())}});
    args.insert(args.end(), {{"col_begin", idx()}, {"col_end", idx()}, {"D", idx()}});
    HostKernel k = makeKernel(b, loc, module, "lce_bwd_finish", args);
    KernelEmitter e(b, loc);
    Value d = k.arg("D");
    e.forLoop(k.arg("col_begin"), k.arg("col_end"), e.index(1), {},
              [&](KernelEmitter &ce, Value col, ValueRange) {
                emitCopyRow(ce, k.arg("dw_acc"), ce.mul(col, d), k.arg("grad_w"),
                            ce.mul(col, d), d);
                if (spec.needsGradBias())
                  emitCopyRow(ce, k.arg("db_acc"), col, k.arg("grad_bias"), col, ce.index(1));
                return SmallVector<Value>{};
              });
    func::ReturnOp::create(b, loc);
  }
};

std::vector<std::string> names(std::initializer_list<const char *> list) {
  return std::vector<std::string>(list.begin(), list.end());
}
} // namespace

void lossjit::buildLceBackwardCpuKernels(OpBuilder &builder, Location loc,
                                         StringRef moduleName, const LceSpec &spec,
                                         const CpuTileConfig &tile, LaunchPlan &plan) {
  OpBuilder::InsertionGuard guard(builder);
  Block *module = builder.getInsertionBlock();
  BackwardBuilder kb{builder, loc, module, spec, tile};
  std::string mod = moduleName.str();
  beginBackwardPlan(spec, tile.str(), plan);
  auto add = [&](std::string name, std::vector<std::string> args, std::string parallel,
                 bool perChunk) {
    plan.kernels.push_back({std::move(name), mod, {"1", "1", "1"}, {1, 1, 1}, 0,
                            std::move(args), std::move(parallel), perChunk});
  };
  kb.buildScale();
  add("lce_bwd_scale",
      spec.fusedForward ? names({"labels", "grow", "N", "V"})
                        : names({"labels", "grad_loss", "grow", "N", "V"}),
      "none", false);
  std::vector<std::string> in = {"x", "w"};
  if (spec.hasBias)
    in.push_back("bias");
  in.insert(in.end(), {"labels", "lse", "grow"});

  if (spec.strategy == "recompute") {
    if (spec.needsGradX) {
      kb.buildDxRecompute();
      auto a = in;
      a.insert(a.end(), {"grad_x", "row_begin", "row_end", "V", "D"});
      add("lce_bwd_dx", a, "rows", false);
    }
    if (spec.needsGradW) {
      kb.buildDwRecompute();
      auto a = in;
      a.push_back("grad_w");
      if (spec.needsGradBias())
        a.push_back("grad_bias");
      a.insert(a.end(), {"col_begin", "col_end", "N", "D"});
      add("lce_bwd_dw", a, "vocab", false);
    }
    return;
  }

  // chunked: C rows of dZ per chunk within the budget.
  ChunkedAccumulators acc = addChunkedBackwardPlan(spec, plan);
  bool separateAcc = acc.separate;
  std::string dwAcc = acc.dw, dbAcc = acc.db;
  if (spec.fusedForward) {
    // Loss, lse and the gradients of grad_loss = 1 from one pass over the
    // logits: raw logits per chunk, lse and row losses from them, dZ in place.
    plan.workspaces.push_back({"loss_rows", "f32", "N"});
    kb.buildDz(/*storeRaw=*/true);
    std::vector<std::string> z = {"x", "w"};
    if (spec.hasBias)
      z.push_back("bias");
    z.insert(z.end(), {"dz", "row_begin", "row_end", "chunk_begin", "V", "D"});
    add("lce_fused_z", z, "rows", true);
    kb.buildFusedLse();
    add("lce_fused_lse",
        names({"labels", "dz", "lse", "loss_rows", "row_begin", "row_end", "chunk_begin", "V"}),
        "rows", true);
    kb.buildFusedDz();
    add("lce_fused_dz",
        names({"labels", "lse", "grow", "dz", "row_begin", "row_end", "chunk_begin", "V"}),
        "rows", true);
  } else {
    kb.buildDz();
    auto a = in;
    a.insert(a.end(), {"dz", "row_begin", "row_end", "chunk_begin", "V", "D"});
    add("lce_bwd_dz", a, "rows", true);
  }
  if (spec.needsGradX) {
    kb.buildDxChunk();
    add("lce_bwd_dx_chunk",
        names({"dz", "w", "grad_x", "row_begin", "row_end", "chunk_begin", "V", "D"}),
        "rows", true);
  }
  if (spec.needsGradW) {
    kb.buildDwChunk();
    std::vector<std::string> dw = {"dz", "x", dwAcc};
    if (spec.needsGradBias())
      dw.push_back(dbAcc);
    dw.insert(dw.end(), {"col_begin", "col_end", "chunk_begin", "chunk_end", "V", "D"});
    add("lce_bwd_dw_chunk", dw, "vocab", true);
    if (separateAcc) {
      kb.buildFinish();
      std::vector<std::string> fin = {"dw_acc", "grad_w"};
      if (spec.needsGradBias())
        fin.insert(fin.end(), {"db_acc", "grad_bias"});
      fin.insert(fin.end(), {"col_begin", "col_end", "D"});
      add("lce_bwd_finish", fin, "vocab", false);
    }
  }
  if (spec.fusedForward) {
    builder.setInsertionPointToEnd(module);
    buildLceReduceCpuKernel(builder, loc, spec, tile);
    add("lce_reduce", names({"labels", "loss_rows", "loss", "N"}), "none", false);
  }
}
