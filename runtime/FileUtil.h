//===- FileUtil.h - Whole-file I/O with errno messages ----------*- C++ -*-===//
//
// Thin POSIX wrappers: std::fstream loses errno, and every failure here must
// say which path and why (permission denied vs. no space left matters to the
// user deciding what to fix).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_FILEUTIL_H
#define LOSSJIT_RUNTIME_FILEUTIL_H

#include "runtime/Status.h"

#include <string>
#include <string_view>

namespace lossjit::runtime {

/// Reads a whole file.
Expected<std::string> readFile(const std::string &path);

/// Creates or truncates `path` and writes `data` to it.
Error writeFile(const std::string &path, std::string_view data);

/// mkdir -p.
Error createDirectories(const std::string &path);

/// Recursively removes a file or directory; missing paths are not an error.
Error removeTree(const std::string &path);

/// A name component unique across processes and threads (pid, thread, time,
/// counter), for temporary files that are renamed into place.
std::string uniqueSuffix();

/// The strerror text of `errnoValue`.
std::string errnoMessage(int errnoValue);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_FILEUTIL_H
