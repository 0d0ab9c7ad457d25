//===- ReplayMain.cpp - Run fuzz inputs without libFuzzer -----------------===//
//
// The fuzz targets' LLVMFuzzerTestOneInput over files and directories given
// on the command line, one call per file: how the seed corpus and every
// crash the fuzzers found (tests/fuzz/corpus/<target>/) run as regression
// tests in every build, GCC included. A crash or abort fails the test.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {
/// The input as libFuzzer passes it, with no NUL or anything else after it,
/// and more strictly: it ends right at an inaccessible page, so a target that
/// reads past the end (as MLIR's lexer does without a terminating NUL) faults
/// here in every build, uninstrumented code included. A std::string's data
/// would hide such a read; an exact-size heap copy catches it only when the
/// bytes after it happen not to be zero.
class GuardedCopy {
public:
  explicit GuardedCopy(const std::string &bytes) {
    size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size_t dataPages = (bytes.size() + page - 1) / page;
    length = (dataPages + 1) * page;
    void *map = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    if (map == MAP_FAILED) {
      std::perror("mmap");
      std::abort();
    }
    base = static_cast<uint8_t *>(map);
    if (::mprotect(base + dataPages * page, page, PROT_NONE) != 0) {
      std::perror("mprotect");
      std::abort();
    }
    start = base + dataPages * page - bytes.size();
    std::copy(bytes.begin(), bytes.end(), start);
  }
  ~GuardedCopy() { ::munmap(base, length); }
  GuardedCopy(const GuardedCopy &) = delete;
  GuardedCopy &operator=(const GuardedCopy &) = delete;
  const uint8_t *get() const { return start; }

private:
  uint8_t *base = nullptr;
  uint8_t *start = nullptr;
  size_t length = 0;
};
} // namespace

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const fs::directory_entry &e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path &path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 1;
    }
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    GuardedCopy data(bytes);
    LLVMFuzzerTestOneInput(data.get(), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return files.empty() ? 1 : 0;
}
