//===- GpuSchedule.cpp - operand staging shared by the GPU schedules ------===//

#include "compiler/Kernels/Schedules/GPU/GpuSchedule.h"

#include "compiler/Kernels/Support/BlockReduce.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace lossjit;

void GpuSchedule::stageOperands(LaunchShape &launch, const TileMatmul *product) const {
  MLIRContext *context = sink.builder().getContext();
  const TileConfig &staging = product ? gradTile() : tile;
  launch.threads = staging.productThreads();
  launch.maxRegisters = staging.warpgroupRegisters().launch;
  auto space = gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup);
  for (const ScratchBuffer &buffer : (product ? *product : matmul).scratch(storage())) {
    if (buffer.rowElements)
      launch.dynamicWorkgroup.push_back(
          MemRefType::get({buffer.elements / buffer.rowElements, buffer.rowElements},
                          buffer.type, MemRefLayoutAttrInterface{}, space));
    else
      launch.dynamicWorkgroup.push_back(shared(buffer.elements, buffer.type));
    // Views past the first keep their order; a larger alignment pads.
    launch.dynamicAlign.resize(launch.dynamicWorkgroup.size() - 1, 0);
    launch.dynamicAlign.push_back(buffer.align);
  }
}

SmallVector<Value> GpuSchedule::staged(const KernelArgs &args, const LaunchShape &launch,
                                       const TileMatmul *product) const {
  SmallVector<Value> buffers;
  for (size_t i = 0; i < launch.dynamicWorkgroup.size(); ++i)
    buffers.push_back(args.workgroup(static_cast<unsigned>(launch.workgroup.size() + i)));
  if (args["tma_ready"]) {
    KernelEmitter e(sink.builder(), sink.location(), compute());
    (product ? *product : matmul).prepare(e, buffers);
  }
  return buffers;
}

LaunchShape GpuSchedule::productLaunch(const TileConfig &product, const std::string &lines,
                                       const std::string &colBlocks, int64_t cluster) const {
  LaunchShape launch;
  launch.perChunk = true;
  launch.cluster = cluster;
  // A cluster's blocks take groups of `cluster` row blocks (forEachTile):
  // `rows` counts the groups, `blocks` scales them to blocks.
  const int64_t group = std::max<int64_t>(cluster, 1);
  const std::string rows = "cdiv(" + lines + "," + std::to_string(group * product.blockRows) + ")";
  const std::string blocks = cluster ? std::to_string(cluster) + "*" : "";
  if (!persistent(product)) {
    launch.grid = {blocks + rows, colBlocks, "1"};
    return launch;
  }
  // Whole clusters, at least one, of at most tile.persistent blocks; the
  // launcher may run fewer (those co-resident on the device).
  launch.persistent = true;
  const int64_t most = cluster ? std::max<int64_t>(tile.persistent / cluster, 1) : tile.persistent;
  launch.grid = {blocks + "min(" + rows + "*" + colBlocks + "," + std::to_string(most) + ")", "1",
                 "1"};
  return launch;
}

std::pair<Value, Value> GpuSchedule::tileOrder(KernelEmitter &e, const TileConfig &product,
                                               Value linear, Value rowBlocks, Value colBlocks,
                                               Value kBegin, Value kEnd, int64_t cluster) const {
  if (!banded(product))
    return {e.remUI(linear, rowBlocks), e.divUI(linear, rowBlocks)};
  // G row blocks per band: as many A slabs (BM rows × the depth, 16-bit)
  // as fit the band's bytes, at least one and at most all of them. The
  // extents go through an opaque asm: in a persistent sweep LLVM would
  // hoist G, the band's size and the tile count out of the tile loop, where
  // they stay live through every product; per tile they are a few
  // instructions (with both, tma=3's persistent sweeps spill nothing at 168
  // registers; hoisted and in 64 bits they spilled up to 56 bytes).
  constexpr int64_t kOperandBytes = 2;
  rowBlocks = opaqueIndex(e, rowBlocks);
  Value depth = opaqueIndex(e, e.sub(kEnd, kBegin));
  Value slab = e.mul(depth, e.index(product.blockRows * cluster * kOperandBytes));
  Value fit = e.divUI(e.index(tile.band << 10), e.maxUI(slab, e.index(1)));
  // Tile counts fit 32 bits (a grid's): the rest in i32, whose divisions
  // are a fraction of 64-bit ones' instructions and registers.
  OpBuilder &b = e.builder();
  auto narrow = [&](Value v) {
    return arith::IndexCastUIOp::create(b, e.location(), b.getI32Type(), v).getResult();
  };
  auto widen = [&](Value v) {
    return arith::IndexCastUIOp::create(b, e.location(), b.getIndexType(), v).getResult();
  };
  Value g = narrow(e.minUI(e.maxUI(fit, e.index(1)), rowBlocks));
  Value at = narrow(linear), r = narrow(rowBlocks), c = narrow(colBlocks);
  Value perBand = e.mul(g, c);
  Value band = e.divUI(at, perBand);
  Value first = e.mul(band, g);
  // The last band may be shorter; past the last tile (a grid sized for a
  // full chunk running a shorter one) there is none, and the block takes
  // the tile one past the last row block, which masks every row.
  Value inside = e.cmpI(arith::CmpIPredicate::ult, at, e.mul(r, c));
  Value rows = e.select(inside, e.minUI(e.sub(r, first), g), e.i32(1));
  Value local = e.sub(at, e.mul(band, perBand));
  return {widen(e.select(inside, e.add(first, e.remUI(local, rows)), r)),
          widen(e.select(inside, e.divUI(local, rows), e.i32(0)))};
}

void GpuSchedule::forEachTile(KernelEmitter &e, const TileConfig &product, const TileMatmul &matmul,
                              const MatrixOperand &a, const MatrixOperand &b, Value rowBlocks,
                              Value colBlocks, const TileOf &tileOf, Value kBegin, Value kEnd,
                              ArrayRef<Value> scratch, const TileBody &body, bool overlap,
                              int64_t cluster) const {
  // A block per tile: its own, as a sweep of one tile where the producer
  // warpgroup lends its registers (tma=3) — the consumers take them only
  // around a sweep's epilogues — else one product.
  const bool lends = overlap && product.warpgroupRegisters().launch;
  // Without clusters every block is a group of one row block. In clusters
  // (consecutive blocks along x) the block of rank r takes row block
  // g·cluster + r of each group g its cluster takes.
  const int64_t group = std::max<int64_t>(cluster, 1);
  Value rowGroups = group > 1 ? e.ceilDiv(rowBlocks, e.index(group)) : rowBlocks;
  auto perGroup = [&](KernelEmitter &te, Value index) {
    return group > 1 ? te.divUI(index, te.index(group)) : index;
  };
  auto groupTile = [&](KernelEmitter &te, Value rowGroup, Value col) {
    if (group == 1)
      return tileOf(te, rowGroup, col);
    Value rank = te.remUI(gpuBlockIdx(te, 0), te.index(group));
    return tileOf(te, te.add(te.mul(rowGroup, te.index(group)), rank), col);
  };
  // A block per tile: the hardware starts blocks in the order of
  // blockIdx.x + blockIdx.y · gridDim.x; tileOrder turns that into a tile.
  auto ownTile = [&](KernelEmitter &te) {
    if (!banded(product))
      return tileOf(te, gpuBlockIdx(te, 0), gpuBlockIdx(te, 1));
    // The grid may be sized for more row blocks than this launch has (a
    // full chunk's): the launch order counts in the grid's own rows.
    Value linear = te.add(perGroup(te, gpuBlockIdx(te, 0)),
                          te.mul(gpuBlockIdx(te, 1), perGroup(te, gpuGridDim(te, 0))));
    auto [row, col] = tileOrder(te, product, linear, rowGroups, colBlocks, kBegin, kEnd, group);
    return groupTile(te, row, col);
  };
  if (!persistent(product) && !lends) {
    const BlockTile t = ownTile(e);
    Fragment f = matmul.multiply(e, a, b, t, kBegin, kEnd, {}, scratch);
    body(e, t, f);
    return;
  }
  // The block's own tile; persistent: the groups blockIdx.x / group, +
  // gridDim.x / group, … in tileOrder().
  TileSweep tiles{e.index(0), e.index(1), e.index(1),
                  [&](KernelEmitter &te, Value) { return ownTile(te); }, /*pinThread=*/true};
  if (persistent(product))
    tiles = TileSweep{perGroup(e, gpuBlockIdx(e, 0)), e.mul(rowGroups, colBlocks),
                      perGroup(e, gpuGridDim(e, 0)),
                      [&](KernelEmitter &te, Value linear) {
                        auto [row, col] = tileOrder(te, product, linear, rowGroups, colBlocks,
                                                    kBegin, kEnd, group);
                        return groupTile(te, row, col);
                      },
                      /*pinThread=*/true};
  matmul.sweep(
      e, a, b, tiles, kBegin, kEnd, {}, scratch,
      [&](KernelEmitter &te, const BlockTile &t, Fragment &f, ValueRange) {
        body(te, t, f);
        return SmallVector<Value>{};
      },
      overlap);
}

namespace {
/// Records `map` in the plan unless a map of its name is there.
void recordMap(LaunchPlan &plan, PlanTensorMap map) {
  if (llvm::none_of(plan.tensorMaps, [&](const PlanTensorMap &m) { return m.name == map.name; }))
    plan.tensorMaps.push_back(std::move(map));
}
} // namespace

std::array<std::string, 2> GpuSchedule::dzMapDims() const {
  // Row chunks: [min(C, N) rows of V]; vocabulary chunks: [N rows of C].
  if (spec.vocabChunks)
    return {"C", "N"};
  return {"V", "min(C,N)"};
}

void GpuSchedule::declareGradientMaps(KernelSignature &sig, llvm::StringRef dzName) const {
  if (!tile.tma || !gradientMapsFit(/*weightGradient=*/false))
    return;
  const TileConfig &g = gradTile();
  constexpr int64_t kBox = kGradientBox;
  MLIRContext *context = sink.builder().getContext();
  // Row chunks: dZ rows past the last chunk's are the previous chunk's
  // (initialized, never stored); past min(C, N) the box reads zeros.
  // Vocabulary chunks: columns past the last chunk's are the previous
  // chunk's, met by W's zero rows past V; past C the box reads zeros.
  std::string dz = (dzName + "_tma_" + std::to_string(g.blockRows) + "x64").str();
  recordMap(sink.plan(), {dz, dzName.str(), dzMapDims(), {kBox, g.blockRows}, 2 * kBox});
  sig.tensorMap("dz_map", dz, context);
  recordMap(sink.plan(), {"wt_tma_64x64", "w", {"D", "V"}, {kBox, kBox}, 2 * kBox});
  sig.tensorMap("wt_map", "wt_tma_64x64", context);
  sig.arg("tma_ready", index(), kTensorMapsReadyBinding);
}

void GpuSchedule::declareWeightGradientMaps(KernelSignature &sig, llvm::StringRef dzName) const {
  if (!tile.tma || !gradientMapsFit(/*weightGradient=*/true))
    return;
  constexpr int64_t kBox = kGradientBox;
  MLIRContext *context = sink.builder().getContext();
  std::string dzt = (dzName + "t_tma_64x64").str();
  recordMap(sink.plan(), {dzt, dzName.str(), dzMapDims(), {kBox, kBox}, 2 * kBox});
  sig.tensorMap("dzt_map", dzt, context);
  recordMap(sink.plan(), {"xt_tma_64x64", "x", {"D", "N"}, {kBox, kBox}, 2 * kBox});
  sig.tensorMap("xt_map", "xt_tma_64x64", context);
  sig.arg("tma_ready", index(), kTensorMapsReadyBinding);
}

void GpuSchedule::declareOperandMaps(KernelSignature &sig, int64_t wLines) const {
  if (!tile.tma)
    return;
  // Boxes of BK elements (one swizzle span of 2·BK bytes) by the tile's
  // lines: BM rows of x, BN rows of w.
  auto declare = [&](llvm::StringRef buffer, llvm::StringRef rows, int64_t lines) {
    std::string name = (buffer + "_tma_" + std::to_string(lines) + "x" +
                        std::to_string(tile.blockK))
                           .str();
    std::vector<PlanTensorMap> &maps = sink.plan().tensorMaps;
    if (llvm::none_of(maps, [&](const PlanTensorMap &m) { return m.name == name; }))
      maps.push_back({name, buffer.str(), {"D", rows.str()}, {tile.blockK, lines}, 2 * tile.blockK});
    sig.tensorMap((buffer + "_map").str(), name, sink.builder().getContext());
  };
  declare("x", "N", tile.blockRows);
  declare("w", "V", wLines ? wLines : tile.tileCols());
  sig.arg("tma_ready", index(), kTensorMapsReadyBinding);
}
