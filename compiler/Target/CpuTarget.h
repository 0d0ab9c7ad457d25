//===- CpuTarget.h - the CPU the host JIT compiles for ---------*- C++ -*-===//
//
// The CPU backend's target is chosen, never inherited from whatever the
// build or CI machine happens to have: `LOSSJIT_CPU_TARGET` (or an explicit
// CpuTarget in the API) names it, and its CPU name and full feature string
// are part of the CPU kernel cache key, so an object compiled for one CPU is
// never linked on a host that lacks its instructions.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_TARGET_CPUTARGET_H
#define LOSSJIT_COMPILER_TARGET_CPUTARGET_H

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class TargetMachine;
} // namespace llvm

namespace lossjit {

/// The environment variable that picks the JIT's target CPU.
inline constexpr const char *kCpuTargetVariable = "LOSSJIT_CPU_TARGET";

/// A resolved JIT target: the host triple, an LLVM CPU name and the
/// features code generation may use.
struct CpuTarget {
  /// What was asked for: "native", "x86-64-v3", "skylake-avx512", ...
  std::string spec;
  /// The LLVM CPU name code is generated for (the host's own for "native").
  std::string cpu;
  /// "+feat,-feat,..." in LLVM's spelling, sorted: exactly the ISA features
  /// code generation may use. For a named CPU: what that CPU implies.
  std::string features;
  /// The triple the JIT targets (always the host's: the code runs here).
  std::string triple;

  /// Resolves `spec`: "native" (the host CPU with the features it reports),
  /// or an LLVM CPU name such as x86-64-v2 / x86-64-v3 / x86-64-v4 /
  /// icelake-server. Fails with a message naming `what` (e.g. the variable)
  /// for a name LLVM does not know, and for a CPU whose instructions this
  /// host cannot execute (the code would die with SIGILL).
  static llvm::Expected<CpuTarget> resolve(llvm::StringRef spec,
                                            llvm::StringRef what = "CPU target");

  /// The target `LOSSJIT_CPU_TARGET` names; "native" when unset or empty.
  static llvm::Expected<CpuTarget> fromEnvironment();

  /// True when code generation may use `feature` (LLVM name, e.g. "f16c").
  bool hasFeature(llvm::StringRef feature) const;

  /// True when the CPU has fused multiply-add instructions: x86 with FMA or
  /// FMA4 (x86-64-v3 and up), and every other architecture LLVM targets
  /// here (AArch64 always has them). Without, LLVM turns each llvm.fma into
  /// a call to fmaf.
  bool hasFmaUnits() const;

  /// How many vector<lanes x f32> values the target's vector registers hold
  /// at once (32 with AVX-512 for 8 lanes, 16 with AVX, 8 with SSE): what
  /// sizes the kernels' register tiles.
  int64_t vectorRegisters(int64_t lanes) const;

  /// Canonical text for cache keys and logs:
  /// "<triple>;cpu=<cpu>;features=<features>".
  std::string key() const;

  /// A TargetMachine for this CPU (PIC, -O3 codegen, no FP contraction:
  /// only explicit fma instructions fuse).
  llvm::Expected<std::unique_ptr<llvm::TargetMachine>> createTargetMachine() const;
};

/// The ISA features (LLVM names, no '+') that the x86 CPU `cpu` implies but
/// `host` (a map like llvm::sys::getHostCPUFeatures()) reports as absent,
/// sorted. Features the map does not mention are the x86-64 baseline
/// (64bit, cmov, sse2, x87, ...) and count as present.
std::vector<std::string> missingFeatures(llvm::StringRef cpu, const llvm::StringMap<bool> &host);

/// missingFeatures() against this host; empty when the host is not x86 (no
/// feature table to compare with: there only "native" is safe by
/// construction, and a named CPU is trusted).
std::vector<std::string> featuresMissingOnHost(llvm::StringRef cpu);

} // namespace lossjit

#endif // LOSSJIT_COMPILER_TARGET_CPUTARGET_H
