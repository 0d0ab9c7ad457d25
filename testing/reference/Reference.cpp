//===- Reference.cpp ------------------------------------------------------===//

#include "testing/reference/Reference.h"
#include "testing/reference/HalfFloat.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

using namespace lossjit;

double lossjit::referenceLogit(const LceProblem &p, double raw, double *dzdraw) {
  double scaled = p.logitScale * raw;
  if (p.softcap <= 0) {
    if (dzdraw)
      *dzdraw = p.logitScale;
    return scaled;
  }
  double u = scaled / p.softcap;
  if (dzdraw) {
    double c = std::cosh(u); // sech² = 1/cosh²: no 1 − tanh² cancellation
    *dzdraw = p.logitScale / (c * c);
  }
  return p.softcap * std::tanh(u);
}

LceReference lossjit::referenceLinearCrossEntropy(const LceProblem &p,
                                                  unsigned threads) {
  LceReference r;
  r.lse.assign(p.n, 0.0);
  r.rowLoss.assign(p.n, 0.0);
  std::vector<double> w(p.v * p.d), b(p.v, 0.0);
  for (int64_t i = 0; i < p.v * p.d; ++i)
    w[i] = elementAsDouble(p.w, p.dtype, i);
  if (p.bias)
    for (int64_t j = 0; j < p.v; ++j)
      b[j] = elementAsDouble(p.bias, p.dtype, j);
  auto rows = [&](int64_t begin, int64_t end) {
    std::vector<double> x(p.d), z(p.v);
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t k = 0; k < p.d; ++k)
        x[k] = elementAsDouble(p.x, p.dtype, row * p.d + k);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.v; ++j) {
        double acc = b[j];
        const double *wj = &w[j * p.d];
        for (int64_t k = 0; k < p.d; ++k)
          acc += x[k] * wj[k];
        z[j] = referenceLogit(p, acc);
        mx = std::max(mx, z[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < p.v; ++j)
        sum += std::exp(z[j] - mx);
      double lse = mx + std::log(sum);
      r.lse[row] = lse;
      auto label = static_cast<int64_t>(elementAsDouble(p.labels, p.labelType, row));
      if (label == p.ignoreIndex)
        r.rowLoss[row] = 0;
      else if (label < 0 || label >= p.v)
        r.rowLoss[row] = std::numeric_limits<double>::quiet_NaN();
      else
        r.rowLoss[row] = lse - z[label];
    }
  };
  std::vector<std::thread> pool;
  int64_t chunk = (p.n + threads - 1) / std::max(1u, threads);
  for (unsigned t = 0; t < threads; ++t) {
    int64_t begin = std::min<int64_t>(p.n, t * chunk), end = std::min<int64_t>(p.n, begin + chunk);
    if (begin < end)
      pool.emplace_back(rows, begin, end);
  }
  for (auto &t : pool)
    t.join();
  double total = 0;
  for (int64_t row = 0; row < p.n; ++row) {
    total += r.rowLoss[row];
    if (static_cast<int64_t>(elementAsDouble(p.labels, p.labelType, row)) != p.ignoreIndex)
      ++r.counted;
  }
  r.loss = p.reduction == "mean" ? total / static_cast<double>(r.counted) : total;
  if (p.reduction == "mean" && r.counted == 0)
    r.loss = std::numeric_limits<double>::quiet_NaN();
  return r;
}

LceGradReference lossjit::referenceLinearCrossEntropyGrad(
    const LceProblem &p, const std::vector<double> &gradLoss, unsigned threads) {
  (void)threads;
  return referenceLinearCrossEntropyGrad(p, gradLoss, std::vector<double>());
}

LceGradReference lossjit::referenceLinearCrossEntropyGrad(const LceProblem &p,
                                                          const std::vector<double> &gradLoss,
                                                          const std::vector<double> &gradLse) {
  LceReference fwd = referenceLinearCrossEntropy(p);
  LceGradReference r;
  r.gradX.assign(p.n * p.d, 0.0);
  r.gradW.assign(p.v * p.d, 0.0);
  r.gradBias.assign(p.v, 0.0);
  std::vector<double> x(p.n * p.d), w(p.v * p.d), b(p.v, 0.0), g(p.n, 0.0);
  for (int64_t i = 0; i < p.n * p.d; ++i)
    x[i] = elementAsDouble(p.x, p.dtype, i);
  for (int64_t i = 0; i < p.v * p.d; ++i)
    w[i] = elementAsDouble(p.w, p.dtype, i);
  if (p.bias)
    for (int64_t j = 0; j < p.v; ++j)
      b[j] = elementAsDouble(p.bias, p.dtype, j);
  std::vector<int64_t> labels(p.n);
  for (int64_t row = 0; row < p.n; ++row) {
    labels[row] = static_cast<int64_t>(elementAsDouble(p.labels, p.labelType, row));
    if (labels[row] == p.ignoreIndex)
      continue;
    if (p.reduction == "none")
      g[row] = gradLoss[row];
    else if (p.reduction == "sum")
      g[row] = gradLoss[0];
    else
      g[row] = gradLoss[0] / static_cast<double>(fwd.counted);
  }
  // dRaw row by row (raw = x·w + b, so it is also dBias); dX rows are
  // independent, dW sums over rows.
  std::vector<double> dz(p.v);
  for (int64_t row = 0; row < p.n; ++row) {
    double a = gradLse.empty() ? 0.0 : gradLse[row];
    if (g[row] == 0 && a == 0)
      continue;
    for (int64_t j = 0; j < p.v; ++j) {
      double z = b[j];
      for (int64_t k = 0; k < p.d; ++k)
        z += x[row * p.d + k] * w[j * p.d + k];
      double dzdraw = 1;
      double logit = referenceLogit(p, z, &dzdraw);
      double softmax = std::exp(logit - fwd.lse[row]);
      dz[j] = (g[row] * (softmax - (labels[row] == j ? 1.0 : 0.0)) + a * softmax) * dzdraw;
    }
    for (int64_t j = 0; j < p.v; ++j) {
      r.gradBias[j] += dz[j];
      for (int64_t k = 0; k < p.d; ++k) {
        r.gradX[row * p.d + k] += dz[j] * w[j * p.d + k];
        r.gradW[j * p.d + k] += dz[j] * x[row * p.d + k];
      }
    }
  }
  return r;
}

double lossjit::relativeL2Error(const void *got, const std::string &dtype,
                                const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double diff = elementAsDouble(got, dtype, static_cast<int64_t>(i)) - want[i];
    num += diff * diff;
    den += want[i] * want[i];
  }
  if (den == 0)
    return std::sqrt(num);
  return std::sqrt(num / den);
}

void lossjit::makeRandomLceInputs(const RandomLceOptions &o, RandomLceInputs &out) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // z = Σ_k x_k w_k has std ≈ sx·sw·sqrt(D); choose sx = 1, sw = scale/sqrt(D).
  float sw = static_cast<float>(o.logitScale / std::sqrt(std::max<int64_t>(1, o.d)));
  auto fill = [&](std::vector<uint16_t> &h, std::vector<float> &f, int64_t count,
                  float scale) {
    f.resize(count);
    for (float &value : f)
      value = normal(rng) * scale;
    if (o.dtype == "f32" || o.dtype == "f64")
      return;
    h.resize(count);
    for (int64_t i = 0; i < count; ++i)
      h[i] = o.dtype == "f16" ? floatToHalf(f[i]) : floatToBfloat16(f[i]);
  };
  fill(out.x16, out.x32, o.n * o.d, 1.0f);
  fill(out.w16, out.w32, o.v * o.d, sw);
  if (o.bias)
    fill(out.b16, out.b32, o.v, 1.0f);
  if (o.dtype == "f64") {
    // The same draws, with low bits of their own: f64 data that is not
    // merely widened f32.
    std::uniform_real_distribution<double> jitter(-0.5, 0.5);
    auto widen = [&](const std::vector<float> &f, std::vector<double> &d) {
      d.resize(f.size());
      for (size_t i = 0; i < f.size(); ++i)
        d[i] = f[i] * (1.0 + 0x1p-30 * jitter(rng));
    };
    widen(out.x32, out.x64);
    widen(out.w32, out.w64);
    widen(out.b32, out.b64);
  }
  std::uniform_int_distribution<int64_t> label(0, std::max<int64_t>(0, o.v - 1));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  out.labels64.resize(o.n);
  out.labels32.resize(o.n);
  for (int64_t i = 0; i < o.n; ++i) {
    int64_t l = unit(rng) < o.ignoredFraction ? o.ignoreIndex : label(rng);
    out.labels64[i] = l;
    out.labels32[i] = static_cast<int32_t>(l);
  }
  LceProblem &p = out.problem;
  auto stored = [&](const std::vector<uint16_t> &h, const std::vector<float> &f,
                    const std::vector<double> &d) -> const void * {
    if (o.dtype == "f64")
      return d.data();
    return o.dtype == "f32" ? static_cast<const void *>(f.data()) : h.data();
  };
  p.x = stored(out.x16, out.x32, out.x64);
  p.w = stored(out.w16, out.w32, out.w64);
  p.bias = o.bias ? stored(out.b16, out.b32, out.b64) : nullptr;
  p.labels = o.labelType == "i32" ? static_cast<const void *>(out.labels32.data())
                                  : out.labels64.data();
  p.dtype = o.dtype;
  p.labelType = o.labelType;
  p.n = o.n;
  p.v = o.v;
  p.d = o.d;
  p.ignoreIndex = o.ignoreIndex;
  p.reduction = o.reduction;
}
