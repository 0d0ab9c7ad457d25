//===- FuzzGraph.cpp - libFuzzer target: graph parser, verifier, pipelines -===//
//
// Any bytes as a graph file, through what lossjit-opt, lossjit-runner and
// lossjit-aot do with one before any code generation: the nesting bound
// (runtime::checkNesting, as readGraphInput applies it), MLIR's parser and
// verifier with the lossjit dialects, then the CPU and the GPU pipelines up
// to their "kernels" stage (precision, fusion, lowering config, kernel
// builders and launch plans). Every failure must be a reported error, never
// a crash, an assertion or a hang; a pipeline that succeeds must leave
// launch plans that read back and survive toAttr/fromAttr unchanged.
//
// LLVM codegen (PTX, host objects) is left out: it is LLVM's, slow per
// input, and the kernels it gets are the ones the unit tests compile.
//
//===----------------------------------------------------------------------===//

#include "compiler/Kernels/Support/LaunchPlan.h"
#include "compiler/Pipeline/Pipelines.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Pipeline/StageRunner.h"
#include "runtime/NestingLimit.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <cstdlib>
#include <string>

using namespace mlir;
using namespace lossjit;

namespace {
/// Inputs above this only slow the fuzzer down (real graphs are ~1 KiB).
constexpr size_t kMaxInputBytes = 64 << 10;

/// Runs `stages` up to and including "kernels" on a copy of `module`;
/// a success must leave plans that read back and round-trip.
void runUpToKernels(ModuleOp module, std::vector<Stage> stages) {
  while (!stages.empty() && stages.back().name != "kernels")
    stages.pop_back();
  OwningOpRef<ModuleOp> copy(module.clone());
  auto timings = runStages(*copy, stages);
  if (!timings) {
    llvm::consumeError(timings.takeError()); // a reported failure is fine
    return;
  }
  std::string error;
  auto plans = readLaunchPlans(*copy, error);
  if (failed(plans)) {
    // A module without fused functions lowers nothing; that is all.
    if (!copy->getOperation()->hasAttr(kLaunchPlansAttrName))
      return;
    std::abort(); // the pipeline wrote a plan it cannot read back
  }
  for (const LaunchPlan &plan : *plans) {
    if (!plan.entryArgExtents.empty() && plan.entryArgExtents.size() != plan.entryArgs.size())
      std::abort();
    std::string again;
    auto back = LaunchPlan::fromAttr(plan.toAttr(copy->getContext()), again);
    if (failed(back) || back->toAttr(copy->getContext()) != plan.toAttr(copy->getContext()))
      std::abort();
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > kMaxInputBytes)
    return 0;
  // A NUL-terminated copy, as the tools parse (readGraphInput's
  // getMemBufferCopy): MLIR's lexer takes the NUL after the buffer for its
  // end, and libFuzzer's data has none (read past its end, the lexer ran on
  // into the heap: a heap-buffer-overflow on a 10-byte input).
  std::string text(reinterpret_cast<const char *>(data), size);
  // What the tools check before MLIR's recursive parser sees a file.
  if (runtime::Error err = runtime::checkNesting(text, runtime::kMaxGraphNesting, "input"))
    return 0;
  static DialectRegistry *registry = [] {
    auto *r = new DialectRegistry;
    registerLossJITDialects(*r);
    return r;
  }();
  // A fresh context per input: nothing one input interns can affect the next.
  MLIRContext context(*registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, ParserConfig(&context));
  if (!module || failed(verify(*module)))
    return 0;
  runUpToKernels(*module, cpuStages(CpuTileConfig{}));
  runUpToKernels(*module, gpuStages(GpuTarget{}, TileConfig{}));
  return 0;
}
