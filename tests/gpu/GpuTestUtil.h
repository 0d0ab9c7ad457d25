//===- GpuTestUtil.h - Device fixtures and fp64 references ------*- C++ -*-===//
//
// Shared by GPU tests, including the compiler's PTX-through-the-runtime test:
// a fixture that skips without a device, RAII device buffers, storage-type
// rounding, and the fp64 reference of linear + cross-entropy.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTS_GPU_GPUTESTUTIL_H
#define LOSSJIT_TESTS_GPU_GPUTESTUTIL_H

#include "runtime/CudaDriver.h"
#include "runtime/Nvrtc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lossjit::runtime::gputest {

/// Skips the test (with the reason) unless a CUDA device is usable; makes
/// device 0's primary context current and records its arch.
class GpuTest : public ::testing::Test {
protected:
  void SetUp() override;

  const CudaDriver *driver = nullptr;
  std::string arch; // "sm_90" etc.
};

/// Like GpuTest but also requires NVRTC.
class NvrtcGpuTest : public GpuTest {
protected:
  void SetUp() override;

  const Nvrtc *nvrtc = nullptr;
};

/// A cuMemAlloc'ed buffer, freed on destruction.
class DeviceMemory {
public:
  DeviceMemory(const CudaDriver &driver, size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;

  cu::DevicePtr address() const { return ptr; }
  size_t size() const { return bytes; }
  void upload(const void *host, size_t n);
  void download(void *host, size_t n) const;
  template <typename T> void upload(const std::vector<T> &v) {
    upload(v.data(), v.size() * sizeof(T));
  }
  template <typename T> std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    download(v.data(), count * sizeof(T));
    return v;
  }

private:
  const CudaDriver &driver;
  cu::DevicePtr ptr = 0;
  size_t bytes;
};

/// IEEE half <-> float (round to nearest even).
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
/// bfloat16 <-> float (round to nearest even).
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t h);

/// Values in a storage dtype: the bytes for the device and the exactly
/// representable values (as double) for the reference.
struct StoredTensor {
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};
StoredTensor makeStored(const std::vector<float> &values, const std::string &dtype);

/// fp64 reference: lse, per-row loss (0 for ignore_index) and the mean over
/// non-ignored rows, for x [N,D], w [V,D], optional bias [V].
struct LceReference {
  std::vector<double> lse;
  std::vector<double> rowLoss;
  double mean;
};
LceReference referenceLinearCrossEntropy(const std::vector<double> &x,
                                         const std::vector<double> &w,
                                         const std::vector<double> *bias,
                                         const std::vector<int64_t> &labels,
                                         int64_t n, int64_t v, int64_t d,
                                         int64_t ignoreIndex);

/// Fails the test with `call`'s error if `e` holds one.
#define LOSSJIT_ASSERT_OK(expr)                                                \
  do {                                                                         \
    ::lossjit::runtime::Error lossjitError = (expr);                           \
    ASSERT_FALSE(static_cast<bool>(lossjitError)) << lossjitError.message();   \
  } while (false)

} // namespace lossjit::runtime::gputest

#endif // LOSSJIT_TESTS_GPU_GPUTESTUTIL_H
