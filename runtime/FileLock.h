//===- FileLock.h - Inter-process exclusive file lock -----------*- C++ -*-===//
//
// flock(2) on a lock file, so N processes that miss the cache on the same key
// compile it once: the first holds the lock while compiling, the others wait
// and then find the entry on disk. flock locks belong to the open file
// description, so two threads of one process that each acquire() exclude each
// other as well, and the kernel drops the lock if the holder dies.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_FILELOCK_H
#define LOSSJIT_RUNTIME_FILELOCK_H

#include "runtime/Status.h"

#include <string>

namespace lossjit::runtime {

/// An acquired exclusive lock; released on destruction. Move-only.
class FileLock {
public:
  /// Creates `path` if needed and blocks until the lock is held.
  static Expected<FileLock> acquire(const std::string &path);

  /// Like acquire() but returns an error at once when another holder has it;
  /// `*busy` (if given) tells contention apart from I/O errors.
  static Expected<FileLock> tryAcquire(const std::string &path,
                                       bool *busy = nullptr);

  FileLock(FileLock &&other) noexcept;
  FileLock &operator=(FileLock &&other) noexcept;
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;
  ~FileLock();

  /// Releases early (idempotent).
  void release();

private:
  explicit FileLock(int fd) : fd(fd) {}
  static Expected<FileLock> lock(const std::string &path, bool block,
                                 bool *busy);
  int fd = -1;
};

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_FILELOCK_H
