//===- TensorMapBytes.h - an encoded CUtensorMap ----------------*- C++ -*-===//
//
// What a kernel parameter of a TMA tensor map holds: 128 bytes, 64-byte
// aligned (CUtensorMap). Apart from TensorMap.h so that launch plans, which
// know nothing about CUDA, can pack them.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_TENSORMAPBYTES_H
#define LOSSJIT_RUNTIME_TENSORMAPBYTES_H

#include <array>
#include <cstdint>

namespace lossjit::runtime {

/// An encoded CUtensorMap (or zeros where the launch could not encode one).
struct alignas(64) TensorMapBytes {
  std::array<uint8_t, 128> bytes{};
};

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_TENSORMAPBYTES_H
