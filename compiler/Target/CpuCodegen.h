//===- CpuCodegen.h - LLVM-dialect kernels → a checked host object -*- C++ -*-===//
//
// The CPU backend's last step, done the same way for a fresh compile and a
// cache hit: LLVM dialect → LLVM IR (+ packed `_mlir_<name>(void **)` entry
// points) → -O3 → an object file for an explicit CpuTarget; then the object
// is linked into an ORC JIT that sees ONLY the symbols lossjit provides
// (cpuRuntimeSymbols()), never the process's libgcc/compiler-rt/libm. An
// object that needs anything else is rejected with the symbol's name, so a
// host without some library routine cannot fail at run time.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_TARGET_CPUCODEGEN_H
#define LOSSJIT_COMPILER_TARGET_CPUCODEGEN_H

#include "compiler/Target/CpuTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace lossjit {

/// Compiles `kernels` (a module in the LLVM dialect) at -O3 for `target`
/// into ELF/Mach-O object bytes. Every function gets a packed entry point
/// `_mlir_<name>(void **args)`; the object must pass checkCpuObjectSymbols.
llvm::Expected<std::string> emitCpuObject(mlir::ModuleOp kernels, const CpuTarget &target);

/// The names of the symbols `object` uses but does not define.
llvm::Expected<std::vector<std::string>> undefinedSymbols(llvm::StringRef object);

/// The routines JIT-compiled kernels may call, by symbol name, each bound to
/// lossjit's own definition: exactly-rounded fma (targets without FMA units
/// call it per element) and the libc memory routines LLVM emits for block
/// copies and fills.
const std::map<std::string, void *> &cpuRuntimeSymbols();

/// Fails, naming each symbol, when `object` needs one that
/// cpuRuntimeSymbols() does not provide (e.g. a compiler-runtime libcall
/// such as __truncsfbf2 that a host's libgcc may lack).
llvm::Error checkCpuObjectSymbols(llvm::StringRef object);

/// Links `object` into a fresh JIT whose only external symbols are
/// cpuRuntimeSymbols(). Checks the object first.
llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>> linkCpuObject(llvm::StringRef object);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_TARGET_CPUCODEGEN_H
