//===- LinearCrossEntropyBackwardGPU.cpp - GPU gradient kernels -----------===//

#include "compiler/Kernels/LinearCrossEntropyBackwardGPU.h"
#include "compiler/Kernels/GpuKernelSupport.h"
#include "compiler/Kernels/LceBackwardPlan.h"
#include "compiler/Kernels/LceGradient.h"
#include "compiler/Kernels/LceRowLoss.h"
#include "compiler/Kernels/LinearCrossEntropyGPU.h"

#include <limits>

using namespace mlir;
using namespace lossjit;

namespace {
/// A kernel's arguments by name.
struct Args {
  gpu::GPUFuncOp fn;
  std::vector<std::string> names;
  Value operator[](llvm::StringRef name) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        return fn.getArgument(i);
    return {};
  }
};

struct GpuBackwardBuilder {
  OpBuilder &b;
  Location loc;
  const LceSpec &spec;
  const TileConfig &tile;
  Block *parent;
  Block::iterator at;
  std::string prefix;

  Type st() const { return spec.storage; }
  Type f32() const { return b.getF32Type(); }
  Type idx() const { return b.getIndexType(); }

  /// A new gpu.module `<prefix>_<name>` holding one kernel with these args.
  Args kernel(StringRef name, ArrayRef<std::pair<std::string, Type>> args,
              TypeRange workgroup = {}) {
    b.setInsertionPoint(parent, at);
    auto module = gpu::GPUModuleOp::create(b, loc, (prefix + "_" + name).str());
    b.setInsertionPointToEnd(module.getBody());
    SmallVector<Type> types;
    Args a;
    for (const auto &[n, t] : args) {
      types.push_back(t);
      a.names.push_back(n);
    }
    a.fn = makeGpuKernel(b, loc, name, types, workgroup, tile.threads);
    return a;
  }

  void buildScale() {
    MLIRContext *ctx = b.getContext();
    const int64_t threads = tile.threads;
    // The fused forward+backward has no grad_loss yet: it computes the
    // gradients of grad_loss = 1, which the caller rescales later.
    std::vector<std::pair<std::string, Type>> args = {{"labels", gpuFlat(spec.labelType)}};
    if (!spec.fusedForward)
      args.push_back({"grad_loss", gpuFlat(f32())});
    args.insert(args.end(), {{"grow", gpuFlat(f32())}, {"N", idx()}, {"V", idx()}});
    Args a = kernel("lce_bwd_scale", args, {gpuShared(ctx, threads, b.getI32Type())});
    Value counts = a.fn.getWorkgroupAttributions()[0];
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc), T = e.index(threads), n = a["N"];
    Value mine = e.forLoop(tid, n, T, {e.i32(0)}, [&](KernelEmitter &le, Value r, ValueRange it) {
      Value counted = le.cmpI(arith::CmpIPredicate::ne, le.loadLabel(a["labels"], r),
                              le.index(spec.ignoreIndex));
      return SmallVector<Value>{arith::AddIOp::create(le.builder(), le.location(), it[0],
                                                      le.select(counted, le.i32(1), le.i32(0)))};
    })[0];
    e.store(mine, counts, tid);
    gpu::BarrierOp::create(b, loc);
    emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
      in.store(arith::AddIOp::create(in.builder(), in.location(), in.load(counts, dst),
                                     in.load(counts, src)),
               counts, dst);
    });
    Value scale = emitGradScale(e, spec, a["grad_loss"], e.load(counts, e.index(0)));
    e.forLoop(tid, n, T, {}, [&](KernelEmitter &le, Value r, ValueRange) {
      le.store(emitRowFactor(le, spec, a["labels"], a["grad_loss"], scale, r, a["V"]),
               a["grow"], r);
      return SmallVector<Value>{};
    });
    gpu::ReturnOp::create(b, loc);
  }

  /// dZ tile → [C,V] workspace; with `storeRaw` (fused forward) the raw
  /// logits x·w + b instead, which lce_fused_lse/lce_fused_dz then consume.
  void buildDz(bool storeRaw = false) {
    std::vector<std::pair<std::string, Type>> args = {{"x", gpuFlat(st())}, {"w", gpuFlat(st())}};
    if (spec.hasBias)
      args.push_back({"bias", gpuFlat(st())});
    if (!storeRaw)
      args.insert(args.end(), {{"labels", gpuFlat(spec.labelType)}, {"lse", gpuFlat(f32())},
                               {"grow", gpuFlat(f32())}});
    args.insert(args.end(), {{"dz", gpuFlat(f32())}, {"chunk_begin", idx()},
                             {"chunk_end", idx()}, {"V", idx()}, {"D", idx()}});
    Args a = kernel(storeRaw ? "lce_fused_z" : "lce_bwd_dz", args);
    const int64_t bn = tile.blockRows;
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value by = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    Value v = a["V"], d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value col = e.add(e.mul(by, e.index(tile.threads)), tid);
    Value colOk = e.cmpI(arith::CmpIPredicate::ult, col, v);
    Value colC = e.minUI(col, e.sub(v, e.index(1)));
    Value first = e.add(cb, e.mul(bx, e.index(bn)));
    Value last = e.sub(ce, e.index(1));
    SmallVector<Value> rows, xOff;
    for (int64_t i = 0; i < bn; ++i) {
      rows.push_back(e.minUI(e.add(first, e.index(i)), last));
      xOff.push_back(e.mul(rows.back(), d));
    }
    Value wOff = e.mul(colC, d);
    SmallVector<Value> z = e.forLoop(e.index(0), d, e.index(1), SmallVector<Value>(bn, e.f32(0.0)),
                                     [&](KernelEmitter &ke, Value k, ValueRange acc) {
                                       Value wv = ke.loadF32(a["w"], ke.add(wOff, k));
                                       SmallVector<Value> next;
                                       for (int64_t i = 0; i < bn; ++i)
                                         next.push_back(ke.fma(ke.loadF32(a["x"], ke.add(xOff[i], k)),
                                                               wv, acc[i]));
                                       return next;
                                     });
    Value bv = spec.hasBias ? e.loadF32(a["bias"], colC) : Value();
    for (int64_t i = 0; i < bn; ++i) {
      Value zi = bv ? e.addF(z[i], bv) : z[i];
      Value dz = storeRaw ? zi
                          : emitLogitGrad(e, spec, zi, e.load(a["lse"], rows[i]),
                                          e.load(a["grow"], rows[i]),
                                          e.cmpI(arith::CmpIPredicate::eq,
                                                 e.loadLabel(a["labels"], rows[i]), colC));
      Value rowOk = e.cmpI(arith::CmpIPredicate::ult, e.add(first, e.index(i)), ce);
      e.ifThen(e.andI(rowOk, colOk), [&](KernelEmitter &se) {
        se.store(dz, a["dz"], se.add(se.mul(se.sub(rows[i], cb), v), colC));
      });
    }
    gpu::ReturnOp::create(b, loc);
  }

  void buildDx() {
    Args a = kernel("lce_bwd_dx", {{"dz", gpuFlat(f32())}, {"w", gpuFlat(st())},
                                   {"grad_x", gpuFlat(st())}, {"chunk_begin", idx()},
                                   {"chunk_end", idx()}, {"V", idx()}, {"D", idx()}});
    const int64_t bn = tile.blockRows;
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value by = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    Value v = a["V"], d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value col = e.add(e.mul(by, e.index(tile.threads)), tid);
    Value colC = e.minUI(col, e.sub(d, e.index(1)));
    Value first = e.add(cb, e.mul(bx, e.index(bn)));
    Value last = e.sub(ce, e.index(1));
    SmallVector<Value> rows, dzOff;
    for (int64_t i = 0; i < bn; ++i) {
      rows.push_back(e.minUI(e.add(first, e.index(i)), last));
      dzOff.push_back(e.mul(e.sub(rows.back(), cb), v));
    }
    // Thread d sums Σ_j dZ[r,j]·W[j,d] over j in order: W reads coalesce.
    SmallVector<Value> acc = e.forLoop(e.index(0), v, e.index(1), SmallVector<Value>(bn, e.f32(0.0)),
                                       [&](KernelEmitter &ke, Value j, ValueRange it) {
                                         Value wv = ke.loadF32(a["w"], ke.add(ke.mul(j, d), colC));
                                         SmallVector<Value> next;
                                         for (int64_t i = 0; i < bn; ++i)
                                           next.push_back(ke.fma(ke.load(a["dz"], ke.add(dzOff[i], j)),
                                                                 wv, it[i]));
                                         return next;
                                       });
    Value colOk = e.cmpI(arith::CmpIPredicate::ult, col, d);
    for (int64_t i = 0; i < bn; ++i) {
      Value rowOk = e.cmpI(arith::CmpIPredicate::ult, e.add(first, e.index(i)), ce);
      e.ifThen(e.andI(rowOk, colOk), [&](KernelEmitter &se) {
        Value out = acc[i];
        if (!spec.storesF32())
          out = arith::TruncFOp::create(se.builder(), se.location(), st(), out);
        se.store(out, a["grad_x"], se.add(se.mul(rows[i], d), colC));
      });
    }
    gpu::ReturnOp::create(b, loc);
  }

  void buildDw(StringRef dwAcc, StringRef dbAcc) {
    std::vector<std::pair<std::string, Type>> args = {
        {"dz", gpuFlat(f32())}, {"x", gpuFlat(st())}, {"dw_acc", gpuFlat(f32())}};
    if (spec.needsGradBias())
      args.push_back({"db_acc", gpuFlat(f32())});
    args.insert(args.end(), {{"chunk_begin", idx()}, {"chunk_end", idx()}, {"V", idx()},
                             {"D", idx()}});
    Args a = kernel("lce_bwd_dw", args);
    const int64_t bn = tile.blockRows;
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value by = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    Value v = a["V"], d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value col = e.add(e.mul(by, e.index(tile.threads)), tid);
    Value colC = e.minUI(col, e.sub(d, e.index(1)));
    Value firstJ = e.mul(bx, e.index(bn));
    Value lastJ = e.sub(v, e.index(1));
    // Only the thread that stores an accumulator reads its previous value:
    // clamped threads (col ≥ D) and non-writers start from 0, so no thread
    // reads what another one writes.
    Value colOk = e.cmpI(arith::CmpIPredicate::ult, col, d);
    Value biasWriter = e.cmpI(arith::CmpIPredicate::eq, col, e.index(0));
    Value notFirst = e.cmpI(arith::CmpIPredicate::ne, cb, e.index(0));
    Value resumeW = e.andI(notFirst, colOk);
    Value resumeB = e.andI(notFirst, biasWriter);
    SmallVector<Value> js, init;
    for (int64_t i = 0; i < bn; ++i) {
      js.push_back(e.minUI(e.add(firstJ, e.index(i)), lastJ));
      Value at = e.add(e.mul(js.back(), d), colC);
      init.push_back(e.ifElse(resumeW, [&](KernelEmitter &l) { return l.load(a["dw_acc"], at); },
                              [](KernelEmitter &z) { return z.f32(0.0); }));
    }
    Value dbAcc0 = a["db_acc"];
    for (int64_t i = 0; i < bn && dbAcc0; ++i)
      init.push_back(e.ifElse(resumeB, [&](KernelEmitter &l) { return l.load(dbAcc0, js[i]); },
                              [](KernelEmitter &z) { return z.f32(0.0); }));
    // Rows of the chunk in order: dW[j,d] += dZ[r,j]·X[r,d] (X reads coalesce).
    SmallVector<Value> acc = e.forLoop(cb, ce, e.index(1), init,
                                       [&](KernelEmitter &ke, Value r, ValueRange it) {
                                         Value xv = ke.loadF32(a["x"], ke.add(ke.mul(r, d), colC));
                                         Value dzRow = ke.mul(ke.sub(r, cb), v);
                                         SmallVector<Value> next;
                                         SmallVector<Value> dzs;
                                         for (int64_t i = 0; i < bn; ++i) {
                                           dzs.push_back(ke.load(a["dz"], ke.add(dzRow, js[i])));
                                           next.push_back(ke.fma(dzs.back(), xv, it[i]));
                                         }
                                         for (int64_t i = 0; dbAcc0 && i < bn; ++i)
                                           next.push_back(ke.addF(it[bn + i], dzs[i]));
                                         return next;
                                       });
    for (int64_t i = 0; i < bn; ++i) {
      Value jOk = e.cmpI(arith::CmpIPredicate::ult, e.add(firstJ, e.index(i)), v);
      e.ifThen(e.andI(jOk, colOk), [&](KernelEmitter &se) {
        se.store(acc[i], a["dw_acc"], se.add(se.mul(js[i], d), colC));
      });
      if (dbAcc0)
        e.ifThen(e.andI(jOk, biasWriter), [&](KernelEmitter &se) {
          se.store(acc[bn + i], dbAcc0, js[i]);
        });
    }
    (void)dwAcc;
    (void)dbAcc;
    gpu::ReturnOp::create(b, loc);
  }

  void buildFinish() {
    std::vector<std::pair<std::string, Type>> args = {{"dw_acc", gpuFlat(f32())},
                                                       {"grad_w", gpuFlat(st())}};
    if (spec.needsGradBias())
      args.insert(args.end(), {{"db_acc", gpuFlat(f32())}, {"grad_bias", gpuFlat(st())}});
    args.insert(args.end(), {{"V", idx()}, {"D", idx()}});
    Args a = kernel("lce_bwd_finish", args);
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value i = e.add(e.mul(bx, e.index(tile.threads)), tid);
    e.ifThen(e.cmpI(arith::CmpIPredicate::ult, i, e.mul(a["V"], a["D"])), [&](KernelEmitter &se) {
      se.store(arith::TruncFOp::create(se.builder(), se.location(), st(), se.load(a["dw_acc"], i)),
               a["grad_w"], i);
    });
    if (spec.needsGradBias())
      e.ifThen(e.cmpI(arith::CmpIPredicate::ult, i, a["V"]), [&](KernelEmitter &se) {
        se.store(arith::TruncFOp::create(se.builder(), se.location(), st(),
                                         se.load(a["db_acc"], i)),
                 a["grad_bias"], i);
      });
    gpu::ReturnOp::create(b, loc);
  }

  /// Fused forward: one thread per row of the chunk turns its raw logits
  /// (in the dZ workspace) into lse and the row loss, summing over the
  /// vocabulary in order.
  void buildFusedLse() {
    Args a = kernel("lce_fused_lse", {{"labels", gpuFlat(spec.labelType)},
                                      {"dz", gpuFlat(f32())}, {"lse", gpuFlat(f32())},
                                      {"loss_rows", gpuFlat(f32())}, {"chunk_begin", idx()},
                                      {"chunk_end", idx()}, {"V", idx()}});
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value v = a["V"], cb = a["chunk_begin"];
    Value row = e.add(cb, e.add(e.mul(bx, e.index(tile.threads)), tid));
    e.ifThen(e.cmpI(arith::CmpIPredicate::ult, row, a["chunk_end"]), [&](KernelEmitter &re) {
      emitRowFromRawLogits(re, spec, a["dz"], re.mul(re.sub(row, cb), v), v, a["labels"], row,
                           a["lse"], a["loss_rows"]);
    });
    gpu::ReturnOp::create(b, loc);
  }

  /// Fused forward: raw logits in the dZ workspace become dZ in place.
  void buildFusedDz() {
    Args a = kernel("lce_fused_dz", {{"labels", gpuFlat(spec.labelType)},
                                     {"lse", gpuFlat(f32())}, {"grow", gpuFlat(f32())},
                                     {"dz", gpuFlat(f32())}, {"chunk_begin", idx()},
                                     {"chunk_end", idx()}, {"V", idx()}});
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value v = a["V"], cb = a["chunk_begin"];
    Value i = e.add(e.mul(bx, e.index(tile.threads)), tid);
    Value total = e.mul(e.sub(a["chunk_end"], cb), v);
    e.ifThen(e.cmpI(arith::CmpIPredicate::ult, i, total), [&](KernelEmitter &se) {
      Value row = se.add(cb, se.divUI(i, v));
      Value col = arith::RemUIOp::create(se.builder(), se.location(), i, v);
      Value raw = se.load(a["dz"], i);
      Value dz = emitLogitGrad(se, spec, raw, se.load(a["lse"], row), se.load(a["grow"], row),
                               se.cmpI(arith::CmpIPredicate::eq,
                                       se.loadLabel(a["labels"], row), col));
      se.store(dz, a["dz"], i);
    });
    gpu::ReturnOp::create(b, loc);
  }

  /// Runs `body` for columns tid, tid+T, … < d: the columns thread `tid`
  /// owns in the recompute kernels (each element has one owner).
  void forThreadColumns(KernelEmitter &e, Value tid, Value d,
                        const std::function<void(KernelEmitter &, Value)> &body) {
    e.forLoop(tid, d, e.index(tile.threads), {}, [&](KernelEmitter &de, Value col, ValueRange) {
      body(de, col);
      return SmallVector<Value>{};
    });
  }

  /// Stores `acc` (f32) into `out` at `at`, rounding once to storage.
  void storeRounded(KernelEmitter &e, Value acc, Value out, Value at) {
    Value v = acc;
    if (!spec.storesF32())
      v = arith::TruncFOp::create(e.builder(), e.location(), st(), v);
    e.store(v, out, at);
  }

  /// recompute, dX: block bx owns rows bx·BN..; per vocab tile of T columns
  /// each thread recomputes the logits of its column for the block's rows
  /// (dZ into shared memory), then thread d adds Σ_jj dZ[r,jj]·W[jj,d] into
  /// the f32 accumulator of its own elements. Rows are owned by one block
  /// and elements by one thread: fixed order, no atomics.
  void buildDxRecompute(StringRef acc) {
    MLIRContext *ctx = b.getContext();
    const int64_t bn = tile.blockRows, threads = tile.threads;
    std::vector<std::pair<std::string, Type>> args = {{"x", gpuFlat(st())}, {"w", gpuFlat(st())}};
    if (spec.hasBias)
      args.push_back({"bias", gpuFlat(st())});
    args.insert(args.end(), {{"labels", gpuFlat(spec.labelType)}, {"lse", gpuFlat(f32())},
                             {"grow", gpuFlat(f32())}, {"grad_x", gpuFlat(st())}});
    if (acc != "grad_x")
      args.push_back({"dx_acc", gpuFlat(f32())});
    args.insert(args.end(), {{"N", idx()}, {"V", idx()}, {"D", idx()}});
    Args a = kernel("lce_bwd_dx_rc", args, {gpuShared(ctx, bn * threads, f32())});
    Value smem = a.fn.getWorkgroupAttributions()[0];
    Value accBuf = acc == "grad_x" ? a["grad_x"] : a["dx_acc"];
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc), T = e.index(threads);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value n = a["N"], v = a["V"], d = a["D"];
    Value first = e.mul(bx, e.index(bn));
    Value lastRow = e.sub(n, e.index(1));
    SmallVector<Value> rows, rowOk, xOff, lse, g, label;
    for (int64_t i = 0; i < bn; ++i) {
      Value r = e.add(first, e.index(i));
      rowOk.push_back(e.cmpI(arith::CmpIPredicate::ult, r, n));
      rows.push_back(e.minUI(r, lastRow));
      xOff.push_back(e.mul(rows.back(), d));
      lse.push_back(e.load(a["lse"], rows.back()));
      g.push_back(e.load(a["grow"], rows.back()));
      label.push_back(e.loadLabel(a["labels"], rows.back()));
    }
    auto forMyColumns = [&](KernelEmitter &le,
                            const std::function<void(KernelEmitter &, Value)> &body) {
      forThreadColumns(le, tid, d, body);
    };
    forMyColumns(e, [&](KernelEmitter &de, Value col) {
      for (int64_t i = 0; i < bn; ++i)
        de.ifThen(rowOk[i], [&](KernelEmitter &se) {
          se.store(se.f32(0.0), accBuf, se.add(xOff[i], col));
        });
    });
    e.forLoop(e.index(0), v, T, {}, [&](KernelEmitter &te, Value j0, ValueRange) {
      Value col = te.add(j0, tid);
      Value colOk = te.cmpI(arith::CmpIPredicate::ult, col, v);
      Value colC = te.minUI(col, te.sub(v, te.index(1)));
      Value wOff = te.mul(colC, d);
      SmallVector<Value> z = te.forLoop(te.index(0), d, te.index(1), SmallVector<Value>(bn, te.f32(0.0)),
                                        [&](KernelEmitter &ke, Value k, ValueRange it) {
                                          Value wv = ke.loadF32(a["w"], ke.add(wOff, k));
                                          SmallVector<Value> next;
                                          for (int64_t i = 0; i < bn; ++i)
                                            next.push_back(ke.fma(ke.loadF32(a["x"], ke.add(xOff[i], k)), wv, it[i]));
                                          return next;
                                        });
      Value bv = spec.hasBias ? te.loadF32(a["bias"], colC) : Value();
      for (int64_t i = 0; i < bn; ++i) {
        Value raw = bv ? te.addF(z[i], bv) : z[i];
        Value dz = emitLogitGrad(te, spec, raw, lse[i], g[i],
                                 te.cmpI(arith::CmpIPredicate::eq, label[i], colC));
        Value live = te.andI(colOk, rowOk[i]);
        te.store(te.select(live, dz, te.f32(0.0)), smem, te.add(te.index(i * threads), tid));
      }
      gpu::BarrierOp::create(te.builder(), te.location());
      Value count = te.minUI(T, te.sub(v, j0));
      forMyColumns(te, [&](KernelEmitter &de, Value dcol) {
        for (int64_t i = 0; i < bn; ++i)
          de.ifThen(rowOk[i], [&](KernelEmitter &se) {
            Value at = se.add(xOff[i], dcol);
            Value sum = se.forLoop(se.index(0), count, se.index(1), {se.load(accBuf, at)},
                                   [&](KernelEmitter &ke, Value jj, ValueRange it) {
                                     Value dz = ke.load(smem, ke.add(ke.index(i * threads), jj));
                                     Value wv = ke.loadF32(a["w"], ke.add(ke.mul(ke.add(j0, jj), d), dcol));
                                     return SmallVector<Value>{ke.fma(dz, wv, it[0])};
                                   })[0];
            se.store(sum, accBuf, at);
          });
      });
      gpu::BarrierOp::create(te.builder(), te.location());
      return SmallVector<Value>{};
    });
    if (acc != "grad_x")
      forMyColumns(e, [&](KernelEmitter &de, Value col) {
        for (int64_t i = 0; i < bn; ++i)
          de.ifThen(rowOk[i], [&](KernelEmitter &se) {
            Value at = se.add(xOff[i], col);
            storeRounded(se, se.load(accBuf, at), a["grad_x"], at);
          });
      });
    gpu::ReturnOp::create(b, loc);
  }

  /// recompute, dW (and db): block bx owns vocab rows bx·BN..; per tile of T
  /// rows each thread recomputes the logits of its row for the block's vocab
  /// rows, then thread d adds Σ_t dZ[t,j]·X[t,d] into its own f32 elements;
  /// thread i < BN sums db of vocab row i in row order.
  void buildDwRecompute(StringRef acc) {
    MLIRContext *ctx = b.getContext();
    const int64_t bn = tile.blockRows, threads = tile.threads;
    std::vector<std::pair<std::string, Type>> args = {{"x", gpuFlat(st())}, {"w", gpuFlat(st())}};
    if (spec.hasBias)
      args.push_back({"bias", gpuFlat(st())});
    args.insert(args.end(), {{"labels", gpuFlat(spec.labelType)}, {"lse", gpuFlat(f32())},
                             {"grow", gpuFlat(f32())}, {"grad_w", gpuFlat(st())}});
    if (spec.needsGradBias())
      args.push_back({"grad_bias", gpuFlat(st())});
    if (acc != "grad_w")
      args.push_back({"dw_acc", gpuFlat(f32())});
    args.insert(args.end(), {{"N", idx()}, {"V", idx()}, {"D", idx()}});
    Args a = kernel("lce_bwd_dw_rc", args, {gpuShared(ctx, bn * threads, f32())});
    Value smem = a.fn.getWorkgroupAttributions()[0];
    Value accBuf = acc == "grad_w" ? a["grad_w"] : a["dw_acc"];
    KernelEmitter e(b, loc);
    Value tid = gpuThreadIdx(b, loc), T = e.index(threads);
    Value bx = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value n = a["N"], v = a["V"], d = a["D"];
    Value first = e.mul(bx, e.index(bn));
    Value lastJ = e.sub(v, e.index(1));
    SmallVector<Value> js, jOk, wOff, bias;
    for (int64_t i = 0; i < bn; ++i) {
      Value j = e.add(first, e.index(i));
      jOk.push_back(e.cmpI(arith::CmpIPredicate::ult, j, v));
      js.push_back(e.minUI(j, lastJ));
      wOff.push_back(e.mul(js.back(), d));
      bias.push_back(spec.hasBias ? e.loadF32(a["bias"], js.back()) : Value());
    }
    auto forMyColumns = [&](KernelEmitter &le,
                            const std::function<void(KernelEmitter &, Value)> &body) {
      forThreadColumns(le, tid, d, body);
    };
    forMyColumns(e, [&](KernelEmitter &de, Value col) {
      for (int64_t i = 0; i < bn; ++i)
        de.ifThen(jOk[i], [&](KernelEmitter &se) {
          se.store(se.f32(0.0), accBuf, se.add(wOff[i], col));
        });
    });
    Value dbOwner = e.cmpI(arith::CmpIPredicate::ult, tid, e.index(bn));
    Value db = e.forLoop(e.index(0), n, T, {e.f32(0.0)}, [&](KernelEmitter &te, Value r0, ValueRange dbIt) {
      Value row = te.add(r0, tid);
      Value rowOk = te.cmpI(arith::CmpIPredicate::ult, row, n);
      Value rowC = te.minUI(row, te.sub(n, te.index(1)));
      Value xOff = te.mul(rowC, d);
      SmallVector<Value> z = te.forLoop(te.index(0), d, te.index(1), SmallVector<Value>(bn, te.f32(0.0)),
                                        [&](KernelEmitter &ke, Value k, ValueRange it) {
                                          Value xv = ke.loadF32(a["x"], ke.add(xOff, k));
                                          SmallVector<Value> next;
                                          for (int64_t i = 0; i < bn; ++i)
                                            next.push_back(ke.fma(xv, ke.loadF32(a["w"], ke.add(wOff[i], k)), it[i]));
                                          return next;
                                        });
      Value lse = te.load(a["lse"], rowC), g = te.load(a["grow"], rowC);
      Value label = te.loadLabel(a["labels"], rowC);
      for (int64_t i = 0; i < bn; ++i) {
        Value raw = bias[i] ? te.addF(z[i], bias[i]) : z[i];
        Value dz = emitLogitGrad(te, spec, raw, lse, g,
                                 te.cmpI(arith::CmpIPredicate::eq, label, js[i]));
        te.store(te.select(rowOk, dz, te.f32(0.0)), smem, te.add(te.index(i * threads), tid));
      }
      gpu::BarrierOp::create(te.builder(), te.location());
      Value count = te.minUI(T, te.sub(n, r0));
      forMyColumns(te, [&](KernelEmitter &de, Value dcol) {
        for (int64_t i = 0; i < bn; ++i)
          de.ifThen(jOk[i], [&](KernelEmitter &se) {
            Value at = se.add(wOff[i], dcol);
            Value sum = se.forLoop(se.index(0), count, se.index(1), {se.load(accBuf, at)},
                                   [&](KernelEmitter &ke, Value tt, ValueRange it) {
                                     Value dz = ke.load(smem, ke.add(ke.index(i * threads), tt));
                                     Value xv = ke.loadF32(a["x"], ke.add(ke.mul(ke.add(r0, tt), d), dcol));
                                     return SmallVector<Value>{ke.fma(dz, xv, it[0])};
                                   })[0];
            se.store(sum, accBuf, at);
          });
      });
      Value next = te.ifElse(
          dbOwner,
          [&](KernelEmitter &oe) {
            Value base = oe.mul(tid, oe.index(threads));
            return oe.forLoop(oe.index(0), count, oe.index(1), {dbIt[0]},
                              [&](KernelEmitter &ke, Value tt, ValueRange it) {
                                return SmallVector<Value>{ke.addF(it[0], ke.load(smem, ke.add(base, tt)))};
                              })[0];
          },
          [&](KernelEmitter &) { return dbIt[0]; });
      gpu::BarrierOp::create(te.builder(), te.location());
      return SmallVector<Value>{next};
    })[0];
    if (acc != "grad_w")
      forMyColumns(e, [&](KernelEmitter &de, Value col) {
        for (int64_t i = 0; i < bn; ++i)
          de.ifThen(jOk[i], [&](KernelEmitter &se) {
            Value at = se.add(wOff[i], col);
            storeRounded(se, se.load(accBuf, at), a["grad_w"], at);
          });
      });
    if (spec.needsGradBias()) {
      Value j = e.add(first, tid);
      e.ifThen(e.andI(dbOwner, e.cmpI(arith::CmpIPredicate::ult, j, v)), [&](KernelEmitter &se) {
        storeRounded(se, db, a["grad_bias"], j);
      });
    }
    gpu::ReturnOp::create(b, loc);
  }
};
} // namespace

std::string lossjit::buildLceBackwardGpuKernels(OpBuilder &builder, Location loc,
                                                StringRef prefix, const LceSpec &spec,
                                                const TileConfig &tile, LaunchPlan &plan) {
  OpBuilder::InsertionGuard guard(builder);
  GpuBackwardBuilder kb{builder, loc, spec, tile, builder.getInsertionBlock(),
                        builder.getInsertionPoint(), prefix.str()};
  std::string bn = std::to_string(tile.blockRows), t = std::to_string(tile.threads);
  std::array<int64_t, 3> block = {tile.threads, 1, 1};
  auto mod = [&](StringRef k) { return (prefix + "_" + k).str(); };
  if (spec.fusedForward) {
    // Loss, lse and the gradients of grad_loss = 1 from one pass over the
    // logits: per chunk the raw logits land in the dZ workspace once, give
    // lse and the row losses, become dZ in place and are multiplied out
    // (6·N·D·V in all, against 2 + 6 for a forward then a backward).
    if (spec.strategy == "recompute")
      return "the fused forward+backward is a chunked schedule; strategy "
             "recompute does not apply";
    beginBackwardPlan(spec, tile.str(), plan);
    ChunkedAccumulators acc = addChunkedBackwardPlan(spec, plan);
    plan.workspaces.push_back({"loss_rows", "f32", "N"});
    auto add = [&](StringRef name, std::array<std::string, 3> grid,
                   std::vector<std::string> args, bool perChunk) {
      plan.kernels.push_back({name.str(), mod(name), grid, block, 0, std::move(args), "none",
                              perChunk});
    };
    kb.buildScale();
    add("lce_bwd_scale", {"1", "1", "1"}, {"labels", "grow", "N", "V"}, false);
    kb.buildDz(/*storeRaw=*/true);
    std::vector<std::string> zArgs = {"x", "w"};
    if (spec.hasBias)
      zArgs.push_back("bias");
    zArgs.insert(zArgs.end(), {"dz", "chunk_begin", "chunk_end", "V", "D"});
    add("lce_fused_z", {"cdiv(C," + bn + ")", "cdiv(V," + t + ")", "1"}, zArgs, true);
    kb.buildFusedLse();
    add("lce_fused_lse", {"cdiv(C," + t + ")", "1", "1"},
        {"labels", "dz", "lse", "loss_rows", "chunk_begin", "chunk_end", "V"}, true);
    kb.buildFusedDz();
    add("lce_fused_dz", {"cdiv(C*V," + t + ")", "1", "1"},
        {"labels", "lse", "grow", "dz", "chunk_begin", "chunk_end", "V"}, true);
    if (spec.needsGradX) {
      kb.buildDx();
      add("lce_bwd_dx", {"cdiv(C," + bn + ")", "cdiv(D," + t + ")", "1"},
          {"dz", "w", "grad_x", "chunk_begin", "chunk_end", "V", "D"}, true);
    }
    if (spec.needsGradW) {
      kb.buildDw(acc.dw, acc.db);
      std::vector<std::string> dw = {"dz", "x", acc.dw};
      if (spec.needsGradBias())
        dw.push_back(acc.db);
      dw.insert(dw.end(), {"chunk_begin", "chunk_end", "V", "D"});
      add("lce_bwd_dw", {"cdiv(V," + bn + ")", "cdiv(D," + t + ")", "1"}, dw, true);
      if (acc.separate) {
        kb.buildFinish();
        std::vector<std::string> fin = {"dw_acc", "grad_w"};
        if (spec.needsGradBias())
          fin.insert(fin.end(), {"db_acc", "grad_bias"});
        fin.insert(fin.end(), {"V", "D"});
        add("lce_bwd_finish", {"cdiv(V*D," + t + ")", "1", "1"}, fin, false);
      }
    }
    builder.setInsertionPoint(kb.parent, kb.at);
    auto reduce = gpu::GPUModuleOp::create(builder, loc, mod("lce_reduce"));
    builder.setInsertionPointToEnd(reduce.getBody());
    buildLceReduceGpuKernel(builder, loc, spec, tile);
    add("lce_reduce", {"1", "1", "1"}, {"labels", "loss_rows", "loss", "N"}, false);
    return "";
  }
  if (spec.strategy == "recompute") {
    beginBackwardPlan(spec, tile.str(), plan);
    kb.buildScale();
    plan.kernels.push_back({"lce_bwd_scale", mod("lce_bwd_scale"), {"1", "1", "1"}, block, 0,
                            {"labels", "grad_loss", "grow", "N", "V"}});
    std::vector<std::string> in = {"x", "w"};
    if (spec.hasBias)
      in.push_back("bias");
    in.insert(in.end(), {"labels", "lse", "grow"});
    // 16-bit storage sums in a gradient-sized f32 accumulator and rounds
    // once at the end; f32 storage sums in place.
    if (spec.needsGradX) {
      std::string acc = spec.storesF32() ? "grad_x" : "dx_acc";
      if (acc == "dx_acc")
        plan.workspaces.push_back({"dx_acc", "f32", "N*D"});
      kb.buildDxRecompute(acc);
      auto args = in;
      args.push_back("grad_x");
      if (acc == "dx_acc")
        args.push_back("dx_acc");
      args.insert(args.end(), {"N", "V", "D"});
      plan.kernels.push_back({"lce_bwd_dx_rc", mod("lce_bwd_dx_rc"), {"cdiv(N," + bn + ")", "1", "1"},
                              block, 0, args});
    }
    if (spec.needsGradW) {
      std::string acc = spec.storesF32() ? "grad_w" : "dw_acc";
      if (acc == "dw_acc")
        plan.workspaces.push_back({"dw_acc", "f32", "V*D"});
      kb.buildDwRecompute(acc);
      auto args = in;
      args.push_back("grad_w");
      if (spec.needsGradBias())
        args.push_back("grad_bias");
      if (acc == "dw_acc")
        args.push_back("dw_acc");
      args.insert(args.end(), {"N", "V", "D"});
      plan.kernels.push_back({"lce_bwd_dw_rc", mod("lce_bwd_dw_rc"), {"cdiv(V," + bn + ")", "1", "1"},
                              block, 0, args});
    }
    return "";
  }
  beginBackwardPlan(spec, tile.str(), plan);
  ChunkedAccumulators acc = addChunkedBackwardPlan(spec, plan);
  bool separateAcc = acc.separate;
  std::string dwAcc = acc.dw, dbAcc = acc.db;
  plan.kernels.clear();
  auto add = [&](StringRef name, std::array<std::string, 3> grid,
                 std::vector<std::string> args, bool perChunk) {
    plan.kernels.push_back({name.str(), mod(name), grid, block, 0, std::move(args), "none",
                            perChunk});
  };
  kb.buildScale();
  add("lce_bwd_scale", {"1", "1", "1"}, {"labels", "grad_loss", "grow", "N", "V"}, false);
  kb.buildDz();
  std::vector<std::string> dzArgs = {"x", "w"};
  if (spec.hasBias)
    dzArgs.push_back("bias");
  dzArgs.insert(dzArgs.end(), {"labels", "lse", "grow", "dz", "chunk_begin", "chunk_end",
                               "V", "D"});
  add("lce_bwd_dz", {"cdiv(C," + bn + ")", "cdiv(V," + t + ")", "1"}, dzArgs, true);
  if (spec.needsGradX) {
    kb.buildDx();
    add("lce_bwd_dx", {"cdiv(C," + bn + ")", "cdiv(D," + t + ")", "1"},
        {"dz", "w", "grad_x", "chunk_begin", "chunk_end", "V", "D"}, true);
  }
  if (spec.needsGradW) {
    kb.buildDw(dwAcc, dbAcc);
    std::vector<std::string> dw = {"dz", "x", dwAcc};
    if (spec.needsGradBias())
      dw.push_back(dbAcc);
    dw.insert(dw.end(), {"chunk_begin", "chunk_end", "V", "D"});
    add("lce_bwd_dw", {"cdiv(V," + bn + ")", "cdiv(D," + t + ")", "1"}, dw, true);
    if (separateAcc) {
      kb.buildFinish();
      std::vector<std::string> fin = {"dw_acc", "grad_w"};
      if (spec.needsGradBias())
        fin.insert(fin.end(), {"db_acc", "grad_bias"});
      fin.insert(fin.end(), {"V", "D"});
      add("lce_bwd_finish", {"cdiv(V*D," + t + ")", "1", "1"}, fin, false);
    }
  }
  return "";
}
