//===- FuzzJson.cpp - libFuzzer target: the bounded JSON parser -----------===//
//
// Any bytes as JSON: parseJson() returns a value or an error within its
// limits; a value it returns is written back by writeJson() as text that
// parses to the same value (the manifest writer's round trip).
//
//===----------------------------------------------------------------------===//

#include "runtime/Json.h"

#include <cstdlib>

using namespace lossjit::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  Expected<JsonValue> value = parseJson(text);
  if (!value)
    return 0;
  for (int indent : {0, 2}) {
    std::string written = writeJson(*value, indent);
    Expected<JsonValue> back = parseJson(written);
    if (!back || !(*back == *value))
      std::abort();
  }
  return 0;
}
