//===- Registration.cpp ---------------------------------------------------===//

#include "compiler/Pipeline/Registration.h"
#include "compiler/Conversion/Passes.h"
#include "compiler/Pipeline/Pipelines.h"
#include "compiler/Transforms/Passes.h"
#include "dialects/Loss/LossDialect.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include <mutex>

using namespace mlir;
using namespace lossjit;

void lossjit::registerLossJITDialects(DialectRegistry &registry) {
  registry.insert<loss::LossDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
}

namespace {
struct GpuPipelineOptions : PassPipelineOptions<GpuPipelineOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("GPU arch, e.g. sm_80"),
                           llvm::cl::init("sm_80")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features (default: by chip)"),
                               llvm::cl::init("")};
  /// A strategy, or the JIT's per-op choice.
  enum class Matmul { simt, mma_sync, wgmma, automatic };
  Option<Matmul> matmul{
      *this, "matmul",
      llvm::cl::desc("tile products (each strategy starts from its own default tile)"),
      llvm::cl::init(Matmul::simt),
      llvm::cl::values(clEnumValN(Matmul::simt, "simt", "f32 FMA per thread"),
                       clEnumValN(Matmul::mma_sync, "mma_sync", "tensor cores, sm_80+, f16/bf16"),
                       clEnumValN(Matmul::wgmma, "wgmma",
                                  "warpgroup tensor cores, sm_90a only, f16/bf16"),
                       clEnumValN(Matmul::automatic, "auto",
                                  "per op, as the JIT: for f16/bf16 on sm_80+ (not the "
                                  "recompute schedule) wgmma on sm_90a, mma_sync elsewhere; "
                                  "else simt"))};
  // -1: the strategy's default (TileConfig::forMatmul).
  Option<int64_t> blockRows{*this, "block-rows", llvm::cl::init(-1)};
  Option<int64_t> threads{*this, "threads", llvm::cl::init(-1)};
  Option<int64_t> splits{*this, "splits", llvm::cl::init(-1)};
  Option<int64_t> stages{*this, "stages", llvm::cl::init(-1)};
  Option<int64_t> blockCols{*this, "block-cols", llvm::cl::init(-1)};
  Option<int64_t> blockK{*this, "block-k", llvm::cl::init(-1)};
  Option<int64_t> gradCols{*this, "grad-cols", llvm::cl::init(-1)};
  Option<int64_t> tma{*this, "tma", llvm::cl::init(-1)};
  Option<int64_t> persistent{*this, "persistent", llvm::cl::init(-1)};
  Option<int64_t> band{*this, "band", llvm::cl::init(-1)};
  Option<int64_t> cluster{*this, "cluster", llvm::cl::init(-1)};
};

struct CpuPipelineOptions : PassPipelineOptions<CpuPipelineOptions> {
  // The JIT's defaults (CpuTileConfig), so lossjit-opt shows what it runs.
  Option<int64_t> blockRows{*this, "block-rows", llvm::cl::init(8)};
  Option<int64_t> vectorWidth{*this, "vector-width", llvm::cl::init(8)};
  Option<bool> f16ExtendInHardware{
      *this, "f16-extend-in-hardware",
      llvm::cl::desc("the target widens f16 exactly in hardware (F16C), as the JIT decides"),
      llvm::cl::init(false)};
  Option<bool> fmaInHardware{
      *this, "fma-in-hardware",
      llvm::cl::desc("the target has FMA units; false expands f32 fma into exact f64 "
                     "arithmetic, as the JIT does for such a CPU"),
      llvm::cl::init(true)};
};

/// Adds a joined stage list to `pm` (anchored on builtin.module already).
LogicalResult addStages(OpPassManager &pm, const std::vector<Stage> &stages) {
  std::string joined = joinStages(stages);
  return parsePassPipeline(stripModuleAnchor(joined), pm, llvm::errs());
}

/// A pass pipeline of `Options` whose builder may fail (a bad option value,
/// a stage list that does not parse): the tool then stops with an error
/// instead of running the input through nothing (PassPipelineRegistration's
/// builders cannot fail).
template <typename Options>
void registerFalliblePipeline(
    llvm::StringRef arg, llvm::StringRef description,
    std::function<LogicalResult(OpPassManager &, const Options &,
                                function_ref<LogicalResult(const Twine &)>)>
        builder) {
  registerPassPipeline(
      arg, description,
      [builder](OpPassManager &pm, llvm::StringRef text,
                function_ref<LogicalResult(const Twine &)> errorHandler) {
        Options options;
        if (failed(options.parseFromString(text)))
          return failure();
        return builder(pm, options, errorHandler);
      },
      [](function_ref<void(const detail::PassOptions &)> handler) { handler(Options()); });
}
} // namespace

void lossjit::registerLossJITPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerAllPasses();
    registerLossTransformsPasses();
    registerLossConversionPasses();
    registerFalliblePipeline<GpuPipelineOptions>(
        "lossjit-gpu-pipeline", "loss graph → fused op → GPU kernels → NVVM → PTX (in-process)",
        [](OpPassManager &pm, const GpuPipelineOptions &o,
           function_ref<LogicalResult(const Twine &)> error) {
          GpuTarget target{o.chip, o.features};
          // Before the stage list: chip and features are pasted into it.
          if (llvm::Error err = target.validate())
            return error("lossjit-gpu-pipeline: " + llvm::toString(std::move(err)));
          // -1 is "unset" to the knobs: a negative value given would be
          // dropped silently.
          for (const auto *knob :
               {&o.blockRows, &o.threads, &o.splits, &o.stages, &o.blockCols, &o.blockK,
                &o.gradCols, &o.tma, &o.persistent, &o.band, &o.cluster})
            if (knob->hasValue() && *knob < 0)
              return error("lossjit-gpu-pipeline: " + knob->getArgStr() +
                           " must not be negative, got " + llvm::Twine(int64_t(*knob)));
          using Matmul = GpuPipelineOptions::Matmul;
          const TileConfig::Knobs knobs{o.blockRows,  o.threads, o.splits,   o.stages,
                                        o.blockCols,  o.blockK,  o.gradCols, o.tma,
                                        o.persistent, o.band,    o.cluster};
          TileConfig tile =
              o.matmul == Matmul::automatic
                  ? TileConfig::automaticChoice(knobs)
                  : TileConfig::forMatmul(o.matmul == Matmul::mma_sync ? loss::MatmulKind::mma_sync
                                          : o.matmul == Matmul::wgmma  ? loss::MatmulKind::wgmma
                                                                       : loss::MatmulKind::simt)
                        .with(knobs);
          return addStages(pm, gpuStages(target, tile));
        });
    registerFalliblePipeline<CpuPipelineOptions>(
        "lossjit-cpu-pipeline", "loss graph → fused op → host kernels → LLVM dialect",
        [](OpPassManager &pm, const CpuPipelineOptions &o,
           function_ref<LogicalResult(const Twine &)>) {
          CpuTileConfig tile;
          tile.blockRows = o.blockRows;
          tile.vectorWidth = o.vectorWidth;
          return addStages(
              pm, cpuStages(tile, o.f16ExtendInHardware, /*vectorRegisters=*/0, o.fmaInHardware));
        });
  });
}
