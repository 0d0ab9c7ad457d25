//===- lossjit-aot.cpp - ahead-of-time PTX kernel bundles -----------------===//
//
//   lossjit-aot --preset linear-cross-entropy --dtype f16 --arch sm_80,sm_90 -o DIR
//   lossjit-aot GRAPH.mlir --arch sm_90 -o DIR [--tile threads=256,splits=16]
//
// For every arch and lowered function, DIR/<key>/ is a kernel bundle
// (runtime/KernelBundle.h): manifest.json plus one PTX file per kernel
// (<kernel>.<arch>.ptx). A directory of bundles is what LOSSJIT_KERNEL_PATH
// points a runtime-only build at.
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/BundleBuilder.h"
#include "runtime/Sha256.h"

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

static cl::opt<std::string> graphFile(cl::Positional, cl::desc("[GRAPH.mlir]"),
                                      cl::init(""));
static cl::opt<std::string> outputDir("o", cl::desc("output directory"),
                                      cl::value_desc("DIR"), cl::Required);
static cl::opt<std::string> preset("preset", cl::desc("built-in graph: linear-cross-entropy"));
static cl::opt<std::string> dtype("dtype", cl::desc("preset storage: f16|bf16|f32"),
                                  cl::init("f16"));
static cl::opt<std::string> labelType("label-type", cl::desc("preset labels: i32|i64"),
                                      cl::init("i64"));
static cl::opt<bool> bias("bias", cl::desc("preset: with a bias"), cl::init(false));
static cl::opt<int64_t> ignoreIndex("ignore-index", cl::init(-100));
static cl::opt<std::string> reduction("reduction", cl::desc("preset: mean|sum|none"),
                                      cl::init("mean"));
static cl::opt<std::string> archList("arch", cl::desc("comma-separated: sm_80,sm_90,..."),
                                     cl::init("sm_80,sm_90"));
static cl::opt<std::string> tileText("tile", cl::desc("block_rows=4,threads=128,splits=8"),
                                     cl::init(""));
static cl::opt<bool> emitStages("emit-stages",
                                cl::desc("also write every pipeline stage's IR to "
                                         "DIR/stages/<arch>/"),
                                cl::init(false));

namespace {
int fail(const llvm::Twine &message) {
  llvm::errs() << "lossjit-aot: error: " << message << "\n";
  return 1;
}

std::string print(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "lossjit ahead-of-time compiler\n");
  if (graphFile.empty() == preset.empty())
    return fail("give exactly one of GRAPH.mlir or --preset linear-cross-entropy");
  if (!preset.empty() && preset != "linear-cross-entropy")
    return fail("--preset must be 'linear-cross-entropy', got '" + preset + "'");
  auto tile = TileConfig::parse(tileText);
  if (!tile)
    return fail("--tile: " + llvm::toString(tile.takeError()));
  llvm::SmallVector<llvm::StringRef> arches;
  llvm::StringRef(archList).split(arches, ',', -1, /*KeepEmpty=*/false);
  if (arches.empty())
    return fail("--arch needs at least one arch, e.g. sm_80");

  DialectRegistry registry;
  registerLossJITDialects(registry);
  MLIRContext context(registry);
  OwningOpRef<ModuleOp> graph;
  if (!graphFile.empty()) {
    llvm::SourceMgr sources;
    graph = parseSourceFile<ModuleOp>(graphFile, sources, ParserConfig(&context));
    if (!graph)
      return fail("cannot parse graph '" + graphFile + "'");
  } else {
    LceGraphOptions o;
    o.dtype = dtype;
    o.labelType = labelType;
    o.bias = bias;
    o.ignoreIndex = ignoreIndex;
    o.reduction = reduction;
    auto built = buildLinearCrossEntropyGraph(context, o);
    if (!built)
      return fail(llvm::toString(built.takeError()));
    graph = std::move(*built);
  }
  std::string graphText = print(*graph);
  std::string irHash = runtime::sha256Hex(graphText);

  for (llvm::StringRef arch : arches) {
    GpuTarget target{arch.str(), ""};
    if (llvm::Error err = target.validate())
      return fail("--arch: " + llvm::toString(std::move(err)));
    OwningOpRef<ModuleOp> module = graph->clone();
    StageSink sink;
    if (emitStages)
      sink = dumpDirectorySink(outputDir + "/stages/" + arch.str());
    auto start = std::chrono::steady_clock::now();
    auto compiled = compileToPtx(*module, target, *tile, sink);
    if (!compiled)
      return fail(arch + ": " + llvm::toString(compiled.takeError()));
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    std::string key = gpuCacheKey(graphText, target, *tile);
    for (const GpuCompiledOp &op : compiled->ops) {
      // One graph may lower several functions: give each its own bundle key.
      std::string opKey =
          compiled->ops.size() == 1 ? key : runtime::sha256Hex(key + op.plan.entry);
      runtime::KernelBundle bundle = makeGpuBundle(op, opKey, irHash);
      if (runtime::Error err = bundle.verify())
        return fail("internal: invalid bundle: " + err.message());
      std::string dir = outputDir + "/" + opKey;
      if (runtime::Error err = runtime::writeBundleDirectory(bundle, dir))
        return fail(err.message());
      llvm::outs() << llvm::formatv("{0} @{1}: {2} kernels, graph -> PTX {3:F1} ms -> {4}\n",
                                    arch, op.plan.entry, op.kernels.size(), ms, dir);
    }
  }
  return 0;
}
