//===- GpuTestUtil.cpp - Device fixtures and fp64 references --------------===//

#include "GpuTestUtil.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace lossjit::runtime::gputest {

void GpuTest::SetUp() {
  Expected<const CudaDriver *> d = CudaDriver::get();
  if (!d)
    GTEST_SKIP() << "no CUDA driver: " << d.errorMessage();
  Expected<int> count = (*d)->deviceCount();
  if (!count)
    GTEST_SKIP() << "cannot count CUDA devices: " << count.errorMessage();
  if (*count == 0)
    GTEST_SKIP() << "no CUDA device";
  driver = *d;
  Expected<cu::Context> context = driver->makePrimaryContextCurrent(0);
  ASSERT_TRUE(context) << context.errorMessage();
  Expected<std::pair<cu::Context, cu::Device>> current = driver->currentContext();
  ASSERT_TRUE(current) << current.errorMessage();
  Expected<std::pair<int, int>> cc = driver->computeCapability(current->second);
  ASSERT_TRUE(cc) << cc.errorMessage();
  arch = archForComputeCapability(cc->first, cc->second);
}

void NvrtcGpuTest::SetUp() {
  GpuTest::SetUp();
  if (IsSkipped() || HasFatalFailure())
    return;
  Expected<const Nvrtc *> n = Nvrtc::get();
  if (!n)
    GTEST_SKIP() << "NVRTC not available: " << n.errorMessage();
  nvrtc = *n;
}

DeviceMemory::DeviceMemory(const CudaDriver &driver, size_t bytes)
    : driver(driver), bytes(bytes) {
  // Zero-byte buffers stay null; cuMemAlloc rejects a size of 0.
  if (bytes == 0)
    return;
  Error e = driver.check(driver.api().cuMemAlloc(&ptr, bytes), "cuMemAlloc");
  if (e)
    throw std::runtime_error(e.message());
}

DeviceMemory::~DeviceMemory() {
  if (ptr)
    (void)driver.api().cuMemFree(ptr);
}

void DeviceMemory::upload(const void *host, size_t n) {
  if (n > bytes)
    throw std::runtime_error("upload larger than the buffer");
  if (n == 0)
    return;
  Error e = driver.check(driver.api().cuMemcpyHtoD(ptr, host, n), "cuMemcpyHtoD");
  if (e)
    throw std::runtime_error(e.message());
}

void DeviceMemory::download(void *host, size_t n) const {
  if (n > bytes)
    throw std::runtime_error("download larger than the buffer");
  if (n == 0)
    return;
  Error e = driver.check(driver.api().cuMemcpyDtoH(host, ptr, n), "cuMemcpyDtoH");
  if (e)
    throw std::runtime_error(e.message());
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exponent = (x >> 23) & 0xff;
  uint32_t mantissa = x & 0x7fffff;
  if (exponent == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  int32_t e = static_cast<int32_t>(exponent) - 127 + 15;
  if (e >= 31)
    return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10)
      return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half; // may carry into the exponent, which is still correct rounding
  return static_cast<uint16_t>(half);
}

float halfToFloat(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  if (exponent == 0)
    return static_cast<float>(sign * std::ldexp(mantissa, -24));
  if (exponent == 31)
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : sign * std::numeric_limits<float>::infinity();
  return static_cast<float>(sign * std::ldexp(mantissa + 1024, exponent - 25));
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((x >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16ToFloat(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

StoredTensor makeStored(const std::vector<float> &values, const std::string &dtype) {
  StoredTensor t;
  t.values.reserve(values.size());
  if (dtype == "f32") {
    t.bytes.resize(values.size() * 4);
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    for (float v : values)
      t.values.push_back(v);
    return t;
  }
  bool isHalf = dtype == "f16";
  if (!isHalf && dtype != "bf16")
    throw std::runtime_error("makeStored: unknown dtype " + dtype);
  t.bytes.resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits = isHalf ? floatToHalf(values[i]) : floatToBf16(values[i]);
    std::memcpy(t.bytes.data() + 2 * i, &bits, 2);
    t.values.push_back(isHalf ? halfToFloat(bits) : bf16ToFloat(bits));
  }
  return t;
}

LceReference referenceLinearCrossEntropy(const std::vector<double> &x,
                                         const std::vector<double> &w,
                                         const std::vector<double> *bias,
                                         const std::vector<int64_t> &labels,
                                         int64_t n, int64_t v, int64_t d,
                                         int64_t ignoreIndex) {
  LceReference ref;
  ref.lse.resize(static_cast<size_t>(n));
  ref.rowLoss.resize(static_cast<size_t>(n));
  std::vector<double> z(static_cast<size_t>(v));
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < v; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < d; ++k)
        acc += x[static_cast<size_t>(r * d + k)] * w[static_cast<size_t>(c * d + k)];
      if (bias)
        acc += (*bias)[static_cast<size_t>(c)];
      z[static_cast<size_t>(c)] = acc;
      m = std::max(m, acc);
    }
    double s = 0;
    for (int64_t c = 0; c < v; ++c)
      s += std::exp(z[static_cast<size_t>(c)] - m);
    double lse = m + std::log(s);
    ref.lse[static_cast<size_t>(r)] = lse;
    int64_t label = labels[static_cast<size_t>(r)];
    if (label == ignoreIndex) {
      ref.rowLoss[static_cast<size_t>(r)] = 0;
      continue;
    }
    double loss = lse - z[static_cast<size_t>(label)];
    ref.rowLoss[static_cast<size_t>(r)] = loss;
    sum += loss;
    ++count;
  }
  ref.mean = count ? sum / static_cast<double>(count)
                   : std::numeric_limits<double>::quiet_NaN();
  return ref;
}

} // namespace lossjit::runtime::gputest
