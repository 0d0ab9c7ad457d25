//===- FileLock.h - Inter-process exclusive file lock -----------*- C++ -*-===//
//
// flock(2) on a lock file, so N processes that miss the cache on the same key
// compile it once: the first holds the lock while compiling, the others wait
// and then find the entry on disk. flock locks belong to the open file
// description, so two threads of one process that each acquire() exclude each
// other as well, and the kernel drops the lock if the holder dies.
//
// A holder that is alive but stopped (SIGSTOP, a debugger, a hung NFS
// client) keeps the lock forever, so waiting is bounded: acquire() with a
// LockWait polls, reports progress and gives up after its timeout; the
// caller decides what to do without the lock (the cache compiles anyway).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_FILELOCK_H
#define LOSSJIT_RUNTIME_FILELOCK_H

#include "runtime/Status.h"

#include <chrono>
#include <functional>
#include <string>

namespace lossjit::runtime {

/// How long FileLock::acquire() waits, and how it reports waiting.
struct LockWait {
  /// Give up after this long.
  std::chrono::milliseconds timeout{60000};
  /// Interval between onProgress calls.
  std::chrono::milliseconds progressInterval{10000};
  /// Called every progressInterval while waiting, with the time waited.
  std::function<void(std::chrono::milliseconds waited)> onProgress;
};

/// An acquired exclusive lock; released on destruction. Move-only.
class FileLock {
public:
  /// Creates `path` if needed and blocks until the lock is held.
  static Expected<FileLock> acquire(const std::string &path);

  /// Creates `path` if needed and waits for the lock at most `wait.timeout`.
  /// On timeout the error names the lock file and how long it waited, and
  /// `*timedOut` (if given) is set, telling it apart from I/O errors.
  static Expected<FileLock> acquire(const std::string &path, const LockWait &wait,
                                    bool *timedOut = nullptr);

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
