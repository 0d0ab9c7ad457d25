//===- PtxSignature.h - Kernel parameters as declared in PTX ----*- C++ -*-===//
//
// The launch plan says which buffers and dims feed a kernel; the PTX says
// what parameters its .entry really takes. lossjit-aot checks the two agree
// (5 × .u64 per memref<?xT> buffer, one .u64 per dim or constant) before it
// writes anything, and records both in the index manifest, so an ABI drift
// between compiler and launcher fails at build time, not on a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_AOT_PTXSIGNATURE_H
#define LOSSJIT_TOOLS_AOT_PTXSIGNATURE_H

#include "runtime/KernelBundle.h"
#include "runtime/Status.h"

#include <string>
#include <vector>

namespace lossjit::aot {

/// One `.param` of a PTX `.entry`.
struct PtxParam {
  std::string type;  ///< "u64", "b32", ...
  bool isPointer = false; ///< declared `.ptr`
  int align = 0;     ///< `.align N` if given, else 0.
  int elements = 1;  ///< `name[N]`: an array of N (a TMA tensor map: .b8 [128]).
};

/// The parameters of `.entry <entry>(...)` in `ptx`.
runtime::Expected<std::vector<PtxParam>> parsePtxEntryParams(const std::string &ptx,
                                                             const std::string &entry);

/// One launch-plan argument expanded to kernel parameters.
struct PlanSlot {
  std::string arg;   ///< plan arg name ("x", "part_max", "N")
  std::string kind;  ///< "buffer" | "workspace" | "dim" | "constant" | "symbol" |
                     ///< "tensor_map" (128 bytes by value)
  std::string field; ///< "allocated" | "aligned" | "offset" | "size" | "stride" | "value" |
                     ///< "map"
};

/// The kernel parameters kernel `index` of `bundle` takes under the memref
/// ABI (runtime/KernelBundle.h), in order.
std::vector<PlanSlot> planSlots(const runtime::KernelBundle &bundle, size_t index);

/// Checks that `ptx` declares exactly the parameters `planSlots` expects:
/// same count and every one 8 bytes wide, except tensor maps: `.align 64
/// .b8 [128]`. Errors name kernel and position.
runtime::Error checkPtxAbi(const runtime::KernelBundle &bundle, size_t index,
                           const std::string &ptx);

} // namespace lossjit::aot

#endif // LOSSJIT_TOOLS_AOT_PTXSIGNATURE_H
