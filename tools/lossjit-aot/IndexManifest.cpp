//===- IndexManifest.cpp --------------------------------------------------===//

#include "tools/lossjit-aot/IndexManifest.h"

#include "tools/lossjit-aot/CApiEmitter.h"
#include "tools/lossjit-aot/PtxSignature.h"

#include "runtime/FileUtil.h"
#include "runtime/Sha256.h"

#include <sys/stat.h>

namespace lossjit::aot {

using runtime::JsonValue;

namespace {
JsonValue strings(const std::vector<std::string> &values) {
  JsonValue a = JsonValue::array();
  for (const std::string &v : values)
    a.push(v);
  return a;
}

std::string ptxFileName(const runtime::BundleKernel &k, const std::string &arch) {
  return k.name + "." + arch + ".ptx";
}
} // namespace

runtime::Expected<JsonValue> buildIndexManifest(const AotOutput &output, bool withCApi) {
  if (runtime::Error e = output.verify())
    return e;
  const runtime::KernelBundle &any = output.ops.front().arches.front().bundle;
  JsonValue m = JsonValue::object();
  m.set("format", kIndexFormat);
  m.set("format_version", kIndexFormatVersion);
  m.set("lossjit_version", runtime::kLossjitVersion);
  m.set("llvm_version", any.llvmVersion);
  m.set("bundle_format", runtime::kBundleFormat);
  m.set("bundle_format_version", runtime::kBundleFormatVersion);
  m.set("command", output.commandLine);
  m.set("op", any.op);
  m.set("options", output.options);
  m.set("tile", any.tile);
  m.set("ir_hash", output.irHash);
  m.set("images", imageKindName(output.imageKind));

  if (withCApi) {
  JsonValue capi = JsonValue::object();
  capi.set("prefix", output.prefix);
  capi.set("header", output.prefix + ".h");
  capi.set("source", output.prefix + ".c");
  JsonValue functions = JsonValue::object();
  for (const AotOp &op : output.ops)
    functions.set(op.role, output.prefix + "_" + op.role);
  capi.set("functions", std::move(functions));
  capi.set("workspace_alignment", 256);
  m.set("c_api", std::move(capi));
  }

  JsonValue ops = JsonValue::array();
  for (const AotOp &op : output.ops) {
    const runtime::KernelBundle &b0 = op.arches.front().bundle;
    JsonValue jop = JsonValue::object();
    jop.set("role", op.role);
    jop.set("entry", op.entry);
    jop.set("c_function", output.prefix + "_" + op.role);
    jop.set("options", op.options);
    std::vector<std::string> cNames = cParamNames(op);
    JsonValue params = JsonValue::array();
    for (size_t i = 0; i < b0.params.size(); ++i) {
      const runtime::BundleParam &p = b0.params[i];
      JsonValue jp = JsonValue::object();
      jp.set("name", p.name);
      jp.set("c_name", cNames[i]);
      jp.set("dtype", p.dtype);
      jp.set("shape", strings(p.shape));
      jp.set("output", op.isOutput(p.name));
      auto size = runtime::dtypeSize(p.dtype);
      if (!size)
        return size.takeError();
      // Buffers need their element alignment; kernel parameters are 8 bytes.
      jp.set("element_bytes", static_cast<int64_t>(*size));
      params.push(std::move(jp));
    }
    jop.set("params", std::move(params));
    jop.set("dims", strings(b0.dims));

    JsonValue arches = JsonValue::array();
    for (const AotArchBuild &build : op.arches) {
      const runtime::KernelBundle &b = build.bundle;
      JsonValue ja = JsonValue::object();
      ja.set("arch", b.arch);
      ja.set("key", b.key);
      ja.set("dir", b.key);
      ja.set("images", imageKindName(build.imageKind));
      ja.set("compile_ms", static_cast<int64_t>(build.compileMs + 0.5));
      JsonValue constants = JsonValue::object();
      for (const auto &[name, value] : b.constants)
        constants.set(name, value);
      ja.set("constants", std::move(constants));
      // Chunked launches (runtime/KernelBundle.h): derived symbols in order,
      // the chunk-size symbol, and per kernel whether it runs per chunk.
      JsonValue derived = JsonValue::array();
      for (const auto &[name, formula] : build.derived) {
        JsonValue jd = JsonValue::object();
        jd.set("name", name);
        jd.set("formula", formula);
        derived.push(std::move(jd));
      }
      ja.set("derived", std::move(derived));
      ja.set("chunk", build.usesChunks() ? build.chunkSymbol : std::string());
      if (build.usesChunks() && b.chunkDim != runtime::kChunkRowsDim)
        ja.set("chunk_dim", b.chunkDim);
      JsonValue workspaces = JsonValue::array();
      for (const runtime::BundleWorkspace &w : b.workspaces) {
        JsonValue jw = JsonValue::object();
        jw.set("name", w.name);
        jw.set("dtype", w.dtype);
        jw.set("count", w.count);
        auto size = runtime::dtypeSize(w.dtype);
        if (!size)
          return size.takeError();
        jw.set("element_bytes", static_cast<int64_t>(*size));
        workspaces.push(std::move(jw));
      }
      ja.set("workspaces", std::move(workspaces));
      JsonValue kernels = JsonValue::array();
      for (size_t k = 0; k < b.kernels.size(); ++k) {
        const runtime::BundleKernel &kernel = b.kernels[k];
        JsonValue jk = JsonValue::object();
        jk.set("name", kernel.name);
        jk.set("entry", kernel.name);
        jk.set("file", kernel.file);
        jk.set("ptx_file", ptxFileName(kernel, b.arch));
        jk.set("sha256", runtime::sha256Hex(kernel.image));
        jk.set("bytes", static_cast<int64_t>(kernel.image.size()));
        jk.set("grid", strings({kernel.grid[0], kernel.grid[1], kernel.grid[2]}));
        JsonValue block = JsonValue::array();
        for (uint32_t v : kernel.block)
          block.push(static_cast<int64_t>(v));
        jk.set("block", std::move(block));
        jk.set("shared_bytes", static_cast<int64_t>(kernel.sharedBytes));
        jk.set("args", strings(kernel.args));
        jk.set("per_chunk", k < build.perChunk.size() && build.perChunk[k]);
        jk.set("cluster", static_cast<int64_t>(kernel.cluster));
        jk.set("persistent", kernel.persistent);
        std::vector<PlanSlot> slots = planSlots(b, k);
        jk.set("parameter_count", static_cast<int64_t>(slots.size()));
        auto ptxParams = parsePtxEntryParams(build.ptx[k], kernel.name);
        if (!ptxParams)
          return ptxParams.takeError();
        JsonValue signature = JsonValue::array();
        size_t slot = 0;
        for (const std::string &arg : kernel.args) {
          const std::string &kind = slots[slot].kind;
          size_t width = kind == "buffer" || kind == "workspace" ? 5 : 1;
          std::vector<std::string> fields, types;
          for (size_t j = slot; j < slot + width; ++j) {
            fields.push_back(slots[j].field);
            types.push_back(j < ptxParams->size() ? (*ptxParams)[j].type : "?");
          }
          slot += width;
          JsonValue js = JsonValue::object();
          js.set("arg", arg);
          js.set("kind", kind);
          js.set("slots", strings(fields));
          js.set("ptx_types", strings(types));
          signature.push(std::move(js));
        }
        jk.set("signature", std::move(signature));
        kernels.push(std::move(jk));
      }
      ja.set("kernels", std::move(kernels));
      arches.push(std::move(ja));
    }
    jop.set("arches", std::move(arches));
    ops.push(std::move(jop));
  }
  m.set("ops", std::move(ops));
  return m;
}

namespace {
/// Schema checks with messages that name the JSON path.
class Checker {
public:
  runtime::Error error = runtime::Error::success();
  bool failed = false;

  const JsonValue *need(const JsonValue &obj, const char *key, JsonValue::Kind kind,
                        const std::string &path) {
    if (failed)
      return nullptr;
    const JsonValue *v = obj.find(key);
    if (!v)
      return fail(path + "." + key + ": missing");
    if (v->getKind() != kind && !(kind == JsonValue::Kind::Double && v->isInt()))
      return fail(path + "." + key + ": expected " + JsonValue::describe(kind) + ", got " +
                  JsonValue::describe(v->getKind()));
    return v;
  }
  const JsonValue *fail(const std::string &message) {
    if (!failed) {
      failed = true;
      error = runtime::makeError("index manifest: " + message);
    }
    return nullptr;
  }
};

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
} // namespace

runtime::Error checkAotDirectory(const std::string &directory) {
  using K = JsonValue::Kind;
  std::string path = directory + "/manifest.json";
  auto text = runtime::readFile(path);
  if (!text)
    return text.takeError();
  auto parsed = runtime::parseJson(*text);
  if (!parsed)
    return std::move(parsed.takeError()).withContext(path);
  const JsonValue &m = *parsed;
  Checker c;
  const JsonValue *format = c.need(m, "format", K::String, "");
  const JsonValue *version = c.need(m, "format_version", K::Int, "");
  for (const char *key : {"lossjit_version", "llvm_version", "bundle_format", "command", "op",
                          "ir_hash", "images"})
    c.need(m, key, K::String, "");
  c.need(m, "bundle_format_version", K::Int, "");
  c.need(m, "options", K::Object, "");
  c.need(m, "tile", K::Object, "");
  const JsonValue *capi = m.find("c_api"); // optional (--no-c-api)
  const JsonValue *ops = c.need(m, "ops", K::Array, "");
  if (c.failed)
    return std::move(c.error);
  if (format->getString() != kIndexFormat)
    return runtime::makeError("index manifest: format is '" + format->getString() +
                              "', expected '" + kIndexFormat + "'");
  if (version->getInt() != kIndexFormatVersion)
    return runtime::makeError("index manifest: unsupported format_version " +
                              std::to_string(version->getInt()));
  if (capi) {
    if (!capi->isObject())
      return runtime::makeError("index manifest: .c_api: expected an object");
    for (const char *key : {"prefix", "header", "source"})
      c.need(*capi, key, K::String, ".c_api");
    c.need(*capi, "functions", K::Object, ".c_api");
    if (c.failed)
      return std::move(c.error);
    for (const char *key : {"header", "source"}) {
      std::string file = directory + "/" + capi->find(key)->getString();
      if (!exists(file))
        return runtime::makeError("index manifest: c_api." + std::string(key) + " " + file +
                                  " does not exist");
    }
  }
  if (ops->getArray().empty())
    return runtime::makeError("index manifest: .ops is empty");
  bool sawForward = false;
  for (size_t o = 0; o < ops->getArray().size(); ++o) {
    const JsonValue &op = ops->getArray()[o];
    std::string opPath = ".ops[" + std::to_string(o) + "]";
    const JsonValue *role = c.need(op, "role", K::String, opPath);
    c.need(op, "entry", K::String, opPath);
    c.need(op, "c_function", K::String, opPath);
    const JsonValue *params = c.need(op, "params", K::Array, opPath);
    c.need(op, "dims", K::Array, opPath);
    const JsonValue *arches = c.need(op, "arches", K::Array, opPath);
    if (c.failed)
      return std::move(c.error);
    if (role->getString() != "forward" && role->getString() != "backward" &&
        role->getString() != "forward_backward")
      return runtime::makeError("index manifest: " + opPath + ".role is '" +
                                role->getString() + "'");
    sawForward = sawForward || role->getString() == "forward";
    for (size_t i = 0; i < params->getArray().size(); ++i) {
      std::string pp = opPath + ".params[" + std::to_string(i) + "]";
      const JsonValue &p = params->getArray()[i];
      for (const char *key : {"name", "c_name", "dtype"})
        c.need(p, key, K::String, pp);
      c.need(p, "shape", K::Array, pp);
      c.need(p, "output", K::Bool, pp);
      c.need(p, "element_bytes", K::Int, pp);
    }
    if (arches->getArray().empty())
      return runtime::makeError("index manifest: " + opPath + ".arches is empty");
    for (size_t a = 0; a < arches->getArray().size(); ++a) {
      const JsonValue &arch = arches->getArray()[a];
      std::string ap = opPath + ".arches[" + std::to_string(a) + "]";
      const JsonValue *name = c.need(arch, "arch", K::String, ap);
      const JsonValue *key = c.need(arch, "key", K::String, ap);
      const JsonValue *dir = c.need(arch, "dir", K::String, ap);
      c.need(arch, "images", K::String, ap);
      c.need(arch, "compile_ms", K::Int, ap);
      c.need(arch, "constants", K::Object, ap);
      c.need(arch, "workspaces", K::Array, ap);
      const JsonValue *kernels = c.need(arch, "kernels", K::Array, ap);
      if (c.failed)
        return std::move(c.error);
      auto bundle = runtime::readBundleDirectory(directory + "/" + dir->getString(),
                                                 key->getString());
      if (!bundle)
        return std::move(bundle.takeError()).withContext(ap);
      if (bundle->arch != name->getString())
        return runtime::makeError(ap + ": bundle arch " + bundle->arch + " != " +
                                  name->getString());
      if (bundle->params.size() != params->getArray().size())
        return runtime::makeError(ap + ": bundle has " +
                                  std::to_string(bundle->params.size()) + " params");
      if (bundle->kernels.size() != kernels->getArray().size())
        return runtime::makeError(ap + ": bundle has " +
                                  std::to_string(bundle->kernels.size()) + " kernels");
      for (size_t k = 0; k < bundle->kernels.size(); ++k) {
        const JsonValue &jk = kernels->getArray()[k];
        std::string kp = ap + ".kernels[" + std::to_string(k) + "]";
        for (const char *field : {"name", "entry", "file", "ptx_file", "sha256"})
          c.need(jk, field, K::String, kp);
        c.need(jk, "grid", K::Array, kp);
        c.need(jk, "block", K::Array, kp);
        c.need(jk, "args", K::Array, kp);
        c.need(jk, "signature", K::Array, kp);
        c.need(jk, "shared_bytes", K::Int, kp);
        const JsonValue *count = c.need(jk, "parameter_count", K::Int, kp);
        if (c.failed)
          return std::move(c.error);
        const runtime::BundleKernel &bk = bundle->kernels[k];
        if (jk.find("name")->getString() != bk.name ||
            jk.find("file")->getString() != bk.file ||
            jk.find("sha256")->getString() != runtime::sha256Hex(bk.image))
          return runtime::makeError(kp + ": name, file or sha256 differs from bundle " +
                                    key->getString());
        if (static_cast<size_t>(count->getInt()) != planSlots(*bundle, k).size())
          return runtime::makeError(kp + ": parameter_count differs from the plan");
        std::string ptxPath = directory + "/" + dir->getString() + "/" +
                              jk.find("ptx_file")->getString();
        auto ptx = runtime::readFile(ptxPath);
        if (!ptx)
          return std::move(ptx.takeError()).withContext(kp);
        if (runtime::Error e = checkPtxAbi(*bundle, k, *ptx))
          return std::move(e).withContext(kp);
      }
    }
  }
  if (!sawForward)
    return runtime::makeError("index manifest: no forward op");
  return runtime::Error::success();
}

} // namespace lossjit::aot
