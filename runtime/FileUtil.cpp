//===- FileUtil.cpp - Whole-file I/O with errno messages ------------------===//

#include "runtime/FileUtil.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <cstdio>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace lossjit::runtime {

std::string errnoMessage(int errnoValue) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return strerror_r(errnoValue, buf, sizeof(buf));
#else
  if (strerror_r(errnoValue, buf, sizeof(buf)) != 0)
    return "error " + std::to_string(errnoValue);
  return buf;
#endif
}

namespace {
const char *fileTypeName(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}
} // namespace

Expected<std::string> readFile(const std::string &path, uint64_t maxBytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // forever; it has no effect on the regular files we go on to read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return makeError("cannot open '" + path + "': " + errnoMessage(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int saved = errno;
    ::close(fd);
    return makeError("cannot stat '" + path + "': " + errnoMessage(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return makeError("cannot read '" + path + "': it is " + fileTypeName(st.st_mode) +
                     ", expected a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return makeError("cannot read '" + path + "': it holds " + std::to_string(st.st_size) +
                     " bytes, more than the limit of " + std::to_string(maxBytes) + " bytes");
  }
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int saved = errno;
      ::close(fd);
      return makeError("cannot read '" + path + "': " + errnoMessage(saved));
    }
    if (data.size() + static_cast<size_t>(n) > maxBytes) {
      ::close(fd);
      return makeError("cannot read '" + path + "': it grew past the limit of " +
                       std::to_string(maxBytes) + " bytes while being read");
    }
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

Error writeFile(const std::string &path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return makeError("cannot create '" + path + "': " + errnoMessage(errno));
  const char *p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int saved = errno;
      ::close(fd);
      return makeError("cannot write '" + path + "': " + errnoMessage(saved));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return makeError("cannot write '" + path + "': " + errnoMessage(errno));
  return Error::success();
}

Error createDirectories(const std::string &path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    return makeError("cannot create directory '" + path + "': " + ec.message());
  if (!std::filesystem::is_directory(path, ec))
    return makeError("cannot create directory '" + path +
                     "': a non-directory file is in the way");
  return Error::success();
}

Error removeTree(const std::string &path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec)
    return makeError("cannot remove '" + path + "': " + ec.message());
  return Error::success();
}

std::string uniqueSuffix() {
  // pid + 64 fresh random bits: unique across processes (including forked
  // children) and threads without any shared state.
  std::random_device device;
  uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(bits));
  return std::to_string(::getpid()) + "-" + buf;
}

} // namespace lossjit::runtime
