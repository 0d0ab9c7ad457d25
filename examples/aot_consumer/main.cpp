// aot_consumer: a C++ engine's view of lossjit. It includes the header that
// lossjit-aot generated, runs the fused linear + cross-entropy kernels on
// random inputs through the C API, and compares every output with an fp64
// reference computed here on the CPU from the same (rounded) inputs.
//
//   aot_consumer [--allow-no-gpu] [--arch NAME|auto|all] [--seed S]
//                [--shape N,V,D ...] [--quiet]
//
// --arch all (the default) runs every embedded image the device can run
// (e.g. sm_80 PTX and sm_90 PTX on an H100), auto only the one lce_create
// picks. Exit status: 0 all checks passed, 1 a check failed, 2 no usable
// GPU (0 with --allow-no-gpu), 3 bad usage.

#include "lce.h"

#include <cuda.h>

// The header defines the macros of its own variant only.
#ifndef LCE_DTYPE_F16
#define LCE_DTYPE_F16 0
#endif
#ifndef LCE_DTYPE_BF16
#define LCE_DTYPE_BF16 0
#endif
#ifndef LCE_LABEL_I32
#define LCE_LABEL_I32 0
#endif
#ifndef LCE_REDUCTION_NONE
#define LCE_REDUCTION_NONE 0
#endif
#ifndef LCE_REDUCTION_MEAN
#define LCE_REDUCTION_MEAN 0
#endif
// Headers of lossjit-aot before the fused op's macro have no fused op.
#ifndef LCE_HAS_FORWARD_BACKWARD
#define LCE_HAS_FORWARD_BACKWARD 0
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

bool quiet = false;
int failures = 0, checks = 0;

// ------------------------------------------------------------ host numbers

#if LCE_DTYPE_F16
const char *kDtype = "f16";
#elif LCE_DTYPE_BF16
const char *kDtype = "bf16";
#else
const char *kDtype = "f32";
#endif

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t toHalf(float f) {
  uint32_t x = bitsOf(f), sign = (x >> 16) & 0x8000u;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff)
    return uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31)
    return uint16_t(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10)
      return uint16_t(sign);
    mant |= 0x800000u;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1)))
      ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13), rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
    ++half; // may carry into the exponent: still correct rounding
  return uint16_t(half);
}
float fromHalf(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0) {
    if (!mant)
      return floatOf(sign);
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31)
    return floatOf(sign | 0x7f800000u | (mant << 13));
  return floatOf(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
uint16_t toBf16(float f) {
  uint32_t x = bitsOf(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}
float fromBf16(uint16_t h) { return floatOf(uint32_t(h) << 16); }

/// Values in the storage dtype: bytes for the device, exact values for the
/// reference.
struct Stored {
  std::vector<unsigned char> bytes;
  std::vector<double> values;
};

Stored store(const std::vector<float> &v) {
  Stored s;
  size_t width = std::strcmp(kDtype, "f32") == 0 ? 4 : 2;
  s.bytes.resize(v.size() * width);
  s.values.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (width == 4) {
      std::memcpy(&s.bytes[i * 4], &v[i], 4);
      s.values[i] = v[i];
    } else {
      uint16_t h = std::strcmp(kDtype, "f16") == 0 ? toHalf(v[i]) : toBf16(v[i]);
      std::memcpy(&s.bytes[i * 2], &h, 2);
      s.values[i] = std::strcmp(kDtype, "f16") == 0 ? fromHalf(h) : fromBf16(h);
    }
  }
  return s;
}

[[maybe_unused]] std::vector<double> load(const std::vector<unsigned char> &bytes) {
  size_t width = std::strcmp(kDtype, "f32") == 0 ? 4 : 2;
  std::vector<double> v(bytes.size() / width);
  for (size_t i = 0; i < v.size(); ++i) {
    if (width == 4) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      v[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      v[i] = std::strcmp(kDtype, "f16") == 0 ? fromHalf(h) : fromBf16(h);
    }
  }
  return v;
}

// ------------------------------------------------------------- reference

/// F.cross_entropy(F.linear(x, w, b).double(), y, ignore_index, reduction)
/// and its gradient, in fp64.
struct Reference {
  std::vector<double> lse, rowLoss, loss; // loss: 1 value, or N for 'none'
  std::vector<double> gradX, gradW, gradBias;
};

Reference reference(const std::vector<double> &x, const std::vector<double> &w,
                    const std::vector<double> *bias, const std::vector<int64_t> &labels,
                    const std::vector<double> &gradLoss, int64_t N, int64_t V, int64_t D,
                    bool backward) {
  Reference r;
  r.lse.resize(N);
  r.rowLoss.assign(N, 0.0);
  if (backward) {
    r.gradX.assign(N * D, 0.0);
    r.gradW.assign(V * D, 0.0);
    r.gradBias.assign(V, 0.0);
  }
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n)
    count += labels[n] != LCE_IGNORE_INDEX;
  std::vector<double> z(V);
  for (int64_t n = 0; n < N; ++n) {
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double acc = bias ? (*bias)[v] : 0.0;
      for (int64_t d = 0; d < D; ++d)
        acc += x[n * D + d] * w[v * D + d];
      z[v] = acc;
      m = std::max(m, acc);
    }
    double s = 0;
    for (int64_t v = 0; v < V; ++v)
      s += std::exp(z[v] - m);
    r.lse[n] = m + std::log(s);
    bool ignored = labels[n] == LCE_IGNORE_INDEX;
    if (!ignored)
      r.rowLoss[n] = r.lse[n] - z[labels[n]];
    if (!backward || ignored)
      continue;
#if LCE_REDUCTION_NONE
    double g = gradLoss[n];
#elif LCE_REDUCTION_MEAN
    double g = gradLoss[0] / double(count);
#else
    double g = gradLoss[0];
#endif
    for (int64_t v = 0; v < V; ++v) {
      double dz = g * (std::exp(z[v] - r.lse[n]) - (v == labels[n] ? 1.0 : 0.0));
      for (int64_t d = 0; d < D; ++d) {
        r.gradX[n * D + d] += dz * w[v * D + d];
        r.gradW[v * D + d] += dz * x[n * D + d];
      }
      r.gradBias[v] += dz;
    }
  }
#if LCE_REDUCTION_NONE
  r.loss = r.rowLoss;
#else
  double total = 0;
  for (double l : r.rowLoss)
    total += l;
#if LCE_REDUCTION_MEAN
  total /= double(count);
#endif
  r.loss = {total};
#endif
  (void)count;
  return r;
}

// ------------------------------------------------------------------ checks

void check(bool ok, const std::string &what) {
  ++checks;
  if (!ok)
    ++failures;
  if (!ok || !quiet)
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
}

/// max |out - ref| / (atol + rtol |ref|) <= 1, NaN fails.
void checkClose(const std::vector<double> &out, const std::vector<double> &ref, double atol,
                double rtol, const std::string &what) {
  double worst = 0;
  size_t at = 0;
  bool nan = false;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i]))
      nan = true;
    double e = std::fabs(out[i] - ref[i]) / (atol + rtol * std::fabs(ref[i]));
    if (e > worst || std::isnan(e)) {
      worst = std::isnan(e) ? INFINITY : e;
      at = i;
    }
  }
  char text[256];
  std::snprintf(text, sizeof text, " (worst %.3g of tolerance at %zu: %.9g vs %.9g)", worst, at,
                ref.empty() ? 0.0 : out[at], ref.empty() ? 0.0 : ref[at]);
  check(!nan && worst <= 1.0, what + text);
}

/// ||out - ref|| / ||ref|| <= tol (the norm-wise error low-precision
/// outputs are judged by).
[[maybe_unused]] void checkNorm(const std::vector<double> &out, const std::vector<double> &ref, double tol,
               const std::string &what) {
  double num = 0, den = 0;
  bool finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    finite = finite && std::isfinite(out[i]);
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  char text[128];
  std::snprintf(text, sizeof text, " (relative error %.3g, tolerance %.1g)", rel, tol);
  check(finite && rel <= tol, what + text);
}

// ------------------------------------------------------------------ device

#define CU(call)                                                                             \
  do {                                                                                       \
    CUresult r_ = (call);                                                                    \
    if (r_ != CUDA_SUCCESS) {                                                                \
      const char *n_ = nullptr;                                                              \
      cuGetErrorName(r_, &n_);                                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,              \
                   n_ ? n_ : "?");                                                           \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n)
      CU(cuMemAlloc(&ptr, n));
  }
  ~DeviceBuffer() {
    if (ptr)
      cuMemFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void upload(const void *data) {
    if (bytes)
      CU(cuMemcpyHtoD(ptr, data, bytes));
  }
  template <typename T> std::vector<T> download() const {
    std::vector<T> v(bytes / sizeof(T));
    if (bytes)
      CU(cuMemcpyDtoH(v.data(), ptr, bytes));
    return v;
  }
  /// NaN bytes: whatever a kernel fails to write shows up.
  void poison() {
    if (bytes)
      CU(cuMemsetD8(ptr, 0xff, bytes));
  }
};

std::vector<double> toDouble(const std::vector<float> &v) { return {v.begin(), v.end()}; }

void expectStatus(lce_status got, lce_status want, const std::string &what) {
  check(got == want, what + ": " + lce_status_string(got) +
                         (got == LCE_SUCCESS ? "" : std::string(" (") + lce_last_error() + ")"));
}

/// Norm-wise tolerance of gradients stored in the storage dtype.
[[maybe_unused]] double gradTolerance() {
  return std::strcmp(kDtype, "f32") == 0 ? 1e-4 : std::strcmp(kDtype, "f16") == 0 ? 5e-3 : 2e-2;
}

#if LCE_HAS_FORWARD_BACKWARD
/// The fused forward+backward (lossjit-aot --fused): loss, lse and the
/// gradients of grad_loss = 1 from one call, twice (allocator, then the
/// caller's workspace; bitwise equal), against the fp64 reference whose
/// gradients were taken for grad_loss = `refGradLoss` (they scale linearly).
void runFused(lce_handle *h, CUstream stream, const std::string &tag, const Reference &ref,
              double refGradLoss, CUdeviceptr x, CUdeviceptr w, [[maybe_unused]] CUdeviceptr bias,
              CUdeviceptr labels, size_t xBytes, size_t wBytes, size_t biasBytes, int64_t N,
              int64_t V, int64_t D) {
  DeviceBuffer loss(4), lse(N * 4), gx(xBytes), gw(wBytes), gb(biasBytes), loss2(4), lse2(N * 4),
      gx2(xBytes), gw2(wBytes), gb2(biasBytes);
  for (DeviceBuffer *b : {&loss, &lse, &gx, &gw, &gb, &loss2, &lse2, &gx2, &gw2, &gb2})
    b->poison();
  size_t wsBytes = lce_forward_backward_workspace_bytes(N, V, D);
  check(wsBytes != size_t(-1), tag + " fused: workspace size");
  DeviceBuffer ws(wsBytes);
#if LCE_HAS_BIAS
#define LCE_FUSED_BIAS_ARG bias,
#define LCE_FUSED_GRAD_BIAS_ARG(g) g.ptr,
#else
#define LCE_FUSED_BIAS_ARG
#define LCE_FUSED_GRAD_BIAS_ARG(g)
#endif
  expectStatus(lce_forward_backward(h, stream, x, w, labels, LCE_FUSED_BIAS_ARG loss.ptr, lse.ptr,
                                    gx.ptr, gw.ptr, LCE_FUSED_GRAD_BIAS_ARG(gb) N, V, D, 0, 0),
               LCE_SUCCESS, tag + " fused forward+backward (allocator)");
  expectStatus(lce_forward_backward(h, stream, x, w, labels, LCE_FUSED_BIAS_ARG loss2.ptr, lse2.ptr,
                                    gx2.ptr, gw2.ptr, LCE_FUSED_GRAD_BIAS_ARG(gb2) N, V, D, ws.ptr,
                                    ws.bytes),
               LCE_SUCCESS, tag + " fused forward+backward (workspace)");
  CU(cuStreamSynchronize(stream));
  auto bytesOf = [](const DeviceBuffer &b) { return b.download<unsigned char>(); };
  check(bytesOf(loss) == bytesOf(loss2) && bytesOf(lse) == bytesOf(lse2) &&
            bytesOf(gx) == bytesOf(gx2) && bytesOf(gw) == bytesOf(gw2) &&
            bytesOf(gb) == bytesOf(gb2),
        tag + " fused forward+backward is bitwise deterministic");
  checkClose(toDouble(lse.download<float>()), ref.lse, 1e-4, 1e-4, tag + " fused lse");
  checkClose(toDouble(loss.download<float>()), ref.loss, 1e-4, 1e-4, tag + " fused loss");
  auto scaled = [&](const std::vector<double> &g) {
    std::vector<double> out(g.size());
    for (size_t i = 0; i < g.size(); ++i)
      out[i] = g[i] / refGradLoss;
    return out;
  };
  checkNorm(load(bytesOf(gx)), scaled(ref.gradX), gradTolerance(), tag + " fused grad_x");
  checkNorm(load(bytesOf(gw)), scaled(ref.gradW), gradTolerance(), tag + " fused grad_w");
#if LCE_HAS_BIAS
  checkNorm(load(bytesOf(gb)), scaled(ref.gradBias), gradTolerance(), tag + " fused grad_bias");
#endif
}
#endif

/// One shape on one handle: forward (twice, bitwise equal, both workspace
/// modes), then backward and the fused op when the header has them.
void runShape(lce_handle *h, CUstream stream, int64_t N, int64_t V, int64_t D, uint64_t seed) {
  char tagText[160];
  std::snprintf(tagText, sizeof tagText, "%s %s N=%lld V=%lld D=%lld", lce_handle_arch(h), kDtype,
                (long long)N, (long long)V, (long long)D);
  std::string tag = tagText;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> xf(N * D), wf(V * D), bf(V);
  float scale = 2.0f / std::sqrt(float(D));
  for (float &v : xf)
    v = uni(rng);
  for (float &v : wf)
    v = uni(rng) * scale;
  for (float &v : bf)
    v = uni(rng);
  Stored x = store(xf), w = store(wf), b = store(bf);
  std::vector<int64_t> labels(N);
  for (int64_t n = 0; n < N; ++n)
    labels[n] = (n % 7 == 3) ? LCE_IGNORE_INDEX : int64_t(rng() % uint64_t(V));
#if LCE_LABEL_I32
  std::vector<int32_t> labelData(labels.begin(), labels.end());
#else
  std::vector<int64_t> labelData = labels;
#endif
  std::vector<double> gradLoss;
#if LCE_REDUCTION_NONE
  for (int64_t n = 0; n < N; ++n)
    gradLoss.push_back(0.5 + 0.5 * double(uni(rng)));
#else
  gradLoss.push_back(0.75);
#endif
  bool backward = LCE_HAS_BACKWARD != 0 || LCE_HAS_FORWARD_BACKWARD != 0;
  Reference ref = reference(x.values, w.values, LCE_HAS_BIAS ? &b.values : nullptr, labels,
                            gradLoss, N, V, D, backward);

  DeviceBuffer dx(x.bytes.size()), dw(w.bytes.size()), db(b.bytes.size()),
      dl(labelData.size() * sizeof labelData[0]);
  dx.upload(x.bytes.data());
  dw.upload(w.bytes.data());
  db.upload(b.bytes.data());
  dl.upload(labelData.data());
  size_t lossCount = LCE_REDUCTION_NONE ? size_t(N) : 1;
  DeviceBuffer loss(lossCount * 4), lse(N * 4), loss2(lossCount * 4), lse2(N * 4);
  loss.poison();
  lse.poison();
  loss2.poison();
  lse2.poison();
  size_t wsBytes = lce_workspace_bytes(N, V, D);
  check(wsBytes != size_t(-1), tag + ": workspace size");
  DeviceBuffer ws(wsBytes);

  // Run 1: the handle's allocator. Run 2: a caller-provided workspace.
#if LCE_HAS_BIAS
#define LCE_BIAS_ARG db.ptr,
#else
#define LCE_BIAS_ARG
#endif
  expectStatus(lce_forward(h, stream, dx.ptr, dw.ptr, dl.ptr, LCE_BIAS_ARG loss.ptr, lse.ptr, N,
                           V, D, 0, 0),
               LCE_SUCCESS, tag + " forward (allocator)");
  expectStatus(lce_forward(h, stream, dx.ptr, dw.ptr, dl.ptr, LCE_BIAS_ARG loss2.ptr, lse2.ptr,
                           N, V, D, ws.ptr, ws.bytes),
               LCE_SUCCESS, tag + " forward (workspace)");
  CU(cuStreamSynchronize(stream));
  std::vector<float> lossOut = loss.download<float>(), lseOut = lse.download<float>();
  check(std::memcmp(lossOut.data(), loss2.download<float>().data(), loss.bytes) == 0 &&
            std::memcmp(lseOut.data(), lse2.download<float>().data(), lse.bytes) == 0,
        tag + " forward is bitwise deterministic");
  // fp32 math on exactly the stored inputs: close to fp64.
  checkClose(toDouble(lseOut), ref.lse, 1e-4, 1e-4, tag + " lse");
  checkClose(toDouble(lossOut), ref.loss, 1e-4, 1e-4, tag + " loss");

#if LCE_HAS_BACKWARD
  std::vector<float> gl(gradLoss.begin(), gradLoss.end());
  DeviceBuffer dgl(gl.size() * 4), gx(x.bytes.size()), gw(w.bytes.size()), gb(b.bytes.size()),
      gx2(x.bytes.size()), gw2(w.bytes.size()), gb2(b.bytes.size());
  dgl.upload(gl.data());
  for (DeviceBuffer *g : {&gx, &gw, &gb, &gx2, &gw2, &gb2})
    g->poison();
#if LCE_HAS_BIAS
#define LCE_GRAD_BIAS_ARG(g) g.ptr,
#else
#define LCE_GRAD_BIAS_ARG(g)
#endif
  expectStatus(lce_backward(h, stream, dx.ptr, dw.ptr, dl.ptr, LCE_BIAS_ARG lse.ptr, dgl.ptr,
                            gx.ptr, gw.ptr, LCE_GRAD_BIAS_ARG(gb) N, V, D, 0, 0),
               LCE_SUCCESS, tag + " backward (allocator)");
  expectStatus(lce_backward(h, stream, dx.ptr, dw.ptr, dl.ptr, LCE_BIAS_ARG lse.ptr, dgl.ptr,
                            gx2.ptr, gw2.ptr, LCE_GRAD_BIAS_ARG(gb2) N, V, D, ws.ptr, ws.bytes),
               LCE_SUCCESS, tag + " backward (workspace)");
  CU(cuStreamSynchronize(stream));
  auto gxb = gx.download<unsigned char>(), gwb = gw.download<unsigned char>();
  check(gxb == gx2.download<unsigned char>() && gwb == gw2.download<unsigned char>(),
        tag + " backward is bitwise deterministic");
  // Gradients are stored in the storage dtype: judged norm-wise.
  double tol = gradTolerance();
  checkNorm(load(gxb), ref.gradX, tol, tag + " grad_x");
  checkNorm(load(gwb), ref.gradW, tol, tag + " grad_w");
#if LCE_HAS_BIAS
  checkNorm(load(gb.download<unsigned char>()), ref.gradBias, tol, tag + " grad_bias");
#endif
#endif

#if LCE_HAS_FORWARD_BACKWARD
  runFused(h, stream, tag, ref, gradLoss[0], dx.ptr, dw.ptr, db.ptr, dl.ptr, x.bytes.size(),
           w.bytes.size(), b.bytes.size(), N, V, D);
#endif

  // Errors come back as status codes with a message; nothing is launched.
  expectStatus(lce_forward(h, stream, dx.ptr, dw.ptr, dl.ptr, LCE_BIAS_ARG loss.ptr, lse.ptr, -1,
                           V, D, 0, 0),
               LCE_ERROR_INVALID_ARGUMENT, tag + " negative N is rejected");
}

bool parseShape(const char *text, int64_t shape[3]) {
  long long n, v, d;
  if (std::sscanf(text, "%lld,%lld,%lld", &n, &v, &d) != 3 || n < 1 || v < 1 || d < 1)
    return false;
  shape[0] = n;
  shape[1] = v;
  shape[2] = d;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  bool allowNoGpu = false;
  std::string arch = "all";
  uint64_t seed = 1234;
  std::vector<std::vector<int64_t>> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--allow-no-gpu") {
      allowNoGpu = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--arch" && i + 1 < argc) {
      arch = argv[++i];
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--shape" && i + 1 < argc) {
      int64_t s[3];
      if (!parseShape(argv[++i], s)) {
        std::fprintf(stderr, "aot_consumer: --shape wants N,V,D >= 1, got '%s'\n", argv[i]);
        return 3;
      }
      shapes.push_back({s[0], s[1], s[2]});
    } else {
      std::fprintf(stderr,
                   "usage: aot_consumer [--allow-no-gpu] [--arch NAME|auto|all] [--seed S] "
                   "[--shape N,V,D ...] [--quiet]\n");
      return 3;
    }
  }
  if (shapes.empty())
    shapes = {{67, 1000, 72}, {130, 8191, 96}, {1, 3, 1}};
  std::printf("aot_consumer: %s\n", lce_variant());

  // A machine without a GPU (or with only the stub libcuda) stops here.
  int devices = 0;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS)
    r = cuDeviceGetCount(&devices);
  if (r != CUDA_SUCCESS || devices == 0) {
    const char *name = nullptr;
    if (r != CUDA_SUCCESS)
      cuGetErrorName(r, &name);
    char why[96];
    if (r == CUDA_SUCCESS)
      std::snprintf(why, sizeof why, "no devices");
    else
      std::snprintf(why, sizeof why, "%s: CUresult %d", name ? name : "cuInit failed", int(r));
    std::printf("aot_consumer: no usable GPU (%s)%s\n", why,
                allowNoGpu ? "; nothing to check (--allow-no-gpu)" : "");
    return allowNoGpu ? 0 : 2;
  }
  CUdevice device;
  CU(cuDeviceGet(&device, 0));
  char deviceName[128] = {0};
  CU(cuDeviceGetName(deviceName, sizeof deviceName, device));
  int major = 0, minor = 0;
  CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  std::printf("aot_consumer: device 0: %s (sm_%d%d)\n", deviceName, major, minor);
  CUcontext context;
  CU(cuDevicePrimaryCtxRetain(&context, device));
  CU(cuCtxSetCurrent(context));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  std::vector<std::string> arches;
  if (arch == "auto") {
    arches.push_back("");
  } else if (arch == "all") {
    arches.push_back(""); // what lce_create picks, then every image by name
    for (int i = 0; i < lce_num_arches(); ++i)
      arches.push_back(lce_arch_name(i));
  } else {
    arches.push_back(arch);
  }
  for (const std::string &a : arches) {
    lce_handle *h = nullptr;
    lce_status s = lce_create_for_arch(context, a.empty() ? nullptr : a.c_str(), &h);
    if (s == LCE_ERROR_NO_COMPATIBLE_ARCH && !a.empty() && arch == "all") {
      std::printf("skip %s: %s\n", a.c_str(), lce_last_error());
      continue;
    }
    expectStatus(s, LCE_SUCCESS, "create " + (a.empty() ? std::string("(auto)") : a));
    if (s != LCE_SUCCESS)
      continue;
    if (a.empty())
      std::printf("aot_consumer: lce_create picked %s\n", lce_handle_arch(h));
    for (size_t i = 0; i < shapes.size(); ++i)
      runShape(h, stream, shapes[i][0], shapes[i][1], shapes[i][2], seed + i);
    expectStatus(lce_destroy(h), LCE_SUCCESS, "destroy");
  }
  CU(cuStreamDestroy(stream));
  CU(cuDevicePrimaryCtxRelease(device));
  std::printf("aot_consumer: %s: %d of %d checks passed\n", failures ? "FAIL" : "PASS",
              checks - failures, checks);
  return failures ? 1 : 0;
}
