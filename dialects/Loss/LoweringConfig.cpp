//===- LoweringConfig.cpp -------------------------------------------------===//

#include "dialects/Loss/LoweringConfig.h"
#include "dialects/Loss/LossOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace lossjit::loss;

std::string lossjit::loss::checkGpuConfig(MatmulKind matmul, int64_t blockRows, int64_t threads,
                                          int64_t splits, int64_t stages, int64_t blockCols,
                                          int64_t blockK, int64_t gradCols, int64_t tma,
                                          int64_t persistent, int64_t band, int64_t cluster) {
  auto text = [](int64_t v) { return std::to_string(v); };
  if (threads < 32 || threads > 1024 || !llvm::isPowerOf2_64(threads))
    return "tile threads must be a power of two in [32, 1024], got " + text(threads);
  if (splits < 1 || splits > 1024)
    return "tile splits must be in [1, 1024], got " + text(splits);
  // wgmma's threads follow its rows alone, so the gradient products may
  // take other columns within the same block.
  if (gradCols != 0 && matmul != MatmulKind::wgmma)
    return "tile grad_cols is for matmul wgmma (its threads do not depend on the columns), "
           "got matmul " +
           stringifyMatmulKind(matmul).str();
  if (tma < 0 || tma > 3)
    return "tile tma must be 0 (cp.async), 1 (TMA), 2 (TMA from a producer warp) or 3 (TMA "
           "from a producer warpgroup that lends its registers), got " +
           text(tma);
  // TMA boxes feed wgmma's swizzled descriptors; mma.sync reads its padded
  // rows by ldmatrix.
  if (tma != 0 && matmul != MatmulKind::wgmma)
    return "tile tma is for matmul wgmma (TMA tiles in the swizzled layouts wgmma reads), got "
           "matmul " +
           stringifyMatmulKind(matmul).str();
  // The tensor-core product kernels' grid knobs: 0 (off) or in [1, most].
  // (The SIMT kernels' blocks sweep their own loops already.)
  auto gridKnob = [&](llvm::StringRef name, int64_t value, int64_t most,
                      llvm::StringRef meaning) -> std::string {
    if (value < 0 || value > most)
      return ("tile " + name + " must be " + meaning + ", in [1, " + text(most) + "], got " +
              text(value))
          .str();
    if (value != 0 && !isTensorCoreMatmul(matmul))
      return ("tile " + name +
              " is for tensor-core products (matmul mma_sync or wgmma), got matmul " +
              stringifyMatmulKind(matmul))
          .str();
    return "";
  };
  if (std::string why = gridKnob("persistent", persistent, kMaxPersistentBlocks,
                                 "0 (a block per tile) or the most blocks a product kernel "
                                 "launches");
      !why.empty())
    return why;
  // Two or four row blocks share their B tiles by TMA multicast: the
  // ring's copies come from a producer (tma 2 or 3) that can wait on every
  // block's releases. Each copies its share of a K-major W box (whole
  // swizzle atoms of 8 lines: block_cols a multiple of 8 per block, below)
  // or of an MN-major tile's 64-line boxes (dX, dW:
  // GpuSchedule::gradientCluster clusters only tiles of whole boxes per
  // block).
  if (cluster != 0 && cluster != 2 && cluster != 4)
    return "tile cluster must be 0 (no clusters), 2 or 4 (row blocks that multicast the tiles "
           "they share), got " +
           text(cluster);
  if (cluster && (matmul != MatmulKind::wgmma || tma < 2))
    return "tile cluster is for matmul wgmma with tma 2 or 3 (a producer copies the multicast "
           "shares), got matmul " +
           stringifyMatmulKind(matmul).str() + " and tma " + text(tma);
  if (std::string why = gridKnob("band", band, kMaxBandKiB,
                                 "0 (row blocks first through the grid) or the KiB of A rows "
                                 "a band of tiles keeps in L2");
      !why.empty())
    return why;
  if (matmul == MatmulKind::simt) {
    if (blockRows < 1 || blockRows > 16)
      return "tile block_rows must be in [1, 16], got " + text(blockRows);
    // The partial kernel keeps one f32 per carried statistic (2) per row and
    // thread in static shared memory.
    if (blockRows * threads * 8 > 48 * 1024)
      return "tile block_rows*threads*8 bytes of shared memory exceed 48 KiB";
    if (stages != 1)
      return "matmul simt reads operands straight from memory: stages must be 1, got " +
             text(stages);
    if (blockCols != 0 || blockK != 0)
      return "matmul simt has one column per thread and no k tile: block_cols and block_k "
             "must be 0, got " +
             text(blockCols) + " and " + text(blockK);
    return "";
  }
  if (matmul == MatmulKind::wgmma) {
    // Warpgroups of 64 rows, each one wgmma m64nBNk16 per k16 step.
    if (blockRows != 64 && blockRows != 128)
      return "matmul wgmma: block_rows must be 64 or 128 (64 rows per warpgroup), got " +
             text(blockRows);
    if (threads != 2 * blockRows)
      return "matmul wgmma: threads must be 128 per 64 rows (one warpgroup each), " +
             text(2 * blockRows) + " for block_rows " + text(blockRows) + ", got " + text(threads);
    // The producer warpgroup's registers go to two consumer warpgroups
    // (at 384 threads 168 each; 40 for it, 232 for them): one consumer
    // warpgroup alone has 255 already.
    if (tma == 3 && blockRows != 128)
      return "matmul wgmma: tma 3 (a producer warpgroup lending its registers) needs block_rows "
             "128 (two consumer warpgroups), got " +
             text(blockRows);
    if (blockCols < 16 || blockCols > 256 || blockCols % 16)
      return "matmul wgmma: block_cols must be a multiple of 16 in [16, 256] (wgmma's N), got " +
             text(blockCols);
    if (cluster && blockCols % (8 * cluster))
      return "matmul wgmma: with tile cluster " + text(cluster) +
             " each block copies block_cols / " + text(cluster) +
             " lines of every W tile in whole swizzle atoms of 8, so block_cols must be a "
             "multiple of " +
             text(8 * cluster) + ", got " + text(blockCols);
    if (gradCols != 0 && (gradCols < 16 || gradCols > 256 || gradCols % 16))
      return "matmul wgmma: grad_cols must be 0 (as block_cols) or a multiple of 16 in "
             "[16, 256] (wgmma's N), got " +
             text(gradCols);
    if (blockK != 16 && blockK != 32 && blockK != 64)
      return "matmul wgmma: block_k must be 16, 32 or 64, got " + text(blockK);
    if (stages < 2 || stages > 4)
      return "matmul wgmma: stages must be in [2, 4] (a cp.async ring), got " + text(stages);
    // The ring (16-bit elements, unpadded core matrices) in dynamic shared
    // memory: at most 4 × (128 + 256) × 64 × 2 = 196608 bytes, within an
    // sm_90 block's 227 KiB.
    return "";
  }
  // mma_sync: 32×32 warp tiles of m16n8k16 products.
  if (blockRows < 32 || blockRows > 128 || blockRows % 32)
    return "matmul mma_sync: block_rows must be 32, 64, 96 or 128 (32-row warp tiles), got " +
           text(blockRows);
  if (blockCols < 32 || blockCols > 256 || blockCols % 32)
    return "matmul mma_sync: block_cols must be a multiple of 32 in [32, 256], got " +
           text(blockCols);
  if (threads != 32 * (blockRows / 32) * (blockCols / 32))
    return "matmul mma_sync: threads must be 32 per 32x32 warp tile, " +
           text(32 * (blockRows / 32) * (blockCols / 32)) + " for " + text(blockRows) + "x" +
           text(blockCols) + ", got " + text(threads);
  if (blockK != 16 && blockK != 32 && blockK != 64)
    return "matmul mma_sync: block_k must be 16, 32 or 64, got " + text(blockK);
  if (stages < 2 || stages > 4)
    return "matmul mma_sync: stages must be in [2, 4] (a cp.async ring), got " + text(stages);
  // The operand ring (16-bit elements, rows padded by 8 for conflict-free
  // ldmatrix) lives in dynamic shared memory: the largest tile these rules
  // allow (128x256, BK 64, 4 stages) needs 221184 bytes, within the 227 KiB
  // an sm_90 block may opt into. A device that allows less (sm_80: 163 KiB)
  // is refused at launch by the runtime, naming both sizes. The row merge
  // (2 f32 per row and warp column, at most 8 KiB) is static.
  return "";
}

std::string lossjit::loss::checkMatmulChip(MatmulKind matmul, llvm::StringRef chip) {
  if (matmul == MatmulKind::wgmma && chip != "sm_90a")
    return "matmul wgmma needs chip sm_90a (wgmma and its descriptors are specific to it), got '" +
           chip.str() + "'";
  // mma_sync's bf16 m16n8k16 and its cp.async ring need sm_80: below it
  // the NVPTX backend cannot select cp.async and aborts.
  unsigned version = 0;
  llvm::StringRef digits = chip;
  if (matmul == MatmulKind::mma_sync && digits.consume_front("sm_") &&
      !digits.take_while([](char c) { return llvm::isDigit(c); }).getAsInteger(10, version) &&
      version < 80)
    return "matmul mma_sync needs chip sm_80 or newer (mma.sync on bf16 and cp.async), got '" +
           chip.str() + "'";
  return "";
}

std::string lossjit::loss::checkCpuConfig(int64_t blockRows, int64_t blockCols, int64_t vectorWidth,
                                          int64_t panelBlocks, int64_t vocabTile,
                                          int64_t reduceLanes) {
  auto text = [](int64_t v) { return std::to_string(v); };
  if (blockRows < 1 || blockRows > 16 || vectorWidth < 1 || vectorWidth > 64)
    return "block-rows must be in [1, 16] and vector-width in [1, 64], got " + text(blockRows) +
           " and " + text(vectorWidth);
  if (blockCols < 1 || blockCols > 8)
    return "block-cols must be in [1, 8], got " + text(blockCols);
  if (panelBlocks < 1 || panelBlocks > 1024)
    return "panel-blocks must be in [1, 1024], got " + text(panelBlocks);
  if (vocabTile < 1 || vocabTile > (1 << 20))
    return "vocab-tile must be in [1, 1048576], got " + text(vocabTile);
  if (reduceLanes < 1 || reduceLanes > 4096 || !llvm::isPowerOf2_64(reduceLanes))
    return "reduce-lanes must be a power of two in [1, 4096], got " + text(reduceLanes);
  return "";
}

bool lossjit::loss::scheduleFits(Operation *op, Schedule schedule) {
  auto fused = dyn_cast<FusedOpInterface>(op);
  if (!fused)
    return false;
  switch (fused.getKernelPass()) {
  case KernelPass::forward:
    return schedule == Schedule::forward;
  case KernelPass::backward:
    return schedule == Schedule::chunked || schedule == Schedule::recompute ||
           schedule == Schedule::vocab_chunked;
  case KernelPass::forward_backward:
    return schedule == Schedule::fused || schedule == Schedule::fused_vocab_chunked;
  }
  return false;
}

Attribute lossjit::loss::getLoweringConfig(Operation *op) {
  return op->getAttr(kLoweringConfigAttrName);
}

LogicalResult GpuConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError, Schedule schedule,
                                    MatmulKind matmul, int64_t blockRows, int64_t threads,
                                    int64_t splits, int64_t stages, int64_t blockCols,
                                    int64_t blockK, int64_t gradCols, int64_t tma,
                                    int64_t persistent, int64_t band, int64_t cluster) {
  std::string why = checkGpuConfig(matmul, blockRows, threads, splits, stages, blockCols, blockK,
                                   gradCols, tma, persistent, band, cluster);
  if (!why.empty())
    return emitError() << why;
  // The recompute kernels form logits in SIMT tiles inside dX/dW; the
  // chunked and fused schedules take the logits from lce_bwd_dz/lce_fused_z.
  if (isTensorCoreMatmul(matmul) && schedule == Schedule::recompute)
    return emitError() << "matmul " << stringifyMatmulKind(matmul)
                       << " does not build the recompute schedule (use schedule = chunked, or "
                          "matmul = simt)";
  return success();
}

LogicalResult CpuConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError, Schedule schedule,
                                    int64_t blockRows, int64_t blockCols, int64_t vectorWidth,
                                    int64_t panelBlocks, int64_t vocabTile, int64_t reduceLanes) {
  std::string why =
      checkCpuConfig(blockRows, blockCols, vectorWidth, panelBlocks, vocabTile, reduceLanes);
  if (!why.empty())
    return emitError() << why;
  return success();
}

LogicalResult LossDialect::verifyOperationAttribute(Operation *op, NamedAttribute attribute) {
  // The launch plans the lowerings attach to the module (compiler/Kernels/
  // Support/LaunchPlan.h) are checked where they are read.
  if (attribute.getName() == "loss.launch_plans")
    return success();
  // How many TMA tensor maps a kernel takes (loss-tensor-map-grid-constant).
  if (attribute.getName() == kTensorMapsAttrName) {
    auto count = dyn_cast<IntegerAttr>(attribute.getValue());
    if (!count || count.getInt() < 1 || !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kTensorMapsAttrName.str()
                             << "' must be a positive integer on a kernel function, got "
                             << attribute.getValue();
    return success();
  }
  // The dynamic shared-memory alignment a kernel needs.
  if (attribute.getName() == kDynamicSharedAlignAttrName) {
    auto align = dyn_cast<IntegerAttr>(attribute.getValue());
    if (!align || align.getInt() < 1 || !llvm::isPowerOf2_64(uint64_t(align.getInt())) ||
        !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kDynamicSharedAlignAttrName.str()
                             << "' must be a power of two on a kernel function, got "
                             << attribute.getValue();
    return success();
  }
  if (attribute.getName() != kLoweringConfigAttrName)
    return op->emitError() << "unknown loss dialect attribute '" << attribute.getName().str()
                           << "'";
  Schedule schedule;
  if (auto gpu = dyn_cast<GpuConfigAttr>(attribute.getValue()))
    schedule = gpu.getSchedule();
  else if (auto cpu = dyn_cast<CpuConfigAttr>(attribute.getValue()))
    schedule = cpu.getSchedule();
  else
    return op->emitError() << "'" << kLoweringConfigAttrName.str()
                           << "' must be a #loss.gpu_config or #loss.cpu_config, got "
                           << attribute.getValue();
  auto fused = dyn_cast<FusedOpInterface>(op);
  if (!fused)
    return op->emitError() << "'" << kLoweringConfigAttrName.str()
                           << "' belongs on a fused loss op, not on '" << op->getName() << "'";
  if (!scheduleFits(op, schedule))
    return op->emitError() << "schedule " << stringifySchedule(schedule)
                           << " does not lower this op (forward: linear_cross_entropy and "
                              "vocab_reduce; chunked, vocab_chunked or recompute: their _grad; "
                              "fused or fused_vocab_chunked: linear_cross_entropy_with_grad)";
  auto gpu = dyn_cast<GpuConfigAttr>(attribute.getValue());
  if (gpu && isTensorCoreMatmul(gpu.getMatmul())) {
    if (fused.getKernelPass() == KernelPass::forward && fused.getStorage().isF32())
      return op->emitError() << "matmul " << stringifyMatmulKind(gpu.getMatmul())
                             << " multiplies f16 or bf16 storage; f32 stays on matmul simt (TF32 "
                                "would round the operands)";
  }
  return success();
}
