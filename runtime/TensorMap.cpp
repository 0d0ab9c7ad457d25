//===- TensorMap.cpp - TMA tensor maps through the driver -----------------===//

#include "runtime/TensorMap.h"

#include "runtime/Environment.h"
#include "runtime/Log.h"

#include <atomic>
#include <initializer_list>

using namespace lossjit::runtime;

namespace {
/// CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapFloatOOBfill (cuda.h).
constexpr int kDataTypeFloat16 = 6, kDataTypeFloat32 = 7, kDataTypeBFloat16 = 9;
constexpr int kInterleaveNone = 0;
constexpr int kOobFillNone = 0, kOobFillNanRequestZeroFma = 1;

struct ElementKind {
  int dataType;
  uint64_t bytes;
};

bool elementKind(const std::string &dtype, ElementKind &kind) {
  if (dtype == "f16")
    kind = {kDataTypeFloat16, 2};
  else if (dtype == "bf16")
    kind = {kDataTypeBFloat16, 2};
  else if (dtype == "f32")
    kind = {kDataTypeFloat32, 4};
  else
    return false;
  return true;
}

/// The driver's enum for a byte count checkTensorMap accepted: 0 for none,
/// else 1 + its place among `sizes` (CUtensorMapSwizzle over 32, 64 and 128
/// bytes; CUtensorMapL2promotion over 64, 128 and 256).
int sizeEnum(unsigned bytes, std::initializer_list<unsigned> sizes) {
  int value = 1;
  for (unsigned size : sizes) {
    if (bytes == size)
      return value;
    ++value;
  }
  return 0;
}
int swizzleEnum(unsigned bytes) { return sizeEnum(bytes, {32, 64, 128}); }
int l2PromotionEnum(unsigned bytes) { return sizeEnum(bytes, {64, 128, 256}); }

std::string text(uint64_t v) { return std::to_string(v); }
} // namespace

unsigned lossjit::runtime::l2PromotionFromEnvironment() {
  std::optional<std::string> value = getEnv("LOSSJIT_TMA_L2_PROMOTION");
  if (!value)
    return kDefaultL2PromotionBytes;
  if (*value == "none" || *value == "0")
    return 0;
  for (unsigned bytes : {64u, 128u, 256u})
    if (*value == std::to_string(bytes))
      return bytes;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    logWarning("LOSSJIT_TMA_L2_PROMOTION='" + *value +
               "' is not none, 64, 128 or 256; the tensor maps ask for " +
               std::to_string(kDefaultL2PromotionBytes));
  return kDefaultL2PromotionBytes;
}

std::string lossjit::runtime::checkTensorMap(const TensorMapSpec &spec) {
  ElementKind kind{};
  if (!elementKind(spec.dtype, kind))
    return "tensor map dtype must be f16, bf16 or f32, got '" + spec.dtype + "'";
  if (spec.rank < 1 || spec.rank > 5)
    return "tensor map rank must be in [1, 5], got " + text(spec.rank);
  if (spec.global % 16)
    return "tensor map global address must be 16-byte aligned, got " + text(spec.global);
  if (spec.swizzleBytes != 0 && spec.swizzleBytes != 32 && spec.swizzleBytes != 64 &&
      spec.swizzleBytes != 128)
    return "tensor map swizzle must be 0, 32, 64 or 128 bytes, got " + text(spec.swizzleBytes);
  for (unsigned d = 0; d < spec.rank; ++d) {
    const std::string which = " of dimension " + text(d);
    if (spec.dims[d] == 0 || spec.dims[d] > (uint64_t(1) << 32))
      return "tensor map dims" + which + " must be in [1, 2^32], got " + text(spec.dims[d]);
    if (spec.box[d] == 0 || spec.box[d] > 256)
      return "tensor map box" + which + " must be in [1, 256], got " + text(spec.box[d]);
    if (d == 0)
      continue;
    const uint64_t stride = spec.strides[d - 1];
    if (stride % 16 || stride >= (uint64_t(1) << 40))
      return "tensor map strides" + which + " must be a multiple of 16 below 2^40 bytes, got " +
             text(stride);
    const uint64_t below = d == 1 ? spec.dims[0] * kind.bytes : spec.strides[d - 2] * spec.dims[d - 1];
    if (stride < below)
      return "tensor map strides" + which + " (" + text(stride) +
             " bytes) must cover the dimension below it (" + text(below) + " bytes)";
  }
  if (spec.l2PromotionBytes != 0 && spec.l2PromotionBytes != 64 && spec.l2PromotionBytes != 128 &&
      spec.l2PromotionBytes != 256)
    return "tensor map L2 promotion must be 0, 64, 128 or 256 bytes, got " +
           text(spec.l2PromotionBytes);
  const uint64_t inner = spec.box[0] * kind.bytes;
  if (inner % 16)
    return "tensor map box of dimension 0 must span a multiple of 16 bytes, got " + text(inner);
  if (spec.swizzleBytes && inner > spec.swizzleBytes)
    return "tensor map box of dimension 0 (" + text(inner) + " bytes) exceeds the " +
           text(spec.swizzleBytes) + "-byte swizzle";
  return "";
}

Expected<TensorMapBytes> lossjit::runtime::encodeTensorMap(const CudaDriver &driver,
                                                           const TensorMapSpec &spec) {
  if (std::string why = checkTensorMap(spec); !why.empty())
    return makeError(why);
  const auto encode = driver.api().cuTensorMapEncodeTiled;
  if (!encode)
    return makeError("the CUDA driver lacks cuTensorMapEncodeTiled (CUDA 12.0 or newer is "
                     "needed for the TMA kernels)");
  ElementKind kind{};
  elementKind(spec.dtype, kind);
  const std::array<uint32_t, 5> elementStrides = {1, 1, 1, 1, 1};
  TensorMapBytes map;
  if (Error e = driver.check(
          encode(map.bytes.data(), kind.dataType, spec.rank,
                 reinterpret_cast<void *>(static_cast<uintptr_t>(spec.global)), spec.dims.data(),
                 spec.strides.data(), spec.box.data(), elementStrides.data(), kInterleaveNone,
                 swizzleEnum(spec.swizzleBytes), l2PromotionEnum(spec.l2PromotionBytes),
                 spec.nanFill ? kOobFillNanRequestZeroFma : kOobFillNone),
          "cuTensorMapEncodeTiled"))
    return e;
  return map;
}
