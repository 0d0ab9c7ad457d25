//===- CApiEmitter.cpp - <prefix>.h / <prefix>.c generation ---------------===//
//
// The source is mostly a fixed runtime (arch choice, module loading, the
// memref-ABI argument packing, workspace carving) kept as C templates in
// capi/ with `$p$` standing for "<prefix>_" and `$P$` for "<PREFIX>_", plus
// generated tables: embedded images, per-(op, arch) kernel lists and a
// function per (op, arch) that evaluates every size and grid formula with
// overflow checks. Internal names use "<prefix>_i_" (never "__", reserved in
// C++).
//
//===----------------------------------------------------------------------===//

#include "tools/lossjit-aot/CApiEmitter.h"

#include "tools/lossjit-aot/FormulaToC.h"
#include "tools/lossjit-aot/PtxSignature.h"

#include "runtime/Version.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace lossjit::aot {

namespace {

// The fixed C, embedded at build time from the templates in capi/ (see
// capi/embed.cmake): kHeaderApi (capi/api.h.in) goes into the header,
// kSourceRuntime (capi/runtime.c.in) before the generated tables and
// kSourceEngine (capi/engine.c.in) after them. Each is emitted after a blank
// line, with `$p$` and `$P$` substituted.
#include "tools/lossjit-aot/CApiTemplates.inc"

std::string upper(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string sanitize(std::string s) {
  for (char &c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return s;
}

/// A C string literal for arbitrary text.
std::string cString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// Text inside a /* */ comment must not close it.
std::string commentSafe(std::string s) {
  for (size_t at = s.find("*/"); at != std::string::npos; at = s.find("*/", at))
    s.replace(at, 2, "* /");
  return s;
}

std::string substitute(std::string text, const std::string &p, const std::string &P) {
  for (size_t at = text.find("$p$"); at != std::string::npos; at = text.find("$p$", at)) {
    text.replace(at, 3, p);
    at += p.size();
  }
  for (size_t at = text.find("$P$"); at != std::string::npos; at = text.find("$P$", at)) {
    text.replace(at, 3, P);
    at += P.size();
  }
  return text;
}

bool parseArch(const std::string &arch, int &major, int &minor, bool &specific) {
  // sm_<digits>[a|f]; the last digit is the minor version.
  if (arch.rfind("sm_", 0) != 0)
    return false;
  std::string digits;
  size_t i = 3;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])))
    digits += arch[i++];
  if (digits.size() < 2)
    return false;
  std::string suffix = arch.substr(i);
  if (!suffix.empty() && suffix != "a" && suffix != "f")
    return false;
  specific = !suffix.empty();
  major = std::stoi(digits.substr(0, digits.size() - 1));
  minor = digits.back() - '0';
  return true;
}

const std::set<std::string> &reservedNames() {
  static const std::set<std::string> names = {
      // The entry points' fixed arguments.
      "handle", "stream", "workspace", "workspace_bytes", "params", "dims",
      // C and C++ keywords a buffer could plausibly be called.
      "auto", "bool", "break", "case", "catch", "char", "class", "const", "continue",
      "default", "delete", "do", "double", "else", "enum", "explicit", "export",
      "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int",
      "long", "mutable", "namespace", "new", "operator", "private", "protected",
      "public", "register", "restrict", "return", "short", "signed", "sizeof",
      "static", "struct", "switch", "template", "this", "throw", "true", "try",
      "typedef", "typename", "union", "unsigned", "using", "virtual", "void",
      "volatile", "while"};
  return names;
}

std::string shapeText(const std::vector<std::string> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i];
  return s + "]";
}

/// A kernel image as a C byte array (PTX keeps a terminating NUL: the driver
/// reads it as a C string).
void emitBytes(std::ostringstream &os, const std::string &name, const std::string &bytes,
               bool nulTerminate) {
  os << "static const unsigned char " << name << "[] = {";
  size_t n = bytes.size() + (nulTerminate ? 1 : 0);
  for (size_t i = 0; i < n; ++i) {
    if (i % 24 == 0)
      os << "\n  ";
    unsigned value = i < bytes.size() ? static_cast<unsigned char>(bytes[i]) : 0;
    os << value << (i + 1 < n ? "," : "");
  }
  os << "\n};\n";
}

/// One row of the C arch table: an arch with one kind of image.
struct ArchEntry {
  std::string arch;
  ImageKind kind;
  size_t archIndex; // into each op's `arches`
  int major = 0, minor = 0;
  bool specific = false;
};

struct Limits {
  size_t maxKernels = 1, maxWorkspaces = 1, maxSymbols = 1, maxSlots = 1,
         maxImages = 1, maxParams = 1, maxDims = 1;
  /// Tensor maps of the op variant with the most (0: no TMA code at all).
  size_t maxTensorMaps = 0;
  /// Whether some kernel runs in thread-block clusters (CUDA 11.7's
  /// cuOccupancyMaxActiveClusters caps its persistent grid).
  bool clusters = false;
};

class Emitter {
public:
  Emitter(const AotOutput &out) : out(out) {
    p = out.prefix + "_";
    P = upper(out.prefix) + "_";
  }

  runtime::Expected<CApiFiles> run() {
    if (runtime::Error e = collect())
      return e;
    CApiFiles files;
    files.headerName = out.prefix + ".h";
    files.sourceName = out.prefix + ".c";
    files.header = header();
    auto source = this->source();
    if (!source)
      return source.takeError();
    files.source = std::move(*source);
    return files;
  }

private:
  runtime::Error collect() {
    const AotOp &first = out.ops.front();
    for (const AotOp &op : out.ops) {
      if (op.arches.size() != first.arches.size())
        return runtime::makeError("the C API needs every op built for the same arches");
      for (size_t a = 0; a < op.arches.size(); ++a)
        if (op.arches[a].bundle.arch != first.arches[a].bundle.arch)
          return runtime::makeError("the C API needs every op built for the same arches");
    }
    for (size_t a = 0; a < first.arches.size(); ++a) {
      ArchEntry entry;
      entry.arch = first.arches[a].bundle.arch;
      entry.archIndex = a;
      if (!parseArch(entry.arch, entry.major, entry.minor, entry.specific))
        return runtime::makeError("cannot parse arch '" + entry.arch + "'");
      if (out.imageKind == ImageKind::Cubin) {
        entry.kind = ImageKind::Cubin;
        entries.push_back(entry);
      }
      entry.kind = ImageKind::Ptx;
      entries.push_back(entry);
    }
    // Limits and per-(op, arch) module numbering.
    for (const AotOp &op : out.ops) {
      const runtime::KernelBundle &b0 = op.arches.front().bundle;
      limits.maxParams = std::max(limits.maxParams, b0.params.size());
      limits.maxDims = std::max(limits.maxDims, b0.dims.size());
      for (const AotArchBuild &build : op.arches) {
        const runtime::KernelBundle &b = build.bundle;
        limits.maxKernels = std::max(limits.maxKernels, b.kernels.size());
        limits.maxWorkspaces = std::max(limits.maxWorkspaces, b.workspaces.size());
        limits.maxTensorMaps = std::max(limits.maxTensorMaps, b.tensorMaps.size());
        limits.maxSymbols = std::max(limits.maxSymbols, symbolsOf(build).size());
        for (size_t k = 0; k < b.kernels.size(); ++k) {
          limits.maxSlots = std::max(limits.maxSlots, planSlots(b, k).size());
          limits.clusters = limits.clusters || b.kernels[k].cluster > 1;
        }
        if (build.usesChunks() && chunkSymbolIndex(build) < 0)
          return runtime::makeError(op.role + " " + b.arch + ": chunk symbol '" +
                                    build.chunkSymbol + "' is not a dim, constant or "
                                    "derived symbol");
        if (b.params.size() > 255 || b.workspaces.size() > 255 ||
            symbolsOf(build).size() > 255)
          return runtime::makeError("too many params, workspaces or symbols for the C tables");
      }
    }
    for (size_t a = 0; a < first.arches.size(); ++a) {
      size_t images = 0;
      for (const AotOp &op : out.ops)
        images += moduleFiles(op.arches[a].bundle).size();
      limits.maxImages = std::max(limits.maxImages, images);
    }
    return runtime::Error::success();
  }

  /// The tensor map table and dims function of one (op, arch), when it has
  /// maps (tile tma=1 or 2).
  runtime::Error emitTensorMaps(std::ostream &os, const runtime::KernelBundle &b,
                                const std::vector<std::string> &symbols, const std::string &tag,
                                const FormulaCStyle &style) const {
    if (b.tensorMaps.empty())
      return runtime::Error::success();
    os << "static const " << p << "i_tensor_map " << p << "i_tensor_maps_" << tag << "[] = {";
    for (size_t t = 0; t < b.tensorMaps.size(); ++t) {
      const runtime::BundleTensorMap &m = b.tensorMaps[t];
      auto param = indexOf(b.params, m.buffer);
      auto workspace = indexOf(b.workspaces, m.buffer);
      if (!param && !workspace)
        return runtime::makeError("tensor map " + m.name + ": no param or workspace " + m.buffer);
      const std::string &dtype = param ? b.params[*param].dtype : b.workspaces[*workspace].dtype;
      const char *type = dtype == "f16"    ? "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"
                         : dtype == "bf16" ? "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"
                                           : "CU_TENSOR_MAP_DATA_TYPE_FLOAT32";
      const char *swizzle = m.swizzle == 128  ? "CU_TENSOR_MAP_SWIZZLE_128B"
                            : m.swizzle == 64 ? "CU_TENSOR_MAP_SWIZZLE_64B"
                            : m.swizzle == 32 ? "CU_TENSOR_MAP_SWIZZLE_32B"
                                              : "CU_TENSOR_MAP_SWIZZLE_NONE";
      os << (t ? ", " : "") << "{" << (param ? *param : *workspace) << ", " << (param ? 0 : 1)
         << ", " << type << ", "
         << (dtype == "f32" ? 4 : 2) << ", " << swizzle << ", {" << m.box[0] << ", " << m.box[1]
         << "}}";
    }
    os << "}; /* ";
    for (size_t t = 0; t < b.tensorMaps.size(); ++t)
      os << (t ? ", " : "") << b.tensorMaps[t].name;
    os << " */\n";
    os << "static int " << p << "i_tensor_map_dims_" << tag
       << "(const int64_t *s, int64_t *d)\n{\n  int error = 0;\n  int *e = &error;\n";
    for (size_t t = 0; t < b.tensorMaps.size(); ++t)
      for (size_t i = 0; i < 2; ++i) {
        auto c = formulaToC(b.tensorMaps[t].dims[i], symbols, style);
        if (!c)
          return std::move(c.takeError()).withContext("tensor map " + b.tensorMaps[t].name);
        os << "  d[" << 2 * t + i << "] = " << *c << "; /* " << b.tensorMaps[t].name << " dims["
           << i << "] = " << b.tensorMaps[t].dims[i] << " */\n";
      }
    os << "  (void)e;\n  return error;\n}\n";
    return runtime::Error::success();
  }

  /// The C symbol array of a build: dims, constants, derived, chunk range.
  static std::vector<std::string> symbolsOf(const AotArchBuild &build) {
    const runtime::KernelBundle &b = build.bundle;
    std::vector<std::string> symbols = b.dims;
    for (const auto &[name, value] : b.constants)
      symbols.push_back(name);
    for (const auto &[name, formula] : build.derived)
      symbols.push_back(name);
    symbols.push_back("chunk_begin");
    symbols.push_back("chunk_end");
    return symbols;
  }

  /// The dim the chunks of per-chunk kernels split (the bundle's chunk_dim:
  /// N, or V for vocabulary chunks), else the first.
  static size_t chunkDim(const runtime::KernelBundle &b) {
    for (size_t i = 0; i < b.dims.size(); ++i)
      if (b.dims[i] == b.chunkDim)
        return i;
    return 0;
  }

  /// Distinct image files of a bundle, in first-use order.
  static std::vector<std::string> moduleFiles(const runtime::KernelBundle &b) {
    std::vector<std::string> files;
    for (const runtime::BundleKernel &k : b.kernels)
      if (std::find(files.begin(), files.end(), k.file) == files.end())
        files.push_back(k.file);
    return files;
  }

  std::string option(const std::string &key) const {
    const runtime::JsonValue *v = out.options.find(key);
    if (!v)
      return {};
    if (v->isString())
      return v->getString();
    if (v->isInt())
      return std::to_string(v->getInt());
    if (v->isBool())
      return v->getBool() ? "true" : "false";
    return runtime::writeJson(*v, 0);
  }

  std::string variantText() const {
    std::string text = "op=linear_cross_entropy";
    if (out.options.isObject())
      for (const auto &m : out.options.getObject())
        text += " " + m.key + "=" + option(m.key);
    text += " tile=" + out.tile;
    text += " images=" + std::string(imageKindName(out.imageKind));
    text += " lossjit=" + std::string(runtime::kLossjitVersion);
    if (!out.ops.front().arches.front().bundle.llvmVersion.empty())
      text += " llvm=" + out.ops.front().arches.front().bundle.llvmVersion;
    text += " ir_hash=" + out.irHash;
    return text;
  }

  std::string archList() const {
    std::string s;
    for (const AotArchBuild &b : out.ops.front().arches)
      s += (s.empty() ? "" : ",") + b.bundle.arch;
    return s;
  }

  std::string signature(const AotOp &op) const {
    const runtime::KernelBundle &b = op.arches.front().bundle;
    std::vector<std::string> names = cParamNames(op);
    std::string s = p + "status " + p + op.role + "(";
    std::string indent(s.size(), ' ');
    s += p + "handle *handle, CUstream stream";
    for (const std::string &n : names)
      s += ",\n" + indent + "CUdeviceptr " + n;
    s += ",\n" + indent;
    for (size_t i = 0; i < b.dims.size(); ++i)
      s += (i ? ", " : "") + std::string("int64_t ") + b.dims[i];
    s += ",\n" + indent + "CUdeviceptr workspace, size_t workspace_bytes)";
    return s;
  }

  std::string dimList(const AotOp &op, bool withTypes) const {
    std::string s;
    for (const std::string &d : op.arches.front().bundle.dims)
      s += (s.empty() ? "" : ", ") + std::string(withTypes ? "int64_t " : "") + d;
    return s;
  }

  std::string header() const {
    std::ostringstream os;
    std::string guard = P + "H_INCLUDED";
    os << "/* " << out.prefix << ".h - generated by lossjit-aot " << runtime::kLossjitVersion
       << "; do not edit.\n"
       << " *\n"
       << " * Fused linear + cross-entropy kernels for CUDA, usable from C and C++ with\n"
       << " * nothing but the CUDA driver API (include cuda.h, link -lcuda).\n"
       << " *\n"
       << " * Variant: " << commentSafe(variantText()) << "\n"
       << " * Arches:  " << archList() << " (" << imageKindName(out.imageKind)
       << (out.imageKind == ImageKind::Cubin ? ", with PTX fallback" : "") << ")\n"
       << " * Made by: " << commentSafe(out.commandLine) << "\n"
       << " *\n"
       << " * Usage:\n"
       << " *   " << p << "handle *h;\n"
       << " *   if (" << p << "create(ctx, &h) != " << P << "SUCCESS) puts(" << p
       << "last_error());\n"
       << " *   " << p << "forward(h, stream, <device buffers>, " << dimList(out.ops.front(), false)
       << ", 0, 0);   (0, 0: allocate the workspace)\n"
       << " *   " << p << "destroy(h);\n"
       << " */\n"
       << "#ifndef " << guard << "\n#define " << guard << "\n\n"
       << "#include <stddef.h>\n#include <stdint.h>\n\n#include <cuda.h>\n\n"
       << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";

    // Variant macros: what a caller can #if on.
    os << "/* The variant these kernels were built for. */\n";
    os << "#define " << P << "LOSSJIT_VERSION " << cString(runtime::kLossjitVersion) << "\n";
    std::string dtype = option("dtype"), labels = option("label_type"),
                reduction = option("reduction"), bias = option("bias"),
                ignore = option("ignore_index");
    if (!dtype.empty())
      os << "#define " << P << "DTYPE " << cString(dtype) << "\n#define " << P << "DTYPE_"
         << upper(sanitize(dtype)) << " 1\n";
    if (!labels.empty())
      os << "#define " << P << "LABEL_TYPE " << cString(labels) << "\n#define " << P
         << "LABEL_" << upper(sanitize(labels)) << " 1\n";
    if (!bias.empty())
      os << "#define " << P << "HAS_BIAS " << (bias == "true" ? 1 : 0) << "\n";
    if (!ignore.empty())
      os << "#define " << P << "IGNORE_INDEX ((int64_t)" << ignore << ")\n";
    if (!reduction.empty())
      os << "#define " << P << "REDUCTION " << cString(reduction) << "\n#define " << P
         << "REDUCTION_" << upper(sanitize(reduction)) << " 1\n";
    static const std::set<std::string> known = {"dtype", "label_type", "bias",
                                                "ignore_index", "reduction", "entry"};
    if (out.options.isObject())
      for (const auto &m : out.options.getObject())
        if (!known.count(m.key))
          os << "#define " << P << "OPTION_" << upper(sanitize(m.key)) << " "
             << cString(option(m.key)) << "\n";
    // Options of the other ops that the variant's options do not say, e.g.
    // LCE_BACKWARD_OPTION_STRATEGY "chunked".
    for (const AotOp &op : out.ops) {
      if (op.role == "forward" || !op.options.isObject())
        continue;
      for (const auto &m : op.options.getObject()) {
        const runtime::JsonValue *common = out.options.find(m.key);
        if (common && *common == m.value)
          continue;
        std::string value = m.value.isString() ? m.value.getString() : runtime::writeJson(m.value, 0);
        os << "#define " << P << upper(op.role) << "_OPTION_" << upper(sanitize(m.key)) << " "
           << cString(value) << "\n";
      }
    }
    os << "#define " << P << "HAS_FORWARD " << (out.findOp("forward") ? 1 : 0) << "\n";
    os << "#define " << P << "HAS_BACKWARD " << (out.findOp("backward") ? 1 : 0) << "\n";
    os << "#define " << P << "HAS_FORWARD_BACKWARD " << (out.findOp("forward_backward") ? 1 : 0)
       << "\n";
    os << "#define " << P << "ARCHES " << cString(archList()) << "\n";
    os << "#define " << P << "IMAGES " << cString(imageKindName(out.imageKind)) << "\n";
    os << "#define " << P << "WORKSPACE_ALIGNMENT 256\n";

    os << "\n" << substitute(kHeaderApi, p, P);

    for (const AotOp &op : out.ops) {
      const runtime::KernelBundle &b = op.arches.front().bundle;
      std::vector<std::string> names = cParamNames(op);
      size_t width = 0, shapeWidth = 0;
      for (const std::string &n : names)
        width = std::max(width, n.size());
      for (const runtime::BundleParam &bp : b.params)
        shapeWidth = std::max(shapeWidth, shapeText(bp.shape).size());
      os << "\n/* "
         << (op.role == "forward"            ? "Forward"
             : op.role == "forward_backward" ? "Fused forward+backward (gradients of grad_loss = 1)"
                                             : "Backward")
         << " pass ("
         << op.entry << "). Buffers: dense, row-major device memory in the\n"
         << " * handle's context:\n";
      for (size_t i = 0; i < names.size(); ++i) {
        const runtime::BundleParam &bp = b.params[i];
        os << " *   " << names[i] << std::string(width - names[i].size() + 1, ' ') << bp.dtype
           << std::string(5 - std::min<size_t>(4, bp.dtype.size()), ' ') << shapeText(bp.shape)
           << std::string(shapeWidth - shapeText(bp.shape).size() + 2, ' ')
           << (op.isOutput(bp.name) ? "written" : "read") << "\n";
      }
      os << " * " << dimList(op, false) << " >= 0. workspace: 0 to have the handle's allocator\n"
         << " * provide " << p << op.role << "_workspace_bytes(" << dimList(op, false)
         << ") bytes, or a device buffer of at\n"
         << " * least that many bytes, " << "256-byte aligned, that nothing else uses until\n"
         << " * the kernels finished. Enqueues the kernels on `stream` (in the\n"
         << " * handle's context) and returns without synchronizing. */\n";
      os << signature(op) << ";\n";
      os << "\n/* " << p << op.role << " with the " << names.size()
         << " buffers in an array (in the order above) and dims {" << dimList(op, false)
         << "}:\n * for bindings and generic callers. */\n";
      os << p << "status " << p << op.role << "_v(" << p
         << "handle *handle, CUstream stream,\n"
         << std::string(p.size() + op.role.size() + p.size() + 10, ' ')
         << "const CUdeviceptr *buffers, int num_buffers, const int64_t *dims,\n"
         << std::string(p.size() + op.role.size() + p.size() + 10, ' ')
         << "int num_dims, CUdeviceptr workspace, size_t workspace_bytes);\n";
      os << "\n/* Workspace bytes " << p << op.role << " needs; (size_t)-1 for invalid dims. */\n";
      os << "size_t " << p << op.role << "_workspace_bytes(" << dimList(op, true) << ");\n";
    }
    const AotOp &first = out.ops.front();
    os << "\n/* Workspace bytes enough for every entry point; (size_t)-1 for invalid dims. */\n";
    os << "size_t " << p << "workspace_bytes(" << dimList(first, true) << ");\n";
    os << "\n#ifdef __cplusplus\n} /* extern \"C\" */\n#endif\n\n#endif /* " << guard
       << " */\n";
    return os.str();
  }

  runtime::Expected<std::string> source() const {
    std::ostringstream os;
    os << "/* " << out.prefix << ".c - generated by lossjit-aot " << runtime::kLossjitVersion
       << "; do not edit.\n"
       << " * Build: cc -c " << out.prefix << ".c -I<cuda>/include, link with -lcuda. */\n"
       << "#include \"" << out.prefix << ".h\"\n\n"
       << "#include <stdarg.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
       << "#include <string.h>\n\n";
    os << "enum {\n"
       << "  " << P << "I_NUM_OPS = " << out.ops.size() << ",\n"
       << "  " << P << "I_NUM_ARCHES = " << entries.size() << ",\n"
       << "  " << P << "I_MAX_KERNELS = " << limits.maxKernels << ",\n"
       << "  " << P << "I_MAX_WORKSPACES = " << limits.maxWorkspaces << ",\n"
       << "  " << P << "I_MAX_SYMBOLS = " << limits.maxSymbols << ",\n"
       << "  " << P << "I_MAX_PARAMS = " << limits.maxParams << ",\n"
       << "  " << P << "I_MAX_SLOTS = " << limits.maxSlots << ",\n"
       << "  " << P << "I_MAX_IMAGES = " << limits.maxImages << ",\n"
       << "  " << P << "I_MAX_TENSOR_MAPS = " << std::max<size_t>(limits.maxTensorMaps, 1)
       << "\n};\n";
    // TMA tensor maps (tile tma=1) need CUDA 12's cuTensorMapEncodeTiled;
    // outputs without them compile against older headers too.
    os << "#define " << P << "I_TMA " << (limits.maxTensorMaps ? 1 : 0) << "\n";
    // Likewise clusters: their occupancy query needs CUDA 11.7's headers.
    os << "#define " << P << "I_CLUSTERS " << (limits.clusters ? 1 : 0) << "\n";
    os << "\n" << substitute(kSourceRuntime, p, P);

    os << "\n/* ------------------------------------------------------------- variant */\n\n";
    os << "static const char " << p << "i_variant[] = " << cString(variantText()) << ";\n";

    // Ops: names, params, dims.
    os << "\n/* ------------------------------------------------------------- ops */\n\n";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const runtime::KernelBundle &b = out.ops[o].arches.front().bundle;
      os << "static const char *const " << p << "i_param_names_" << o << "[] = {";
      for (size_t i = 0; i < b.params.size(); ++i)
        os << (i ? ", " : "") << cString(b.params[i].name);
      os << "};\n";
      os << "static const char *const " << p << "i_dim_names_" << o << "[] = {";
      for (size_t i = 0; i < b.dims.size(); ++i)
        os << (i ? ", " : "") << cString(b.dims[i]);
      os << "};\n";
      // The extents the graph declares, as constraints on the dims.
      std::vector<int64_t> declared(b.dims.size(), -1);
      for (const runtime::BundleParam &param : b.params)
        for (size_t j = 0; j < param.extents.size() && j < param.shape.size(); ++j)
          for (size_t i = 0; i < b.dims.size(); ++i)
            if (param.extents[j] >= 0 && param.shape[j] == b.dims[i] && declared[i] < 0)
              declared[i] = param.extents[j];
      os << "static const int64_t " << p << "i_declared_dims_" << o << "[] = {";
      for (size_t i = 0; i < declared.size(); ++i)
        os << (i ? ", " : "") << "INT64_C(" << declared[i] << ")";
      if (declared.empty())
        os << "-1";
      os << "};\n";
    }
    os << "static const " << p << "i_op " << p << "i_ops[" << P << "I_NUM_OPS] = {\n";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const runtime::KernelBundle &b = out.ops[o].arches.front().bundle;
      os << "  {" << cString(out.ops[o].role) << ", " << b.params.size() << ", " << p
         << "i_param_names_" << o << ", " << b.dims.size() << ", " << p << "i_dim_names_" << o
         << ", " << p << "i_declared_dims_" << o << "}" << (o + 1 < out.ops.size() ? "," : "")
         << "\n";
    }
    os << "};\n";

    // Per (op, arch): kernels, workspaces, constants, sizes.
    os << "\n/* ---------------------------------------------------- plans per arch */\n";
    FormulaCStyle style;
    style.helper = p + "i_";
    style.errorFlag = "e";
    style.symbolArray = "s";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const AotOp &op = out.ops[o];
      for (const AotArchBuild &build : op.arches) {
        const runtime::KernelBundle &b = build.bundle;
        std::string tag = op.role + "_" + sanitize(b.arch);
        std::vector<std::string> symbols = symbolsOf(build);
        std::vector<std::string> files = moduleFiles(b);
        size_t imageBase = imageOffset(o, build);
        os << "\n/* " << op.role << ", " << b.arch << ": bundle " << b.key << " */\n";
        // Kernel args.
        for (size_t k = 0; k < b.kernels.size(); ++k) {
          const runtime::BundleKernel &kernel = b.kernels[k];
          if (kernel.args.empty())
            continue;
          os << "static const " << p << "i_arg " << p << "i_args_" << tag << "_" << k
             << "[] = {";
          for (size_t a = 0; a < kernel.args.size(); ++a) {
            const std::string &arg = kernel.args[a];
            std::string kind;
            size_t index = 0;
            if (auto t = indexOf(b.tensorMaps, arg)) {
              kind = P + "I_ARG_TENSOR_MAP";
              index = *t;
            } else if (arg == runtime::kTensorMapsReadyArg) {
              kind = P + "I_ARG_TENSOR_MAPS_READY";
            } else if (auto i = indexOf(b.params, arg)) {
              kind = P + "I_ARG_PARAM";
              index = *i;
            } else if (auto w = indexOf(b.workspaces, arg)) {
              kind = P + "I_ARG_WORKSPACE";
              index = *w;
            } else {
              auto s = std::find(symbols.begin(), symbols.end(), arg);
              if (s == symbols.end())
                return runtime::makeError("kernel " + kernel.name + ": unknown arg " + arg);
              kind = P + "I_ARG_SYMBOL";
              index = static_cast<size_t>(s - symbols.begin());
            }
            os << (a ? ", " : "") << "{" << kind << ", " << index << "}";
          }
          os << "}; /* ";
          for (size_t a = 0; a < kernel.args.size(); ++a)
            os << (a ? ", " : "") << kernel.args[a];
          os << " */\n";
        }
        os << "static const " << p << "i_kernel " << p << "i_kernels_" << tag << "[] = {\n";
        for (size_t k = 0; k < b.kernels.size(); ++k) {
          const runtime::BundleKernel &kernel = b.kernels[k];
          size_t image = imageBase + static_cast<size_t>(
                                         std::find(files.begin(), files.end(), kernel.file) -
                                         files.begin());
          bool perChunk = k < build.perChunk.size() && build.perChunk[k];
          os << "  {" << cString(kernel.name) << ", " << image << ", {" << kernel.block[0] << ", "
             << kernel.block[1] << ", " << kernel.block[2] << "}, " << kernel.sharedBytes << ", "
             << (perChunk ? 1 : 0) << ", " << kernel.cluster << ", " << (kernel.persistent ? 1 : 0)
             << ", " << kernel.args.size() << ", "
             << (kernel.args.empty() ? std::string("NULL")
                                     : p + "i_args_" + tag + "_" + std::to_string(k))
             << "}" << (k + 1 < b.kernels.size() ? "," : "") << "\n";
        }
        os << "};\n";
        if (!b.workspaces.empty()) {
          os << "static const " << p << "i_workspace " << p << "i_workspaces_" << tag
             << "[] = {";
          for (size_t w = 0; w < b.workspaces.size(); ++w) {
            auto size = runtime::dtypeSize(b.workspaces[w].dtype);
            if (!size)
              return size.takeError();
            os << (w ? ", " : "") << "{" << cString(b.workspaces[w].name) << ", " << *size
               << "}";
          }
          os << "};\n";
        }
        if (!b.constants.empty()) {
          os << "static const int64_t " << p << "i_constants_" << tag << "[] = {";
          for (size_t c = 0; c < b.constants.size(); ++c)
            os << (c ? ", " : "") << "INT64_C(" << b.constants[c].second << ")";
          os << "}; /* ";
          for (size_t c = 0; c < b.constants.size(); ++c)
            os << (c ? ", " : "") << b.constants[c].first;
          os << " */\n";
        }
        // Sizes.
        os << "static int " << p << "i_sizes_" << tag
           << "(int64_t *s, int64_t *p, int64_t *w)\n{\n"
           << "  int error = 0;\n  int *e = &error;\n";
        os << "  /* symbols: ";
        for (size_t i = 0; i < symbols.size(); ++i)
          os << (i ? ", " : "") << "s[" << i << "]=" << symbols[i];
        os << " */\n";
        size_t firstDerived = b.dims.size() + b.constants.size();
        for (size_t i = 0; i < build.derived.size(); ++i) {
          // A derived symbol sees only what precedes it.
          std::vector<std::string> visible(symbols.begin(),
                                           symbols.begin() + firstDerived + i);
          auto c = formulaToC(build.derived[i].second, visible, style);
          if (!c)
            return std::move(c.takeError()).withContext("derived " + build.derived[i].first);
          os << "  s[" << firstDerived + i << "] = " << *c << "; /* " << build.derived[i].first
             << " = " << build.derived[i].second << " */\n";
        }
        for (size_t i = 0; i < b.params.size(); ++i) {
          std::string expr = "INT64_C(1)";
          for (const std::string &extent : b.params[i].shape) {
            auto c = formulaToC(extent, symbols, style);
            if (!c)
              return std::move(c.takeError()).withContext("param " + b.params[i].name);
            expr = expr == "INT64_C(1)" ? *c : p + "i_mul(e, " + expr + ", " + *c + ")";
          }
          os << "  p[" << i << "] = " << expr << "; /* " << b.params[i].name << " "
             << shapeText(b.params[i].shape) << " */\n";
        }
        for (size_t w = 0; w < b.workspaces.size(); ++w) {
          auto c = formulaToC(b.workspaces[w].count, symbols, style);
          if (!c)
            return std::move(c.takeError()).withContext("workspace " + b.workspaces[w].name);
          os << "  w[" << w << "] = " << *c << "; /* " << b.workspaces[w].name << ": "
             << b.workspaces[w].count << " */\n";
        }
        if (b.workspaces.empty())
          os << "  (void)w;\n";
        os << "  return error;\n}\n";
        os << "static int " << p << "i_grids_" << tag << "(const int64_t *s, int64_t *g)\n{\n"
           << "  int error = 0;\n  int *e = &error;\n";
        for (size_t k = 0; k < b.kernels.size(); ++k)
          for (int d = 0; d < 3; ++d) {
            auto c = formulaToC(b.kernels[k].grid[d], symbols, style);
            if (!c)
              return std::move(c.takeError()).withContext("kernel " + b.kernels[k].name);
            os << "  g[" << k * 3 + d << "] = " << *c << "; /* " << b.kernels[k].name
               << " grid[" << d << "] = " << b.kernels[k].grid[d] << " */\n";
          }
        os << "  return error;\n}\n";
        if (runtime::Error e = emitTensorMaps(os, b, symbols, tag, style))
          return e;
      }
    }

    // Images.
    os << "\n/* ---------------------------------------------------- kernel images */\n";
    for (const ArchEntry &entry : entries) {
      std::string kind = imageKindName(entry.kind);
      std::string tag = sanitize(entry.arch) + "_" + kind;
      size_t index = 0;
      std::vector<std::string> imageRefs;
      for (size_t o = 0; o < out.ops.size(); ++o) {
        const AotArchBuild &build = out.ops[o].arches[entry.archIndex];
        const runtime::KernelBundle &b = build.bundle;
        for (const std::string &file : moduleFiles(b)) {
          size_t k = 0;
          while (b.kernels[k].file != file)
            ++k;
          bool cubin = entry.kind == ImageKind::Cubin;
          const std::string &bytes = cubin ? b.kernels[k].image : build.ptx[k];
          std::string fileName = cubin ? file : b.kernels[k].name + "." + b.arch + ".ptx";
          std::string var = p + "i_image_" + tag + "_" + std::to_string(index++);
          os << "\n/* " << out.ops[o].role << "/" << fileName << " (" << bytes.size()
             << " bytes) */\n";
          emitBytes(os, var, bytes, !cubin);
          imageRefs.push_back("{" + var + ", " + std::to_string(bytes.size()) + ", " +
                              cString(b.key + "/" + fileName) + "}");
        }
      }
      os << "static const " << p << "i_image " << p << "i_images_" << tag << "[] = {\n";
      for (size_t i = 0; i < imageRefs.size(); ++i)
        os << "  " << imageRefs[i] << (i + 1 < imageRefs.size() ? "," : "") << "\n";
      os << "};\n";
    }

    // The arch table.
    os << "\n/* ---------------------------------------------------- arch table */\n\n";
    os << "static const " << p << "i_arch " << p << "i_arches[" << P << "I_NUM_ARCHES] = {\n";
    for (size_t e = 0; e < entries.size(); ++e) {
      const ArchEntry &entry = entries[e];
      std::string kind = imageKindName(entry.kind);
      std::string tag = sanitize(entry.arch) + "_" + kind;
      size_t images = 0;
      for (const AotOp &op : out.ops)
        images += moduleFiles(op.arches[entry.archIndex].bundle).size();
      os << "  {" << cString(entry.arch + ":" + kind) << ", " << entry.major << ", "
         << entry.minor << ", " << (entry.specific ? 1 : 0) << ", "
         << (entry.kind == ImageKind::Cubin ? 1 : 0) << ", " << images << ", " << p
         << "i_images_" << tag << ",\n   {";
      for (size_t o = 0; o < out.ops.size(); ++o) {
        const AotArchBuild &build = out.ops[o].arches[entry.archIndex];
        const runtime::KernelBundle &b = build.bundle;
        std::string optag = out.ops[o].role + "_" + sanitize(b.arch);
        os << (o ? ",\n    " : "") << "{" << b.kernels.size() << ", " << p << "i_kernels_"
           << optag << ", " << b.workspaces.size() << ", "
           << (b.workspaces.empty() ? std::string("NULL") : p + "i_workspaces_" + optag)
           << ", " << b.constants.size() << ", "
           << (b.constants.empty() ? std::string("NULL") : p + "i_constants_" + optag) << ", "
           << symbolsOf(build).size() - 2 << ", " << chunkSymbolIndex(build) << ", "
           << chunkDim(b) << ", " << p << "i_sizes_" << optag << ", " << p << "i_grids_" << optag
           << ", " << b.tensorMaps.size() << ", "
           << (b.tensorMaps.empty() ? std::string("NULL") : p + "i_tensor_maps_" + optag)
           << ", "
           << (b.tensorMaps.empty() ? std::string("NULL") : p + "i_tensor_map_dims_" + optag)
           << "}";
      }
      os << "}}" << (e + 1 < entries.size() ? "," : "") << "\n";
    }
    os << "};\n";

    os << "\n" << substitute(kSourceEngine, p, P);

    // Entry points.
    os << "\n/* ------------------------------------------------------ entry points */\n";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const AotOp &op = out.ops[o];
      const runtime::KernelBundle &b = op.arches.front().bundle;
      std::vector<std::string> names = cParamNames(op);
      os << "\n" << signature(op) << "\n{\n";
      os << "  CUdeviceptr params[" << std::max<size_t>(1, names.size()) << "];\n";
      os << "  int64_t dims[" << std::max<size_t>(1, b.dims.size()) << "];\n";
      for (size_t i = 0; i < names.size(); ++i)
        os << "  params[" << i << "] = " << names[i] << ";\n";
      if (names.empty())
        os << "  params[0] = 0;\n";
      for (size_t i = 0; i < b.dims.size(); ++i)
        os << "  dims[" << i << "] = " << b.dims[i] << ";\n";
      if (b.dims.empty())
        os << "  dims[0] = 0;\n";
      os << "  return " << p << "i_run(handle, " << o
         << ", stream, params, dims, workspace, workspace_bytes);\n}\n";
      os << "\n" << p << "status " << p << op.role << "_v(" << p
         << "handle *handle, CUstream stream, const CUdeviceptr *buffers,\n"
         << "    int num_buffers, const int64_t *dims, int num_dims, CUdeviceptr workspace,\n"
         << "    size_t workspace_bytes)\n{\n"
         << "  return " << p << "i_run_v(handle, " << o
         << ", stream, buffers, num_buffers, dims, num_dims, workspace, workspace_bytes);\n}\n";
      os << "\nsize_t " << p << op.role << "_workspace_bytes(" << dimList(op, true) << ")\n{\n";
      os << "  int64_t dims[" << std::max<size_t>(1, b.dims.size()) << "];\n";
      for (size_t i = 0; i < b.dims.size(); ++i)
        os << "  dims[" << i << "] = " << b.dims[i] << ";\n";
      if (b.dims.empty())
        os << "  dims[0] = 0;\n";
      os << "  return " << p << "i_workspace_bytes(" << o << ", dims);\n}\n";
    }
    const AotOp &first = out.ops.front();
    os << "\nsize_t " << p << "workspace_bytes(" << dimList(first, true) << ")\n{\n"
       << "  size_t most = 0, bytes;\n";
    for (const AotOp &op : out.ops) {
      // Ops whose dims differ from the first op's cannot be sized from them.
      if (op.arches.front().bundle.dims != first.arches.front().bundle.dims)
        continue;
      os << "  bytes = " << p << op.role << "_workspace_bytes(" << dimList(first, false)
         << ");\n"
         << "  if (bytes == (size_t)-1) return bytes;\n"
         << "  if (bytes > most) most = bytes;\n";
    }
    os << "  return most;\n}\n";
    return os.str();
  }

  template <typename T>
  static std::optional<size_t> indexOf(const std::vector<T> &list, const std::string &name) {
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].name == name)
        return i;
    return std::nullopt;
  }

  /// Symbol index of the chunk size, or -1.
  static long chunkSymbolIndex(const AotArchBuild &build) {
    if (!build.usesChunks())
      return -1;
    std::vector<std::string> symbols = symbolsOf(build);
    auto it = std::find(symbols.begin(), symbols.end(), build.chunkSymbol);
    return it == symbols.end() ? -1 : static_cast<long>(it - symbols.begin());
  }

  /// Index of op `o`'s first module within its arch entry.
  size_t imageOffset(size_t o, const AotArchBuild &build) const {
    size_t archIndex = 0;
    const AotOp &op = out.ops[o];
    while (&op.arches[archIndex] != &build)
      ++archIndex;
    size_t offset = 0;
    for (size_t i = 0; i < o; ++i)
      offset += moduleFiles(out.ops[i].arches[archIndex].bundle).size();
    return offset;
  }

  const AotOutput &out;
  std::string p, P;
  std::vector<ArchEntry> entries;
  Limits limits;
};

} // namespace

std::vector<std::string> cParamNames(const AotOp &op) {
  std::vector<std::string> names;
  const runtime::KernelBundle &b = op.arches.front().bundle;
  std::set<std::string> taken(b.dims.begin(), b.dims.end());
  for (const runtime::BundleParam &param : b.params) {
    std::string name = param.name;
    while (reservedNames().count(name) || taken.count(name))
      name += "_";
    taken.insert(name);
    names.push_back(name);
  }
  return names;
}

runtime::Expected<CApiFiles> emitCApi(const AotOutput &output) {
  if (runtime::Error e = output.verify())
    return e;
  return Emitter(output).run();
}

} // namespace lossjit::aot
