//===- LaunchPlan.cpp - Sizes, grids and kernel arguments of a bundle -----===//

#include "runtime/LaunchPlan.h"

#include <algorithm>
#include <limits>

namespace lossjit::runtime {

Expected<LaunchPlan> LaunchPlan::build(const KernelBundle &bundle) {
  if (Error e = bundle.verify())
    return e;
  LaunchPlan plan;
  std::vector<std::string> symbols = bundle.dims;
  plan.dimNames = bundle.dims;
  for (const auto &[name, value] : bundle.constants) {
    symbols.push_back(name);
    plan.constantValues.push_back(value);
  }
  auto symbolIndex = [&](const std::string &name) -> int64_t {
    auto it = std::find(symbols.begin(), symbols.end(), name);
    return it == symbols.end() ? -1 : it - symbols.begin();
  };
  // Each derived formula sees dims, constants and the earlier derived symbols.
  for (const auto &[name, formula] : bundle.derived) {
    Expected<Formula> f = Formula::parse(formula, symbols);
    if (!f)
      return std::move(f.takeError()).withContext("derived symbol '" + name + "'");
    plan.derivedSymbols.push_back(Derived{name, std::move(*f)});
    symbols.push_back(name);
  }
  if (!bundle.chunk.empty()) {
    plan.chunkSymbol = symbolIndex(bundle.chunk);
    plan.chunkRowsDim = symbolIndex(bundle.chunkDim);
    // verify() makes these unreachable (the chunk is a constant or derived
    // symbol, and the chunk dim a dim, which come first in `symbols`).
    if (plan.chunkSymbol < static_cast<int64_t>(bundle.dims.size()))
      return makeError("chunk '" + bundle.chunk +
                       "' names no derived symbol or constant");
    if (plan.chunkRowsDim < 0 ||
        plan.chunkRowsDim >= static_cast<int64_t>(bundle.dims.size()))
      return makeError("chunked bundle has no dim '" + bundle.chunkDim + "'");
  }

  for (const BundleParam &p : bundle.params) {
    Param param;
    param.name = p.name;
    param.dtype = p.dtype;
    param.elementSize = *dtypeSize(p.dtype);
    param.shapeText = "[";
    for (const std::string &entry : p.shape) {
      int64_t index = symbolIndex(entry); // a dim or constant (verify())
      param.shape.push_back(index >= 0 ? ShapeEntry{true, index}
                                       : ShapeEntry{false, std::stoll(entry)});
      param.shapeText += (param.shapeText.size() > 1 ? ", " : "") + entry;
    }
    param.shapeText += "]";
    param.extents = p.extents;
    plan.params.push_back(std::move(param));
  }
  for (const BundleWorkspace &w : bundle.workspaces) {
    Expected<Formula> count = Formula::parse(w.count, symbols);
    if (!count)
      return std::move(count.takeError()).withContext("workspace '" + w.name + "'");
    plan.workspaces.push_back(Workspace{w.name, *dtypeSize(w.dtype), *count});
  }
  for (const BundleTensorMap &t : bundle.tensorMaps) {
    TensorMap map{t.name, 0, false, "", 0, {}, t.box, t.swizzle};
    // verify() found it among the params or the workspaces.
    for (size_t i = 0; i < bundle.workspaces.size(); ++i)
      if (bundle.workspaces[i].name == t.buffer)
        map = {t.name, i, true, bundle.workspaces[i].dtype, 0, {}, t.box, t.swizzle};
    for (size_t i = 0; i < bundle.params.size(); ++i)
      if (bundle.params[i].name == t.buffer)
        map = {t.name, i, false, bundle.params[i].dtype, 0, {}, t.box, t.swizzle};
    map.elementSize = *dtypeSize(map.dtype);
    for (size_t d = 0; d < 2; ++d) {
      Expected<Formula> f = Formula::parse(t.dims[d], symbols);
      if (!f)
        return std::move(f.takeError()).withContext("tensor map '" + t.name + "'");
      map.dims[d] = std::move(*f);
    }
    plan.tensorMaps.push_back(std::move(map));
  }
  for (const BundleKernel &k : bundle.kernels) {
    Kernel kernel;
    kernel.name = k.name;
    kernel.block = k.block;
    kernel.sharedBytes = k.sharedBytes;
    kernel.perChunk = k.perChunk;
    kernel.cluster = k.cluster;
    kernel.persistent = k.persistent;
    for (size_t d = 0; d < 3; ++d) {
      Expected<Formula> g = Formula::parse(k.grid[d], symbols);
      if (!g)
        return std::move(g.takeError()).withContext("kernel '" + k.name + "' grid");
      kernel.grid[d] = std::move(*g);
    }
    kernel.parameterCount = 0;
    for (const std::string &arg : k.args) {
      ArgBinding binding{ArgBinding::Param, 0};
      bool found = false;
      if (k.perChunk && (arg == kChunkBeginArg || arg == kChunkEndArg)) {
        binding = {arg == kChunkBeginArg ? ArgBinding::ChunkBegin
                                         : ArgBinding::ChunkEnd,
                   0};
        found = true;
      }
      if (arg == kTensorMapsReadyArg) {
        binding = {ArgBinding::TensorMapsReady, 0};
        found = true;
      }
      for (size_t i = 0; i < bundle.tensorMaps.size() && !found; ++i)
        if (bundle.tensorMaps[i].name == arg) {
          binding = {ArgBinding::TensorMap, i};
          found = true;
        }
      for (size_t i = 0; i < bundle.params.size() && !found; ++i)
        if (bundle.params[i].name == arg) {
          binding = {ArgBinding::Param, i};
          found = true;
        }
      for (size_t i = 0; i < bundle.workspaces.size() && !found; ++i)
        if (bundle.workspaces[i].name == arg) {
          binding = {ArgBinding::Workspace, i};
          found = true;
        }
      for (size_t i = 0; i < bundle.dims.size() && !found; ++i)
        if (bundle.dims[i] == arg) {
          binding = {ArgBinding::Dim, i};
          found = true;
        }
      for (size_t i = 0; i < bundle.constants.size() && !found; ++i)
        if (bundle.constants[i].first == arg) {
          binding = {ArgBinding::Constant, i};
          found = true;
        }
      for (size_t i = 0; i < bundle.derived.size() && !found; ++i)
        if (bundle.derived[i].first == arg) {
          binding = {ArgBinding::Derived, i};
          found = true;
        }
      if (!found) // verify() makes this unreachable; keep the error anyway.
        return makeError("kernel '" + k.name + "': argument '" + arg +
                         "' names nothing");
      bool isBuffer = binding.kind == ArgBinding::Param ||
                      binding.kind == ArgBinding::Workspace;
      kernel.parameterCount += isBuffer ? 5 : 1;
      kernel.args.push_back(binding);
    }
    plan.kernels.push_back(std::move(kernel));
  }
  return plan;
}

namespace {
/// "3x?" for declared extents [3, -1].
std::string declaredText(const std::vector<int64_t> &extents) {
  std::string text;
  for (size_t i = 0; i < extents.size(); ++i)
    text += (i ? "x" : "") + (extents[i] < 0 ? std::string("?") : std::to_string(extents[i]));
  return text;
}
} // namespace

Expected<ResolvedLaunch>
LaunchPlan::resolve(std::span<const int64_t> dims) const {
  if (dims.size() != dimNames.size()) {
    std::string names;
    for (const std::string &n : dimNames)
      names += (names.empty() ? "" : ", ") + n;
    return makeError("dims: expected " + std::to_string(dimNames.size()) +
                     " values (" + names + "), got " +
                     std::to_string(dims.size()));
  }
  ResolvedLaunch launch;
  launch.symbolValues.assign(dims.begin(), dims.end());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0)
      return makeError("dim " + dimNames[i] + " = " + std::to_string(dims[i]) +
                       ": expected a non-negative integer");
  launch.symbolValues.insert(launch.symbolValues.end(), constantValues.begin(),
                             constantValues.end());
  for (const Derived &d : derivedSymbols) {
    Expected<int64_t> value = d.formula.evaluate(launch.symbolValues);
    if (!value)
      return std::move(value.takeError())
          .withContext("derived symbol '" + d.name + "'");
    launch.symbolValues.push_back(*value);
  }
  if (isChunked()) {
    launch.chunkRows = launch.symbolValues[static_cast<size_t>(chunkRowsDim)];
    launch.chunkSize = std::max<int64_t>(
        1, launch.symbolValues[static_cast<size_t>(chunkSymbol)]);
  }

  for (const Param &p : params) {
    int64_t count = 1;
    for (size_t dim = 0; dim < p.shape.size(); ++dim) {
      const ShapeEntry &s = p.shape[dim];
      int64_t extent = s.isSymbol ? launch.symbolValues[static_cast<size_t>(s.value)]
                                  : s.value;
      if (dim < p.extents.size() && p.extents[dim] >= 0 && extent != p.extents[dim])
        return makeError("param '" + p.name + "' is declared " + declaredText(p.extents) +
                         " by the graph: dimension " + std::to_string(dim) + " of " +
                         p.shapeText + " must be " + std::to_string(p.extents[dim]) +
                         ", the input has " + std::to_string(extent));
      if (__builtin_mul_overflow(count, extent, &count))
        return makeError("param '" + p.name + "': element count of shape " +
                         p.shapeText + " overflows int64");
    }
    // Shape entries are dims (>= 0, checked above) or literals (>= 0,
    // verify()), so count >= 0; its bytes must fit in int64 too, so that no
    // size handed on (memref sizes are int64) can wrap.
    int64_t bytes;
    if (count < 0 || __builtin_mul_overflow(count, static_cast<int64_t>(p.elementSize), &bytes))
      return makeError("param '" + p.name + "': byte size of shape " + p.shapeText +
                       " overflows int64");
    launch.paramElements.push_back(count);
    launch.paramBytes.push_back(static_cast<uint64_t>(bytes));
  }
  for (const Workspace &w : workspaces) {
    Expected<int64_t> count = w.count.evaluate(launch.symbolValues);
    if (!count)
      return std::move(count.takeError()).withContext("workspace '" + w.name + "'");
    if (*count < 0)
      return makeError("workspace '" + w.name + "': count '" +
                       w.count.getText() + "' evaluates to " +
                       std::to_string(*count) + ", expected >= 0");
    int64_t bytes;
    if (__builtin_mul_overflow(*count, static_cast<int64_t>(w.elementSize), &bytes))
      return makeError("workspace '" + w.name + "': byte size of count '" + w.count.getText() +
                       "' = " + std::to_string(*count) + " overflows int64");
    launch.workspaceElements.push_back(*count);
    launch.workspaceBytes.push_back(bytes);
  }
  for (const TensorMap &t : tensorMaps) {
    ResolvedLaunch::TensorMap rt{t.buffer, t.workspace, t.dtype, {0, 0}, 0, t.box, t.swizzle};
    for (size_t d = 0; d < 2; ++d) {
      Expected<int64_t> v = t.dims[d].evaluate(launch.symbolValues);
      if (!v)
        return std::move(v.takeError()).withContext("tensor map '" + t.name + "'");
      if (*v < 0)
        return makeError("tensor map '" + t.name + "': dims[" + std::to_string(d) + "] = '" +
                         t.dims[d].getText() + "' evaluates to " + std::to_string(*v) +
                         ", expected >= 0");
      rt.dims[d] = static_cast<uint64_t>(*v);
    }
    // Rows of dims[0] elements; a product past 2^40 is refused as unencodable.
    if (__builtin_mul_overflow(rt.dims[0], uint64_t(t.elementSize), &rt.rowBytes))
      rt.rowBytes = std::numeric_limits<uint64_t>::max();
    // A map never reaches past its buffer (a manifest could say otherwise).
    const int64_t elements =
        t.workspace ? launch.workspaceElements[t.buffer] : launch.paramElements[t.buffer];
    uint64_t mapped = 0;
    if (__builtin_mul_overflow(rt.dims[0], rt.dims[1], &mapped) ||
        mapped > static_cast<uint64_t>(elements))
      return makeError("tensor map '" + t.name + "': dims " + std::to_string(rt.dims[0]) + " x " +
                       std::to_string(rt.dims[1]) + " reach past its buffer '" +
                       (t.workspace ? workspaces[t.buffer].name : params[t.buffer].name) +
                       "' of " + std::to_string(elements) + " elements");
    launch.tensorMaps.push_back(rt);
  }
  // CUDA's limits on grid dimensions.
  static constexpr int64_t kMaxGrid[3] = {std::numeric_limits<int32_t>::max(),
                                          65535, 65535};
  for (const Kernel &k : kernels) {
    ResolvedLaunch::Kernel rk{{0, 0, 0}, false};
    for (size_t d = 0; d < 3; ++d) {
      Expected<int64_t> g = k.grid[d].evaluate(launch.symbolValues);
      if (!g)
        return std::move(g.takeError()).withContext("kernel '" + k.name + "' grid[" +
                                                    std::to_string(d) + "]");
      if (*g < 0 || *g > kMaxGrid[d])
        return makeError("kernel '" + k.name + "' grid[" + std::to_string(d) +
                         "] = '" + k.grid[d].getText() + "' evaluates to " +
                         std::to_string(*g) + ", expected 0.." +
                         std::to_string(kMaxGrid[d]));
      rk.grid[d] = static_cast<uint32_t>(*g);
      rk.skip = rk.skip || *g == 0;
    }
    // A launch in clusters takes whole clusters: the driver would refuse
    // another grid with a bare CUDA_ERROR_INVALID_CLUSTER_SIZE.
    if (!rk.skip && rk.grid[0] % k.cluster)
      return makeError("kernel '" + k.name + "' grid[0] = '" + k.grid[0].getText() +
                       "' evaluates to " + std::to_string(rk.grid[0]) +
                       ", not a multiple of its cluster of " + std::to_string(k.cluster) +
                       " blocks");
    launch.kernels.push_back(rk);
  }
  return launch;
}

Error LaunchPlan::checkResolved(const ResolvedLaunch &launch) const {
  size_t symbols = dimNames.size() + constantValues.size() + derivedSymbols.size();
  if (launch.paramElements.size() != params.size() || launch.paramBytes.size() != params.size() ||
      launch.workspaceElements.size() != workspaces.size() ||
      launch.workspaceBytes.size() != workspaces.size() ||
      launch.kernels.size() != kernels.size() || launch.symbolValues.size() != symbols ||
      launch.tensorMaps.size() != tensorMaps.size())
    return makeError("the resolved launch does not belong to this plan (" +
                     std::to_string(launch.paramElements.size()) + " params, " +
                     std::to_string(launch.workspaceElements.size()) + " workspaces, " +
                     std::to_string(launch.kernels.size()) + " kernels; the plan has " +
                     std::to_string(params.size()) + ", " + std::to_string(workspaces.size()) +
                     ", " + std::to_string(kernels.size()) + ")");
  return Error::success();
}

Error LaunchPlan::checkBuffers(const ResolvedLaunch &launch, std::span<const int64_t> paramElements,
                               std::span<const uint64_t> workspaceBytes) const {
  if (Error e = checkResolved(launch))
    return e;
  if (paramElements.size() != params.size())
    return makeError("expected " + std::to_string(params.size()) + " param buffers, got " +
                     std::to_string(paramElements.size()));
  if (workspaceBytes.size() != workspaces.size())
    return makeError("expected " + std::to_string(workspaces.size()) + " workspace buffers, got " +
                     std::to_string(workspaceBytes.size()));
  for (size_t i = 0; i < params.size(); ++i)
    if (paramElements[i] >= 0 && paramElements[i] != launch.paramElements[i])
      return makeError("param '" + params[i].name + "': the plan's shape " + params[i].shapeText +
                       " gives " + std::to_string(launch.paramElements[i]) +
                       " elements, but the buffer holds " + std::to_string(paramElements[i]));
  for (size_t i = 0; i < workspaces.size(); ++i)
    if (workspaceBytes[i] < launch.workspaceBytes[i])
      return makeError("workspace '" + workspaces[i].name + "': count '" +
                       workspaces[i].count.getText() + "' needs " +
                       std::to_string(launch.workspaceBytes[i]) +
                       " bytes, but the allocation holds " + std::to_string(workspaceBytes[i]));
  return Error::success();
}

size_t LaunchPlan::parameterCount(size_t kernel) const {
  return kernels[kernel].parameterCount;
}

Error LaunchPlan::packArguments(size_t kernel, const ResolvedLaunch &launch,
                                std::span<const uint64_t> paramAddresses,
                                std::span<const uint64_t> workspaceAddresses,
                                PackedArgs &out, int64_t chunkBegin,
                                int64_t chunkEnd, std::span<const TensorMapBytes> maps,
                                std::span<const uint8_t> encoded) const {
  if (kernel >= kernels.size())
    return makeError("kernel index " + std::to_string(kernel) +
                     " out of range (bundle has " +
                     std::to_string(kernels.size()) + " kernels)");
  if (paramAddresses.size() != params.size())
    return makeError("expected " + std::to_string(params.size()) +
                     " param addresses, got " +
                     std::to_string(paramAddresses.size()));
  if (workspaceAddresses.size() != workspaces.size())
    return makeError("expected " + std::to_string(workspaces.size()) +
                     " workspace addresses, got " +
                     std::to_string(workspaceAddresses.size()));
  if (Error e = checkResolved(launch))
    return e;
  const Kernel &k = kernels[kernel];
  if (k.perChunk &&
      !(0 <= chunkBegin && chunkBegin <= chunkEnd && chunkEnd <= launch.chunkRows))
    return makeError("kernel '" + k.name + "': chunk [" + std::to_string(chunkBegin) + ", " +
                     std::to_string(chunkEnd) + ") is not a range within [0, " +
                     std::to_string(launch.chunkRows) + ") of dim " +
                     dimNames[static_cast<size_t>(chunkRowsDim)]);
  if (!encoded.empty() && (maps.size() != tensorMaps.size() || encoded.size() != tensorMaps.size()))
    return makeError("kernel '" + k.name + "': expected " + std::to_string(tensorMaps.size()) +
                     " tensor maps and encoded flags, got " + std::to_string(maps.size()) +
                     " and " + std::to_string(encoded.size()));
  // This kernel's maps are used when every one of them was encoded.
  bool mapsReady = true;
  for (const ArgBinding &arg : k.args)
    if (arg.kind == ArgBinding::TensorMap)
      mapsReady = mapsReady && !encoded.empty() && encoded[arg.index];
  out.slots.clear();
  out.slots.reserve(k.parameterCount);
  out.mapSlots.clear();
  std::vector<std::pair<bool, size_t>> &order = out.order;
  order.clear();
  order.reserve(k.parameterCount);
  for (const ArgBinding &arg : k.args) {
    if (arg.kind == ArgBinding::TensorMap) {
      order.push_back({true, out.mapSlots.size()});
      out.mapSlots.push_back(mapsReady ? maps[arg.index] : TensorMapBytes{});
      continue;
    }
    const size_t before = out.slots.size();
    switch (arg.kind) {
    case ArgBinding::TensorMap:
      break;
    case ArgBinding::TensorMapsReady:
      out.slots.push_back(mapsReady ? 1 : 0);
      break;
    case ArgBinding::Param:
    case ArgBinding::Workspace: {
      bool isParam = arg.kind == ArgBinding::Param;
      uint64_t address = isParam ? paramAddresses[arg.index]
                                 : workspaceAddresses[arg.index];
      int64_t elements = isParam ? launch.paramElements[arg.index]
                                 : launch.workspaceElements[arg.index];
      // memref<?xT> descriptor: allocated, aligned, offset, size, stride.
      out.slots.push_back(address);
      out.slots.push_back(address);
      out.slots.push_back(0);
      out.slots.push_back(static_cast<uint64_t>(elements));
      out.slots.push_back(1);
      break;
    }
    case ArgBinding::Dim:
      out.slots.push_back(static_cast<uint64_t>(launch.symbolValues[arg.index]));
      break;
    case ArgBinding::Constant:
      out.slots.push_back(static_cast<uint64_t>(constantValues[arg.index]));
      break;
    case ArgBinding::Derived:
      out.slots.push_back(static_cast<uint64_t>(
          launch.symbolValues[dimNames.size() + constantValues.size() + arg.index]));
      break;
    case ArgBinding::ChunkBegin:
      out.slots.push_back(static_cast<uint64_t>(chunkBegin));
      break;
    case ArgBinding::ChunkEnd:
      out.slots.push_back(static_cast<uint64_t>(chunkEnd));
      break;
    }
    for (size_t i = before; i < out.slots.size(); ++i)
      order.push_back({false, i});
  }
  // The vectors are complete: their addresses are stable now.
  out.pointerArray.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    out.pointerArray[i] = order[i].first ? static_cast<void *>(&out.mapSlots[order[i].second])
                                         : static_cast<void *>(&out.slots[order[i].second]);
  return Error::success();
}

std::string tensorMapUnencodable(const ResolvedLaunch::TensorMap &map, uint64_t address) {
  if (address % 16)
    return "the buffer's address is not 16-byte aligned";
  if (map.rowBytes % 16 || map.rowBytes >= (uint64_t(1) << 40))
    return "rows of " + std::to_string(map.rowBytes) +
           " bytes (TMA strides are multiples of 16 below 2^40)";
  for (size_t d = 0; d < 2; ++d)
    if (map.dims[d] < 1 || map.dims[d] >= (uint64_t(1) << 31))
      return "dims[" + std::to_string(d) + "] = " + std::to_string(map.dims[d]) +
             " (TMA coordinates here are in [0, 2^31))";
  return "";
}

std::string LaunchPlan::paramShapeText(size_t i) const {
  return params[i].shapeText;
}

uint32_t LaunchPlan::launchedBlocksX(size_t k, uint32_t gridX, uint64_t resident) const {
  const Kernel &kernel = kernels[k];
  if (!kernel.persistent || resident == 0)
    return gridX;
  const uint64_t wholeClusters = std::max<uint64_t>(resident / kernel.cluster, 1) * kernel.cluster;
  return static_cast<uint32_t>(std::min<uint64_t>(gridX, wholeClusters));
}

std::string LaunchPlan::describeKernel(size_t kernel,
                                       const ResolvedLaunch &launch) const {
  const Kernel &k = kernels[kernel];
  const auto &g = launch.kernels[kernel].grid;
  return k.name + " grid=(" + std::to_string(g[0]) + "," + std::to_string(g[1]) +
         "," + std::to_string(g[2]) + ") block=(" + std::to_string(k.block[0]) +
         "," + std::to_string(k.block[1]) + "," + std::to_string(k.block[2]) +
         ") smem=" + std::to_string(k.sharedBytes) +
         (launch.kernels[kernel].skip ? " (skipped: empty grid)" : "");
}

} // namespace lossjit::runtime
