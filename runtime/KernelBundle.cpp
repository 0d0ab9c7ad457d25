//===- KernelBundle.cpp - Compiled op: in-memory form and on-disk format --===//

#include "runtime/KernelBundle.h"

#include "runtime/FileUtil.h"
#include "runtime/Formula.h"
#include "runtime/Sha256.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace lossjit::runtime {

Expected<size_t> dtypeSize(const std::string &dtype) {
  static const std::pair<const char *, size_t> kSizes[] = {
      {"f16", 2}, {"bf16", 2}, {"f32", 4}, {"f64", 8}, {"i8", 1},
      {"i16", 2}, {"i32", 4},  {"i64", 8}, {"u8", 1},  {"u16", 2},
      {"u32", 4}, {"u64", 8},  {"i1", 1}};
  for (const auto &[name, size] : kSizes)
    if (dtype == name)
      return size;
  return makeError("unknown dtype '" + dtype +
                   "', expected one of f16 bf16 f32 f64 i8 i16 i32 i64 u8 "
                   "u16 u32 u64 i1");
}

namespace {

bool isIdentifier(const std::string &name) {
  if (name.empty() ||
      !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return true;
}

bool isDecimal(const std::string &text) {
  if (text.empty() || text.size() > 18)
    return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

/// A file name that stays inside the bundle directory.
bool isSafeFileName(const std::string &name) {
  if (name.empty() || name == "." || name == ".." || name == kManifestFileName ||
      name == kManifestHashFileName)
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
          c == '-'))
      return false;
  return true;
}

bool isCudaArch(const std::string &arch) {
  // sm_<digits>[a|f]
  if (arch.size() < 4 || arch.compare(0, 3, "sm_") != 0)
    return false;
  size_t i = 3;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])))
    ++i;
  if (i == 3)
    return false;
  return i == arch.size() ||
         (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f'));
}

} // namespace

Error KernelBundle::verify() const {
  auto fail = [](const std::string &field, const std::string &what) {
    return makeError("invalid bundle: " + field + ": " + what);
  };
  if (!isSha256Hex(key))
    return fail("key", "expected 64 lower-case hex characters, got '" + key +
                           "'");
  if (op.empty())
    return fail("op", "must not be empty");
  if (backend != "cuda" && backend != "cpu")
    return fail("backend", "expected \"cuda\" or \"cpu\", got \"" + backend +
                               "\"");
  if (backend == "cuda" && !isCudaArch(arch))
    return fail("arch", "expected sm_<number>[a|f] for the cuda backend, got \"" +
                            arch + "\"");
  if (arch.empty())
    return fail("arch", "must not be empty");
  if (!options.isObject())
    return fail("options", "expected an object");
  if (!tile.isObject())
    return fail("tile", "expected an object");

  // One namespace for everything an arg or formula can name.
  std::set<std::string> names;
  auto declare = [&](const std::string &field,
                     const std::string &name) -> Error {
    if (!isIdentifier(name))
      return fail(field, "name '" + name +
                             "' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)");
    if (name == "cdiv" || name == "min" || name == "max")
      return fail(field, "name '" + name + "' is reserved for formulas");
    if (name == kChunkBeginArg || name == kChunkEndArg)
      return fail(field, "name '" + name + "' is reserved for chunked launches");
    if (name == kTensorMapsReadyArg)
      return fail(field, "name '" + name + "' is reserved for tensor maps");
    if (!names.insert(name).second)
      return fail(field, "name '" + name + "' is declared twice");
    return Error::success();
  };

  std::vector<std::string> symbols;
  std::set<std::string> bufferNames;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (Error e = declare("dims[" + std::to_string(i) + "]", dims[i]))
      return e;
    symbols.push_back(dims[i]);
  }
  for (const auto &[name, value] : constants) {
    if (Error e = declare("constants." + name, name))
      return e;
    symbols.push_back(name);
  }
  // Derived symbols: in order, each over dims, constants and earlier ones.
  for (size_t i = 0; i < derived.size(); ++i) {
    const auto &[name, formula] = derived[i];
    std::string field = "derived[" + std::to_string(i) + "]";
    if (Error e = declare(field + ".name", name))
      return e;
    if (Expected<Formula> f = Formula::parse(formula, symbols); !f)
      return fail(field + ".formula",
                  "derived symbol '" + name + "': " + f.errorMessage());
    symbols.push_back(name);
  }
  if (!chunk.empty()) {
    bool found = false;
    for (const auto &c : constants)
      found = found || c.first == chunk;
    for (const auto &d : derived)
      found = found || d.first == chunk;
    if (!found)
      return fail("chunk", "\"" + chunk +
                               "\" names no derived symbol or constant (the "
                               "chunk size in rows)");
    bool hasRows = false;
    for (const std::string &d : dims)
      hasRows = hasRows || d == chunkDim;
    if (!hasRows)
      return fail(chunkDim == kChunkRowsDim ? "chunk" : "chunk_dim",
                  "chunked launches split the rows of dim \"" + chunkDim +
                      "\", but the bundle has no dim \"" + chunkDim + "\"");
  } else if (chunkDim != kChunkRowsDim) {
    return fail("chunk_dim", "\"" + chunkDim +
                                 "\" is set but the bundle has no \"chunk\" (the "
                                 "chunk size it splits by)");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const BundleParam &p = params[i];
    std::string field = "params[" + std::to_string(i) + "]";
    if (Error e = declare(field + ".name", p.name))
      return e;
    if (p.kind != "buffer")
      return fail(field + ".kind", "expected \"buffer\", got \"" + p.kind + "\"");
    if (Expected<size_t> size = dtypeSize(p.dtype); !size)
      return fail(field + ".dtype", size.errorMessage());
    for (size_t j = 0; j < p.shape.size(); ++j) {
      const std::string &entry = p.shape[j];
      // Dims and constants only (derived symbols follow them in `symbols`).
      bool isSymbol = false;
      for (size_t s = 0; s < dims.size() + constants.size(); ++s)
        isSymbol = isSymbol || symbols[s] == entry;
      if (!isSymbol && !isDecimal(entry))
        return fail(field + ".shape[" + std::to_string(j) + "]",
                    "expected a dim or constant name or a non-negative "
                    "integer, got \"" + entry + "\"");
    }
    // Declared extents (verify() guards bundles built in memory too).
    if (!p.extents.empty() && p.extents.size() != p.shape.size())
      return fail(field + ".extents", "expected " + std::to_string(p.shape.size()) +
                                          " entries (one per shape entry), got " +
                                          std::to_string(p.extents.size()));
    for (size_t j = 0; j < p.extents.size(); ++j)
      if (p.extents[j] < -1)
        return fail(field + ".extents[" + std::to_string(j) + "]",
                    "expected an extent >= 0 or -1 (dynamic), got " +
                        std::to_string(p.extents[j]));
    bufferNames.insert(p.name);
  }
  for (size_t i = 0; i < workspaces.size(); ++i) {
    const BundleWorkspace &w = workspaces[i];
    std::string field = "workspaces[" + std::to_string(i) + "]";
    if (Error e = declare(field + ".name", w.name))
      return e;
    if (Expected<size_t> size = dtypeSize(w.dtype); !size)
      return fail(field + ".dtype", size.errorMessage());
    if (Expected<Formula> f = Formula::parse(w.count, symbols); !f)
      return fail(field + ".count", f.errorMessage());
    bufferNames.insert(w.name);
  }

  for (size_t i = 0; i < tensorMaps.size(); ++i) {
    const BundleTensorMap &t = tensorMaps[i];
    std::string field = "tensor_maps[" + std::to_string(i) + "]";
    if (Error e = declare(field + ".name", t.name))
      return e;
    auto param = std::find_if(params.begin(), params.end(),
                              [&](const BundleParam &p) { return p.name == t.buffer; });
    auto workspace = std::find_if(workspaces.begin(), workspaces.end(),
                                  [&](const BundleWorkspace &w) { return w.name == t.buffer; });
    if (param == params.end() && workspace == workspaces.end())
      return fail(field + ".buffer", "\"" + t.buffer + "\" names no param or workspace");
    const std::string &dtype = param != params.end() ? param->dtype : workspace->dtype;
    if (dtype != "f16" && dtype != "bf16" && dtype != "f32")
      return fail(field + ".buffer", "'" + t.buffer + "' is " + dtype +
                                         "; tensor maps take f16, bf16 or f32");
    for (size_t d = 0; d < 2; ++d) {
      if (Expected<Formula> f = Formula::parse(t.dims[d], symbols); !f)
        return fail(field + ".dims[" + std::to_string(d) + "]", f.errorMessage());
      if (t.box[d] < 1 || t.box[d] > 256)
        return fail(field + ".box[" + std::to_string(d) + "]",
                    "expected 1..256 elements, got " + std::to_string(t.box[d]));
    }
    if (t.swizzle != 0 && t.swizzle != 32 && t.swizzle != 64 && t.swizzle != 128)
      return fail(field + ".swizzle",
                  "expected 0, 32, 64 or 128 bytes, got " + std::to_string(t.swizzle));
    const uint64_t rowBytes = uint64_t(t.box[0]) * (dtype == "f32" ? 4 : 2);
    if (rowBytes % 16 || (t.swizzle && rowBytes > t.swizzle))
      return fail(field + ".box[0]", "a box row of " + std::to_string(rowBytes) +
                                         " bytes must be a multiple of 16" +
                                         (t.swizzle ? " and at most the " +
                                                          std::to_string(t.swizzle) +
                                                          "-byte swizzle span"
                                                    : std::string()));
  }

  if (kernels.empty())
    return fail("kernels", "expected at least one kernel");
  std::map<std::string, const std::string *> files;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const BundleKernel &k = kernels[i];
    std::string field = "kernels[" + std::to_string(i) + "]";
    if (k.name.empty())
      return fail(field + ".name", "must not be empty");
    if (!isSafeFileName(k.file))
      return fail(field + ".file", "\"" + k.file +
                                       "\" is not a plain file name ([A-Za-z0-9._-], not "
                                       "manifest.json or manifest.sha256)");
    // Kernels may share a module file, but then they must agree on its bytes.
    if (auto it = files.find(k.file); it != files.end()) {
      if (*it->second != k.image)
        return fail(field + ".file", "\"" + k.file +
                                         "\" is shared with an earlier kernel "
                                         "but the images differ");
    } else {
      files.emplace(k.file, &k.image);
    }
    if (k.image.empty())
      return fail(field, "image \"" + k.file + "\" is empty");
    for (size_t d = 0; d < 3; ++d)
      if (Expected<Formula> f = Formula::parse(k.grid[d], symbols); !f)
        return fail(field + ".grid[" + std::to_string(d) + "]", f.errorMessage());
    uint64_t threads = 1;
    for (size_t d = 0; d < 3; ++d) {
      if (k.block[d] == 0)
        return fail(field + ".block[" + std::to_string(d) + "]",
                    "expected a positive integer");
      threads *= k.block[d];
    }
    if (threads > 1024)
      return fail(field + ".block", "expected at most 1024 threads per block, got " +
                                        std::to_string(threads));
    if (k.cluster < 1 || k.cluster > kMaxClusterBlocks)
      return fail(field + ".cluster", "expected 1.." + std::to_string(kMaxClusterBlocks) +
                                          ", got " + std::to_string(k.cluster));
    if (k.persistent && (k.grid[1] != "1" || k.grid[2] != "1"))
      return fail(field + ".persistent", "kernel '" + k.name +
                                             "' is persistent, so its grid[1] and grid[2] must "
                                             "be \"1\" (it sweeps its tiles along x)");
    if (k.perChunk && chunk.empty())
      return fail(field + ".per_chunk",
                  "kernel '" + k.name +
                      "' is per_chunk but the bundle has no \"chunk\"");
    for (size_t a = 0; a < k.args.size(); ++a) {
      const std::string &arg = k.args[a];
      std::string argField = field + ".args[" + std::to_string(a) + "]";
      if (arg == kChunkBeginArg || arg == kChunkEndArg) {
        if (!k.perChunk)
          return fail(argField, "\"" + arg + "\" is valid only in per_chunk "
                                "kernels, and kernel '" + k.name +
                                "' is not per_chunk");
        continue;
      }
      if (arg == kTensorMapsReadyArg) {
        if (tensorMaps.empty())
          return fail(argField, "\"" + arg + "\" needs tensor_maps, and the bundle has none");
        continue;
      }
      if (!names.count(arg))
        return fail(argField,
                    "\"" + arg +
                        "\" names no param, workspace, dim, constant or "
                        "derived symbol");
    }
  }
  return Error::success();
}

uint64_t KernelBundle::imageBytes() const {
  uint64_t total = 0;
  for (const BundleKernel &k : kernels)
    total += k.image.size();
  return total;
}

JsonValue KernelBundle::toManifest() const {
  JsonValue m = JsonValue::object();
  m.set("format", kBundleFormat);
  m.set("format_version",
        chunkDim == kChunkRowsDim ? kBundleFormatVersion : kBundleFormatVersionChunkDim);
  m.set("key", key);
  m.set("lossjit_version", lossjitVersion);
  m.set("llvm_version", llvmVersion);
  m.set("op", op);
  m.set("backend", backend);
  m.set("arch", arch);
  m.set("options", options);
  m.set("tile", tile);
  m.set("ir_hash", irHash);

  JsonValue jsonParams = JsonValue::array();
  for (const BundleParam &p : params) {
    JsonValue jp = JsonValue::object();
    jp.set("name", p.name);
    jp.set("kind", p.kind);
    jp.set("dtype", p.dtype);
    JsonValue shape = JsonValue::array();
    for (const std::string &s : p.shape)
      shape.push(isDecimal(s) ? JsonValue(std::stoll(s)) : JsonValue(s));
    jp.set("shape", std::move(shape));
    if (!p.extents.empty()) {
      JsonValue extents = JsonValue::array();
      for (int64_t e : p.extents)
        extents.push(JsonValue(e));
      jp.set("extents", std::move(extents));
    }
    jsonParams.push(std::move(jp));
  }
  m.set("params", std::move(jsonParams));

  JsonValue jsonDims = JsonValue::array();
  for (const std::string &d : dims)
    jsonDims.push(d);
  m.set("dims", std::move(jsonDims));

  JsonValue jsonConstants = JsonValue::object();
  for (const auto &[name, value] : constants)
    jsonConstants.set(name, value);
  m.set("constants", std::move(jsonConstants));

  // Optional fields, written only when used so that bundles without chunking
  // keep their manifests byte for byte.
  if (!derived.empty()) {
    JsonValue jsonDerived = JsonValue::array();
    for (const auto &[name, formula] : derived) {
      JsonValue jd = JsonValue::object();
      jd.set("name", name);
      jd.set("formula", formula);
      jsonDerived.push(std::move(jd));
    }
    m.set("derived", std::move(jsonDerived));
  }
  if (!chunk.empty())
    m.set("chunk", chunk);
  if (chunkDim != kChunkRowsDim)
    m.set("chunk_dim", chunkDim);

  JsonValue jsonWorkspaces = JsonValue::array();
  for (const BundleWorkspace &w : workspaces) {
    JsonValue jw = JsonValue::object();
    jw.set("name", w.name);
    jw.set("dtype", w.dtype);
    jw.set("count", w.count);
    jsonWorkspaces.push(std::move(jw));
  }
  m.set("workspaces", std::move(jsonWorkspaces));

  if (!tensorMaps.empty()) {
    JsonValue jsonMaps = JsonValue::array();
    for (const BundleTensorMap &t : tensorMaps) {
      JsonValue jt = JsonValue::object();
      jt.set("name", t.name);
      jt.set("buffer", t.buffer);
      JsonValue dimsJson = JsonValue::array(), boxJson = JsonValue::array();
      for (size_t d = 0; d < 2; ++d) {
        dimsJson.push(t.dims[d]);
        boxJson.push(t.box[d]);
      }
      jt.set("dims", std::move(dimsJson));
      jt.set("box", std::move(boxJson));
      jt.set("swizzle", t.swizzle);
      jsonMaps.push(std::move(jt));
    }
    m.set("tensor_maps", std::move(jsonMaps));
  }

  JsonValue jsonKernels = JsonValue::array();
  for (const BundleKernel &k : kernels) {
    JsonValue jk = JsonValue::object();
    jk.set("name", k.name);
    jk.set("file", k.file);
    jk.set("sha256", sha256Hex(k.image));
    jk.set("bytes", static_cast<int64_t>(k.image.size()));
    JsonValue grid = JsonValue::array();
    for (const std::string &g : k.grid)
      grid.push(g);
    jk.set("grid", std::move(grid));
    JsonValue block = JsonValue::array();
    for (uint32_t b : k.block)
      block.push(b);
    jk.set("block", std::move(block));
    jk.set("shared_bytes", k.sharedBytes);
    JsonValue args = JsonValue::array();
    for (const std::string &a : k.args)
      args.push(a);
    jk.set("args", std::move(args));
    if (k.perChunk)
      jk.set("per_chunk", true);
    if (k.cluster != 1)
      jk.set("cluster", static_cast<int64_t>(k.cluster));
    if (k.persistent)
      jk.set("persistent", true);
    jsonKernels.push(std::move(jk));
  }
  m.set("kernels", std::move(jsonKernels));
  return m;
}

namespace {

/// Typed field access with the JSON path in every error.
class ManifestReader {
public:
  static Error typeError(const std::string &path, const char *expected,
                         const JsonValue &got) {
    return makeError(path + ": expected " + expected + ", got " +
                     JsonValue::describe(got.getKind()));
  }

  static Expected<const JsonValue *> field(const JsonValue &object,
                                           const std::string &path,
                                           const char *name, bool required) {
    const JsonValue *v = object.find(name);
    if (!v && required)
      return makeError(path + ": missing required field \"" + name + "\"");
    return v;
  }

  static Expected<std::string> string(const JsonValue &object,
                                      const std::string &path, const char *name,
                                      bool required = true,
                                      std::string fallback = {}) {
    Expected<const JsonValue *> v = field(object, path, name, required);
    if (!v)
      return v.takeError();
    if (!*v)
      return fallback;
    if (!(*v)->isString())
      return typeError(path + "." + name, "a string", **v);
    return (*v)->getString();
  }

  static Expected<int64_t> integer(const JsonValue &object,
                                   const std::string &path, const char *name,
                                   bool required = true, int64_t fallback = 0) {
    Expected<const JsonValue *> v = field(object, path, name, required);
    if (!v)
      return v.takeError();
    if (!*v)
      return fallback;
    if (!(*v)->isInt())
      return typeError(path + "." + name, "an integer", **v);
    return (*v)->getInt();
  }

  static Expected<bool> boolean(const JsonValue &object, const std::string &path,
                                const char *name, bool required = true,
                                bool fallback = false) {
    Expected<const JsonValue *> v = field(object, path, name, required);
    if (!v)
      return v.takeError();
    if (!*v)
      return fallback;
    if (!(*v)->isBool())
      return typeError(path + "." + name, "a boolean", **v);
    return (*v)->getBool();
  }

  /// A string, or an integer rendered in decimal (shape and grid entries).
  static Expected<std::string> symbolOrInt(const JsonValue &v,
                                           const std::string &path) {
    if (v.isString())
      return v.getString();
    if (v.isInt())
      return std::to_string(v.getInt());
    return typeError(path, "a string or an integer", v);
  }

  static Expected<const JsonValue::Array *>
  array(const JsonValue &object, const std::string &path, const char *name,
        bool required = true) {
    Expected<const JsonValue *> v = field(object, path, name, required);
    if (!v)
      return v.takeError();
    if (!*v)
      return static_cast<const JsonValue::Array *>(nullptr);
    if (!(*v)->isArray())
      return typeError(path + "." + name, "an array", **v);
    return &(*v)->getArray();
  }
};

using R = ManifestReader;

#define LOSSJIT_ASSIGN(var, expr)                                              \
  do {                                                                         \
    auto lossjitTmp = (expr);                                                  \
    if (!lossjitTmp)                                                           \
      return lossjitTmp.takeError();                                           \
    var = std::move(*lossjitTmp);                                              \
  } while (false)

} // namespace

Expected<KernelBundle> KernelBundle::fromManifest(const JsonValue &m,
                                                  std::vector<std::string> *expectedHashes,
                                                  std::vector<int64_t> *expectedSizes) {
  const std::string root = "manifest";
  if (!m.isObject())
    return R::typeError(root, "an object", m);
  std::string format;
  LOSSJIT_ASSIGN(format, R::string(m, root, "format"));
  if (format != kBundleFormat)
    return makeError(root + ".format: expected \"" + std::string(kBundleFormat) +
                     "\", got \"" + format + "\"");
  int64_t version;
  LOSSJIT_ASSIGN(version, R::integer(m, root, "format_version"));
  if (version != kBundleFormatVersion && version != kBundleFormatVersionChunkDim)
    return makeError(root + ".format_version: this runtime reads versions " +
                     std::to_string(kBundleFormatVersion) + " and " +
                     std::to_string(kBundleFormatVersionChunkDim) + ", got " +
                     std::to_string(version));

  KernelBundle b;
  LOSSJIT_ASSIGN(b.key, R::string(m, root, "key"));
  LOSSJIT_ASSIGN(b.lossjitVersion, R::string(m, root, "lossjit_version"));
  LOSSJIT_ASSIGN(b.llvmVersion, R::string(m, root, "llvm_version", false));
  LOSSJIT_ASSIGN(b.op, R::string(m, root, "op"));
  LOSSJIT_ASSIGN(b.backend, R::string(m, root, "backend"));
  LOSSJIT_ASSIGN(b.arch, R::string(m, root, "arch"));
  LOSSJIT_ASSIGN(b.irHash, R::string(m, root, "ir_hash", false));
  for (const char *name : {"options", "tile"}) {
    const JsonValue *v = m.find(name);
    if (!v)
      continue;
    if (!v->isObject())
      return R::typeError(root + "." + name, "an object", *v);
    (std::string(name) == "options" ? b.options : b.tile) = *v;
  }

  const JsonValue::Array *params;
  LOSSJIT_ASSIGN(params, R::array(m, root, "params"));
  for (size_t i = 0; i < params->size(); ++i) {
    const JsonValue &jp = (*params)[i];
    std::string path = root + ".params[" + std::to_string(i) + "]";
    if (!jp.isObject())
      return R::typeError(path, "an object", jp);
    BundleParam p;
    LOSSJIT_ASSIGN(p.name, R::string(jp, path, "name"));
    LOSSJIT_ASSIGN(p.kind, R::string(jp, path, "kind", false, "buffer"));
    LOSSJIT_ASSIGN(p.dtype, R::string(jp, path, "dtype"));
    const JsonValue::Array *shape;
    LOSSJIT_ASSIGN(shape, R::array(jp, path, "shape"));
    for (size_t j = 0; j < shape->size(); ++j) {
      std::string entry;
      LOSSJIT_ASSIGN(entry, R::symbolOrInt((*shape)[j], path + ".shape[" +
                                                            std::to_string(j) +
                                                            "]"));
      p.shape.push_back(std::move(entry));
    }
    const JsonValue::Array *extents;
    LOSSJIT_ASSIGN(extents, R::array(jp, path, "extents", false));
    if (extents) {
      if (extents->size() != p.shape.size())
        return makeError(path + ".extents: expected " + std::to_string(p.shape.size()) +
                         " entries (one per shape entry), got " +
                         std::to_string(extents->size()));
      for (size_t j = 0; j < extents->size(); ++j) {
        const JsonValue &e = (*extents)[j];
        std::string where = path + ".extents[" + std::to_string(j) + "]";
        if (!e.isInt())
          return R::typeError(where, "an integer (-1: dynamic)", e);
        if (e.getInt() < -1)
          return makeError(where + ": expected an extent >= 0 or -1 (dynamic), got " +
                           std::to_string(e.getInt()));
        p.extents.push_back(e.getInt());
      }
    }
    b.params.push_back(std::move(p));
  }

  const JsonValue::Array *dims;
  LOSSJIT_ASSIGN(dims, R::array(m, root, "dims", false));
  if (dims)
    for (size_t i = 0; i < dims->size(); ++i) {
      const JsonValue &d = (*dims)[i];
      if (!d.isString())
        return R::typeError(root + ".dims[" + std::to_string(i) + "]",
                            "a string", d);
      b.dims.push_back(d.getString());
    }

  if (const JsonValue *constants = m.find("constants")) {
    if (!constants->isObject())
      return R::typeError(root + ".constants", "an object", *constants);
    for (const JsonValue::Member &c : constants->getObject()) {
      if (!c.value.isInt())
        return R::typeError(root + ".constants." + c.key, "an integer", c.value);
      b.constants.emplace_back(c.key, c.value.getInt());
    }
  }

  const JsonValue::Array *derived;
  LOSSJIT_ASSIGN(derived, R::array(m, root, "derived", false));
  if (derived)
    for (size_t i = 0; i < derived->size(); ++i) {
      const JsonValue &jd = (*derived)[i];
      std::string path = root + ".derived[" + std::to_string(i) + "]";
      if (!jd.isObject())
        return R::typeError(path, "an object", jd);
      std::string name, formula;
      LOSSJIT_ASSIGN(name, R::string(jd, path, "name"));
      const JsonValue *f = jd.find("formula");
      if (!f)
        return makeError(path + ": missing required field \"formula\"");
      LOSSJIT_ASSIGN(formula, R::symbolOrInt(*f, path + ".formula"));
      b.derived.emplace_back(std::move(name), std::move(formula));
    }
  LOSSJIT_ASSIGN(b.chunk, R::string(m, root, "chunk", false));
  LOSSJIT_ASSIGN(b.chunkDim, R::string(m, root, "chunk_dim", false, kChunkRowsDim));
  if ((b.chunkDim != kChunkRowsDim) != (version == kBundleFormatVersionChunkDim))
    return makeError(root + ".format_version: " + std::to_string(version) +
                     (version == kBundleFormatVersionChunkDim
                          ? " is for chunks of another dim than N, but chunk_dim is N"
                          : " predates chunk_dim \"" + b.chunkDim + "\" (version 2)"));

  const JsonValue::Array *workspaces;
  LOSSJIT_ASSIGN(workspaces, R::array(m, root, "workspaces", false));
  if (workspaces)
    for (size_t i = 0; i < workspaces->size(); ++i) {
      const JsonValue &jw = (*workspaces)[i];
      std::string path = root + ".workspaces[" + std::to_string(i) + "]";
      if (!jw.isObject())
        return R::typeError(path, "an object", jw);
      BundleWorkspace w;
      LOSSJIT_ASSIGN(w.name, R::string(jw, path, "name"));
      LOSSJIT_ASSIGN(w.dtype, R::string(jw, path, "dtype"));
      const JsonValue *count = jw.find("count");
      if (!count)
        return makeError(path + ": missing required field \"count\"");
      LOSSJIT_ASSIGN(w.count, R::symbolOrInt(*count, path + ".count"));
      b.workspaces.push_back(std::move(w));
    }

  const JsonValue::Array *maps;
  LOSSJIT_ASSIGN(maps, R::array(m, root, "tensor_maps", false));
  if (maps)
    for (size_t i = 0; i < maps->size(); ++i) {
      const JsonValue &jt = (*maps)[i];
      std::string path = root + ".tensor_maps[" + std::to_string(i) + "]";
      if (!jt.isObject())
        return R::typeError(path, "an object", jt);
      BundleTensorMap t;
      LOSSJIT_ASSIGN(t.name, R::string(jt, path, "name"));
      LOSSJIT_ASSIGN(t.buffer, R::string(jt, path, "buffer"));
      const JsonValue::Array *dimsJson, *boxJson;
      LOSSJIT_ASSIGN(dimsJson, R::array(jt, path, "dims"));
      LOSSJIT_ASSIGN(boxJson, R::array(jt, path, "box"));
      if (dimsJson->size() != 2 || boxJson->size() != 2)
        return makeError(path + ": dims and box need 2 entries each");
      for (size_t d = 0; d < 2; ++d) {
        LOSSJIT_ASSIGN(t.dims[d],
                       R::symbolOrInt((*dimsJson)[d], path + ".dims[" + std::to_string(d) + "]"));
        const JsonValue &v = (*boxJson)[d];
        if (!v.isInt() || v.getInt() < 1 || v.getInt() > 256)
          return makeError(path + ".box[" + std::to_string(d) + "]: expected 1..256");
        t.box[d] = static_cast<uint32_t>(v.getInt());
      }
      int64_t swizzle;
      LOSSJIT_ASSIGN(swizzle, R::integer(jt, path, "swizzle"));
      if (swizzle < 0 || swizzle > 128)
        return makeError(path + ".swizzle: expected 0, 32, 64 or 128");
      t.swizzle = static_cast<uint32_t>(swizzle);
      b.tensorMaps.push_back(std::move(t));
    }

  const JsonValue::Array *kernels;
  LOSSJIT_ASSIGN(kernels, R::array(m, root, "kernels"));
  bool launchable = b.backend == "cuda";
  for (size_t i = 0; i < kernels->size(); ++i) {
    const JsonValue &jk = (*kernels)[i];
    std::string path = root + ".kernels[" + std::to_string(i) + "]";
    if (!jk.isObject())
      return R::typeError(path, "an object", jk);
    BundleKernel k;
    LOSSJIT_ASSIGN(k.name, R::string(jk, path, "name"));
    LOSSJIT_ASSIGN(k.file, R::string(jk, path, "file"));
    std::string hash;
    LOSSJIT_ASSIGN(hash, R::string(jk, path, "sha256"));
    if (!isSha256Hex(hash))
      return makeError(path + ".sha256: expected 64 lower-case hex characters");
    if (expectedHashes)
      expectedHashes->push_back(hash);
    int64_t bytes;
    LOSSJIT_ASSIGN(bytes, R::integer(jk, path, "bytes", false, -1));
    if (jk.find("bytes") && (bytes < 1 || static_cast<uint64_t>(bytes) > kMaxImageBytes))
      return makeError(path + ".bytes: expected 1.." + std::to_string(kMaxImageBytes) + ", got " +
                       std::to_string(bytes));
    if (expectedSizes)
      expectedSizes->push_back(bytes);

    const JsonValue::Array *grid;
    LOSSJIT_ASSIGN(grid, R::array(jk, path, "grid", launchable));
    if (grid) {
      if (grid->size() != 3)
        return makeError(path + ".grid: expected 3 entries, got " +
                         std::to_string(grid->size()));
      for (size_t d = 0; d < 3; ++d)
        LOSSJIT_ASSIGN(k.grid[d],
                       R::symbolOrInt((*grid)[d],
                                      path + ".grid[" + std::to_string(d) + "]"));
    }
    const JsonValue::Array *block;
    LOSSJIT_ASSIGN(block, R::array(jk, path, "block", launchable));
    if (block) {
      if (block->size() != 3)
        return makeError(path + ".block: expected 3 entries, got " +
                         std::to_string(block->size()));
      for (size_t d = 0; d < 3; ++d) {
        const JsonValue &v = (*block)[d];
        std::string p = path + ".block[" + std::to_string(d) + "]";
        if (!v.isInt())
          return R::typeError(p, "an integer", v);
        if (v.getInt() < 1 || v.getInt() > 1024)
          return makeError(p + ": expected 1..1024, got " +
                           std::to_string(v.getInt()));
        k.block[d] = static_cast<uint32_t>(v.getInt());
      }
    }
    int64_t shared;
    LOSSJIT_ASSIGN(shared, R::integer(jk, path, "shared_bytes", false, 0));
    if (shared < 0 || shared > (int64_t(1) << 31))
      return makeError(path + ".shared_bytes: expected 0..2^31, got " +
                       std::to_string(shared));
    k.sharedBytes = static_cast<uint32_t>(shared);
    const JsonValue::Array *args;
    LOSSJIT_ASSIGN(args, R::array(jk, path, "args", launchable));
    if (args)
      for (size_t a = 0; a < args->size(); ++a) {
        const JsonValue &v = (*args)[a];
        if (!v.isString())
          return R::typeError(path + ".args[" + std::to_string(a) + "]",
                              "a string", v);
        k.args.push_back(v.getString());
      }
    LOSSJIT_ASSIGN(k.perChunk, R::boolean(jk, path, "per_chunk", false));
    int64_t cluster;
    LOSSJIT_ASSIGN(cluster, R::integer(jk, path, "cluster", false, 1));
    if (cluster < 1 || cluster > kMaxClusterBlocks)
      return makeError(path + ".cluster: expected 1.." + std::to_string(kMaxClusterBlocks) +
                       ", got " + std::to_string(cluster));
    k.cluster = static_cast<uint32_t>(cluster);
    LOSSJIT_ASSIGN(k.persistent, R::boolean(jk, path, "persistent", false));
    b.kernels.push_back(std::move(k));
  }
  return b;
}

namespace {
/// manifest.sha256's text for a manifest (the format of sha256sum(1)).
std::string manifestHashText(const std::string &manifest) {
  return sha256Hex(manifest) + "  " + kManifestFileName + "\n";
}
} // namespace

Error writeBundleDirectory(const KernelBundle &bundle,
                           const std::string &directory) {
  if (Error e = bundle.verify())
    return e;
  if (Error e = createDirectories(directory))
    return e;
  for (const BundleKernel &k : bundle.kernels)
    if (Error e = writeFile(directory + "/" + k.file, k.image))
      return e;
  std::string manifest = writeJson(bundle.toManifest());
  if (Error e = writeFile(directory + "/" + kManifestHashFileName, manifestHashText(manifest)))
    return e;
  // Manifest last: its presence marks the directory complete.
  return writeFile(directory + "/" + kManifestFileName, manifest);
}

Expected<KernelBundle> readBundleDirectory(const std::string &directory,
                                           const std::string &expectedKey) {
  BundleReadOptions options;
  options.expectedKey = expectedKey;
  return readBundleDirectory(directory, options);
}

Expected<KernelBundle> readBundleDirectory(const std::string &directory,
                                           const BundleReadOptions &options) {
  std::string manifestPath = directory + "/" + kManifestFileName;
  Expected<std::string> text = readFile(manifestPath, kMaxManifestBytes);
  if (!text)
    return text.takeError();

  // The whole entry's integrity first: nothing of a manifest that does not
  // match its hash is interpreted.
  std::string hashPath = directory + "/" + kManifestHashFileName;
  Expected<std::string> hashText = readFile(hashPath, 4096);
  if (hashText) {
    if (*hashText != manifestHashText(*text))
      return makeError(manifestPath + ": does not match " + kManifestHashFileName + " (" +
                       std::to_string(text->size()) + " bytes hash to " + sha256Hex(*text) +
                       "; expected '" + printable(*hashText, 80) +
                       "'): the manifest was edited or corrupted");
  } else if (options.requireManifestHash) {
    return std::move(hashText.takeError())
        .withContext(directory + ": an entry needs its " + kManifestHashFileName);
  }

  Expected<JsonValue> json = parseJson(*text);
  if (!json)
    return std::move(json.takeError()).withContext(manifestPath);
  std::vector<std::string> hashes;
  std::vector<int64_t> sizes;
  Expected<KernelBundle> bundle = KernelBundle::fromManifest(*json, &hashes, &sizes);
  if (!bundle)
    return std::move(bundle.takeError()).withContext(manifestPath);
  if (!options.expectedKey.empty() && bundle->key != options.expectedKey)
    return makeError(manifestPath + ": key " + printable(bundle->key) +
                     " does not match the requested key " + options.expectedKey);
  if (!options.expectedIrHash.empty() && bundle->irHash != options.expectedIrHash)
    return makeError(manifestPath + ": ir_hash " + printable(bundle->irHash) +
                     " does not match the requested graph's " + options.expectedIrHash +
                     " (an entry copied under another key?)");

  // Sizes before any image is read: each within its bound, all within one.
  uint64_t declared = 0;
  for (size_t i = 0; i < bundle->kernels.size(); ++i) {
    const BundleKernel &k = bundle->kernels[i];
    // Reject path tricks before touching the file system.
    if (!isSafeFileName(k.file))
      return makeError(manifestPath + ": kernels[" + std::to_string(i) + "].file \"" +
                       printable(k.file) + "\" is not a plain file name");
    declared += sizes[i] < 0 ? 0 : static_cast<uint64_t>(sizes[i]);
  }
  if (declared > kMaxBundleBytes)
    return makeError(manifestPath + ": the kernel images declare " + std::to_string(declared) +
                     " bytes, more than the limit of " + std::to_string(kMaxBundleBytes));

  // Kernels may share a file (one module, several entry points): read it once.
  std::map<std::string, std::string> files;
  for (size_t i = 0; i < bundle->kernels.size(); ++i) {
    BundleKernel &k = bundle->kernels[i];
    std::string path = directory + "/" + k.file;
    auto it = files.find(k.file);
    if (it == files.end()) {
      uint64_t bound = sizes[i] < 0 ? kMaxImageBytes : static_cast<uint64_t>(sizes[i]);
      Expected<std::string> image = readFile(path, bound);
      if (!image)
        return std::move(image.takeError()).withContext("kernel '" + k.name + "' image");
      it = files.emplace(k.file, std::move(*image)).first;
    }
    const std::string &image = it->second;
    if (sizes[i] >= 0 && image.size() != static_cast<uint64_t>(sizes[i]))
      return makeError(path + ": holds " + std::to_string(image.size()) +
                       " bytes, the manifest says " + std::to_string(sizes[i]) +
                       ": the file is truncated");
    std::string actual = sha256Hex(image);
    if (actual != hashes[i])
      return makeError(path + ": SHA-256 mismatch (" + std::to_string(image.size()) +
                       " bytes hash to " + actual + ", manifest says " + hashes[i] +
                       "): the file is corrupt or truncated");
    k.image = image;
  }
  if (Error e = bundle->verify())
    return std::move(e).withContext(manifestPath);
  return bundle;
}

} // namespace lossjit::runtime
