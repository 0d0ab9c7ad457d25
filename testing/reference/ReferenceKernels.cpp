//===- ReferenceKernels.cpp - Naive CUDA C++ references via NVRTC ---------===//

#include "testing/reference/ReferenceKernels.h"

#include "runtime/KernelCache.h"
#include "runtime/Sha256.h"

namespace lossjit::runtime {

namespace {

// The body is shared by both ABIs; the wrappers differ only in how buffers
// arrive. Headers are avoided on purpose (f16 is converted with one PTX
// instruction, bf16 by a shift) so NVRTC needs no toolkit include directory.
constexpr const char *kCommonSource = R"CUDA(
#define LJ_INF __int_as_float(0x7f800000)
#define LJ_NAN __int_as_float(0x7fffffff)

__device__ __forceinline__ float lj_load(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float lj_load_f16(const unsigned short *p, long long i) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));
  return f;
}
__device__ __forceinline__ float lj_load_bf16(const unsigned short *p, long long i) {
  return __uint_as_float(((unsigned int)p[i]) << 16);
}

// (m, s) online-softmax pairs; -inf means "no columns seen".
__device__ __forceinline__ void lj_combine(float &m, float &s, float m2, float s2) {
  if (m2 == -LJ_INF) return;
  if (m == -LJ_INF) { m = m2; s = s2; return; }
  float M = fmaxf(m, m2);
  s = s * expf(m - M) + s2 * expf(m2 - M);
  m = M;
}

__device__ void lj_forward_row(const LJ_S *__restrict__ x, const LJ_S *__restrict__ w,
                               const LJ_S *__restrict__ bias, const LJ_L *__restrict__ labels,
                               float *__restrict__ lse_out, float *__restrict__ loss_rows,
                               long long N, long long V, long long D) {
  __shared__ float shared_m[LJ_THREADS];
  __shared__ float shared_s[LJ_THREADS];
  __shared__ float shared_target;
  long long row = blockIdx.x;
  if (row >= N) return;
  int tid = threadIdx.x;
  long long label = (long long)labels[row];
  const LJ_S *xr = x + row * D;
  float m = -LJ_INF, s = 0.f;
  if (tid == 0) shared_target = LJ_NAN;
  __syncthreads();
  for (long long v = tid; v < V; v += LJ_THREADS) {
    const LJ_S *wr = w + v * D;
    float z = 0.f;
    for (long long d = 0; d < D; ++d)
      z = fmaf(LJ_LOAD(xr, d), LJ_LOAD(wr, d), z);
#if LJ_HAS_BIAS
    z += LJ_LOAD(bias, v);
#endif
    if (v == label) shared_target = z;  // exactly one thread owns column v
    lj_combine(m, s, z, 1.f);
  }
  shared_m[tid] = m;
  shared_s[tid] = s;
  __syncthreads();
  // Fixed-shape tree: the same inputs always combine in the same order.
  for (int stride = LJ_THREADS / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      float mm = shared_m[tid], ss = shared_s[tid];
      lj_combine(mm, ss, shared_m[tid + stride], shared_s[tid + stride]);
      shared_m[tid] = mm;
      shared_s[tid] = ss;
    }
    __syncthreads();
  }
  if (tid == 0) {
    float lse = shared_m[0] + logf(shared_s[0]);
    lse_out[row] = lse;
    float loss;
    if (label == (long long)(LJ_IGNORE_INDEX)) loss = 0.f;
    else if (label < 0 || label >= V) loss = LJ_NAN;
    else loss = lse - shared_target;
    loss_rows[row] = loss;
  }
}

__device__ void lj_mean(const LJ_L *__restrict__ labels, const float *__restrict__ loss_rows,
                        float *__restrict__ out, long long N) {
  __shared__ float shared_sum[LJ_THREADS];
  __shared__ long long shared_count[LJ_THREADS];
  int tid = threadIdx.x;
  float sum = 0.f;
  long long count = 0;
  for (long long i = tid; i < N; i += LJ_THREADS)
    if ((long long)labels[i] != (long long)(LJ_IGNORE_INDEX)) { sum += loss_rows[i]; ++count; }
  shared_sum[tid] = sum;
  shared_count[tid] = count;
  __syncthreads();
  for (int stride = LJ_THREADS / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      shared_sum[tid] += shared_sum[tid + stride];
      shared_count[tid] += shared_count[tid + stride];
    }
    __syncthreads();
  }
  if (tid == 0) out[0] = shared_sum[0] / (float)shared_count[0];
}
)CUDA";

constexpr const char *kPointerWrappers = R"CUDA(
extern "C" __global__ void __launch_bounds__(LJ_THREADS)
lossjit_reference_forward(const LJ_S *x, const LJ_S *w, const LJ_S *bias, const LJ_L *labels,
                          float *lse, float *loss_rows, long long N, long long V, long long D) {
  lj_forward_row(x, w, bias, labels, lse, loss_rows, N, V, D);
}
extern "C" __global__ void __launch_bounds__(LJ_THREADS)
lossjit_reference_mean(const LJ_L *labels, const float *loss_rows, float *loss, long long N) {
  lj_mean(labels, loss_rows, loss, N);
}
)CUDA";

// memref<?xT> descriptor fields: allocated, aligned, offset, size, stride.
constexpr const char *kMemrefWrappers = R"CUDA(
#define LJ_MEMREF(T, name) T *name##_allocated, T *name##_aligned, long long name##_offset, \
  long long name##_size, long long name##_stride
#define LJ_PTR(name) (name##_aligned + name##_offset)
extern "C" __global__ void __launch_bounds__(LJ_THREADS)
lossjit_reference_forward(LJ_MEMREF(const LJ_S, x), LJ_MEMREF(const LJ_S, w),
#if LJ_HAS_BIAS
                          LJ_MEMREF(const LJ_S, bias),
#endif
                          LJ_MEMREF(const LJ_L, labels), LJ_MEMREF(float, lse),
                          LJ_MEMREF(float, loss_rows), long long N, long long V, long long D) {
#if LJ_HAS_BIAS
  const LJ_S *bias = LJ_PTR(bias);
#else
  const LJ_S *bias = 0;
#endif
  lj_forward_row(LJ_PTR(x), LJ_PTR(w), bias, LJ_PTR(labels), LJ_PTR(lse), LJ_PTR(loss_rows),
                 N, V, D);
}
extern "C" __global__ void __launch_bounds__(LJ_THREADS)
lossjit_reference_mean(LJ_MEMREF(const LJ_L, labels), LJ_MEMREF(const float, loss_rows),
                       LJ_MEMREF(float, loss), long long N) {
  lj_mean(LJ_PTR(labels), LJ_PTR(loss_rows), LJ_PTR(loss), N);
}
)CUDA";

} // namespace

Expected<std::string> referenceKernelSource(const ReferenceKernelOptions &options) {
  std::string storage, load;
  if (options.dtype == "f32") {
    storage = "float";
    load = "lj_load";
  } else if (options.dtype == "f16") {
    storage = "unsigned short";
    load = "lj_load_f16";
  } else if (options.dtype == "bf16") {
    storage = "unsigned short";
    load = "lj_load_bf16";
  } else {
    return makeError("reference kernel option dtype: expected f16, bf16 or "
                     "f32, got '" + options.dtype + "'");
  }
  std::string label;
  if (options.labelType == "i64")
    label = "long long";
  else if (options.labelType == "i32")
    label = "int";
  else
    return makeError("reference kernel option label_type: expected i64 or "
                     "i32, got '" + options.labelType + "'");
  unsigned t = options.threads;
  if (t < 32 || t > 1024 || (t & (t - 1)) != 0)
    return makeError("reference kernel option threads: expected a power of "
                     "two in [32, 1024], got " + std::to_string(t));

  std::string source = "// lossjit reference linear cross-entropy forward (" +
                       options.dtype + ", labels " + options.labelType + ")\n";
  source += "#define LJ_S " + storage + "\n";
  source += "#define LJ_L " + label + "\n";
  source += "#define LJ_LOAD " + load + "\n";
  source += "#define LJ_THREADS " + std::to_string(t) + "\n";
  source += std::string("#define LJ_HAS_BIAS ") + (options.bias ? "1" : "0") + "\n";
  // Parenthesized with an LL suffix so INT64_MIN-adjacent values parse.
  source += "#define LJ_IGNORE_INDEX (" + std::to_string(options.ignoreIndex) + "LL)\n";
  source += kCommonSource;
  source += options.abi == ReferenceKernelOptions::Abi::Memref ? kMemrefWrappers
                                                               : kPointerWrappers;
  return source;
}

Expected<KernelBundle> buildReferenceBundle(const Nvrtc &nvrtc,
                                            ReferenceKernelOptions options,
                                            const std::string &arch) {
  options.abi = ReferenceKernelOptions::Abi::Memref;
  Expected<std::string> source = referenceKernelSource(options);
  if (!source)
    return source.takeError();
  Expected<std::string> ptx =
      nvrtc.compileToPtx(*source, "lossjit_reference.cu", arch);
  if (!ptx)
    return ptx.takeError();

  KernelBundle b;
  b.op = "linear_cross_entropy_reference";
  b.backend = "cuda";
  b.arch = arch;
  b.llvmVersion = "nvrtc-" + nvrtc.version();
  b.options.set("dtype", options.dtype);
  b.options.set("label_type", options.labelType);
  b.options.set("ignore_index", options.ignoreIndex);
  b.options.set("reduction", "mean");
  b.options.set("bias", options.bias);
  b.tile.set("threads", options.threads);
  b.tile.set("matmul", "naive");
  b.irHash = sha256Hex(*source);
  b.params = {{"x", "buffer", options.dtype, {"N", "D"}},
              {"w", "buffer", options.dtype, {"V", "D"}}};
  if (options.bias)
    b.params.push_back({"bias", "buffer", options.dtype, {"V"}});
  b.params.push_back({"labels", "buffer", options.labelType, {"N"}});
  b.params.push_back({"loss", "buffer", "f32", {}});
  b.params.push_back({"lse", "buffer", "f32", {"N"}});
  b.dims = {"N", "V", "D"};
  b.workspaces = {{"loss_rows", "f32", "N"}};
  std::string file = "lossjit_reference." + arch + ".ptx";
  std::array<uint32_t, 3> block = {options.threads, 1, 1};

  BundleKernel forward;
  forward.name = kReferenceForwardKernel;
  forward.file = file;
  forward.grid = {"N", "1", "1"};
  forward.block = block;
  forward.args = {"x", "w"};
  if (options.bias)
    forward.args.push_back("bias");
  for (const char *a : {"labels", "lse", "loss_rows", "N", "V", "D"})
    forward.args.push_back(a);
  forward.image = *ptx;

  BundleKernel mean;
  mean.name = kReferenceMeanKernel;
  mean.file = file;
  mean.grid = {"1", "1", "1"};
  mean.block = block;
  mean.args = {"labels", "loss_rows", "loss", "N"};
  mean.image = *ptx;
  b.kernels = {forward, mean};

  CacheKeyInputs keyInputs;
  keyInputs.canonicalIr = *source;
  keyInputs.pipeline = "nvrtc";
  keyInputs.tileConfig = writeJson(b.tile, 0);
  keyInputs.arch = arch;
  keyInputs.llvmVersion = b.llvmVersion;
  b.key = computeCacheKey(keyInputs);
  if (Error e = b.verify())
    return e;
  return b;
}

} // namespace lossjit::runtime
