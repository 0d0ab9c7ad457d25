//===- TensorMapTest.cpp - TMA tensor maps against a recording driver -----===//
//
// No GPU here: cuTensorMapEncodeTiled is a fake that records its arguments,
// so the test pins what the runtime passes (the driver API's enum values,
// innermost-first dimensions, byte strides of the outer dimensions) and that
// a map the driver would refuse is refused first, naming the field.
//
//===----------------------------------------------------------------------===//

#include "runtime/TensorMap.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <vector>

using namespace lossjit::runtime;
using lossjit::runtime::testing::ScopedEnv;

namespace {

struct Recorded {
  int calls = 0, dataType = -1, interleave = -1, swizzle = -1, l2 = -1, oob = -1;
  unsigned rank = 0;
  void *global = nullptr;
  std::vector<uint64_t> dims, strides;
  std::vector<uint32_t> box, elementStrides;
  cu::Result result = cu::kSuccess;
};
Recorded *recorded = nullptr;

cu::Result fakeEncode(void *map, int dataType, unsigned rank, void *global, const uint64_t *dims,
                      const uint64_t *strides, const uint32_t *box, const uint32_t *elementStrides,
                      int interleave, int swizzle, int l2, int oob) {
  Recorded &r = *recorded;
  ++r.calls;
  r.dataType = dataType, r.rank = rank, r.global = global;
  r.dims.assign(dims, dims + rank);
  r.strides.assign(strides, strides + rank - 1);
  r.box.assign(box, box + rank);
  r.elementStrides.assign(elementStrides, elementStrides + rank);
  r.interleave = interleave, r.swizzle = swizzle, r.l2 = l2, r.oob = oob;
  static_cast<uint8_t *>(map)[0] = 0x5a;
  return r.result;
}
cu::Result fakeErrorName(cu::Result, const char **s) {
  *s = "CUDA_ERROR_INVALID_VALUE";
  return cu::kSuccess;
}
cu::Result fakeErrorString(cu::Result, const char **s) {
  *s = "invalid argument";
  return cu::kSuccess;
}

/// A bf16 W [V = 1000, D = 4096] tile map: 64 × 128 boxes, 128-byte swizzle.
TensorMapSpec weights() {
  TensorMapSpec s;
  s.dtype = "bf16";
  s.rank = 2;
  s.global = 0x7f0000001000ull;
  s.dims = {4096, 1000};
  s.strides = {4096 * 2};
  s.box = {64, 128};
  s.swizzleBytes = 128;
  return s;
}

class TensorMapTest : public ::testing::Test {
protected:
  void SetUp() override {
    recorded = &state;
    CudaDriverApi api{};
    api.cuTensorMapEncodeTiled = fakeEncode;
    api.cuGetErrorName = fakeErrorName;
    api.cuGetErrorString = fakeErrorString;
    driver = CudaDriver::fromApi(api);
  }
  void TearDown() override { recorded = nullptr; }
  Recorded state;
  std::unique_ptr<CudaDriver> driver;
};

TEST_F(TensorMapTest, EncodesWithTheDriversEnumValues) {
  Expected<TensorMapBytes> map = encodeTensorMap(*driver, weights());
  ASSERT_TRUE(static_cast<bool>(map)) << map.errorMessage();
  EXPECT_EQ(map->bytes[0], 0x5a);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(map->bytes.data()) % 64, 0u);
  EXPECT_EQ(state.calls, 1);
  EXPECT_EQ(state.dataType, 9); // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
  EXPECT_EQ(state.rank, 2u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(state.global), 0x7f0000001000ull);
  EXPECT_EQ(state.dims, (std::vector<uint64_t>{4096, 1000}));
  EXPECT_EQ(state.strides, (std::vector<uint64_t>{8192}));
  EXPECT_EQ(state.box, (std::vector<uint32_t>{64, 128}));
  EXPECT_EQ(state.elementStrides, (std::vector<uint32_t>{1, 1}));
  EXPECT_EQ(state.interleave, 0); // CU_TENSOR_MAP_INTERLEAVE_NONE
  EXPECT_EQ(state.swizzle, 3);    // CU_TENSOR_MAP_SWIZZLE_128B
  EXPECT_EQ(state.l2, 2);         // CU_TENSOR_MAP_L2_PROMOTION_L2_128B, the default
  EXPECT_EQ(state.oob, 0);        // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (zeros)

  TensorMapSpec f16 = weights();
  f16.dtype = "f16";
  f16.swizzleBytes = 0;
  f16.nanFill = true;
  ASSERT_TRUE(static_cast<bool>(encodeTensorMap(*driver, f16)));
  EXPECT_EQ(state.dataType, 6); // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
  EXPECT_EQ(state.swizzle, 0);
  EXPECT_EQ(state.oob, 1); // CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
  // L2 promotion: none, 64, 128 and 256 bytes are enums 0..3.
  for (auto [bytes, value] : {std::pair{0u, 0}, {64u, 1}, {128u, 2}, {256u, 3}}) {
    TensorMapSpec promoted = weights();
    promoted.l2PromotionBytes = bytes;
    ASSERT_TRUE(static_cast<bool>(encodeTensorMap(*driver, promoted)));
    EXPECT_EQ(state.l2, value) << bytes;
  }
}

// LOSSJIT_TMA_L2_PROMOTION picks the maps' L2 promotion; a value that
// names none is the default.
TEST_F(TensorMapTest, L2PromotionFollowsTheEnvironment) {
  ScopedEnv unset("LOSSJIT_TMA_L2_PROMOTION", nullptr);
  EXPECT_EQ(l2PromotionFromEnvironment(), kDefaultL2PromotionBytes);
  EXPECT_EQ(kDefaultL2PromotionBytes, 128u);
  for (auto [text, bytes] : {std::pair{"none", 0u}, {"0", 0u}, {"64", 64u}, {"256", 256u}}) {
    ScopedEnv set("LOSSJIT_TMA_L2_PROMOTION", text);
    EXPECT_EQ(l2PromotionFromEnvironment(), bytes) << text;
  }
  ScopedEnv bad("LOSSJIT_TMA_L2_PROMOTION", "512");
  EXPECT_EQ(l2PromotionFromEnvironment(), kDefaultL2PromotionBytes);
}

TEST_F(TensorMapTest, RefusesWhatTheDriverWouldNamingTheField) {
  auto expectRefused = [&](TensorMapSpec s, const std::string &message) {
    const int before = state.calls;
    Expected<TensorMapBytes> map = encodeTensorMap(*driver, s);
    ASSERT_FALSE(static_cast<bool>(map));
    EXPECT_EQ(map.errorMessage(), message);
    EXPECT_EQ(state.calls, before) << "the driver must not be called";
  };
  TensorMapSpec s = weights();
  s.dtype = "f64";
  expectRefused(s, "tensor map dtype must be f16, bf16 or f32, got 'f64'");
  s = weights();
  s.global += 8;
  expectRefused(s, "tensor map global address must be 16-byte aligned, got 139637976731656");
  s = weights();
  s.strides = {4096 * 2 + 8};
  expectRefused(s, "tensor map strides of dimension 1 must be a multiple of 16 below 2^40 bytes, "
                   "got 8200");
  s = weights();
  s.strides = {4000 * 2};
  expectRefused(s, "tensor map strides of dimension 1 (8000 bytes) must cover the dimension "
                   "below it (8192 bytes)");
  s = weights();
  s.box = {128, 128};
  expectRefused(s, "tensor map box of dimension 0 (256 bytes) exceeds the 128-byte swizzle");
  s = weights();
  s.box = {64, 300};
  expectRefused(s, "tensor map box of dimension 1 must be in [1, 256], got 300");
  s = weights();
  s.box = {4, 128};
  s.swizzleBytes = 0;
  expectRefused(s, "tensor map box of dimension 0 must span a multiple of 16 bytes, got 8");
  s = weights();
  s.rank = 6;
  expectRefused(s, "tensor map rank must be in [1, 5], got 6");
  s = weights();
  s.swizzleBytes = 16;
  expectRefused(s, "tensor map swizzle must be 0, 32, 64 or 128 bytes, got 16");
  s = weights();
  s.l2PromotionBytes = 32;
  expectRefused(s, "tensor map L2 promotion must be 0, 64, 128 or 256 bytes, got 32");
}

TEST_F(TensorMapTest, DriverErrorsAndOldDriversAreNamed) {
  state.result = 1;
  Expected<TensorMapBytes> refused = encodeTensorMap(*driver, weights());
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_NE(refused.errorMessage().find("cuTensorMapEncodeTiled failed: CUDA_ERROR_INVALID_VALUE"),
            std::string::npos)
      << refused.errorMessage();
  CudaDriverApi old{};
  std::unique_ptr<CudaDriver> oldDriver = CudaDriver::fromApi(old);
  Expected<TensorMapBytes> missing = encodeTensorMap(*oldDriver, weights());
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_EQ(missing.errorMessage(), "the CUDA driver lacks cuTensorMapEncodeTiled (CUDA 12.0 or "
                                    "newer is needed for the TMA kernels)");
}

} // namespace
