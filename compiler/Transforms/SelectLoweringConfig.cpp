//===- SelectLoweringConfig.cpp - the lowering decisions as attributes ----===//

#include "compiler/Kernels/Support/TileConfig.h"
#include "compiler/Transforms/Passes.h"
#include "dialects/Loss/LoweringConfig.h"

namespace lossjit {
#define GEN_PASS_DEF_LOSSSELECTLOWERINGCONFIG
#include "compiler/Transforms/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// The schedule a fused op lowers with when its config does not say.
/// "auto" picks the 6·N·D·V chunked schedule; its chunk size follows the
/// workspace budget. On the host, 16-bit storage chunks the vocabulary
/// instead of the rows: the rows would need a V×D f32 dW accumulator
/// outside any budget (f32 storage accumulates in grad_w itself).
loss::Schedule defaultSchedule(Operation *op, bool host) {
  auto wide = [&](Type storage) { return !host || storage.isF32(); };
  if (auto grad = dyn_cast<loss::LinearCrossEntropyGradOp>(op)) {
    if (grad.getStrategy() == "recompute")
      return loss::Schedule::recompute;
    if (grad.getStrategy() == "auto" && !wide(grad.getStorage()))
      return loss::Schedule::vocab_chunked;
    return loss::Schedule::chunked;
  }
  if (auto fused = dyn_cast<loss::LinearCrossEntropyWithGradOp>(op))
    return wide(fused.getStorage()) ? loss::Schedule::fused : loss::Schedule::fused_vocab_chunked;
  return loss::Schedule::forward;
}

/// The storage type of a fused op.
Type storageOf(Operation *op) {
  if (auto fwd = dyn_cast<loss::LinearCrossEntropyOp>(op))
    return fwd.getStorage();
  if (auto grad = dyn_cast<loss::LinearCrossEntropyGradOp>(op))
    return grad.getStorage();
  return cast<loss::LinearCrossEntropyWithGradOp>(op).getStorage();
}

struct SelectLoweringConfigPass
    : lossjit::impl::LossSelectLoweringConfigBase<SelectLoweringConfigPass> {
  using Base::Base;

  void runOnOperation() override {
    if (target != "gpu" && target != "cpu") {
      getOperation().emitError() << "loss-select-lowering-config: target must be gpu or cpu, got '"
                                 << target << "'";
      return signalPassFailure();
    }
    std::optional<loss::MatmulKind> kind;
    const bool automatic = matmul == "auto";
    if (!matmul.empty() && !automatic && !(kind = loss::symbolizeMatmulKind(matmul))) {
      getOperation().emitError()
          << "loss-select-lowering-config: matmul must be simt, mma_sync or auto, got '" << matmul
          << "'";
      return signalPassFailure();
    }
    WalkResult result = getOperation().walk([&](Operation *op) {
      if (!isa<loss::LinearCrossEntropyOp, loss::LinearCrossEntropyGradOp,
               loss::LinearCrossEntropyWithGradOp>(op))
        return WalkResult::advance();
      return succeeded(target == "gpu" ? selectGpu(op, kind, automatic) : selectCpu(op))
                 ? WalkResult::advance()
                 : WalkResult::interrupt();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  /// `current` replaced by `option` when the option was given (-1: unset).
  static void override(int64_t &current, int64_t option) {
    if (option != -1)
      current = option;
  }

  /// With `automatic` (matmul=auto) an op without a config of its own
  /// gets TileConfig::defaultFor its chip, storage and schedule.
  LogicalResult selectGpu(Operation *op, std::optional<loss::MatmulKind> kind, bool automatic) {
    TileConfig tile;
    loss::Schedule schedule = defaultSchedule(op, /*host=*/false);
    if (automatic)
      tile = TileConfig::defaultFor(chip, storageOf(op), schedule);
    if (auto given = dyn_cast_or_null<loss::GpuConfigAttr>(loss::getLoweringConfig(op))) {
      tile = TileConfig::fromAttr(given);
      schedule = given.getSchedule();
    }
    const TileConfig::Knobs knobs{blockRows, threads, splits, stages, blockCols, blockK};
    // Switching strategy starts from that strategy's tile; the options given
    // still override it.
    if (kind && *kind != tile.matmul)
      tile = TileConfig::forMatmul(*kind);
    tile = tile.with(knobs);
    if (llvm::Error err = tile.validate())
      return op->emitError() << "loss-select-lowering-config: " << llvm::toString(std::move(err));
    // The attribute's own rules (e.g. which schedules a strategy builds) are
    // checked here, not first when a lowering reads it.
    loss::GpuConfigAttr attr = loss::GpuConfigAttr::getChecked(
        [&] { return op->emitError() << "loss-select-lowering-config: "; }, op->getContext(),
        schedule, tile.matmul, tile.blockRows, tile.threads, tile.splits, tile.stages,
        tile.blockCols, tile.blockK);
    if (!attr)
      return failure();
    op->setAttr(loss::kLoweringConfigAttrName, attr);
    return success();
  }

  LogicalResult selectCpu(Operation *op) {
    CpuTileConfig tile;
    if (vectorRegisters != -1)
      tile = CpuTileConfig::forVectorRegisters(vectorRegisters);
    loss::Schedule schedule = defaultSchedule(op, /*host=*/true);
    if (auto given = dyn_cast_or_null<loss::CpuConfigAttr>(loss::getLoweringConfig(op))) {
      tile = CpuTileConfig::fromAttr(given);
      schedule = given.getSchedule();
    }
    override(tile.blockRows, blockRows);
    override(tile.blockCols, blockCols);
    override(tile.vectorWidth, vectorWidth);
    override(tile.panelBlocks, panelBlocks);
    override(tile.vocabTile, vocabTile);
    override(tile.reduceLanes, reduceLanes);
    if (llvm::Error err = tile.validate())
      return op->emitError() << "loss-select-lowering-config: " << llvm::toString(std::move(err));
    op->setAttr(loss::kLoweringConfigAttrName, tile.toAttr(op->getContext(), schedule));
    return success();
  }
};
} // namespace
