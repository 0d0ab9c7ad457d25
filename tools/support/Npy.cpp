//===- Npy.cpp ------------------------------------------------------------===//

#include "tools/support/Npy.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

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

/// The value text of `key` in the header dict, e.g. "'<f2'" or "(3, 4)".
llvm::StringRef headerValue(llvm::StringRef header, llvm::StringRef key) {
  size_t at = header.find("'" + key.str() + "'");
  if (at == llvm::StringRef::npos)
    return {};
  llvm::StringRef rest = header.drop_front(at + key.size() + 2).ltrim();
  if (!rest.consume_front(":"))
    return {};
  rest = rest.ltrim();
  if (rest.starts_with("(")) {
    size_t close = rest.find(')');
    return close == llvm::StringRef::npos ? llvm::StringRef() : rest.take_front(close + 1);
  }
  return rest.take_until([](char c) { return c == ',' || c == '}'; }).rtrim();
}
} // namespace

llvm::Expected<NpyArray> lossjit::readNpy(const std::string &path) {
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!file)
    return fail(path, "cannot read: " + file.getError().message());
  llvm::StringRef bytes = (*file)->getBuffer();
  if (!bytes.starts_with("\x93NUMPY") || bytes.size() < 10)
    return fail(path, "not a .npy file (missing \\x93NUMPY magic)");
  uint8_t major = bytes[6];
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return fail(path, "truncated header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    headerStart = 12;
  } else {
    return fail(path, "unsupported .npy format version " + llvm::Twine(major));
  }
  if (bytes.size() < headerStart + headerLen)
    return fail(path, "truncated header");
  llvm::StringRef header = bytes.substr(headerStart, headerLen);
  llvm::StringRef descr = headerValue(header, "descr").trim("'\" ");
  llvm::StringRef order = headerValue(header, "fortran_order");
  llvm::StringRef shapeText = headerValue(header, "shape");
  if (descr.empty() || order.empty() || shapeText.empty())
    return fail(path, "malformed header '" + header.trim() + "'");
  if (order != "False")
    return fail(path, "Fortran-ordered arrays are not supported (save with "
                      "np.ascontiguousarray)");
  NpyArray array;
  int64_t elemBytes = 0;
  for (const DtypeInfo &d : kDtypes)
    if (descr == d.descr || (descr.size() == 3 && descr[0] == '|' &&
                             descr.drop_front() == llvm::StringRef(d.descr).drop_front())) {
      array.dtype = d.name;
      elemBytes = d.bytes;
    }
  if (array.dtype.empty())
    return fail(path, "dtype '" + descr +
                          "' is not supported (expected little-endian f2, f4, "
                          "f8, i4 or i8)");
  llvm::SmallVector<llvm::StringRef> dims;
  shapeText.trim("() ").split(dims, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef dim : dims) {
    int64_t extent;
    if (dim.trim().getAsInteger(10, extent) || extent < 0)
      return fail(path, "bad shape '" + shapeText + "'");
    array.shape.push_back(extent);
  }
  int64_t payload = array.count() * elemBytes;
  size_t dataStart = headerStart + headerLen;
  if (static_cast<int64_t>(bytes.size() - dataStart) != payload)
    return fail(path, "holds " + llvm::Twine(bytes.size() - dataStart) +
                          " data bytes, shape and dtype need " + llvm::Twine(payload));
  array.bytes.assign(bytes.begin() + dataStart, bytes.end());
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
  std::string tmp = path + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec)
      return fail(path, "cannot write: " + ec.message());
    os << "\x93NUMPY" << char(1) << char(0) << char(header.size() & 0xff)
       << char(header.size() >> 8) << header;
    os.write(array.bytes.data(), array.bytes.size());
    os.close();
    if (os.has_error())
      return fail(path, "write failed");
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path))
    return fail(path, "rename failed: " + ec.message());
  return llvm::Error::success();
}
