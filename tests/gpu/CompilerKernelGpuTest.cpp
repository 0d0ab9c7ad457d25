//===- CompilerKernelGpuTest.cpp - The compiler's kernels on a device -----===//
//
// The MLIR-generated forward and backward kernels, as prebuilt bundles from
// LOSSJIT_KERNEL_PATH, launched through KernelCache + CudaLauncher exactly as
// a runtime-only build runs them, and checked against:
//   - the fp64 reference of tools/support (loss and lse within 1e-4 relative;
//     gradients within a relative L2 error of 1e-4 for f32, 1e-2 for f16/bf16),
//   - the NVRTC-compiled naive CUDA kernel of runtime/ReferenceKernels,
//   - themselves: bitwise over 5 launches and on a non-default stream.
// Inputs use awkward shapes: N = 1, V not a multiple of any tile, odd D,
// ignored rows; the chunked backward runs with a workspace budget small
// enough to split the rows into several chunks.
//
// Bundles are found by their manifest options ("pass", "dtype", "bias",
// "reduction", "label_type", "ignore_index"; backward also "strategy",
// "grad_x", "grad_w"; no logit transforms) and arch, so no cache key (which
// needs the compiler) is computed here. Without a device
// every test skips; with a device but without matching bundles a test FAILS
// and says how to make them (scripts/gpu-check.sh --prepare): on the GPU
// machine the check must really run.
//
//===----------------------------------------------------------------------===//

#include "GpuTestUtil.h"

#include "runtime/CudaLauncher.h"
#include "runtime/Environment.h"
#include "runtime/FileUtil.h"
#include "runtime/KernelCache.h"
#include "runtime/LaunchPlan.h"
#include "testing/reference/ReferenceKernels.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/Reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>

using namespace lossjit::runtime;
using namespace lossjit::runtime::gputest;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kIgnore = -100;
/// Compiler kernel vs fp64, relative (with a floor of 1: lse is O(log V)).
constexpr double kFp64Tolerance = 1e-4;
/// Compiler kernel vs the NVRTC kernel: both fp32, only the summation order
/// differs (about 1e-6 at these sizes).
constexpr double kNvrtcTolerance = 5e-5;
/// Relative L2 error bound of the gradients.
double gradientTolerance(const std::string &dtype) { return dtype == "f32" ? 1e-4 : 1e-2; }

const char *const kDtypes[] = {"f16", "bf16", "f32"};
const char *const kReductions[] = {"mean", "sum", "none"};

struct Shape {
  int64_t n, v, d;
};
/// Forward: one row; prime V and odd D; N > 128 rows (two combine blocks)
/// that is no multiple of the 4-row tile.
constexpr Shape kForwardShapes[] = {{1, 777, 33}, {37, 1031, 45}, {130, 4099, 63}};
/// Backward: V and D awkward and small; N is chosen per bundle so that its
/// workspace budget splits the rows into >= 3 chunks, the last one partial.
constexpr int64_t kBackwardV = 259, kBackwardD = 45;
constexpr int64_t kMinChunks = 3;

/// Tensor-core forward (matmul=mma_sync, f16/bf16): N = 1; V prime, below
/// one 64- or 32-column tile (and below one split's columns), not a multiple
/// of 64; D odd (plain loads), a multiple of 8 (cp.async) below and above
/// one k step; two row blocks of 64 (N = 67, 70, 130); D = 256 and 520 run
/// a TMA tile's 3-stage ring round more than once (k tiles of 64, the last
/// of 520 partial), so its barrier parities flip within a product.
constexpr Shape kTensorCoreShapes[] = {{1, 777, 33},   {37, 1031, 64}, {67, 100, 40},
                                       {70, 50, 45},   {5, 20, 16},    {130, 4099, 63},
                                       {70, 300, 256}, {9, 777, 520}};
/// The tiles gpu-check.sh --prepare builds (BMxBNxBKxstages): each must be
/// there, so a missing one fails the test instead of shrinking it.
const char *const kTensorCoreTiles[] = {"64x64x32x3", "32x32x16x2"};
/// The wgmma tiles (sm_90a bundles, run on compute capability 9.0 only);
/// 128x64x64x3 is built with tma=1: the shapes with D a multiple of 8 (rows
/// of 16-byte multiples) take its TMA path, the others its cp.async one;
/// 128x64x64x2 with tma=2 (a producer warp issues the copies, 288 threads);
/// 128x128x64x2 with tma=2 and cluster=2 (lce_partial in thread-block
/// clusters of two row blocks that multicast each W tile).
const char *const kWgmmaTiles[] = {"128x64x32x4", "64x16x16x2", "128x64x64x3", "128x64x64x2",
                                   "128x128x64x2"};
/// Tensor-core vs SIMT lse: both sum f32 products of the same f16/bf16
/// values, in another order only, so they agree to a few f32 ulps of |lse|
/// at D <= 64, growing as sqrt(D) (8.5 ulps at D = 520 on an H200).
constexpr double kTensorCoreVsSimtUlps = 8;

// --------------------------------------------------------------- bundles

std::string optionText(const JsonValue *v) {
  if (!v)
    return {};
  if (v->isString())
    return v->getString();
  if (v->isBool())
    return v->getBool() ? "true" : "false";
  if (v->isInt())
    return std::to_string(v->getInt());
  return writeJson(*v, 0);
}

/// One manifest on the search path (images not read).
struct FoundBundle {
  std::string root, key, arch;
  JsonValue options, tile;
  bool cubin = false;
  std::string option(const char *name) const { return optionText(options.find(name)); }
  /// The tile's matmul strategy; bundles made before there was a choice
  /// carry none and are SIMT.
  std::string matmul() const {
    std::string m = optionText(tile.find("matmul"));
    return m.empty() ? "simt" : m;
  }
  /// "BMxBNxBKxstages", e.g. "64x64x32x3" (tensor-core tiles).
  std::string tileShape() const {
    return optionText(tile.find("block_rows")) + "x" + optionText(tile.find("block_cols")) +
           "x" + optionText(tile.find("block_k")) + "x" + optionText(tile.find("stages"));
  }
  std::string describe() const {
    std::string what = arch + " " + key.substr(0, 12) + " in " + root;
    return matmul() == "simt" ? what : what + " (" + matmul() + " " + tileShape() + ")";
  }
};

struct KernelPathIndex {
  std::string text; // LOSSJIT_KERNEL_PATH as given
  std::vector<std::string> roots;
  std::vector<FoundBundle> bundles;
  std::vector<std::string> unreadable;
};

/// Every CUDA linear_cross_entropy bundle under LOSSJIT_KERNEL_PATH: each root
/// holds `<key>/manifest.json` directories (KernelBundle.h), as the runtime
/// looks them up.
const KernelPathIndex &kernelPathIndex() {
  static const KernelPathIndex index = [] {
    KernelPathIndex out;
    out.text = getEnv("LOSSJIT_KERNEL_PATH").value_or("");
    out.roots = splitPathList(out.text);
    for (const std::string &root : out.roots) {
      std::error_code ec;
      std::vector<fs::path> dirs;
      for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory(ec))
          dirs.push_back(it->path());
      std::sort(dirs.begin(), dirs.end()); // deterministic order
      for (const fs::path &dir : dirs) {
        fs::path manifest = dir / kManifestFileName;
        if (!fs::exists(manifest, ec))
          continue;
        Expected<std::string> text = readFile(manifest.string());
        if (!text) {
          out.unreadable.push_back(manifest.string() + ": " + text.errorMessage());
          continue;
        }
        Expected<JsonValue> json = parseJson(*text);
        if (!json) {
          out.unreadable.push_back(manifest.string() + ": " + json.errorMessage());
          continue;
        }
        const JsonValue *format = json->find("format");
        if (!format || !format->isString() || format->getString() != kBundleFormat)
          continue; // e.g. an AOT index next to the bundles
        Expected<KernelBundle> bundle = KernelBundle::fromManifest(*json);
        if (!bundle) {
          out.unreadable.push_back(manifest.string() + ": " + bundle.errorMessage());
          continue;
        }
        if (bundle->backend != "cuda" || bundle->op != "linear_cross_entropy" ||
            bundle->key != dir.filename().string())
          continue;
        FoundBundle found{root, bundle->key, bundle->arch, bundle->options, bundle->tile,
                          false};
        for (const BundleKernel &k : bundle->kernels)
          if (k.file.ends_with(".cubin"))
            found.cubin = true;
        out.bundles.push_back(std::move(found));
      }
    }
    return out;
  }();
  return index;
}

using Options = std::map<std::string, std::string>;

std::string describeOptions(const Options &wanted) {
  std::string s = "{";
  for (const auto &[k, v] : wanted)
    s += (s.size() > 1 ? ", " : "") + k + "=" + v;
  return s + "}";
}

/// What to do when bundles are missing.
std::string howToGenerate() {
  return "Generate them on a machine with the compiler (MLIR): `scripts/gpu-check.sh "
         "--prepare` writes .bundle/kernels/* (every dtype x reduction x bias, forward "
         "and backward, sm_90 and sm_90a by default) and .bundle/test-kernels/* (chunked backward "
         "with a 64 KiB workspace budget, tensor-core forwards in mma-*, Hopper tiles' gradients "
         "in hopper-*) and packs it all into .bundle.tar.xz. Carry that to the GPU machine; "
         "`scripts/gpu-check.sh` runs ctest -L gpu with LOSSJIT_KERNEL_PATH set to "
         "them, or set it yourself: export LOSSJIT_KERNEL_PATH=$(ls -d "
         "$PWD/.bundle/kernels/*/ $PWD/.bundle/test-kernels/*-ws*/ "
         "$PWD/.bundle/test-kernels/mma-*/ $PWD/.bundle/test-kernels/hopper-*/ | paste -sd:)";
}

/// The bundles with every option of `wanted` and the tile strategy
/// `matmul` ("simt", "mma_sync" or "wgmma": the options do not tell them
/// apart; "any": whatever lossjit-aot's tile auto picked per arch) that
/// a device of compute capability (major, minor) can run, restricted to the
/// newest such arch (several bundles may share it, e.g. different workspace
/// budgets or tiles). Empty with `why` filled when there is none.
std::vector<FoundBundle> findBundles(const Options &wanted, const std::string &matmul,
                                     int major, int minor, std::string &why) {
  const KernelPathIndex &index = kernelPathIndex();
  std::vector<FoundBundle> compatible;
  int bestRank = -1;
  std::vector<std::string> near;
  for (const FoundBundle &b : index.bundles) {
    bool match = true;
    for (const auto &[k, v] : wanted)
      if (b.option(k.c_str()) != v)
        match = false;
    // Plain variants only: the logit transforms (written only when set)
    // change the math the references compute.
    for (const char *transform : {"logit_scale", "softcap"})
      if (b.options.find(transform))
        match = false;
    if (!match || (matmul != "any" && b.matmul() != matmul))
      continue;
    if (Error e = checkArchCompatible(b.arch, b.cubin, major, minor)) {
      near.push_back(b.describe() + ": " + e.message());
      continue;
    }
    Expected<std::pair<int, int>> parsed = parseCudaArch(b.arch);
    int rank = parsed ? parsed->first * 10 + parsed->second : 0;
    bestRank = std::max(bestRank, rank);
    compatible.push_back(b);
  }
  std::vector<FoundBundle> best;
  for (const FoundBundle &b : compatible) {
    Expected<std::pair<int, int>> parsed = parseCudaArch(b.arch);
    if ((parsed ? parsed->first * 10 + parsed->second : 0) == bestRank)
      best.push_back(b);
  }
  if (best.empty()) {
    why = describeOptions(wanted) + " matmul " + matmul;
    for (const std::string &n : near)
      why += "\n    not runnable on sm_" + std::to_string(major) + std::to_string(minor) +
             ": " + n;
  }
  return best;
}

/// The search path in words, for failure messages.
std::string describeKernelPath() {
  const KernelPathIndex &index = kernelPathIndex();
  std::string s = "LOSSJIT_KERNEL_PATH='" + index.text + "' (" +
                  std::to_string(index.roots.size()) + " roots, " +
                  std::to_string(index.bundles.size()) +
                  " linear_cross_entropy CUDA bundles there)";
  for (const std::string &u : index.unreadable)
    s += "\n  unreadable: " + u;
  return s;
}

// ---------------------------------------------------------------- inputs

size_t storageBytes(const std::string &dtype) { return dtype == "f32" ? 4 : 2; }

/// Random inputs with awkward values; row 1 (when N > 1) and about a fifth of
/// the others carry ignore_index.
void makeInputs(const std::string &dtype, bool bias, const std::string &reduction,
                Shape s, uint64_t seed, lossjit::RandomLceInputs &out) {
  lossjit::RandomLceOptions o;
  o.n = s.n;
  o.v = s.v;
  o.d = s.d;
  o.dtype = dtype;
  o.labelType = "i64";
  o.reduction = reduction;
  o.bias = bias;
  o.ignoreIndex = kIgnore;
  o.ignoredFraction = s.n > 1 ? 0.2 : 0.0;
  o.seed = seed;
  lossjit::makeRandomLceInputs(o, out);
  if (s.n > 1) {
    out.labels64[1] = kIgnore;
    out.labels32[1] = static_cast<int32_t>(kIgnore);
  }
}

/// Device copies of one problem's inputs.
struct DeviceInputs {
  DeviceMemory x, w, bias, labels;
  DeviceInputs(const CudaDriver &driver, const lossjit::LceProblem &p)
      : x(driver, static_cast<size_t>(p.n * p.d) * storageBytes(p.dtype)),
        w(driver, static_cast<size_t>(p.v * p.d) * storageBytes(p.dtype)),
        bias(driver, p.bias ? static_cast<size_t>(p.v) * storageBytes(p.dtype) : 0),
        labels(driver, static_cast<size_t>(p.n) * 8) {
    x.upload(p.x, x.size());
    w.upload(p.w, w.size());
    if (p.bias)
      bias.upload(p.bias, bias.size());
    labels.upload(p.labels, labels.size());
  }
};

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

/// Collects mismatches and reports the first few and the count.
class Mismatches {
public:
  explicit Mismatches(std::string what) : what(std::move(what)) {}
  void add(const std::string &line) {
    if (lines.size() < 5)
      lines.push_back(line);
    ++count;
  }
  ~Mismatches() {
    if (!count)
      return;
    std::string text;
    for (const std::string &l : lines)
      text += "\n  " + l;
    ADD_FAILURE() << what << ": " << count << " mismatches" << text
                  << (count > lines.size() ? "\n  ..." : "");
  }

private:
  std::string what;
  std::vector<std::string> lines;
  size_t count = 0;
};

bool near(double got, double want, double relative) {
  return std::fabs(got - want) <= relative * std::max(1.0, std::fabs(want));
}

std::string gotWant(double got, double want) {
  std::ostringstream os;
  os.precision(9);
  os << "got " << got << ", want " << want << " (diff " << got - want << ")";
  return os.str();
}

/// Forward outputs as downloaded: loss has 1 value (mean, sum) or N (none).
struct ForwardResult {
  std::vector<float> loss, lse;
  bool operator==(const ForwardResult &o) const {
    return sameBits(loss, o.loss) && sameBits(lse, o.lse);
  }
};

/// What a forward of `reduction` should produce, in fp64.
struct ForwardExpectation {
  std::vector<double> lse, rowLoss;
  std::vector<bool> ignored;
  double sum = 0, mean = 0;
};

ForwardExpectation expectationFor(const lossjit::LceProblem &p) {
  lossjit::LceProblem q = p;
  q.reduction = "sum";
  lossjit::LceReference ref = lossjit::referenceLinearCrossEntropy(q);
  ForwardExpectation e;
  e.lse = ref.lse;
  e.rowLoss = ref.rowLoss;
  for (int64_t r = 0; r < p.n; ++r)
    e.ignored.push_back(static_cast<const int64_t *>(p.labels)[r] == kIgnore);
  e.sum = ref.loss;
  e.mean = ref.counted ? ref.loss / static_cast<double>(ref.counted)
                       : std::numeric_limits<double>::quiet_NaN();
  return e;
}

/// Checks `got` against an expectation within `tolerance` (relative, floor 1).
void expectForward(const ForwardResult &got, const ForwardExpectation &want,
                   const std::string &reduction, double tolerance,
                   const std::string &against) {
  size_t n = want.lse.size();
  ASSERT_EQ(got.lse.size(), n);
  {
    Mismatches m("lse vs " + against);
    for (size_t r = 0; r < n; ++r)
      if (!near(got.lse[r], want.lse[r], tolerance))
        m.add("row " + std::to_string(r) + ": " + gotWant(got.lse[r], want.lse[r]));
  }
  if (reduction == "none") {
    ASSERT_EQ(got.loss.size(), n);
    Mismatches m("per-row loss vs " + against);
    for (size_t r = 0; r < n; ++r) {
      if (want.ignored[r]) {
        if (got.loss[r] != 0.f)
          m.add("ignored row " + std::to_string(r) + " must be 0, got " +
                std::to_string(got.loss[r]));
      } else if (std::fabs(got.loss[r] - want.rowLoss[r]) >
                 tolerance * std::max({1.0, std::fabs(want.rowLoss[r]), std::fabs(want.lse[r])})) {
        // A row loss is lse - z[label]: its error scales with those terms.
        m.add("row " + std::to_string(r) + ": " + gotWant(got.loss[r], want.rowLoss[r]));
      }
    }
  } else {
    ASSERT_EQ(got.loss.size(), 1u);
    double w = reduction == "mean" ? want.mean : want.sum;
    EXPECT_TRUE(near(got.loss[0], w, tolerance))
        << reduction << " loss vs " << against << ": " << gotWant(got.loss[0], w);
  }
}

// ---------------------------------------------------------------- fixture

class CompilerKernelTest : public GpuTest {
protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure())
      return;
    Expected<std::pair<int, int>> cc = parseCudaArch(arch);
    ASSERT_TRUE(cc) << cc.errorMessage();
    major = cc->first;
    minor = cc->second;
    // A device is here, so the check must run: no bundles is a failure.
    if (kernelPathIndex().bundles.empty())
      FAIL() << "no compiler-made kernel bundles: " << describeKernelPath() << "\n"
             << howToGenerate();
    launcher = std::make_unique<CudaLauncher>(*driver);
    KernelCacheOptions options; // memory only: read the bundles, write nothing
    options.searchPath = kernelPathIndex().roots;
    cache = std::make_unique<KernelCache>(options);
    allocator = poisoningAllocator();
  }

  void TearDown() override {
    launcher.reset();
    if (!missing.empty()) {
      std::string list;
      for (const std::string &m : missing)
        list += "\n  " + m;
      ADD_FAILURE() << missing.size() << " bundle variants missing (none with these "
                    << "manifest options runnable on " << arch << ") in "
                    << describeKernelPath() << ":" << list << "\n" << howToGenerate();
    }
  }

  /// cuMemAlloc'ed workspaces filled with 0xff (NaN) so a kernel that reads
  /// scratch it did not write cannot pass; makeSynchronousAllocator releases.
  WorkspaceAllocator poisoningAllocator() {
    WorkspaceAllocator base = makeSynchronousAllocator(*driver);
    WorkspaceAllocator a;
    const CudaDriver *d = driver;
    a.allocate = [d, base](size_t bytes, cu::Stream stream) -> Expected<cu::DevicePtr> {
      Expected<cu::DevicePtr> p = base.allocate(bytes, stream);
      if (!p)
        return p;
      // The memset runs on the legacy stream, which a non-blocking stream
      // does not wait for: finish it before the kernels are enqueued.
      if (Error e = d->check(d->api().cuMemsetD8(*p, 0xff, bytes), "cuMemsetD8"))
        return e;
      if (Error e = d->check(d->api().cuCtxSynchronize(), "cuCtxSynchronize"))
        return e;
      return p;
    };
    a.release = base.release;
    return a;
  }

  /// The bundles for `wanted` (see findBundles); when there are none the
  /// test fails at its end, with one message listing every missing variant.
  std::vector<FoundBundle> requireBundles(const Options &wanted,
                                         const std::string &matmul = "simt") {
    std::string why;
    std::vector<FoundBundle> found = findBundles(wanted, matmul, major, minor, why);
    if (found.empty())
      missing.push_back(why);
    return found;
  }

  /// Loads a bundle the way the runtime does: through the cache's search path
  /// (integrity checked), then JIT-loads its modules.
  BundleRef load(const FoundBundle &found) {
    Expected<BundleRef> bundle =
        cache->getOrCompile(found.key, cache->noCompilerFunction(found.key));
    if (!bundle) {
      ADD_FAILURE() << found.describe() << ": " << bundle.errorMessage();
      return nullptr;
    }
    if (Error e = launcher->prepare(**bundle)) {
      ADD_FAILURE() << found.describe() << ": " << e.message();
      return nullptr;
    }
    return *bundle;
  }

  void synchronize(cu::Stream stream) {
    LOSSJIT_ASSERT_OK(driver->check(driver->api().cuStreamSynchronize(stream),
                                    "cuStreamSynchronize"));
  }

  /// Fills `memory` with 0xff and waits for it (see poisoningAllocator).
  void poison(DeviceMemory &memory) {
    if (memory.size() == 0)
      return;
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuMemsetD8(memory.address(), 0xff, memory.size()), "cuMemsetD8"));
    LOSSJIT_ASSERT_OK(driver->check(driver->api().cuCtxSynchronize(), "cuCtxSynchronize"));
  }

  /// Binds buffers to the bundle's params by name and launches on `stream`.
  void launch(const KernelBundle &bundle,
              const std::map<std::string, std::pair<const DeviceMemory *, int64_t>> &buffers,
              const Shape &s, cu::Stream stream) {
    std::vector<DeviceBuffer> params;
    for (const BundleParam &p : bundle.params) {
      auto it = buffers.find(p.name);
      ASSERT_NE(it, buffers.end()) << "bundle " << bundle.key.substr(0, 12)
                                   << " has a param '" << p.name
                                   << "' this test does not know";
      params.push_back({it->second.first->address(), it->second.second});
    }
    std::vector<int64_t> dims;
    for (const std::string &dim : bundle.dims) {
      ASSERT_TRUE(dim == "N" || dim == "V" || dim == "D") << "unknown dim " << dim;
      dims.push_back(dim == "N" ? s.n : dim == "V" ? s.v : s.d);
    }
    LOSSJIT_ASSERT_OK(launcher->launch(bundle, params, dims, stream, allocator));
  }

  /// One forward: poisons the outputs, launches, waits, downloads.
  void runForward(const KernelBundle &bundle, DeviceInputs &in, DeviceMemory &loss,
                  DeviceMemory &lse, const Shape &s, bool perRow, cu::Stream stream,
                  ForwardResult &out) {
    ASSERT_NO_FATAL_FAILURE(poison(loss));
    ASSERT_NO_FATAL_FAILURE(poison(lse));
    int64_t lossCount = perRow ? s.n : 1;
    ASSERT_NO_FATAL_FAILURE(launch(bundle,
                                   {{"x", {&in.x, s.n * s.d}},
                                    {"w", {&in.w, s.v * s.d}},
                                    {"bias", {&in.bias, s.v}},
                                    {"labels", {&in.labels, s.n}},
                                    {"loss", {&loss, lossCount}},
                                    {"lse", {&lse, s.n}}},
                                   s, stream));
    ASSERT_NO_FATAL_FAILURE(synchronize(stream));
    out.loss = loss.download<float>(static_cast<size_t>(lossCount));
    out.lse = lse.download<float>(static_cast<size_t>(s.n));
  }

  /// For every forward variant (dtype x bias x reduction), each of its
  /// bundles (newest runnable arch) and each shape:
  /// body(bundle, host problem, device inputs, shape, reduction).
  template <typename Body> void forEachForward(Body body) {
    size_t ran = 0;
    for (const char *dtype : kDtypes)
      for (bool bias : {false, true}) {
        for (const char *reduction : kReductions) {
          Options wanted = {{"pass", "forward"},
                            {"dtype", dtype},
                            {"bias", bias ? "true" : "false"},
                            {"reduction", reduction},
                            {"label_type", "i64"},
                            {"ignore_index", std::to_string(kIgnore)}};
          // Every forward on the path, whatever its matmul: the kernel path's
          // f16/bf16 bundles are tensor-core ones (lossjit-aot's tile auto).
          std::vector<FoundBundle> found = requireBundles(wanted, "any");
          for (const FoundBundle &f : found) {
            SCOPED_TRACE("forward " + describeOptions(wanted) + " bundle " + f.describe());
            BundleRef bundle = load(f);
            if (!bundle)
              continue;
            for (size_t i = 0; i < std::size(kForwardShapes); ++i) {
              const Shape &s = kForwardShapes[i];
              SCOPED_TRACE("N=" + std::to_string(s.n) + " V=" + std::to_string(s.v) +
                           " D=" + std::to_string(s.d));
              lossjit::RandomLceInputs inputs;
              makeInputs(dtype, bias, reduction, s, 100 + i, inputs);
              DeviceInputs device(*driver, inputs.problem);
              body(*bundle, inputs.problem, device, s, std::string(reduction));
              if (HasFatalFailure())
                return;
              ++ran;
            }
          }
        }
      }
    std::printf("ran %zu forward (variant, shape) cases on %s\n", ran, arch.c_str());
  }

  int major = 0, minor = 0;
  std::unique_ptr<CudaLauncher> launcher;
  std::unique_ptr<KernelCache> cache;
  WorkspaceAllocator allocator;
  /// Variants requireBundles() did not find (reported in TearDown).
  std::vector<std::string> missing;
};

} // namespace

// ------------------------------------------------------------------ tests

TEST_F(CompilerKernelTest, ForwardMatchesFp64AndIsBitwiseDeterministic) {
  forEachForward([&](const KernelBundle &bundle, const lossjit::LceProblem &p,
                     DeviceInputs &in, const Shape &s, const std::string &reduction) {
    bool perRow = reduction == "none";
    DeviceMemory loss(*driver, (perRow ? s.n : 1) * 4), lse(*driver, s.n * 4);
    ForwardResult first;
    ASSERT_NO_FATAL_FAILURE(runForward(bundle, in, loss, lse, s, perRow, nullptr, first));
    expectForward(first, expectationFor(p), reduction, kFp64Tolerance, "fp64");
    for (int run = 1; run < 5; ++run) {
      ForwardResult again;
      ASSERT_NO_FATAL_FAILURE(runForward(bundle, in, loss, lse, s, perRow, nullptr, again));
      EXPECT_TRUE(again == first) << "launch " << run << " differs bitwise from launch 0";
    }
  });
}

TEST_F(CompilerKernelTest, ForwardOnANonDefaultStream) {
  cu::Stream stream = nullptr;
  LOSSJIT_ASSERT_OK(driver->check(
      driver->api().cuStreamCreate(&stream, cu::kStreamNonBlocking), "cuStreamCreate"));
  forEachForward([&](const KernelBundle &bundle, const lossjit::LceProblem &p,
                     DeviceInputs &in, const Shape &s, const std::string &reduction) {
    bool perRow = reduction == "none";
    DeviceMemory loss(*driver, (perRow ? s.n : 1) * 4), lse(*driver, s.n * 4);
    ForwardResult onDefault, onStream;
    ASSERT_NO_FATAL_FAILURE(runForward(bundle, in, loss, lse, s, perRow, nullptr, onDefault));
    ASSERT_NO_FATAL_FAILURE(runForward(bundle, in, loss, lse, s, perRow, stream, onStream));
    expectForward(onStream, expectationFor(p), reduction, kFp64Tolerance, "fp64");
    EXPECT_TRUE(onStream == onDefault)
        << "same bundle and inputs on another stream must match bitwise";
  });
  (void)driver->api().cuStreamDestroy(stream);
}

TEST_F(CompilerKernelTest, ForwardMatchesNvrtcReferenceKernel) {
  Expected<const Nvrtc *> nvrtc = Nvrtc::get();
  if (!nvrtc)
    GTEST_SKIP() << "NVRTC not available: " << nvrtc.errorMessage();
  // The pointer-ABI reference per (dtype, bias), loaded straight through the
  // driver (it also yields per-row losses, which the memref bundle keeps in
  // a workspace).
  std::map<std::string, std::pair<cu::Module, std::pair<cu::Function, cu::Function>>> modules;
  auto reference = [&](const std::string &dtype, bool bias,
                       std::pair<cu::Function, cu::Function> &out) {
    std::string name = dtype + (bias ? "-bias" : "");
    if (auto it = modules.find(name); it != modules.end()) {
      out = it->second.second;
      return;
    }
    ReferenceKernelOptions options;
    options.dtype = dtype;
    options.labelType = "i64";
    options.bias = bias;
    options.ignoreIndex = kIgnore;
    Expected<std::string> source = referenceKernelSource(options);
    ASSERT_TRUE(source) << source.errorMessage();
    Expected<std::string> ptx = (*nvrtc)->compileToPtx(*source, "reference.cu", arch);
    ASSERT_TRUE(ptx) << ptx.errorMessage();
    cu::Module module = nullptr;
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuModuleLoadDataEx(&module, ptx->c_str(), 0, nullptr, nullptr),
        "cuModuleLoadDataEx"));
    modules[name].first = module;
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuModuleGetFunction(&out.first, module, kReferenceForwardKernel),
        "cuModuleGetFunction(forward)"));
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuModuleGetFunction(&out.second, module, kReferenceMeanKernel),
        "cuModuleGetFunction(mean)"));
    modules[name].second = out;
  };

  forEachForward([&](const KernelBundle &bundle, const lossjit::LceProblem &p,
                     DeviceInputs &in, const Shape &s, const std::string &reduction) {
    bool perRow = reduction == "none";
    DeviceMemory loss(*driver, (perRow ? s.n : 1) * 4), lse(*driver, s.n * 4);
    ForwardResult got;
    ASSERT_NO_FATAL_FAILURE(runForward(bundle, in, loss, lse, s, perRow, nullptr, got));

    std::pair<cu::Function, cu::Function> fns;
    ASSERT_NO_FATAL_FAILURE(reference(p.dtype, p.bias != nullptr, fns));
    DeviceMemory refLse(*driver, s.n * 4), refRows(*driver, s.n * 4), refMean(*driver, 4);
    cu::DevicePtr x = in.x.address(), w = in.w.address(),
                  b = p.bias ? in.bias.address() : 0, labels = in.labels.address(),
                  lseP = refLse.address(), rows = refRows.address(),
                  mean = refMean.address();
    long long n = s.n, v = s.v, d = s.d;
    void *forwardArgs[] = {&x, &w, &b, &labels, &lseP, &rows, &n, &v, &d};
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuLaunchKernel(fns.first, static_cast<unsigned>(s.n), 1, 1, 256, 1, 1,
                                     0, nullptr, forwardArgs, nullptr),
        "cuLaunchKernel(reference forward)"));
    void *meanArgs[] = {&labels, &rows, &mean, &n};
    LOSSJIT_ASSERT_OK(driver->check(
        driver->api().cuLaunchKernel(fns.second, 1, 1, 1, 256, 1, 1, 0, nullptr, meanArgs,
                                     nullptr),
        "cuLaunchKernel(reference mean)"));
    ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));

    ForwardExpectation want;
    for (float f : refLse.download<float>(static_cast<size_t>(s.n)))
      want.lse.push_back(f);
    for (float f : refRows.download<float>(static_cast<size_t>(s.n))) {
      want.rowLoss.push_back(f);
      want.sum += f;
    }
    for (int64_t r = 0; r < s.n; ++r)
      want.ignored.push_back(static_cast<const int64_t *>(p.labels)[r] == kIgnore);
    want.mean = refMean.download<float>(1)[0];
    expectForward(got, want, reduction, kNvrtcTolerance, "the NVRTC reference kernel");
  });
  for (auto &[name, module] : modules)
    (void)driver->api().cuModuleUnload(module.first);
}

TEST_F(CompilerKernelTest, BackwardChunkedMatchesFp64Gradient) {
  struct Variant {
    const char *reduction;
    bool bias;
  } variants[] = {{"mean", true}, {"none", false}};
  size_t ran = 0;
  for (const char *dtype : kDtypes)
    for (const Variant &variant : variants) {
      Options wanted = {{"pass", "backward"},
                        {"strategy", "chunked"},
                        {"grad_x", "true"},
                        {"grad_w", "true"},
                        {"dtype", dtype},
                        {"bias", variant.bias ? "true" : "false"},
                        {"reduction", variant.reduction},
                        {"label_type", "i64"},
                        {"ignore_index", std::to_string(kIgnore)}};
      SCOPED_TRACE("backward " + describeOptions(wanted));
      // Every strategy the bundles were built with: for f16/bf16 tile auto
      // gives tensor cores (mma_sync on sm_90, wgmma on sm_90a; both run
      // on compute capability 9.0), f32 SIMT.
      std::vector<FoundBundle> found = requireBundles(wanted, "any");
      if (found.empty())
        continue;
      std::vector<std::pair<FoundBundle, BundleRef>> bundles;
      for (const FoundBundle &f : found)
        if (BundleRef b = load(f))
          bundles.emplace_back(f, b);
      if (bundles.empty())
        continue;

      // The smallest workspace budget picks N: >= kMinChunks chunks, the
      // last one partial.
      auto budget = [](const FoundBundle &f) {
        std::string text = f.option("workspace_bytes");
        return text.empty() ? int64_t(1) << 62 : std::stoll(text);
      };
      auto smallest = std::min_element(bundles.begin(), bundles.end(), [&](auto &a, auto &b) {
        return budget(a.first) < budget(b.first);
      });
      Expected<LaunchPlan> plan = LaunchPlan::build(*smallest->second);
      ASSERT_TRUE(plan) << plan.errorMessage();
      ASSERT_TRUE(plan->isChunked()) << smallest->first.describe() << " is not chunked";
      Shape s{0, kBackwardV, kBackwardD};
      int64_t chunkSize = 0;
      for (int64_t n = 24; n <= 512 && !s.n; ++n) {
        std::vector<int64_t> dims = {n, kBackwardV, kBackwardD};
        Expected<ResolvedLaunch> r = plan->resolve(dims);
        ASSERT_TRUE(r) << r.errorMessage();
        if ((n + r->chunkSize - 1) / r->chunkSize >= kMinChunks && n % r->chunkSize != 0) {
          s.n = n;
          chunkSize = r->chunkSize;
        }
      }
      if (!s.n) {
        // Still check the gradients (in one chunk), but fail: the chunked
        // path is what this test is for.
        missing.push_back(describeOptions(wanted) + " with a workspace budget that splits " +
                          "N <= 512 rows into " + std::to_string(kMinChunks) +
                          " chunks at V=" + std::to_string(kBackwardV) +
                          ", D=" + std::to_string(kBackwardD) + " (smallest found: " +
                          std::to_string(budget(smallest->first)) + " bytes, " +
                          smallest->first.describe() + ")");
        s.n = 37;
        std::vector<int64_t> dims = {s.n, s.v, s.d};
        Expected<ResolvedLaunch> r = plan->resolve(dims);
        ASSERT_TRUE(r) << r.errorMessage();
        chunkSize = r->chunkSize;
      }
      SCOPED_TRACE("N=" + std::to_string(s.n) + " V=" + std::to_string(s.v) +
                   " D=" + std::to_string(s.d) + ", " +
                   std::to_string((s.n + chunkSize - 1) / chunkSize) + " chunks of " +
                   std::to_string(chunkSize) + " rows with the smallest budget");

      lossjit::RandomLceInputs inputs;
      makeInputs(dtype, variant.bias, variant.reduction, s, 7, inputs);
      const lossjit::LceProblem &p = inputs.problem;
      bool perRow = std::string(variant.reduction) == "none";
      std::vector<double> gradLoss;
      std::mt19937 rng(11);
      std::uniform_real_distribution<float> scale(0.5f, 1.5f);
      std::vector<float> gradLoss32;
      for (int64_t r = 0; r < (perRow ? s.n : 1); ++r) {
        gradLoss32.push_back(perRow ? scale(rng) : 0.75f);
        gradLoss.push_back(gradLoss32.back());
      }
      // lse from the fp64 reference: the backward is checked on its own.
      lossjit::LceReference fwd = lossjit::referenceLinearCrossEntropy(p);
      std::vector<float> lse32(fwd.lse.begin(), fwd.lse.end());
      lossjit::LceGradReference want = lossjit::referenceLinearCrossEntropyGrad(p, gradLoss);

      DeviceInputs in(*driver, p);
      size_t st = storageBytes(dtype);
      DeviceMemory lse(*driver, s.n * 4), gl(*driver, gradLoss32.size() * 4),
          gx(*driver, s.n * s.d * st), gw(*driver, s.v * s.d * st),
          gb(*driver, s.v * st);
      lse.upload(lse32);
      gl.upload(gradLoss32);
      std::map<std::string, std::pair<const DeviceMemory *, int64_t>> buffers = {
          {"x", {&in.x, s.n * s.d}},         {"w", {&in.w, s.v * s.d}},
          {"bias", {&in.bias, s.v}},         {"labels", {&in.labels, s.n}},
          {"lse", {&lse, s.n}},              {"grad_loss", {&gl, perRow ? s.n : 1}},
          {"grad_x", {&gx, s.n * s.d}},      {"grad_w", {&gw, s.v * s.d}},
          {"grad_bias", {&gb, s.v}}};

      for (auto &[f, bundle] : bundles) {
        SCOPED_TRACE("bundle " + f.describe() + ", workspace_bytes " +
                     f.option("workspace_bytes"));
        for (const BundleParam &param : bundle->params) {
          if (param.name == "grad_x" || param.name == "grad_w" || param.name == "grad_bias") {
            ASSERT_NO_FATAL_FAILURE(poison(param.name == "grad_x"   ? gx
                                           : param.name == "grad_w" ? gw
                                                                    : gb));
          }
        }
        ASSERT_NO_FATAL_FAILURE(launch(*bundle, buffers, s, nullptr));
        ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));
        auto hx = gx.download<uint8_t>(gx.size()), hw = gw.download<uint8_t>(gw.size()),
             hb = gb.download<uint8_t>(gb.size());
        double tol = gradientTolerance(dtype);
        double ex = lossjit::relativeL2Error(hx.data(), dtype, want.gradX);
        double ew = lossjit::relativeL2Error(hw.data(), dtype, want.gradW);
        EXPECT_LE(ex, tol) << "grad_x relative L2 error";
        EXPECT_LE(ew, tol) << "grad_w relative L2 error";
        if (variant.bias) {
          double eb = lossjit::relativeL2Error(hb.data(), dtype, want.gradBias);
          EXPECT_LE(eb, tol) << "grad_bias relative L2 error";
        }
        // Ignored rows get exactly zero gradient.
        size_t bad = 0;
        for (int64_t r = 0; r < s.n; ++r)
          if (static_cast<const int64_t *>(p.labels)[r] == kIgnore)
            for (int64_t k = 0; k < s.d; ++k)
              if (lossjit::elementAsDouble(hx.data(), dtype, r * s.d + k) != 0)
                ++bad;
        EXPECT_EQ(bad, 0u) << "grad_x elements of ignored rows that are not 0";

        // A second launch reproduces the gradients bitwise.
        ASSERT_NO_FATAL_FAILURE(poison(gx));
        ASSERT_NO_FATAL_FAILURE(poison(gw));
        ASSERT_NO_FATAL_FAILURE(launch(*bundle, buffers, s, nullptr));
        ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));
        EXPECT_TRUE(gx.download<uint8_t>(gx.size()) == hx &&
                    gw.download<uint8_t>(gw.size()) == hw)
            << "a second backward launch differs bitwise";
        ++ran;
      }
    }
  std::printf("ran %zu backward bundles on %s\n", ran, arch.c_str());
}

TEST_F(CompilerKernelTest, TensorCoreForwardMatchesFp64AndSimt) {
  const double ulp = std::numeric_limits<float>::epsilon();
  size_t ran = 0;
  // mma_sync on every device; wgmma (sm_90a bundles) where it exists, on
  // compute capability 9.0.
  struct Strategy {
    const char *matmul;
    std::vector<const char *> tiles;
  };
  std::vector<Strategy> strategies = {
      {"mma_sync", {std::begin(kTensorCoreTiles), std::end(kTensorCoreTiles)}}};
  if (major == 9 && minor == 0)
    strategies.push_back({"wgmma", {std::begin(kWgmmaTiles), std::end(kWgmmaTiles)}});
  else
    std::printf("wgmma bundles (sm_90a) not run: the device is %s\n", arch.c_str());
  for (const Strategy &strategy : strategies)
  for (const char *dtype : {"f16", "bf16"})
    for (bool bias : {false, true})
      for (const char *reduction : {"mean", "none"}) {
        Options wanted = {{"pass", "forward"},
                          {"dtype", dtype},
                          {"bias", bias ? "true" : "false"},
                          {"reduction", reduction},
                          {"label_type", "i64"},
                          {"ignore_index", std::to_string(kIgnore)}};
        SCOPED_TRACE("tensor-core forward " + describeOptions(wanted));
        std::vector<FoundBundle> mma = requireBundles(wanted, strategy.matmul);
        for (const char *tile : strategy.tiles)
          if (!mma.empty() && std::none_of(mma.begin(), mma.end(), [&](const FoundBundle &f) {
                return f.tileShape() == tile;
              }))
            missing.push_back(describeOptions(wanted) + " matmul " + strategy.matmul + " tile " +
                              tile);
        std::vector<FoundBundle> simt = requireBundles(wanted, "simt");
        if (mma.empty() || simt.empty())
          continue;
        SCOPED_TRACE("SIMT bundle " + simt.front().describe());
        BundleRef simtBundle = load(simt.front());
        if (!simtBundle)
          continue;
        for (const FoundBundle &f : mma) {
          SCOPED_TRACE("bundle " + f.describe());
          BundleRef bundle = load(f);
          if (!bundle)
            continue;
          double worstUlps = 0; // lse vs SIMT, over the shapes, for the log
          for (size_t i = 0; i < std::size(kTensorCoreShapes); ++i) {
            const Shape &s = kTensorCoreShapes[i];
            SCOPED_TRACE("N=" + std::to_string(s.n) + " V=" + std::to_string(s.v) +
                         " D=" + std::to_string(s.d));
            lossjit::RandomLceInputs inputs;
            makeInputs(dtype, bias, reduction, s, 300 + i, inputs);
            DeviceInputs in(*driver, inputs.problem);
            bool perRow = std::string(reduction) == "none";
            DeviceMemory loss(*driver, (perRow ? s.n : 1) * 4), lse(*driver, s.n * 4);

            ForwardResult first;
            ASSERT_NO_FATAL_FAILURE(runForward(*bundle, in, loss, lse, s, perRow, nullptr, first));
            expectForward(first, expectationFor(inputs.problem), reduction, kFp64Tolerance,
                          "fp64");
            for (int run = 1; run < 5; ++run) {
              ForwardResult again;
              ASSERT_NO_FATAL_FAILURE(
                  runForward(*bundle, in, loss, lse, s, perRow, nullptr, again));
              EXPECT_TRUE(again == first) << "launch " << run << " differs bitwise from launch 0";
            }

            ForwardResult bySimt;
            ASSERT_NO_FATAL_FAILURE(
                runForward(*simtBundle, in, loss, lse, s, perRow, nullptr, bySimt));
            ASSERT_EQ(bySimt.lse.size(), first.lse.size());
            ASSERT_EQ(bySimt.loss.size(), first.loss.size());
            double maxAbsLse = 1;
            // Two fp32 sums of D products in different orders drift apart
            // like a random walk: the bound, set at D <= 64, grows as sqrt(D).
            const double allowedUlps =
                kTensorCoreVsSimtUlps * std::max(1.0, std::sqrt(double(s.d) / 64));
            const ForwardExpectation exact = expectationFor(inputs.problem);
            {
              Mismatches m("lse vs the SIMT bundle (" + std::to_string(allowedUlps) +
                           " f32 ulps of max(1, |lse|))");
              for (size_t r = 0; r < first.lse.size(); ++r) {
                double scale = std::max(1.0, std::fabs(double(bySimt.lse[r])));
                maxAbsLse = std::max(maxAbsLse, scale);
                double ulps = std::fabs(double(first.lse[r]) - bySimt.lse[r]) / (ulp * scale);
                // NaN (a row the kernel never wrote) fails the comparison too.
                if (!(ulps <= allowedUlps))
                  m.add("row " + std::to_string(r) + ": " + gotWant(first.lse[r], bySimt.lse[r]) +
                        ", " + std::to_string(ulps) + " ulps; fp64 " +
                        std::to_string(exact.lse[r]));
                else
                  worstUlps = std::max(worstUlps, ulps);
              }
            }
            {
              // A row loss is lse - z[label] with z[label] recomputed by the
              // same combine kernel, so it differs as lse does; the mean is
              // bounded by the largest |lse|.
              Mismatches m("loss vs the SIMT bundle");
              for (size_t r = 0; r < first.loss.size(); ++r) {
                double scale = perRow ? std::max({1.0, std::fabs(double(bySimt.lse[r])),
                                                  std::fabs(double(bySimt.loss[r]))})
                                      : std::max(maxAbsLse, std::fabs(double(bySimt.loss[r])));
                double diff = std::fabs(double(first.loss[r]) - bySimt.loss[r]);
                if (!(diff <= allowedUlps * ulp * scale))
                  m.add((perRow ? "row " + std::to_string(r) : std::string(reduction)) + ": " +
                        gotWant(first.loss[r], bySimt.loss[r]));
              }
            }
            ++ran;
          }
          std::printf("%s %s: lse within %.2f f32 ulps of the SIMT bundle\n",
                      describeOptions(wanted).c_str(), f.describe().c_str(), worstUlps);
        }
      }
  std::printf("ran %zu tensor-core forward (bundle, shape) cases on %s\n", ran, arch.c_str());
}

// ------------------------------------------------- Hopper tiles, backward

namespace {

/// gpu-check.sh's HOPPER_TEST_TILES: one wgmma tile (128 × 64, k 64, 2
/// stages, 128 gradient columns) eleven ways, sm_90a alone, chunked within
/// kHopperWorkspaceBytes. (tma, persistent, band, cluster) of each; the first, the cp.async
/// ring with a block per tile, is the reference the others must equal bit
/// for bit: TMA moves the same bytes, the producer warp (or warpgroup,
/// tma=3, lending its registers) only reorders copies,
/// and a persistent block runs a block-per-tile's tiles in the same order;
/// a band of one row block (band=1) only changes which block makes a tile;
/// clusters of two row blocks (cluster=2: dZ, dX and dW pair) or of four
/// (dZ alone: 128 gradient columns are two boxes) multicast the bytes each
/// block would copy alone.
struct HopperTile {
  int tma, persistent, band, cluster;
  const char *what;
};
constexpr HopperTile kHopperTiles[] = {{0, 0, 0, 0, "cp.async"},
                                       {1, 0, 0, 0, "TMA"},
                                       {2, 0, 0, 0, "warp-specialized"},
                                       {0, 3, 0, 0, "persistent cp.async"},
                                       {2, 3, 0, 0, "persistent warp-specialized"},
                                       {3, 0, 0, 0, "producer warpgroup"},
                                       {3, 3, 0, 0, "persistent producer warpgroup"},
                                       {1, 0, 1, 0, "TMA, columns first"},
                                       {2, 0, 0, 2, "clusters, producer warp"},
                                       {3, 0, 0, 2, "clusters, producer warpgroup"},
                                       {2, 0, 0, 4, "clusters of four, producer warp"},
                                       {2, 3, 1, 2, "persistent banded clusters, producer warp"}};
constexpr int64_t kHopperWorkspaceBytes = int64_t(1) << 20;
/// V and D multiples of 8 (16-byte rows: the TMA paths); V not a multiple
/// of the 64- or 128-column tiles, D = 3 k tiles of 64 and a partial one.
/// A chunk of the 1 MiB budget is about 520 rows for the backward (a 16-bit
/// dZ: 5 row blocks, the last partial, × 16 column tiles for dZ, × 2 for
/// dX; dW's 8 × 2 tiles multiply over the chunk's rows, 9 k tiles through
/// the 2-stage rings) and about 170 for the fused op (f32 raw logits too:
/// 2 row blocks); N is chosen so that the last chunk holds more than one
/// row block as well, so the 3 persistent blocks sweep several tiles.
constexpr int64_t kHopperV = 1000, kHopperD = 200;

int64_t tileInt(const FoundBundle &f, const char *name) {
  std::string text = optionText(f.tile.find(name));
  return text.empty() ? 0 : std::stoll(text);
}

/// Gradients (and, for the fused op, loss and lse) as downloaded.
struct GradientResult {
  std::vector<uint8_t> gradX, gradW, gradBias;
  std::vector<float> loss, lse;
  bool operator==(const GradientResult &o) const {
    return gradX == o.gradX && gradW == o.gradW && gradBias == o.gradBias &&
           sameBits(loss, o.loss) && sameBits(lse, o.lse);
  }
};

} // namespace

TEST_F(CompilerKernelTest, HopperTilesBackwardMatchFp64AndTheCpAsyncBits) {
  if (major != 9 || minor != 0)
    GTEST_SKIP() << "the Hopper tiles are sm_90a kernels: compute capability 9.0 runs them, "
                 << arch << " cannot";
  struct Variant {
    const char *dtype, *reduction;
    bool bias;
    bool vocab; ///< in vocabulary chunks too (gpu-check's HOPPER_TEST_VARIANTS)
  } variants[] = {{"bf16", "mean", true, true}, {"f16", "none", false, false}};
  size_t ran = 0;
  for (const Variant &variant : variants)
    for (const char *strategy : {"chunked", "vocab_chunked"})
      for (const char *pass : {"backward", "forward_backward"}) {
        bool fused = std::string(pass) == "forward_backward";
        // Row or vocabulary chunks: the extent the plan cuts.
        const bool vocab = std::string(strategy) == "vocab_chunked";
        if (vocab && !variant.vocab)
          continue;
        if (fused && std::string(variant.reduction) == "none")
          continue; // the fused op is for mean and sum
        Options wanted = {{"pass", pass},
                          {"strategy", strategy},
                          {"grad_x", "true"},
                          {"grad_w", "true"},
                          {"dtype", variant.dtype},
                          {"bias", variant.bias ? "true" : "false"},
                          {"reduction", variant.reduction},
                          {"label_type", "i64"},
                          {"ignore_index", std::to_string(kIgnore)},
                          {"workspace_bytes", std::to_string(kHopperWorkspaceBytes)}};
        SCOPED_TRACE("Hopper tiles " + describeOptions(wanted));
        std::vector<FoundBundle> found = requireBundles(wanted, "wgmma");
        std::vector<std::pair<const HopperTile *, BundleRef>> tiles;
        for (const HopperTile &t : kHopperTiles) {
          auto it = std::find_if(found.begin(), found.end(), [&](const FoundBundle &f) {
            return tileInt(f, "tma") == t.tma && tileInt(f, "persistent") == t.persistent &&
                   tileInt(f, "band") == t.band && tileInt(f, "cluster") == t.cluster;
          });
          if (it == found.end()) {
            if (!found.empty())
              missing.push_back(describeOptions(wanted) + " wgmma tile " + t.what +
                                " (tma=" + std::to_string(t.tma) + ", persistent=" +
                                std::to_string(t.persistent) + ", band=" + std::to_string(t.band) +
                                ", cluster=" + std::to_string(t.cluster) + ")");
            continue;
          }
          if (BundleRef b = load(*it))
            tiles.emplace_back(&t, b);
        }
        if (tiles.size() != std::size(kHopperTiles))
          continue; // reported as missing (or as a load failure)

        // N: at least 3 chunks of the reference's plan, the last partial:
        // row chunks of more than one 128-row block each, or vocabulary
        // chunks of V (the last one short).
        Expected<LaunchPlan> plan = LaunchPlan::build(*tiles.front().second);
        ASSERT_TRUE(plan) << plan.errorMessage();
        ASSERT_TRUE(plan->isChunked());
        Shape s{0, kHopperV, kHopperD};
        int64_t chunkSize = 0;
        for (int64_t n = 128; n <= 4096 && !s.n; ++n) {
          std::vector<int64_t> dims = {n, s.v, s.d};
          Expected<ResolvedLaunch> r = plan->resolve(dims);
          ASSERT_TRUE(r) << r.errorMessage();
          const int64_t extent = vocab ? s.v : n;
          if ((extent + r->chunkSize - 1) / r->chunkSize >= kMinChunks &&
              extent % r->chunkSize > (vocab ? 0 : 128)) {
            s.n = n;
            chunkSize = r->chunkSize;
          }
        }
        ASSERT_GT(s.n, 0) << "no N <= 4096 splits " << (vocab ? "V" : "N") << " into " << kMinChunks
                          << " chunks, the last partial";
        SCOPED_TRACE("N=" + std::to_string(s.n) + " V=" + std::to_string(s.v) +
                     " D=" + std::to_string(s.d) + ", chunks of " + std::to_string(chunkSize) +
                     (vocab ? " columns" : " rows"));

        lossjit::RandomLceInputs inputs;
        makeInputs(variant.dtype, variant.bias, variant.reduction, s, 13, inputs);
        const lossjit::LceProblem &p = inputs.problem;
        bool perRow = std::string(variant.reduction) == "none";
        // The fused op differentiates grad_loss = 1.
        std::vector<float> gradLoss32;
        std::mt19937 rng(17);
        std::uniform_real_distribution<float> scale(0.5f, 1.5f);
        for (int64_t r = 0; r < (perRow ? s.n : 1); ++r)
          gradLoss32.push_back(fused ? 1.0f : perRow ? scale(rng) : 0.75f);
        std::vector<double> gradLoss(gradLoss32.begin(), gradLoss32.end());
        lossjit::LceReference fwd = lossjit::referenceLinearCrossEntropy(p);
        std::vector<float> lse32(fwd.lse.begin(), fwd.lse.end());
        lossjit::LceGradReference want = lossjit::referenceLinearCrossEntropyGrad(p, gradLoss);

        DeviceInputs in(*driver, p);
        size_t st = storageBytes(variant.dtype);
        DeviceMemory lse(*driver, s.n * 4), loss(*driver, 4), gl(*driver, gradLoss32.size() * 4),
            gx(*driver, s.n * s.d * st), gw(*driver, s.v * s.d * st), gb(*driver, s.v * st);
        gl.upload(gradLoss32);
        std::map<std::string, std::pair<const DeviceMemory *, int64_t>> buffers = {
            {"x", {&in.x, s.n * s.d}},
            {"w", {&in.w, s.v * s.d}},
            {"bias", {&in.bias, s.v}},
            {"labels", {&in.labels, s.n}},
            {"lse", {&lse, s.n}},
            {"loss", {&loss, 1}},
            {"grad_loss", {&gl, perRow ? s.n : 1}},
            {"grad_x", {&gx, s.n * s.d}},
            {"grad_w", {&gw, s.v * s.d}},
            {"grad_bias", {&gb, s.v}}};
        auto run = [&](const KernelBundle &bundle, GradientResult &out) {
          ASSERT_NO_FATAL_FAILURE(poison(gx));
          ASSERT_NO_FATAL_FAILURE(poison(gw));
          ASSERT_NO_FATAL_FAILURE(poison(gb));
          if (fused) {
            ASSERT_NO_FATAL_FAILURE(poison(lse));
            ASSERT_NO_FATAL_FAILURE(poison(loss));
          } else {
            lse.upload(lse32); // the fp64 reference's: the backward is checked on its own
          }
          ASSERT_NO_FATAL_FAILURE(launch(bundle, buffers, s, nullptr));
          ASSERT_NO_FATAL_FAILURE(synchronize(nullptr));
          out.gradX = gx.download<uint8_t>(gx.size());
          out.gradW = gw.download<uint8_t>(gw.size());
          if (variant.bias)
            out.gradBias = gb.download<uint8_t>(gb.size());
          if (fused) {
            out.loss = loss.download<float>(1);
            out.lse = lse.download<float>(static_cast<size_t>(s.n));
          }
        };

        GradientResult reference;
        for (auto &[tile, bundle] : tiles) {
          SCOPED_TRACE(std::string("tile ") + tile->what + ", bundle " + bundle->key.substr(0, 12));
          GradientResult got;
          ASSERT_NO_FATAL_FAILURE(run(*bundle, got));
          if (tile == tiles.front().first) {
            double tol = gradientTolerance(variant.dtype);
            EXPECT_LE(lossjit::relativeL2Error(got.gradX.data(), variant.dtype, want.gradX), tol)
                << "grad_x relative L2 error";
            EXPECT_LE(lossjit::relativeL2Error(got.gradW.data(), variant.dtype, want.gradW), tol)
                << "grad_w relative L2 error";
            if (variant.bias) {
              EXPECT_LE(lossjit::relativeL2Error(got.gradBias.data(), variant.dtype, want.gradBias),
                        tol)
                  << "grad_bias relative L2 error";
            }
            if (fused) {
              expectForward({got.loss, got.lse}, expectationFor(p), variant.reduction,
                            kFp64Tolerance, "fp64");
            }
            size_t bad = 0;
            for (int64_t r = 0; r < s.n; ++r)
              if (static_cast<const int64_t *>(p.labels)[r] == kIgnore)
                for (int64_t k = 0; k < s.d; ++k)
                  if (lossjit::elementAsDouble(got.gradX.data(), variant.dtype, r * s.d + k) != 0)
                    ++bad;
            EXPECT_EQ(bad, 0u) << "grad_x elements of ignored rows that are not 0";
            reference = got;
          } else {
            EXPECT_TRUE(got == reference)
                << "differs bitwise from the cp.async tile's " << (fused ? "outputs" : "gradients");
          }
          GradientResult again;
          ASSERT_NO_FATAL_FAILURE(run(*bundle, again));
          EXPECT_TRUE(again == got) << "a second launch differs bitwise";
          ++ran;
        }
      }
  std::printf("ran %zu Hopper-tile gradient bundles on %s\n", ran, arch.c_str());
}
