//===- CApiEmitter.h - A C API over the AOT kernels --------------*- C++ -*-===//
//
// Writes <prefix>.h and <prefix>.c: every kernel image embedded, plus a small
// C API that needs nothing but the CUDA driver API (cuda.h, -lcuda):
//
//   <prefix>_create(CUcontext, <prefix>_handle **)   picks the best image for
//       the context's device (cubin of the same major, else the newest PTX the
//       device can JIT) and loads it with cuModuleLoadDataEx
//   <prefix>_forward(handle, stream, <buffers...>, N, V, D, workspace, bytes)
//   <prefix>_backward(...)                           when a backward was built
//   <prefix>_workspace_bytes(N, V, D)                enough for either op
//   <prefix>_destroy(handle)
//
// The buffer list of each entry point is its launch plan's params, in plan
// order, so it follows the compiler without edits here. Every function
// returns a status code (never exits or prints); <prefix>_last_error() gives
// the calling thread's last message, JIT log included.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_AOT_CAPIEMITTER_H
#define LOSSJIT_TOOLS_AOT_CAPIEMITTER_H

#include "tools/lossjit-aot/AotModel.h"

#include <string>

namespace lossjit::aot {

struct CApiFiles {
  std::string headerName; ///< "<prefix>.h"
  std::string header;
  std::string sourceName; ///< "<prefix>.c"
  std::string source;
};

/// Generates the header and source for `output` (which must verify()).
runtime::Expected<CApiFiles> emitCApi(const AotOutput &output);

/// The C parameter names of `op`'s entry point, after renaming any that
/// would collide with the fixed arguments or a C/C++ keyword.
std::vector<std::string> cParamNames(const AotOp &op);

} // namespace lossjit::aot

#endif // LOSSJIT_TOOLS_AOT_CAPIEMITTER_H
