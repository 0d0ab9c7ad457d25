//===- NpyFormat.cpp - The .npy header, parsed and bounded ----------------===//

#include "tools/support/NpyFormat.h"

#include <charconv>

using namespace lossjit;
using runtime::Error;
using runtime::Expected;
using runtime::makeError;
using runtime::printable;

namespace {
struct DtypeInfo {
  const char *descr;
  const char *name;
  int64_t bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {"<f2", "f16", 2}, {"<f4", "f32", 4}, {"<f8", "f64", 8}, {"<i4", "i32", 4}, {"<i8", "i64", 8}};

std::string_view trim(std::string_view s, std::string_view chars = " \t\r\n") {
  size_t begin = s.find_first_not_of(chars);
  if (begin == std::string_view::npos)
    return {};
  size_t end = s.find_last_not_of(chars);
  return s.substr(begin, end - begin + 1);
}

/// The value text of `key` in the header dict, e.g. "'<f2'" or "(3, 4)".
std::string_view headerValue(std::string_view header, std::string_view key) {
  // append(), not operator+: GCC 12 warns (-Wrestrict) falsely on "'" + ...
  std::string quoted(1, '\'');
  quoted.append(key);
  quoted.append(1, '\'');
  size_t at = header.find(quoted);
  if (at == std::string_view::npos)
    return {};
  std::string_view rest = trim(header.substr(at + quoted.size()));
  if (rest.empty() || rest.front() != ':')
    return {};
  rest = trim(rest.substr(1));
  if (!rest.empty() && rest.front() == '(') {
    size_t close = rest.find(')');
    return close == std::string_view::npos ? std::string_view() : rest.substr(0, close + 1);
  }
  size_t end = rest.find_first_of(",}");
  return trim(rest.substr(0, end));
}
} // namespace

Expected<size_t> lossjit::npyHeaderSize(std::string_view bytes) {
  if (bytes.size() < 8 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    return makeError("not a .npy file (missing \\x93NUMPY magic)");
  auto major = static_cast<unsigned>(static_cast<uint8_t>(bytes[6]));
  auto minor = static_cast<unsigned>(static_cast<uint8_t>(bytes[7]));
  size_t lengthBytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (!lengthBytes)
    return makeError("unsupported .npy format version " + std::to_string(major) + "." +
                     std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  if (bytes.size() < 8 + lengthBytes)
    return makeError("truncated header (the file ends inside the preamble)");
  size_t length = 0;
  for (size_t i = 0; i < lengthBytes; ++i)
    length |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  if (length > kMaxNpyHeaderBytes)
    return makeError("header of " + std::to_string(length) + " bytes exceeds the limit of " +
                     std::to_string(kMaxNpyHeaderBytes) + " bytes");
  return 8 + lengthBytes + length;
}

Expected<NpyHeader> lossjit::parseNpyHeader(std::string_view bytes) {
  Expected<size_t> size = npyHeaderSize(bytes);
  if (!size)
    return size.takeError();
  if (bytes.size() < *size)
    return makeError("truncated header (" + std::to_string(bytes.size()) + " of " +
                     std::to_string(*size) + " bytes)");
  size_t start = static_cast<uint8_t>(bytes[6]) == 1 ? 10 : 12;
  std::string_view header = bytes.substr(start, *size - start);
  std::string_view descr = trim(headerValue(header, "descr"), "'\" ");
  std::string_view order = headerValue(header, "fortran_order");
  std::string_view shapeText = headerValue(header, "shape");
  if (descr.empty() || order.empty() || shapeText.empty())
    return makeError("malformed header '" + printable(trim(header)) + "'");
  if (order != "False")
    return makeError("Fortran-ordered arrays are not supported (save with "
                     "np.ascontiguousarray)");
  NpyHeader out;
  out.dataOffset = *size;
  for (const DtypeInfo &d : kDtypes)
    if (descr == d.descr ||
        (descr.size() == 3 && descr[0] == '|' && descr.substr(1) == d.descr + 1)) {
      out.dtype = d.name;
      out.elementBytes = d.bytes;
    }
  if (out.dtype.empty())
    return makeError("dtype '" + printable(descr) +
                     "' is not supported (expected little-endian f2, f4, f8, i4 or i8)");
  if (shapeText.front() != '(' || shapeText.back() != ')')
    return makeError("bad shape '" + printable(shapeText) + "'");
  std::string_view dims = shapeText.substr(1, shapeText.size() - 2);
  while (!trim(dims).empty()) {
    size_t comma = dims.find(',');
    std::string_view dim = trim(dims.substr(0, comma));
    dims = comma == std::string_view::npos ? std::string_view() : dims.substr(comma + 1);
    if (dim.empty() && trim(dims).empty())
      break; // the trailing comma of "(3,)"
    int64_t extent = -1;
    auto [end, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), extent);
    if (dim.empty() || ec != std::errc() || end != dim.data() + dim.size() || extent < 0)
      return makeError("bad shape '" + printable(shapeText) +
                       "' (expected non-negative integers below 2^63)");
    if (out.shape.size() == kMaxNpyDims)
      return makeError("shape '" + printable(shapeText) + "' has more than " +
                       std::to_string(kMaxNpyDims) + " dimensions");
    out.shape.push_back(extent);
  }
  // The element count and byte size must not wrap: (2**61, 2) of f4 would
  // wrap to 0 bytes and match an empty file.
  for (int64_t extent : out.shape)
    if (__builtin_mul_overflow(out.elements, extent, &out.elements))
      return makeError("shape '" + printable(shapeText) +
                       "' has more than 2^63 elements (its size overflows)");
  int64_t dataBytes;
  if (__builtin_mul_overflow(out.elements, out.elementBytes, &dataBytes))
    return makeError("shape '" + printable(shapeText) + "' of " + out.dtype +
                     " needs more than 2^63 bytes (its size overflows)");
  out.dataBytes = static_cast<uint64_t>(dataBytes);
  return out;
}

Expected<NpyHeader> lossjit::parseNpyFile(std::string_view file) {
  Expected<NpyHeader> header = parseNpyHeader(file);
  if (!header)
    return header;
  uint64_t held = file.size() - header->dataOffset;
  if (held != header->dataBytes)
    return makeError("holds " + std::to_string(held) + " data bytes, shape and dtype need " +
                     std::to_string(header->dataBytes));
  return header;
}
