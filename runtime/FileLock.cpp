//===- FileLock.cpp - Inter-process exclusive file lock -------------------===//

#include "runtime/FileLock.h"

#include "runtime/FileUtil.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace lossjit::runtime {

Expected<FileLock> FileLock::lock(const std::string &path, bool block,
                                  bool *busy) {
  if (busy)
    *busy = false;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
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
