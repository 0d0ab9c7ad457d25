//===- FuzzNpy.cpp - libFuzzer target: the .npy header parser -------------===//
//
// Any bytes as a .npy file: parseNpyFile() must return a header or an error,
// never crash, and a header it returns must be self-consistent (sizes that
// did not wrap, data that fits the file, messages without raw bytes).
//
//===----------------------------------------------------------------------===//

#include "tools/support/NpyFormat.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view file(reinterpret_cast<const char *>(data), size);
  lossjit::runtime::Expected<lossjit::NpyHeader> header = lossjit::parseNpyFile(file);
  if (!header) {
    for (char c : header.errorMessage())
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        std::abort(); // a raw byte of the input reached the message
    return 0;
  }
  int64_t elements = 1;
  for (int64_t extent : header->shape) {
    if (extent < 0 || __builtin_mul_overflow(elements, extent, &elements))
      std::abort();
  }
  if (elements != header->elements ||
      header->dataBytes != static_cast<uint64_t>(elements * header->elementBytes) ||
      header->dataOffset + header->dataBytes != size)
    std::abort();
  return 0;
}
