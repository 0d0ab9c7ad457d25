//===- Nvrtc.cpp - NVRTC (CUDA C++ -> PTX), loaded at run time ------------===//

#include "runtime/Nvrtc.h"

#include "runtime/CudaDriver.h"
#include "runtime/Dump.h"
#include "runtime/Environment.h"
#include "runtime/Log.h"

#include <dlfcn.h>
#include <filesystem>
#include <link.h>
#include <type_traits>

namespace lossjit::runtime {

namespace {
using NvrtcResult = int;
using NvrtcProgram = struct _nvrtcProgram *;
} // namespace

/// NVRTC entry points (signatures from nvrtc.h).
struct Nvrtc::Api {
  const char *(*nvrtcGetErrorString)(NvrtcResult);
  NvrtcResult (*nvrtcVersion)(int *, int *);
  NvrtcResult (*nvrtcCreateProgram)(NvrtcProgram *, const char *, const char *,
                                    int, const char *const *,
                                    const char *const *);
  NvrtcResult (*nvrtcDestroyProgram)(NvrtcProgram *);
  NvrtcResult (*nvrtcCompileProgram)(NvrtcProgram, int, const char *const *);
  NvrtcResult (*nvrtcGetPTXSize)(NvrtcProgram, size_t *);
  NvrtcResult (*nvrtcGetPTX)(NvrtcProgram, char *);
  NvrtcResult (*nvrtcGetProgramLogSize)(NvrtcProgram, size_t *);
  NvrtcResult (*nvrtcGetProgramLog)(NvrtcProgram, char *);
};

std::vector<std::string> Nvrtc::candidateLibraries() {
  std::vector<std::string> candidates;
  if (auto explicitPath = getEnv("LOSSJIT_NVRTC_PATH"); explicitPath && !explicitPath->empty())
    candidates.push_back(*explicitPath);
  const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                         "libnvrtc.so.11.2"};
  for (const char *name : names)
    candidates.push_back(name);
  std::vector<std::string> dirs;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (auto root = getEnv(var); root && !root->empty())
      dirs.push_back(*root + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const std::string &dir : dirs)
    for (const char *name : names)
      candidates.push_back(dir + "/" + name);
  return candidates;
}

namespace {
std::string findIncludeDirectory(void *handle) {
  std::vector<std::filesystem::path> candidates;
  // Next to the library first, so headers match the compiler version.
  struct link_map *map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      *map->l_name) {
    std::error_code ec;
    std::filesystem::path lib = std::filesystem::canonical(map->l_name, ec);
    if (!ec) {
      candidates.push_back(lib.parent_path().parent_path() / "include");
      candidates.push_back(lib.parent_path().parent_path().parent_path() / "include");
    }
  }
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (auto root = getEnv(var); root && !root->empty())
      candidates.push_back(std::filesystem::path(*root) / "include");
  candidates.push_back("/usr/local/cuda/include");
  for (const auto &dir : candidates) {
    std::error_code ec;
    if (std::filesystem::exists(dir / "cuda_fp16.h", ec))
      return dir.string();
  }
  return {};
}
} // namespace

Expected<std::unique_ptr<Nvrtc>>
Nvrtc::load(const std::vector<std::string> &candidates) {
  std::string attempts;
  for (const std::string &candidate : candidates) {
    dlerror();
    void *handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *why = dlerror();
      attempts += "\n  " + candidate + ": " + (why ? why : "dlopen failed");
      continue;
    }
    std::unique_ptr<Nvrtc> nvrtc(new Nvrtc());
    nvrtc->handle = handle;
    nvrtc->api = std::make_unique<Api>();
    nvrtc->path = candidate;
    std::string missing;
    auto resolve = [&](auto &fn, const char *symbol) {
      void *address = ::dlsym(handle, symbol);
      if (!address)
        missing += (missing.empty() ? "" : ", ") + std::string(symbol);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(address);
    };
    Api &a = *nvrtc->api;
    resolve(a.nvrtcGetErrorString, "nvrtcGetErrorString");
    resolve(a.nvrtcVersion, "nvrtcVersion");
    resolve(a.nvrtcCreateProgram, "nvrtcCreateProgram");
    resolve(a.nvrtcDestroyProgram, "nvrtcDestroyProgram");
    resolve(a.nvrtcCompileProgram, "nvrtcCompileProgram");
    resolve(a.nvrtcGetPTXSize, "nvrtcGetPTXSize");
    resolve(a.nvrtcGetPTX, "nvrtcGetPTX");
    resolve(a.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
    resolve(a.nvrtcGetProgramLog, "nvrtcGetProgramLog");
    if (!missing.empty()) {
      attempts += "\n  " + candidate + ": lacks " + missing;
      nvrtc.reset();
      ::dlclose(handle);
      continue;
    }
    nvrtc->includeDir = findIncludeDirectory(handle);
    logDebug("loaded NVRTC " + nvrtc->version() + " from " + candidate +
             " (include dir: " +
             (nvrtc->includeDir.empty() ? "none" : nvrtc->includeDir) + ")");
    return nvrtc;
  }
  return makeError("NVRTC library not found; tried:" + attempts +
                   "\nset LOSSJIT_NVRTC_PATH or CUDA_HOME to a CUDA toolkit");
}

Expected<const Nvrtc *> Nvrtc::get() {
  static Expected<std::unique_ptr<Nvrtc>> loaded = load(candidateLibraries());
  if (!loaded)
    return makeError(loaded.errorMessage());
  return static_cast<const Nvrtc *>(loaded->get());
}

Nvrtc::~Nvrtc() {
  // Like libcuda, NVRTC stays loaded: its PTX strings may still be in use and
  // unloading it gains nothing.
}

std::string Nvrtc::version() const {
  int major = 0, minor = 0;
  if (api->nvrtcVersion(&major, &minor) != 0)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

Expected<std::string>
Nvrtc::compileToPtx(std::string_view source, std::string_view programName,
                    std::string_view arch,
                    const std::vector<std::string> &extraOptions) const {
  bool archSpecific = false;
  Expected<std::pair<int, int>> cc = parseCudaArch(std::string(arch), &archSpecific);
  if (!cc)
    return std::move(cc.takeError()).withContext("compileToPtx: arch");
  std::string virtualArch = "compute_" + std::to_string(cc->first) +
                            std::to_string(cc->second) +
                            (archSpecific ? std::string(1, arch.back()) : "");

  auto check = [&](NvrtcResult r, const char *call) -> Error {
    if (r == 0)
      return Error::success();
    return makeError(std::string(call) + " failed: " + api->nvrtcGetErrorString(r));
  };

  std::string name(programName);
  std::string text(source);
  NvrtcProgram program = nullptr;
  if (Error e = check(api->nvrtcCreateProgram(&program, text.c_str(), name.c_str(),
                                              0, nullptr, nullptr),
                      "nvrtcCreateProgram"))
    return e;
  // Destroy the program on every path.
  struct Guard {
    const Api &api;
    NvrtcProgram &program;
    ~Guard() { api.nvrtcDestroyProgram(&program); }
  } guard{*api, program};

  std::vector<std::string> options = {"--gpu-architecture=" + virtualArch,
                                      "--std=c++17"};
  if (!includeDir.empty())
    options.push_back("-I" + includeDir);
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char *> optionPointers;
  for (const std::string &o : options)
    optionPointers.push_back(o.c_str());

  NvrtcResult compiled = api->nvrtcCompileProgram(
      program, static_cast<int>(optionPointers.size()), optionPointers.data());
  std::string log;
  size_t logSize = 0;
  if (api->nvrtcGetProgramLogSize(program, &logSize) == 0 && logSize > 1) {
    log.resize(logSize);
    if (api->nvrtcGetProgramLog(program, log.data()) == 0)
      log.resize(logSize - 1); // drop the terminating NUL
    else
      log.clear();
  }
  if (compiled != 0) {
    std::string joined;
    for (const std::string &o : options)
      joined += " " + o;
    return makeError("NVRTC " + version() + " failed to compile '" + name +
                     "' for " + virtualArch + " (" +
                     api->nvrtcGetErrorString(compiled) + "), options:" + joined +
                     "\n" + log);
  }
  if (!log.empty())
    logDebug("NVRTC log for " + name + ":\n" + log);

  size_t ptxSize = 0;
  if (Error e = check(api->nvrtcGetPTXSize(program, &ptxSize), "nvrtcGetPTXSize"))
    return e;
  std::string ptx(ptxSize, '\0');
  if (Error e = check(api->nvrtcGetPTX(program, ptx.data()), "nvrtcGetPTX"))
    return e;
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  if (auto dumped = dumpArtifact("nvrtc", name + "." + virtualArch + ".ptx", ptx);
      !dumped)
    logWarning(dumped.errorMessage());
  return ptx;
}

} // namespace lossjit::runtime
