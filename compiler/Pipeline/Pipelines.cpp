//===- Pipelines.cpp ------------------------------------------------------===//

#include "compiler/Pipeline/Pipelines.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Triple.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

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
  // A chip LLVM's NVPTX backend does not know only draws a warning from it,
  // and PTX that ptxas rejects: refuse it here, naming the chips it knows.
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
  });
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return llvm::createStringError("LLVM has no NVPTX backend: " + error);
  // CPU "" (not `chip`): an unknown CPU name would print a warning here too.
  std::unique_ptr<llvm::MCSubtargetInfo> info(target->createMCSubtargetInfo(triple, "", ""));
  if (!info)
    return llvm::createStringError("LLVM's NVPTX backend gave no subtarget information");
  if (!info->isCPUStringValid(chip)) {
    // The chips both LLVM and this function accept, in numeric order.
    std::vector<std::pair<unsigned, std::string>> chips;
    for (const llvm::SubtargetSubTypeKV &cpu : info->getAllProcessorDescriptions()) {
      llvm::SmallVector<llvm::StringRef> parts;
      unsigned version = 0;
      if (spelling.match(cpu.Key, &parts) && !parts[1].getAsInteger(10, version) && version >= 70)
        chips.emplace_back(version, cpu.Key);
    }
    llvm::sort(chips);
    std::string known;
    for (const auto &[version, name] : chips)
      known += (known.empty() ? "" : ", ") + name;
    return llvm::createStringError("arch " + chip + " is not known to LLVM " + LLVM_VERSION_STRING +
                                   "'s NVPTX backend (known: " + known + ")");
  }
  // A known chip whose PTX ISA is newer than the one effectiveFeatures()
  // asks for makes LLVM abort mid-compile ("LLVM ERROR: PTX version 8.6 does
  // not support target 'sm_120'"). The minimum PTX ISA per chip (x10) is
  // NVIDIA's (PTX ISA release notes), as LLVM 22 enforces it; chips missing
  // here (newer than this table) are left to LLVM.
  static const std::pair<unsigned, unsigned> kMinPtx[] = {
      {70, 60}, {72, 61},  {75, 63},  {80, 70},  {86, 71},  {87, 74},  {88, 90}, {89, 78},
      {90, 78}, {100, 86}, {101, 86}, {103, 88}, {110, 90}, {120, 87}, {121, 88}};
  // Features go into a pass pipeline's text and to LLVM: comma-separated
  // +name / -name only (a space or a brace would add options of its own).
  llvm::Regex featureSpelling("^[+-][a-z][a-z0-9]*(,[+-][a-z][a-z0-9]*)*$");
  if (!features.empty() && !featureSpelling.match(features))
    return llvm::createStringError("features must be comma-separated +name or -name PTX "
                                   "features such as +ptx80, got '" +
                                   features + "'");
  unsigned provided = 0;
  // The pieces point into this string: it must outlive them (split of the
  // temporary effectiveFeatures() returns read freed stack memory, found by
  // scripts/sanitize.sh).
  const std::string featureText = effectiveFeatures();
  llvm::SmallVector<llvm::StringRef> features;
  llvm::StringRef(featureText).split(features, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef feature : features) {
    unsigned ptx = 0;
    if (feature.consume_front("+ptx") && !feature.getAsInteger(10, ptx))
      provided = std::max(provided, ptx);
  }
  // sm_90a's architecture-specific features came with PTX ISA 8.0 (sm_90
  // with 7.8).
  const bool specific = llvm::StringRef(chip).ends_with("a");
  for (auto [sm, minimum] : kMinPtx) {
    if (specific && sm == 90)
      minimum = 80;
    if (sm == number && provided && provided < minimum)
      return llvm::createStringError(
          "arch " + chip + " needs PTX ISA " + std::to_string(minimum / 10) + "." +
          std::to_string(minimum % 10) + " or newer, and lossjit emits PTX ISA " +
          std::to_string(provided / 10) + "." + std::to_string(provided % 10) +
          " for it (features '" + effectiveFeatures() + "'): not supported yet");
  }
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
  const TileConfig defaults = TileConfig::forMatmul(tile.matmul);
  std::string select = "target=gpu chip=" + target.chip;
  if (tile.automatic) {
    select += " matmul=auto";
    // The knobs a caller set go over each op's choice, as given.
    const TileConfig::Knobs &o = tile.overrides;
    for (auto [name, value] : {std::pair<const char *, int64_t>{"block-rows", o.blockRows},
                               {"threads", o.threads},
                               {"splits", o.splits},
                               {"stages", o.stages},
                               {"block-cols", o.blockCols},
                               {"block-k", o.blockK},
                               {"grad-cols", o.gradCols},
                               {"tma", o.tma},
                               {"persistent", o.persistent},
                               {"band", o.band},
                               {"cluster", o.cluster}})
      if (value != -1)
        select += " " + std::string(name) + "=" + std::to_string(value);
  }
  // The strategy first: selecting it starts from its own tile.
  else if (tile.matmul != TileConfig().matmul)
    select += " matmul=" + loss::stringifyMatmulKind(tile.matmul).str();
  auto knob = [&](llvm::StringRef name, int64_t value, int64_t fallback) {
    if (value != fallback && !tile.automatic)
      select += " " + name.str() + "=" + std::to_string(value);
  };
  knob("block-rows", tile.blockRows, defaults.blockRows);
  knob("threads", tile.threads, defaults.threads);
  knob("splits", tile.splits, defaults.splits);
  knob("stages", tile.stages, defaults.stages);
  knob("block-cols", tile.blockCols, defaults.blockCols);
  knob("block-k", tile.blockK, defaults.blockK);
  knob("grad-cols", tile.gradCols, defaults.gradCols);
  knob("tma", tile.tma, defaults.tma);
  knob("persistent", tile.persistent, defaults.persistent);
  knob("band", tile.band, defaults.band);
  knob("cluster", tile.cluster, defaults.cluster);
  stages.push_back({"kernels", "builtin.module(loss-select-lowering-config{" + select +
                                   "},loss-lower-to-gpu{chip=" + target.chip +
                                   "},canonicalize,cse)"});
  stages.push_back({"nvvm", "builtin.module(nvvm-attach-target{chip=" + target.chip +
                                " features=" + target.effectiveFeatures() +
                                " O=3},gpu.module(expand-strided-metadata,lower-affine,loss-math-to-nvvm-approx,"
                                "arith-expand,loss-bf16-mma-sync-to-nvvm,convert-nvgpu-to-nvvm,"
                                "convert-scf-to-cf,convert-vector-to-llvm,convert-gpu-to-nvvm,"
                                "convert-nvvm-to-llvm,"
                                "loss-extern-dynamic-shared-memory,"
                                "loss-tensor-map-grid-constant,"
                                "canonicalize,cse),reconcile-unrealized-casts)"});
  stages.push_back({"ptx", "builtin.module(gpu-module-to-binary{format=isa})"});
  return stages;
}

std::vector<Stage> lossjit::cpuStages(const CpuTileConfig &tile, bool f16ExtendInHardware,
                                      int64_t vectorRegisters, bool fmaInHardware) {
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
  std::string options;
  if (f16ExtendInHardware)
    options += " f16-extend-in-hardware=true";
  if (!fmaInHardware)
    options += " expand-f32-fma=true";
  std::string expand = "loss-expand-host-libcalls";
  if (!options.empty())
    expand += "{" + options.substr(1) + "}";
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
