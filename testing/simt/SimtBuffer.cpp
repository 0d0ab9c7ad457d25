//===- SimtBuffer.cpp - memory seen by interpreted kernels ----------------===//

#include "testing/simt/SimtBuffer.h"
#include "testing/simt/FloatFormats.h"

#include <bit>

using namespace lossjit::simt;

const char *lossjit::simt::getMemorySpaceName(MemorySpace space) {
  switch (space) {
  case MemorySpace::Global:
    return "global memory";
  case MemorySpace::Shared:
    return "shared memory";
  case MemorySpace::Private:
    return "private memory";
  }
  return "memory";
}

SimtBuffer::SimtBuffer(std::string name, ElementType type, void *data,
                       int64_t numElements, MemorySpace space)
    : name(std::move(name)), type(type), space(space), numElements(numElements),
      base(data) {}

SimtBuffer::SimtBuffer(std::string name, ElementType type, int64_t numElements,
                       MemorySpace space)
    : name(std::move(name)), type(type), space(space),
      numElements(numElements) {
  size_t bytes = size_t(numElements) * getElementSize(type);
  storage.assign((bytes + 7) / 8 + 1, 0);
  base = storage.data();
  initialized.assign(size_t(numElements), 0);
}

void SimtBuffer::setAllInitialized(bool value) {
  if (value)
    initialized.clear();
  else
    initialized.assign(size_t(numElements), 0);
}

uint64_t SimtBuffer::loadWord(int64_t i) const {
  const char *p = static_cast<const char *>(base);
  switch (type) {
  case ElementType::I1:
    return uint64_t(p[i] & 1);
  case ElementType::I8:
    return uint8_t(p[i]);
  case ElementType::I16: {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
  }
  case ElementType::F16:
  case ElementType::BF16: {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    float f =
        type == ElementType::F16 ? halfBitsToFloat(v) : bfloat16BitsToFloat(v);
    return std::bit_cast<uint32_t>(f);
  }
  case ElementType::I32:
  case ElementType::F32: {
    uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case ElementType::I64:
  case ElementType::Index:
  case ElementType::F64: {
    uint64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    return v;
  }
  }
  return 0;
}

void SimtBuffer::storeWord(int64_t i, uint64_t word) {
  char *p = static_cast<char *>(base);
  switch (type) {
  case ElementType::I1:
    p[i] = char(word & 1);
    break;
  case ElementType::I8:
    p[i] = char(word);
    break;
  case ElementType::I16: {
    uint16_t v = uint16_t(word);
    std::memcpy(p + 2 * i, &v, 2);
    break;
  }
  case ElementType::F16:
  case ElementType::BF16: {
    double f = std::bit_cast<float>(uint32_t(word));
    uint16_t v = type == ElementType::F16 ? doubleToHalfBits(f)
                                          : doubleToBFloat16Bits(f);
    std::memcpy(p + 2 * i, &v, 2);
    break;
  }
  case ElementType::I32:
  case ElementType::F32: {
    uint32_t v = uint32_t(word);
    std::memcpy(p + 4 * i, &v, 4);
    break;
  }
  case ElementType::I64:
  case ElementType::Index:
  case ElementType::F64:
    std::memcpy(p + 8 * i, &word, 8);
    break;
  }
  if (!initialized.empty())
    initialized[size_t(i)] = 1;
}
