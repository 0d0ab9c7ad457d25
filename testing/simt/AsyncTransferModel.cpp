//===- AsyncTransferModel.cpp - TMA tensor maps and mbarriers -------------===//

#include "testing/simt/AsyncTransferModel.h"

using namespace lossjit::simt;

namespace {
std::string text(uint64_t v) { return std::to_string(v); }
} // namespace

int64_t TensorMapDesc::swizzleSpan() const {
  switch (swizzle) {
  case TmaSwizzle::None:
    return 0;
  case TmaSwizzle::B32:
    return 32;
  case TmaSwizzle::B64:
    return 64;
  case TmaSwizzle::B128:
    return 128;
  }
  return 0;
}

std::string TensorMapDesc::validate(int64_t addressAlign) const {
  const uint64_t bytes = (getBitWidth(type) + 7) / 8;
  if (rank < 1 || rank > 5)
    return "tensor map rank must be in [1, 5], got " + text(uint64_t(rank));
  if (addressAlign % 16)
    return "tensor map global address must be 16-byte aligned";
  for (int d = 0; d < rank; ++d) {
    const std::string dim = "dimension " + text(uint64_t(d));
    if (globalDim[d] == 0 || globalDim[d] > (uint64_t(1) << 32))
      return "tensor map globalDim of " + dim + " must be in [1, 2^32], got " + text(globalDim[d]);
    if (boxDim[d] == 0 || boxDim[d] > 256)
      return "tensor map boxDim of " + dim + " must be in [1, 256], got " + text(boxDim[d]);
    // The driver takes 1..8; the model copies dense boxes only.
    if (elementStrides[d] != 1)
      return "tensor map elementStrides of " + dim + " must be 1 (dense boxes), got " +
             text(elementStrides[d]);
    if (d > 0) {
      uint64_t stride = globalStrides[d - 1];
      if (stride % 16 || stride >= (uint64_t(1) << 40))
        return "tensor map globalStrides of " + dim +
               " must be a multiple of 16 below 2^40 bytes, got " + text(stride);
      uint64_t inner = d == 1 ? globalDim[0] * bytes : globalStrides[d - 2] * globalDim[d - 1];
      if (stride < inner)
        return "tensor map globalStrides of " + dim + " (" + text(stride) +
               " bytes) is smaller than the dimension below it (" + text(inner) + " bytes)";
    }
  }
  if (boxDim[0] * bytes % 16)
    return "tensor map inner box (boxDim[0] x element size = " + text(boxDim[0] * bytes) +
           " bytes) must be a multiple of 16 bytes";
  if (swizzle != TmaSwizzle::None && boxDim[0] * bytes > uint64_t(swizzleSpan()))
    return "tensor map inner box of " + text(boxDim[0] * bytes) + " bytes exceeds the " +
           text(uint64_t(swizzleSpan())) + "-byte swizzle span";
  if (oobFill == TmaOobFill::Nan && !isFloatType(type))
    return "tensor map NaN out-of-bounds fill needs a floating-point element type";
  return "";
}

int64_t TensorMapDesc::boxBytes() const {
  int64_t n = int64_t((getBitWidth(type) + 7) / 8);
  for (int d = 0; d < rank; ++d)
    n *= int64_t(boxDim[d]);
  return n;
}

int64_t TensorMapDesc::sharedOffset(int64_t destination,
                                    const std::array<uint32_t, 5> &index) const {
  int64_t linear = 0;
  for (int d = rank - 1; d >= 0; --d)
    linear = linear * int64_t(boxDim[d]) + int64_t(index[d]);
  const int64_t address = destination + linear * int64_t((getBitWidth(type) + 7) / 8);
  const int64_t span = swizzleSpan();
  if (span == 0)
    return address - destination;
  const int64_t mask = span / 16 - 1; // chunks of a row − 1
  const int64_t chunk = ((address >> 4) ^ (address >> 7)) & mask;
  return ((address & ~(mask << 4)) | (chunk << 4)) - destination;
}

std::string MbarrierModel::init(int64_t count) {
  if (count < 1 || count >= (int64_t(1) << 20))
    return "mbarrier.init count must be in [1, 2^20 - 1], got " + std::to_string(count);
  isInitialized = true;
  expected = pending = count;
  tx = 0;
  completedPhases = 0;
  return "";
}

void MbarrierModel::completeIfDone() {
  if (pending == 0 && tx == 0) {
    ++completedPhases;
    pending = expected;
  }
}

std::string MbarrierModel::arrive(int64_t txBytes) {
  if (!isInitialized)
    return "arrive on an mbarrier that no mbarrier.init initialized";
  if (txBytes < 0 || tx + txBytes >= (int64_t(1) << 20))
    return "mbarrier transaction count out of range [-(2^20 - 1), 2^20 - 1] after expect_tx of " +
           std::to_string(txBytes) + " bytes";
  tx += txBytes;
  if (pending == 0)
    return "arrive on an mbarrier whose phase has no pending arrival left";
  --pending;
  completeIfDone();
  return "";
}

std::string MbarrierModel::completeTx(int64_t bytes) {
  if (!isInitialized)
    return "complete_tx on an mbarrier that no mbarrier.init initialized";
  tx -= bytes;
  if (tx <= -(int64_t(1) << 20))
    return "mbarrier transaction count below -(2^20 - 1) after complete_tx of " +
           std::to_string(bytes) + " bytes";
  completeIfDone();
  return "";
}
