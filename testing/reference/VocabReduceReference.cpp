//===- VocabReduceReference.cpp -------------------------------------------===//

#include "testing/reference/VocabReduceReference.h"
#include "testing/reference/HalfFloat.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace lossjit;

namespace {
/// One row's raw logits, logits and ∂z/∂raw in double.
struct RowLogits {
  std::vector<double> raw, z, slope;
};

RowLogits rowLogits(const LceProblem &p, int64_t row) {
  RowLogits r;
  r.raw.assign(p.v, 0.0);
  r.z.assign(p.v, 0.0);
  r.slope.assign(p.v, 0.0);
  for (int64_t j = 0; j < p.v; ++j) {
    double acc = p.bias ? elementAsDouble(p.bias, p.dtype, j) : 0.0;
    for (int64_t k = 0; k < p.d; ++k)
      acc += elementAsDouble(p.x, p.dtype, row * p.d + k) *
             elementAsDouble(p.w, p.dtype, j * p.d + k);
    r.raw[j] = acc;
    r.z[j] = referenceLogit(p, acc, &r.slope[j]);
  }
  return r;
}

double weightOf(const std::vector<double> &classWeights, int64_t j) {
  return classWeights.empty() ? 1.0 : classWeights[j];
}

/// The teacher's logits of one row (empty without a teacher).
std::vector<double> teacherLogits(const LceProblem &p, const TeacherProblem &t, int64_t row) {
  std::vector<double> u;
  if (!t.present())
    return u;
  for (int64_t j = 0; j < p.v; ++j) {
    double acc = t.bias.empty() ? 0.0 : t.bias[j];
    for (int64_t k = 0; k < t.t; ++k)
      acc += t.x[row * t.t + k] * t.w[j * t.t + k];
    u.push_back(t.scale * acc);
  }
  return u;
}

/// log Σ exp of a row.
double logSumExp(const std::vector<double> &z) {
  double mx = *std::max_element(z.begin(), z.end()), sum = 0;
  for (double value : z)
    sum += std::exp(value - mx);
  return mx + std::log(sum);
}

int64_t labelOf(const LceProblem &p, int64_t row) {
  return static_cast<int64_t>(elementAsDouble(p.labels, p.labelType, row));
}
} // namespace

std::map<std::string, std::vector<double>>
lossjit::referenceVocabReduce(const LceProblem &p, const std::vector<double> &classWeights,
                              int64_t labelsPerRow, const std::vector<double> &targets,
                              const TeacherProblem &teacher) {
  const int64_t k = labelsPerRow > 0 ? labelsPerRow : 1;
  std::map<std::string, std::vector<double>> out;
  for (const char *name : {"lse", "logit_sum", "entropy", "target_logit_sum", "teacher_lse",
                           "teacher_entropy", "cross_entropy", "reverse_cross_entropy", "jsd",
                           "mixture_kl", "mixture_p2"})
    out[name].assign(p.n, 0.0);
  out["label_logit"].assign(p.n * k, 0.0);
  for (int64_t row = 0; row < p.n; ++row) {
    RowLogits r = rowLogits(p, row);
    double mx = *std::max_element(r.z.begin(), r.z.end());
    double sum = 0, zsum = 0, tsum = 0;
    for (int64_t j = 0; j < p.v; ++j) {
      sum += std::exp(r.z[j] - mx);
      zsum += weightOf(classWeights, j) * r.z[j];
      if (!targets.empty())
        tsum += weightOf(classWeights, j) * targets[row * p.v + j] * r.z[j];
    }
    out["target_logit_sum"][row] = tsum;
    double lse = mx + std::log(sum), entropy = 0;
    for (int64_t j = 0; j < p.v; ++j) {
      double logp = r.z[j] - lse;
      entropy -= std::exp(logp) * logp;
    }
    out["lse"][row] = lse;
    out["logit_sum"][row] = zsum;
    out["entropy"][row] = entropy;
    std::vector<double> u = teacherLogits(p, teacher, row);
    if (!u.empty()) {
      double lseT = logSumExp(u), entropyT = 0, cross = 0, reverse = 0;
      for (int64_t j = 0; j < p.v; ++j) {
        double logq = u[j] - lseT, logp = r.z[j] - lse;
        entropyT -= std::exp(logq) * logq;
        cross -= std::exp(logq) * logp;
        reverse -= std::exp(logp) * logq;
      }
      out["teacher_lse"][row] = lseT;
      out["teacher_entropy"][row] = entropyT;
      out["cross_entropy"][row] = cross;
      out["reverse_cross_entropy"][row] = reverse;
      // The definitions: KL(q‖M) and KL(p‖M) over the mixture.
      double klTeacher = 0, klStudent = 0, square = 0;
      for (int64_t j = 0; j < p.v; ++j) {
        double q = std::exp(u[j] - lseT), prob = std::exp(r.z[j] - lse);
        double mix = teacher.beta * q + (1 - teacher.beta) * prob;
        if (q > 0)
          klTeacher += q * std::log(q / mix);
        if (prob > 0) {
          klStudent += prob * std::log(prob / mix);
          square += prob * prob / mix;
        }
      }
      out["jsd"][row] = teacher.beta * klTeacher + (1 - teacher.beta) * klStudent;
      out["mixture_kl"][row] = klStudent;
      out["mixture_p2"][row] = square;
    }
    if (!p.labels)
      continue;
    for (int64_t i = row * k; i < (row + 1) * k; ++i) {
      int64_t label = labelOf(p, i);
      out["label_logit"][i] = label == p.ignoreIndex ? 0.0
                              : label >= 0 && label < p.v
                                  ? r.z[label]
                                  : std::numeric_limits<double>::quiet_NaN();
    }
  }
  return out;
}

LceGradReference
lossjit::referenceVocabReduceGrad(const LceProblem &p, const std::vector<double> &classWeights,
                                  const std::map<std::string, std::vector<double>> &adjoints,
                                  int64_t labelsPerRow, const std::vector<double> &targets,
                                  const TeacherProblem &teacher) {
  const int64_t k = labelsPerRow > 0 ? labelsPerRow : 1;
  auto adjoint = [&](const char *name, int64_t at) {
    auto it = adjoints.find(name);
    return it == adjoints.end() ? 0.0 : it->second[at];
  };
  LceGradReference g;
  g.gradX.assign(p.n * p.d, 0.0);
  g.gradW.assign(p.v * p.d, 0.0);
  g.gradBias.assign(p.v, 0.0);
  std::map<std::string, std::vector<double>> stats =
      referenceVocabReduce(p, classWeights, labelsPerRow, targets, teacher);
  for (int64_t row = 0; row < p.n; ++row) {
    RowLogits r = rowLogits(p, row);
    double lse = stats["lse"][row], entropy = stats["entropy"][row];
    std::vector<double> u = teacherLogits(p, teacher, row);
    for (int64_t j = 0; j < p.v; ++j) {
      double logp = r.z[j] - lse, prob = std::exp(logp);
      double dz = adjoint("lse", row) * prob +
                  adjoint("logit_sum", row) * weightOf(classWeights, j) -
                  adjoint("entropy", row) * prob * (logp + entropy);
      if (!targets.empty())
        dz += adjoint("target_logit_sum", row) * weightOf(classWeights, j) *
              targets[row * p.v + j];
      if (!u.empty()) {
        // The teacher is not differentiated: only the cross-entropies reach z.
        double logq = u[j] - stats["teacher_lse"][row], q = std::exp(logq);
        dz += adjoint("cross_entropy", row) * (prob - q) -
              adjoint("reverse_cross_entropy", row) * prob *
                  (logq + stats["reverse_cross_entropy"][row]);
        // ∂jsd/∂z_j = (1 − β) p_j (log(p_j / M_j) − KL(p‖M)); ∂KL(p‖M)/∂z_j
        // = p_j (log(p_j / M_j) − (1 − β) p_j / M_j − KL(p‖M) + (1 − β) Σ p²/M).
        double mix = teacher.beta * q + (1 - teacher.beta) * prob;
        double kl = stats["mixture_kl"][row], square = stats["mixture_p2"][row];
        if (prob > 0)
          dz += adjoint("jsd", row) * (1 - teacher.beta) * prob * (std::log(prob / mix) - kl) +
                adjoint("mixture_kl", row) * prob *
                    (std::log(prob / mix) - (1 - teacher.beta) * prob / mix - kl +
                     (1 - teacher.beta) * square);
      }
      if (p.labels)
        for (int64_t i = row * k; i < (row + 1) * k; ++i)
          if (labelOf(p, i) == j)
            dz += adjoint("label_logit", i);
      double draw = dz * r.slope[j];
      for (int64_t k = 0; k < p.d; ++k) {
        g.gradX[row * p.d + k] += draw * elementAsDouble(p.w, p.dtype, j * p.d + k);
        g.gradW[j * p.d + k] += draw * elementAsDouble(p.x, p.dtype, row * p.d + k);
      }
      g.gradBias[j] += draw;
    }
  }
  return g;
}
