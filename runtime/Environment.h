//===- Environment.h - Environment variables the runtime reads --*- C++ -*-===//
//
// All LOSSJIT_* variables are read through here so their parsing (and the
// error for a malformed value) is uniform.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_ENVIRONMENT_H
#define LOSSJIT_RUNTIME_ENVIRONMENT_H

#include "runtime/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lossjit::runtime {

/// The variable's value, or nullopt when unset. An empty value counts as set.
std::optional<std::string> getEnv(const char *name);

/// True for "1", "true", "yes", "on" (case-insensitive).
bool isTruthy(const std::string &value);

/// Parses a byte count: a non-negative integer with an optional K, M, G or T
/// suffix (binary multiples, optional trailing "B" or "iB").
Expected<uint64_t> parseByteSize(const std::string &text);

/// Splits a colon-separated path list, dropping empty elements.
std::vector<std::string> splitPathList(const std::string &text);

/// The default cache root: $XDG_CACHE_HOME/lossjit, else $HOME/.cache/lossjit,
/// else empty (no usable home: the cache stays in memory).
std::string defaultCacheDirectory();

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_ENVIRONMENT_H
