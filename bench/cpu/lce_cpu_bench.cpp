//===- lce_cpu_bench.cpp - CPU backend forward+backward time and memory ---===//
//
//   lossjit-bench-cpu [N V D] [--dtype f32|f16|bf16] [--strategy chunked|recompute]
//                     [--repeat K] [--workspace-mib M] [--threads T] [--no-fused]
//
// Prints one line per measurement (best of K): compile, forward, backward,
// and the peak RSS growth of each phase (VmHWM after /proc/self/clear_refs),
// which counts workspaces and JIT scratch but not the caller-owned inputs
// and gradients allocated before timing. A last line gives the best CPU
// seconds of each phase summed over its threads (getrusage): on a shared
// machine, CPU seconds / threads is what the wall time would be alone.
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "testing/reference/Reference.h"

#include "mlir/IR/MLIRContext.h"

#include <chrono>
#include <sys/resource.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

using namespace lossjit;

namespace {
int64_t peakRss(bool reset) {
  if (reset) {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
  }
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  return -1;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// User + system CPU seconds of every thread of the process so far.
double cpuNow() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval &t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

[[noreturn]] void die(const std::string &message) {
  fprintf(stderr, "lossjit-bench-cpu: error: %s\n", message.c_str());
  exit(1);
}
} // namespace

int main(int argc, char **argv) {
  int64_t n = 4096, v = 32000, d = 1024, repeat = 3, workspaceMiB = 256;
  unsigned threads = 0; // 0: one per hardware thread
  bool withFused = true;
  std::string dtype = "f32", strategy = "chunked";
  // Tile knobs for tuning; left at the defaults the JIT sizes the register
  // tile for the target CPU (CpuTileConfig::forVectorRegisters).
  CpuTileConfig tile;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " expects a value");
      return argv[++i];
    };
    if (a == "--dtype")
      dtype = value();
    else if (a == "--strategy")
      strategy = value();
    else if (a == "--repeat")
      repeat = std::stoll(value());
    else if (a == "--no-fused")
      withFused = false;
    else if (a == "--threads")
      threads = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--workspace-mib")
      workspaceMiB = std::stoll(value());
    else if (a == "--block-rows")
      tile.blockRows = std::stoll(value());
    else if (a == "--block-cols")
      tile.blockCols = std::stoll(value());
    else if (a == "--vocab-tile")
      tile.vocabTile = std::stoll(value());
    else if (a == "--vector-width")
      tile.vectorWidth = std::stoll(value());
    else if (a == "--panel-blocks")
      tile.panelBlocks = std::stoll(value());
    else
      positional.push_back(a);
  }
  if (positional.size() == 3) {
    n = std::stoll(positional[0]);
    v = std::stoll(positional[1]);
    d = std::stoll(positional[2]);
  } else if (!positional.empty()) {
    die("expected N V D (three integers)");
  }

  mlir::DialectRegistry registry;
  registerLossJITDialects(registry);
  mlir::MLIRContext context(registry);
  LceGraphOptions o;
  o.dtype = dtype;
  auto fwdGraph = buildLinearCrossEntropyGraph(context, o);
  o.gradient = true;
  o.strategy = strategy;
  o.workspaceBytes = workspaceMiB << 20;
  auto bwdGraph = buildLinearCrossEntropyGraph(context, o);
  if (!fwdGraph || !bwdGraph)
    die("bad options");
  double t0 = now();
  auto fwd = CpuCompiledOp::compile(**fwdGraph, tile);
  auto bwd = CpuCompiledOp::compile(**bwdGraph, tile);
  if (!fwd || !bwd)
    die("compile failed");
  double compile = now() - t0;

  RandomLceOptions ro;
  ro.n = n, ro.v = v, ro.d = d, ro.dtype = dtype;
  RandomLceInputs in;
  makeRandomLceInputs(ro, in);
  int64_t es = dtype == "f32" ? 4 : 2;
  std::vector<char> gx(n * d * es), gw(v * d * es);
  std::vector<float> loss(1), lse(n), gradLoss = {1.0f};
  std::map<std::string, HostBuffer> base = {
      {"x", {const_cast<void *>(in.problem.x), dtype, n * d}},
      {"w", {const_cast<void *>(in.problem.w), dtype, v * d}},
      {"labels", {in.labels64.data(), "i64", n}}};
  auto fb = base;
  fb["loss"] = {loss.data(), "f32", 1};
  fb["lse"] = {lse.data(), "f32", n};
  auto bb = base;
  bb["lse"] = {lse.data(), "f32", n};
  bb["grad_loss"] = {gradLoss.data(), "f32", 1};
  bb["grad_x"] = {gx.data(), dtype, n * d};
  bb["grad_w"] = {gw.data(), dtype, v * d};

  double bestF = 1e30, bestB = 1e30, cpuF = 1e30, cpuB = 1e30, cpuFused = 1e30;
  int64_t peakF = 0, peakB = 0;
  for (int64_t r = 0; r < repeat; ++r) {
    int64_t before = peakRss(true);
    double s = now(), c = cpuNow();
    if (llvm::Error err = (*fwd)->run(fb, {n, v, d}, threads))
      die(llvm::toString(std::move(err)));
    bestF = std::min(bestF, now() - s);
    cpuF = std::min(cpuF, cpuNow() - c);
    peakF = std::max(peakF, peakRss(false) - before);
    before = peakRss(true);
    s = now(), c = cpuNow();
    if (llvm::Error err = (*bwd)->run(bb, {n, v, d}, threads))
      die(llvm::toString(std::move(err)));
    bestB = std::min(bestB, now() - s);
    cpuB = std::min(cpuB, cpuNow() - c);
    peakB = std::max(peakB, peakRss(false) - before);
  }
  // The fused forward+backward: loss and gradients in one pass (6·N·D·V).
  o.fusedForward = true;
  auto fusedGraph = buildLinearCrossEntropyGraph(context, o);
  if (!fusedGraph)
    die("bad fused options");
  auto fused = CpuCompiledOp::compile(**fusedGraph, tile);
  if (!fused)
    die("fused compile failed");
  auto fz = base;
  fz["loss"] = {loss.data(), "f32", 1};
  fz["lse"] = {lse.data(), "f32", n};
  fz["grad_x"] = {gx.data(), dtype, n * d};
  fz["grad_w"] = {gw.data(), dtype, v * d};
  double bestFused = 1e30;
  int64_t peakFused = 0;
  for (int64_t r = 0; r < (withFused ? repeat : 0); ++r) {
    int64_t before = peakRss(true);
    double s = now(), c = cpuNow();
    if (llvm::Error err = (*fused)->run(fz, {n, v, d}, threads))
      die(llvm::toString(std::move(err)));
    bestFused = std::min(bestFused, now() - s);
    cpuFused = std::min(cpuFused, cpuNow() - c);
    peakFused = std::max(peakFused, peakRss(false) - before);
  }
  if (withFused)
    printf("lossjit-cpu N=%lld V=%lld D=%lld %s fused forward+backward: %.3f s, extra peak "
           "RSS %.1f MiB\n",
           (long long)n, (long long)v, (long long)d, dtype.c_str(), bestFused,
           peakFused / 1048576.0);
  printf("lossjit-cpu N=%lld V=%lld D=%lld %s %s: compile %.3f s, forward %.3f s, "
         "backward %.3f s, fwd+bwd %.3f s, extra peak RSS fwd %.1f MiB bwd %.1f MiB, "
         "loss %.6f\n",
         (long long)n, (long long)v, (long long)d, dtype.c_str(), strategy.c_str(), compile,
         bestF, bestB, bestF + bestB, peakF / 1048576.0, peakB / 1048576.0, loss[0]);
  printf("lossjit-cpu N=%lld V=%lld D=%lld %s cpu seconds (all threads): forward %.3f, "
         "backward %.3f, fused %.3f\n",
         (long long)n, (long long)v, (long long)d, dtype.c_str(), cpuF, cpuB, cpuFused);
  return 0;
}
