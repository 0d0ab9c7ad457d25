//===- Forward.cpp - the GPU forward: partials, combine, reduce -----------===//
//
// Every kernel takes flat 1-D buffers (memref<?xT>) and the sizes N, V, D as
// index arguments, so one compiled variant serves every shape. No kernel
// uses atomics: each cross-thread or cross-block merge has a fixed order.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowRules.h"
#include "compiler/Kernels/Schedules/GPU/GpuSchedule.h"
#include "compiler/Kernels/Schedules/Schedules.h"
#include "compiler/Kernels/Support/BlockReduce.h"
#include "compiler/Kernels/Support/PlanBuilder.h"

using namespace mlir;
using namespace lossjit;

namespace {
/// lce_partial, grid (cdiv(N, BN), S): per row block and vocabulary split,
/// the statistics of the block's rows over the split's columns, swept in
/// block tiles (T columns for SIMT, BN for the tensor-core strategies)
/// whose products the matmul strategy forms; each thread folds the logits
/// of its fragment into its rows' states, then the block merges them
/// (RowStats::mergeFragmentRows) and writes part_<field> at [split, row].
/// The dependent sweep (lce_partial_dep, `stats` the dependent sums) reads
/// each row's finished lse pair from row_lse and row_teacher_lse.
void buildPartial(GpuSchedule &s, const RowStats &stats, bool dependent) {
  const int64_t bn = s.tile.blockRows, cols = s.tile.tileCols();
  KernelSignature sig(dependent ? "lce_partial_dep" : "lce_partial");
  sig.arg("x", s.flat(s.storage())).arg("w", s.flat(s.storage()));
  sig.argIf(s.spec.hasBias, "bias", s.flat(s.storage()));
  sig.argIf(!dependent && s.spec.readsClassWeights(), "class_weights", s.flat(s.compute()));
  if (!dependent && s.spec.hasTargets())
    sig.arg("targets", s.flat(s.spec.targetsType));
  declareTeacherInputs(sig, s.spec);
  if (dependent)
    sig.arg("row_lse", s.flat(s.compute())).arg("row_teacher_lse", s.flat(s.compute()));
  LaunchShape launch;
  launch.grid = {"cdiv(N," + s.bn() + ")", "S", "1"};
  // Clusters of row blocks of one split: the blocks sweep the same W tiles,
  // each copying 1/cluster of every one for all (Wgmma.cpp, "Clusters").
  // Grid x rounds up to whole clusters; a block past N holds no row.
  const int64_t cluster = s.partialCluster(dependent);
  GpuSchedule::clusterRowBlocks(launch, cluster, "N", bn);
  for (const std::string &field : stats.fieldNames()) {
    sig.arg("part_" + field, s.flat(s.compute()));
    launch.workgroup.push_back(s.shared(s.matmul.rowMergeSlots(bn), s.compute()));
  }
  s.stageOperands(launch);
  s.declareOperandMaps(sig, cluster ? cols / cluster : 0);
  sig.arg("N", s.index()).arg("V", s.index()).arg("D", s.index());
  KernelArgs a = s.sink.begin(sig, launch);
  SmallVector<Value> shared, partials, scratch = s.staged(a, launch);
  for (unsigned f = 0; f < stats.width(); ++f) {
    shared.push_back(a.workgroup(f));
    partials.push_back(a["part_" + stats.fieldNames()[f]]);
  }

  KernelEmitter e(s.sink.builder(), s.sink.location(), s.spec.compute);
  Value n = a["N"], v = a["V"], d = a["D"], bias = a["bias"];
  Value rowBase = e.mul(gpuBlockIdx(e, 0), e.index(bn));
  Value split = gpuBlockIdx(e, 1);
  Value chunk = e.ceilDiv(v, gpuGridDim(e, 1));
  Value colBegin = e.minUI(e.mul(split, chunk), v);
  Value colEnd = e.minUI(e.add(colBegin, chunk), v);
  MatrixOperand xs = s.operandX(a, d), ws = s.operandW(a, d);
  // Which rows this thread's fragments hold, and how the block shares them.
  Fragment shape = s.matmul.layout(e, {rowBase, bn, n, colBegin, cols, colEnd});
  const unsigned rows = static_cast<unsigned>(shape.rows.size());
  // The dependent sweep's finished lse pair of each fragment row (rows are
  // clamped: the loads stay in bounds).
  SmallVector<Value> rowLse, rowTeacherLse;
  if (dependent)
    for (Value r : shape.rows) {
      rowLse.push_back(e.load(a["row_lse"], r));
      rowTeacherLse.push_back(e.load(a["row_teacher_lse"], r));
    }
  Value beta = dependent ? e.real(s.spec.jsdBeta) : Value();
  // The split's column tiles in order.
  const TileSweep tiles{colBegin, colEnd, e.index(cols), [&](KernelEmitter &, Value c0) {
                          return BlockTile{rowBase, bn, n, c0, cols, colEnd};
                        }};
  // Each thread folds its own fragment: the epilogue synchronizes nothing
  // unless it forms the teacher's product too.
  SmallVector<Value> state = s.matmul.sweep(
      e, xs, ws, tiles, e.index(0), d, stats.identity(e, rows), scratch,
      [&](KernelEmitter &le, const BlockTile &tile, Fragment &product, ValueRange it) {
        // The teacher's logits of the same tile, by the same product.
        Fragment u;
        if (s.spec.hasTeacher)
          u = s.teacherTile(le, a, s.matmul, tile, scratch);
        // A whole tile folds without masks (foldColumns).
        return foldColumns(le, product, [&](KernelEmitter &fe, Fragment &z) {
          // The bias joins the accumulators column by column (addBias).
          addBias(fe, bias, z);
          SmallVector<Value> weights;
          for (Value col : z.cols)
            if (!dependent && s.spec.readsClassWeights())
              weights.push_back(fe.loadReal(a["class_weights"], col));
          SmallVector<SmallVector<Value>> logits(rows);
          SmallVector<SmallVector<LogitInputs>> inputs(rows);
          for (unsigned i = 0; i < rows; ++i) {
            for (size_t j = 0; j < z.cols.size(); ++j) {
              logits[i].push_back(emitLogit(fe, s.spec, z.at(i, j)));
              // (Rows are clamped and columns clamped or inside: the
              // loads stay in bounds.)
              LogitInputs in{weights.empty() ? Value() : weights[j], Value(), Value()};
              if (!dependent && s.spec.hasTargets())
                in.target = fe.loadReal(a["targets"], fe.add(fe.mul(z.rows[i], v), z.cols[j]));
              if (s.spec.hasTeacher)
                in.teacher =
                    emitTeacherFromRaw(fe, s.spec, u.at(i, j), a["teacher_bias"], z.cols[j]);
              if (dependent) {
                in.lse = rowLse[i];
                in.teacherLse = rowTeacherLse[i];
                in.beta = beta;
              }
              inputs[i].push_back(in);
            }
          }
          // Columns past the split's end take no part (never a zero logit).
          return stats.pushRows(fe, it, logits, z.colValid, inputs);
        });
      },
      /*overlap=*/!s.spec.hasTeacher);
  // Rows past N are never written. The merge's lanes come from the
  // thread's id read afresh: the sweep's peak leaves no register for the
  // leader predicate or the tile rows kept from before it (ptxas sm_90a
  // spilled one to carry it across 128x256 logits with a bias).
  KernelEmitter after = e.withThreadId(opaqueThreadIdx(e));
  Fragment merge = s.matmul.layout(after, {rowBase, bn, n, colBegin, cols, colEnd});
  stats.mergeFragmentRows(e, merge.sharing, shared, state, bn,
                          [&](KernelEmitter &we, Value tileRow, ValueRange merged) {
                            Value row = we.add(rowBase, tileRow);
                            we.ifThen(we.cmpI(arith::CmpIPredicate::ult, row, n),
                                      [&](KernelEmitter &se) {
                                        stats.store(se, merged, partials,
                                                    se.add(se.mul(split, n), row));
                                      });
                          });
  s.sink.end();
}

/// Rows of one lce_combine block: a warp, a thread per row.
constexpr int64_t kCombineRows = 32;

/// The raw label logit x[row]·w[label] (no bias) of each thread's row of an
/// lce_combine block (kCombineRows rows from `rowBase`; the block calls it
/// in uniform flow). Each thread sums its own row in ascending k, as
/// KernelEmitter::dot and the CPU backend do, so the bits are theirs. But a
/// thread reading its own rows would make every warp load touch 32 cache
/// lines (rows D elements apart): the block instead stages kCombineRows k
/// of its rows of x and of their labels' rows of w in shared memory (`xs`,
/// `ws`: k-major, kCombineRows + 1 apart, so that neither the stores nor
/// the loads conflict; `labelRows`: i64), each warp load reading
/// consecutive k of one row. Rows past N read row N − 1 and labels outside
/// [0, V) w's row 0: those logits are never used. A block none of whose
/// rows needs its logit (rows past N, ignored labels, labels outside [0,
/// V): a run of masked prompt tokens) skips the tiles altogether; the
/// threads agree through `needs` (kCombineRows i32 flags in shared memory),
/// so the skip is uniform.
Value labelLogitsByTiles(KernelEmitter &e, const LceSpec &spec, const KernelArgs &a, Value rowBase,
                         Value xs, Value ws, Value labelRows, Value needs) {
  constexpr int64_t rows = kCombineRows, pitch = kCombineRows + 1;
  OpBuilder &b = e.builder();
  Type i64 = b.getI64Type();
  Value n = a["N"], v = a["V"], d = a["D"], x = a["x"], w = a["w"];
  Value tid = gpuThreadIdx(e);
  Value last = e.sub(n, e.index(1));
  Value label = e.loadLabel(a["labels"], e.minUI(e.add(rowBase, tid), last));
  Value inRange = e.cmpI(arith::CmpIPredicate::ult, label, v);
  Value safe = e.select(inRange, label, e.index(0));
  e.store(arith::IndexCastOp::create(b, e.location(), i64, safe), labelRows, tid);
  // The logit is used where the row rule reads it: a row of the op, its
  // label counted and in range (V = 0 has none).
  Value used = e.andI(e.cmpI(arith::CmpIPredicate::ult, e.add(rowBase, tid), n), inRange);
  e.store(e.select(used, emitCountedI32(e, spec, label), e.i32(0)), needs, tid);
  gpuBarrier(e);
  // Every thread sums the same flags (a broadcast read): the same count.
  Value needed = e.forLoop(e.index(0), e.index(rows), e.index(1), {e.i32(0)},
                           [&](KernelEmitter &le, Value i, ValueRange it) {
                             return SmallVector<Value>{le.addI32(it[0], le.load(needs, i))};
                           })[0];
  Value depth = e.select(e.cmpI(arith::CmpIPredicate::eq, needed, e.i32(0)), e.index(0), d);
  SmallVector<Value> dot = e.forLoop(
      e.index(0), depth, e.index(rows), {e.real(0.0)},
      [&](KernelEmitter &ke, Value k0, ValueRange acc) {
        // Thread t copies k0 + t of every row (the last k past D): every
        // load first, so that all 2 · kCombineRows are in flight together
        // (a row at a time would wait for each), then the stores.
        Value k = ke.minUI(ke.add(k0, tid), ke.sub(depth, ke.index(1)));
        SmallVector<Value> xv, wv;
        for (int64_t i = 0; i < rows; ++i) {
          Value xRow = ke.minUI(ke.add(rowBase, ke.index(i)), last);
          Value wRow =
              arith::IndexCastOp::create(ke.builder(), ke.location(), ke.builder().getIndexType(),
                                         ke.load(labelRows, ke.index(i)));
          xv.push_back(ke.load(x, ke.add(ke.mul(xRow, d), k)));
          wv.push_back(ke.load(w, ke.add(ke.mul(wRow, d), k)));
        }
        for (int64_t i = 0; i < rows; ++i) {
          Value at = ke.add(ke.mul(tid, ke.index(pitch)), ke.index(i));
          ke.store(ke.toReal(xv[i]), xs, at);
          ke.store(ke.toReal(wv[i]), ws, at);
        }
        gpuBarrier(ke);
        Value width = ke.minUI(ke.index(rows), ke.sub(depth, k0));
        SmallVector<Value> sum =
            ke.forLoop(ke.index(0), width, ke.index(1), {acc[0]},
                       [&](KernelEmitter &fe, Value kk, ValueRange it) {
                         Value at = fe.add(fe.mul(kk, fe.index(pitch)), tid);
                         return SmallVector<Value>{fe.fma(fe.load(xs, at), fe.load(ws, at), it[0])};
                       });
        // The next tile overwrites what this one read.
        gpuBarrier(ke);
        return sum;
      });
  return dot[0];
}

/// lce_combine, grid cdiv(N, kCombineRows): per row, the splits' partials
/// merged in split order → lse and the row loss (its target logit
/// recomputed: labelLogitsByTiles), or a reduction's statistics. With a
/// dependent sweep it also writes the lse pair that sweep reads (row_lse,
/// row_teacher_lse) and leaves the dependent sums to lce_combine_dep, which
/// merges their partials. Blocks of one warp spread the rows over as many
/// SMs as there are warps of rows (16 blocks of 256 rows at N = 4096 left
/// 116 of an H200's SMs idle).
void buildCombine(GpuSchedule &s, const RowStats &stats, bool dependent) {
  const bool feedsDependent = !dependent && s.spec.hasMixtureStatistics();
  // The cross-entropy's one label a row; a reduction's label logits (K
  // labels a row, each under its row rule) keep a dot product a thread.
  const bool tiledLabels = !s.spec.isVocabReduce();
  KernelSignature sig(dependent ? "lce_combine_dep" : "lce_combine");
  sig.arg("x", s.flat(s.storage())).arg("w", s.flat(s.storage()));
  sig.argIf(s.spec.hasBias, "bias", s.flat(s.storage()));
  if (s.spec.hasLabels)
    sig.arg("labels", s.flat(s.spec.labelType));
  for (const std::string &field : stats.fieldNames())
    sig.arg("part_" + field, s.flat(s.compute()));
  declareRowOutputs(sig, s.spec, s.compute());
  if (feedsDependent)
    sig.arg("row_lse", s.flat(s.compute())).arg("row_teacher_lse", s.flat(s.compute()));
  sig.arg("N", s.index()).arg("V", s.index()).arg("D", s.index()).arg("S", s.index());
  LaunchShape launch;
  launch.grid = {"cdiv(N," + std::to_string(kCombineRows) + ")", "1", "1"};
  launch.threads = kCombineRows;
  if (tiledLabels) {
    const int64_t tileElements = kCombineRows * (kCombineRows + 1);
    launch.workgroup = {s.shared(tileElements, s.compute()), s.shared(tileElements, s.compute()),
                        s.shared(kCombineRows, s.sink.builder().getI64Type()),
                        s.shared(kCombineRows, s.sink.builder().getI32Type())};
  }
  KernelArgs a = s.sink.begin(sig, launch);
  SmallVector<Value> partials;
  for (const std::string &field : stats.fieldNames())
    partials.push_back(a["part_" + field]);

  KernelEmitter e(s.sink.builder(), s.sink.location(), s.spec.compute);
  Value n = a["N"], v = a["V"], d = a["D"];
  Value rowBase = e.mul(gpuBlockIdx(e, 0), e.index(kCombineRows));
  Value row = e.add(rowBase, gpuThreadIdx(e));
  Value labelDot = tiledLabels ? labelLogitsByTiles(e, s.spec, a, rowBase, a.workgroup(0),
                                                    a.workgroup(1), a.workgroup(2), a.workgroup(3))
                               : Value();
  e.ifThen(e.cmpI(arith::CmpIPredicate::ult, row, n), [&](KernelEmitter &re) {
    SmallVector<Value> state = re.forLoop(
        re.index(0), a["S"], re.index(1), stats.identity(re),
        [&](KernelEmitter &le, Value split, ValueRange it) {
          return stats.merge(le, it, stats.load(le, partials, le.add(le.mul(split, n), row)));
        });
    if (feedsDependent) {
      re.store(stats.finish(re, state, loss::Statistic::lse), a["row_lse"], row);
      re.store(stats.finish(re, state, loss::Statistic::teacher_lse), a["row_teacher_lse"],
               row);
    }
    emitRowOutputs(
        re, s.spec, a, row, v,
        [&](KernelEmitter &fe, loss::Statistic what) { return stats.finish(fe, state, what); },
        [&](KernelEmitter &te, Value label) {
          // (The tiles' logit is this label's: it is the row's, in range.)
          Value z =
              labelDot ? labelDot : te.dot(a["x"], te.mul(row, d), a["w"], te.mul(label, d), d);
          return a["bias"] ? te.addF(z, te.loadReal(a["bias"], label)) : z;
        },
        [&](loss::Statistic what) { return RowStats::isDependent(what) == dependent; });
  });
  s.sink.end();
}

/// Whether the cross-entropy's row losses are reduced into one loss (from
/// the "loss_rows" workspace by lce_reduce).
bool reducesRowLosses(const LceSpec &spec) {
  return !spec.isVocabReduce() && spec.reduction != loss::Reduction::none;
}
} // namespace

void lossjit::addBias(KernelEmitter &e, Value bias, Fragment &z) {
  if (!bias)
    return;
  for (size_t j = 0; j < z.cols.size(); ++j) {
    // (Columns are clamped: the load stays in bounds.)
    Value b = e.loadReal(bias, z.cols[j]);
    for (size_t i = 0; i < z.rows.size(); ++i)
      z.at(i, j) = e.addF(z.at(i, j), b);
  }
}

void lossjit::buildGpuReduceKernel(GpuSchedule &s) {
  const int64_t threads = s.tile.threads;
  Type i32 = s.sink.builder().getI32Type();
  KernelSignature sig("lce_reduce");
  sig.arg("labels", s.flat(s.spec.labelType)).arg("loss_rows", s.flat(s.compute()));
  sig.arg("loss", s.flat(s.compute())).arg("N", s.index());
  LaunchShape launch;
  launch.workgroup = {s.shared(threads, s.compute()), s.shared(threads, s.compute()),
                      s.shared(threads, i32)};
  KernelArgs a = s.sink.begin(sig, launch);
  Value sums = a.workgroup(0), comps = a.workgroup(1), counts = a.workgroup(2);

  KernelEmitter e(s.sink.builder(), s.sink.location(), s.spec.compute);
  Value tid = gpuThreadIdx(e);
  // Thread t sums rows t, t+T, t+2T, ... in order: the same lanes the CPU
  // reduction simulates, so both backends reduce identically.
  SmallVector<Value> acc =
      emitLaneLossAndCount(e, s.spec, a["labels"], a["loss_rows"], tid, a["N"], e.index(threads));
  e.store(acc[0], sums, tid);
  e.store(acc[1], comps, tid);
  e.store(acc[2], counts, tid);
  gpuBarrier(e);
  emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
    emitMergeLossAndCount(in, sums, comps, counts, dst, src);
  });
  e.ifThen(e.cmpI(arith::CmpIPredicate::eq, tid, e.index(0)), [&](KernelEmitter &we) {
    Value first = we.index(0);
    we.store(emitReducedLoss(we, s.spec, we.load(sums, first), we.load(comps, first),
                             we.load(counts, first)),
             a["loss"], first);
  });
  s.sink.end();
}

void lossjit::buildGpuForward(GpuSchedule &s) {
  PlanBuilder plan(s.sink.plan());
  plan.begin(s.spec, s.tile.str());
  buildGpuRowStatistics(s, plan);
  if (reducesRowLosses(s.spec))
    buildGpuReduceKernel(s);
}

void lossjit::buildGpuRowStatistics(GpuSchedule &s, PlanBuilder &plan) {
  plan.constant("S", s.tile.splits);
  for (const std::string &field : s.stats.fieldNames())
    plan.workspace("part_" + field, s.spec.computeName(), "S*N");
  // A dependent sum (jsd, mixture_kl) takes a second sweep: its partials,
  // and the finished lse pair it reads.
  RowStats dependent = RowStats::dependentForSpec(s.spec);
  for (const std::string &field : dependent.fieldNames())
    plan.workspace("part_" + field, s.spec.computeName(), "S*N");
  if (!dependent.empty()) {
    plan.workspace("row_lse", s.spec.computeName(), "N");
    plan.workspace("row_teacher_lse", s.spec.computeName(), "N");
  }
  if (reducesRowLosses(s.spec))
    plan.workspace("loss_rows", s.spec.computeName(), "N");
  buildPartial(s, s.stats, /*dependent=*/false);
  buildCombine(s, s.stats, /*dependent=*/false);
  if (!dependent.empty()) {
    buildPartial(s, dependent, /*dependent=*/true);
    buildCombine(s, dependent, /*dependent=*/true);
  }
}

llvm::Error lossjit::buildGpuSchedule(OpBuilder &builder, Location loc, StringRef prefix,
                                      const LceSpec &spec, const TileConfig &tile,
                                      LaunchPlan &plan) {
  OpBuilder::InsertionGuard guard(builder);
  if (loss::isTensorCoreMatmul(tile.matmul)) {
    const std::string kind = loss::stringifyMatmulKind(tile.matmul).str();
    if (spec.gradient && spec.strategy == "recompute")
      return llvm::createStringError(
          "matmul " + kind + " does not build the recompute backward (its dX/dW kernels "
          "recompute logits in SIMT tiles); use strategy chunked or matmul simt");
    if (spec.storesCompute())
      return llvm::createStringError("matmul " + kind + " multiplies f16 or bf16 operands; f32 "
                                     "and f64 storage stay on matmul simt");
  }
  std::unique_ptr<TileMatmul> matmul = createTileMatmul(tile);
  if (!matmul)
    return llvm::createStringError("no tile-matmul strategy for " + tile.str());
  // The SIMT tile of the kernels the configured strategy does not build:
  // the default rows per thread, the configured threads and splits.
  TileConfig simtTile = tile;
  std::unique_ptr<TileMatmul> simtOwned;
  if (tile.matmul != loss::MatmulKind::simt) {
    simtTile = TileConfig();
    simtTile.threads = tile.threads;
    simtTile.splits = tile.splits;
    if (llvm::Error err = simtTile.validate())
      return llvm::createStringError("the SIMT kernels next to " + tile.str() + ": " +
                                     llvm::toString(std::move(err)));
    simtOwned = createTileMatmul(simtTile);
  }
  // The gradient products' tile, where its columns differ (wgmma's
  // grad_cols; the threads follow the rows alone).
  const TileConfig productTile = tile.gradientTile();
  std::unique_ptr<TileMatmul> productOwned;
  if (productTile.blockCols != tile.blockCols) {
    productOwned = createTileMatmul(productTile);
    if (!productOwned)
      return llvm::createStringError("no tile-matmul strategy for " + productTile.str());
  }
  GpuKernelSink sink(builder, loc, plan, prefix, tile.threads);
  GpuSchedule s{sink,     spec,        tile,        *matmul,
                simtTile, simtOwned ? *simtOwned : *matmul,
                productTile, productOwned ? *productOwned : *matmul};
  if (!spec.gradient)
    buildGpuForward(s);
  else if (llvm::Error err = buildGpuBackward(s))
    return err;
  // A cluster size no kernel of the op can take is an error, not a tile
  // recorded in the manifest that changes nothing.
  if (tile.cluster > 1 && sink.clusteredKernels() == 0)
    return llvm::createStringError(
        "tile cluster=" + std::to_string(tile.cluster) +
        " puts no kernel of this op in clusters: the logits products take them on a "
        "warp-specialized ring (tma >= 2) and not for a teacher's logits, the gradient "
        "products also need block_k 64 and columns in whole 64-line boxes per block; got " +
        tile.str());
  return llvm::Error::success();
}
