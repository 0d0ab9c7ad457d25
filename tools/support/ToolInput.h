//===- ToolInput.h - Tool setup and bounded inputs --------------*- C++ -*-===//
//
// What lossjit-opt, lossjit-runner and lossjit-aot share so that hostile or
// huge input ends in a clear error instead of a crash: the process ignores
// SIGXFSZ (a write past `ulimit -f` fails with EFBIG, which is reported, and
// the kernel cache falls back to memory), graph files are size-bounded and
// nesting-checked before MLIR's recursive parser sees them, and large
// allocations are checked against the machine's memory first (LLVM's
// out-of-memory handler would abort the process instead).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_SUPPORT_TOOLINPUT_H
#define LOSSJIT_TOOLS_SUPPORT_TOOLINPUT_H

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>

namespace lossjit {

/// The largest graph file (MLIR text) the tools read.
inline constexpr uint64_t kMaxGraphFileBytes = uint64_t(256) << 20;

/// Sets up a tool process: ignores SIGXFSZ. Call it right after
/// llvm::InitLLVM, which installs LLVM's crash handler for SIGXFSZ too (it
/// would print a stack dump for every write past the limit); LLVM installs
/// its handlers once, so the disposition set here stays.
void initToolProcess();

/// Flushes llvm::outs() and reports (then clears) a write error on it:
/// LLVM aborts the process when a stream that failed (EFBIG past `ulimit -f`,
/// ENOSPC, a closed pipe) is destroyed with its error unchecked. Call it
/// before main() returns.
llvm::Error flushStandardOutput();

/// Physical memory of this machine in bytes (0 when unknown).
uint64_t physicalMemoryBytes();

/// An error when `bytes` (for `what`, e.g. "--random inputs") exceed this
/// machine's physical memory, naming both; success when memory is unknown.
llvm::Error checkHostMemory(uint64_t bytes, const llvm::Twine &what);

/// Reads a graph file ("-": stdin) of at most kMaxGraphFileBytes (regular
/// files, FIFOs and pipes; a device like /dev/zero is cut at the bound) and
/// checks that its brackets nest at most runtime::kMaxGraphNesting deep.
/// Errors name the file.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> readGraphInput(const std::string &path);

} // namespace lossjit

#endif // LOSSJIT_TOOLS_SUPPORT_TOOLINPUT_H
