//===- Npy.cpp - read and write NumPy .npy files --------------------------===//
//
// readNpy streams a file through NpyFormat's bounded header parser; only
// then does it allocate, exactly the data the header announces.
//
//===----------------------------------------------------------------------===//

#include "tools/support/Npy.h"

#include "runtime/FileUtil.h"
#include "tools/support/NpyFormat.h"
#include "tools/support/ToolInput.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace lossjit;

int64_t NpyArray::count() const {
  int64_t c = 1;
  for (int64_t d : shape)
    c *= d;
  return c;
}

namespace {
struct DtypeInfo {
  const char *descr;
  const char *name;
  int64_t bytes;
};
constexpr DtypeInfo kDtypes[] = {{"<f2", "f16", 2}, {"<f4", "f32", 4},
                                 {"<f8", "f64", 8}, {"<i4", "i32", 4},
                                 {"<i8", "i64", 8}};

llvm::Error fail(const std::string &path, const llvm::Twine &what) {
  return llvm::createStringError(path + ": " + what.str());
}

/// Reads up to `count` bytes (fewer only at end of file).
llvm::Expected<size_t> readUpTo(int fd, char *out, size_t count) {
  size_t done = 0;
  while (done < count) {
    ssize_t n = ::read(fd, out + done, count - done);
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return llvm::errorCodeToError(std::error_code(errno, std::generic_category()));
    }
    done += static_cast<size_t>(n);
  }
  return done;
}
} // namespace

llvm::Expected<NpyArray> lossjit::readNpy(const std::string &path) {
  // The header first, then exactly the data it announces: sizes are checked
  // (overflow, file length, memory) before anything large is allocated.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(path, "cannot read: " + runtime::errnoMessage(errno));
  llvm::scope_exit closeFd([&] { ::close(fd); });
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return fail(path, "cannot read: " + runtime::errnoMessage(errno));
  if (S_ISDIR(st.st_mode))
    return fail(path, "cannot read: it is a directory");

  std::string head(kNpyPreambleBytes, '\0');
  auto got = readUpTo(fd, head.data(), head.size());
  if (!got)
    return fail(path, "cannot read: " + llvm::toString(got.takeError()));
  head.resize(*got);
  runtime::Expected<size_t> headerSize = npyHeaderSize(head);
  if (!headerSize)
    return fail(path, headerSize.errorMessage());
  if (*headerSize > head.size()) {
    size_t have = head.size();
    head.resize(*headerSize);
    got = readUpTo(fd, head.data() + have, *headerSize - have);
    if (!got)
      return fail(path, "cannot read: " + llvm::toString(got.takeError()));
    head.resize(have + *got);
  }
  runtime::Expected<NpyHeader> header = parseNpyHeader(head);
  if (!header)
    return fail(path, header.errorMessage());
  if (S_ISREG(st.st_mode)) {
    uint64_t held = static_cast<uint64_t>(st.st_size) - header->dataOffset;
    if (static_cast<uint64_t>(st.st_size) < header->dataOffset || held != header->dataBytes)
      return fail(path, "holds " + llvm::Twine(held) + " data bytes, shape and dtype need " +
                            llvm::Twine(header->dataBytes));
  }
  if (llvm::Error err =
          checkHostMemory(header->dataBytes, "its " + llvm::Twine(header->dtype) + " data"))
    return fail(path, llvm::toString(std::move(err)));

  NpyArray array;
  array.dtype = header->dtype;
  array.shape = header->shape;
  array.bytes.resize(header->dataBytes);
  // The preamble read may have reached into the data (tiny headers).
  size_t early = std::min<size_t>(head.size() - header->dataOffset, array.bytes.size());
  std::copy_n(head.data() + header->dataOffset, early, array.bytes.data());
  got = readUpTo(fd, array.bytes.data() + early, array.bytes.size() - early);
  if (!got)
    return fail(path, "cannot read: " + llvm::toString(got.takeError()));
  char extra;
  auto more = readUpTo(fd, &extra, 1);
  uint64_t held = early + *got + (more && *more ? 1 : 0);
  if (held != header->dataBytes || head.size() - header->dataOffset > early)
    return fail(path, "holds " + llvm::Twine(held) + (held > header->dataBytes ? "+" : "") +
                          " data bytes, shape and dtype need " + llvm::Twine(header->dataBytes));
  return array;
}

llvm::Error lossjit::writeNpy(const std::string &path, const NpyArray &array) {
  const char *descr = nullptr;
  int64_t elemBytes = 0;
  for (const DtypeInfo &d : kDtypes)
    if (array.dtype == d.name) {
      descr = d.descr;
      elemBytes = d.bytes;
    }
  if (!descr)
    return fail(path, "cannot write dtype '" + array.dtype + "'");
  if (static_cast<int64_t>(array.bytes.size()) != array.count() * elemBytes)
    return fail(path, "array bytes do not match its shape");
  std::string shape = "(";
  for (int64_t d : array.shape)
    shape += std::to_string(d) + ",";
  if (array.shape.size() > 1)
    shape.pop_back();
  shape += ")";
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  // runtime::writeFile, not raw_fd_ostream: a stream that failed (EFBIG past
  // `ulimit -f`, ENOSPC) aborts the process in its destructor, while this
  // returns the error, which names the file.
  std::string data = "\x93NUMPY";
  data += char(1);
  data += char(0);
  data += char(header.size() & 0xff);
  data += char(header.size() >> 8);
  data += header;
  data.append(array.bytes.data(), array.bytes.size());
  std::string tmp = path + ".tmp";
  if (runtime::Error e = runtime::writeFile(tmp, data)) {
    ::unlink(tmp.c_str());
    return fail(path, "cannot write: " + e.message());
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    ::unlink(tmp.c_str());
    return fail(path, "rename failed: " + ec.message());
  }
  return llvm::Error::success();
}
