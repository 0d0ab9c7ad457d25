//===- Npy.h - read and write NumPy .npy files ------------------*- C++ -*-===//

#ifndef LOSSJIT_TOOLS_SUPPORT_NPY_H
#define LOSSJIT_TOOLS_SUPPORT_NPY_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lossjit {

/// A C-ordered array in host memory with a plan dtype name.
struct NpyArray {
  std::string dtype;          ///< "f16", "f32", "f64", "i32", "i64".
  std::vector<int64_t> shape; ///< empty for a 0-d array.
  std::vector<char> bytes;

  int64_t count() const;
  void *data() { return bytes.data(); }
  const void *data() const { return bytes.data(); }
};

/// Reads a little-endian, C-ordered .npy (format 1.0–3.0) of f2/f4/f8/i4/i8.
/// Errors name the file and what was expected.
llvm::Expected<NpyArray> readNpy(const std::string &path);

/// Writes `array` as .npy 1.0 through a temporary file renamed into place,
/// so a reader never sees a half-written file.
llvm::Error writeNpy(const std::string &path, const NpyArray &array);

} // namespace lossjit

#endif // LOSSJIT_TOOLS_SUPPORT_NPY_H
