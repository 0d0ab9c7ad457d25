//===- lossjit-runner.cpp - run a loss graph on the CPU backend -----------===//
//
//   lossjit-runner GRAPH.mlir a.npy b.npy c.npy -o PREFIX
//   lossjit-runner --preset linear-cross-entropy x.npy w.npy y.npy [b.npy] -o PREFIX
//   lossjit-runner --preset linear-cross-entropy --random 64,32000,1024 --check
//
// Result i goes to PREFIX<i>.npy: 0 = loss (0-d, or [N] for reduction=none),
// 1 = lse [N] f32.
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "runtime/KernelCache.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/Reference.h"
#include "testing/simt/PlanRunner.h"
#include "tools/support/Npy.h"
#include "tools/support/ToolInput.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>

using namespace mlir;
using namespace lossjit;
namespace cl = llvm::cl;

static cl::list<std::string> positional(cl::Positional,
                                        cl::desc("[GRAPH.mlir] inputs.npy..."));
static cl::opt<std::string> outputPrefix("o", cl::desc("write result i to PREFIX<i>.npy"),
                                         cl::value_desc("PREFIX"));
static cl::opt<std::string> preset("preset",
                                   cl::desc("built-in graph instead of a file: linear-cross-entropy"));
static cl::opt<int64_t> ignoreIndex("ignore-index", cl::desc("preset: ignored label"),
                                    cl::init(-100));
static cl::opt<std::string> reduction("reduction", cl::desc("preset: mean|sum|none"),
                                      cl::init("mean"));
static cl::opt<std::string> backend(
    "backend",
    cl::desc("cpu (default: JIT-compiled host kernels) or simt (the GPU kernels, "
             "before NVVM lowering, on the SIMT interpreter; for small shapes)"),
    cl::init("cpu"));
static cl::opt<std::string>
    tileText("tile",
             cl::desc("simt: GPU tile, e.g. block_rows=2,threads=32,splits=3 "
                      "(default: SIMT's own tile)"),
             cl::init("matmul=simt"));
static cl::opt<std::string> dtypeOpt(
    "dtype", cl::desc("storage type: f16|bf16|f32 (f32 .npy data is rounded to it; "
                      "default: the dtype of x, or f16 with --random)"),
    cl::init(""));
static cl::opt<std::string> randomShape(
    "random", cl::desc("N,V,D: generate random inputs instead of reading .npy files"));
static cl::opt<uint64_t> seed("seed", cl::desc("--random seed"), cl::init(1));
static cl::opt<bool> withBias("bias", cl::desc("--random: add a bias"), cl::init(false));
static cl::opt<double> ignoredFraction("ignored-fraction",
                                       cl::desc("--random: share of ignored rows"),
                                       cl::init(0.0));
static cl::opt<double> logitScale("random-logit-size", cl::desc("--random: typical |logit| of the generated inputs"),
                                  cl::init(4.0));
static cl::opt<bool> check("check", cl::desc("compare with the fp64 reference; exit 1 "
                                             "if a relative error exceeds --tolerance"));
static cl::opt<double> tolerance("tolerance", cl::init(1e-4));
static cl::opt<int64_t>
    hostThreads("host-threads",
                cl::desc("host threads, 1 to 1024 (default: every hardware thread)"), cl::init(0));

/// More threads than this only add scheduling overhead (and a system that
/// refuses them ends the run with an uncaught std::system_error).
constexpr int64_t kMaxHostThreads = 1024;
/// What CpuCompiledOp::run() gets: 0 = every hardware thread.
static unsigned threads = 0;

namespace {
int fail(const llvm::Twine &message) {
  llvm::errs() << "lossjit-runner: error: " << message << "\n";
  return 1;
}

double ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

/// Rounds f32 data to bf16/f16 when the graph stores that type.
llvm::Error convertStorage(NpyArray &array, const std::string &want,
                           const std::string &name) {
  if (array.dtype == want)
    return llvm::Error::success();
  if (array.dtype == "f32" && (want == "bf16" || want == "f16")) {
    std::vector<char> out(array.count() * 2);
    const float *in = static_cast<const float *>(array.data());
    auto *dst = reinterpret_cast<uint16_t *>(out.data());
    for (int64_t i = 0; i < array.count(); ++i)
      dst[i] = want == "f16" ? floatToHalf(in[i]) : floatToBfloat16(in[i]);
    array.bytes = std::move(out);
    array.dtype = want;
    return llvm::Error::success();
  }
  return llvm::createStringError("input '" + name + "' has dtype " + array.dtype +
                                 ", the graph expects " + want);
}

NpyArray fromRaw(const void *data, int64_t bytes, std::string dtype,
                 std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = std::move(dtype);
  a.shape = std::move(shape);
  a.bytes.assign(static_cast<const char *>(data), static_cast<const char *>(data) + bytes);
  return a;
}

/// A compiled op of either backend: its plan and how to run it.
struct Compiled {
  LaunchPlan plan;
  std::vector<StageTiming> timings;
  double jitSeconds = 0;
  bool fromCache = false;
  std::function<llvm::Error(const std::map<std::string, HostBuffer> &, const Dims &)> run;
  std::unique_ptr<CpuCompiledOp> cpu;
};

llvm::Expected<simt::ElementType> simtType(llvm::StringRef dtype) {
  if (dtype == "f16")
    return simt::ElementType::F16;
  if (dtype == "bf16")
    return simt::ElementType::BF16;
  if (dtype == "f32")
    return simt::ElementType::F32;
  if (dtype == "i32")
    return simt::ElementType::I32;
  if (dtype == "i64")
    return simt::ElementType::I64;
  return llvm::createStringError("no interpreter type for dtype " + dtype.str());
}

/// Compiles `module` for --backend: cpu JIT-compiles host kernels; simt
/// stops the GPU pipeline after the kernel builders and interprets the
/// gpu.func kernels thread by thread.
llvm::Expected<Compiled> compileFor(ModuleOp module) {
  Compiled c;
  if (backend == "cpu") {
    // Through the kernel cache: a second run (or process) links the cached
    // object instead of compiling (LOSSJIT_CACHE_DIR, LOSSJIT_CACHE_DISABLE).
    auto op = CpuCompiledOp::compileCached(module, CpuTileConfig{},
                                           runtime::KernelCache::global(),
                                           environmentDumpSink());
    if (!op)
      return op.takeError();
    c.plan = (*op)->plan();
    c.timings = (*op)->timings();
    c.jitSeconds = (*op)->jitSeconds();
    c.fromCache = (*op)->fromCache();
    c.cpu = std::move(*op);
    CpuCompiledOp *cpu = c.cpu.get();
    c.run = [cpu](const std::map<std::string, HostBuffer> &b, const Dims &d) {
      return cpu->run(b, d, threads);
    };
    return c;
  }
  auto tile = TileConfig::parse(tileText);
  if (!tile)
    return tile.takeError();
  std::vector<Stage> stages = gpuStages(GpuTarget{}, *tile);
  while (!stages.empty() && stages.back().name != "kernels")
    stages.pop_back();
  auto timings = runStages(module, stages, environmentDumpSink());
  if (!timings)
    return timings.takeError();
  c.timings = std::move(*timings);
  std::string error;
  auto plans = readLaunchPlans(module, error);
  if (mlir::failed(plans))
    return llvm::createStringError(error);
  if (plans->size() != 1)
    return llvm::createStringError("expected one lowered function");
  c.plan = plans->front();
  LaunchPlan plan = c.plan;
  c.run = [module, plan](const std::map<std::string, HostBuffer> &b,
                         const Dims &d) -> llvm::Error {
    // What CpuCompiledOp::validate checks on the CPU backend.
    std::map<std::string, int64_t> symbols(plan.constants.begin(), plan.constants.end());
    symbols.insert({{"N", d.n}, {"V", d.v}, {"D", d.d}});
    if (llvm::Error err = checkDeclaredExtents(plan, symbols))
      return err;
    std::map<std::string, simt::SimtHostBuffer> buffers;
    for (const auto &[name, hb] : b) {
      auto type = simtType(hb.dtype);
      if (!type)
        return type.takeError();
      buffers[name] = {hb.data, *type, hb.count};
    }
    return simt::runPlanOnSimt(module, plan, buffers, {d.n, d.v, d.d});
  };
  return c;
}

double relErr(double got, double ref) {
  if (std::isnan(ref))
    return std::isnan(got) ? 0.0 : INFINITY;
  return std::fabs(got - ref) / std::max(std::fabs(ref), 1e-6);
}

/// Bytes --random allocates for N, V, D: per element of x and w an f32 copy,
/// a 16-bit copy and the runner's own copy (at most 8 bytes together), per
/// row the labels (i64, i32 and a copy) and the two f32 results. Fails on
/// overflow.
bool randomInputBytes(int64_t n, int64_t v, int64_t d, uint64_t &bytes) {
  uint64_t xd, vd, perElement, rows;
  return !__builtin_mul_overflow(static_cast<uint64_t>(n), static_cast<uint64_t>(d), &xd) &&
         !__builtin_mul_overflow(static_cast<uint64_t>(v), static_cast<uint64_t>(d), &vd) &&
         !__builtin_add_overflow(xd, vd, &perElement) &&
         !__builtin_add_overflow(perElement, static_cast<uint64_t>(v), &perElement) &&
         !__builtin_mul_overflow(perElement, uint64_t(8), &bytes) &&
         !__builtin_mul_overflow(static_cast<uint64_t>(n), uint64_t(28), &rows) &&
         !__builtin_add_overflow(bytes, rows, &bytes);
}

int runMain(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "lossjit CPU-backend runner\n");
  if (hostThreads.getNumOccurrences()) {
    if (hostThreads < 1 || hostThreads > kMaxHostThreads)
      return fail("--host-threads must be between 1 and " + llvm::Twine(kMaxHostThreads) +
                  ", got " + llvm::Twine(hostThreads.getValue()));
    threads = static_cast<unsigned>(hostThreads);
  }
  if (backend != "cpu" && backend != "simt")
    return fail("--backend must be 'cpu' or 'simt', got '" + backend + "'");
  if (!preset.empty() && preset != "linear-cross-entropy")
    return fail("--preset must be 'linear-cross-entropy', got '" + preset + "'");

  std::vector<std::string> args(positional.begin(), positional.end());
  std::string graphFile;
  if (preset.empty()) {
    if (args.empty() || !llvm::StringRef(args[0]).ends_with(".mlir"))
      return fail("give a GRAPH.mlir file or --preset linear-cross-entropy");
    graphFile = args[0];
    args.erase(args.begin());
  }

  // Inputs in role order x, w, labels[, bias] (graph files map by entry_args).
  std::vector<NpyArray> inputs;
  RandomLceInputs random;
  if (!randomShape.empty()) {
    if (!graphFile.empty())
      return fail("--random works with --preset only");
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(randomShape).split(parts, ',');
    RandomLceOptions o;
    if (parts.size() != 3 || parts[0].getAsInteger(10, o.n) ||
        parts[1].getAsInteger(10, o.v) || parts[2].getAsInteger(10, o.d) || o.n < 1 ||
        o.v < 1 || o.d < 1)
      return fail("--random expects N,V,D (positive integers), got '" + randomShape + "'");
    o.dtype = dtypeOpt.empty() ? "f16" : dtypeOpt.getValue();
    o.reduction = reduction;
    o.bias = withBias;
    o.ignoreIndex = ignoreIndex;
    o.ignoredFraction = ignoredFraction;
    o.logitScale = logitScale;
    o.seed = seed;
    if (o.dtype != "f16" && o.dtype != "bf16" && o.dtype != "f32")
      return fail("--dtype must be f16, bf16 or f32, got '" + o.dtype + "'");
    // Checked before allocating: too much for this machine is an error, not
    // LLVM's out-of-memory abort or an uncaught std::length_error.
    uint64_t bytes = 0;
    if (!randomInputBytes(o.n, o.v, o.d, bytes))
      return fail("--random " + randomShape + ": the inputs' size overflows 64 bits");
    if (llvm::Error err = checkHostMemory(bytes, "--random " + randomShape + ": the inputs"))
      return fail(llvm::toString(std::move(err)));
    makeRandomLceInputs(o, random);
    const LceProblem &p = random.problem;
    int64_t es = o.dtype == "f32" ? 4 : 2;
    inputs.push_back(fromRaw(p.x, p.n * p.d * es, o.dtype, {p.n, p.d}));
    inputs.push_back(fromRaw(p.w, p.v * p.d * es, o.dtype, {p.v, p.d}));
    inputs.push_back(fromRaw(p.labels, p.n * 8, "i64", {p.n}));
    if (o.bias)
      inputs.push_back(fromRaw(p.bias, p.v * es, o.dtype, {p.v}));
  } else {
    for (const std::string &path : args) {
      auto a = readNpy(path);
      if (!a)
        return fail(llvm::toString(a.takeError()));
      inputs.push_back(std::move(*a));
    }
  }

  DialectRegistry registry;
  registerLossJITDialects(registry);
  MLIRContext context(registry);
  OwningOpRef<ModuleOp> module;
  if (!graphFile.empty()) {
    // Bounded and nesting-checked before MLIR's recursive parser sees it.
    auto input = readGraphInput(graphFile);
    if (!input)
      return fail(llvm::toString(input.takeError()));
    llvm::SourceMgr sources;
    sources.AddNewSourceBuffer(std::move(*input), llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sources, ParserConfig(&context));
    if (!module)
      return fail("cannot parse graph '" + graphFile + "'");
  } else {
    if (inputs.size() != 3 && inputs.size() != 4)
      return fail("--preset linear-cross-entropy expects x.npy w.npy labels.npy "
                  "[bias.npy], got " + llvm::Twine(inputs.size()) + " inputs");
    LceGraphOptions o;
    o.dtype = dtypeOpt.empty() ? inputs[0].dtype : dtypeOpt.getValue();
    o.labelType = inputs[2].dtype;
    o.bias = inputs.size() == 4;
    o.ignoreIndex = ignoreIndex;
    o.reduction = reduction;
    auto built = buildLinearCrossEntropyGraph(context, o);
    if (!built)
      return fail(llvm::toString(built.takeError()));
    module = std::move(*built);
  }

  auto compileStart = std::chrono::steady_clock::now();
  auto compiled = compileFor(*module);
  if (!compiled)
    return fail(llvm::toString(compiled.takeError()));
  double compileMs = ms(compileStart);
  const LaunchPlan &plan = compiled->plan;
  if (plan.options.count("pass") && plan.options.at("pass") != "forward")
    return fail("lossjit-runner runs forward graphs; this function computes '" +
                plan.options.at("pass") + "'");

  // Bind inputs to params.
  std::vector<std::string> roles = plan.entryArgs;
  if (graphFile.empty())
    roles = {"x", "w", "labels", "bias"};
  if (inputs.size() > roles.size() ||
      (graphFile.size() && inputs.size() != roles.size()))
    return fail("the graph takes " + llvm::Twine(roles.size()) + " inputs, got " +
                llvm::Twine(inputs.size()));
  std::map<std::string, NpyArray *> byRole;
  for (size_t i = 0; i < inputs.size(); ++i)
    byRole[roles[i]] = &inputs[i];
  for (const char *needed : {"x", "w", "labels"})
    if (!byRole.count(needed))
      return fail(llvm::Twine("no input feeds '") + needed + "'");
  NpyArray &x = *byRole["x"], &w = *byRole["w"], &labels = *byRole["labels"];
  if (x.shape.size() != 2 || w.shape.size() != 2 || labels.shape.size() != 1)
    return fail("x must be [N,D], w [V,D] and labels [N]; got ranks " +
                llvm::Twine(x.shape.size()) + ", " + llvm::Twine(w.shape.size()) +
                ", " + llvm::Twine(labels.shape.size()));
  Dims dims{x.shape[0], w.shape[0], x.shape[1]};
  if (w.shape[1] != dims.d)
    return fail("x has D=" + llvm::Twine(dims.d) + " but w has D=" + llvm::Twine(w.shape[1]));
  if (labels.shape[0] != dims.n)
    return fail("labels has " + llvm::Twine(labels.shape[0]) + " rows, x has " +
                llvm::Twine(dims.n));
  std::string storage = plan.options.at("dtype");
  int64_t ignore = std::stoll(plan.options.at("ignore_index"));
  for (auto &[role, array] : byRole) {
    if (role == "labels")
      continue;
    if (llvm::Error err = convertStorage(*array, storage, role))
      return fail(llvm::toString(std::move(err)));
  }
  // Out-of-range labels are rejected before launch (the kernels would give
  // NaN for them; an error is more useful here).
  for (int64_t i = 0; i < dims.n; ++i) {
    auto l = static_cast<int64_t>(elementAsDouble(labels.data(), labels.dtype, i));
    if (l != ignore && (l < 0 || l >= dims.v))
      return fail("labels[" + llvm::Twine(i) + "] = " + llvm::Twine(l) +
                  " is outside [0, V=" + llvm::Twine(dims.v) +
                  ") and is not ignore_index=" + llvm::Twine(ignore));
  }

  bool none = plan.options.at("reduction") == "none";
  NpyArray lossOut, lseOut;
  lossOut.dtype = lseOut.dtype = "f32";
  lossOut.shape = none ? std::vector<int64_t>{dims.n} : std::vector<int64_t>{};
  lossOut.bytes.resize(lossOut.count() * 4);
  lseOut.shape = {dims.n};
  lseOut.bytes.resize(dims.n * 4);
  std::map<std::string, HostBuffer> buffers;
  for (auto &[role, array] : byRole)
    buffers[role] = {array->data(), array->dtype, array->count()};
  buffers["loss"] = {lossOut.data(), "f32", lossOut.count()};
  buffers["lse"] = {lseOut.data(), "f32", lseOut.count()};

  auto runStart = std::chrono::steady_clock::now();
  if (llvm::Error err = compiled->run(buffers, dims))
    return fail(llvm::toString(std::move(err)));
  double runMs = ms(runStart);

  llvm::outs() << llvm::formatv("shape N={0} V={1} D={2} storage={3} reduction={4}\n",
                                dims.n, dims.v, dims.d, storage,
                                plan.options.at("reduction"));
  llvm::outs() << llvm::formatv("backend {0}: {1} {2:F1} ms (", backend.getValue(),
                                compiled->fromCache ? "cache hit, link" : "compile",
                                compileMs);
  for (const StageTiming &t : compiled->timings)
    llvm::outs() << llvm::formatv("{0} {1:F1}, ", t.name, t.seconds * 1e3);
  llvm::outs() << llvm::formatv("jit {0:F1}), run {1:F1} ms\n", compiled->jitSeconds * 1e3,
                                runMs);
  const float *lossValues = static_cast<const float *>(lossOut.data());
  const float *lseValues = static_cast<const float *>(lseOut.data());
  if (!none)
    llvm::outs() << llvm::formatv("loss = {0:F7}\n", lossValues[0]);

  int status = 0;
  if (check) {
    LceProblem p;
    p.x = x.data();
    p.w = w.data();
    p.bias = byRole.count("bias") ? byRole["bias"]->data() : nullptr;
    p.labels = labels.data();
    p.dtype = storage;
    p.labelType = labels.dtype;
    p.n = dims.n;
    p.v = dims.v;
    p.d = dims.d;
    p.ignoreIndex = ignore;
    p.reduction = plan.options.at("reduction");
    auto refStart = std::chrono::steady_clock::now();
    LceReference ref = referenceLinearCrossEntropy(p);
    double refMs = ms(refStart);
    double lseErr = 0, lossErr = 0;
    for (int64_t i = 0; i < dims.n; ++i) {
      lseErr = std::max(lseErr, relErr(lseValues[i], ref.lse[i]));
      if (none)
        lossErr = std::max(lossErr, relErr(lossValues[i], ref.rowLoss[i]));
    }
    if (!none)
      lossErr = relErr(lossValues[0], ref.loss);
    if (!none)
      llvm::outs() << llvm::formatv("fp64 reference loss = {0:F7} ({1:F1} ms)\n", ref.loss,
                                    refMs);
    llvm::outs() << llvm::formatv("max relative error: loss {0:E2}, lse {1:E2} "
                                  "(tolerance {2:E1})\n",
                                  lossErr, lseErr, tolerance.getValue());
    if (!(lossErr <= tolerance) || !(lseErr <= tolerance)) {
      llvm::errs() << "lossjit-runner: error: result differs from the fp64 reference\n";
      status = 1;
    }
  }
  if (!outputPrefix.empty()) {
    // A graph file's results in its own order; the preset's are loss, lse.
    std::vector<std::string> results = {"loss", "lse"};
    if (!graphFile.empty())
      results = plan.entryResults;
    for (auto [i, name] : llvm::enumerate(results)) {
      NpyArray *array = name == "loss" ? &lossOut : name == "lse" ? &lseOut : nullptr;
      if (!array)
        return fail("cannot write result '" + name + "' (the runner runs forward graphs)");
      if (llvm::Error err = writeNpy(outputPrefix + std::to_string(i) + ".npy", *array))
        return fail(llvm::toString(std::move(err)));
    }
  }
  return status;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  initToolProcess();
  // The last line of defence: whatever escapes as an exception (a thread the
  // system refuses, an allocation the checks above did not foresee) is an
  // error message and exit code 1, not std::terminate's abort.
  int status;
  try {
    status = runMain(argc, argv);
  } catch (const std::exception &e) {
    status = fail(llvm::Twine("internal: ") + e.what());
  }
  if (llvm::Error err = flushStandardOutput())
    return fail(llvm::toString(std::move(err)));
  return status;
}
