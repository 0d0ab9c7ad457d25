//===- ToolInput.cpp - Tool setup and bounded inputs ----------------------===//

#include "tools/support/ToolInput.h"

#include "runtime/FileUtil.h"
#include "runtime/NestingLimit.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace lossjit;

void lossjit::initToolProcess() {
  // The default action of SIGXFSZ kills the process mid-write (a cache entry,
  // an .npy result). Ignored, write() fails with EFBIG, which the cache turns
  // into "memory only" and the writers into an error naming the file.
  std::signal(SIGXFSZ, SIG_IGN);
}

llvm::Error lossjit::flushStandardOutput() {
  llvm::outs().flush();
  if (!llvm::outs().has_error())
    return llvm::Error::success();
  std::error_code ec = llvm::outs().error();
  llvm::outs().clear_error();
  return llvm::createStringError("cannot write the standard output: " + ec.message());
}

uint64_t lossjit::physicalMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || pageSize <= 0)
    return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
}

llvm::Error lossjit::checkHostMemory(uint64_t bytes, const llvm::Twine &what) {
  uint64_t memory = physicalMemoryBytes();
  if (memory && bytes > memory)
    return llvm::createStringError(what + " need " + llvm::Twine(bytes) +
                                   " bytes, more than this machine's " + llvm::Twine(memory) +
                                   " bytes of memory");
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
lossjit::readGraphInput(const std::string &path) {
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError("cannot read graph '" + path + "': " + what);
  };
  bool isStdin = path == "-";
  int fd = isStdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(runtime::errnoMessage(errno));
  llvm::scope_exit closeFd([&] {
    if (!isStdin)
      ::close(fd);
  });
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fail(runtime::errnoMessage(errno));
  if (S_ISDIR(st.st_mode))
    return fail("it is a directory");
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > kMaxGraphFileBytes)
    return fail("it holds " + llvm::Twine(st.st_size) + " bytes, more than the limit of " +
                llvm::Twine(kMaxGraphFileBytes));
  // Pipes and devices have no size: read one byte past the bound to know.
  std::string text;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return fail(runtime::errnoMessage(errno));
    }
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxGraphFileBytes)
      return fail("it holds more than the limit of " + llvm::Twine(kMaxGraphFileBytes) + " bytes");
  }
  if (runtime::Error e = runtime::checkNesting(text, runtime::kMaxGraphNesting, path))
    return llvm::createStringError(e.message());
  return llvm::MemoryBuffer::getMemBufferCopy(text, isStdin ? "<stdin>" : path);
}
