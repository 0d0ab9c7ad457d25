//===- SyntheticGen.cpp - A C API with chunked backward kernels, made by hand -===//
//
//   aot-synthetic-gen OUTDIR PREFIX
//
// Writes OUTDIR/PREFIX.h and PREFIX.c for a hand-made AotOutput: a forward
// op and a backward op whose plan uses everything the compiler's plans may
// use — derived symbols, per-chunk kernel groups with chunk_begin/chunk_end,
// a workspace sized by a derived symbol, dynamic shared memory above 48 KiB —
// with stub PTX whose entries take the right parameters. The C API's launch
// machinery is tested on it (and the example consumer compiled against its
// backward signature) before the compiler's own backward exists.
//
//===----------------------------------------------------------------------===//

#include "runtime/FileUtil.h"
#include "runtime/Sha256.h"
#include "tools/lossjit-aot/CApiEmitter.h"
#include "tools/lossjit-aot/PtxSignature.h"

#include <cstdio>

using namespace lossjit;
using namespace lossjit::aot;

namespace {
struct K {
  std::string name;
  std::array<std::string, 3> grid;
  uint32_t shared;
  std::vector<std::string> args;
  bool perChunk;
};

std::string stubPtx(const runtime::KernelBundle &b, size_t k) {
  std::string ptx = ".version 8.0\n.target " + b.arch + "\n.address_size 64\n\n.visible .entry " +
                    b.kernels[k].name + "(\n";
  size_t n = planSlots(b, k).size();
  for (size_t i = 0; i < n; ++i)
    ptx += "\t.param .u64 " + b.kernels[k].name + "_param_" + std::to_string(i) +
           (i + 1 < n ? ",\n" : "\n");
  return ptx + ")\n{\n\tret;\n}\n";
}

template <typename B>
void setBundleChunking(B &b, const std::vector<std::pair<std::string, std::string>> &derived,
                       const std::string &chunk, const std::vector<bool> &perChunk) {
  if constexpr (bundleHasChunking<B>()) {
    b.derived = derived;
    b.chunk = chunk;
    for (size_t k = 0; k < b.kernels.size(); ++k)
      b.kernels[k].perChunk = perChunk[k];
  } else {
    (void)b, (void)derived, (void)chunk, (void)perChunk;
  }
}

AotOp makeOp(const std::string &role, const std::string &arch,
             std::vector<runtime::BundleParam> params, std::vector<std::string> outputs,
             std::vector<std::pair<std::string, int64_t>> constants,
             std::vector<std::pair<std::string, std::string>> derived, std::string chunk,
             std::vector<runtime::BundleWorkspace> workspaces, const std::vector<K> &kernels) {
  AotArchBuild build;
  runtime::KernelBundle &b = build.bundle;
  b.key = std::string(64, role == "forward" ? 'a' : 'b');
  b.llvmVersion = "synthetic";
  b.op = "linear_cross_entropy";
  b.arch = arch;
  b.irHash = std::string(64, '0');
  b.params = std::move(params);
  b.dims = {"N", "V", "D"};
  b.constants = std::move(constants);
  b.workspaces = std::move(workspaces);
  for (const K &k : kernels) {
    runtime::BundleKernel bk;
    bk.name = k.name;
    bk.file = k.name + "." + arch + ".ptx";
    bk.grid = k.grid;
    bk.block = {128, 1, 1};
    bk.sharedBytes = k.shared;
    bk.args = k.args;
    b.kernels.push_back(bk);
    build.perChunk.push_back(k.perChunk);
  }
  for (size_t i = 0; i < b.kernels.size(); ++i) {
    b.kernels[i].image = stubPtx(b, i);
    build.ptx.push_back(b.kernels[i].image);
  }
  // Runtimes whose bundles know chunking get the same plan in the bundle, so
  // the runtime's launcher can be compared with the C API on it.
  setBundleChunking(b, derived, chunk, build.perChunk);
  build.derived = std::move(derived);
  build.chunkSymbol = std::move(chunk);
  AotOp op;
  op.role = role;
  op.entry = role == "forward" ? "lce" : "lce_grad";
  op.outputs = std::move(outputs);
  op.arches.push_back(std::move(build));
  return op;
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: aot-synthetic-gen OUTDIR PREFIX\n");
    return 2;
  }
  std::string dir = argv[1], prefix = argv[2];
  AotOutput out;
  out.prefix = prefix;
  out.options.set("dtype", "f16");
  out.options.set("label_type", "i64");
  out.options.set("bias", "false");
  out.options.set("ignore_index", "-100");
  out.options.set("reduction", "mean");
  out.options.set("strategy", "chunked");
  out.tile = "synthetic";
  out.irHash = std::string(64, '0');
  out.commandLine = "aot-synthetic-gen";

  for (const char *arch : {"sm_80", "sm_90"}) {
    AotOp fwd = makeOp(
        "forward", arch,
        {{"x", "buffer", "f16", {"N", "D"}},
         {"w", "buffer", "f16", {"V", "D"}},
         {"labels", "buffer", "i64", {"N"}},
         {"loss", "buffer", "f32", {}},
         {"lse", "buffer", "f32", {"N"}}},
        {"loss", "lse"}, {{"S", 4}}, {}, "", {{"part", "f32", "S*N"}},
        {{"fwd_partial", {"cdiv(N,4)", "S", "1"}, 0, {"x", "w", "part", "N", "V", "D"}, false},
         {"fwd_combine", {"1", "1", "1"}, 64 * 1024, {"part", "labels", "loss", "lse", "N", "S"},
          false}});
    AotOp bwd = makeOp(
        "backward", arch,
        {{"x", "buffer", "f16", {"N", "D"}},
         {"w", "buffer", "f16", {"V", "D"}},
         {"labels", "buffer", "i64", {"N"}},
         {"lse", "buffer", "f32", {"N"}},
         {"grad_loss", "buffer", "f32", {}},
         {"grad_x", "buffer", "f16", {"N", "D"}},
         {"grad_w", "buffer", "f16", {"V", "D"}}},
        {"grad_x", "grad_w"}, {{"WB", 16000}, {"BN", 4}}, {{"C", "max(1,min(N,WB/(V*4)))"}},
        "C", {{"dz", "f32", "C*V"}, {"acc", "f32", "V*D"}},
        {{"bwd_zero", {"cdiv(V*D,256)", "1", "1"}, 0, {"acc", "V", "D"}, false},
         {"bwd_logits", {"cdiv(C,BN)", "cdiv(V,128)", "1"}, 0,
          {"x", "w", "labels", "lse", "grad_loss", "dz", "chunk_begin", "chunk_end", "N", "V", "D"},
          true},
         {"bwd_dx", {"cdiv(C,BN)", "1", "1"}, 0,
          {"dz", "w", "grad_x", "chunk_begin", "chunk_end", "V", "D"}, true},
         {"bwd_dw", {"cdiv(V,128)", "1", "1"}, 0,
          {"dz", "x", "acc", "chunk_begin", "chunk_end", "C", "V", "D"}, true},
         {"bwd_cast", {"cdiv(V*D,256)", "1", "1"}, 0, {"acc", "grad_w", "V", "D"}, false}});
    if (out.ops.empty()) {
      out.ops.push_back(std::move(fwd));
      out.ops.push_back(std::move(bwd));
    } else {
      out.ops[0].arches.push_back(std::move(fwd.arches.front()));
      out.ops[1].arches.push_back(std::move(bwd.arches.front()));
    }
  }
  auto files = emitCApi(out);
  if (!files) {
    std::fprintf(stderr, "aot-synthetic-gen: %s\n", files.errorMessage().c_str());
    return 1;
  }
  if (auto e = runtime::createDirectories(dir)) {
    std::fprintf(stderr, "aot-synthetic-gen: %s\n", e.message().c_str());
    return 1;
  }
  if constexpr (bundleHasChunking()) {
    // Bundle directories (runtime format) beside the C API, for the launch
    // parity test.
    for (const AotOp &op : out.ops)
      for (const AotArchBuild &build : op.arches) {
        runtime::KernelBundle b = build.bundle;
        b.key = runtime::sha256Hex(op.role + b.arch);
        if (auto e = runtime::writeBundleDirectory(b, dir + "/" + op.role + "-" + b.arch)) {
          std::fprintf(stderr, "aot-synthetic-gen: %s\n", e.message().c_str());
          return 1;
        }
      }
  }
  for (auto [name, text] : {std::pair{files->headerName, files->header},
                            std::pair{files->sourceName, files->source}})
    if (auto e = runtime::writeFile(dir + "/" + name, text)) {
      std::fprintf(stderr, "aot-synthetic-gen: %s\n", e.message().c_str());
      return 1;
    }
  return 0;
}
