//===- KernelBitsTest.cpp - the kernels' output bits, pinned --------------===//
//
// Every kernel family (forward, reduce, chunked and recompute backward, fused
// forward+backward, logit transforms) on both backends (the CPU JIT and the
// GPU kernels on the SIMT interpreter), for every storage type, hashed
// output by output and compared with KernelBits.golden. A refactoring of the
// kernel builders must not move a bit; a deliberate numerics change
// regenerates the table (LOSSJIT_UPDATE_GOLDEN=1 rewrites it) and says why
// in its commit. The CPU bits do not depend on the host CPU (CpuTargetBits),
// so the table holds on every machine.
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Pipeline/StageRunner.h"
#include "compiler/Target/CpuJit.h"
#include "runtime/Sha256.h"
#include "testing/reference/Reference.h"
#include "testing/simt/PlanRunner.h"
#include "tests/unit/CpuCompileCache.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

using namespace lossjit;

namespace {
/// One kernel family of the fused loss.
struct Variant {
  std::string name;
  bool gradient = false, fused = false;
  std::string strategy = "auto", reduction = "mean";
  double logitScale = 1.0, softcap = 0.0;
  bool bias = true, needsX = true, needsW = true;
};

std::vector<Variant> variants() {
  return {
      {"fwd-mean-scale-softcap", false, false, "auto", "mean", 0.5, 20.0},
      {"fwd-none", false, false, "auto", "none"},
      {"fwd-sum-nobias", false, false, "auto", "sum", 1.0, 0.0, false},
      {"bwd-chunked-mean-softcap", true, false, "chunked", "mean", 1.0, 20.0},
      {"bwd-chunked-none-dw-only", true, false, "chunked", "none", 1.0, 0.0, true, false},
      {"bwd-recompute-mean", true, false, "recompute", "mean"},
      {"bwd-recompute-none-scale", true, false, "recompute", "none", 2.0},
      {"fused-sum", true, true, "auto", "sum"},
      {"fused-mean-nobias-softcap", true, true, "auto", "mean", 1.0, 10.0, false},
      {"fused-vocab-mean", true, true, "vocab_chunked", "mean"},
  };
}

const char *kGoldenPath = LOSSJIT_SOURCE_DIR "/tests/unit/interpreter/KernelBits.golden";

std::map<std::string, std::string> readGolden() {
  std::map<std::string, std::string> table;
  std::ifstream in(kGoldenPath);
  std::string key, hash;
  while (in >> key >> hash)
    table[key] = hash;
  return table;
}

/// A way the GPU kernels run on the interpreter: the chip and tile they are
/// compiled for ("cpu" has none). Tensor-core tiles are small (one warp, one
/// warpgroup) so the shapes below still take several tiles and k steps.
struct Backend {
  std::string name, chip, tile;
  bool tensorCores() const { return tile.find("matmul=") != std::string::npos; }
};

const std::vector<Backend> &backends() {
  static const std::vector<Backend> all = {
      {"cpu", "", ""},
      {"simt", "sm_80", "block_rows=2,threads=32,splits=3"},
      {"mma", "sm_80", "matmul=mma_sync,block_rows=32,block_cols=32,threads=32,block_k=16,stages=2"},
      {"wgmma", "sm_90a",
       "matmul=wgmma,block_rows=64,threads=128,block_cols=16,block_k=16,stages=2"},
  };
  return all;
}

simt::ElementType simtType(const std::string &dtype) {
  if (dtype == "f16")
    return simt::ElementType::F16;
  if (dtype == "bf16")
    return simt::ElementType::BF16;
  if (dtype == "i64")
    return simt::ElementType::I64;
  if (dtype == "i32")
    return simt::ElementType::I32;
  return simt::ElementType::F32;
}

class KernelBits : public ::testing::Test {
protected:
  KernelBits() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  LceGraphOptions graphOptions(const Variant &v, const std::string &dtype) {
    LceGraphOptions o;
    o.dtype = dtype, o.bias = v.bias, o.reduction = v.reduction;
    o.logitScale = v.logitScale, o.softcap = v.softcap;
    o.gradient = v.gradient, o.fusedForward = v.fused, o.strategy = v.strategy;
    o.needsGradX = v.needsX, o.needsGradW = v.needsW;
    o.workspaceBytes = kN * 4 + 4 * kV * 4; // 4 rows per chunk: several chunks
    return o;
  }

  /// Output name → bytes, for `v` run on `backend` (a name of backends()).
  std::map<std::string, std::vector<char>> run(const Variant &v, const std::string &dtype,
                                               const std::string &backendName) {
    const Backend &backend = *llvm::find_if(
        backends(), [&](const Backend &b) { return b.name == backendName; });
    RandomLceOptions o;
    o.n = kN, o.v = kV, o.d = kD, o.dtype = dtype, o.bias = v.bias;
    o.ignoredFraction = 0.25, o.logitScale = 3.0, o.seed = 21;
    RandomLceInputs in;
    makeRandomLceInputs(o, in);
    if (!labels.empty()) {
      EXPECT_EQ(static_cast<int64_t>(labels.size()), kN);
      in.labels64 = labels;
      in.problem.labels = in.labels64.data();
    }
    const LceProblem &p = in.problem;
    std::vector<float> lse(kN), gradLoss(v.reduction == "none" ? kN : 1);
    for (size_t i = 0; i < gradLoss.size(); ++i)
      gradLoss[i] = 0.25f + 0.125f * static_cast<float>(i % 7);
    LceProblem scaled = p;
    scaled.logitScale = v.logitScale, scaled.softcap = v.softcap;
    LceReference ref = referenceLinearCrossEntropy(scaled);
    for (int64_t i = 0; i < kN; ++i)
      lse[i] = static_cast<float>(ref.lse[i]);
    std::map<std::string, HostBuffer> inputs = {
        {"x", {const_cast<void *>(p.x), dtype, kN * kD}},
        {"w", {const_cast<void *>(p.w), dtype, kV * kD}},
        {"bias", {const_cast<void *>(p.bias), dtype, kV}},
        {"labels", {const_cast<void *>(p.labels), p.labelType, kN}},
        {"lse", {lse.data(), "f32", kN}},
        {"grad_loss", {gradLoss.data(), "f32", static_cast<int64_t>(gradLoss.size())}}};

    auto graph = buildLinearCrossEntropyGraph(*context, graphOptions(v, dtype));
    EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    if (!graph)
      return {};
    std::vector<PlanParam> params;
    std::unique_ptr<CpuCompiledOp> cpu;
    std::optional<LaunchPlan> gpuPlan;
    if (backend.name == "cpu") {
      auto op = lossjit::test::compileCpuCached(**graph, CpuTileConfig{},
                                                cantFail(CpuTarget::resolve("native")));
      EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
      if (!op)
        return {};
      cpu = std::move(*op);
      params = cpu->plan().params;
    } else {
      std::vector<Stage> stages =
          gpuStages(GpuTarget{backend.chip, ""}, cantFail(TileConfig::parse(backend.tile)));
      while (stages.back().name != "kernels")
        stages.pop_back();
      auto timings = runStages(**graph, stages);
      EXPECT_TRUE(static_cast<bool>(timings)) << llvm::toString(timings.takeError());
      std::string error;
      auto plans = readLaunchPlans(**graph, error);
      EXPECT_TRUE(mlir::succeeded(plans)) << error;
      if (!timings || mlir::failed(plans))
        return {};
      gpuPlan = plans->front();
      params = gpuPlan->params;
    }
    std::map<std::string, std::vector<char>> outputs;
    std::map<std::string, HostBuffer> buffers;
    for (const PlanParam &param : params) {
      if (!param.isOutput) {
        buffers[param.name] = inputs.at(param.name);
        continue;
      }
      int64_t count = 1;
      for (const std::string &dim : param.shape)
        count *= dim == "N" ? kN : dim == "V" ? kV : dim == "D" ? kD : std::stoll(dim);
      outputs[param.name].assign(count * dtypeBytes(param.dtype), 0);
      buffers[param.name] = {outputs[param.name].data(), param.dtype, count};
    }
    if (cpu) {
      llvm::Error err = cpu->run(buffers, {kN, kV, kD});
      EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    } else {
      std::map<std::string, simt::SimtHostBuffer> simtBuffers;
      for (const auto &[name, b] : buffers)
        simtBuffers[name] = {b.data, simtType(b.dtype), b.count};
      llvm::Error err = simt::runPlanOnSimt(**graph, *gpuPlan, simtBuffers, {kN, kV, kD});
      EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    }
    return outputs;
  }

  int64_t kN = 11, kV = 53, kD = 13;
  /// The rows' labels (i64), in place of the random ones; empty: random.
  std::vector<int64_t> labels;
  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};

// Both backends sum every logit in ascending k with one fma per term (the
// CPU's packed micro-kernel and unpacked dot, the GPU's SIMT tile), so the
// logits agree bit for bit. With one vocabulary column the lse is the raw
// logit itself, whatever order each backend merges its statistics in.
// The row loss lse − z[label] then is exactly 0 when the label logit that
// lce_combine sums (its own tiles of 32 k, 32 rows a block: 45 rows make a
// second, padded block, 301 k nine whole tiles and a part) has the same
// bits as the sweep's.
TEST_F(KernelBits, CpuLogitsEqualTheSimtLogits) {
  kN = 45, kV = 1, kD = 301;
  Variant v{"fwd-none-logits", false, false, "auto", "none"};
  for (const std::string dtype : {"f32", "f16", "bf16"}) {
    SCOPED_TRACE(dtype);
    std::map<std::string, std::vector<char>> cpu = run(v, dtype, "cpu");
    std::map<std::string, std::vector<char>> simt = run(v, dtype, "simt");
    ASSERT_TRUE(cpu.count("lse") && simt.count("lse"));
    EXPECT_TRUE(cpu.at("lse") == simt.at("lse"));
    ASSERT_TRUE(cpu.count("loss") && simt.count("loss"));
    EXPECT_TRUE(cpu.at("loss") == simt.at("loss"));
    const std::vector<char> &loss = simt.at("loss");
    ASSERT_EQ(loss.size(), static_cast<size_t>(kN) * sizeof(float));
    for (int64_t i = 0; i < kN; ++i) {
      float rowLoss;
      std::memcpy(&rowLoss, loss.data() + i * sizeof(float), sizeof(float));
      EXPECT_EQ(rowLoss, 0.0f) << "row " << i;
    }
  }
}

TEST_F(KernelBits, CombineSkipsOnlyBlocksWithoutCountedRows) {
  // lce_combine blocks of 32 rows skip the label logits when none of their
  // rows counts (a run of masked prompt tokens). N = 100: rows 0..31 all
  // ignored (skipped); 32..63 all but row 45 and 64..95 all but their last
  // row 95 (each must still form its logits); 96..99 a part block, mixed.
  // Each row's loss against the CPU backend's (whose lse may differ in the
  // last bit: its splits are not the GPU's), ignored rows exactly 0. A
  // skipped label logit would leave a counted row's loss at its lse.
  kN = 100, kV = 37, kD = 70;
  labels.assign(kN, -100);
  for (int64_t row : {45, 95, 96, 98})
    labels[row] = (row * 7) % kV;
  Variant v{"fwd-none-masked", false, false, "auto", "none"};
  for (const std::string dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    std::map<std::string, std::vector<char>> cpu = run(v, dtype, "cpu");
    std::map<std::string, std::vector<char>> simt = run(v, dtype, "simt");
    ASSERT_TRUE(cpu.count("loss") && simt.count("loss") && cpu.count("lse") && simt.count("lse"));
    ASSERT_EQ(simt.at("loss").size(), static_cast<size_t>(kN) * sizeof(float));
    auto at = [](const std::vector<char> &bytes, int64_t i) {
      float value;
      std::memcpy(&value, bytes.data() + i * sizeof(float), sizeof(float));
      return value;
    };
    for (int64_t i = 0; i < kN; ++i) {
      const float lse = at(simt.at("lse"), i), loss = at(simt.at("loss"), i);
      EXPECT_NEAR(lse, at(cpu.at("lse"), i), 1e-5 * std::fabs(lse)) << "lse of row " << i;
      if (labels[i] < 0) {
        EXPECT_EQ(loss, 0.0f) << "ignored row " << i;
        continue;
      }
      EXPECT_NEAR(loss, at(cpu.at("loss"), i), 1e-5 * std::fabs(lse)) << "counted row " << i;
      EXPECT_GT(loss, 0.0f) << "counted row " << i;
    }
  }
}

TEST_F(KernelBits, EveryFamilyMatchesThePinnedBits) {
  std::map<std::string, std::string> golden = readGolden();
  std::map<std::string, std::string> got;
  for (const Backend &backend : backends())
    for (const std::string dtype : {"f32", "f16", "bf16"})
      for (const Variant &v : variants()) {
        // Tensor cores multiply 16-bit operands and do not build the
        // recompute backward.
        if (backend.tensorCores() && (dtype == "f32" || v.strategy == "recompute"))
          continue;
        // The SIMT keys predate the other GPU backends and keep their name.
        const std::string prefix =
            backend.tensorCores() ? "simt-" + backend.name : backend.name;
        for (const auto &[name, bytes] : run(v, dtype, backend.name))
          got[prefix + "/" + dtype + "/" + v.name + "/" + name] =
              runtime::sha256Hex(std::string_view(bytes.data(), bytes.size()));
      }
  if (const char *update = std::getenv("LOSSJIT_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream out(kGoldenPath);
    for (const auto &[key, hash] : got)
      out << key << " " << hash << "\n";
    GTEST_SKIP() << "rewrote " << kGoldenPath << " (" << got.size() << " outputs)";
  }
  ASSERT_FALSE(golden.empty()) << kGoldenPath << " is missing; run with LOSSJIT_UPDATE_GOLDEN=1";
  for (const auto &[key, hash] : got) {
    auto it = golden.find(key);
    if (it == golden.end()) {
      ADD_FAILURE() << key << " is not in the golden table";
      continue;
    }
    EXPECT_EQ(hash, it->second) << key << " changed bits";
  }
  for (const auto &[key, hash] : golden)
    EXPECT_TRUE(got.count(key)) << key << " is no longer produced";
}
} // namespace
