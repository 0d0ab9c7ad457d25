//===- PlanRunner.cpp - run a whole launch plan on the SIMT interpreter ---===//

#include "testing/simt/PlanRunner.h"

#include "runtime/Formula.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <memory>

using namespace mlir;
using namespace lossjit;
using namespace lossjit::simt;

namespace {

llvm::Expected<int64_t> evaluate(const std::string &formula,
                                 const std::map<std::string, int64_t> &symbols,
                                 const llvm::Twine &what) {
  auto value = runtime::evaluateFormula(formula, symbols);
  if (!value)
    return llvm::createStringError(what + ": " + value.errorMessage());
  return *value;
}

llvm::Expected<ElementType> parseDtype(const std::string &dtype,
                                       const llvm::Twine &what) {
  auto type = parseElementType(dtype);
  if (!type)
    return llvm::createStringError(what + ": unknown dtype '" + dtype + "'");
  return *type;
}

} // namespace

llvm::Error lossjit::simt::runPlanOnSimt(
    ModuleOp kernels, const LaunchPlan &plan,
    const std::map<std::string, SimtHostBuffer> &buffers,
    llvm::ArrayRef<int64_t> dims, const SimtOptions &options) {
  if (dims.size() != plan.dims.size())
    return llvm::createStringError(
        llvm::formatv("plan '{0}' has {1} dims but {2} values were given",
                      plan.entry, plan.dims.size(), dims.size()));
  std::map<std::string, int64_t> symbols(plan.constants.begin(),
                                         plan.constants.end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0)
      return llvm::createStringError(
          llvm::formatv("dim {0} = {1} is negative", plan.dims[i], dims[i]));
    symbols[plan.dims[i]] = dims[i];
  }
  for (const auto &[name, formula] : plan.derived) {
    auto value = evaluate(formula, symbols, "derived symbol '" + name + "'");
    if (!value)
      return value.takeError();
    symbols[name] = *value;
  }

  std::map<std::string, std::unique_ptr<SimtBuffer>> memory;
  for (const PlanParam &param : plan.params) {
    auto it = buffers.find(param.name);
    if (it == buffers.end())
      return llvm::createStringError("no buffer for param '" + param.name +
                                     "'");
    auto type = parseDtype(param.dtype, "param '" + param.name + "'");
    if (!type)
      return type.takeError();
    const SimtHostBuffer &host = it->second;
    if (host.type != *type)
      return llvm::createStringError(llvm::formatv(
          "param '{0}' is {1} but the buffer holds {2}", param.name,
          param.dtype, getElementTypeName(host.type)));
    int64_t count = 1;
    for (const std::string &extent : param.shape) {
      auto value =
          evaluate(extent, symbols, "shape of param '" + param.name + "'");
      if (!value)
        return value.takeError();
      count *= *value;
    }
    if (host.numElements != count)
      return llvm::createStringError(
          llvm::formatv("param '{0}' needs {1} elements but the buffer has {2}",
                        param.name, count, host.numElements));
    if (!host.data && count)
      return llvm::createStringError("param '" + param.name + "' has no data");
    auto buffer =
        std::make_unique<SimtBuffer>(param.name, *type, host.data, count);
    if (param.isOutput)
      buffer->setAllInitialized(false);
    memory[param.name] = std::move(buffer);
  }
  for (const auto &entry : buffers)
    if (!memory.count(entry.first))
      return llvm::createStringError("buffer '" + entry.first +
                                     "' is not a param of plan '" + plan.entry +
                                     "'");
  for (const PlanWorkspace &workspace : plan.workspaces) {
    auto type =
        parseDtype(workspace.dtype, "workspace '" + workspace.name + "'");
    if (!type)
      return type.takeError();
    auto count = evaluate(workspace.count, symbols,
                          "size of workspace '" + workspace.name + "'");
    if (!count)
      return count.takeError();
    if (*count < 0)
      return llvm::createStringError(llvm::formatv(
          "workspace '{0}' has negative size {1}", workspace.name, *count));
    memory[workspace.name] =
        std::make_unique<SimtBuffer>(workspace.name, *type, *count);
  }

  // The plan's tensor maps, as the runtime encodes them: a row-major 2-D
  // param or workspace, each where TMA's rules allow; a kernel with one
  // that could not be encoded gets tensor_maps_ready 0.
  struct BoundMap {
    TensorMapDesc desc;
    SimtBuffer *global;
    bool encoded;
  };
  std::map<std::string, BoundMap> maps;
  for (const PlanTensorMap &m : plan.tensorMaps) {
    auto it = memory.find(m.buffer);
    if (it == memory.end())
      return llvm::createStringError("tensor map '" + m.name + "' names no param or workspace ('" +
                                     m.buffer + "')");
    SimtBuffer &global = *it->second;
    TensorMapDesc desc;
    desc.type = global.getType();
    desc.rank = 2;
    for (int d = 0; d < 2; ++d) {
      auto value = evaluate(m.dims[d], symbols, "tensor map '" + m.name + "'");
      if (!value)
        return value.takeError();
      desc.globalDim[d] = uint64_t(std::max<int64_t>(*value, 0));
      desc.boxDim[d] = uint32_t(m.box[d]);
    }
    desc.globalStrides[0] = desc.globalDim[0] * uint64_t((getBitWidth(desc.type) + 7) / 8);
    desc.swizzle = m.swizzle == 128  ? TmaSwizzle::B128
                   : m.swizzle == 64 ? TmaSwizzle::B64
                   : m.swizzle == 32 ? TmaSwizzle::B32
                                     : TmaSwizzle::None;
    const bool encoded = desc.validate(global.alignment()).empty() &&
                         desc.globalDim[0] * desc.globalDim[1] <= uint64_t(global.size());
    maps[m.name] = {desc, &global, encoded};
  }

  std::vector<std::unique_ptr<SimtKernel>> decodedKernels(plan.kernels.size());
  /// One launch of kernel `k`, with `chunk_begin`/`chunk_end` bound.
  auto launch = [&](size_t k, int64_t chunkBegin,
                    int64_t chunkEnd) -> llvm::Error {
    const PlanKernel &kernel = plan.kernels[k];
    auto context = [&](llvm::Error err) {
      return llvm::createStringError(llvm::formatv(
          "kernel '{0}' (launch {1} of {2}): {3}", kernel.name, k + 1,
          plan.kernels.size(), llvm::toString(std::move(err))));
    };
    std::map<std::string, int64_t> values = symbols;
    values["chunk_begin"] = chunkBegin;
    values["chunk_end"] = chunkEnd;
    auto func = lookupKernel(kernels, kernel.module, kernel.name);
    if (!func)
      return context(func.takeError());
    std::unique_ptr<SimtKernel> &decoded = decodedKernels[k];
    if (!decoded) {
      auto kernel = SimtKernel::decode(*func);
      if (!kernel)
        return context(kernel.takeError());
      decoded = std::move(*kernel);
    }
    std::array<int64_t, 3> grid;
    for (unsigned d = 0; d < 3; ++d) {
      auto value = evaluate(kernel.grid[d], values,
                            llvm::formatv("grid dimension {0}", d).str());
      if (!value)
        return context(value.takeError());
      grid[d] = *value;
    }
    if (grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0)
      return llvm::Error::success(); // nothing to do (CUDA rejects empty grids)
    std::vector<SimtArg> args;
    // This kernel's maps are used when every one of them was encoded.
    bool mapsReady = true;
    for (const std::string &name : kernel.args)
      if (auto map = maps.find(name); map != maps.end())
        mapsReady = mapsReady && map->second.encoded;
    for (const std::string &name : kernel.args) {
      if (auto it = memory.find(name); it != memory.end())
        args.push_back(SimtArg::buffer(*it->second));
      else if (auto map = maps.find(name); map != maps.end())
        args.push_back(mapsReady ? SimtArg::tensorMap(map->second.desc, *map->second.global)
                                 : SimtArg::unencodedTensorMap());
      else if (name == kTensorMapsReadyBinding)
        args.push_back(SimtArg::integer(mapsReady ? 1 : 0));
      else if (auto sym = values.find(name); sym != values.end())
        args.push_back(SimtArg::integer(sym->second));
      else
        return context(llvm::createStringError(
            "argument '" + name + "' is no param, workspace, dim or constant"));
    }
    // The launch gives the dynamic shared memory the plan asks for.
    SimtOptions launchOptions = options;
    launchOptions.dynamicSharedBytes = kernel.sharedBytes;
    if (llvm::Error err = decoded->launch(grid, kernel.block, args, launchOptions))
      return context(std::move(err));
    return llvm::Error::success();
  };

  // Per-chunk kernels run as a group once per chunk of rows, in chunk order
  // (as on the CPU backend); every other kernel once over all rows.
  // (The chunk dim: N, or V for schedules that cut the vocabulary.)
  int64_t rows = symbols.count(plan.chunkDim) ? symbols[plan.chunkDim] : 0;
  for (size_t k = 0; k < plan.kernels.size();) {
    if (!plan.kernels[k].perChunk) {
      if (llvm::Error err = launch(k, 0, rows))
        return err;
      ++k;
      continue;
    }
    size_t groupEnd = k;
    while (groupEnd < plan.kernels.size() && plan.kernels[groupEnd].perChunk)
      ++groupEnd;
    int64_t chunk = std::max<int64_t>(
        1, symbols.count(plan.chunkSymbol) ? symbols[plan.chunkSymbol] : rows);
    for (int64_t begin = 0; begin < rows; begin += chunk)
      for (size_t g = k; g < groupEnd; ++g)
        if (llvm::Error err = launch(g, begin, std::min(rows, begin + chunk)))
          return err;
    k = groupEnd;
  }
  return llvm::Error::success();
}

ElementType lossjit::simt::elementTypeOf(const std::string &dtype) {
  if (dtype == "f16")
    return ElementType::F16;
  if (dtype == "bf16")
    return ElementType::BF16;
  if (dtype == "i32")
    return ElementType::I32;
  if (dtype == "i64")
    return ElementType::I64;
  if (dtype == "f64")
    return ElementType::F64;
  return ElementType::F32;
}
