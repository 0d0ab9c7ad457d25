//===- Backward.cpp - the GPU gradients: chunked, recompute, fused --------===//
//
// Determinism: every dX / dW element has one owner thread that sums its
// terms in a fixed order (rows of a chunk in order, chunks in launch order);
// f32 accumulators for 16-bit storage are rounded once at the end, or,
// where one chunk holds every row, each sum where it is formed
// (lce_bwd_dw_single).
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/RowStats/Adjoints.h"
#include "compiler/Kernels/RowStats/LogitMaps.h"
#include "compiler/Kernels/RowStats/RowRules.h"
#include "compiler/Kernels/Schedules/ChunkedBackward.h"
#include "compiler/Kernels/Schedules/GPU/GpuSchedule.h"
#include "compiler/Kernels/Support/BlockReduce.h"
#include "compiler/Kernels/Support/PlanBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <numeric>

using namespace mlir;
using namespace lossjit;

namespace {
/// RowAdjoint::teacherAt for a teacher logit whose raw product a tile
/// product formed (GpuSchedule::teacherTile): its bias and scale at the
/// column the adjoint asks for.
std::function<Value(KernelEmitter &, Value)> teacherFrom(const LceSpec &spec, const KernelArgs &a,
                                                         Value raw) {
  Value bias = a["teacher_bias"];
  return [&spec, bias, raw](KernelEmitter &e, Value col) {
    return emitTeacherFromRaw(e, spec, raw, bias, col);
  };
}

/// i < count.
Value below(KernelEmitter &e, Value i, Value count) {
  return e.cmpI(arith::CmpIPredicate::ult, i, count);
}

/// Runs `body` for columns tid, tid+T, … < d: the columns thread `tid`
/// owns (each element has one owner).
void forThreadColumns(KernelEmitter &e, Value tid, int64_t threads, Value d,
                      const std::function<void(KernelEmitter &, Value)> &body) {
  e.forLoop(tid, d, e.index(threads), {}, [&](KernelEmitter &de, Value col, ValueRange) {
    body(de, col);
    return SmallVector<Value>{};
  });
}

/// Tiles of T columns over [0, d): the uniform loop a tile product needs
/// (thread t takes column c0 + t; columns past d are clamped, not stored).
void forColumnTiles(KernelEmitter &e, int64_t threads, Value d,
                    const std::function<void(KernelEmitter &, Value c0)> &body) {
  e.forLoop(e.index(0), d, e.index(threads), {}, [&](KernelEmitter &de, Value c0, ValueRange) {
    body(de, c0);
    return SmallVector<Value>{};
  });
}

/// The smallest power of two above `m` ≥ 0 (2^-125 … 2^126): what the
/// tensor-core dZ is divided by so |dZ| < 1, exactly (a power of two scales
/// without rounding) and without a math library call.
Value powerOfTwoAbove(KernelEmitter &e, Value m) {
  OpBuilder &b = e.builder();
  Location loc = e.location();
  Type i32 = b.getI32Type();
  auto constant = [&](int32_t v) { return arith::ConstantIntOp::create(b, loc, i32, v); };
  Value bits = arith::BitcastOp::create(b, loc, i32, m);
  Value exponent = arith::AndIOp::create(b, loc, bits, constant(0x7F800000));
  exponent = arith::MaxSIOp::create(b, loc, exponent, constant(0x00800000));
  exponent = arith::MinSIOp::create(b, loc, exponent, constant(0x7E000000));
  Value next = arith::AddIOp::create(b, loc, exponent, constant(0x00800000));
  return arith::BitcastOp::create(b, loc, b.getF32Type(), next);
}

/// The tiles (rowBlock, colBlock) of `rows` × `cols` over lines [first,
/// limit) (null `first`: from 0) and columns [0, d): a gradient product's
/// grid over a chunk's rows or vocabulary rows, or over all of them.
GpuSchedule::TileOf lineTiles(Value first, Value limit, int64_t rows, int64_t cols, Value d) {
  return [=](KernelEmitter &te, Value rowBlock, Value colBlock) {
    Value line = te.mul(rowBlock, te.index(rows));
    if (first)
      line = te.add(first, line);
    return BlockTile{line, rows, limit, te.mul(colBlock, te.index(cols)), cols, d};
  };
}

struct Backward : ChunkedBackwardSteps {
  explicit Backward(GpuSchedule &s) : s(s) {}
  GpuSchedule &s;
  /// dW / db accumulators of the chunked schedule.
  ChunkedAccumulators acc;

  std::string productDzType() const override {
    return loss::storageTypeName(s.dzType()).str();
  }
  int64_t balancedChunkRows() const override {
    return std::lcm(s.tile.blockRows, s.gradTile().blockRows);
  }
  void scale() override { buildScale(); }
  void zero(const ChunkedAccumulators &accumulators) override {
    acc = accumulators;
    buildZero();
  }
  void dz(bool storeRaw) override { buildDz(storeRaw); }
  std::string fusedTileStates() const override {
    if (!foldsTileStats())
      return "";
    std::string states = "cdiv(V," + std::to_string(s.tile.tileCols()) + ")";
    const int64_t groups = tileStateGroups();
    return groups == 1 ? states : states + "*" + std::to_string(groups);
  }
  /// The states a logit tile leaves each of its rows: one per merge slot
  /// of a row (RowSharing::groups; wgmma: the quad that holds it, mma_sync:
  /// one per warp column).
  int64_t tileStateGroups() const { return s.matmul.rowMergeSlots(1); }
  void fusedRows() override {
    if (foldsTileStats())
      buildFusedLseFromTiles();
    else
      buildFusedLse();
  }
  void fusedDz() override { buildFusedDz(); }
  void dx() override { buildDx(); }
  void dw(const ChunkedAccumulators &accumulators) override {
    acc = accumulators;
    buildDw();
  }
  bool roundsSingleChunk() const override { return true; }
  void dwSingle(const ChunkedAccumulators &accumulators) override {
    acc = accumulators;
    buildDw(/*single=*/true);
  }
  void finish() override { buildFinish(); }
  void reduce() override { buildGpuReduceKernel(s); }

  Type st() const { return s.storage(); }
  MemRefType flat(Type t) const { return s.flat(t); }
  KernelEmitter emitter() { return KernelEmitter(s.sink.builder(), s.sink.location(), s.spec.compute); }

  /// lce_bwd_scale, one block: the counted rows (fixed tree), the shared
  /// factor, and g_r of every row into `grow`; with tensor-core gradients
  /// also G = the power of two above max (|g_r| + |a_r|) into `gscale` (a_r:
  /// the row's lse gradient, if any; dZ / G is what the products read, so
  /// its 16-bit storage neither underflows nor overflows: |dZ / G| < 1).
  void buildScale() {
    const int64_t threads = s.simtTile.threads;
    const bool scaled = s.tensorCoreGradients();
    KernelSignature sig("lce_bwd_scale");
    // The fused forward+backward has no grad_loss yet: it computes the
    // gradients of grad_loss = 1, which the caller rescales later.
    sig.arg("labels", flat(s.spec.labelType));
    sig.argIf(!s.spec.fusedForward, "grad_loss", flat(s.compute()));
    sig.arg("grow", flat(s.compute()));
    sig.argIf(scaled && s.spec.hasGradLse, "grad_lse", flat(s.compute()));
    sig.argIf(scaled, "gscale", flat(s.compute()));
    sig.arg("N", s.index()).arg("V", s.index());
    LaunchShape launch;
    launch.workgroup = {s.shared(threads, s.sink.builder().getI32Type())};
    if (scaled)
      launch.workgroup.push_back(s.shared(threads, s.compute()));
    KernelArgs a = s.sink.begin(sig, launch);
    Value counts = a.workgroup(0);
    KernelEmitter e = emitter();
    Value tid = gpuThreadIdx(e), n = a["N"];
    Value mine = e.forLoop(tid, n, e.index(threads), {e.i32(0)},
                           [&](KernelEmitter &le, Value r, ValueRange it) {
                             Value one = emitCountedI32(le, s.spec, le.loadLabel(a["labels"], r));
                             return SmallVector<Value>{le.addI32(it[0], one)};
                           })[0];
    e.store(mine, counts, tid);
    gpuBarrier(e);
    emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
      in.store(in.addI32(in.load(counts, dst), in.load(counts, src)), counts, dst);
    });
    Value scale = emitGradScale(e, s.spec, a["grad_loss"], e.load(counts, e.index(0)));
    Value largest = e.forLoop(tid, n, e.index(threads), {e.real(0.0)},
                              [&](KernelEmitter &le, Value r, ValueRange it) {
                                Value g = emitRowFactor(le, s.spec, a["labels"], a["grad_loss"],
                                                        scale, r, a["V"]);
                                le.store(g, a["grow"], r);
                                // |dZ| <= |g| + |a| with an lse gradient a.
                                Value bound = le.absF(g);
                                if (Value lseGrad = a["grad_lse"])
                                  bound = le.addF(bound, le.absF(le.load(lseGrad, r)));
                                return SmallVector<Value>{le.maxF(it[0], bound)};
                              })[0];
    if (scaled) {
      // Ordered like every block tree; max is exact, so only NaN could
      // care, and NaN gradients stay NaN whatever G is.
      Value maxima = a.workgroup(1);
      gpuBarrier(e);
      e.store(largest, maxima, tid);
      gpuBarrier(e);
      emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
        in.store(in.maxF(in.load(maxima, dst), in.load(maxima, src)), maxima, dst);
      });
      e.ifThen(e.cmpI(arith::CmpIPredicate::eq, tid, e.index(0)), [&](KernelEmitter &we) {
        we.store(powerOfTwoAbove(we, we.load(maxima, we.index(0))), a["gscale"], we.index(0));
      });
    }
    s.sink.end();
  }

  /// dZ as the gradient products read it: `dz` itself (f32, SIMT
  /// products) or dz / G rounded to storage (tensor cores).
  Value productDz(KernelEmitter &e, Value dz, Value invG) {
    return invG ? e.toStorage(e.mulF(dz, invG), st()) : dz;
  }
  /// 1 / G (exact: G is a power of two), or null without tensor cores.
  Value inverseGradScale(KernelEmitter &e, const KernelArgs &a) {
    return s.tensorCoreGradients() ? e.divF(e.real(1.0), e.load(a["gscale"], e.index(0))) : Value();
  }

  /// lce_bwd_dz (per chunk): the [BN × T] logit tile of rows of the chunk →
  /// dZ into the [C, V] workspace. With `storeRaw` (lce_fused_z) the raw
  /// logits x·w + b instead, which lce_fused_lse / lce_fused_dz consume.
  /// Vocabulary chunks (spec.vocabChunks): chunk_begin / chunk_end are
  /// columns, and the products run over every row.
  bool vocab() const { return s.spec.vocabChunks; }
  /// The chunk range's args, and with vocabulary chunks N and the chunk
  /// width C (the dZ workspace's row stride).
  void chunkArgs(KernelSignature &sig) const {
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index());
    if (vocab())
      sig.arg("N", s.index()).arg("C", s.index());
  }

  /// Whether lce_fused_z folds its tiles' row statistics (fusedTileStates):
  /// on tensor-core tiles, whose rows a warp's quads share, so a tile's
  /// states merge by shuffles without a barrier. A SIMT tile holds one
  /// column a thread: its states would be the logits themselves.
  bool foldsTileStats() const {
    return s.spec.fusedForward && !vocab() && loss::isTensorCoreMatmul(s.tile.matmul);
  }

  void buildDz(bool storeRaw) {
    KernelSignature sig(storeRaw ? "lce_fused_z" : "lce_bwd_dz");
    sig.arg("x", flat(st())).arg("w", flat(st())).argIf(s.spec.hasBias, "bias", flat(st()));
    if (!storeRaw)
      declareAdjointInputs(sig, s.spec, s.compute());
    const bool scaled = !storeRaw && s.tensorCoreGradients();
    sig.argIf(scaled, "gscale", flat(s.compute()));
    // Raw logits stay f32 (lse is formed from them); dZ is what the
    // gradient products read.
    sig.arg("dz", flat(storeRaw ? s.compute() : s.dzType()));
    const bool tileStats = storeRaw && foldsTileStats();
    if (tileStats)
      for (const std::string &field : s.stats.fieldNames())
        sig.arg("tile_" + field, flat(s.compute()));
    chunkArgs(sig);
    sig.arg("V", s.index()).arg("D", s.index());
    // The logits product: the configured strategy's block tile (BM rows ×
    // BN columns; SIMT: block_rows × one column per thread) over the
    // chunk's rows and every column, or (vocabulary chunks) every row and
    // the chunk's columns.
    const int64_t bm = s.tile.blockRows, cols = s.tile.tileCols();
    const std::string colTiles = "," + std::to_string(cols) + ")";
    // Clusters of row blocks of one column multicast its W tile (Wgmma.cpp,
    // "Clusters"); grid.x rounds up to whole clusters, and a block past the
    // rows masks them all, as a short last chunk's do.
    const int64_t cluster = s.logitsCluster();
    LaunchShape launch = vocab() ? s.productLaunch(s.tile, "N", "cdiv(C" + colTiles, cluster)
                                 : s.productLaunch(s.tile, "C", "cdiv(V" + colTiles, cluster);
    s.stageOperands(launch);
    s.declareOperandMaps(sig, cluster ? cols / cluster : 0);
    KernelArgs a = s.sink.begin(sig, launch);
    SmallVector<Value> scratch = s.staged(a, launch);
    KernelEmitter e0 = emitter();
    Value v = a["V"], d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value invG = scaled ? inverseGradScale(e0, a) : Value();
    // The teacher's logits of the same tile, where an adjoint reads them:
    // a second product per tile.
    const bool teacher = !storeRaw && a["teacher_x"];
    // dZ[(row − rowOrigin)·stride + col − colOrigin]: the chunk's rows of V
    // columns, or every row's C columns of the chunk (null: origin 0).
    Value rowOrigin = vocab() ? Value() : cb, colOrigin = vocab() ? cb : Value();
    Value rowEnd = vocab() ? a["N"] : ce, colEnd = vocab() ? ce : v;
    Value stride = vocab() ? a["C"] : v;
    auto relative = [](KernelEmitter &re, Value i, Value origin) {
      return origin ? re.sub(i, origin) : i;
    };
    s.forEachTile(
        e0, s.tile, s.matmul, s.operandX(a, d), s.operandW(a, d),
        e0.ceilDiv(relative(e0, rowEnd, rowOrigin), e0.index(bm)),
        e0.ceilDiv(relative(e0, colEnd, colOrigin), e0.index(cols)),
        [&](KernelEmitter &te, Value rowBlock, Value colBlock) {
          Value firstRow = te.mul(rowBlock, te.index(bm));
          if (rowOrigin)
            firstRow = te.add(rowOrigin, firstRow);
          Value firstCol = te.mul(colBlock, te.index(cols));
          if (colOrigin)
            firstCol = te.add(colOrigin, firstCol);
          return BlockTile{firstRow, bm, rowEnd, firstCol, cols, colEnd};
        },
        e0.index(0), d, scratch,
        [&](KernelEmitter &e, const BlockTile &tile, Fragment &z) {
          Fragment u;
          if (teacher)
            u = s.teacherTile(e, a, s.matmul, tile, scratch);
          SmallVector<RowAdjoint, 2> adjs(z.rows.size());
          // The raw logits of the fragment, for its row statistics.
          SmallVector<SmallVector<Value>> raws(z.rows.size(), SmallVector<Value>(z.cols.size()));
          auto loadRow = [&](size_t i) {
            if (!storeRaw)
              adjs[i] = loadRowAdjoint(e, s.spec, a, z.rows[i]);
          };
          // Element (i, j) of the fragment, with its column's bias and
          // weight (null: none).
          auto element = [&](size_t i, size_t j, Value bias, Value weight) {
            Value row = z.rows[i], col = z.cols[j];
            RowAdjoint &adj = adjs[i];
            if (!u.values.empty())
              adj.teacherAt = teacherFrom(s.spec, a, u.at(i, j));
            Value raw = bias ? e.addF(z.at(i, j), bias) : z.at(i, j);
            raws[i][j] = raw;
            Value dz = storeRaw ? raw : emitRawGrad(e, s.spec, adj, raw, col, weight);
            e.ifThen(e.andI(z.rowValid[i], z.colValid[j]), [&](KernelEmitter &se) {
              se.store(storeRaw ? dz : productDz(se, dz, invG), a["dz"],
                       se.add(se.mul(relative(se, row, rowOrigin), stride),
                              relative(se, col, colOrigin)));
            });
          };
          // The order decides which lines' values stay live through the
          // tile: row by row keeps every column's (offset, validity, bias,
          // weight), column by column every row's (offset, adjoint).
          // Fragments with at least 4 columns per row (wgmma's: 2 rows ×
          // BN/4 columns per thread) go column by column: row by row kept
          // their column values live across both rows (dZ of 128-column
          // tiles with tma=2: 214 registers against 147; with a bias the
          // 224-register cap and 192 bytes of spills). Narrower ones
          // (mma_sync's 4 × 8) row by row: column by column, ptxas spills 8
          // bytes of sm_80's lce_fused_z.
          SmallVector<Value> biases, weights;
          auto loadColumn = [&](size_t j) {
            Value col = z.cols[j];
            biases.push_back(a["bias"] ? e.loadReal(a["bias"], col) : Value());
            weights.push_back(storeRaw ? Value() : loadColumnWeight(e, s.spec, a, col));
          };
          // The inner lines' values first, then each outer line's as the
          // walk reaches it.
          const bool byColumn = z.cols.size() >= 4 * z.rows.size();
          const size_t outer = byColumn ? z.cols.size() : z.rows.size();
          const size_t inner = byColumn ? z.rows.size() : z.cols.size();
          auto loadLine = [&](bool column, size_t k) { column ? loadColumn(k) : loadRow(k); };
          for (size_t k = 0; k < inner; ++k)
            loadLine(!byColumn, k);
          for (size_t o = 0; o < outer; ++o) {
            loadLine(byColumn, o);
            for (size_t n = 0; n < inner; ++n) {
              const size_t i = byColumn ? n : o, j = byColumn ? o : n;
              element(i, j, biases[j], weights[j]);
            }
          }
          if (tileStats)
            storeTileStats(e, a, tile, z, raws);
        },
        /*overlap=*/!teacher, cluster);
    s.sink.end();
  }

  /// lce_fused_z's epilogue (foldsTileStats): the statistics of each
  /// fragment row's logits in this tile, folded as lce_partial folds its
  /// tiles, merged across the lanes that share the row, and stored by the
  /// row's leader lane at [state, chunk row] of "tile_<field>" with state =
  /// column tile · slots + slot (RowSharing::group of groups): every state
  /// has one writer and a fixed order in lce_fused_lse. The whole warp runs
  /// the shuffles; rows past the chunk are not stored.
  void storeTileStats(KernelEmitter &e, const KernelArgs &a, const BlockTile &tile, Fragment &z,
                      ArrayRef<SmallVector<Value>> raws) {
    const int64_t cols = s.tile.tileCols(), groups = tileStateGroups();
    assert(z.sharing.groups == groups && "the plan's states a tile are the fragment's groups");
    SmallVector<SmallVector<Value>> logits;
    for (ArrayRef<Value> row : raws) {
      logits.emplace_back();
      for (Value raw : row)
        logits.back().push_back(emitLogit(e, s.spec, raw));
    }
    const unsigned rows = static_cast<unsigned>(z.rows.size());
    SmallVector<Value> state = s.stats.pushRows(e, s.stats.identity(e, rows), logits, z.colValid);
    state = s.stats.mergeSharingLanes(e, z.sharing, state);
    SmallVector<Value> buffers;
    for (const std::string &field : s.stats.fieldNames())
      buffers.push_back(a["tile_" + field]);
    Value cb = a["chunk_begin"];
    Value chunkRows = e.sub(a["chunk_end"], cb);
    Value slot =
        e.add(e.mul(e.divUI(tile.colBegin, e.index(cols)), e.index(groups)), z.sharing.group);
    e.ifThen(z.sharing.leader, [&](KernelEmitter &le) {
      for (unsigned i = 0; i < rows; ++i)
        le.ifThen(z.rowValid[i], [&](KernelEmitter &se) {
          Value at = se.add(se.mul(slot, chunkRows), se.sub(z.rows[i], cb));
          s.stats.store(se, s.stats.row(state, i), buffers, at);
        });
    });
  }

  /// The dZ workspace the gradient products read: the fused op in row
  /// chunks keeps its f32 raw logits in "dz" and, with tensor cores, writes
  /// the 16-bit dZ next to them in "dzs"; in vocabulary chunks it has its lse
  /// before any dZ, which lce_bwd_dz writes into "dz" as the backward does.
  const char *productDzName() const {
    return s.spec.fusedForward && !vocab() && s.tensorCoreGradients() ? "dzs" : "dz";
  }

  /// For each valid element (i, j) of a gradient product's fragment `f`
  /// (rows of d elements): body(at = row·d + col, G·f(i, j)), G the
  /// tensor-core dZ scale (null: f(i, j) itself).
  void forEachElement(KernelEmitter &te, Fragment &f, Value d, Value g,
                      const std::function<void(KernelEmitter &, Value at, Value sum)> &body) {
    for (size_t i = 0; i < f.rows.size(); ++i)
      for (size_t j = 0; j < f.cols.size(); ++j)
        te.ifThen(te.andI(f.rowValid[i], f.colValid[j]), [&](KernelEmitter &se) {
          Value at = se.add(se.mul(f.rows[i], d), f.cols[j]);
          body(se, at, g ? se.mulF(f.at(i, j), g) : f.at(i, j));
        });
  }

  /// Begins a per-chunk gradient product kernel of `sig` (complete but for
  /// its tensor maps): lce_bwd_dx, or with `weightGradient` lce_bwd_dw, on
  /// the gradient tile's grid over `lines` (a formula: the chunk's rows C,
  /// all rows N, the vocabulary V or a vocabulary chunk's C) × D, grid.x
  /// times `enabled` (a 0/1 formula; empty: always). Its args and staged
  /// operand buffers.
  std::pair<KernelArgs, SmallVector<Value>> beginGradientProduct(KernelSignature &sig,
                                                                 const std::string &lines,
                                                                 bool weightGradient,
                                                                 const std::string &enabled = "") {
    const TileConfig &tile = s.gradTile();
    std::string colBlocks = "cdiv(D," + std::to_string(tile.tileCols()) + ")";
    if (weightGradient && s.spec.needsGradBias())
      colBlocks = "max(1," + colBlocks + ")"; // see weightColumnBlocks
    // Clusters of row blocks of one column block multicast its B tile
    // (Wgmma.cpp, "Clusters"), as the logits products do.
    LaunchShape launch = s.productLaunch(tile, lines, colBlocks, s.gradientCluster(weightGradient));
    enableWhen(launch, enabled);
    if (s.tensorCoreGradients())
      s.stageOperands(launch, &s.gradMatmul());
    if (weightGradient)
      s.declareWeightGradientMaps(sig, productDzName());
    else
      s.declareGradientMaps(sig, productDzName());
    KernelArgs a = s.sink.begin(sig, launch);
    SmallVector<Value> scratch = s.staged(a, launch, &s.gradMatmul());
    return {std::move(a), std::move(scratch)};
  }

  /// Multiplies the grid by `enabled` (a formula that is 0 or 1; empty:
  /// always), so the launcher skips the kernel where it is 0.
  static void enableWhen(LaunchShape &launch, const std::string &enabled) {
    if (!enabled.empty())
      launch.grid[0] = "(" + launch.grid[0] + ")*" + enabled;
  }

  /// The column tiles of a dW kernel over D: at least one where db is
  /// wanted, since the tiles of the first column own db (forBiasRows) and D
  /// = 0 (logits that are the bias alone) has none of its own.
  Value weightColumnBlocks(KernelEmitter &e, Value d, int64_t cols) {
    Value blocks = e.ceilDiv(d, e.index(cols));
    return s.spec.needsGradBias() ? e.maxUI(blocks, e.index(1)) : blocks;
  }

  /// The end of a dW product's terms [kBegin, kEnd): kBegin (none) when D
  /// = 0, whose only tiles are db's (weightColumnBlocks). Their products
  /// must not read X: its rows have no element to clamp onto (a zero-size
  /// x may have no storage at all).
  Value weightTermsEnd(KernelEmitter &e, Value d, Value kBegin, Value kEnd) {
    if (!s.spec.needsGradBias())
      return kEnd;
    return e.select(e.cmpI(arith::CmpIPredicate::eq, d, e.index(0)), kBegin, kEnd);
  }

  /// lce_bwd_dx (per chunk): dX rows of the chunk = dZ rows · W, one block
  /// tile of the gradient strategy per block (SIMT: BN rows × one column
  /// per thread; tensor cores: BM × BN), each element summed over the whole
  /// vocabulary by its one owner.
  ///
  /// Vocabulary chunks: every row's dX += the chunk's dZ columns · the
  /// chunk's rows of W, into `dxAcc` (an f32 accumulator, or f32 grad_x),
  /// which lce_bwd_zero_dx zeroed before the chunks; the chunks add in
  /// order, each element by its one owner.
  void buildDx(const std::string &dxAcc = "grad_x") {
    const TileConfig &tile = s.gradTile();
    KernelSignature sig("lce_bwd_dx");
    sig.arg(productDzName(), flat(s.dzType())).arg("w", flat(st()));
    sig.argIf(s.tensorCoreGradients(), "gscale", flat(s.compute()));
    if (vocab())
      sig.arg("dx_acc", flat(s.compute()), dxAcc);
    else
      sig.arg("grad_x", flat(st()));
    chunkArgs(sig);
    sig.arg("V", s.index()).arg("D", s.index());
    const int64_t rows = tile.blockRows, cols = tile.tileCols();
    auto [a, scratch] = beginGradientProduct(sig, vocab() ? "N" : "C", /*weightGradient=*/false);
    KernelEmitter e = emitter();
    Value v = a["V"], d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value g = s.tensorCoreGradients() ? e.load(a["gscale"], e.index(0)) : Value();
    if (vocab()) {
      // A = dZ [N × the chunk's columns] (k from cb), B = Wᵀ [D × V].
      MatrixOperand dz{a[productDzName()], a["C"], Value(), {}, cb, a["dz_map"], a["tma_ready"]};
      MatrixOperand wt{a["w"], Value(), d, {}, {}, a["wt_map"], a["tma_ready"]};
      Value acc = a["dx_acc"];
      s.forEachTile(
          e, tile, s.gradMatmul(), dz, wt, e.ceilDiv(a["N"], e.index(rows)),
          e.ceilDiv(d, e.index(cols)), lineTiles(Value(), a["N"], rows, cols, d), cb, ce, scratch,
          [&](KernelEmitter &te, const BlockTile &, Fragment &dx) {
            forEachElement(te, dx, d, g, [&](KernelEmitter &se, Value at, Value sum) {
              se.store(se.addF(se.load(acc, at), sum), acc, at);
            });
          },
          /*overlap=*/true, s.gradientCluster(/*weightGradient=*/false));
      s.sink.end();
      return;
    }
    // A = dZ [chunk rows × V] (chunk-relative), B = Wᵀ [D × V].
    MatrixOperand dz{a[productDzName()], v, Value(), cb, {}, a["dz_map"], a["tma_ready"]};
    MatrixOperand wt{a["w"], Value(), d, {}, {}, a["wt_map"], a["tma_ready"]};
    s.forEachTile(
        e, tile, s.gradMatmul(), dz, wt, e.ceilDiv(e.sub(ce, cb), e.index(rows)),
        e.ceilDiv(d, e.index(cols)), lineTiles(cb, ce, rows, cols, d), e.index(0), v, scratch,
        [&](KernelEmitter &te, const BlockTile &, Fragment &dx) {
          forEachElement(te, dx, d, g, [&](KernelEmitter &se, Value at, Value sum) {
            se.store(se.toStorage(sum, st()), a["grad_x"], at);
          });
        },
        /*overlap=*/true, s.gradientCluster(/*weightGradient=*/false));
    s.sink.end();
  }

  /// The elements lce_bwd_zero and lce_bwd_finish cover: dW's V·D, and at
  /// least db's V (D = 0 has no dW but still a db).
  std::string accumulatorElements() const { return s.spec.needsGradBias() ? "max(V*D,V)" : "V*D"; }

  /// lce_bwd_zero: dW_acc = 0 (and db_acc) when N = 0, where no chunk
  /// runs (with f32 storage these are grad_w and grad_bias themselves);
  /// with rows its grid is empty, since lce_bwd_dw starts the sums at the
  /// first chunk (buildDw) and no pass need zero the V × D accumulators. (An
  /// empty chunk is no option for N = 0: the per-chunk kernels clamp row
  /// indices onto a row that must exist.)
  void buildZero() {
    KernelSignature sig("lce_bwd_zero");
    sig.arg("dw_acc", flat(s.compute()), acc.dw);
    sig.argIf(s.spec.needsGradBias(), "db_acc", flat(s.compute()), acc.db);
    sig.arg("N", s.index()).arg("V", s.index()).arg("D", s.index());
    auto [a, i] = beginElementwise(sig, accumulatorElements(), /*onlyWithoutRows=*/true);
    KernelEmitter e = emitter();
    zeroElement(e, i, e.mul(a["V"], a["D"]), a["dw_acc"]);
    if (Value db = a["db_acc"])
      zeroElement(e, i, a["V"], db);
    s.sink.end();
  }

  /// db's owners in a dW kernel: the tiles of the first column tile, whose
  /// thread t takes the tile's vocabulary rows rowBegin + t, + T, … below
  /// `limit`, `body(j)` for each.
  void forBiasRows(KernelEmitter &te, const BlockTile &tile, int64_t rows, Value limit,
                   const std::function<void(KernelEmitter &, Value j)> &body) {
    Value firstTile = te.cmpI(arith::CmpIPredicate::eq, tile.colBegin, te.index(0));
    te.ifThen(firstTile, [&](KernelEmitter &fe) {
      forThreadColumns(fe, gpuThreadIdx(fe), s.gradTile().threads, fe.index(rows),
                       [&](KernelEmitter &ce, Value t) {
                         Value j = ce.add(tile.rowBegin, t);
                         ce.ifThen(below(ce, j, limit), [&](KernelEmitter &be) { body(be, j); });
                       });
    });
  }

  /// `init` + Σ_{r in [from, to)} G·dZ[offset(r)] in row order (G: the
  /// tensor-core dZ scale, or null).
  Value sumDzTerms(KernelEmitter &e, Value dzBuf, Value from, Value to, Value init, Value g,
                   const std::function<Value(KernelEmitter &, Value r)> &offset) {
    return e.forLoop(from, to, e.index(1), {init}, [&](KernelEmitter &ke, Value r, ValueRange it) {
      Value term = ke.loadReal(dzBuf, offset(ke, r));
      return SmallVector<Value>{ke.addF(it[0], g ? ke.mulF(term, g) : term)};
    })[0];
  }

  /// lce_bwd_dw (per chunk): dW_acc[j, d] += Σ_{r in chunk} dZ[r, j]·X[r,
  /// d] in row order, one block tile of the gradient strategy per block; db
  /// likewise. The sums start at the first chunk (cb = 0) from zero, without
  /// reading the accumulators, so no pass zeroes them first (lce_bwd_zero
  /// runs only for N = 0). The bits are a zeroed accumulator's: 0 + the
  /// first sum, as before. Only the thread that stores an accumulator reads
  /// it.
  ///
  /// With `single` (lce_bwd_dw_single, launched where acc.single is 1: one
  /// chunk of every row) the same product over that chunk, its sums rounded
  /// straight into grad_w and grad_bias: no accumulator to write, read back
  /// and round (lce_bwd_finish does not run). The bits are the accumulated
  /// path's: 0 + the chunk's sum, rounded once. (A branch on the chunk in
  /// lce_bwd_dw instead spilled the 168-register kernels.)
  void buildDw(bool single = false) {
    if (vocab())
      return buildVocabDw();
    const TileConfig &tileConfig = s.gradTile();
    const bool scaled = s.tensorCoreGradients();
    KernelSignature sig(single ? "lce_bwd_dw_single" : "lce_bwd_dw");
    sig.arg(productDzName(), flat(s.dzType())).arg("x", flat(st()));
    sig.argIf(scaled, "gscale", flat(s.compute()));
    if (single) {
      sig.arg("grad_w", flat(st()));
      sig.argIf(s.spec.needsGradBias(), "grad_bias", flat(st()));
    } else {
      sig.arg("dw_acc", flat(s.compute()), acc.dw);
      sig.argIf(s.spec.needsGradBias(), "db_acc", flat(s.compute()), acc.db);
    }
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index());
    sig.arg("V", s.index()).arg("D", s.index());
    const int64_t rows = tileConfig.blockRows, cols = tileConfig.tileCols();
    const std::string enabled = acc.single.empty() ? ""
                                : single           ? acc.single
                                                   : "(1-" + acc.single + ")";
    auto [a, scratch] = beginGradientProduct(sig, "V", /*weightGradient=*/true, enabled);
    KernelEmitter e = emitter();
    Value v = a["V"], d = a["D"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value dzBuf = a[productDzName()];
    // Where the sums go: the f32 accumulators, or (single) the gradients
    // in storage, each sum rounded once.
    Value dwOut = single ? a["grad_w"] : a["dw_acc"];
    Value dbOut = single ? a["grad_bias"] : a["db_acc"];
    auto output = [&](KernelEmitter &se, Value sum) {
      return single ? se.toStorage(sum, st()) : sum;
    };
    // SIMT: each element's sum continues from its accumulator (from zero in
    // the first chunk), term by term in row order. Tensor cores: the
    // chunk's products of dZ / G form from zero, and the epilogue adds G·sum
    // to the sum so far (the QuACK-style C += per chunk; fewer registers
    // live through the k loop).
    Value g = scaled ? e.load(a["gscale"], e.index(0)) : Value();
    // The sum so far of an accumulator element: none before the first
    // chunk (`first`), so nothing zeroes the accumulators; none at all for
    // the single chunk (0 + the sum keeps the accumulated path's bits: a
    // −0 sum becomes +0).
    auto sumSoFar = [&](KernelEmitter &ke, Value first, Value accumulator, Value at) {
      if (single)
        return ke.real(0.0);
      return ke.ifElse(
          first, [](KernelEmitter &z) { return z.real(0.0); },
          [&](KernelEmitter &l) { return l.load(accumulator, at); });
    };
    auto store = [&](KernelEmitter &te, const BlockTile &tile, Fragment &dw) {
      // Formed in the epilogue, not before the k loop: nothing more lives
      // through it.
      Value first = te.cmpI(arith::CmpIPredicate::eq, cb, te.index(0));
      forEachElement(te, dw, d, g, [&](KernelEmitter &se, Value at, Value sum) {
        if (g)
          sum = se.addF(sumSoFar(se, first, dwOut, at), sum);
        se.store(output(se, sum), dwOut, at);
      });
      // db: the chunk's rows of each vocabulary row, on top of the sum.
      if (dbOut)
        forBiasRows(te, tile, rows, v, [&](KernelEmitter &be, Value j) {
          Value sum = sumDzTerms(
              be, dzBuf, cb, ce, sumSoFar(be, first, dbOut, j), g,
              [&](KernelEmitter &ke, Value r) { return ke.add(ke.mul(ke.sub(r, cb), v), j); });
          be.store(output(be, sum), dbOut, j);
        });
    };
    // A = dZᵀ [V × chunk rows], B = Xᵀ [D × rows]: k runs over the chunk's rows.
    MatrixOperand dzt{dzBuf, Value(), v, Value(), cb, a["dzt_map"], a["tma_ready"]};
    MatrixOperand xt{a["x"], Value(), d, {}, {}, a["xt_map"], a["tma_ready"]};
    GpuSchedule::TileOf tileOf = lineTiles(Value(), v, rows, cols, d);
    if (scaled) {
      // Each tile's epilogue touches only its own accumulators and db rows.
      s.forEachTile(e, tileConfig, s.gradMatmul(), dzt, xt, e.ceilDiv(v, e.index(rows)),
                    weightColumnBlocks(e, d, cols), tileOf, cb, weightTermsEnd(e, d, cb, ce),
                    scratch, store,
                    /*overlap=*/true, s.gradientCluster(/*weightGradient=*/true));
      s.sink.end();
      return;
    }
    const BlockTile tile = tileOf(e, gpuBlockIdx(e, 0), gpuBlockIdx(e, 1));
    SmallVector<Value> init;
    Fragment owned = s.gradMatmul().layout(e, tile);
    Value later = e.cmpI(arith::CmpIPredicate::ne, cb, e.index(0));
    for (size_t i = 0; i < owned.rows.size(); ++i)
      for (size_t j = 0; j < owned.cols.size(); ++j) {
        if (single) {
          init.push_back(e.real(0.0));
          continue;
        }
        Value at = e.add(e.mul(owned.rows[i], d), owned.cols[j]);
        init.push_back(e.ifElse(
            e.andI(owned.colValid[j], later), [&](KernelEmitter &l) { return l.load(dwOut, at); },
            [](KernelEmitter &z) { return z.real(0.0); }));
      }
    Fragment dw =
        s.gradMatmul().multiply(e, dzt, xt, tile, cb, weightTermsEnd(e, d, cb, ce), init, scratch);
    store(e, tile, dw);
    s.sink.end();
  }

  /// lce_bwd_dw (per vocabulary chunk): dW[j, d] = Σ_r dZ[r, j]·X[r, d]
  /// for the chunk's vocabulary rows j, over every row r at once (k = the
  /// N rows), rounded once straight into grad_w: no V × D accumulator. db
  /// likewise: the tiles of the first column tile sum their rows' dZ
  /// column over r in order.
  void buildVocabDw() {
    const TileConfig &tileConfig = s.gradTile();
    const bool scaled = s.tensorCoreGradients();
    KernelSignature sig("lce_bwd_dw");
    sig.arg(productDzName(), flat(s.dzType())).arg("x", flat(st()));
    sig.argIf(scaled, "gscale", flat(s.compute()));
    sig.arg("grad_w", flat(st()));
    sig.argIf(s.spec.needsGradBias(), "grad_bias", flat(st()));
    chunkArgs(sig);
    sig.arg("V", s.index()).arg("D", s.index());
    const int64_t rows = tileConfig.blockRows, cols = tileConfig.tileCols();
    auto [a, scratch] = beginGradientProduct(sig, "C", /*weightGradient=*/true);
    KernelEmitter e = emitter();
    Value d = a["D"], n = a["N"], c = a["C"], cb = a["chunk_begin"], ce = a["chunk_end"];
    Value dzBuf = a[productDzName()];
    Value g = scaled ? e.load(a["gscale"], e.index(0)) : Value();
    auto store = [&](KernelEmitter &te, const BlockTile &tile, Fragment &dw) {
      forEachElement(te, dw, d, g, [&](KernelEmitter &se, Value at, Value sum) {
        se.store(se.toStorage(sum, st()), a["grad_w"], at);
      });
      // db: every row of the chunk's vocabulary rows, rounded once.
      if (Value db = a["grad_bias"])
        forBiasRows(te, tile, rows, ce, [&](KernelEmitter &be, Value j) {
          Value col = be.sub(j, cb);
          Value sum =
              sumDzTerms(be, dzBuf, be.index(0), n, be.real(0.0), g,
                         [&](KernelEmitter &ke, Value r) { return ke.add(ke.mul(r, c), col); });
          be.store(be.toStorage(sum, st()), db, j);
        });
    };
    // A = dZᵀ [the chunk's vocabulary rows × N] (lines from cb), B = Xᵀ
    // [D × N]: k runs over every row.
    MatrixOperand dzt{dzBuf, Value(), c, cb, Value(), a["dzt_map"], a["tma_ready"]};
    MatrixOperand xt{a["x"], Value(), d, {}, {}, a["xt_map"], a["tma_ready"]};
    s.forEachTile(e, tileConfig, s.gradMatmul(), dzt, xt, e.ceilDiv(e.sub(ce, cb), e.index(rows)),
                  weightColumnBlocks(e, d, cols), lineTiles(cb, ce, rows, cols, d), e.index(0),
                  weightTermsEnd(e, d, e.index(0), n), scratch, store, /*overlap=*/true,
                  s.gradientCluster(/*weightGradient=*/true));
    s.sink.end();
  }

  /// lce_bwd_zero_dx: the vocabulary chunks' dX accumulator (`dxAcc`: an
  /// f32 workspace, or f32 grad_x) = 0 before the chunks, which add to it.
  void buildZeroDx(const std::string &dxAcc) {
    KernelSignature sig("lce_bwd_zero_dx");
    sig.arg("dx_acc", flat(s.compute()), dxAcc);
    sig.arg("N", s.index()).arg("D", s.index());
    auto [a, i] = beginElementwise(sig, "N*D");
    KernelEmitter e = emitter();
    zeroElement(e, i, e.mul(a["N"], a["D"]), a["dx_acc"]);
    s.sink.end();
  }

  /// lce_bwd_finish_dx: one rounding of the vocabulary chunks' f32 dX
  /// accumulator to storage.
  void buildFinishDx() {
    KernelSignature sig("lce_bwd_finish_dx");
    sig.arg("dx_acc", flat(s.compute())).arg("grad_x", flat(st()));
    sig.arg("N", s.index()).arg("D", s.index());
    auto [a, i] = beginElementwise(sig, "N*D");
    KernelEmitter e = emitter();
    roundElement(e, i, e.mul(a["N"], a["D"]), a["dx_acc"], a["grad_x"]);
    s.sink.end();
  }

  /// Begins an elementwise kernel of `sig` over `count` (a formula)
  /// elements, one per thread of cdiv(count, T) blocks: its args and the
  /// thread's element i = blockIdx.x · T + threadIdx.x.
  /// With `onlyWithoutRows` the grid is empty unless N = 0; with
  /// `enabled`, where that formula is 0.
  std::pair<KernelArgs, Value> beginElementwise(KernelSignature &sig, const std::string &count,
                                                bool onlyWithoutRows = false,
                                                const std::string &enabled = "") {
    LaunchShape launch{{"cdiv(" + count + "," + s.threads() + ")", "1", "1"}};
    if (onlyWithoutRows)
      launch.grid[0] += "*(1-min(N,1))";
    enableWhen(launch, enabled);
    KernelArgs a = s.sink.begin(sig, launch);
    KernelEmitter e = emitter();
    Value i = e.add(e.mul(gpuBlockIdx(e, 0), e.index(s.simtTile.threads)), gpuThreadIdx(e));
    return {std::move(a), i};
  }
  /// buffer[i] = 0, where i < count.
  void zeroElement(KernelEmitter &e, Value i, Value count, Value buffer) {
    e.ifThen(below(e, i, count), [&](KernelEmitter &se) { se.store(se.real(0.0), buffer, i); });
  }
  /// out[i] = acc[i] rounded to storage, where i < count.
  void roundElement(KernelEmitter &e, Value i, Value count, Value acc, Value out) {
    e.ifThen(below(e, i, count),
             [&](KernelEmitter &se) { se.store(se.toStorage(se.load(acc, i), st()), out, i); });
  }

  /// lce_bwd_finish: one rounding of the f32 accumulators to storage; not
  /// where lce_bwd_dw_single rounded a single chunk's sums itself.
  void buildFinish() {
    KernelSignature sig("lce_bwd_finish");
    sig.arg("dw_acc", flat(s.compute())).arg("grad_w", flat(st()));
    if (s.spec.needsGradBias())
      sig.arg("db_acc", flat(s.compute())).arg("grad_bias", flat(st()));
    sig.arg("V", s.index()).arg("D", s.index());
    auto [a, i] = beginElementwise(sig, accumulatorElements(), /*onlyWithoutRows=*/false,
                                   acc.single.empty() ? "" : "(1-" + acc.single + ")");
    KernelEmitter e = emitter();
    roundElement(e, i, e.mul(a["V"], a["D"]), a["dw_acc"], a["grad_w"]);
    if (s.spec.needsGradBias())
      roundElement(e, i, a["V"], a["db_acc"], a["grad_bias"]);
    s.sink.end();
  }

  /// lce_fused_lse (per chunk): one block per row turns its raw logits (in
  /// the dZ workspace) into lse and the row loss: thread t folds columns t,
  /// t + T, … in order (adjacent threads read adjacent logits), then the
  /// block merges the T states in a fixed tree. (One thread per row left a
  /// whole vocabulary to each thread and a chunk's few rows to one block.)
  void buildFusedLse() {
    const int64_t threads = s.simtTile.threads;
    KernelSignature sig("lce_fused_lse");
    sig.arg("labels", flat(s.spec.labelType)).arg("dz", flat(s.compute()));
    sig.arg("lse", flat(s.compute())).arg("loss_rows", flat(s.compute()));
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index()).arg("V", s.index());
    LaunchShape launch{{"C", "1", "1"}, "none", /*perChunk=*/true};
    for (unsigned f = 0; f < s.stats.width(); ++f)
      launch.workgroup.push_back(s.shared(threads, s.compute()));
    KernelArgs a = s.sink.begin(sig, launch);
    KernelEmitter e = emitter();
    Value v = a["V"], cb = a["chunk_begin"];
    Value row = e.add(cb, gpuBlockIdx(e, 0));
    // The grid has C blocks; the last chunk may have fewer rows (the whole
    // block skips, so its barriers stay uniform).
    e.ifThen(below(e, row, a["chunk_end"]), [&](KernelEmitter &be) {
      Value base = be.mul(gpuBlockIdx(be, 0), v);
      Value tid = gpuThreadIdx(be);
      // Each thread folds its columns in runs of kRun from empty and merges
      // the runs: a plain sum's error grows with its length, so a thread's
      // share of a large V stays as accurate as kRun logits.
      constexpr int64_t kRun = 512;
      SmallVector<Value> state = be.forLoop(
          tid, v, be.index(threads * kRun), s.stats.identity(be),
          [&](KernelEmitter &re, Value j0, ValueRange acc) {
            Value runEnd = re.minUI(re.add(j0, re.index(threads * kRun)), v);
            SmallVector<Value> run = re.forLoop(
                j0, runEnd, re.index(threads), s.stats.identity(re),
                [&](KernelEmitter &le, Value j, ValueRange it) {
                  return s.stats.push(le, it,
                                      emitLogit(le, s.spec, le.load(a["dz"], le.add(base, j))));
                });
            return s.stats.merge(re, acc, run);
          });
      SmallVector<Value> shared;
      for (unsigned f = 0; f < s.stats.width(); ++f)
        shared.push_back(a.workgroup(f));
      s.stats.mergeAcrossBlock(be, tid, threads, shared, state, 1);
      be.ifThen(be.cmpI(arith::CmpIPredicate::eq, tid, be.index(0)), [&](KernelEmitter &re) {
        storeRowResults(re, a, row, base, s.stats.load(re, shared, re.index(0)));
      });
    });
    s.sink.end();
  }

  /// lce_fused_lse's results of `row` from its merged statistics `state`:
  /// lse, and the row loss with the label's raw logit read from the dZ
  /// workspace, whose row starts at `base`.
  void storeRowResults(KernelEmitter &e, const KernelArgs &a, Value row, Value base,
                       ValueRange state) {
    Value v = a["V"];
    Value lse = s.stats.finish(e, state, loss::Statistic::lse);
    e.store(lse, a["lse"], row);
    Value label = e.loadLabel(a["labels"], row);
    e.store(emitRowLoss(e, s.spec, label, v, lse,
                        [&](KernelEmitter &te) { return te.load(a["dz"], te.add(base, label)); }),
            a["loss_rows"], row);
  }

  /// lce_fused_lse (per chunk) from the tiles' row statistics
  /// (foldsTileStats): blocks of 32 rows × kLseWarps warps; lane l of warp
  /// q merges states q, q + kLseWarps, … of row l in order, then warp 0
  /// merges the warps' in order (through shared memory) → lse and the row
  /// loss (the label's raw logit from the dZ workspace). Each warp load
  /// reads one state of 32 consecutive rows (coalesced): about 8 bytes a
  /// row per tile of columns instead of the row's V raw logits. A chunk has
  /// few rows (345 at V = 128256 in 256 MiB on wgmma's 128-column tiles),
  /// so the warps of a row, not the rows, make the parallelism: 16 warps
  /// keep each thread's chain of dependent loads to a 16th of the states.
  static constexpr int64_t kLseWarps = 16;
  void buildFusedLseFromTiles() {
    const int64_t warps = kLseWarps, threads = warps * 32;
    KernelSignature sig("lce_fused_lse");
    sig.arg("labels", flat(s.spec.labelType)).arg("dz", flat(s.compute()));
    for (const std::string &field : s.stats.fieldNames())
      sig.arg("tile_" + field, flat(s.compute()));
    sig.arg("lse", flat(s.compute())).arg("loss_rows", flat(s.compute()));
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index()).arg("V", s.index());
    LaunchShape launch{{"cdiv(C,32)", "1", "1"}, "none", /*perChunk=*/true};
    launch.threads = threads;
    for (unsigned f = 0; f < s.stats.width(); ++f)
      launch.workgroup.push_back(s.shared(threads, s.compute()));
    KernelArgs a = s.sink.begin(sig, launch);
    KernelEmitter e = emitter();
    SmallVector<Value> buffers, shared;
    for (const std::string &field : s.stats.fieldNames())
      buffers.push_back(a["tile_" + field]);
    for (unsigned f = 0; f < s.stats.width(); ++f)
      shared.push_back(a.workgroup(f));
    Value v = a["V"], cb = a["chunk_begin"];
    Value chunkRows = e.sub(a["chunk_end"], cb);
    Value tid = gpuThreadIdx(e);
    Value lane = e.remUI(tid, e.index(32)), warp = e.divUI(tid, e.index(32));
    Value local = e.add(e.mul(gpuBlockIdx(e, 0), e.index(32)), lane);
    Value inChunk = below(e, local, chunkRows);
    // fusedTileStates() of this V.
    Value states = e.mul(e.ceilDiv(v, e.index(s.tile.tileCols())), e.index(tileStateGroups()));
    // Rows past the chunk fold nothing (their loop is empty) but take part
    // in the barrier.
    Value end = e.select(inChunk, states, e.index(0));
    SmallVector<Value> state =
        e.forLoop(warp, end, e.index(warps), s.stats.identity(e),
                  [&](KernelEmitter &le, Value k, ValueRange it) {
                    return s.stats.merge(
                        le, it, s.stats.load(le, buffers, le.add(le.mul(k, chunkRows), local)));
                  });
    s.stats.store(e, state, shared, tid);
    gpuBarrier(e);
    e.ifThen(e.andI(inChunk, e.cmpI(arith::CmpIPredicate::eq, warp, e.index(0))),
             [&](KernelEmitter &re) {
               SmallVector<Value> merged = s.stats.load(re, shared, lane);
               for (int64_t q = 1; q < warps; ++q)
                 merged = s.stats.merge(re, merged,
                                        s.stats.load(re, shared, re.add(lane, re.index(q * 32))));
               storeRowResults(re, a, re.add(cb, local), re.mul(local, v), merged);
             });
    s.sink.end();
  }

  /// lce_fused_dz (per chunk): raw logits in the dZ workspace → dZ, in
  /// place (SIMT products) or as dZ / G into "dzs" (tensor cores).
  void buildFusedDz() {
    KernelSignature sig("lce_fused_dz");
    sig.arg("labels", flat(s.spec.labelType)).arg("lse", flat(s.compute()));
    sig.arg("grow", flat(s.compute())).arg("dz", flat(s.compute()));
    // With tensor cores dZ / G goes to its own 16-bit workspace.
    const bool scaled = s.tensorCoreGradients();
    sig.argIf(scaled, "gscale", flat(s.compute()));
    sig.argIf(scaled, "dzs", flat(s.dzType()));
    sig.arg("chunk_begin", s.index()).arg("chunk_end", s.index()).arg("V", s.index());
    LaunchShape launch{{"cdiv(C*V," + s.threads() + ")", "1", "1"}, "none", /*perChunk=*/true};
    KernelArgs a = s.sink.begin(sig, launch);
    KernelEmitter e = emitter();
    Value v = a["V"], cb = a["chunk_begin"];
    Value invG = scaled ? inverseGradScale(e, a) : Value();
    Value i = e.add(e.mul(gpuBlockIdx(e, 0), e.index(s.simtTile.threads)), gpuThreadIdx(e));
    e.ifThen(below(e, i, e.mul(e.sub(a["chunk_end"], cb), v)), [&](KernelEmitter &se) {
      Value row = se.add(cb, se.divUI(i, v));
      Value col = se.remUI(i, v);
      Value dz = emitLogitGrad(
          se, s.spec, se.load(a["dz"], i), se.load(a["lse"], row), se.load(a["grow"], row),
          se.cmpI(arith::CmpIPredicate::eq, se.loadLabel(a["labels"], row), col));
      se.store(productDz(se, dz, invG), a[scaled ? "dzs" : "dz"], i);
    });
    s.sink.end();
  }

  /// The arguments both recompute kernels read.
  void recomputeInputs(KernelSignature &sig) {
    sig.arg("x", flat(st())).arg("w", flat(st())).argIf(s.spec.hasBias, "bias", flat(st()));
    declareAdjointInputs(sig, s.spec, s.compute());
  }

  /// Adds the product of the dZ tile in shared memory (rows × T, row i at
  /// i·T) with `other` over the tile's k range [k0, k0 + count) to the f32
  /// accumulator elements thread `tid` owns; `at(i, col)` is an element's
  /// offset, `owned(i)` whether row i's elements exist.
  void accumulateFromShared(KernelEmitter &e, Value smem, const MatrixOperand &other, Value k0,
                            Value count, Value d, Value accBuf, int64_t rows,
                            const std::function<Value(KernelEmitter &, int64_t, Value)> &at,
                            const std::function<Value(int64_t)> &owned) {
    const int64_t threads = s.simtTile.threads;
    MatrixOperand dz{smem, e.index(threads), Value(), Value(), k0};
    forColumnTiles(e, threads, d, [&](KernelEmitter &te, Value c0) {
      BlockTile tile{te.index(0), rows, te.index(rows), c0, threads, d};
      Fragment f = s.simtMatmul.layout(te, tile);
      SmallVector<Value> init;
      for (int64_t i = 0; i < rows; ++i) {
        Value mine = te.andI(owned(i), f.colValid[0]);
        init.push_back(te.ifElse(
            mine, [&](KernelEmitter &l) { return l.load(accBuf, at(l, i, f.cols[0])); },
            [](KernelEmitter &z) { return z.real(0.0); }));
      }
      Fragment sum = s.simtMatmul.multiply(te, dz, other, tile, k0, te.add(k0, count), init);
      for (int64_t i = 0; i < rows; ++i)
        te.ifThen(te.andI(owned(i), sum.colValid[0]), [&](KernelEmitter &se) {
          se.store(sum.at(i, 0), accBuf, at(se, i, sum.cols[0]));
        });
    });
  }

  /// lce_bwd_dx_rc, grid cdiv(N, BN): block bx owns rows bx·BN..; per vocab
  /// tile of T columns the block recomputes its logits (dZ into shared
  /// memory), then thread d adds Σ_jj dZ[r, jj]·W[jj, d] to its own f32
  /// elements. Rows belong to one block, elements to one thread.
  void buildDxRecompute(llvm::StringRef accName) {
    const int64_t bn = s.simtTile.blockRows, threads = s.simtTile.threads;
    KernelSignature sig("lce_bwd_dx_rc");
    recomputeInputs(sig);
    sig.arg("grad_x", flat(st()));
    sig.argIf(accName != "grad_x", "dx_acc", flat(s.compute()));
    sig.arg("N", s.index()).arg("V", s.index()).arg("D", s.index());
    LaunchShape launch{{"cdiv(N," + s.simtBn() + ")", "1", "1"}};
    launch.workgroup = {s.shared(bn * threads, s.compute())};
    KernelArgs a = s.sink.begin(sig, launch);
    Value smem = a.workgroup(0);
    Value accBuf = a[accName];
    KernelEmitter e = emitter();
    Value tid = gpuThreadIdx(e);
    Value n = a["N"], v = a["V"], d = a["D"];
    Value first = e.mul(gpuBlockIdx(e, 0), e.index(bn));
    SmallVector<Value> rows, rowOk;
    SmallVector<RowAdjoint, 2> adj;
    Value lastRow = e.sub(n, e.index(1));
    for (int64_t i = 0; i < bn; ++i) {
      Value r = e.add(first, e.index(i));
      rowOk.push_back(below(e, r, n));
      rows.push_back(e.minUI(r, lastRow));
      adj.push_back(loadRowAdjoint(e, s.spec, a, rows.back()));
    }
    auto at = [&](KernelEmitter &l, int64_t i, Value col) { return l.add(l.mul(rows[i], d), col); };
    forThreadColumns(e, tid, threads, d, [&](KernelEmitter &de, Value col) {
      for (int64_t i = 0; i < bn; ++i)
        de.ifThen(rowOk[i],
                  [&](KernelEmitter &se) { se.store(se.real(0.0), accBuf, at(se, i, col)); });
    });
    e.forLoop(e.index(0), v, e.index(threads), {}, [&](KernelEmitter &te, Value j0, ValueRange) {
      const BlockTile tile{first, bn, n, j0, threads, v};
      Fragment z = s.simtMatmul.multiply(te, {a["x"], d}, {a["w"], d}, tile, te.index(0), d);
      Fragment u;
      if (a["teacher_x"])
        u = s.teacherTile(te, a, s.simtMatmul, tile);
      Value col = z.cols[0];
      Value bv = a["bias"] ? te.loadReal(a["bias"], col) : Value();
      Value weight = loadColumnWeight(te, s.spec, a, col);
      for (int64_t i = 0; i < bn; ++i) {
        if (!u.values.empty())
          adj[i].teacherAt = teacherFrom(s.spec, a, u.at(i, 0));
        Value raw = bv ? te.addF(z.at(i, 0), bv) : z.at(i, 0);
        Value dz = emitRawGrad(te, s.spec, adj[i], raw, col, weight);
        Value live = te.andI(z.colValid[0], rowOk[i]);
        te.store(te.select(live, dz, te.real(0.0)), smem, te.add(te.index(i * threads), tid));
      }
      gpuBarrier(te);
      Value count = te.minUI(te.index(threads), te.sub(v, j0));
      // B = Wᵀ [D × V] from row j0 of W on.
      accumulateFromShared(te, smem, {a["w"], Value(), d}, j0, count, d, accBuf, bn, at,
                           [&](int64_t i) { return rowOk[i]; });
      gpuBarrier(te);
      return SmallVector<Value>{};
    });
    if (accName != "grad_x")
      forThreadColumns(e, tid, threads, d, [&](KernelEmitter &de, Value col) {
        for (int64_t i = 0; i < bn; ++i)
          de.ifThen(rowOk[i], [&](KernelEmitter &se) {
            Value off = at(se, i, col);
            se.store(se.toStorage(se.load(accBuf, off), st()), a["grad_x"], off);
          });
      });
    s.sink.end();
  }

  /// lce_bwd_dw_rc, grid cdiv(V, BN): block bx owns vocab rows bx·BN..; per
  /// tile of T token rows each thread recomputes the logits of its token
  /// for the block's vocab rows, then thread d adds Σ_t dZ[t, j]·X[t, d] to
  /// its own f32 elements; thread i < BN sums db of vocab row i in order.
  void buildDwRecompute(llvm::StringRef accName) {
    const int64_t bn = s.simtTile.blockRows, threads = s.simtTile.threads;
    KernelSignature sig("lce_bwd_dw_rc");
    recomputeInputs(sig);
    sig.arg("grad_w", flat(st()));
    sig.argIf(s.spec.needsGradBias(), "grad_bias", flat(st()));
    sig.argIf(accName != "grad_w", "dw_acc", flat(s.compute()));
    sig.arg("N", s.index()).arg("V", s.index()).arg("D", s.index());
    LaunchShape launch{{"cdiv(V," + s.simtBn() + ")", "1", "1"}};
    launch.workgroup = {s.shared(bn * threads, s.compute())};
    KernelArgs a = s.sink.begin(sig, launch);
    Value smem = a.workgroup(0);
    Value accBuf = a[accName];
    KernelEmitter e = emitter();
    Value tid = gpuThreadIdx(e);
    Value n = a["N"], v = a["V"], d = a["D"];
    Value first = e.mul(gpuBlockIdx(e, 0), e.index(bn));
    SmallVector<Value> js, jOk, bias, weights;
    Value lastJ = e.sub(v, e.index(1));
    for (int64_t i = 0; i < bn; ++i) {
      Value j = e.add(first, e.index(i));
      jOk.push_back(below(e, j, v));
      js.push_back(e.minUI(j, lastJ));
      bias.push_back(a["bias"] ? e.loadReal(a["bias"], js.back()) : Value());
      weights.push_back(loadColumnWeight(e, s.spec, a, js.back()));
    }
    auto at = [&](KernelEmitter &l, int64_t i, Value col) { return l.add(l.mul(js[i], d), col); };
    forThreadColumns(e, tid, threads, d, [&](KernelEmitter &de, Value col) {
      for (int64_t i = 0; i < bn; ++i)
        de.ifThen(jOk[i],
                  [&](KernelEmitter &se) { se.store(se.real(0.0), accBuf, at(se, i, col)); });
    });
    Value dbOwner = below(e, tid, e.index(bn));
    Value db =
        e.forLoop(e.index(0), n, e.index(threads), {e.real(0.0)},
                  [&](KernelEmitter &te, Value r0, ValueRange dbIt) {
                    // The logits of the block's vocab rows (A = W) for token r0 + tid (B = X).
                    const BlockTile tile{first, bn, v, r0, threads, n};
                    Fragment z = s.simtMatmul.multiply(te, {a["w"], d}, {a["x"], d}, tile,
                                                       te.index(0), d);
                    Fragment u;
                    if (a["teacher_x"])
                      u = s.teacherTile(te, a, s.simtMatmul, tile, {}, /*vocabRows=*/true);
                    Value row = z.cols[0];
                    RowAdjoint adj = loadRowAdjoint(te, s.spec, a, row);
                    for (int64_t i = 0; i < bn; ++i) {
                      if (!u.values.empty())
                        adj.teacherAt = teacherFrom(s.spec, a, u.at(i, 0));
                      Value raw = bias[i] ? te.addF(z.at(i, 0), bias[i]) : z.at(i, 0);
                      Value dz = emitRawGrad(te, s.spec, adj, raw, js[i], weights[i]);
                      te.store(te.select(z.colValid[0], dz, te.real(0.0)), smem,
                               te.add(te.index(i * threads), tid));
                    }
                    gpuBarrier(te);
                    Value count = te.minUI(te.index(threads), te.sub(n, r0));
                    // B = Xᵀ [D × N] from token r0 on.
                    accumulateFromShared(te, smem, {a["x"], Value(), d}, r0, count, d, accBuf, bn,
                                         at, [&](int64_t i) { return jOk[i]; });
                    Value next = te.ifElse(
                        dbOwner,
                        [&](KernelEmitter &oe) {
                          Value base = oe.mul(tid, oe.index(threads));
                          return oe.forLoop(oe.index(0), count, oe.index(1), {dbIt[0]},
                                            [&](KernelEmitter &ke, Value tt, ValueRange it) {
                                              return SmallVector<Value>{
                                                  ke.addF(it[0], ke.load(smem, ke.add(base, tt)))};
                                            })[0];
                        },
                        [&](KernelEmitter &) { return dbIt[0]; });
                    gpuBarrier(te);
                    return SmallVector<Value>{next};
                  })[0];
    if (accName != "grad_w")
      forThreadColumns(e, tid, threads, d, [&](KernelEmitter &de, Value col) {
        for (int64_t i = 0; i < bn; ++i)
          de.ifThen(jOk[i], [&](KernelEmitter &se) {
            Value off = at(se, i, col);
            se.store(se.toStorage(se.load(accBuf, off), st()), a["grad_w"], off);
          });
      });
    if (s.spec.needsGradBias()) {
      Value j = e.add(first, tid);
      e.ifThen(e.andI(dbOwner, below(e, j, v)),
               [&](KernelEmitter &se) { se.store(se.toStorage(db, st()), a["grad_bias"], j); });
    }
    s.sink.end();
  }
};
} // namespace

namespace {
/// The backward in vocabulary chunks: scale; zero the dX accumulator; per
/// chunk of C columns lce_bwd_dz (every row's dZ of the chunk's columns
/// into the [N, C] workspace), lce_bwd_dx (dX += dZ · W[chunk]) and
/// lce_bwd_dw (dW[chunk] = dZᵀ·X over all rows, rounded once into grad_w);
/// round dX. Same 6·N·D·V as the row chunks, but the only gradient-sized
/// scratch is dX's f32 accumulator (16-bit storage): no V × D f32 dW, so
/// the peak memory above the gradients is N·D·4 plus the budgeted chunk.
/// The budget WB holds grow, the dX accumulator (while it takes at most
/// half of it) and the [N, C] dZ; C is a multiple of 64 columns when at
/// least 64 fit (whole TMA boxes and 16-byte aligned dZ rows), and the
/// chunks are evened out (PlanBuilder::vocabChunks).
///
/// The fused forward+backward on this schedule runs the forward's
/// statistics first (lce_partial, lce_combine: lse and the row losses of
/// every row; lce_reduce: the loss), then the backward of grad_loss = 1:
/// 8·N·D·V against the row chunks' 6, but no V × D f32 dW accumulator (2
/// GiB at a 128K × 4096 head), and loss, lse and gradients are the bits of
/// the forward followed by this backward.
llvm::Error buildVocabChunkedBackward(GpuSchedule &s, Backward &b, PlanBuilder &plan) {
  const LceSpec &spec = s.spec;
  // The vocabulary reductions' teacher streams and targets go through the
  // row chunks on the GPU (their vocabulary chunks are the host's).
  if (spec.isVocabReduce())
    return llvm::createStringError("vocabulary chunks on the GPU serve the cross-entropy "
                                   "backward; a vocabulary reduction's chunks rows (chunked)");
  const std::string cb = std::to_string(spec.computeBytes());
  const bool dx16 = spec.needsGradX && !spec.storesCompute();
  // Per row: grow; in the fused op also the row loss and each split's
  // partial statistics.
  std::string rows = "N*" + cb;
  if (spec.fusedForward) {
    rows += "*(2+S*" + std::to_string(s.stats.width()) + ")";
    buildGpuRowStatistics(s, plan);
    buildGpuReduceKernel(s);
  }
  // The dZ chunk gets what grow and the dX accumulator leave of the budget,
  // but at least half of it: an accumulator beyond half the budget (a very
  // large N·D) is kept outside it, as the row chunks keep their dW one,
  // rather than shrinking the chunks to a few columns.
  std::string left = "WB-" + rows;
  if (dx16)
    left = "max(WB-" + rows + "-N*D*" + cb + ",WB/2-" + rows + ")";
  const std::string dzType = b.productDzType();
  const int64_t dzBytes = dzType == spec.computeName() ? spec.computeBytes() : 2;
  const std::string fit = "((" + left + ")/(max(1,N)*" + std::to_string(dzBytes) + "))";
  plan.vocabChunks(spec, "max(1,min(V,max(" + fit + "/64*64,min(" + fit + ",63))))", dzType,
                   /*balanced=*/true);
  const std::string dxAcc = dx16 ? "dx_acc" : "grad_x";
  if (dx16)
    plan.workspace("dx_acc", spec.computeName(), "N*D");
  b.buildScale();
  if (spec.needsGradX)
    b.buildZeroDx(dxAcc);
  b.buildDz(/*storeRaw=*/false);
  if (spec.needsGradX)
    b.buildDx(dxAcc);
  if (spec.needsGradW)
    b.buildDw();
  if (dx16)
    b.buildFinishDx();
  return llvm::Error::success();
}
} // namespace

llvm::Error lossjit::buildGpuBackward(GpuSchedule &s) {
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
  Backward b(s);
  if (spec.strategy == "recompute") {
    if (!spec.isVocabReduce())
      b.buildScale();
    // 16-bit storage sums in a gradient-sized f32 accumulator and rounds
    // once at the end; f32 storage sums in place.
    if (spec.needsGradX) {
      std::string acc = spec.storesCompute() ? "grad_x" : "dx_acc";
      if (acc == "dx_acc")
        plan.workspace("dx_acc", s.spec.computeName(), "N*D");
      b.buildDxRecompute(acc);
    }
    if (spec.needsGradW) {
      std::string acc = spec.storesCompute() ? "grad_w" : "dw_acc";
      if (acc == "dw_acc")
        plan.workspace("dw_acc", s.spec.computeName(), "V*D");
      b.buildDwRecompute(acc);
    }
    return llvm::Error::success();
  }
  if (spec.vocabChunks)
    return buildVocabChunkedBackward(s, b, plan);
  buildChunkedBackward(b, plan, spec);
  return llvm::Error::success();
}
