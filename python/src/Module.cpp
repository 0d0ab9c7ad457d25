//===- Module.cpp - the _lossjit extension: runtime half ------------------===//
//
// Built in every configuration. CUDA tensors run kernel bundles through the
// runtime (driver dlopen'ed, no libcudart); a bundle comes either from the
// compiler half (JIT, compiler builds) or from LOSSJIT_KERNEL_PATH, looked up
// here by the options in its manifest — the only way a runtime-only build
// (no MLIR, so no IR text to hash into a cache key) can find its kernels.
//
//===----------------------------------------------------------------------===//

#include "python/src/Bindings.h"

#include "runtime/CudaDriver.h"
#include "runtime/CudaLauncher.h"
#include "runtime/Environment.h"
#include "runtime/FileUtil.h"
#include "runtime/Json.h"

#include <pybind11/stl.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace py = pybind11;
using namespace lossjit;
using namespace lossjit::python;
namespace fs = std::filesystem;

namespace {

const runtime::CudaDriver &driverOrThrow() {
  auto driver = runtime::CudaDriver::get();
  if (!driver)
    throwError("CUDA is not available to lossjit: " + driver.errorMessage());
  return **driver;
}

runtime::CudaLauncher &launcher() {
  // Leaked on purpose: unloading modules at interpreter exit would race the
  // teardown of PyTorch's CUDA context.
  static runtime::CudaLauncher *instance =
      new runtime::CudaLauncher(driverOrThrow());
  return *instance;
}

/// Makes device `ordinal`'s primary context (the one PyTorch uses) current
/// on this thread unless it already is.
void ensureContext(const runtime::CudaDriver &driver, int ordinal) {
  auto current = driver.currentContext();
  if (current && current->second == ordinal)
    return;
  auto ctx = driver.makePrimaryContextCurrent(ordinal);
  if (!ctx)
    throwError(ctx.errorMessage());
}

py::dict optionsDict(const runtime::JsonValue &options) {
  py::dict out;
  if (!options.isObject())
    return out;
  for (const auto &member : options.getObject()) {
    const runtime::JsonValue &v = member.value;
    if (v.isString())
      out[py::str(member.key)] = v.getString();
    else if (v.isBool())
      out[py::str(member.key)] = v.getBool() ? "true" : "false";
    else if (v.isInt())
      out[py::str(member.key)] = std::to_string(v.getInt());
    else
      out[py::str(member.key)] = runtime::writeJson(v, 0);
  }
  return out;
}

std::string optionText(const runtime::JsonValue *v) {
  if (!v)
    return {};
  if (v->isString())
    return v->getString();
  if (v->isBool())
    return v->getBool() ? "true" : "false";
  if (v->isInt())
    return std::to_string(v->getInt());
  return runtime::writeJson(*v, 0);
}

/// One manifest found on the search path (images not loaded).
struct IndexedBundle {
  std::string root, key, op, arch;
  runtime::JsonValue options;
  bool cubin = false;
};

/// Manifests under each LOSSJIT_KERNEL_PATH root, read once per distinct
/// search path (the variable may change between tests).
std::vector<IndexedBundle> indexSearchPath(const std::vector<std::string> &roots,
                                           std::vector<std::string> &skipped) {
  std::vector<IndexedBundle> out;
  for (const std::string &root : roots) {
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (!it->is_directory(ec))
        continue;
      fs::path manifest = it->path() / runtime::kManifestFileName;
      // A manifest is small: the bundle reader's bound, not readFile's 1 GiB
      // default (a sparse or /dev/zero-linked "manifest" is refused at once).
      auto text = runtime::readFile(manifest.string(), runtime::kMaxManifestBytes);
      if (!text) {
        // A directory without a manifest is not a bundle; one whose manifest
        // cannot be read (a FIFO, over the bound) is reported when nothing
        // matches.
        if (fs::symlink_status(manifest, ec).type() != fs::file_type::not_found)
          skipped.push_back(text.errorMessage());
        ec.clear();
        continue;
      }
      auto json = runtime::parseJson(*text);
      if (!json) {
        skipped.push_back(manifest.string() + ": " + json.errorMessage());
        continue;
      }
      auto bundle = runtime::KernelBundle::fromManifest(*json);
      if (!bundle) {
        skipped.push_back(manifest.string() + ": " + bundle.errorMessage());
        continue;
      }
      if (bundle->backend != "cuda" || bundle->key != it->path().filename().string())
        continue;
      IndexedBundle entry{root, bundle->key, bundle->op, bundle->arch,
                          bundle->options, false};
      for (const auto &k : bundle->kernels)
        if (k.file.size() > 6 && k.file.ends_with(".cubin"))
          entry.cubin = true;
      out.push_back(std::move(entry));
    }
  }
  return out;
}

const std::vector<IndexedBundle> &cachedIndex(const std::vector<std::string> &roots,
                                              std::vector<std::string> &skipped) {
  static std::mutex mutex;
  static std::map<std::vector<std::string>,
                  std::pair<std::vector<IndexedBundle>, std::vector<std::string>>>
      cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(roots);
  if (it == cache.end()) {
    std::vector<std::string> why;
    auto index = indexSearchPath(roots, why);
    it = cache.emplace(roots, std::make_pair(std::move(index), std::move(why))).first;
  }
  skipped = it->second.second;
  return it->second.first;
}

/// The best prebuilt bundle for `op` with every option in `wanted` on a
/// device of compute capability (major, minor): the newest compatible arch,
/// an arch-specific one (sm_90a: wgmma) before the portable one of the same
/// version, a cubin before PTX. A non-empty `arch` (LOSSJIT_CUDA_ARCH) takes
/// bundles of exactly that arch.
GpuOp findBundle(const std::string &op, const std::map<std::string, std::string> &wanted,
                 int major, int minor, const std::string &arch) {
  auto options = runtime::KernelCacheOptions::fromEnvironment();
  std::vector<std::string> skipped;
  const auto &index = cachedIndex(options.searchPath, skipped);
  const IndexedBundle *best = nullptr;
  int bestRank = -1;
  std::vector<std::string> near;
  for (const IndexedBundle &b : index) {
    if (b.op != op)
      continue;
    bool match = true;
    for (const auto &[k, v] : wanted)
      if (optionText(b.options.find(k)) != v) {
        match = false;
        break;
      }
    if (!match) {
      if (near.size() < 8)
        near.push_back(b.arch + " " + runtime::writeJson(b.options, 0));
      continue;
    }
    if (!arch.empty() && b.arch != arch) {
      near.push_back(b.arch + " (not LOSSJIT_CUDA_ARCH=" + arch + ")");
      continue;
    }
    if (runtime::Error err =
            runtime::checkArchCompatible(b.arch, b.cubin, major, minor)) {
      near.push_back(b.arch + " (" + err.message() + ")");
      continue;
    }
    bool specific = false;
    auto parsed = runtime::parseCudaArch(b.arch, &specific);
    int rank = parsed ? parsed->first * 100 + parsed->second * 10 + (specific ? 2 : 0) +
                            (b.cubin ? 1 : 0)
                      : 0;
    if (rank > bestRank) {
      bestRank = rank;
      best = &b;
    }
  }
  std::string path;
  for (const auto &r : options.searchPath)
    path += (path.empty() ? "" : ":") + r;
  if (!best) {
    std::ostringstream os;
    os << "no prebuilt kernel for " << op << " {";
    bool first = true;
    for (const auto &[k, v] : wanted) {
      os << (first ? "" : ", ") << k << "=" << v;
      first = false;
    }
    os << "} on sm_" << major << minor << " in LOSSJIT_KERNEL_PATH='" << path
       << "' (" << index.size() << " CUDA bundles there)";
    if (!near.empty()) {
      os << "; bundles of this op:";
      for (const auto &n : near)
        os << "\n  " << n;
    }
    for (const auto &s : skipped)
      os << "\n  unreadable: " << s;
    os << "\nBuild one with lossjit-aot (e.g. `lossjit-aot --preset "
          "linear-cross-entropy --dtype f16 --arch sm_90 -o DIR`) on a machine "
          "with the compiler, or use a build with LOSSJIT_ENABLE_COMPILER=ON.";
    throwError(os.str());
  }
  auto &cache = runtime::KernelCache::global();
  auto bundle = cache.getOrCompile(best->key, cache.noCompilerFunction(best->key));
  if (!bundle)
    throwError(bundle.errorMessage());
  return GpuOp{*bundle};
}

void launch(const GpuOp &op,
            const std::vector<std::tuple<std::string, uint64_t, int64_t, std::string>> &buffers,
            const std::vector<int64_t> &dims, uint64_t stream, int device,
            py::function allocate, py::function release) {
  const runtime::CudaDriver &driver = driverOrThrow();
  ensureContext(driver, device);
  const runtime::KernelBundle &bundle = *op.bundle;
  std::vector<runtime::DeviceBuffer> params(bundle.params.size());
  std::vector<bool> seen(bundle.params.size(), false);
  for (const auto &[name, address, elements, dtype] : buffers) {
    size_t i = 0;
    while (i < bundle.params.size() && bundle.params[i].name != name)
      ++i;
    if (i == bundle.params.size())
      throwError("kernel bundle " + bundle.key.substr(0, 12) +
                 " has no param named '" + name + "'");
    // The kernels read what they were compiled for: a buffer of another
    // dtype would be read past its end (or as garbage).
    if (dtype != bundle.params[i].dtype)
      throw py::type_error("lossjit: buffer '" + name + "' holds " + dtype +
                           " but the kernels were compiled for " + bundle.params[i].dtype);
    params[i] = {address, elements};
    seen[i] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      throwError("missing buffer '" + bundle.params[i].name + "'");
  std::string callbackError;
  runtime::WorkspaceAllocator allocator;
  allocator.allocate = [&](size_t bytes, runtime::cu::Stream)
      -> runtime::Expected<runtime::cu::DevicePtr> {
    try {
      return allocate(bytes).cast<runtime::cu::DevicePtr>();
    } catch (const std::exception &e) {
      callbackError = e.what();
      return runtime::makeError("workspace allocation of " + std::to_string(bytes) +
                                " bytes failed: " + e.what());
    }
  };
  allocator.release = [&](runtime::cu::DevicePtr address, size_t,
                          runtime::cu::Stream) {
    try {
      release(address);
    } catch (const std::exception &e) {
      callbackError = e.what();
    }
  };
  runtime::Error err = launcher().launch(
      bundle, params, dims, reinterpret_cast<runtime::cu::Stream>(stream), allocator);
  if (err)
    throwError(err.message());
  if (!callbackError.empty())
    throwError("workspace callback failed: " + callbackError);
}

} // namespace

PYBIND11_MODULE(_lossjit, m) {
  m.doc() = "lossjit native extension: kernel compiler (when built) and runtime";
  m.attr("__version__") = runtime::kLossjitVersion;
#ifdef LOSSJIT_PYTHON_HAS_COMPILER
  m.attr("has_compiler") = true;
#else
  m.attr("has_compiler") = false;
  m.attr("llvm_version") = "";
#endif

  m.def(
      "cuda_status",
      []() -> std::pair<int, std::string> {
        auto driver = runtime::CudaDriver::get();
        if (!driver)
          return {0, driver.errorMessage()};
        auto count = (*driver)->deviceCount();
        if (!count)
          return {0, count.errorMessage()};
        return {*count, "CUDA driver " + (*driver)->versionString()};
      },
      "(device count, message): whether the runtime can reach a CUDA driver.");

  m.def(
      "cuda_compute_capability",
      [](int ordinal) {
        const runtime::CudaDriver &driver = driverOrThrow();
        auto cc = driver.computeCapability(ordinal);
        if (!cc)
          throwError(cc.errorMessage());
        return *cc;
      },
      py::arg("ordinal"), "(major, minor) of CUDA device `ordinal`.");

  m.def(
      "select_jit_arch",
      [](int major, int minor, const std::string &requested) {
        auto arch = runtime::selectJitArch(major, minor, requested);
        if (!arch)
          throwValueError(arch.errorMessage());
        return *arch;
      },
      py::arg("major"), py::arg("minor"), py::arg("requested") = "",
      "The arch the JIT compiles for on compute capability (major, minor): "
      "sm_90a on 9.0 (wgmma), sm_XY elsewhere; `requested` (LOSSJIT_CUDA_ARCH) "
      "instead, once it runs there (ValueError naming it otherwise).");

  m.def(
      "kernel_search_path",
      []() { return runtime::KernelCacheOptions::fromEnvironment().searchPath; },
      "The bundle roots of LOSSJIT_KERNEL_PATH.");

  m.def(
      "kernel_cache_stats",
      []() {
        auto &cache = runtime::KernelCache::global();
        runtime::KernelCacheStats s = cache.stats();
        py::dict out;
        out["memory_hits"] = s.memoryHits;
        out["kernel_path_hits"] = s.searchPathHits;
        out["disk_hits"] = s.diskHits;
        out["compiles"] = s.compiles;
        out["disk_writes"] = s.diskWrites;
        out["evictions"] = s.evictions;
        out["invalid_entries"] = s.invalidEntries;
        out["directory"] = cache.isDiskEnabled() ? cache.getOptions().directory : "";
        return out;
      },
      "This process's kernel-cache counters (CPU objects and GPU bundles alike) "
      "and the directory entries persist in ('' when memory only).");

  py::class_<GpuOp>(m, "GpuOp", "A CUDA kernel bundle ready to launch.")
      .def_property_readonly("key", [](const GpuOp &op) { return op.bundle->key; })
      .def_property_readonly("arch", [](const GpuOp &op) { return op.bundle->arch; })
      .def_property_readonly("op", [](const GpuOp &op) { return op.bundle->op; })
      .def_property_readonly("options",
                             [](const GpuOp &op) { return optionsDict(op.bundle->options); })
      .def_property_readonly("dims", [](const GpuOp &op) { return op.bundle->dims; })
      .def_property_readonly(
          "params",
          [](const GpuOp &op) {
            py::list out;
            for (const auto &p : op.bundle->params)
              out.append(py::make_tuple(p.name, p.dtype, p.shape));
            return out;
          })
      .def("launch", &launch, py::arg("buffers"), py::arg("dims"), py::arg("stream"),
           py::arg("device"), py::arg("allocate"), py::arg("release"),
           "Enqueues every kernel on `stream` (a CUstream as int). `buffers` is "
           "[(name, device address, elements, dtype)]; workspaces come from "
           "allocate(bytes) -> address and go back through release(address) "
           "right after the last enqueue (so the allocator must be "
           "stream-ordered, as PyTorch's caching allocator is).");

  m.def("find_gpu_bundle", &findBundle, py::arg("op"), py::arg("options"),
        py::arg("major"), py::arg("minor"), py::arg("arch") = "",
        "The newest prebuilt bundle in LOSSJIT_KERNEL_PATH for `op` whose "
        "manifest options include every entry of `options` and whose arch "
        "runs on compute capability (major, minor).");

#ifdef LOSSJIT_PYTHON_HAS_COMPILER
  bindCompiler(m);
#endif
}
