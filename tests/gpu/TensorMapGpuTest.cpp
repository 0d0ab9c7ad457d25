//===- TensorMapGpuTest.cpp - TMA tensor maps on a real driver ------------===//
//
// On a device of compute capability 9.0 or newer, the driver encodes the maps
// the Hopper kernels will use (bf16 operand tiles, 128-byte swizzle, and an
// f32 map without swizzle); elsewhere the test skips with the reason. The
// fake-driver test (tests/unit/runtime/TensorMapTest.cpp) pins what is
// passed; this one checks the real driver accepts it.
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtil.h"

#include "runtime/TensorMap.h"

using namespace lossjit::runtime;
using namespace lossjit::runtime::gputest;

namespace {

class TensorMapGpuTest : public GpuTest {};

TEST_F(TensorMapGpuTest, TheDriverEncodesTheOperandMaps) {
  auto cc = parseCudaArch(arch);
  ASSERT_TRUE(static_cast<bool>(cc)) << cc.errorMessage();
  if (cc->first < 9)
    GTEST_SKIP() << "TMA needs compute capability 9.0 or newer; the device is " << arch;
  // W [V = 1000, D = 4096] in bf16, boxes of 64 k × 128 rows, and an f32
  // dZ [C = 37, V = 1000] with an odd row count, boxes of 32 × 16.
  DeviceMemory w(*driver, size_t(1000) * 4096 * 2), dz(*driver, size_t(37) * 1008 * 4);
  TensorMapSpec spec;
  spec.dtype = "bf16";
  spec.global = w.address();
  spec.dims = {4096, 1000};
  spec.strides = {4096 * 2};
  spec.box = {64, 128};
  spec.swizzleBytes = 128;
  Expected<TensorMapBytes> map = encodeTensorMap(*driver, spec);
  ASSERT_TRUE(static_cast<bool>(map)) << map.errorMessage();
  TensorMapSpec f32;
  f32.dtype = "f32";
  f32.global = dz.address();
  f32.dims = {1000, 37};
  f32.strides = {1008 * 4};
  f32.box = {32, 16};
  Expected<TensorMapBytes> other = encodeTensorMap(*driver, f32);
  ASSERT_TRUE(static_cast<bool>(other)) << other.errorMessage();
  EXPECT_NE(map->bytes, other->bytes);
}

} // namespace
