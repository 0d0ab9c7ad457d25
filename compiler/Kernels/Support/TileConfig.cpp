//===- TileConfig.cpp -----------------------------------------------------===//

#include "compiler/Kernels/Support/TileConfig.h"
#include "dialects/Loss/LoweringConfig.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>

using namespace lossjit;

std::string TileConfig::str() const {
  if (automatic)
    return "auto";
  return "block_rows=" + std::to_string(blockRows) + ",threads=" + std::to_string(threads) +
         ",splits=" + std::to_string(splits) +
         ",matmul=" + loss::stringifyMatmulKind(matmul).str() +
         ",stages=" + std::to_string(stages) +
         (blockCols ? ",block_cols=" + std::to_string(blockCols) : "") +
         (blockK ? ",block_k=" + std::to_string(blockK) : "") +
         (gradCols ? ",grad_cols=" + std::to_string(gradCols) : "") +
         (tma ? ",tma=" + std::to_string(tma) : "") +
         (persistent ? ",persistent=" + std::to_string(persistent) : "") +
         (band ? ",band=" + std::to_string(band) : "") +
         (cluster ? ",cluster=" + std::to_string(cluster) : "");
}

TileConfig TileConfig::forMatmul(loss::MatmulKind kind) {
  TileConfig t;
  if (kind == loss::MatmulKind::simt)
    return t;
  // Per strategy: rows, columns, k step, threads, stages (see the header).
  const bool wgmma = kind == loss::MatmulKind::wgmma;
  t.matmul = kind;
  t.blockRows = wgmma ? 128 : 64;
  t.blockCols = 64;
  t.blockK = 32;
  t.threads = wgmma ? 256 : 128;
  t.stages = wgmma ? 4 : 3;
  // dZ·W and dZᵀ·X in 128×128 tiles: half the operand traffic of 128×64,
  // and without an LSE epilogue every gradient kernel takes it without
  // spills (ptxas sm_90a: 147–176 registers). The logit kernels take 128
  // columns where SelectLoweringConfig says their epilogues fit.
  t.gradCols = wgmma ? 128 : 0;
  return t;
}

TileConfig TileConfig::automaticChoice() {
  TileConfig t;
  t.automatic = true;
  return t;
}

TileConfig TileConfig::defaultFor(llvm::StringRef chip, mlir::Type storage,
                                  loss::Schedule schedule) {
  unsigned number = 0;
  llvm::StringRef digits = chip.starts_with("sm_") ? chip.drop_front(3) : llvm::StringRef();
  digits = digits.take_while([](char c) { return llvm::isDigit(c); });
  const bool tensorCores = !digits.getAsInteger(10, number) && number >= 80;
  if (!tensorCores || !(storage.isF16() || storage.isBF16()) ||
      schedule == loss::Schedule::recompute)
    return TileConfig();
  // wgmma exists in sm_90a modules only (they load on compute capability 9.0
  // alone); sm_90 PTX must also run on later chips, so it keeps mma.sync.
  return forMatmul(chip == "sm_90a" ? loss::MatmulKind::wgmma : loss::MatmulKind::mma_sync);
}

TileConfig::WarpgroupRegisters TileConfig::warpgroupRegisters() const {
  if (tma != 3)
    return {};
  // setmaxnreg counts are multiples of 8 in [24, 256]; 40 is what a thread
  // that only issues TMA copies needs (CUTLASS's producers keep 40 too).
  constexpr int64_t kRegisterFile = 65536, kStep = 8, kProducer = 40, kMost = 256;
  WarpgroupRegisters r;
  r.launch = kRegisterFile / productThreads() / kStep * kStep;
  r.producer = kProducer;
  const int64_t consumers = threads / 128;
  r.consumer = std::min(kMost, r.launch + (r.launch - r.producer) / consumers / kStep * kStep);
  return r;
}

TileConfig TileConfig::with(const Knobs &knobs) const {
  TileConfig t = *this;
  auto set = [](int64_t &field, int64_t knob) {
    if (knob != -1)
      field = knob;
  };
  set(t.blockRows, knobs.blockRows);
  set(t.threads, knobs.threads);
  set(t.splits, knobs.splits);
  set(t.stages, knobs.stages);
  set(t.blockCols, knobs.blockCols);
  set(t.blockK, knobs.blockK);
  set(t.gradCols, knobs.gradCols);
  set(t.tma, knobs.tma);
  set(t.persistent, knobs.persistent);
  set(t.band, knobs.band);
  set(t.cluster, knobs.cluster);
  return t;
}

llvm::Error TileConfig::validate() const {
  if (automatic)
    return llvm::Error::success();
  std::string why = loss::checkGpuConfig(matmul, blockRows, threads, splits, stages, blockCols,
                                         blockK, gradCols, tma, persistent, band, cluster);
  if (!why.empty())
    return llvm::createStringError(why);
  return llvm::Error::success();
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef text) {
  if (text.trim() == "auto")
    return automaticChoice();
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  // An empty text (an unset variable in a script) is no tile: 'auto' is
  // spelled out, and SIMT is matmul=simt.
  if (llvm::all_of(items, [](llvm::StringRef item) { return item.trim().empty(); }))
    return llvm::createStringError("tile must be 'auto' or key=value pairs such as "
                                   "'matmul=wgmma,tma=2', got '" +
                                   text.str() + "'");
  // A key given again overrides the earlier value: a base tile plus
  // overrides ("…,stages=2" + ",stages=3") is how tiles are composed.
  // The strategy first: its own tile is what the other keys change, so
  // "matmul=mma_sync" alone is that strategy's default tile.
  loss::MatmulKind matmul = TileConfig().matmul;
  for (llvm::StringRef item : items) {
    auto [key, value] = item.trim().split('=');
    if (key.trim() != "matmul")
      continue;
    std::optional<loss::MatmulKind> kind = loss::symbolizeMatmulKind(value.trim());
    if (!kind)
      return llvm::createStringError("tile matmul must be 'simt', 'mma_sync' or 'wgmma', got '" +
                                     value.trim().str() + "'");
    matmul = *kind;
  }
  TileConfig config = forMatmul(matmul);
  Knobs knobs;
  for (llvm::StringRef item : items) {
    auto [key, value] = item.trim().split('=');
    key = key.trim(), value = value.trim();
    if (key == "matmul")
      continue;
    int64_t number = 0;
    if (value.getAsInteger(10, number))
      return llvm::createStringError("tile '" + key.str() + "' expects an integer, got '" +
                                     value.str() + "'");
    // (-1 means "unset" to Knobs: no tile size is negative.)
    if (number < 0)
      return llvm::createStringError("tile '" + key.str() + "' must not be negative, got " +
                                     value.str());
    if (key == "block_rows")
      knobs.blockRows = number;
    else if (key == "threads")
      knobs.threads = number;
    else if (key == "splits")
      knobs.splits = number;
    else if (key == "stages")
      knobs.stages = number;
    else if (key == "block_cols")
      knobs.blockCols = number;
    else if (key == "block_k")
      knobs.blockK = number;
    else if (key == "grad_cols")
      knobs.gradCols = number;
    else if (key == "tma")
      knobs.tma = number;
    else if (key == "persistent")
      knobs.persistent = number;
    else if (key == "band")
      knobs.band = number;
    else if (key == "cluster")
      knobs.cluster = number;
    else
      return llvm::createStringError("unknown tile key '" + key.str() +
                                     "' (expected block_rows, threads, splits, matmul, stages, "
                                     "block_cols, block_k, grad_cols, tma, persistent, band, "
                                     "cluster)");
  }
  config = config.with(knobs);
  if (llvm::Error err = config.validate())
    return std::move(err);
  return config;
}

loss::GpuConfigAttr TileConfig::toAttr(mlir::MLIRContext *context, loss::Schedule schedule) const {
  return loss::GpuConfigAttr::get(context, schedule, matmul, blockRows, threads, splits, stages,
                                  blockCols, blockK, gradCols, tma, persistent, band, cluster);
}

TileConfig TileConfig::fromAttr(loss::GpuConfigAttr attr) {
  TileConfig t;
  t.blockRows = attr.getBlockRows();
  t.threads = attr.getThreads();
  t.splits = attr.getSplits();
  t.matmul = attr.getMatmul();
  t.stages = attr.getStages();
  t.blockCols = attr.getBlockCols();
  t.blockK = attr.getBlockK();
  t.gradCols = attr.getGradCols();
  t.tma = attr.getTma();
  t.persistent = attr.getPersistent();
  t.band = attr.getBand();
  t.cluster = attr.getCluster();
  return t;
}

std::string CpuTileConfig::str() const {
  return "cpu:block_rows=" + std::to_string(blockRows) +
         ",block_cols=" + std::to_string(blockCols) +
         ",vector_width=" + std::to_string(vectorWidth) +
         ",panel_blocks=" + std::to_string(panelBlocks) +
         ",vocab_tile=" + std::to_string(vocabTile) +
         ",reduce_lanes=" + std::to_string(reduceLanes);
}

llvm::Error CpuTileConfig::validate() const {
  std::string why = loss::checkCpuConfig(blockRows, blockCols, vectorWidth, panelBlocks,
                                         vocabTile, reduceLanes);
  if (!why.empty())
    return llvm::createStringError(why);
  return llvm::Error::success();
}

loss::CpuConfigAttr CpuTileConfig::toAttr(mlir::MLIRContext *context,
                                          loss::Schedule schedule) const {
  return loss::CpuConfigAttr::get(context, schedule, blockRows, blockCols, vectorWidth,
                                  panelBlocks, vocabTile, reduceLanes);
}

CpuTileConfig CpuTileConfig::fromAttr(loss::CpuConfigAttr attr) {
  CpuTileConfig t;
  t.blockRows = attr.getBlockRows();
  t.blockCols = attr.getBlockCols();
  t.vectorWidth = attr.getVectorWidth();
  t.panelBlocks = attr.getPanelBlocks();
  t.vocabTile = attr.getVocabTile();
  t.reduceLanes = attr.getReduceLanes();
  return t;
}

CpuTileConfig CpuTileConfig::forVectorRegisters(int64_t registers) {
  // One register tile shape for the three products: blockRows rows ×
  // blockCols vectors of vectorWidth columns. In the logits micro-kernel
  // that is blockRows accumulators of vector<blockCols·vectorWidth> (live:
  // the accumulators, one vector of packed W, one broadcast of x); in dX/dW
  // blockRows × blockCols vector<vectorWidth> accumulators. Measured at
  // N=1024, V=8000, D=1024 (f32, docs/benchmarks.md). No bit depends on it.
  // AVX-512 (32 registers of vector<8>): 8 rows × 2 zmm columns (16
  // accumulators); AVX: 4 × 2 ymm (8); SSE: 4 × 1 vector<8>. Column groups
  // stay a power of two: 4 × 3 ymm (vector<24> accumulators) made LLVM
  // split each k step's accumulators into lanes through the stack, and ran
  // the forward 7.5x slower on an AVX2 CPU (Zen 3: 1.44 s against 0.19 s,
  // 4 × 2 is at the FMA peak; 6 × 2 is no faster). The panels are large
  // (~1024 rows) so that packing a W tile costs little next to the products
  // that reuse it.
  CpuTileConfig t;
  if (registers >= 32) {
    t.blockRows = 8, t.blockCols = 2, t.vectorWidth = 16, t.panelBlocks = 128;
  } else {
    t.blockRows = 4, t.blockCols = registers >= 16 ? 2 : 1, t.panelBlocks = 256;
  }
  return t;
}
