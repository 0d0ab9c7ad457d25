//===- LinearCrossEntropyGPU.cpp - GPU kernels of the fused loss ----------===//
//
// Every kernel takes flat 1-D buffers (memref<?xT>) and the sizes N, V, D as
// index arguments, so one compiled variant serves every shape. No kernel
// uses atomics: each cross-thread or cross-block sum has a fixed order.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/LinearCrossEntropyGPU.h"
#include "compiler/Kernels/GpuKernelSupport.h"
#include "compiler/Kernels/KernelEmitter.h"
#include "compiler/Kernels/LceGradient.h"
#include "compiler/Kernels/LceRowLoss.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace lossjit;

namespace {
void buildPartial(OpBuilder &b, Location loc, const LceSpec &spec,
                  const TileConfig &tile) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type(), idx = b.getIndexType();
  const int64_t bn = tile.blockRows, threads = tile.threads;
  SmallVector<Type> args = {gpuFlat(spec.storage), gpuFlat(spec.storage)};
  if (spec.hasBias)
    args.push_back(gpuFlat(spec.storage));
  args.append({gpuFlat(f32), gpuFlat(f32), idx, idx, idx});
  auto fn = makeGpuKernel(b, loc, "lce_partial", args,
                       {gpuShared(ctx, bn * threads, f32), gpuShared(ctx, bn * threads, f32)},
                       threads);
  unsigned a = 0;
  Value x = fn.getArgument(a++), w = fn.getArgument(a++);
  Value bias = spec.hasBias ? fn.getArgument(a++) : Value();
  Value partMax = fn.getArgument(a++), partSum = fn.getArgument(a++);
  Value n = fn.getArgument(a++), v = fn.getArgument(a++), d = fn.getArgument(a++);
  Value smMax = fn.getWorkgroupAttributions()[0];
  Value smSum = fn.getWorkgroupAttributions()[1];

  KernelEmitter e(b, loc);
  Value tid = gpuThreadIdx(b, loc);
  Value rowBlock = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value split = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value numSplits = gpu::GridDimOp::create(b, loc, gpu::Dimension::y);
  Value T = e.index(threads);
  Value rowBase = e.mul(rowBlock, e.index(bn));
  Value chunk = e.ceilDiv(v, numSplits);
  Value colBegin = e.minUI(e.mul(split, chunk), v);
  Value colEnd = e.minUI(e.add(colBegin, chunk), v);
  // Rows past N are clamped to N-1 (loads stay in bounds, no divergence) and
  // simply never written back.
  Value lastRow = e.sub(n, e.index(1));
  SmallVector<Value> xOff;
  for (int64_t i = 0; i < bn; ++i)
    xOff.push_back(e.mul(e.minUI(e.add(rowBase, e.index(i)), lastRow), d));

  SmallVector<Value> init;
  for (int64_t i = 0; i < bn; ++i)
    init.append({e.negInf(), e.f32(0.0)});
  SmallVector<Value> states = e.forLoop(
      e.add(colBegin, tid), colEnd, T, init,
      [&](KernelEmitter &le, Value col, ValueRange it) {
        Value wOff = le.mul(col, d);
        SmallVector<Value> zeros(bn, le.f32(0.0));
        SmallVector<Value> z = le.forLoop(
            le.index(0), d, le.index(1), zeros,
            [&](KernelEmitter &ke, Value k, ValueRange acc) {
              Value wv = ke.loadF32(w, ke.add(wOff, k));
              SmallVector<Value> next;
              for (int64_t i = 0; i < bn; ++i)
                next.push_back(ke.fma(ke.loadF32(x, ke.add(xOff[i], k)), wv, acc[i]));
              return next;
            });
        Value bv = spec.hasBias ? le.loadF32(bias, col) : Value();
        SmallVector<Value> next;
        for (int64_t i = 0; i < bn; ++i) {
          Value zi = emitLogit(le, spec, bv ? le.addF(z[i], bv) : z[i]);
          LseState s = le.push({it[2 * i], it[2 * i + 1]}, zi);
          next.append({s.max, s.sum});
        }
        return next;
      });

  for (int64_t i = 0; i < bn; ++i) {
    Value slot = e.add(e.index(i * threads), tid);
    e.store(states[2 * i], smMax, slot);
    e.store(states[2 * i + 1], smSum, slot);
  }
  gpu::BarrierOp::create(b, loc);
  emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
    for (int64_t i = 0; i < bn; ++i) {
      Value base = in.index(i * threads);
      Value di = in.add(base, dst), si = in.add(base, src);
      LseState merged = in.merge({in.load(smMax, di), in.load(smSum, di)},
                                 {in.load(smMax, si), in.load(smSum, si)});
      in.store(merged.max, smMax, di);
      in.store(merged.sum, smSum, di);
    }
  });
  Value writer = e.cmpI(arith::CmpIPredicate::ult, tid, e.index(bn));
  e.ifThen(writer, [&](KernelEmitter &we) {
    Value row = we.add(rowBase, tid);
    we.ifThen(we.cmpI(arith::CmpIPredicate::ult, row, n), [&](KernelEmitter &se) {
      Value slot = se.mul(tid, se.index(threads));
      Value out = se.add(se.mul(split, n), row);
      se.store(se.load(smMax, slot), partMax, out);
      se.store(se.load(smSum, slot), partSum, out);
    });
  });
  gpu::ReturnOp::create(b, loc);
}

void buildCombine(OpBuilder &b, Location loc, const LceSpec &spec,
                  const TileConfig &tile) {
  Type f32 = b.getF32Type(), idx = b.getIndexType();
  SmallVector<Type> args = {gpuFlat(spec.storage), gpuFlat(spec.storage)};
  if (spec.hasBias)
    args.push_back(gpuFlat(spec.storage));
  args.append({gpuFlat(spec.labelType), gpuFlat(f32), gpuFlat(f32), gpuFlat(f32), gpuFlat(f32),
               idx, idx, idx, idx});
  auto fn = makeGpuKernel(b, loc, "lce_combine", args, {}, tile.threads);
  unsigned a = 0;
  Value x = fn.getArgument(a++), w = fn.getArgument(a++);
  Value bias = spec.hasBias ? fn.getArgument(a++) : Value();
  Value labels = fn.getArgument(a++), partMax = fn.getArgument(a++),
        partSum = fn.getArgument(a++), lseOut = fn.getArgument(a++),
        lossRows = fn.getArgument(a++);
  Value n = fn.getArgument(a++), v = fn.getArgument(a++), d = fn.getArgument(a++),
        s = fn.getArgument(a++);

  KernelEmitter e(b, loc);
  Value tid = gpuThreadIdx(b, loc);
  Value blk = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value row = e.add(e.mul(blk, e.index(tile.threads)), tid);
  e.ifThen(e.cmpI(arith::CmpIPredicate::ult, row, n), [&](KernelEmitter &re) {
    SmallVector<Value> st = re.forLoop(
        re.index(0), s, re.index(1), {re.negInf(), re.f32(0.0)},
        [&](KernelEmitter &le, Value sp, ValueRange it) {
          Value at = le.add(le.mul(sp, n), row);
          LseState m = le.merge({it[0], it[1]},
                                {le.load(partMax, at), le.load(partSum, at)});
          return SmallVector<Value>{m.max, m.sum};
        });
    Value lse = re.finish({st[0], st[1]});
    re.store(lse, lseOut, row);
    Value label = re.loadLabel(labels, row);
    re.store(emitRowLoss(re, spec, x, w, bias, label, row, lse, v, d), lossRows, row);
  });
  gpu::ReturnOp::create(b, loc);
}

} // namespace

void lossjit::buildLceReduceGpuKernel(OpBuilder &b, Location loc, const LceSpec &spec,
                                      const TileConfig &tile) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), idx = b.getIndexType();
  const int64_t threads = tile.threads;
  SmallVector<Type> args = {gpuFlat(spec.labelType), gpuFlat(f32), gpuFlat(f32), idx};
  auto fn = makeGpuKernel(b, loc, "lce_reduce", args,
                       {gpuShared(ctx, threads, f32), gpuShared(ctx, threads, i32)},
                       threads);
  Value labels = fn.getArgument(0), lossRows = fn.getArgument(1),
        out = fn.getArgument(2), n = fn.getArgument(3);
  Value smSum = fn.getWorkgroupAttributions()[0];
  Value smCount = fn.getWorkgroupAttributions()[1];

  KernelEmitter e(b, loc);
  Value tid = gpuThreadIdx(b, loc);
  // Thread t sums rows t, t+T, t+2T, ... in order: the same lanes the CPU
  // reduction simulates, so both backends reduce identically.
  SmallVector<Value> acc = e.forLoop(
      tid, n, e.index(threads), {e.f32(0.0), e.i32(0)},
      [&](KernelEmitter &le, Value r, ValueRange it) {
        Value counted = le.cmpI(arith::CmpIPredicate::ne, le.loadLabel(labels, r),
                                le.index(spec.ignoreIndex));
        Value one = le.select(counted, le.i32(1), le.i32(0));
        return SmallVector<Value>{le.addF(it[0], le.load(lossRows, r)),
                                  arith::AddIOp::create(le.builder(), le.location(), it[1], one)};
      });
  e.store(acc[0], smSum, tid);
  e.store(acc[1], smCount, tid);
  gpu::BarrierOp::create(b, loc);
  emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
    in.store(in.addF(in.load(smSum, dst), in.load(smSum, src)), smSum, dst);
    in.store(arith::AddIOp::create(in.builder(), in.location(),
                                   in.load(smCount, dst), in.load(smCount, src)),
             smCount, dst);
  });
  e.ifThen(e.cmpI(arith::CmpIPredicate::eq, tid, e.index(0)), [&](KernelEmitter &we) {
    Value total = we.load(smSum, we.index(0));
    if (spec.reduction == loss::Reduction::mean) {
      Value count = arith::SIToFPOp::create(we.builder(), we.location(), f32,
                                            we.load(smCount, we.index(0)));
      total = we.divF(total, count);
    }
    we.store(total, out, we.index(0));
  });
  gpu::ReturnOp::create(b, loc);
}

void lossjit::buildLceGpuKernels(OpBuilder &builder, Location loc,
                                 StringRef prefix, const LceSpec &spec,
                                 const TileConfig &tile, LaunchPlan &plan) {
  OpBuilder::InsertionGuard guard(builder);
  using Build = void (*)(OpBuilder &, Location, const LceSpec &, const TileConfig &);
  std::vector<std::pair<StringRef, Build>> kernels = {
      {"lce_partial", buildPartial}, {"lce_combine", buildCombine}};
  if (spec.reduction != loss::Reduction::none)
    kernels.push_back({"lce_reduce", buildLceReduceGpuKernel});
  Block *parent = builder.getInsertionBlock();
  Block::iterator at = builder.getInsertionPoint();
  for (auto [kernel, build] : kernels) {
    builder.setInsertionPoint(parent, at);
    auto module = gpu::GPUModuleOp::create(builder, loc, (prefix + "_" + kernel).str());
    builder.setInsertionPointToEnd(module.getBody());
    build(builder, loc, spec, tile);
  }

  std::string bn = std::to_string(tile.blockRows), t = std::to_string(tile.threads);
  plan.params = spec.planParams();
  plan.options = spec.planOptions();
  plan.tile = tile.str();
  plan.constants = {{"S", tile.splits}};
  plan.workspaces = {{"part_max", "f32", "S*N"}, {"part_sum", "f32", "S*N"}};
  if (spec.reduction != loss::Reduction::none)
    plan.workspaces.push_back({"loss_rows", "f32", "N"});
  // Shared memory is static (workgroup attributions in the PTX), so no
  // kernel asks for dynamic shared bytes.
  std::array<int64_t, 3> block = {tile.threads, 1, 1};
  std::vector<std::string> partialArgs = {"x", "w"};
  std::vector<std::string> combineArgs = {"x", "w"};
  if (spec.hasBias) {
    partialArgs.push_back("bias");
    combineArgs.push_back("bias");
  }
  partialArgs.insert(partialArgs.end(), {"part_max", "part_sum", "N", "V", "D"});
  combineArgs.insert(combineArgs.end(),
                     {"labels", "part_max", "part_sum", "lse",
                      spec.rowLossBuffer().str(), "N", "V", "D", "S"});
  auto mod = [&](StringRef k) { return (prefix + "_" + k).str(); };
  plan.kernels = {
      {"lce_partial", mod("lce_partial"), {"cdiv(N," + bn + ")", "S", "1"}, block, 0,
       partialArgs},
      {"lce_combine", mod("lce_combine"), {"cdiv(N," + t + ")", "1", "1"}, block, 0,
       combineArgs},
  };
  if (spec.reduction != loss::Reduction::none)
    plan.kernels.push_back({"lce_reduce", mod("lce_reduce"), {"1", "1", "1"}, block, 0,
                            {"labels", "loss_rows", "loss", "N"}});
}
