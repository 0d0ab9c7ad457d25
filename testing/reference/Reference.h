//===- Reference.h - fp64 reference of linear cross-entropy -----*- C++ -*-===//
//
// The answer every kernel is checked against: F.cross_entropy(F.linear(x, w,
// b).float(), y, ...) evaluated in double precision from the same rounded
// storage values the kernels read.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_REFERENCE_REFERENCE_H
#define LOSSJIT_TESTING_REFERENCE_REFERENCE_H

#include <cstdint>
#include <string>
#include <vector>

namespace lossjit {

/// Host inputs of one linear-cross-entropy problem (C-ordered buffers).
struct LceProblem {
  const void *x = nullptr;      ///< [N, D] of dtype.
  const void *w = nullptr;      ///< [V, D] of dtype.
  const void *bias = nullptr;   ///< [V] of dtype, or null.
  const void *labels = nullptr; ///< [N] of labelType.
  std::string dtype = "f32";    ///< f16, bf16, f32, f64.
  std::string labelType = "i64";
  int64_t n = 0, v = 0, d = 0;
  int64_t ignoreIndex = -100;
  std::string reduction = "mean";
  /// Logit transforms of the fused op: z = softcap(logitScale · raw) with
  /// raw = x·w + b and softcap(u) = c·tanh(u / c) for softcap = c > 0 (0:
  /// none). (Not RandomLceOptions::logitScale, the magnitude of raw inputs.)
  double logitScale = 1.0;
  double softcap = 0.0;
};

/// z = softcap(logitScale · raw) of `p`, and ∂z/∂raw in `dzdraw` if given.
double referenceLogit(const LceProblem &p, double raw, double *dzdraw = nullptr);

struct LceReference {
  std::vector<double> lse;     ///< [N]
  std::vector<double> rowLoss; ///< [N]: 0 ignored, NaN label out of range.
  double loss = 0;             ///< mean or sum (unused for none).
  int64_t counted = 0;         ///< rows not ignored.
};

/// Evaluates the problem in fp64 (rows split over `threads` host threads).
LceReference referenceLinearCrossEntropy(const LceProblem &p,
                                         unsigned threads = 2);

/// Gradients of the loss in fp64 (the analytic gradient of the fp64 loss).
struct LceGradReference {
  std::vector<double> gradX; ///< [N, D]
  std::vector<double> gradW; ///< [V, D]
  std::vector<double> gradBias; ///< [V] (zeros without a bias)
};

/// dRaw = g_r·(softmax(z) − onehot)·∂z/∂raw (the chain rule through the
/// logit transforms) with g_r from `gradLoss` (1 value for mean/sum, N for
/// none) and the reduction; ignored rows contribute 0.
LceGradReference referenceLinearCrossEntropyGrad(const LceProblem &p,
                                                 const std::vector<double> &gradLoss,
                                                 unsigned threads = 2);
/// The same with a gradient reaching lse as well (`gradLse`, one per row:
/// ∂lse/∂z_j = softmax_j, for every row, ignored ones included).
LceGradReference referenceLinearCrossEntropyGrad(const LceProblem &p,
                                                 const std::vector<double> &gradLoss,
                                                 const std::vector<double> &gradLse);

/// ‖got − want‖₂ / ‖want‖₂ (0 when both are 0); `got` read as `dtype`.
double relativeL2Error(const void *got, const std::string &dtype,
                       const std::vector<double> &want);

/// Owned random inputs for tests, the demo and the runner.
struct RandomLceInputs {
  std::vector<uint16_t> x16, w16, b16; ///< storage for f16/bf16.
  std::vector<float> x32, w32, b32;    ///< storage for f32.
  std::vector<double> x64, w64, b64;   ///< storage for f64 (the f32 draws widened).
  std::vector<int64_t> labels64;
  std::vector<int32_t> labels32;
  LceProblem problem; ///< points into the vectors above.
};

/// Options of the random generator.
struct RandomLceOptions {
  int64_t n = 8, v = 100, d = 32;
  std::string dtype = "f16", labelType = "i64", reduction = "mean";
  bool bias = false;
  int64_t ignoreIndex = -100;
  double ignoredFraction = 0.0; ///< rows whose label is ignore_index.
  double logitScale = 4.0;      ///< typical |z| of the logits.
  uint64_t seed = 1;
};

/// Normal x, w scaled so logits have magnitude ≈ logitScale; labels uniform.
void makeRandomLceInputs(const RandomLceOptions &options, RandomLceInputs &out);

} // namespace lossjit

#endif // LOSSJIT_TESTING_REFERENCE_REFERENCE_H
