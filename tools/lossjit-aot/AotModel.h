//===- AotModel.h - What lossjit-aot emits, independent of MLIR -*- C++ -*-===//
//
// The compiler hands the AOT tool one launch plan plus PTX per (op, arch).
// Everything the tool writes — bundle directories, the top-level index
// manifest and the C API — is generated from this model, which holds only
// runtime types. That keeps the writers free of MLIR, so they build and are
// tested without the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_AOT_AOTMODEL_H
#define LOSSJIT_TOOLS_AOT_AOTMODEL_H

#include "runtime/Json.h"
#include "runtime/KernelBundle.h"

#include <string>
#include <vector>

namespace lossjit::aot {

/// How kernel images are shipped.
enum class ImageKind { Ptx, Cubin };

/// "ptx" or "cubin".
const char *imageKindName(ImageKind kind);

/// One op compiled for one arch.
struct AotArchBuild {
  /// The runtime bundle (key, plan, images). With ImageKind::Cubin its
  /// images are cubins and its files end in .cubin.
  runtime::KernelBundle bundle;
  ImageKind imageKind = ImageKind::Ptx;
  /// The PTX of each kernel (bundle order), kept even when shipping cubins:
  /// it is written next to the bundle and embedded in the C API as the
  /// driver-JIT fallback for devices newer than every cubin.
  std::vector<std::string> ptx;
  /// Milliseconds from graph to PTX (for the log and the index).
  double compileMs = 0;

  /// Launch-plan features beyond the runtime bundle format (format_version
  /// 1), taken from the compiler's plan when it has them:
  /// symbols computed in order from dims, constants and earlier derived
  /// symbols, e.g. {"C", "max(1,min(N,WB/(V*4)))"};
  std::vector<std::pair<std::string, std::string>> derived;
  /// the chunk-size symbol ("" when no kernel is per-chunk);
  std::string chunkSymbol;
  /// per kernel: launched once per row chunk [chunk_begin, chunk_end) of
  /// `chunkSymbol` rows of the bundle's chunk_dim (N, or V for vocabulary
  /// chunks), consecutive per-chunk kernels as a group. Other kernels see
  /// chunk_begin = 0, chunk_end = that dim.
  std::vector<bool> perChunk;

  bool usesChunks() const;
};

/// One lowered function (the forward or the backward op) over all arches.
struct AotOp {
  /// "forward", "backward" or "forward_backward": names the C entry point
  /// (<prefix>_<role>).
  std::string role;
  /// The graph function the plan replaces.
  std::string entry;
  /// Names of the params the op writes (the rest are read).
  std::vector<std::string> outputs;
  /// The op's own options (strategy, grad_x, ...; no per-arch keys).
  runtime::JsonValue options = runtime::JsonValue::object();
  /// One per requested arch, in request order. Every build shares the
  /// params and dims (the C signature); kernels, constants and workspaces
  /// may differ between arches.
  std::vector<AotArchBuild> arches;

  bool isOutput(const std::string &param) const;
};

/// Whether runtime::KernelBundle can hold derived symbols and per-chunk
/// kernels itself (bundle fields `derived`, `chunk`, `perChunk`); older
/// runtimes could not, and their verify() rejects such plans.
template <typename B = runtime::KernelBundle> constexpr bool bundleHasChunking() {
  return requires(B b) {
    b.derived;
    b.chunk;
    b.kernels.front().perChunk;
  };
}

/// Everything one lossjit-aot run produces.
struct AotOutput {
  /// Prefix of every C symbol and the header/source file names.
  std::string prefix = "lce";
  /// The variant's options (dtype, label_type, bias, ...): the forward op's.
  runtime::JsonValue options = runtime::JsonValue::object();
  /// TileConfig::str() of the compilation.
  std::string tile;
  /// SHA-256 of the canonical input graph.
  std::string irHash;
  ImageKind imageKind = ImageKind::Ptx;
  /// How the tool was invoked (recorded in the index and the header).
  std::string commandLine;
  /// The forward op first, then the backward op when emitted.
  std::vector<AotOp> ops;

  /// Checks what the writers rely on: a C-identifier prefix, at least one op
  /// and arch, roles unique, and every arch of an op sharing its params and
  /// dims. Errors name the op and arch.
  runtime::Error verify() const;

  const AotOp *findOp(const std::string &role) const;
};

} // namespace lossjit::aot

#endif // LOSSJIT_TOOLS_AOT_AOTMODEL_H
