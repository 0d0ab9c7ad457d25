//===- ReferenceKernels.h - Naive CUDA C++ references via NVRTC -*- C++ -*-===//
//
// An independent second answer for GPU tests of the MLIR-generated kernels:
// the fused linear + cross-entropy forward written as plainly as possible in
// CUDA C++ (one block per row, fp32 math, fixed-order reductions) and
// compiled through NVRTC, so it shares no code with the compiler under test.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_REFERENCE_REFERENCEKERNELS_H
#define LOSSJIT_TESTING_REFERENCE_REFERENCEKERNELS_H

#include "runtime/KernelBundle.h"
#include "runtime/Nvrtc.h"
#include "runtime/Status.h"

#include <cstdint>
#include <string>

namespace lossjit::runtime {

/// Per-row forward kernel: lse[n] and loss_rows[n] (0 for ignored rows, NaN
/// for labels outside [0, V)).
inline constexpr const char *kReferenceForwardKernel = "lossjit_reference_forward";
/// Single-block mean over non-ignored rows (NaN when every row is ignored,
/// like PyTorch).
inline constexpr const char *kReferenceMeanKernel = "lossjit_reference_mean";

/// What the reference kernels are specialized on.
struct ReferenceKernelOptions {
  /// Storage type of x, w and bias: "f16", "bf16" or "f32".
  std::string dtype = "f32";
  /// "i64" or "i32".
  std::string labelType = "i64";
  bool bias = false;
  int64_t ignoreIndex = -100;
  /// Threads per block: a power of two in [32, 1024].
  unsigned threads = 256;
  /// Pointers: plain C pointers,
  ///   forward(const S* x, const S* w, const S* bias /*may be null*/,
  ///           const L* labels, float* lse, float* loss_rows,
  ///           int64 N, int64 V, int64 D)   grid (N), block (threads)
  ///   mean(const L* labels, const float* loss_rows, float* loss, int64 N)
  ///                                        grid (1), block (threads)
  /// Memref: the bundle ABI (each buffer is a 5-field memref descriptor, the
  /// bias argument exists only when `bias` is set), for launching through
  /// CudaLauncher exactly like compiler output.
  enum class Abi { Pointers, Memref } abi = Abi::Pointers;
};

/// The CUDA C++ source of both kernels; errors name a bad option.
Expected<std::string> referenceKernelSource(const ReferenceKernelOptions &options);

/// Compiles the Memref-ABI source for `arch` and wraps it as a bundle with
/// params x, w, [bias], labels, loss (scalar mean), lse; dims N, V, D; a
/// loss_rows workspace; and the two kernels. Mirrors the compiler's bundles so
/// the launcher path is exercised end to end.
Expected<KernelBundle> buildReferenceBundle(const Nvrtc &nvrtc,
                                            ReferenceKernelOptions options,
                                            const std::string &arch);

} // namespace lossjit::runtime

#endif // LOSSJIT_TESTING_REFERENCE_REFERENCEKERNELS_H
