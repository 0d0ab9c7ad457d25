//===- AotModel.cpp -------------------------------------------------------===//

#include "tools/lossjit-aot/AotModel.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace lossjit::aot {

const char *imageKindName(ImageKind kind) {
  return kind == ImageKind::Cubin ? "cubin" : "ptx";
}

bool AotArchBuild::usesChunks() const {
  return std::find(perChunk.begin(), perChunk.end(), true) != perChunk.end();
}

bool AotOp::isOutput(const std::string &param) const {
  return std::find(outputs.begin(), outputs.end(), param) != outputs.end();
}

const AotOp *AotOutput::findOp(const std::string &role) const {
  for (const AotOp &op : ops)
    if (op.role == role)
      return &op;
  return nullptr;
}

namespace {
bool isCIdentifier(const std::string &s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool sameParams(const runtime::KernelBundle &a, const runtime::KernelBundle &b) {
  if (a.params.size() != b.params.size() || a.dims != b.dims)
    return false;
  for (size_t i = 0; i < a.params.size(); ++i)
    if (a.params[i].name != b.params[i].name || a.params[i].dtype != b.params[i].dtype ||
        a.params[i].shape != b.params[i].shape)
      return false;
  return true;
}
} // namespace

runtime::Error AotOutput::verify() const {
  using runtime::makeError;
  if (!isCIdentifier(prefix))
    return makeError("--name '" + prefix + "' is not a C identifier");
  if (ops.empty())
    return makeError("nothing to emit: no op was compiled");
  std::set<std::string> roles;
  for (const AotOp &op : ops) {
    if (op.role != "forward" && op.role != "backward" && op.role != "forward_backward")
      return makeError("op '" + op.entry + "': unknown role '" + op.role + "'");
    if (!roles.insert(op.role).second)
      return makeError("two ops have the role '" + op.role + "'");
    if (op.arches.empty())
      return makeError(op.role + ": no arch was compiled");
    for (const std::string &out : op.outputs) {
      bool found = false;
      for (const runtime::BundleParam &p : op.arches.front().bundle.params)
        found = found || p.name == out;
      if (!found)
        return makeError(op.role + ": output '" + out + "' is not a param");
    }
    for (const AotArchBuild &build : op.arches) {
      // Plans with derived symbols or per-chunk kernels need a runtime that
      // knows them; older runtimes' verify() rejects their symbols, and the C
      // API still runs them.
      if (bundleHasChunking() || (build.derived.empty() && !build.usesChunks()))
        if (runtime::Error e = build.bundle.verify())
          return std::move(e).withContext(op.role + " " + build.bundle.arch);
      if (!sameParams(build.bundle, op.arches.front().bundle))
        return makeError(op.role + ": arch " + build.bundle.arch +
                         " has other params or dims than " +
                         op.arches.front().bundle.arch +
                         "; the C API needs one signature per op");
      if (!build.perChunk.empty() && build.perChunk.size() != build.bundle.kernels.size())
        return makeError(op.role + " " + build.bundle.arch +
                         ": per-chunk flags differ from the kernel count");
      if (build.usesChunks() && build.chunkSymbol.empty())
        return makeError(op.role + " " + build.bundle.arch +
                         ": per-chunk kernels without a chunk symbol");
      if (build.ptx.size() != build.bundle.kernels.size())
        return makeError(op.role + " " + build.bundle.arch +
                         ": PTX count differs from the kernel count");
    }
  }
  return runtime::Error::success();
}

} // namespace lossjit::aot
