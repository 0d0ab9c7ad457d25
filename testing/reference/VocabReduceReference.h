//===- VocabReduceReference.h - fp64 reference of the row statistics -*- C++ -*-===//
//
// The oracle of loss.vocab_reduce and its derived backward, written from the
// definitions (research: fused_loss_families §2.2), not from the kernels:
// the logits z = softcap(scale · (x·w + b)) in double, then per row
//   lse = log Σ exp z,  label_logit = z_y (0 ignored, NaN out of range),
//   logit_sum = Σ c_j z_j,  entropy = −Σ p log p;
// and for given adjoints ḡ the gradient dz_j = ḡ_lse p_j + ḡ_label [j = y]
// + ḡ_sum c_j − ḡ_H p_j (log p_j + H), chained through ∂z/∂raw into dX, dW,
// db.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_REFERENCE_VOCABREDUCEREFERENCE_H
#define LOSSJIT_TESTING_REFERENCE_VOCABREDUCEREFERENCE_H

#include "testing/reference/Reference.h"

#include <map>
#include <string>
#include <vector>

namespace lossjit {

/// A teacher stream for the oracle: u = scale · (x'·w'ᵀ + b'), x' [N, T],
/// w' [V, T], b' [V] (empty for none), as doubles.
struct TeacherProblem {
  std::vector<double> x, w, bias;
  int64_t t = 0;
  double scale = 1.0;
  /// β of the mixture M = β q + (1 − β) p (jsd, mixture_kl).
  double beta = 0.5;
  bool present() const { return t > 0; }
};

/// Row statistics by name ("lse", "label_logit", "logit_sum", "entropy"),
/// each [N] (label_logit [N, K] with `labelsPerRow` = K > 0: p.labels then
/// holds N·K labels). `classWeights` is [V] or empty (weights 1). Uses p's
/// inputs, labels, ignoreIndex and logit transforms; p.labels may be null
/// when label_logit is not asked for.
/// `targets` [N, V] (or empty) are read by target_logit_sum = Σ_j c_j t_j z_j;
/// `teacher` by teacher_lse, teacher_entropy, cross_entropy (−Σ q log p) and
/// reverse_cross_entropy (−Σ p log q), q the teacher's softmax, and jsd
/// (β KL(q‖M) + (1 − β) KL(p‖M)), mixture_kl (KL(p‖M)) and mixture_p2
/// (Σ p²/M), M = β q + (1 − β) p.
std::map<std::string, std::vector<double>>
referenceVocabReduce(const LceProblem &p, const std::vector<double> &classWeights,
                     int64_t labelsPerRow = 0, const std::vector<double> &targets = {},
                     const TeacherProblem &teacher = {});

/// dX, dW, db of Σ_i Σ_k adjoints[k][i] · stat_k(i): `adjoints` by
/// statistic name, each shaped like the statistic (missing names are 0).
LceGradReference
referenceVocabReduceGrad(const LceProblem &p, const std::vector<double> &classWeights,
                         const std::map<std::string, std::vector<double>> &adjoints,
                         int64_t labelsPerRow = 0, const std::vector<double> &targets = {},
                         const TeacherProblem &teacher = {});

} // namespace lossjit

#endif // LOSSJIT_TESTING_REFERENCE_VOCABREDUCEREFERENCE_H
