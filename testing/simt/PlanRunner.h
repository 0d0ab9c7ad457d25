//===- PlanRunner.h - run a whole launch plan on the SIMT interpreter -*- C++
//-*-===//
//
// The CPU stand-in for the runtime's CUDA launcher (`lossjit-runner
// --backend=simt`, unit tests): takes the gpu.modules and the LaunchPlan that
// loss-lower-to-gpu produced and runs every kernel of the plan, in order, on
// the interpreter.
//
// Usage:
//   std::vector<uint16_t> x(N * D), w(V * D);  // f16 bits
//   std::vector<int64_t> y(N);
//   float loss;  std::vector<float> lse(N);
//   std::map<std::string, lossjit::simt::SimtHostBuffer> buffers = {
//       {"x", {x.data(), ElementType::F16, N * D}},
//       {"w", {w.data(), ElementType::F16, V * D}},
//       {"labels", {y.data(), ElementType::I64, N}},
//       {"loss", {&loss, ElementType::F32, 1}},
//       {"lse", {lse.data(), ElementType::F32, N}}};
//   if (llvm::Error e = runPlanOnSimt(module, plan, buffers, {N, V, D})) ...
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_PLANRUNNER_H
#define LOSSJIT_TESTING_SIMT_PLANRUNNER_H

#include "testing/simt/SimtInterpreter.h"
#include "compiler/Kernels/Support/LaunchPlan.h"

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>

namespace lossjit::simt {

/// Caller-owned host memory for one param of a plan: `numElements` elements
/// of `type` (f16/bf16 as their 16-bit encodings, index as int64) at `data`.
/// The element type a buffer dtype name ("f16", "bf16", "f32", "i32",
/// "i64") stands for; F32 for any other name.
ElementType elementTypeOf(const std::string &dtype);

struct SimtHostBuffer {
  void *data = nullptr;
  ElementType type = ElementType::F32;
  int64_t numElements = 0;
};

/// Runs every kernel of `plan` in launch order on the SIMT interpreter:
///  - `kernels` holds the plan's gpu.modules (the module that
///    loss-lower-to-gpu produced);
///  - `buffers` maps every plan param name (inputs and outputs) to memory
///    whose dtype matches the param's and whose element count equals the
///    param's shape evaluated at `dims` (a scalar has one element); names
///    that are not params are an error;
///  - `dims` are the values of `plan.dims`, in that order (N, V, D).
/// Workspaces are allocated here and start uninitialized, as do outputs:
/// a kernel reading an element no kernel of the plan wrote is an error.
/// Grids are evaluated from the plan's formulas over the dims, constants and
/// derived symbols; a kernel with an empty grid is skipped. Per-chunk kernels
/// run as a group once per chunk of N rows with `chunk_begin`/`chunk_end`
/// bound (the CPU backend's convention). Errors name the kernel and carry the
/// interpreter's message.
llvm::Error runPlanOnSimt(mlir::ModuleOp kernels, const LaunchPlan &plan,
                          const std::map<std::string, SimtHostBuffer> &buffers,
                          llvm::ArrayRef<int64_t> dims,
                          const SimtOptions &options = {});

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_PLANRUNNER_H
