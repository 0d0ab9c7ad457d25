//===- TensorMap.h - TMA tensor maps through the driver ---------*- C++ -*-===//
//
// The Hopper kernels copy operand tiles with TMA, which reads a 128-byte
// CUtensorMap that the host encodes with cuTensorMapEncodeTiled and passes
// by value (a __grid_constant__ parameter, loss-tensor-map-grid-constant).
// This file checks a map against the requirements the driver documents —
// so a bad shape is an error naming the field, not an opaque
// CUDA_ERROR_INVALID_VALUE — and encodes it through the dlopen'ed driver.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_TENSORMAP_H
#define LOSSJIT_RUNTIME_TENSORMAP_H

#include "runtime/CudaDriver.h"
#include "runtime/Status.h"
#include "runtime/TensorMapBytes.h"

#include <array>
#include <cstdint>
#include <string>

namespace lossjit::runtime {

/// The L2 promotion the launchers ask for unless told otherwise.
inline constexpr unsigned kDefaultL2PromotionBytes = 128;

/// A tiled tensor map (no interleave): dimension 0 is the innermost,
/// contiguous one.
struct TensorMapSpec {
  std::string dtype = "bf16";          ///< "f16", "bf16" or "f32"
  unsigned rank = 2;                   ///< 1..5
  cu::DevicePtr global = 0;            ///< the tensor's first element
  std::array<uint64_t, 5> dims{};      ///< elements per dimension
  std::array<uint64_t, 4> strides{};   ///< bytes, of dimensions 1..rank-1
  std::array<uint32_t, 5> box{};       ///< elements per dimension of a copy
  unsigned swizzleBytes = 0;           ///< 0 (none), 32, 64 or 128
  bool nanFill = false;                ///< out-of-bounds elements NaN (else 0)
  /// L2 promotion: 0 (none), 64, 128 or 256 bytes. A hint that changes no
  /// result: how much of L2 a copy's sector fetch fills (CUTLASS's and
  /// TileLang's maps ask for 128).
  unsigned l2PromotionBytes = kDefaultL2PromotionBytes;
};

/// $LOSSJIT_TMA_L2_PROMOTION ("none", "64", "128" or "256"; unset: the
/// default), read once per call. Another value is warned about once and
/// the default taken.
unsigned l2PromotionFromEnvironment();

/// "" when `spec` meets cuTensorMapEncodeTiled's documented requirements,
/// else the first one it breaks, naming the field.
std::string checkTensorMap(const TensorMapSpec &spec);

/// Checks `spec`, then encodes it through the driver. Fails when the driver
/// lacks cuTensorMapEncodeTiled (older than CUDA 12.0) or refuses the map.
Expected<TensorMapBytes> encodeTensorMap(const CudaDriver &driver, const TensorMapSpec &spec);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_TENSORMAP_H
