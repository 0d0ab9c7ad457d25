//===- Pipelines.cpp ------------------------------------------------------===//

#include "compiler/Pipeline/Pipelines.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Regex.h"

using namespace lossjit;

llvm::Error GpuTarget::validate() const {
  llvm::Regex spelling("^sm_([0-9]+)a?$");
  llvm::SmallVector<llvm::StringRef> groups;
  if (!spelling.match(chip, &groups))
    return llvm::createStringError("arch must look like sm_80, sm_90 or sm_90a, got '" +
                                   chip + "'");
  unsigned number = 0;
  if (groups[1].getAsInteger(10, number) || number < 70)
    return llvm::createStringError("arch " + chip +
                                   " is not supported: lossjit needs sm_70 or newer");
  return llvm::Error::success();
}

std::string GpuTarget::effectiveFeatures() const {
  if (!features.empty())
    return features;
  // PTX 8.0 covers sm_70..sm_90a; newer chips need a newer ISA.
  unsigned number = 0;
  llvm::StringRef(chip).drop_front(3).take_while(llvm::isDigit).getAsInteger(10, number);
  return number >= 100 ? "+ptx86" : "+ptx80";
}

namespace {
/// Graph-level stages shared by both backends.
std::vector<Stage> graphStages() {
  return {
      {"precision", "builtin.module(loss-make-precision-explicit,loss-verify-precision)"},
      {"fused", "builtin.module(loss-fuse-linear-cross-entropy{remarks=false},"
                "canonicalize,cse)"},
  };
}
} // namespace

std::vector<Stage> lossjit::gpuStages(const GpuTarget &target,
                                      const TileConfig &tile) {
  std::vector<Stage> stages = graphStages();
  // Only knobs that differ from the defaults are passed, so a config the
  // input IR already carries keeps its other fields.
  const TileConfig defaults;
  std::string select = "target=gpu chip=" + target.chip;
  auto knob = [&](llvm::StringRef name, int64_t value, int64_t fallback) {
    if (value != fallback)
      select += " " + name.str() + "=" + std::to_string(value);
  };
  knob("block-rows", tile.blockRows, defaults.blockRows);
  knob("threads", tile.threads, defaults.threads);
  knob("splits", tile.splits, defaults.splits);
  knob("stages", tile.stages, defaults.stages);
  if (tile.matmul != defaults.matmul)
    select += " matmul=" + loss::stringifyMatmulKind(tile.matmul).str();
  stages.push_back({"kernels", "builtin.module(loss-select-lowering-config{" + select +
                                   "},loss-lower-to-gpu{chip=" + target.chip +
                                   "},canonicalize,cse)"});
  stages.push_back({"nvvm", "builtin.module(nvvm-attach-target{chip=" + target.chip +
                                " features=" + target.effectiveFeatures() +
                                " O=3},gpu.module(loss-math-to-nvvm-approx,"
                                "arith-expand,convert-scf-to-cf,convert-gpu-to-nvvm,"
                                "canonicalize,cse),reconcile-unrealized-casts)"});
  stages.push_back({"ptx", "builtin.module(gpu-module-to-binary{format=isa})"});
  return stages;
}

std::vector<Stage> lossjit::cpuStages(const CpuTileConfig &tile, bool f16ExtendInHardware,
                                      int64_t vectorRegisters) {
  std::vector<Stage> stages = graphStages();
  const CpuTileConfig defaults;
  std::string select = "target=cpu";
  if (vectorRegisters > 0)
    select += " vector-registers=" + std::to_string(vectorRegisters);
  auto knob = [&](llvm::StringRef name, int64_t value, int64_t fallback) {
    if (value != fallback)
      select += " " + name.str() + "=" + std::to_string(value);
  };
  knob("block-rows", tile.blockRows, defaults.blockRows);
  knob("block-cols", tile.blockCols, defaults.blockCols);
  knob("vector-width", tile.vectorWidth, defaults.vectorWidth);
  knob("panel-blocks", tile.panelBlocks, defaults.panelBlocks);
  knob("vocab-tile", tile.vocabTile, defaults.vocabTile);
  knob("reduce-lanes", tile.reduceLanes, defaults.reduceLanes);
  stages.push_back({"kernels", "builtin.module(loss-select-lowering-config{" + select +
                                   "},loss-lower-to-cpu,canonicalize,cse)"});
  std::string expand = f16ExtendInHardware
                           ? "loss-expand-host-libcalls{f16-extend-in-hardware=true}"
                           : "loss-expand-host-libcalls";
  stages.push_back(
      {"llvm", "builtin.module(builtin.module(" + expand + ",arith-expand,"
               "convert-scf-to-cf,"
               "convert-vector-to-llvm,convert-math-to-llvm,expand-strided-metadata,"
               "finalize-memref-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,"
               "convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts))"});
  return stages;
}

llvm::StringRef lossjit::stripModuleAnchor(llvm::StringRef pipeline) {
  llvm::StringRef inner = pipeline.trim();
  if (inner.consume_front("builtin.module(") && inner.consume_back(")"))
    return inner;
  return pipeline;
}

std::string lossjit::joinStages(const std::vector<Stage> &stages) {
  // Each stage is "builtin.module(...)"; concatenate the insides.
  std::string inner;
  for (const Stage &s : stages) {
    llvm::StringRef body = stripModuleAnchor(s.pipeline);
    if (!inner.empty())
      inner += ",";
    inner += body.str();
  }
  return "builtin.module(" + inner + ")";
}
