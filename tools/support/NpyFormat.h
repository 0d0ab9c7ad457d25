//===- NpyFormat.h - The .npy header, parsed and bounded --------*- C++ -*-===//
//
// The part of .npy reading that sees untrusted bytes: the magic, version and
// header dict, the shape, and the sizes they imply. Every size is computed
// with overflow checks (a shape of (2**61, 2) must not wrap to 0 bytes), and
// error messages escape the file's bytes. Plain C++ over runtime/Status.h,
// with no LLVM, so the libFuzzer target builds with any clang.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_SUPPORT_NPYFORMAT_H
#define LOSSJIT_TOOLS_SUPPORT_NPYFORMAT_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lossjit {

/// Bytes of the fixed preamble: magic (6), version (2), header length (2 in
/// version 1, 4 in versions 2 and 3).
inline constexpr size_t kNpyPreambleBytes = 12;
/// Largest header accepted (NumPy writes < 100 bytes for our arrays; version
/// 1 cannot exceed 64 KiB anyway).
inline constexpr size_t kMaxNpyHeaderBytes = size_t(1) << 20;
/// Most dimensions accepted (NumPy's own limit is 64).
inline constexpr size_t kMaxNpyDims = 64;

/// What a .npy header says.
struct NpyHeader {
  /// lossjit's dtype name: "f16", "f32", "f64", "i32" or "i64".
  std::string dtype;
  int64_t elementBytes = 0;
  std::vector<int64_t> shape;
  /// Product of the shape (1 for a 0-d array); never overflowed.
  int64_t elements = 1;
  /// Offset of the data and its size (elements * elementBytes, at most
  /// INT64_MAX).
  uint64_t dataOffset = 0;
  uint64_t dataBytes = 0;
};

/// The total header size (preamble + dict) from the first bytes of a file:
/// needs min(kNpyPreambleBytes, what the version needs) bytes of `preamble`.
/// Errors: not a .npy file, an unsupported version (printed as a number), a
/// header beyond kMaxNpyHeaderBytes, too few bytes.
runtime::Expected<size_t> npyHeaderSize(std::string_view preamble);

/// Parses a complete header (npyHeaderSize() bytes): a little-endian or
/// byte-order-free f2/f4/f8/i4/i8 dtype, C order, a shape of non-negative
/// extents whose element count and byte size fit in int64.
runtime::Expected<NpyHeader> parseNpyHeader(std::string_view header);

/// Parses a whole file in memory: the header, then exactly dataBytes of
/// data ("holds N data bytes, shape and dtype need M" otherwise).
runtime::Expected<NpyHeader> parseNpyFile(std::string_view file);

} // namespace lossjit

#endif // LOSSJIT_TOOLS_SUPPORT_NPYFORMAT_H
