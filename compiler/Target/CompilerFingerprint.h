//===- CompilerFingerprint.h - Identity of the code generator ---*- C++ -*-===//
//
// A SHA-256 over the sources of the dialects and the compiler, generated at
// build time (cmake/CompilerFingerprint.cmake). Part of every cache key the
// compiler computes: a kernel cached by another code generator (an edited
// lowering, a newer checkout with the same version number) is a miss, never
// a stale hit.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_TARGET_COMPILERFINGERPRINT_H
#define LOSSJIT_COMPILER_TARGET_COMPILERFINGERPRINT_H

namespace lossjit {
/// 64 lower-case hex characters identifying this build's code generator.
const char *compilerFingerprint();
} // namespace lossjit

#endif
