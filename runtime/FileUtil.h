//===- FileUtil.h - Whole-file I/O with errno messages ----------*- C++ -*-===//
//
// Thin POSIX wrappers: std::fstream loses errno, and every failure here must
// say which path and why (permission denied vs. no space left matters to the
// user deciding what to fix).
//
// Reads are bounded and regular-file only: the files read here live in cache
// directories and kernel paths that other users or processes may write, so a
// FIFO must not block the reader, and /dev/zero or a 64 GiB sparse file must
// not exhaust its memory.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_FILEUTIL_H
#define LOSSJIT_RUNTIME_FILEUTIL_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace lossjit::runtime {

/// The bound readFile() applies when the caller names none (1 GiB).
inline constexpr uint64_t kDefaultMaxFileBytes = uint64_t(1) << 30;

/// Reads a whole regular file of at most `maxBytes` bytes. Symlinks are
/// followed (bundles may be installed as symlink farms), but what they name
/// must be a regular file: a FIFO, a device, a socket or a directory is an
/// error at once (the open never blocks), as is a file larger than `maxBytes`
/// (checked before reading, and again while reading in case it grows).
Expected<std::string> readFile(const std::string &path, uint64_t maxBytes = kDefaultMaxFileBytes);

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
