//===- FileLock.cpp - Inter-process exclusive file lock -------------------===//

#include "runtime/FileLock.h"

#include "runtime/FileUtil.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <thread>
#include <unistd.h>

namespace lossjit::runtime {

Expected<FileLock> FileLock::lock(const std::string &path, bool block,
                                  bool *busy) {
  if (busy)
    *busy = false;
  // O_NOFOLLOW: a lock file planted as a symlink names someone else's file.
  // O_NONBLOCK: a FIFO planted in its place must not block the open.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0)
    return makeError("cannot open lock file '" + path +
                     "': " + errnoMessage(errno));
  int operation = LOCK_EX | (block ? 0 : LOCK_NB);
  while (::flock(fd, operation) != 0) {
    if (errno == EINTR)
      continue;
    int saved = errno;
    ::close(fd);
    if (saved == EWOULDBLOCK) {
      if (busy)
        *busy = true;
      return makeError("lock file '" + path + "' is held by another process");
    }
    return makeError("cannot lock '" + path + "': " + errnoMessage(saved));
  }
  return FileLock(fd);
}

Expected<FileLock> FileLock::acquire(const std::string &path) {
  return lock(path, /*block=*/true, nullptr);
}

Expected<FileLock> FileLock::acquire(const std::string &path, const LockWait &wait,
                                     bool *timedOut) {
  using namespace std::chrono;
  if (timedOut)
    *timedOut = false;
  auto start = steady_clock::now();
  auto nextReport = start + wait.progressInterval;
  // Poll with a growing pause (1 ms up to 50 ms): a lock held for a
  // compile is usually released within a second, and polling costs nothing
  // measurable next to the compile being waited for.
  milliseconds pause(1);
  while (true) {
    bool busy = false;
    Expected<FileLock> lock = tryAcquire(path, &busy);
    if (lock || !busy)
      return lock;
    auto now = steady_clock::now();
    auto waited = duration_cast<milliseconds>(now - start);
    if (waited >= wait.timeout) {
      if (timedOut)
        *timedOut = true;
      return makeError("lock file '" + path + "' is still held by another process after " +
                       std::to_string(waited.count()) + " ms");
    }
    if (wait.onProgress && now >= nextReport) {
      wait.onProgress(waited);
      nextReport += wait.progressInterval;
    }
    std::this_thread::sleep_for(std::min({pause, wait.timeout - waited}));
    pause = std::min(pause * 2, milliseconds(50));
  }
}

Expected<FileLock> FileLock::tryAcquire(const std::string &path, bool *busy) {
  return lock(path, /*block=*/false, busy);
}

FileLock::FileLock(FileLock &&other) noexcept : fd(other.fd) { other.fd = -1; }

FileLock &FileLock::operator=(FileLock &&other) noexcept {
  if (this != &other) {
    release();
    fd = other.fd;
    other.fd = -1;
  }
  return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::release() {
  if (fd < 0)
    return;
  // Closing the descriptor drops the flock.
  ::close(fd);
  fd = -1;
}

} // namespace lossjit::runtime
