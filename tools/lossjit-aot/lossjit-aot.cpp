//===- lossjit-aot.cpp - ahead-of-time kernels, bundles and a C API -------===//
//
//   lossjit-aot --preset linear-cross-entropy --dtype f16 --arch sm_80,sm_90 -o DIR
//   lossjit-aot GRAPH.mlir --arch sm_90 -o DIR [--tile threads=256,splits=16]
//   lossjit-aot --preset linear-cross-entropy --dtype bf16 --tile matmul=mma_sync -o DIR
//   lossjit-aot --preset linear-log-prob --dtype bf16 -o DIR       (RL: log-prob + entropy)
//   lossjit-aot --preset linear-kl [--reverse] --dtype bf16 -o DIR  (distillation)
//   lossjit-aot --preset linear-kl --jsd-beta 0.5 --dtype bf16 -o DIR (generalized JSD)
//   lossjit-aot --check DIR
//
// DIR receives:
//   <key>/manifest.json + <kernel>.<arch>.ptx (or .cubin)   one kernel bundle
//       (runtime/KernelBundle.h) per (op, arch): DIR is a LOSSJIT_KERNEL_PATH
//       root for runtime-only builds;
//   manifest.json      the index: per op (forward, backward) and arch, the
//       bundle directory, kernels, parameter signatures, launch plan
//       (tools/lossjit-aot/IndexManifest.h);
//   <name>.h, <name>.c the kernels embedded plus a C API over the CUDA driver
//       API (tools/lossjit-aot/CApiEmitter.h).
// The preset emits the forward op and, unless --no-gradients, the backward op
// (when the compiler can build it). The family presets emit the row
// statistics of a loss.vocab_reduce (the engine writes the [N]-shaped rest)
// and its derived backward, which takes one adjoint per statistic:
//   linear-log-prob: lse, label_logit, entropy (--no-entropy: the first two);
//       log p(y) = label_logit − lse.
//   linear-kl: lse, teacher_lse, teacher_entropy, cross_entropy, with
//       KL(q‖p) = cross_entropy − teacher_entropy; --reverse: lse, entropy,
//       teacher_lse, reverse_cross_entropy, with KL(p‖q) =
//       reverse_cross_entropy − entropy; --jsd-beta β (0 < β < 1): lse,
//       teacher_lse, mixture_kl, mixture_p2, jsd: the generalized JSD
//       β KL(q‖M) + (1 − β) KL(p‖M), M = β q + (1 − β) p, is jsd, KL(p‖M)
//       is mixture_kl (both differentiable; mixture_p2 = Σ p²/M is what
//       mixture_kl's gradient reads: pass it 0 as an adjoint). The teacher (x' [N, T],
//       w' [V, T], --teacher-bias) shares the student's --logit-scale
//       (1/temperature).
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Builder/VocabReduceGraph.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/BundleBuilder.h"
#include "dialects/Loss/LoweringConfig.h"
#include "runtime/FileUtil.h"
#include "runtime/Sha256.h"
#include "tools/lossjit-aot/AotModel.h"
#include "tools/lossjit-aot/CApiEmitter.h"
#include "tools/lossjit-aot/CubinCompiler.h"
#include "tools/lossjit-aot/IndexManifest.h"
#include "tools/lossjit-aot/PtxSignature.h"
#include "tools/support/ToolInput.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace mlir;
using namespace lossjit;
namespace cl = llvm::cl;

static cl::OptionCategory aotCategory("lossjit-aot options");

static cl::opt<std::string> graphFile(cl::Positional, cl::desc("[GRAPH.mlir]"),
                                      cl::init(""), cl::cat(aotCategory));
static cl::opt<std::string> outputDir("o", cl::desc("output directory"),
                                      cl::value_desc("DIR"), cl::init(""), cl::cat(aotCategory));
static cl::opt<std::string> checkDir("check",
                                     cl::desc("validate an existing output directory "
                                              "(index, bundles, PTX ABI) and exit"),
                                     cl::value_desc("DIR"), cl::init(""), cl::cat(aotCategory));
static cl::opt<std::string> preset("preset",
                                   cl::desc("built-in graph: linear-cross-entropy, "
                                            "linear-log-prob or linear-kl"),
                                   cl::cat(aotCategory));
static cl::opt<bool> noEntropy("no-entropy",
                               cl::desc("preset linear-log-prob: without the entropy"),
                               cl::init(false), cl::cat(aotCategory));
static cl::opt<bool> reverseKl("reverse",
                               cl::desc("preset linear-kl: the reverse KL(student‖teacher)"),
                               cl::init(false), cl::cat(aotCategory));
static cl::opt<double> jsdBeta("jsd-beta",
                               cl::desc("preset linear-kl: the generalized JSD with this "
                                        "mixture weight in (0, 1) instead of a KL"),
                               cl::init(0.5), cl::cat(aotCategory));
static cl::opt<bool> teacherBias("teacher-bias",
                                 cl::desc("preset linear-kl: the teacher head has a bias"),
                                 cl::init(false), cl::cat(aotCategory));
static cl::opt<std::string> dtype("dtype", cl::desc("preset storage: f16|bf16|f32|f64 (f64 computes in f64)"),
                                  cl::init("f16"), cl::cat(aotCategory));
static cl::opt<std::string> labelType("label-type", cl::desc("preset labels: i32|i64"),
                                      cl::init("i64"), cl::cat(aotCategory));
static cl::opt<bool> bias("bias", cl::desc("preset: with a bias"), cl::init(false), cl::cat(aotCategory));
static cl::opt<int64_t> ignoreIndex("ignore-index", cl::desc("preset: ignored label"),
                                    cl::init(-100), cl::cat(aotCategory));
static cl::opt<std::string> reduction("reduction", cl::desc("preset: mean|sum|none"),
                                      cl::init("mean"), cl::cat(aotCategory));
static cl::opt<double> logitScale("logit-scale",
                                 cl::desc("preset: multiply the logits by this (finite, nonzero)"),
                                 cl::init(1.0), cl::cat(aotCategory));
static cl::opt<double> softcap("softcap",
                               cl::desc("preset: tanh soft-cap of the logits, cap·tanh(z/cap) "
                                        "(0: none)"),
                               cl::init(0.0), cl::cat(aotCategory));
static cl::opt<bool> noGradients("no-gradients",
                                 cl::desc("preset: emit the forward op only"),
                                 cl::init(false), cl::cat(aotCategory));
static cl::opt<std::string>
    strategy("strategy",
             cl::desc("preset backward: auto|chunked|vocab_chunked|recompute (with --fused the "
                      "fused op has no recompute schedule and takes auto's next to a recompute "
                      "backward)"),
             cl::init("auto"), cl::cat(aotCategory));
static cl::opt<bool> noGradX("no-grad-x", cl::desc("preset backward: skip grad_x"),
                             cl::init(false), cl::cat(aotCategory));
static cl::opt<bool> noGradW("no-grad-w", cl::desc("preset backward: skip grad_w"),
                             cl::init(false), cl::cat(aotCategory));
static cl::opt<int64_t> workspaceBytes(
    "workspace-bytes",
    cl::desc("preset backward: scratch budget of the chunked schedule in bytes (default "
             "256 MiB, as the Python package asks on CUDA; rows per chunk grow with it; the "
             "consumer allocates what <name>_<role>_workspace_bytes says, never more than a "
             "chunk of N rows needs)"),
    cl::init(int64_t(256) << 20), cl::cat(aotCategory));
static cl::opt<std::string> archList("arch",
                                     cl::desc("comma-separated archs, sm_70 or newer, "
                                              "e.g. sm_80,sm_86,sm_89,sm_90,sm_90a,sm_100a"),
                                     cl::init("sm_80,sm_90"), cl::cat(aotCategory));
static cl::opt<std::string>
    tileText("tile",
             cl::desc("auto (per op and arch: tensor cores for f16/bf16 on sm_80+ except the "
                      "recompute strategy, wgmma on sm_90a and mma_sync elsewhere, else SIMT), "
                      "block_rows=4,threads=128,splits=8 (SIMT), "
                      "or matmul=mma_sync[,block_rows=64,block_cols=64,block_k=32,threads=128,"
                      "stages=3] (tensor cores, f16/bf16), or matmul=wgmma[,block_rows=128,"
                      "threads=256,block_cols=64,block_k=32,stages=4,grad_cols=128] (sm_90a only)"),
             cl::init("auto"), cl::cat(aotCategory));
static cl::opt<std::string> emitKind("emit", cl::desc("kernel images: ptx|cubin"),
                                     cl::init("ptx"), cl::cat(aotCategory));
static cl::opt<std::string> cubinTool("cubin-tool",
                                      cl::desc("--emit cubin through: auto|nvjitlink|ptxas"),
                                      cl::init("auto"), cl::cat(aotCategory));
static cl::opt<std::string> namePrefix("name",
                                       cl::desc("prefix of the C API symbols and of "
                                                "<name>.h / <name>.c"),
                                       cl::init("lce"), cl::cat(aotCategory));
static cl::opt<bool> fused(
    "fused",
    cl::desc("preset: also emit the fused forward+backward op (loss, lse and the "
             "gradients of grad_loss = 1 in one pass; mean/sum only) as "
             "<prefix>_forward_backward"),
    cl::init(false), cl::cat(aotCategory));
static cl::opt<bool> noCApi("no-c-api",
                            cl::desc("write bundles and the index only (no <name>.h/.c)"),
                            cl::init(false), cl::cat(aotCategory));
static cl::opt<bool> emitStages("emit-stages",
                                cl::desc("also write every pipeline stage's IR to "
                                         "DIR/stages/<op>/<arch>/"),
                                cl::init(false), cl::cat(aotCategory));
static cl::opt<bool> quiet("quiet", cl::desc("print nothing on success"), cl::init(false), cl::cat(aotCategory));

namespace {
int fail(const llvm::Twine &message) {
  llvm::outs().flush();
  llvm::errs() << "lossjit-aot: error: " << message << "\n";
  return 1;
}

std::string print(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

// The compiler's options and plan grow features over time (gradients,
// chunked launches). These accessors compile against both the old and the
// new structs, so the tool keeps building while the compiler moves.
template <typename O> constexpr bool kHasGradient = requires(O o) { o.gradient = true; };

template <typename O> void setGradientOptions(O &o, bool gradient) {
  if constexpr (kHasGradient<O>) {
    o.gradient = gradient;
    if constexpr (requires { o.strategy = std::string(); })
      o.strategy = strategy;
    if constexpr (requires { o.needsGradX = true; })
      o.needsGradX = !noGradX;
    if constexpr (requires { o.needsGradW = true; })
      o.needsGradW = !noGradW;
    if constexpr (requires { o.workspaceBytes = int64_t(); })
      o.workspaceBytes = workspaceBytes;
  } else {
    (void)o;
    (void)gradient;
  }
}

template <typename P> void copyChunking(const P &plan, aot::AotArchBuild &build) {
  if constexpr (requires { plan.derived.begin(); })
    for (const auto &[name, formula] : plan.derived)
      build.derived.push_back({name, formula});
  if constexpr (requires { plan.chunkSymbol; })
    build.chunkSymbol = plan.chunkSymbol;
  for (const auto &k : plan.kernels) {
    if constexpr (requires { k.perChunk; })
      build.perChunk.push_back(k.perChunk);
    else
      build.perChunk.push_back(false);
  }
}

/// "forward", "backward" or "forward_backward" from what the plan computes.
std::string roleOf(const LaunchPlan &plan, bool gradientGraph) {
  if (auto pass = plan.options.find("pass");
      pass != plan.options.end() && pass->second == "forward_backward")
    return "forward_backward";
  if (gradientGraph || plan.op.find("backward") != std::string::npos ||
      plan.op.find("grad") != std::string::npos)
    return "backward";
  for (const PlanParam &p : plan.params)
    if (p.isOutput && p.name.rfind("grad_", 0) == 0)
      return "backward";
  return "forward";
}

struct GraphJob {
  OwningOpRef<ModuleOp> module;
  bool gradient = false;
  std::string name = "forward"; ///< stage-dump folder and messages.
};

const char *const kPresets = "linear-cross-entropy, linear-log-prob or linear-kl";

/// The options one preset reads besides the common ones (dtype, arch, tile,
/// gradients): a family preset refuses the cross-entropy's reduction and
/// fused op, and each refuses the other's flags, so nothing given is
/// silently ignored.
std::string presetOptionError() {
  auto given = [](const cl::Option &o) { return o.getNumOccurrences() > 0; };
  const bool crossEntropy = preset == "linear-cross-entropy";
  if (!crossEntropy && (given(reduction) || given(fused)))
    return "--" + std::string(given(reduction) ? "reduction" : "fused") +
           " applies to --preset linear-cross-entropy only (the " + preset +
           " preset returns per-row statistics; the engine reduces them)";
  if (preset != "linear-log-prob" && given(noEntropy))
    return "--no-entropy applies to --preset linear-log-prob only";
  if (preset != "linear-kl" && (given(reverseKl) || given(teacherBias) || given(jsdBeta)))
    return "--" +
           std::string(given(reverseKl) ? "reverse" : given(jsdBeta) ? "jsd-beta" : "teacher-bias") +
           " applies to --preset linear-kl only";
  if (noGradients && given(workspaceBytes))
    return "--workspace-bytes budgets the backward, which --no-gradients leaves out";
  if (strategy == "recompute" && !fused && given(workspaceBytes))
    return "--workspace-bytes budgets the chunked backward and the fused op; --strategy "
           "recompute keeps no workspace";
  if (given(workspaceBytes) && workspaceBytes < 1)
    return "--workspace-bytes must be at least 1, got " + std::to_string(workspaceBytes);
  if (given(reverseKl) && given(jsdBeta))
    return "--reverse and --jsd-beta exclude each other (by TRL's convention the reverse KL is β = 1)";
  if (preset == "linear-kl" && (given(labelType) || given(ignoreIndex) || given(bias)))
    return "--preset linear-kl reads no labels and no student bias (the engine masks "
           "rows): drop --label-type, --ignore-index and --bias";
  return {};
}

/// Whether a GRAPH.mlir input comes with a flag that shapes only a preset's
/// graph (its types, loss and backward): the graph carries all of that, so
/// such a flag would be silently ignored.
std::string graphOptionError() {
  const cl::Option *presetOnly[] = {
      &dtype,   &labelType,   &bias,      &ignoreIndex, &reduction,  &logitScale,
      &softcap, &noGradients, &strategy,  &noGradX,     &noGradW,    &workspaceBytes,
      &fused,   &noEntropy,   &reverseKl, &jsdBeta,     &teacherBias};
  for (const cl::Option *o : presetOnly)
    if (o->getNumOccurrences() > 0)
      return "--" + o->ArgStr.str() +
             " shapes a --preset graph; a GRAPH.mlir input carries its own types, loss and "
             "backward (drop --" +
             o->ArgStr.str() + ")";
  return {};
}

/// The statistics of a family preset, in result order.
std::vector<std::string> familyStatistics() {
  if (preset == "linear-log-prob") {
    std::vector<std::string> stats = {"lse", "label_logit"};
    if (!noEntropy)
      stats.push_back("entropy");
    return stats;
  }
  if (reverseKl)
    return {"lse", "entropy", "teacher_lse", "reverse_cross_entropy"};
  if (jsdBeta.getNumOccurrences() > 0)
    return {"lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"};
  return {"lse", "teacher_lse", "teacher_entropy", "cross_entropy"};
}

/// The forward and (unless --no-gradients) backward graphs of a family preset.
llvm::Error buildFamilyJobs(MLIRContext &context, std::vector<GraphJob> &jobs) {
  for (bool gradient : {false, true}) {
    if (gradient && noGradients)
      break;
    VocabReduceGraphOptions o;
    o.name = preset == "linear-kl" ? "linear_kl" : "linear_log_prob";
    if (gradient)
      o.name += "_grad";
    o.dtype = dtype;
    o.statistics = familyStatistics();
    o.labelType = labelType;
    o.ignoreIndex = ignoreIndex;
    o.bias = bias;
    o.logitScale = logitScale;
    o.softcap = softcap;
    o.teacher = preset == "linear-kl";
    o.teacherBias = teacherBias;
    o.teacherScale = logitScale;
    if (jsdBeta.getNumOccurrences() > 0)
      o.jsdBeta = jsdBeta;
    o.gradient = gradient;
    o.strategy = strategy;
    o.needsGradX = !noGradX;
    o.needsGradW = !noGradW;
    o.workspaceBytes = workspaceBytes;
    auto built = buildVocabReduceGraph(context, o);
    if (!built)
      return llvm::createStringError(std::string(gradient ? "backward" : "forward") +
                                     " graph: " + llvm::toString(built.takeError()));
    jobs.push_back({std::move(*built), gradient, gradient ? "backward" : "forward"});
  }
  return llvm::Error::success();
}

std::string joinArgs(int argc, char **argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i == 0) {
      size_t slash = a.rfind('/');
      a = slash == std::string::npos ? a : a.substr(slash + 1);
    }
    s += (i ? " " : "") + a;
  }
  return s;
}
} // namespace

int runMain(int argc, char **argv) {
  cl::HideUnrelatedOptions(aotCategory);
  cl::ParseCommandLineOptions(argc, argv, "lossjit ahead-of-time compiler\n");

  if (!checkDir.empty()) {
    if (runtime::Error e = aot::checkAotDirectory(checkDir))
      return fail(checkDir + ": " + e.message());
    if (!quiet)
      llvm::outs() << checkDir << ": ok\n";
    return 0;
  }
  if (outputDir.empty())
    return fail("-o DIR is required");
  if (graphFile.empty() == preset.empty())
    return fail(std::string("give exactly one of GRAPH.mlir or --preset ") + kPresets);
  if (!preset.empty() && preset != "linear-cross-entropy" && preset != "linear-log-prob" &&
      preset != "linear-kl")
    return fail(std::string("--preset must be ") + kPresets + ", got '" + preset + "'");
  if (std::string error = preset.empty() ? graphOptionError() : presetOptionError(); !error.empty())
    return fail(error);
  {
    aot::AotOutput probe;
    probe.prefix = namePrefix;
    if (runtime::Error e = probe.verify(); e && e.message().find("--name") != std::string::npos)
      return fail(e.message());
  }
  if (emitKind != "ptx" && emitKind != "cubin")
    return fail("--emit must be ptx or cubin, got '" + emitKind + "'");
  auto tile = TileConfig::parse(tileText);
  if (!tile)
    return fail("--tile: " + llvm::toString(tile.takeError()));
  // One tile serves every op of the output: say before any compilation
  // what a strategy cannot build (the lowering would refuse it per op).
  const std::string kind = loss::stringifyMatmulKind(tile->matmul).str();
  if (loss::isTensorCoreMatmul(tile->matmul) && !tile->automatic && !preset.empty()) {
    if (dtype == "f32")
      return fail("--tile matmul=" + kind + " multiplies f16 or bf16; --dtype f32 stays on SIMT "
                  "(leave --tile at auto)");
    if (!noGradients && strategy == "recompute")
      return fail("--tile matmul=" + kind + " does not build the recompute backward; use "
                  "--strategy chunked or leave --tile at auto");
  }
  llvm::SmallVector<llvm::StringRef> arches;
  llvm::StringRef(archList).split(arches, ',', -1, /*KeepEmpty=*/false);
  if (arches.empty())
    return fail("--arch needs at least one arch, e.g. sm_80");
  for (size_t i = 0; i < arches.size(); ++i)
    if (llvm::is_contained(llvm::ArrayRef(arches).take_front(i), arches[i]))
      return fail("--arch names " + arches[i].str() + " twice: " + archList);
  for (llvm::StringRef arch : arches) {
    if (llvm::Error err = GpuTarget{arch.str(), ""}.validate())
      return fail("--arch: " + llvm::toString(std::move(err)));
    if (std::string why = loss::checkMatmulChip(tile->matmul, arch); !why.empty())
      return fail("--tile with --arch " + arch.str() + ": " + why);
  }

  std::unique_ptr<aot::CubinCompiler> cubins;
  if (emitKind == "cubin") {
    auto compiler = aot::CubinCompiler::create(cubinTool);
    if (!compiler)
      return fail(compiler.errorMessage());
    cubins = std::move(*compiler);
    if (!quiet)
      llvm::outs() << "cubins through " << cubins->describe() << "\n";
  }

  DialectRegistry registry;
  registerLossJITDialects(registry);
  MLIRContext context(registry);

  std::vector<GraphJob> jobs;
  if (!graphFile.empty()) {
    // Bounded and nesting-checked before MLIR's recursive parser sees it.
    auto input = readGraphInput(graphFile);
    if (!input)
      return fail(llvm::toString(input.takeError()));
    llvm::SourceMgr sources;
    sources.AddNewSourceBuffer(std::move(*input), llvm::SMLoc());
    auto graph = parseSourceFile<ModuleOp>(sources, ParserConfig(&context));
    if (!graph)
      return fail("cannot parse graph '" + graphFile + "'");
    jobs.push_back({std::move(graph), false});
  } else if (preset != "linear-cross-entropy") {
    if (llvm::Error err = buildFamilyJobs(context, jobs))
      return fail("--preset " + preset + ": " + llvm::toString(std::move(err)));
  } else {
    for (bool gradient : {false, true}) {
      if (gradient && noGradients)
        break;
      if (gradient && !kHasGradient<LceGraphOptions>) {
        if (!quiet)
          llvm::outs() << "note: this compiler cannot build gradient graphs yet; "
                          "emitting the forward op only\n";
        break;
      }
      LceGraphOptions o;
      o.dtype = dtype;
      o.labelType = labelType;
      o.bias = bias;
      o.ignoreIndex = ignoreIndex;
      o.reduction = reduction;
      o.logitScale = logitScale;
      o.softcap = softcap;
      setGradientOptions(o, gradient);
      auto built = buildLinearCrossEntropyGraph(context, o);
      if (!built)
        return fail(std::string(gradient ? "backward" : "forward") + " graph: " +
                    llvm::toString(built.takeError()));
      jobs.push_back({std::move(*built), gradient, gradient ? "backward" : "forward"});
    }
    if (fused) {
      if (reduction == "none")
        return fail("--fused needs --reduction mean or sum (with none every row has "
                    "its own loss gradient)");
      LceGraphOptions o;
      o.dtype = dtype;
      o.labelType = labelType;
      o.bias = bias;
      o.ignoreIndex = ignoreIndex;
      o.reduction = reduction;
      o.logitScale = logitScale;
      o.softcap = softcap;
      setGradientOptions(o, true);
      o.fusedForward = true;
      // --strategy names the backward's schedule; the fused op has no
      // recompute one (it forms each logit tile once per chunk), so next to
      // a recompute backward it takes the lowering's choice.
      if (o.strategy == "recompute")
        o.strategy = "auto";
      auto built = buildLinearCrossEntropyGraph(context, o);
      if (!built)
        return fail("forward_backward graph: " + llvm::toString(built.takeError()));
      jobs.push_back({std::move(*built), true, "forward_backward"});
    }
  }

  aot::AotOutput output;
  output.prefix = namePrefix;
  output.tile = tile->str();
  output.imageKind = cubins ? aot::ImageKind::Cubin : aot::ImageKind::Ptx;
  output.commandLine = joinArgs(argc, argv);
  std::string forwardGraphText;

  for (GraphJob &job : jobs) {
    std::string graphText = print(*job.module);
    std::string irHash = runtime::sha256Hex(graphText);
    if (!job.gradient && forwardGraphText.empty()) {
      forwardGraphText = graphText;
      output.irHash = irHash;
    }
    for (llvm::StringRef arch : arches) {
      GpuTarget target{arch.str(), ""};
      OwningOpRef<ModuleOp> module = job.module->clone();
      StageSink sink;
      if (emitStages)
        sink = dumpDirectorySink(outputDir + "/stages/" +
                                 job.name + "/" + arch.str());
      auto start = std::chrono::steady_clock::now();
      auto compiled = compileToPtx(*module, target, *tile, sink);
      if (!compiled)
        return fail(llvm::Twine(job.name) + " " + arch + ": " +
                    llvm::toString(compiled.takeError()));
      double ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      std::string key = gpuCacheKey(graphText, target, *tile);
      for (const GpuCompiledOp &op : compiled->ops) {
        // One graph may lower several functions: give each its own bundle key.
        std::string opKey =
            compiled->ops.size() == 1 ? key : runtime::sha256Hex(key + op.plan.entry);
        std::string role = roleOf(op.plan, job.gradient);
        aot::AotArchBuild build;
        build.bundle = makeGpuBundle(op, opKey, irHash);
        build.compileMs = ms;
        copyChunking(op.plan, build);
        for (const PtxKernel &k : op.kernels)
          build.ptx.push_back(k.ptx);
        if (runtime::Error err = build.bundle.verify())
          return fail(role + " " + arch + ": the compiler's plan does not fit the bundle "
                      "format: " + err.message());
        for (size_t k = 0; k < build.ptx.size(); ++k)
          if (runtime::Error err = aot::checkPtxAbi(build.bundle, k, build.ptx[k]))
            return fail("internal: " + err.message());
        if (cubins) {
          build.imageKind = aot::ImageKind::Cubin;
          for (runtime::BundleKernel &k : build.bundle.kernels) {
            auto cubin = cubins->compile(k.image, arch.str(), k.file);
            if (!cubin)
              return fail(cubin.errorMessage());
            k.image = std::move(*cubin);
            k.file = k.name + "." + arch.str() + ".cubin";
          }
        }
        aot::AotOp *target = nullptr;
        for (aot::AotOp &existing : output.ops)
          if (existing.role == role)
            target = &existing;
        if (!target) {
          aot::AotOp fresh;
          fresh.role = role;
          fresh.entry = op.plan.entry;
          output.ops.push_back(std::move(fresh));
          target = &output.ops.back();
          for (const PlanParam &p : op.plan.params)
            if (p.isOutput)
              target->outputs.push_back(p.name);
          // Per-arch and per-op bookkeeping keys are not variant options.
          for (const auto &[k, v] : op.plan.options)
            if (k != "arch" && k != "entry" && k != "pass")
              target->options.set(k, v);
        } else if (target->entry != op.plan.entry) {
          return fail("two " + role + " functions (@" + target->entry + ", @" +
                      op.plan.entry + "): the C API takes one of each");
        }
        if (!quiet)
          llvm::outs() << llvm::formatv("{0,-8} {1,-7} @{2}: {3} kernels, graph -> PTX "
                                        "{4:F1} ms -> {5}/{6}\n",
                                        role, arch, op.plan.entry, op.kernels.size(), ms,
                                        outputDir, opKey);
        target->arches.push_back(std::move(build));
      }
    }
  }
  // Forward first: the C API numbers ops in this order.
  std::stable_sort(output.ops.begin(), output.ops.end(),
                   [](const aot::AotOp &a, const aot::AotOp &b) {
                     return a.role == "forward" && b.role != "forward";
                   });
  if (const aot::AotOp *forward = output.findOp("forward"))
    output.options = forward->options;
  if (output.irHash.empty() && !output.ops.empty())
    output.irHash = output.ops.front().arches.front().bundle.irHash;
  if (runtime::Error e = output.verify())
    return fail(e.message());
  if (!output.findOp("forward"))
    return fail("the graph lowered to no forward op");

  // Write: bundles, PTX beside cubins, the C API, the index last (a
  // directory with an index is complete).
  if (runtime::Error e = runtime::createDirectories(outputDir))
    return fail(e.message());
  for (const aot::AotOp &op : output.ops)
    for (const aot::AotArchBuild &build : op.arches) {
      std::string dir = outputDir + "/" + build.bundle.key;
      if (runtime::Error e = runtime::writeBundleDirectory(build.bundle, dir))
        return fail(e.message());
      if (build.imageKind == aot::ImageKind::Cubin)
        for (size_t k = 0; k < build.ptx.size(); ++k) {
          std::string file = dir + "/" + build.bundle.kernels[k].name + "." +
                             build.bundle.arch + ".ptx";
          if (runtime::Error e = runtime::writeFile(file, build.ptx[k]))
            return fail(e.message());
        }
    }
  std::string cApiText = "no C API (--no-c-api)";
  if (!noCApi) {
    auto files = aot::emitCApi(output);
    if (!files)
      return fail("C API: " + files.errorMessage());
    if (runtime::Error e =
            runtime::writeFile(outputDir + "/" + files->headerName, files->header))
      return fail(e.message());
    if (runtime::Error e =
            runtime::writeFile(outputDir + "/" + files->sourceName, files->source))
      return fail(e.message());
    cApiText = "C API: " + outputDir + "/" + files->headerName + ", " + outputDir + "/" +
               files->sourceName + " (" + output.prefix + "_forward" +
               (output.findOp("backward") ? ", " + output.prefix + "_backward" : "") + ")";
  }
  auto index = aot::buildIndexManifest(output, !noCApi);
  if (!index)
    return fail("index: " + index.errorMessage());
  if (runtime::Error e =
          runtime::writeFile(outputDir + "/manifest.json", runtime::writeJson(*index) + "\n"))
    return fail(e.message());
  if (!quiet)
    llvm::outs() << cApiText << "; index: " << outputDir << "/manifest.json\n";
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  initToolProcess();
  int status = runMain(argc, argv);
  if (llvm::Error err = flushStandardOutput())
    return fail(llvm::toString(std::move(err)));
  return status;
}
