//===- SelectLoweringConfig.cpp - the lowering decisions as attributes ----===//

#include "compiler/Kernels/Support/TileConfig.h"
#include "compiler/Transforms/Passes.h"
#include "dialects/Loss/LoweringConfig.h"
#include "dialects/Loss/LossOps.h"

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
/// outside any budget (f32 and f64 storage accumulate in grad_w itself).
/// "vocab_chunked" asks for the vocabulary chunks on either target, also
/// for the fused op (fused_vocab_chunked: the forward's statistics, then
/// the backward's vocabulary chunks), "chunked" for the row chunks.
loss::Schedule defaultSchedule(loss::FusedOpInterface op, bool host) {
  const bool wide = !host || op.getStorage() == loss::computeTypeFor(op.getStorage());
  StringRef strategy = op.getGradientStrategy();
  switch (op.getKernelPass()) {
  case loss::KernelPass::forward:
    return loss::Schedule::forward;
  case loss::KernelPass::forward_backward:
    if (strategy == "vocab_chunked" || (strategy == "auto" && !wide))
      return loss::Schedule::fused_vocab_chunked;
    return loss::Schedule::fused;
  case loss::KernelPass::backward:
    break;
  }
  if (strategy == "recompute")
    return loss::Schedule::recompute;
  if (strategy == "vocab_chunked")
    return loss::Schedule::vocab_chunked;
  if (strategy == "auto" && !wide)
    return loss::Schedule::vocab_chunked;
  return loss::Schedule::chunked;
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
          << "loss-select-lowering-config: matmul must be simt, mma_sync, wgmma or auto, got '" << matmul
          << "'";
      return signalPassFailure();
    }
    WalkResult result = getOperation().walk([&](Operation *op) {
      auto fused = dyn_cast<loss::FusedOpInterface>(op);
      if (!fused)
        return WalkResult::advance();
      return succeeded(target == "gpu" ? selectGpu(fused, kind, automatic) : selectCpu(fused))
                 ? WalkResult::advance()
                 : WalkResult::interrupt();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  /// A vocabulary reduction's forward with a teacher stream, whose partial
  /// kernel forms a second logit tile (the teacher's, by the student's tile
  /// product over T) next to a second softmax state per row (and the cross
  /// kinds' two more).
  static bool forwardWithTeacher(loss::FusedOpInterface op) {
    auto reduce = dyn_cast<loss::VocabReduceOp>(op.getOperation());
    return reduce && reduce.hasTeacher();
  }
  /// Its default tile: SIMT with 2 rows per thread. The tensor-core tile
  /// spills (ptxas, sm_80 and sm_90, bf16: 280 bytes in the KL's
  /// lce_partial, both tiles' accumulators and the epilogue's states live
  /// at once); SIMT with 4 rows spilled too (72 bytes for the JSD's); 2
  /// rows hold the KL's partial in 53 registers. The backward keeps
  /// matmul=auto (its dZ kernel holds both tiles without spills). A config
  /// or options given still override it.
  static TileConfig teacherTile() {
    TileConfig tile;
    tile.blockRows = 2;
    return tile;
  }

  /// Whether `op`'s logit epilogues fit wgmma's 128-column logits tile
  /// without spills (ptxas sm_90a, f16 and bf16): every cross-entropy op,
  /// with or without a bias and a softcap, on the cp.async and TMA rings
  /// and with a producer warp (tma=2: 288 threads get at most 168
  /// registers at launch, as a launch counts 9 warps as 12). Whole tiles
  /// fold without column masks or clamps (foldColumns), which took
  /// lce_partial from 203-255 registers to 133-153 and its 388-480 bytes of
  /// spills with tma=2 and a bias to 0-4; the last 4 (a bias and a softcap
  /// on tma=2) went when the ragged fold clamped its columns from the
  /// thread's first one and the rows' merge read the thread's id afresh.
  /// lce_bwd_dz and lce_fused_z take 127-145 with any epilogue. So do the
  /// log-prob family's (logProbFamily); the other families' epilogues carry
  /// more statistics or streams and keep 64 columns.
  static bool wideWgmmaLogitsFit(Operation *op) {
    return isa<loss::LinearCrossEntropyOp, loss::LinearCrossEntropyGradOp,
               loss::LinearCrossEntropyWithGradOp>(op) ||
           logProbFamily(op);
  }

  /// A vocabulary reduction of the log-prob family: no teacher, no class
  /// weights, and statistics among lse, label_logit and entropy (what RL
  /// trainers read: a label's log-probability and the entropy). Its
  /// kernels take 128-column wgmma logits without spills (ptxas sm_90a,
  /// bf16, lossjit-aot --preset linear-log-prob with and without entropy,
  /// a bias and a softcap: lce_partial 134-149 registers on the TMA ring,
  /// 156-168 with tma=2; lce_bwd_dz 128 and 143).
  static bool logProbFamily(Operation *op) {
    auto fits = [](auto reduce) {
      if (reduce.hasTeacher() || reduce.getClassWeights() || reduce.getTargets())
        return false;
      return llvm::all_of(reduce.getStatisticKinds(), [](loss::Statistic kind) {
        return kind == loss::Statistic::lse || kind == loss::Statistic::label_logit ||
               kind == loss::Statistic::entropy;
      });
    };
    if (auto reduce = dyn_cast<loss::VocabReduceOp>(op))
      return fits(reduce);
    if (auto grad = dyn_cast<loss::VocabReduceGradOp>(op))
      return fits(grad);
    return false;
  }

  /// `current` replaced by `option` when the option was given (-1: unset).
  static void override(int64_t &current, int64_t option) {
    if (option != -1)
      current = option;
  }

  /// With `automatic` (matmul=auto) an op without a config of its own
  /// gets TileConfig::defaultFor its chip, storage and schedule.
  LogicalResult selectGpu(loss::FusedOpInterface op, std::optional<loss::MatmulKind> kind,
                          bool automatic) {
    TileConfig tile;
    loss::Schedule schedule = defaultSchedule(op, /*host=*/false);
    if (automatic) {
      tile = TileConfig::defaultFor(chip, op.getStorage(), schedule);
      // 128×128 logit tiles read X and W half as often as 128×64 (the
      // forward models 22 → 15 ms at the shape) where they fit, and
      // their operands come by TMA into 128-byte swizzled k tiles of 64 on a
      // 3-stage mbarrier ring: measured on an H200 (N=4096, D=4096,
      // V=128256, bf16, forward + backward) 64.3 ms against 139.5 ms for
      // the cp.async ring (k 32, 4 stages). Operands TMA cannot map (rows
      // not a multiple of 16 bytes) take the kernels' cp.async fallback.
      // tma=0 given keeps the cp.async ring as it was (k 32, 4 stages).
      const bool wgmma = tile.matmul == loss::MatmulKind::wgmma;
      if (wgmma && wideWgmmaLogitsFit(op)) {
        tile.blockCols = 128;
        if (tma != 0) {
          tile.blockK = 64;
          // A warp-specialized block (tma=2) keeps 2 stages: its
          // lce_partial with a bias spilled 76 bytes at 3 until the ragged
          // fold clamped from the thread's first column, and 3 have not
          // run on hardware since.
          tile.stages = tma == 2 ? 2 : 3;
          tile.tma = 1;
        }
      } else if (wgmma && tma == 2) {
        // 64 logit columns with a producer warp: the tile that ran on the
        // H200 (128x64, k 64, 2 stages), not the cp.async ring's k 32.
        tile.blockK = 64;
        tile.stages = 2;
      }
    }
    if (forwardWithTeacher(op))
      tile = teacherTile();
    if (auto given = dyn_cast_or_null<loss::GpuConfigAttr>(loss::getLoweringConfig(op))) {
      tile = TileConfig::fromAttr(given);
      schedule = given.getSchedule();
    }
    const TileConfig::Knobs knobs{blockRows, threads, splits,     stages, blockCols, blockK,
                                  gradCols,  tma,     persistent, band,   cluster};
    // Switching strategy starts from that strategy's tile; the options given
    // still override it.
    if (kind && *kind != tile.matmul)
      tile = TileConfig::forMatmul(*kind);
    tile = tile.with(knobs);
    if (llvm::Error err = tile.validate())
      return op->emitError() << "loss-select-lowering-config: " << llvm::toString(std::move(err));
    if (std::string why = loss::checkMatmulChip(tile.matmul, chip); !why.empty())
      return op->emitError() << "loss-select-lowering-config: " << why;
    // The attribute's own rules (e.g. which schedules a strategy builds) are
    // checked here, not first when a lowering reads it.
    loss::GpuConfigAttr attr = loss::GpuConfigAttr::getChecked(
        [&] { return op->emitError() << "loss-select-lowering-config: "; }, op->getContext(),
        schedule, tile.matmul, tile.blockRows, tile.threads, tile.splits, tile.stages,
        tile.blockCols, tile.blockK, tile.gradCols, tile.tma, tile.persistent, tile.band,
        tile.cluster);
    if (!attr)
      return failure();
    op->setAttr(loss::kLoweringConfigAttrName, attr);
    return success();
  }

  LogicalResult selectCpu(loss::FusedOpInterface op) {
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
