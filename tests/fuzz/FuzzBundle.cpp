//===- FuzzBundle.cpp - libFuzzer target: bundle reader and launch checks -===//
//
// Any bytes as the manifest.json of a bundle directory, through everything a
// cache entry or LOSSJIT_KERNEL_PATH bundle goes through before a launch:
// readBundleDirectory() (manifest hash, bounded JSON, fromManifest, images
// with their sizes and hashes, verify), then LaunchPlan::build, resolve() for
// a few dim sets (zero, typical, huge), checkBuffers() and packArguments()
// of every kernel and chunk. Nothing may crash, and what is accepted must be
// self-consistent: checkBuffers() accepts the sizes resolve() gave, every
// packed memref size is the resolved element count, argument counts match.
//
// The harness writes the images the manifest names (plain names only) with
// the content "image:<name>", and a manifest.sha256 that matches, so that
// seeds with the right hashes get past integrity checks and the fuzzer
// explores the plan.
//
//===----------------------------------------------------------------------===//

#include "runtime/FileUtil.h"
#include "runtime/Json.h"
#include "runtime/KernelBundle.h"
#include "runtime/LaunchPlan.h"
#include "runtime/Sha256.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <set>
#include <unistd.h>

using namespace lossjit::runtime;

namespace {
bool plainName(const std::string &name) {
  if (name.empty() || name.size() > 64 || name == "." || name == ".." ||
      name == kManifestFileName || name == kManifestHashFileName)
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

/// The scratch bundle directory, in RAM (/dev/shm) where there is one: every
/// input writes and removes a few files, and on a disk shared with builds one
/// unlinkat() stalled past libFuzzer's 1 s timeout (in removeTree, during a
/// concurrent compiler build; the input itself runs in milliseconds).
/// Removed at a normal exit.
const std::string &directory() {
  static const std::string dir = [] {
    for (const char *base : {"/dev/shm", "/tmp"}) {
      std::string pattern = std::string(base) + "/lossjit-fuzz-bundle-XXXXXX";
      if (const char *made = ::mkdtemp(pattern.data()))
        return std::string(made);
    }
    std::abort();
  }();
  // Registered after `dir` is built, so it runs before `dir` is destroyed.
  static const bool cleanup = (std::atexit([] { (void)removeTree(dir); }), true);
  (void)cleanup;
  return dir;
}

void checkPlan(const KernelBundle &bundle) {
  Expected<LaunchPlan> plan = LaunchPlan::build(bundle);
  if (!plan)
    return;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> dimSets[] = {
      {0}, {1}, {10, 1000, 64}, {3, 7, 5, 2}, {kMax}, {int64_t(1) << 31, int64_t(1) << 31, 3}};
  for (const std::vector<int64_t> &base : dimSets) {
    std::vector<int64_t> dims(plan->numDims());
    for (size_t i = 0; i < dims.size(); ++i)
      dims[i] = base[i % base.size()];
    Expected<ResolvedLaunch> launch = plan->resolve(dims);
    if (!launch)
      continue;
    if (Error e = plan->checkBuffers(*launch, launch->paramElements, launch->workspaceBytes))
      std::abort(); // the sizes resolve() gave must fit
    std::vector<uint64_t> params(plan->numParams(), 0x1000),
        workspaces(plan->numWorkspaces(), 0x2000);
    for (size_t k = 0; k < plan->numKernels(); ++k) {
      PackedArgs args;
      int64_t end = plan->isPerChunk(k) ? std::min(launch->chunkRows, launch->chunkSize) : 0;
      if (Error e = plan->packArguments(k, *launch, params, workspaces, args, 0, end))
        std::abort();
      if (args.size() != plan->parameterCount(k))
        std::abort();
      size_t slot = 0;
      for (const ArgBinding &arg : plan->kernelArgs(k)) {
        bool buffer = arg.kind == ArgBinding::Param || arg.kind == ArgBinding::Workspace;
        if (buffer) {
          int64_t elements = arg.kind == ArgBinding::Param ? launch->paramElements[arg.index]
                                                           : launch->workspaceElements[arg.index];
          if (args.values()[slot + 3] != static_cast<uint64_t>(elements))
            std::abort();
        }
        slot += buffer ? 5 : 1;
      }
      (void)plan->describeKernel(k, *launch);
    }
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string manifest(reinterpret_cast<const char *>(data), size);
  const std::string &dir = directory();
  // A fresh directory per input: the image files of the previous one go.
  (void)removeTree(dir);
  if (createDirectories(dir))
    std::abort();
  if (Expected<JsonValue> json = parseJson(manifest)) {
    if (const JsonValue *kernels = json->find("kernels"); kernels && kernels->isArray()) {
      std::set<std::string> written;
      for (const JsonValue &k : kernels->getArray()) {
        const JsonValue *file = k.find("file");
        if (file && file->isString() && plainName(file->getString()) && written.size() < 8 &&
            written.insert(file->getString()).second)
          (void)writeFile(dir + "/" + file->getString(), "image:" + file->getString());
      }
    }
  }
  (void)writeFile(dir + "/" + kManifestFileName, manifest);
  (void)writeFile(dir + "/" + kManifestHashFileName,
                  sha256Hex(manifest) + "  " + kManifestFileName + "\n");
  BundleReadOptions options;
  options.requireManifestHash = true;
  Expected<KernelBundle> bundle = readBundleDirectory(dir, options);
  if (bundle) {
    // What the reader accepts, the writer must write and the reader read.
    if (Error e = bundle->verify())
      std::abort();
    checkPlan(*bundle);
  }
  // The manifest alone (the Python bundle index reads it this way), with
  // images filled in so that verify() judges the plan.
  if (Expected<JsonValue> json = parseJson(manifest)) {
    Expected<KernelBundle> fromManifest = KernelBundle::fromManifest(*json);
    if (fromManifest) {
      for (BundleKernel &k : fromManifest->kernels)
        k.image = "image:" + k.file;
      if (!fromManifest->verify()) {
        JsonValue written = fromManifest->toManifest();
        Expected<KernelBundle> again = KernelBundle::fromManifest(written);
        if (!again)
          std::abort();
        checkPlan(*fromManifest);
      }
    }
  }
  return 0;
}
