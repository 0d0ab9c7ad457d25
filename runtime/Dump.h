//===- Dump.h - LOSSJIT_DUMP_DIR artifact dumping ---------------*- C++ -*-===//
//
// The compiler dumps every stage under LOSSJIT_DUMP_DIR; the runtime offers
// the same helper so runtime-side artifacts (NVRTC output, JIT logs) land in
// the same tree.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_RUNTIME_DUMP_H
#define LOSSJIT_RUNTIME_DUMP_H

#include "runtime/Status.h"

#include <string>
#include <string_view>

namespace lossjit::runtime {

/// Writes `text` to `$LOSSJIT_DUMP_DIR/<stage>/<name>` and returns that path;
/// returns an empty string (doing nothing) when LOSSJIT_DUMP_DIR is unset.
/// Characters other than [A-Za-z0-9._-] in `stage` and `name` become '_' so
/// a name can never escape the dump directory.
Expected<std::string> dumpArtifact(std::string_view stage,
                                   std::string_view name,
                                   std::string_view text);

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_DUMP_H
