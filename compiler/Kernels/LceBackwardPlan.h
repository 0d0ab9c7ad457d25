//===- LceBackwardPlan.h - the launch-plan parts both backends share -*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_KERNELS_LCEBACKWARDPLAN_H
#define LOSSJIT_COMPILER_KERNELS_LCEBACKWARDPLAN_H

#include "compiler/Kernels/LaunchPlan.h"
#include "compiler/Kernels/LceSpec.h"

namespace lossjit {

/// Where the chunked backward sums dW and db: in place (f32 storage) or in
/// gradient-sized f32 workspaces rounded once at the end (16-bit storage).
struct ChunkedAccumulators {
  std::string dw = "grad_w";
  std::string db = "grad_bias";
  bool separate = false; ///< true when a finish kernel must round them.
};

/// Starts a backward plan of `spec`: params, options, tile text, and the
/// per-row factor workspace "grow" that lce_bwd_scale fills.
void beginBackwardPlan(const LceSpec &spec, llvm::StringRef tile, LaunchPlan &plan);

/// Adds what the chunked schedule needs to `plan`: the budget constant WB,
/// the chunk size C (the budget bounds only the [C,V] dZ chunk and the row
/// factors; the f32 dW accumulator is gradient-sized and kept outside it, or
/// chunks would shrink to one row whenever V·D·4 exceeds the budget), the dZ
/// workspace and, for 16-bit storage, the f32 accumulators.
ChunkedAccumulators addChunkedBackwardPlan(const LceSpec &spec, LaunchPlan &plan);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_LCEBACKWARDPLAN_H
