//===- CubinCompiler.h - PTX → cubin through nvJitLink or ptxas -*- C++ -*-===//
//
// `lossjit-aot --emit cubin` assembles each kernel's PTX ahead of time so the
// driver skips its JIT at load. Two assemblers, neither linked:
//   * nvJitLink (libnvJitLink.so.13/.12, dlopen'ed; in-process), preferred;
//   * ptxas (a subprocess), found on PATH, in $CUDA_HOME/bin or
//     /usr/local/cuda/bin.
// Neither present is a clear error naming where it looked.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_AOT_CUBINCOMPILER_H
#define LOSSJIT_TOOLS_AOT_CUBINCOMPILER_H

#include "runtime/Status.h"

#include <memory>
#include <string>

namespace lossjit::aot {

/// Turns PTX into a cubin (ELF) for one arch.
class CubinCompiler {
public:
  virtual ~CubinCompiler() = default;
  /// "nvJitLink 13.0 (<path>)" or "ptxas (<path>)".
  virtual std::string describe() const = 0;
  /// `arch` like "sm_90a". `name` labels error messages.
  virtual runtime::Expected<std::string> compile(const std::string &ptx,
                                                 const std::string &arch,
                                                 const std::string &name) = 0;

  /// `which`: "auto" (nvJitLink, else ptxas), "nvjitlink" or "ptxas".
  static runtime::Expected<std::unique_ptr<CubinCompiler>> create(const std::string &which);
};

} // namespace lossjit::aot

#endif // LOSSJIT_TOOLS_AOT_CUBINCOMPILER_H
