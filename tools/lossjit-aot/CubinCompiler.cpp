//===- CubinCompiler.cpp --------------------------------------------------===//

#include "tools/lossjit-aot/CubinCompiler.h"

#include "runtime/FileUtil.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace lossjit::aot {

namespace {

bool isExecutable(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

/// CUDA toolkit roots to look in, in order.
std::vector<std::string> cudaRoots() {
  std::vector<std::string> roots;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"})
    if (const char *v = std::getenv(var); v && *v)
      roots.push_back(v);
  roots.push_back("/usr/local/cuda");
  return roots;
}

std::string lastLines(const std::string &text, size_t maxBytes = 4000) {
  return text.size() <= maxBytes ? text : "..." + text.substr(text.size() - maxBytes);
}

// ---------------------------------------------------------------- nvJitLink

// nvJitLink.h, ABI-identical subset (the unversioned entry points exist in
// both the 12.x and 13.x libraries).
using NvJitLinkHandle = struct nvJitLink *;
constexpr int kNvJitLinkInputPtx = 2; // NVJITLINK_INPUT_PTX

class NvJitLinkCompiler final : public CubinCompiler {
public:
  static runtime::Expected<std::unique_ptr<CubinCompiler>> load() {
    std::vector<std::string> candidates = {"libnvJitLink.so.13", "libnvJitLink.so.12",
                                           "libnvJitLink.so"};
    for (const std::string &root : cudaRoots())
      for (const char *name : {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"})
        candidates.push_back(root + "/lib64/" + name);
    std::string tried;
    for (const std::string &path : candidates) {
      // RTLD_NODELETE: like NVRTC and libcuda in the runtime, nvJitLink stays
      // loaded once opened. It carries its own static libstdc++, whose
      // exception pool (71 KiB, allocated when the library loads) would
      // otherwise leak at every dlclose, unreachable (LeakSanitizer reported
      // it in the sanitizer build's `--emit cubin` step), and its static
      // initializers would run again at every load.
      void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
      if (!handle) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      auto compiler = std::unique_ptr<NvJitLinkCompiler>(new NvJitLinkCompiler);
      compiler->handle = handle;
      compiler->path = path;
      if (runtime::Error e = compiler->resolve())
        return e;
      return std::unique_ptr<CubinCompiler>(std::move(compiler));
    }
    return runtime::makeError("nvJitLink not found (tried " + tried + ")");
  }

  ~NvJitLinkCompiler() override {
    if (handle)
      ::dlclose(handle); // drops the reference only (RTLD_NODELETE)
  }

  std::string describe() const override {
    unsigned major = 0, minor = 0;
    if (version && version(&major, &minor) == 0)
      return "nvJitLink " + std::to_string(major) + "." + std::to_string(minor) +
             " (" + path + ")";
    return "nvJitLink (" + path + ")";
  }

  runtime::Expected<std::string> compile(const std::string &ptx,
                                         const std::string &arch,
                                         const std::string &name) override {
    std::string archOption = "-arch=" + arch;
    const char *options[] = {archOption.c_str(), "-O3"};
    NvJitLinkHandle link = nullptr;
    int r = create(&link, 2, options);
    if (r != 0)
      return runtime::makeError("nvJitLinkCreate(" + archOption + ") failed with " +
                                std::to_string(r));
    struct Destroy {
      NvJitLinkCompiler *self;
      NvJitLinkHandle *link;
      ~Destroy() { self->destroy(link); }
    } guard{this, &link};
    auto fail = [&](const std::string &call, int code) {
      std::string log;
      size_t size = 0;
      if (errorLogSize(link, &size) == 0 && size > 1) {
        log.resize(size);
        if (errorLog(link, log.data()) == 0)
          log.resize(std::strlen(log.c_str()));
        else
          log.clear();
      }
      return runtime::makeError(call + " failed with " + std::to_string(code) +
                                " for " + name + " (" + arch + ")" +
                                (log.empty() ? "" : ":\n" + lastLines(log)));
    };
    // nvJitLink reads PTX as text up to the size given; include the NUL.
    if ((r = addData(link, kNvJitLinkInputPtx, ptx.c_str(), ptx.size() + 1, name.c_str())))
      return fail("nvJitLinkAddData", r);
    if ((r = complete(link)))
      return fail("nvJitLinkComplete", r);
    size_t size = 0;
    if ((r = cubinSize(link, &size)))
      return fail("nvJitLinkGetLinkedCubinSize", r);
    std::string cubin(size, '\0');
    if ((r = cubinData(link, cubin.data())))
      return fail("nvJitLinkGetLinkedCubin", r);
    return cubin;
  }

private:
  NvJitLinkCompiler() = default;

  template <typename F> runtime::Error sym(F &fn, const char *name) {
    fn = reinterpret_cast<F>(::dlsym(handle, name));
    if (!fn)
      return runtime::makeError(path + " lacks " + name);
    return runtime::Error::success();
  }

  runtime::Error resolve() {
    if (auto e = sym(create, "nvJitLinkCreate")) return e;
    if (auto e = sym(destroy, "nvJitLinkDestroy")) return e;
    if (auto e = sym(addData, "nvJitLinkAddData")) return e;
    if (auto e = sym(complete, "nvJitLinkComplete")) return e;
    if (auto e = sym(cubinSize, "nvJitLinkGetLinkedCubinSize")) return e;
    if (auto e = sym(cubinData, "nvJitLinkGetLinkedCubin")) return e;
    if (auto e = sym(errorLogSize, "nvJitLinkGetErrorLogSize")) return e;
    if (auto e = sym(errorLog, "nvJitLinkGetErrorLog")) return e;
    version = reinterpret_cast<int (*)(unsigned *, unsigned *)>(
        ::dlsym(handle, "nvJitLinkVersion")); // optional
    return runtime::Error::success();
  }

  void *handle = nullptr;
  std::string path;
  int (*create)(NvJitLinkHandle *, uint32_t, const char **) = nullptr;
  int (*destroy)(NvJitLinkHandle *) = nullptr;
  int (*addData)(NvJitLinkHandle, int, const void *, size_t, const char *) = nullptr;
  int (*complete)(NvJitLinkHandle) = nullptr;
  int (*cubinSize)(NvJitLinkHandle, size_t *) = nullptr;
  int (*cubinData)(NvJitLinkHandle, void *) = nullptr;
  int (*errorLogSize)(NvJitLinkHandle, size_t *) = nullptr;
  int (*errorLog)(NvJitLinkHandle, char *) = nullptr;
  int (*version)(unsigned *, unsigned *) = nullptr;
};

// -------------------------------------------------------------------- ptxas

class PtxasCompiler final : public CubinCompiler {
public:
  static runtime::Expected<std::unique_ptr<CubinCompiler>> find() {
    std::vector<std::string> candidates;
    for (const std::string &root : cudaRoots())
      candidates.push_back(root + "/bin/ptxas");
    if (const char *path = std::getenv("PATH")) {
      std::string p = path;
      size_t start = 0;
      while (start <= p.size()) {
        size_t end = p.find(':', start);
        if (end == std::string::npos)
          end = p.size();
        if (end > start)
          candidates.insert(candidates.begin(), p.substr(start, end - start) + "/ptxas");
        start = end + 1;
      }
    }
    std::string tried;
    for (const std::string &c : candidates) {
      if (isExecutable(c))
        return std::unique_ptr<CubinCompiler>(new PtxasCompiler(c));
      tried += (tried.empty() ? "" : ", ") + c;
    }
    return runtime::makeError("ptxas not found (tried " + tried + ")");
  }

  std::string describe() const override { return "ptxas (" + path + ")"; }

  runtime::Expected<std::string> compile(const std::string &ptx,
                                         const std::string &arch,
                                         const std::string &name) override {
    char dirTemplate[] = "/tmp/lossjit-aot-ptxas-XXXXXX";
    if (!::mkdtemp(dirTemplate))
      return runtime::makeError("mkdtemp: " + runtime::errnoMessage(errno));
    std::string dir = dirTemplate;
    struct Cleanup {
      std::string dir;
      ~Cleanup() { (void)runtime::removeTree(dir); }
    } cleanup{dir};
    std::string in = dir + "/in.ptx", out = dir + "/out.cubin", log = dir + "/log";
    if (runtime::Error e = runtime::writeFile(in, ptx))
      return e;
    pid_t pid = ::fork();
    if (pid < 0)
      return runtime::makeError("fork: " + runtime::errnoMessage(errno));
    if (pid == 0) {
      FILE *f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      (void)std::freopen(log.c_str(), "a", stdout);
      std::string archOption = "-arch=" + arch;
      ::execl(path.c_str(), path.c_str(), archOption.c_str(), "-O3", in.c_str(), "-o",
              out.c_str(), static_cast<char *>(nullptr));
      std::_Exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      auto text = runtime::readFile(log);
      return runtime::makeError("ptxas -arch=" + arch + " failed for " + name +
                                (text && !text->empty() ? ":\n" + lastLines(*text) : ""));
    }
    return runtime::readFile(out);
  }

private:
  explicit PtxasCompiler(std::string path) : path(std::move(path)) {}
  std::string path;
};

} // namespace

runtime::Expected<std::unique_ptr<CubinCompiler>>
CubinCompiler::create(const std::string &which) {
  if (which == "nvjitlink")
    return NvJitLinkCompiler::load();
  if (which == "ptxas")
    return PtxasCompiler::find();
  if (which != "auto")
    return runtime::makeError("--cubin-tool must be auto, nvjitlink or ptxas, got '" +
                              which + "'");
  auto nv = NvJitLinkCompiler::load();
  if (nv)
    return nv;
  auto ptxas = PtxasCompiler::find();
  if (ptxas)
    return ptxas;
  return runtime::makeError("--emit cubin needs nvJitLink or ptxas from a CUDA "
                            "toolkit (set CUDA_HOME): " +
                            nv.errorMessage() + "; " + ptxas.errorMessage());
}

} // namespace lossjit::aot
