//===- CpuJit.cpp ---------------------------------------------------------===//

#include "compiler/Target/CpuJit.h"
#include "compiler/Pipeline/Pipelines.h"
#include "compiler/Target/BundleBuilder.h"
#include "compiler/Target/CpuCodegen.h"
#include "compiler/Target/CompilerFingerprint.h"
#include "runtime/Formula.h"
#include "runtime/KernelCache.h"
#include "runtime/Log.h"
#include "runtime/NestingLimit.h"
#include "runtime/Sha256.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <sys/resource.h>
#include <thread>

using namespace mlir;
using namespace lossjit;

int64_t lossjit::dtypeBytes(llvm::StringRef dtype) {
  return llvm::StringSwitch<int64_t>(dtype)
      .Cases({"f16", "bf16"}, 2)
      .Cases({"f32", "i32"}, 4)
      .Cases({"f64", "i64"}, 8)
      .Default(0);
}

CpuCompiledOp::~CpuCompiledOp() = default;

namespace {
std::map<std::string, int64_t> symbolValues(const LaunchPlan &plan, const Dims &dims) {
  std::map<std::string, int64_t> values = {{"N", dims.n}, {"V", dims.v}, {"D", dims.d}};
  if (llvm::is_contained(plan.dims, "T"))
    values["T"] = dims.t;
  for (const auto &[k, v] : plan.constants)
    values[k] = v;
  return values;
}

/// Elements a param holds for these dims (its shape's product).
llvm::Expected<int64_t> expectedCount(const PlanParam &p,
                                      const std::map<std::string, int64_t> &values) {
  int64_t count = 1;
  for (const std::string &dim : p.shape) {
    auto it = values.find(dim);
    int64_t extent = 0;
    if (it != values.end())
      extent = it->second;
    else if (llvm::StringRef(dim).getAsInteger(10, extent))
      return llvm::createStringError("param '" + p.name + "' has unknown dim '" + dim + "'");
    if (extent != 0 && count > INT64_MAX / extent)
      return llvm::createStringError("param '" + p.name + "' is too large");
    count *= extent;
  }
  return count;
}

std::string shapeText(const PlanParam &p) {
  if (p.shape.empty())
    return "1 (a scalar)";
  return llvm::join(p.shape, "*");
}

/// Argument storage for one packed call; deque keeps addresses stable.
struct PackedArgs {
  std::deque<void *> pointers;
  std::deque<int64_t> integers;
  llvm::SmallVector<void *> slots;

  void addBuffer(void *data, int64_t count) {
    pointers.push_back(data);
    slots.push_back(&pointers.back()); // allocated
    slots.push_back(&pointers.back()); // aligned
    integers.push_back(0);
    slots.push_back(&integers.back()); // offset
    integers.push_back(count);
    slots.push_back(&integers.back()); // size
    integers.push_back(1);
    slots.push_back(&integers.back()); // stride
  }
  void addInteger(int64_t v) {
    integers.push_back(v);
    slots.push_back(&integers.back());
  }
};

/// The CPU stages for `target`: what its hardware does exactly (F16C's
/// widening, FMA units) stays LLVM's, and its vector registers size the
/// register tile.
std::vector<Stage> stagesFor(const CpuTileConfig &tile, const CpuTarget &target) {
  return cpuStages(tile, target.hasFeature("f16c"), target.vectorRegisters(tile.vectorWidth),
                   target.hasFmaUnits());
}
} // namespace

llvm::Expected<std::unique_ptr<CpuCompiledOp>>
CpuCompiledOp::compile(ModuleOp module, const CpuTileConfig &tile, const StageSink &sink) {
  auto target = CpuTarget::fromEnvironment();
  if (!target)
    return target.takeError();
  return compile(module, tile, *target, sink);
}

llvm::Expected<std::unique_ptr<CpuCompiledOp>> CpuCompiledOp::compile(ModuleOp module,
                                                                      const CpuTileConfig &tile,
                                                                      const CpuTarget &target,
                                                                      const StageSink &sink) {
  auto timings = runStages(module, stagesFor(tile, target), sink);
  if (!timings)
    return timings.takeError();
  std::string error;
  auto plans = readLaunchPlans(module, error);
  if (failed(plans))
    return llvm::createStringError(error);
  if (plans->size() != 1)
    return llvm::createStringError(
        "the CPU backend compiles one fused function at a time, the module has " +
        std::to_string(plans->size()));
  std::unique_ptr<CpuCompiledOp> op(new CpuCompiledOp());
  op->launchPlan = std::move(plans->front());
  op->stageTimings = std::move(*timings);
  op->hostTarget = target;

  std::string kernelModule = op->launchPlan.kernels.front().module;
  auto nested = module.lookupSymbol<ModuleOp>(kernelModule);
  if (!nested)
    return llvm::createStringError("no kernel module @" + kernelModule);

  auto start = std::chrono::steady_clock::now();
  auto object = emitCpuObject(nested, target);
  if (!object)
    return llvm::createStringError("compiling the host kernels for " + target.cpu +
                                   " failed: " + llvm::toString(object.takeError()));
  auto jit = linkCpuObject(*object);
  if (!jit)
    return llvm::createStringError("linking the host kernels failed: " +
                                   llvm::toString(jit.takeError()));
  op->object = std::move(*object);
  op->linked = std::move(*jit);
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  op->jitTime = took.count();
  return op;
}

llvm::Error CpuCompiledOp::validate(const std::map<std::string, HostBuffer> &buffers,
                                    const Dims &dims) const {
  if (dims.n < 0 || dims.d < 0)
    return llvm::createStringError("N and D must be ≥ 0, got N=" + std::to_string(dims.n) +
                                   " D=" + std::to_string(dims.d));
  if (dims.v < 1)
    return llvm::createStringError("V (vocabulary size) must be ≥ 1, got " +
                                   std::to_string(dims.v));
  auto values = symbolValues(launchPlan, dims);
  // Before the buffer sizes: "declared 3x4, the input has 5" says more than
  // an element count would.
  if (llvm::Error err = checkDeclaredExtents(launchPlan, values))
    return err;
  std::vector<std::string> expected;
  for (const PlanParam &p : launchPlan.params) {
    expected.push_back(p.name);
    auto it = buffers.find(p.name);
    if (it == buffers.end())
      return llvm::createStringError("missing buffer '" + p.name + "' (" + p.dtype + ", " +
                                     shapeText(p) + " elements)");
    const HostBuffer &b = it->second;
    if (b.dtype != p.dtype)
      return llvm::createStringError("buffer '" + p.name + "' has dtype " + b.dtype +
                                     ", expected " + p.dtype);
    auto count = expectedCount(p, values);
    if (!count)
      return count.takeError();
    if (b.count != *count)
      return llvm::createStringError("buffer '" + p.name + "' has " + std::to_string(b.count) +
                                     " elements, expected " + shapeText(p) + " = " +
                                     std::to_string(*count));
    if (!b.data && *count > 0)
      return llvm::createStringError("buffer '" + p.name + "' is null");
  }
  for (const auto &[name, _] : buffers)
    if (!llvm::is_contained(expected, name))
      return llvm::createStringError("unknown buffer '" + name + "' (expected " +
                                     llvm::join(expected, ", ") + ")");
  return llvm::Error::success();
}

llvm::Error CpuCompiledOp::run(const std::map<std::string, HostBuffer> &buffers, const Dims &dims,
                               unsigned threads) const {
  if (llvm::Error err = validate(buffers, dims))
    return err;
  auto values = symbolValues(launchPlan, dims);
  for (const auto &[name, formula] : launchPlan.derived) {
    auto value = runtime::evaluateFormula(formula, values);
    if (!value)
      return llvm::createStringError("derived symbol '" + name + "': " + value.errorMessage());
    values[name] = *value;
  }
  std::map<std::string, HostBuffer> all = buffers;
  std::deque<std::vector<char>> workspaces;
  for (const PlanWorkspace &w : launchPlan.workspaces) {
    auto count = runtime::evaluateFormula(w.count, values);
    if (!count)
      return llvm::createStringError("workspace '" + w.name + "': " + count.errorMessage());
    workspaces.emplace_back(static_cast<size_t>(*count * dtypeBytes(w.dtype)));
    all[w.name] = {workspaces.back().data(), w.dtype, *count};
  }

  /// One call of kernel `k` with the range-style arguments bound.
  auto call = [&](const PlanKernel &k,
                  const std::map<std::string, int64_t> &ranges) -> llvm::Error {
    PackedArgs args;
    for (const std::string &name : k.args) {
      if (auto b = all.find(name); b != all.end())
        args.addBuffer(b->second.data, b->second.count);
      else if (auto r = ranges.find(name); r != ranges.end())
        args.addInteger(r->second);
      else if (auto v = values.find(name); v != values.end())
        args.addInteger(v->second);
      else
        return llvm::createStringError("kernel " + k.name + " names unknown argument '" + name +
                                       "'");
    }
    return invoke(k.name, args.slots);
  };

  unsigned workers = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  /// Runs `k` over [begin, end) of its parallel dimension, split between
  /// threads. Every output element is owned by one call, so the split never
  /// changes a bit of the result.
  auto runSplit = [&](const PlanKernel &k, std::map<std::string, int64_t> ranges,
                      llvm::StringRef beginName, llvm::StringRef endName, int64_t begin,
                      int64_t end) -> llvm::Error {
    int64_t total = end - begin;
    unsigned parts = total < 16 ? 1u : workers;
    int64_t chunk = (total + parts - 1) / std::max(1u, parts);
    std::vector<std::thread> pool;
    std::vector<llvm::Error> errors;
    std::mutex errorsMutex;
    for (unsigned t = 0; t < parts; ++t) {
      int64_t b = std::min(end, begin + t * chunk), e = std::min(end, b + chunk);
      if (b >= e && !(parts == 1))
        continue;
      std::map<std::string, int64_t> mine = ranges;
      mine[beginName.str()] = b;
      mine[endName.str()] = e;
      auto work = [&, mine] {
        if (llvm::Error err = call(k, mine)) {
          std::lock_guard<std::mutex> lock(errorsMutex);
          errors.push_back(std::move(err));
        }
      };
      if (parts == 1)
        work();
      else
        pool.emplace_back(work);
    }
    for (std::thread &t : pool)
      t.join();
    if (errors.empty())
      return llvm::Error::success();
    llvm::Error first = std::move(errors.front());
    for (size_t i = 1; i < errors.size(); ++i)
      llvm::consumeError(std::move(errors[i]));
    return first;
  };

  // Chunks cut the rows (chunk_begin/chunk_end are rows: row-parallel
  // kernels split the chunk) or the vocabulary (they are columns: vocab-
  // parallel kernels split the chunk, row-parallel ones take every row).
  const bool vocabChunks = launchPlan.chunkDim == "V";
  auto runKernelUntimed = [&](const PlanKernel &k, int64_t chunkBegin,
                              int64_t chunkEnd) -> llvm::Error {
    std::map<std::string, int64_t> ranges = {{"chunk_begin", chunkBegin}, {"chunk_end", chunkEnd}};
    bool chunked = k.perChunk;
    if (k.parallel == "rows")
      return chunked && !vocabChunks
                 ? runSplit(k, ranges, "row_begin", "row_end", chunkBegin, chunkEnd)
                 : runSplit(k, ranges, "row_begin", "row_end", 0, dims.n);
    if (k.parallel == "vocab")
      return chunked && vocabChunks
                 ? runSplit(k, ranges, "col_begin", "col_end", chunkBegin, chunkEnd)
                 : runSplit(k, ranges, "col_begin", "col_end", 0, dims.v);
    return call(k, ranges);
  };
  // Seconds per kernel, reported at LOSSJIT_LOG=debug (where the time of a
  // call goes, without a profiler): wall time, and the CPU time of every
  // thread of the process, which a machine shared with other work inflates
  // far less.
  const bool profile = runtime::isLogEnabled(runtime::LogLevel::Debug);
  std::map<std::string, std::pair<double, double>> seconds;
  auto cpuSeconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  auto runKernel = [&](const PlanKernel &k, int64_t chunkBegin, int64_t chunkEnd) -> llvm::Error {
    auto start = std::chrono::steady_clock::now();
    double cpuStart = profile ? cpuSeconds() : 0.0;
    auto timed = [&](llvm::Error err) {
      if (profile) {
        seconds[k.name].first +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        seconds[k.name].second += cpuSeconds() - cpuStart;
      }
      return err;
    };
    return timed(runKernelUntimed(k, chunkBegin, chunkEnd));
  };

  const auto &kernels = launchPlan.kernels;
  for (size_t i = 0; i < kernels.size();) {
    if (!kernels[i].perChunk) {
      if (llvm::Error err = runKernel(kernels[i], 0, dims.n))
        return err;
      ++i;
      continue;
    }
    size_t groupEnd = i;
    while (groupEnd < kernels.size() && kernels[groupEnd].perChunk)
      ++groupEnd;
    int64_t step = std::max<int64_t>(1, values[launchPlan.chunkSymbol]);
    int64_t extent = vocabChunks ? dims.v : dims.n;
    // At least one (possibly empty) chunk: the first chunk is where the
    // kernels zero their accumulators, so N = 0 still writes zero gradients.
    for (int64_t begin = 0; begin < extent || begin == 0; begin += step)
      for (size_t k = i; k < groupEnd; ++k)
        if (llvm::Error err = runKernel(kernels[k], begin, std::min(extent, begin + step)))
          return err;
    i = groupEnd;
  }
  for (const auto &[name, t] : seconds)
    runtime::logDebug("kernel " + name + ": " + std::to_string(t.first) + " s (cpu " +
                      std::to_string(t.second) + " s)");
  return llvm::Error::success();
}

llvm::Error CpuCompiledOp::invoke(llvm::StringRef name, llvm::MutableArrayRef<void *> args) const {
  // The packed entry point CpuCodegen adds for every kernel: void(void**).
  auto symbol = linked->lookup(("_mlir_" + name).str());
  if (!symbol)
    return symbol.takeError();
  symbol->toPtr<void (*)(void **)>()(args.data());
  return llvm::Error::success();
}

namespace {
std::string printed(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

} // namespace

llvm::Expected<std::unique_ptr<CpuCompiledOp>>
CpuCompiledOp::compileCached(mlir::ModuleOp module, const CpuTileConfig &tile,
                             runtime::KernelCache &cache, const StageSink &sink) {
  auto target = CpuTarget::fromEnvironment();
  if (!target)
    return target.takeError();
  return compileCached(module, tile, *target, cache, sink);
}

llvm::Expected<std::unique_ptr<CpuCompiledOp>>
CpuCompiledOp::compileCached(mlir::ModuleOp module, const CpuTileConfig &tile,
                             const CpuTarget &target, runtime::KernelCache &cache,
                             const StageSink &sink) {
  runtime::CacheKeyInputs inputs;
  inputs.canonicalIr = printed(module);
  inputs.pipeline = joinStages(stagesFor(tile, target));
  inputs.tileConfig = tile.str();
  inputs.arch = "host:" + target.key();
  inputs.llvmVersion = LOSSJIT_LLVM_VERSION;
  inputs.lossjitVersion += std::string("+") + compilerFingerprint();
  std::string key = runtime::computeCacheKey(inputs);
  std::string irHash = runtime::sha256Hex(inputs.canonicalIr);

  /// Rebuilds the op from a cached bundle: the plan from its text, the
  /// object linked and every kernel found in it. Anything short of that is
  /// an unusable entry (the cache then recompiles and replaces it).
  using Loaded = llvm::Expected<std::unique_ptr<CpuCompiledOp>>;
  auto load = [&](const runtime::KernelBundle &b) -> Loaded {
    auto fail = [&](const std::string &what) {
      return llvm::createStringError("CPU cache entry " + key + ": " + what);
    };
    if (b.backend != "cpu" || b.kernels.empty())
      return fail("not a CPU bundle with kernels");
    const runtime::JsonValue *hostTarget = b.options.find("host_target");
    if (!hostTarget || !hostTarget->isString() || hostTarget->getString() != target.key())
      return fail("built for another host target than " + target.key());
    const runtime::JsonValue *planText = b.options.find("launch_plan");
    if (!planText || !planText->isString())
      return fail("has no launch plan");
    // MLIR's attribute parser recurses per nesting level: bound it first (a
    // plan nests 4 deep).
    if (runtime::Error e = runtime::checkNesting(planText->getString(), 64, "launch plan"))
      return fail(e.message());
    // The parser's diagnostic goes into the error (escaped: it quotes the
    // entry's text), not onto stderr.
    std::string diagnostic;
    mlir::DictionaryAttr attr;
    {
      mlir::ScopedDiagnosticHandler capture(module.getContext(), [&](mlir::Diagnostic &d) {
        if (diagnostic.empty())
          diagnostic = d.str();
        return mlir::success();
      });
      attr = llvm::dyn_cast_or_null<mlir::DictionaryAttr>(
          mlir::parseAttribute(planText->getString(), module.getContext()));
    }
    if (!attr)
      return fail("has a malformed launch plan" +
                  (diagnostic.empty() ? "" : " (" + runtime::printable(diagnostic) + ")"));
    std::string error;
    auto plan = LaunchPlan::fromAttr(attr, error);
    if (mlir::failed(plan))
      return fail(error);
    // The plan must describe the bundle's kernels, and every formula must
    // parse over the plan's symbols (so no garbage reaches run()).
    if (plan->kernels.size() != b.kernels.size())
      return fail("the plan has " + std::to_string(plan->kernels.size()) + " kernels, the bundle " +
                  std::to_string(b.kernels.size()));
    std::vector<std::string> symbols = plan->dims;
    for (const auto &[name, value] : plan->constants)
      symbols.push_back(name);
    for (const auto &[name, formula] : plan->derived) {
      if (auto f = runtime::Formula::parse(formula, symbols); !f)
        return fail("derived symbol '" + name + "': " + f.errorMessage());
      symbols.push_back(name);
    }
    for (const PlanWorkspace &w : plan->workspaces) {
      if (dtypeBytes(w.dtype) == 0)
        return fail("workspace '" + w.name + "' has unknown dtype '" + w.dtype + "'");
      if (auto f = runtime::Formula::parse(w.count, symbols); !f)
        return fail("workspace '" + w.name + "': " + f.errorMessage());
    }
    for (const PlanParam &p : plan->params)
      if (dtypeBytes(p.dtype) == 0)
        return fail("param '" + p.name + "' has unknown dtype '" + p.dtype + "'");
    auto start = std::chrono::steady_clock::now();
    auto jit = linkCpuObject(b.kernels.front().image);
    if (!jit)
      return fail("cannot link its object: " + llvm::toString(jit.takeError()));
    for (size_t k = 0; k < plan->kernels.size(); ++k) {
      if (plan->kernels[k].name != b.kernels[k].name)
        return fail("kernel " + std::to_string(k) + " is '" + b.kernels[k].name +
                    "' in the bundle and '" + plan->kernels[k].name + "' in the plan");
      if (auto symbol = (*jit)->lookup("_mlir_" + plan->kernels[k].name); !symbol)
        return fail("its object lacks kernel '" + plan->kernels[k].name +
                    "': " + llvm::toString(symbol.takeError()));
    }
    std::unique_ptr<CpuCompiledOp> op(new CpuCompiledOp());
    op->launchPlan = std::move(*plan);
    op->linked = std::move(*jit);
    op->object = b.kernels.front().image;
    op->hostTarget = target;
    op->cachedObject = true;
    op->jitTime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return op;
  };

  std::unique_ptr<CpuCompiledOp> fresh, loaded;
  runtime::CacheLookup lookup;
  // The key was computed from this IR: an entry for other IR (copied under
  // this key) is rejected by its ir_hash.
  lookup.irHash = irHash;
  lookup.check = [&](const runtime::KernelBundle &b) -> runtime::Error {
    auto op = load(b);
    if (!op)
      return runtime::makeError(llvm::toString(op.takeError()));
    loaded = std::move(*op);
    return runtime::Error::success();
  };
  auto bundle = cache.getOrCompile(
      key,
      [&]() -> runtime::Expected<runtime::KernelBundle> {
        auto op = compile(module, tile, target, sink);
        if (!op)
          return runtime::makeError(llvm::toString(op.takeError()));
        const LaunchPlan &plan = (*op)->plan();
        runtime::KernelBundle b = bundleSkeleton(plan, key, irHash);
        b.backend = "cpu";
        b.arch = "host";
        b.options.set("host_cpu", target.cpu);
        b.options.set("host_target", target.key());
        // The whole plan (row/vocab parallelism, chunks, entry roles) as MLIR
        // attribute text, so a hit rebuilds exactly what compile() had.
        {
          std::string text;
          llvm::raw_string_ostream os(text);
          plan.toAttr(module.getContext()).print(os);
          b.options.set("launch_plan", text);
        }
        for (const PlanKernel &k : plan.kernels) {
          runtime::BundleKernel bk;
          bk.name = k.name;
          bk.file = "kernels.host.o";
          // Host kernels take row/vocab ranges the bundle format has no names
          // for; the launch plan above carries the arguments.
          bk.perChunk = k.perChunk;
          bk.image = (*op)->object;
          b.kernels.push_back(std::move(bk));
        }
        fresh = std::move(*op);
        return b;
      },
      lookup);
  if (!bundle)
    return llvm::createStringError(bundle.errorMessage());
  if (fresh)
    return fresh;
  if (loaded)
    return loaded;
  // A memory hit: this process compiled or checked the bundle already.
  return load(**bundle);
}
