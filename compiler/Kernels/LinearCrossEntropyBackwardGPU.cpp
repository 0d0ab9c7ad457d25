//===- LinearCrossEntropyBackwardGPU.cpp - GPU gradient kernels -----------===//

#include "compiler/Kernels/LinearCrossEntropyBackwardGPU.h"
#include "compiler/Kernels/GpuKernelSupport.h"
#include "compiler/Kernels/LceGradient.h"

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
    Args a = kernel("lce_bwd_scale",
                    {{"labels", gpuFlat(spec.labelType)}, {"grad_loss", gpuFlat(f32())},
                     {"grow", gpuFlat(f32())}, {"N", idx()}, {"V", idx()}},
                    {gpuShared(ctx, threads, b.getI32Type())});
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

  void buildDz() {
    std::vector<std::pair<std::string, Type>> args = {{"x", gpuFlat(st())}, {"w", gpuFlat(st())}};
    if (spec.hasBias)
      args.push_back({"bias", gpuFlat(st())});
    args.insert(args.end(), {{"labels", gpuFlat(spec.labelType)}, {"lse", gpuFlat(f32())},
                             {"grow", gpuFlat(f32())}, {"dz", gpuFlat(f32())},
                             {"chunk_begin", idx()}, {"chunk_end", idx()}, {"V", idx()},
                             {"D", idx()}});
    Args a = kernel("lce_bwd_dz", args);
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
      Value dz = emitLogitGrad(e, zi, e.load(a["lse"], rows[i]), e.load(a["grow"], rows[i]),
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
};
} // namespace

std::string lossjit::buildLceBackwardGpuKernels(OpBuilder &builder, Location loc,
                                                StringRef prefix, const LceSpec &spec,
                                                const TileConfig &tile, LaunchPlan &plan) {
  if (spec.strategy != "chunked")
    return "the GPU backward implements the chunked strategy only (recompute "
           "needs launch-time dynamic shared memory, not built yet); use "
           "strategy auto or chunked";
  OpBuilder::InsertionGuard guard(builder);
  GpuBackwardBuilder kb{builder, loc, spec, tile, builder.getInsertionBlock(),
                        builder.getInsertionPoint(), prefix.str()};
  std::string bn = std::to_string(tile.blockRows), t = std::to_string(tile.threads);
  std::array<int64_t, 3> block = {tile.threads, 1, 1};
  auto mod = [&](StringRef k) { return (prefix + "_" + k).str(); };
  plan.params = spec.planParams();
  plan.options = spec.planOptions();
  plan.tile = tile.str();
  bool separateAcc = !spec.storesF32();
  plan.constants = {{"WB", spec.workspaceBytes}};
  // The budget bounds the scratch that grows with N·V: the [C,V] dZ chunk
  // (and the row factors). The f32 dW accumulator of 16-bit storage is
  // gradient-sized (V·D) and kept outside it; counting it would shrink
  // chunks to one row whenever V·D·4 exceeds the budget.
  plan.derived = {{"C", "max(1,min(N,(WB-N*4)/(V*4)))"}};
  plan.chunkSymbol = "C";
  plan.workspaces = {{"grow", "f32", "N"}, {"dz", "f32", "C*V"}};
  std::string dwAcc = "grad_w", dbAcc = "grad_bias";
  if (spec.needsGradW && separateAcc) {
    dwAcc = "dw_acc";
    plan.workspaces.push_back({"dw_acc", "f32", "V*D"});
    if (spec.needsGradBias()) {
      dbAcc = "db_acc";
      plan.workspaces.push_back({"db_acc", "f32", "V"});
    }
  }
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
