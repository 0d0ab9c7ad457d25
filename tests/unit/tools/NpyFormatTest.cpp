//===- NpyFormatTest.cpp - .npy headers: no wrap, no raw bytes ------------===//

#include "tools/support/NpyFormat.h"
#include "tools/support/Npy.h"

#include "runtime/FileUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

using namespace lossjit;

namespace {
/// A .npy file (version `major`) with header dict `dict` and `data`.
std::string npy(const std::string &dict, const std::string &data = "", int major = 1) {
  std::string header = dict;
  size_t preamble = major == 1 ? 10 : 12;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char((header.size() >> 8) & 0xff);
  if (major != 1)
    out += std::string(2, '\0');
  return out + header + data;
}

std::string dict(const std::string &descr, const std::string &shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

std::string parseError(const std::string &file) {
  runtime::Expected<NpyHeader> h = parseNpyFile(file);
  EXPECT_FALSE(h) << "parsed";
  return h ? std::string() : h.errorMessage();
}

/// A file under $TMPDIR holding `bytes`, removed on destruction.
struct TempFile {
  explicit TempFile(const std::string &bytes) {
    char name[] = "/tmp/lossjit-npy-XXXXXX";
    int fd = ::mkstemp(name);
    path = name;
    ::close(fd);
    EXPECT_FALSE(runtime::writeFile(path, bytes));
  }
  ~TempFile() { ::unlink(path.c_str()); }
  std::string path;
};
} // namespace

TEST(NpyFormat, ParsesWhatNumPyWrites) {
  std::string data(24, '\0');
  std::string file = npy(dict("<f4", "(2, 3)"), data);
  runtime::Expected<NpyHeader> h = parseNpyFile(file);
  ASSERT_TRUE(h) << h.errorMessage();
  EXPECT_EQ(h->dtype, "f32");
  EXPECT_EQ(h->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->elements, 6);
  EXPECT_EQ(h->dataBytes, 24u);
  EXPECT_EQ(h->dataOffset, file.size() - data.size());
  h = parseNpyFile(npy(dict("<i8", "(3,)"), std::string(24, '\0'), 2));
  ASSERT_TRUE(h) << h.errorMessage();
  EXPECT_EQ(h->shape, (std::vector<int64_t>{3}));
  h = parseNpyFile(npy(dict("<f8", "()"), std::string(8, '\0'), 3));
  ASSERT_TRUE(h) << h.errorMessage();
  EXPECT_TRUE(h->shape.empty());
  EXPECT_EQ(h->elements, 1);
  // A zero extent is a valid empty array, whatever the other extents.
  h = parseNpyFile(npy(dict("<f2", "(0, 9223372036854775807)")));
  ASSERT_TRUE(h) << h.errorMessage();
  EXPECT_EQ(h->dataBytes, 0u);
}

TEST(NpyFormat, OverflowingShapesAreRejected) {
  // issue 16: (2**61, 2) of f4 wrapped to 0 bytes and the runner crashed.
  EXPECT_EQ(parseError(npy(dict("<f4", "(2305843009213693952, 2)"))),
            "shape '(2305843009213693952, 2)' of f32 needs more than 2^63 bytes (its size "
            "overflows)");
  EXPECT_EQ(parseError(npy(dict("<f4", "(4294967296, 4294967296, 2)"))),
            "shape '(4294967296, 4294967296, 2)' has more than 2^63 elements (its size "
            "overflows)");
  EXPECT_EQ(parseError(npy(dict("<f4", "(99999999999999999999,)"))),
            "bad shape '(99999999999999999999,)' (expected non-negative integers below 2^63)");
  EXPECT_EQ(parseError(npy(dict("<f4", "(-1, 2)"))),
            "bad shape '(-1, 2)' (expected non-negative integers below 2^63)");
  std::string many = "(";
  for (int i = 0; i < 65; ++i)
    many += "1,";
  many += ")";
  EXPECT_NE(parseError(npy(dict("<f4", many))).find("has more than 64 dimensions"),
            std::string::npos);
}

TEST(NpyFormat, DataMustMatchTheHeader) {
  EXPECT_EQ(parseError(npy(dict("<f4", "(2, 3)"), std::string(20, '\0'))),
            "holds 20 data bytes, shape and dtype need 24");
  EXPECT_EQ(parseError(npy(dict("<f4", "(2, 3)"), std::string(28, '\0'))),
            "holds 28 data bytes, shape and dtype need 24");
  // A header longer than the file.
  std::string cut = npy(dict("<f4", "(2, 3)")).substr(0, 30);
  EXPECT_EQ(parseError(cut), "truncated header (30 of 128 bytes)");
  EXPECT_EQ(parseError(std::string("\x93NUMPY\x02\x00\x01", 9)),
            "truncated header (the file ends inside the preamble)");
}

TEST(NpyFormat, ErrorsNeverPrintControlCharacters) {
  // issue 16: the version error printed the version byte as a character.
  std::string e = parseError(std::string("\x93NUMPY\x07\x00\x10\x00", 10) + std::string(16, 'x'));
  EXPECT_EQ(e, "unsupported .npy format version 7.0 (expected 1.0, 2.0 or 3.0)");
  e = parseError(std::string("\x93NUMPY\x1b\x5b", 8));
  EXPECT_EQ(e, "unsupported .npy format version 27.91 (expected 1.0, 2.0 or 3.0)");
  e = parseError(npy("{'descr': '\x1b[2J\x07', 'fortran_order': False, 'shape': (1,), }",
                     std::string(4, '\0')));
  EXPECT_EQ(e, "dtype '\\x1b[2J\\x07' is not supported (expected little-endian f2, f4, f8, "
               "i4 or i8)");
  e = parseError(npy("{\x1b\x07}"));
  EXPECT_EQ(e.rfind("malformed header '{\\x1b\\x07}", 0), 0u) << e;
  for (char c : e)
    EXPECT_TRUE(c >= 0x20 && c < 0x7f);
}

TEST(NpyFormat, HeaderSizeIsBounded) {
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + std::string("\xff\xff\xff\x7f", 4);
  runtime::Expected<size_t> size = npyHeaderSize(v2);
  ASSERT_FALSE(size);
  EXPECT_EQ(size.errorMessage(), "header of 2147483647 bytes exceeds the limit of 1048576 bytes");
}

TEST(ReadNpy, ChecksSizesBeforeReading) {
  // The file is read in two steps: a header announcing more data than the
  // file holds is refused before anything is allocated.
  TempFile huge(npy(dict("<f4", "(2305843009213693952, 2)")));
  auto r = readNpy(huge.path);
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            huge.path + ": shape '(2305843009213693952, 2)' of f32 needs more than 2^63 bytes "
                        "(its size overflows)");
  TempFile shortFile(npy(dict("<f4", "(1000, 1000)"), std::string(100, '\0')));
  r = readNpy(shortFile.path);
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            shortFile.path + ": holds 100 data bytes, shape and dtype need 4000000");
  // More than this machine's memory (a sparse file is all it takes).
  std::string sparseHeader = npy(dict("<f4", "(1099511627776,)"));
  TempFile sparse(sparseHeader);
  ASSERT_EQ(::truncate(sparse.path.c_str(), off_t(sparseHeader.size()) + (off_t(1) << 42)), 0);
  r = readNpy(sparse.path);
  ASSERT_FALSE(static_cast<bool>(r));
  std::string message = llvm::toString(r.takeError());
  EXPECT_EQ(message.rfind(sparse.path + ": its f32 data need 4398046511104 bytes, more "
                                        "than this machine's ",
                          0),
            0u)
      << message;
  // And the good case still reads.
  std::string values(12, '\x01');
  TempFile good(npy(dict("<i4", "(3,)"), values));
  auto g = readNpy(good.path);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(std::string(g->bytes.begin(), g->bytes.end()), values);
}
