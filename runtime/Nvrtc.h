//===- Nvrtc.h - NVRTC (CUDA C++ -> PTX), loaded at run time ----*- C++ -*-===//
//
// NVRTC compiles the reference kernels that GPU tests use as an independent
// second answer to the MLIR-generated ones. Like the driver it is dlopen'ed:
// its soname carries the CUDA major version (libnvrtc.so.12, .13, ...), and a
// runtime that links one would not load on a machine with another.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_NVRTC_H
#define LOSSJIT_RUNTIME_NVRTC_H

#include "runtime/Status.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lossjit::runtime {

/// A loaded NVRTC library.
class Nvrtc {
public:
  /// The process-wide NVRTC, found on first use (see candidateLibraries()).
  static Expected<const Nvrtc *> get();

  /// Tries each candidate in order; the error lists every attempt.
  static Expected<std::unique_ptr<Nvrtc>>
  load(const std::vector<std::string> &candidates);

  /// Where get() looks: $LOSSJIT_NVRTC_PATH, then the sonames libnvrtc.so,
  /// libnvrtc.so.13, .12, .11.2 on the loader path, then the same names
  /// under $CUDA_HOME/lib64, $CUDA_PATH/lib64 and /usr/local/cuda/lib64.
  static std::vector<std::string> candidateLibraries();

  ~Nvrtc();
  Nvrtc(const Nvrtc &) = delete;
  Nvrtc &operator=(const Nvrtc &) = delete;

  /// The file actually loaded.
  const std::string &libraryPath() const { return path; }
  /// "major.minor" of NVRTC.
  std::string version() const;
  /// The CUDA toolkit include directory passed as -I (empty if none found):
  /// next to the library, $CUDA_HOME/include, or /usr/local/cuda/include.
  const std::string &includeDirectory() const { return includeDir; }

  /// Compiles `source` to PTX for `arch` ("sm_80", "sm_90a" or
  /// "compute_80"; PTX is always for the virtual compute_ target).
  /// `programName` names the source in diagnostics. On failure the error holds
  /// NVRTC's compile log.
  Expected<std::string>
  compileToPtx(std::string_view source, std::string_view programName,
               std::string_view arch,
               const std::vector<std::string> &extraOptions = {}) const;

private:
  Nvrtc() = default;
  struct Api;
  void *handle = nullptr;
  std::unique_ptr<Api> api;
  std::string path;
  std::string includeDir;
};

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_NVRTC_H
