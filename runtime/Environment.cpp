//===- Environment.cpp - Environment variables the runtime reads ----------===//

#include "runtime/Environment.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>

namespace lossjit::runtime {

std::optional<std::string> getEnv(const char *name) {
  const char *value = std::getenv(name);
  if (!value)
    return std::nullopt;
  return std::string(value);
}

bool isTruthy(const std::string &value) {
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lower == "1" || lower == "true" || lower == "yes" || lower == "on";
}

Expected<uint64_t> parseByteSize(const std::string &text) {
  auto bad = [&] {
    return makeError("invalid byte size '" + text +
                     "': expected a non-negative integer with an optional "
                     "K/M/G/T suffix, e.g. 1073741824 or 1G");
  };
  size_t pos = 0;
  uint64_t value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    uint64_t digit = static_cast<uint64_t>(text[pos] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10)
      return bad();
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == 0)
    return bad();
  std::string suffix = text.substr(pos);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  unsigned shift = 0;
  if (!suffix.empty() && suffix != "B") {
    const std::string units = "KMGT";
    size_t unit = units.find(suffix[0]);
    std::string rest = suffix.substr(1);
    if (unit == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB"))
      return bad();
    shift = 10 * static_cast<unsigned>(unit + 1);
  }
  if (shift && value > (std::numeric_limits<uint64_t>::max() >> shift))
    return bad();
  return value << shift;
}

std::vector<std::string> splitPathList(const std::string &text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(':', start);
    if (end == std::string::npos)
      end = text.size();
    if (end > start)
      parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string defaultCacheDirectory() {
  if (auto xdg = getEnv("XDG_CACHE_HOME"); xdg && !xdg->empty())
    return *xdg + "/lossjit";
  if (auto home = getEnv("HOME"); home && !home->empty())
    return *home + "/.cache/lossjit";
  return {};
}

} // namespace lossjit::runtime
