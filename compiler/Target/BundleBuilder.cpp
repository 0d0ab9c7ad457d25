//===- BundleBuilder.cpp --------------------------------------------------===//

#include "compiler/Target/BundleBuilder.h"
#include "compiler/Target/CompilerFingerprint.h"
#include "compiler/Pipeline/Pipelines.h"
#include "runtime/KernelCache.h"

using namespace lossjit;

std::string lossjit::gpuCacheKey(llvm::StringRef canonicalGraph,
                                 const GpuTarget &target,
                                 const TileConfig &tile) {
  runtime::CacheKeyInputs inputs;
  inputs.canonicalIr = canonicalGraph.str();
  inputs.pipeline = joinStages(gpuStages(target, tile));
  inputs.tileConfig = tile.str();
  inputs.arch = target.chip + ":" + target.effectiveFeatures();
  inputs.llvmVersion = LOSSJIT_LLVM_VERSION;
  inputs.lossjitVersion += std::string("+") + compilerFingerprint();
  return runtime::computeCacheKey(inputs);
}

runtime::JsonValue lossjit::tileToJson(llvm::StringRef tile) {
  runtime::JsonValue json = runtime::JsonValue::object();
  llvm::SmallVector<llvm::StringRef> items;
  tile.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    int64_t number = 0;
    if (!value.getAsInteger(10, number))
      json.set(key, number);
    else
      json.set(key, value.str());
  }
  return json;
}

runtime::KernelBundle lossjit::bundleSkeleton(const LaunchPlan &plan,
                                              const std::string &key,
                                              const std::string &irHash) {
  runtime::KernelBundle bundle;
  bundle.key = key;
  bundle.llvmVersion = LOSSJIT_LLVM_VERSION;
  bundle.op = plan.op;
  bundle.irHash = irHash;
  for (const auto &[k, v] : plan.options)
    bundle.options.set(k, v);
  bundle.options.set("entry", plan.entry);
  bundle.tile = tileToJson(plan.tile);
  for (const PlanParam &p : plan.params) {
    runtime::BundleParam param{p.name, "buffer", p.dtype, p.shape, {}};
    // The graph's static extents travel with the bundle: the runtime checks
    // them at every launch (checkDeclaredExtents does on the host).
    for (size_t i = 0; i < plan.entryArgs.size() && i < plan.entryArgExtents.size(); ++i)
      if (plan.entryArgs[i] == p.name &&
          plan.entryArgExtents[i].size() == p.shape.size() &&
          llvm::any_of(plan.entryArgExtents[i], [](int64_t e) { return e >= 0; }))
        param.extents = plan.entryArgExtents[i];
    bundle.params.push_back(std::move(param));
  }
  bundle.dims = plan.dims;
  for (const auto &[k, v] : plan.constants)
    bundle.constants.push_back({k, v});
  bundle.derived = plan.derived;
  bundle.chunk = plan.chunkSymbol;
  bundle.chunkDim = plan.chunkDim;
  for (const PlanWorkspace &w : plan.workspaces)
    bundle.workspaces.push_back({w.name, w.dtype, w.count});
  for (const PlanTensorMap &m : plan.tensorMaps)
    bundle.tensorMaps.push_back({m.name, m.buffer, m.dims,
                                 {static_cast<uint32_t>(m.box[0]), static_cast<uint32_t>(m.box[1])},
                                 static_cast<uint32_t>(m.swizzle)});
  return bundle;
}

runtime::KernelBundle lossjit::makeGpuBundle(const GpuCompiledOp &op,
                                             const std::string &key,
                                             const std::string &irHash) {
  const LaunchPlan &plan = op.plan;
  runtime::KernelBundle bundle = bundleSkeleton(plan, key, irHash);
  bundle.backend = "cuda";
  bundle.arch = op.arch;
  for (auto [k, ptx] : llvm::zip(plan.kernels, op.kernels)) {
    runtime::BundleKernel kernel;
    kernel.name = k.name;
    kernel.file = k.name + "." + op.arch + ".ptx";
    kernel.grid = k.grid;
    for (int i = 0; i < 3; ++i)
      kernel.block[i] = static_cast<uint32_t>(k.block[i]);
    kernel.sharedBytes = static_cast<uint32_t>(k.sharedBytes);
    kernel.args = k.args;
    kernel.perChunk = k.perChunk;
    kernel.cluster = static_cast<uint32_t>(k.cluster);
    kernel.persistent = k.persistent;
    kernel.image = ptx.ptx;
    bundle.kernels.push_back(std::move(kernel));
  }
  return bundle;
}
