//===- LinearCrossEntropyCPU.cpp - host kernels of the fused loss ---------===//

#include "compiler/Kernels/LinearCrossEntropyCPU.h"
#include "compiler/Kernels/CpuVectorOps.h"
#include "compiler/Kernels/KernelEmitter.h"
#include "compiler/Kernels/LceGradient.h"
#include "compiler/Kernels/LceRowLoss.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace lossjit;

std::string CpuTileConfig::str() const {
  return "cpu:block_rows=" + std::to_string(blockRows) +
         ",vector_width=" + std::to_string(vectorWidth) +
         ",panel_blocks=" + std::to_string(panelBlocks) +
         ",vocab_tile=" + std::to_string(vocabTile) +
         ",reduce_lanes=" + std::to_string(reduceLanes);
}

namespace {
MemRefType flat(Type elem) {
  return MemRefType::get({ShapedType::kDynamic}, elem);
}

func::FuncOp makeFunc(OpBuilder &b, Location loc, StringRef name,
                      TypeRange args) {
  auto fn = func::FuncOp::create(b, loc, name, b.getFunctionType(args, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  return fn;
}

void buildRows(OpBuilder &b, Location loc, const LceSpec &spec,
               const CpuTileConfig &tile) {
  Type f32 = b.getF32Type(), idx = b.getIndexType();
  SmallVector<Type> args = {flat(spec.storage), flat(spec.storage)};
  if (spec.hasBias)
    args.push_back(flat(spec.storage));
  args.append({flat(spec.labelType), flat(f32), flat(f32), idx, idx, idx, idx});
  auto fn = makeFunc(b, loc, "lce_rows", args);
  unsigned a = 0;
  Value x = fn.getArgument(a++), w = fn.getArgument(a++);
  Value bias = spec.hasBias ? fn.getArgument(a++) : Value();
  Value labels = fn.getArgument(a++), lseOut = fn.getArgument(a++),
        lossRows = fn.getArgument(a++);
  Value rowBegin = fn.getArgument(a++), rowEnd = fn.getArgument(a++),
        v = fn.getArgument(a++), d = fn.getArgument(a++);
  const int64_t br = tile.blockRows, lanes = tile.vectorWidth;

  const int64_t panel = br * tile.panelBlocks, vtile = tile.vocabTile;
  KernelEmitter e(b, loc);
  Value dMain = e.mul(e.divUI(d, e.index(lanes)), e.index(lanes));
  // Running (max, sum) of each row of a panel while the vocabulary is swept
  // tile by tile: a tile of W is reused by every register block of the panel
  // (W is read once per panel, not once per block). Each row still sees its
  // columns in order 0..V-1, so the bits do not depend on the tiling.
  Value state = memref::AllocaOp::create(b, loc, MemRefType::get({2 * panel}, f32));
  e.forLoop(rowBegin, rowEnd, e.index(panel), {},
            [&](KernelEmitter &pe, Value pb, ValueRange) {
              Value panelEnd = pe.minUI(pe.add(pb, pe.index(panel)), rowEnd);
              Value last = pe.sub(panelEnd, pe.index(1));
              pe.forLoop(pe.index(0), pe.index(2 * panel), pe.index(2), {},
                         [&](KernelEmitter &ie, Value at, ValueRange) {
                           ie.store(ie.negInf(), state, at);
                           ie.store(ie.f32(0.0), state, ie.add(at, ie.index(1)));
                           return SmallVector<Value>{};
                         });
              pe.forLoop(pe.index(0), v, pe.index(vtile), {},
                         [&](KernelEmitter &te, Value vt, ValueRange) {
                Value vtEnd = te.minUI(te.add(vt, te.index(vtile)), v);
                te.forLoop(pb, panelEnd, te.index(br), {},
                           [&](KernelEmitter &re, Value rb, ValueRange) {
                  // Rows past the panel are clamped (in-bounds loads) onto
                  // the last row and its state slot, and compute its values.
                  SmallVector<Value> xOff, slot;
                  SmallVector<Value> init;
                  for (int64_t i = 0; i < br; ++i) {
                    Value row = re.minUI(re.add(rb, re.index(i)), last);
                    xOff.push_back(re.mul(row, d));
                    slot.push_back(re.mul(re.sub(row, pb), re.index(2)));
                    init.push_back(re.load(state, slot.back()));
                    init.push_back(re.load(state, re.add(slot.back(), re.index(1))));
                  }
                  SmallVector<Value> st = re.forLoop(
                      vt, vtEnd, re.index(1), init,
                      [&](KernelEmitter &ve, Value col, ValueRange it) {
                        Value wOff = ve.mul(col, d);
                        SmallVector<Value> z = emitBlockDot(ve, x, xOff, w, wOff, d, dMain, lanes);
                        Value bv = bias ? ve.loadF32(bias, col) : Value();
                        SmallVector<Value> next;
                        for (int64_t i = 0; i < br; ++i) {
                          LseState s = ve.push({it[2 * i], it[2 * i + 1]},
                                               emitLogit(ve, spec, bv ? ve.addF(z[i], bv) : z[i]));
                          next.append({s.max, s.sum});
                        }
                        return next;
                      });
                  for (int64_t i = 0; i < br; ++i) {
                    re.store(st[2 * i], state, slot[i]);
                    re.store(st[2 * i + 1], state, re.add(slot[i], re.index(1)));
                  }
                  return SmallVector<Value>{};
                });
                return SmallVector<Value>{};
              });
              pe.forLoop(pb, panelEnd, pe.index(1), {}, [&](KernelEmitter &se, Value row,
                                                              ValueRange) {
                Value at = se.mul(se.sub(row, pb), se.index(2));
                Value lse = se.finish({se.load(state, at), se.load(state, se.add(at, se.index(1)))});
                se.store(lse, lseOut, row);
                Value label = se.loadLabel(labels, row);
                se.store(emitRowLoss(se, spec, x, w, bias, label, row, lse, v, d), lossRows, row);
                return SmallVector<Value>{};
              });
              return SmallVector<Value>{};
            });
  func::ReturnOp::create(b, loc);
}

} // namespace

void lossjit::buildLceReduceCpuKernel(OpBuilder &b, Location loc, const LceSpec &spec,
                 const CpuTileConfig &tile) {
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), idx = b.getIndexType();
  auto fn = makeFunc(b, loc, "lce_reduce",
                     {flat(spec.labelType), flat(f32), flat(f32), idx});
  Value labels = fn.getArgument(0), lossRows = fn.getArgument(1),
        out = fn.getArgument(2), n = fn.getArgument(3);
  const int64_t lanes = tile.reduceLanes;
  KernelEmitter e(b, loc);
  Value sums = memref::AllocaOp::create(b, loc, MemRefType::get({lanes}, f32));
  Value counts = memref::AllocaOp::create(b, loc, MemRefType::get({lanes}, i32));
  // Lane t sums rows t, t+L, ... — exactly what GPU thread t does.
  e.forLoop(e.index(0), e.index(lanes), e.index(1), {},
            [&](KernelEmitter &le, Value t, ValueRange) {
              SmallVector<Value> acc = le.forLoop(
                  t, n, le.index(lanes), {le.f32(0.0), le.i32(0)},
                  [&](KernelEmitter &re, Value r, ValueRange it) {
                    Value counted = re.cmpI(arith::CmpIPredicate::ne,
                                            re.loadLabel(labels, r),
                                            re.index(spec.ignoreIndex));
                    Value one = re.select(counted, re.i32(1), re.i32(0));
                    return SmallVector<Value>{
                        re.addF(it[0], re.load(lossRows, r)),
                        arith::AddIOp::create(re.builder(), re.location(), it[1], one)};
                  });
              le.store(acc[0], sums, t);
              le.store(acc[1], counts, t);
              return SmallVector<Value>{};
            });
  // The GPU block tree: slot t += slot t+stride for halving strides.
  for (int64_t stride = lanes / 2; stride >= 1; stride /= 2)
    e.forLoop(e.index(0), e.index(stride), e.index(1), {},
              [&](KernelEmitter &te, Value t, ValueRange) {
                Value src = te.add(t, te.index(stride));
                te.store(te.addF(te.load(sums, t), te.load(sums, src)), sums, t);
                te.store(arith::AddIOp::create(te.builder(), te.location(),
                                               te.load(counts, t), te.load(counts, src)),
                         counts, t);
                return SmallVector<Value>{};
              });
  Value total = e.load(sums, e.index(0));
  if (spec.reduction == loss::Reduction::mean)
    total = e.divF(total, arith::SIToFPOp::create(b, loc, f32,
                                                  e.load(counts, e.index(0))));
  e.store(total, out, e.index(0));
  func::ReturnOp::create(b, loc);
}

void lossjit::buildLceCpuKernels(OpBuilder &builder, Location loc,
                                 StringRef moduleName, const LceSpec &spec, const CpuTileConfig &tile,
                                 LaunchPlan &plan) {
  OpBuilder::InsertionGuard guard(builder);
  Block *body = builder.getInsertionBlock();
  buildRows(builder, loc, spec, tile);
  if (spec.reduction != loss::Reduction::none) {
    builder.setInsertionPointToEnd(body);
    buildLceReduceCpuKernel(builder, loc, spec, tile);
  }

  plan.params = spec.planParams();
  plan.options = spec.planOptions();
  plan.tile = tile.str();
  plan.constants = {};
  plan.workspaces.clear();
  if (spec.reduction != loss::Reduction::none)
    plan.workspaces.push_back({"loss_rows", "f32", "N"});
  std::vector<std::string> rowArgs = {"x", "w"};
  if (spec.hasBias)
    rowArgs.push_back("bias");
  rowArgs.insert(rowArgs.end(), {"labels", "lse", spec.rowLossBuffer().str(),
                                 "row_begin", "row_end", "V", "D"});
  plan.kernels = {{"lce_rows", moduleName.str(), {"1", "1", "1"}, {1, 1, 1}, 0,
                   rowArgs, "rows"}};
  if (spec.reduction != loss::Reduction::none)
    plan.kernels.push_back({"lce_reduce", moduleName.str(), {"1", "1", "1"}, {1, 1, 1}, 0,
                            {"labels", "loss_rows", "loss", "N"}});
}
