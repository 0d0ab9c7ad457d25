//===- CpuTargetBitsTest.cpp - the same bits on every JIT target ----------===//
//
// The CPU kernels fix the order of every sum themselves (every product
// element in ascending k with one explicit fma per term, conversions and
// exp2/log2 expanded to arithmetic), so the target CPU may change the speed
// but never a bit. This test holds the backend to that: every kernel family
// and storage type, compiled for x86-64-v2 (no FMA units: fma is a call),
// x86-64-v3, the host, and x86-64-v4 where the host runs it, gives
// byte-identical outputs, which also match the fp64 reference. The register
// tile (sized per target by CpuTileConfig::forVectorRegisters) and the
// vector width change which columns go through the packed micro-kernel and
// which through the unpacked dot, never a bit either.
//
//===----------------------------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Builder/VocabReduceGraph.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "testing/reference/Reference.h"

#include "mlir/IR/MLIRContext.h"
#include "tests/unit/CpuCompileCache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace lossjit;

namespace {
std::vector<CpuTarget> targets() {
  std::vector<CpuTarget> out;
  for (const char *spec : {"x86-64-v2", "x86-64-v3", "native", "x86-64-v4"})
    if (std::string(spec) != "x86-64-v4" || featuresMissingOnHost(spec).empty())
      out.push_back(cantFail(CpuTarget::resolve(spec)));
  return out;
}

/// Runs `run` for every target and expects the same bytes as the first's,
/// which it returns.
std::vector<std::vector<char>>
sameBitsOnEveryTarget(const std::function<std::vector<std::vector<char>>(const CpuTarget &)> &run) {
  std::vector<CpuTarget> all = targets();
  std::vector<std::vector<char>> first;
  for (const CpuTarget &target : all) {
    SCOPED_TRACE(target.cpu);
    std::vector<std::vector<char>> got = run(target);
    EXPECT_FALSE(got.empty());
    if (first.empty()) {
      first = got;
      continue;
    }
    EXPECT_EQ(got.size(), first.size());
    for (size_t i = 0; i < std::min(got.size(), first.size()); ++i)
      EXPECT_TRUE(got[i] == first[i])
          << "output " << i << " differs between " << all.front().cpu << " and " << target.cpu;
  }
  return first;
}

/// One kernel family of the CPU backend.
struct Family {
  std::string name;
  bool gradient = false, fused = false;
  std::string strategy = "auto", reduction = "mean";
  double logitScale = 1.0, softcap = 0.0;
};

std::vector<Family> families() {
  return {
      {"forward, scale and softcap, mean", false, false, "auto", "mean", 0.5, 20.0},
      {"forward, none", false, false, "auto", "none"},
      {"backward chunked, softcap", true, false, "chunked", "mean", 1.0, 20.0},
      {"backward recompute, none", true, false, "recompute", "none"},
      {"fused forward+backward, sum", true, true, "chunked", "sum"},
  };
}

class CpuTargetBits : public ::testing::TestWithParam<std::string> {
protected:
  CpuTargetBits() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  /// Runs `family` for `target` and returns every output buffer's bytes
  /// (in plan order) after checking the loss/lse against fp64.
  std::vector<std::vector<char>> run(const Family &family, const CpuTarget &target,
                                     const RandomLceInputs &in,
                                     const CpuTileConfig &tile = CpuTileConfig{}) {
    const LceProblem &p = in.problem;
    LceGraphOptions o;
    o.dtype = p.dtype, o.bias = true, o.reduction = family.reduction;
    o.logitScale = family.logitScale, o.softcap = family.softcap;
    o.gradient = family.gradient, o.fusedForward = family.fused, o.strategy = family.strategy;
    // A small budget makes the chunked schedules run several chunks.
    o.workspaceBytes = p.n * 4 + 5 * p.v * 4;
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    if (!graph)
      return {};
    auto op = lossjit::test::compileCpuCached(**graph, tile, target);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    if (!op)
      return {};
    LceProblem scaled = p;
    scaled.logitScale = family.logitScale, scaled.softcap = family.softcap;
    scaled.reduction = family.reduction;
    LceReference ref = referenceLinearCrossEntropy(scaled);
    std::vector<float> lse(ref.lse.begin(), ref.lse.end());
    std::vector<float> gradLoss(family.reduction == "none" ? p.n : 1, 0.75f);
    std::map<std::string, HostBuffer> inputs = {
        {"x", {const_cast<void *>(p.x), p.dtype, p.n * p.d}},
        {"w", {const_cast<void *>(p.w), p.dtype, p.v * p.d}},
        {"bias", {const_cast<void *>(p.bias), p.dtype, p.v}},
        {"labels", {const_cast<void *>(p.labels), p.labelType, p.n}},
        {"lse", {lse.data(), "f32", p.n}},
        {"grad_loss", {gradLoss.data(), "f32", static_cast<int64_t>(gradLoss.size())}}};
    std::map<std::string, HostBuffer> buffers;
    std::vector<std::vector<char>> outputs;
    outputs.reserve((*op)->plan().params.size());
    for (const PlanParam &param : (*op)->plan().params) {
      if (!param.isOutput) {
        buffers[param.name] = inputs.at(param.name);
        continue;
      }
      int64_t count = 1;
      for (const std::string &dim : param.shape)
        count *= dim == "N" ? p.n : dim == "V" ? p.v : dim == "D" ? p.d : std::stoll(dim);
      outputs.emplace_back(count * dtypeBytes(param.dtype), 0x55);
      buffers[param.name] = {outputs.back().data(), param.dtype, count};
    }
    llvm::Error err = (*op)->run(buffers, {p.n, p.v, p.d});
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    // The bits being equal would mean little if they were wrong.
    if (auto it = buffers.find("lse"); it != buffers.end() && it->second.data != lse.data()) {
      const float *got = static_cast<const float *>(it->second.data);
      for (int64_t i = 0; i < p.n; ++i)
        EXPECT_NEAR(got[i], ref.lse[i], 1e-4 * std::fabs(ref.lse[i]) + 1e-6) << "lse " << i;
    }
    if (auto it = buffers.find("grad_w"); it != buffers.end()) {
      std::vector<double> g(gradLoss.begin(), gradLoss.end());
      if (family.fused)
        g = {1.0};
      LceGradReference gref = referenceLinearCrossEntropyGrad(scaled, g);
      EXPECT_LE(relativeL2Error(it->second.data, p.dtype, gref.gradW),
                p.dtype == "f32" ? 1e-4 : 1e-2);
    }
    return outputs;
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};

TEST_P(CpuTargetBits, EveryFamilyGivesTheSameBitsOnEveryTarget) {
  RandomLceOptions o;
  o.n = 19, o.v = 157, o.d = 37, o.dtype = GetParam(), o.bias = true;
  o.ignoredFraction = 0.2, o.logitScale = 4.0;
  RandomLceInputs in;
  makeRandomLceInputs(o, in);
  for (const Family &family : families()) {
    SCOPED_TRACE(family.name);
    sameBitsOnEveryTarget([&](const CpuTarget &target) { return run(family, target, in); });
  }
}

TEST_P(CpuTargetBits, EveryRegisterTileGivesTheSameBits) {
  RandomLceOptions o;
  o.n = 19, o.v = 157, o.d = 37, o.dtype = GetParam(), o.bias = true;
  o.ignoredFraction = 0.2, o.logitScale = 4.0;
  RandomLceInputs in;
  makeRandomLceInputs(o, in);
  // The tiles each target gets, and odd ones: with V = 157 and 64-column
  // vocabulary tiles, the last tile's 29 columns split into packed blocks
  // of 32/24/16/8/4 and unpacked columns differently for each.
  std::vector<std::pair<std::string, CpuTileConfig>> tiles;
  for (int64_t registers : {32, 16, 8})
    tiles.push_back({"registers=" + std::to_string(registers),
                     CpuTileConfig::forVectorRegisters(registers)});
  CpuTileConfig odd;
  odd.blockRows = 3, odd.blockCols = 3, odd.vectorWidth = 4, odd.panelBlocks = 2;
  tiles.push_back({"3x3x4", odd});
  odd.blockRows = 5, odd.blockCols = 1, odd.vectorWidth = 16, odd.panelBlocks = 1;
  tiles.push_back({"5x1x16", odd});
  CpuTarget host = cantFail(CpuTarget::resolve("native"));
  for (const Family &family : families()) {
    SCOPED_TRACE(family.name);
    std::vector<std::vector<char>> first = run(family, host, in);
    ASSERT_FALSE(first.empty());
    for (const auto &[name, tile] : tiles) {
      SCOPED_TRACE(name);
      std::vector<std::vector<char>> got = run(family, host, in, tile);
      ASSERT_EQ(got.size(), first.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(got[i] == first[i]) << "output " << i << " differs with tile " << tile.str();
    }
  }
}

/// The teacher's logits are dot products over its own hidden size T, which
/// the host forms with 16-lane accumulators in a fixed tree (not the
/// target's vector width): distillation statistics and their derived
/// gradients are the same bits on every target, and right; so are the
/// generalized JSD's dependent sums (a second sweep) and their gradient.
TEST_P(CpuTargetBits, TeacherStatisticsAndGradientsGiveTheSameBitsOnEveryTarget) {
  const std::string dtype = GetParam();
  RandomLceOptions o;
  o.n = 11, o.v = 157, o.d = 37, o.dtype = dtype, o.bias = false, o.logitScale = 4.0;
  RandomLceInputs student, teacher;
  makeRandomLceInputs(o, student);
  // T = 150: two whole 64-wide steps of the vector dot and a 22-long tail.
  o.d = 150, o.seed = 7, o.logitScale = 3.0;
  makeRandomLceInputs(o, teacher);
  const LceProblem &p = student.problem, &t = teacher.problem;
  // The KL statistics, and the JSD's dependent sums (a second sweep).
  for (const std::vector<std::string> &stats :
       {std::vector<std::string>{"lse", "teacher_lse", "teacher_entropy", "cross_entropy"},
        std::vector<std::string>{"lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"}}) {
    SCOPED_TRACE(stats.back());
    // The forward's statistics, then (from the first target's statistics) the
    // gradients of 0.75·cross_entropy − 0.3·teacher_entropy (or 0.75·jsd).
    std::vector<std::vector<float>> saved;
    std::vector<float> adjoint(p.n, 0.75f), zero(p.n, 0.0f), other(p.n, -0.3f);
    auto runOn = [&](const CpuTarget &target, bool gradient) {
      VocabReduceGraphOptions g;
      g.dtype = dtype, g.statistics = stats, g.teacher = true, g.teacherScale = 0.5;
      g.jsdBeta = stats.back() == "jsd" ? 0.3 : 0.5;
      g.gradient = gradient, g.strategy = "chunked";
      g.workspaceBytes = p.n * 4 + 5 * p.v * 4; // several chunks
      auto graph = buildVocabReduceGraph(*context, g);
      EXPECT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
      auto op = lossjit::test::compileCpuCached(**graph, CpuTileConfig{}, target);
      EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
      std::map<std::string, HostBuffer> buffers = {
          {"x", {const_cast<void *>(p.x), dtype, p.n * p.d}},
          {"w", {const_cast<void *>(p.w), dtype, p.v * p.d}},
          {"teacher_x", {const_cast<void *>(t.x), dtype, t.n * t.d}},
          {"teacher_w", {const_cast<void *>(t.w), dtype, t.v * t.d}}};
      auto reads = [&](const std::string &name) {
        for (const PlanParam &param : (*op)->plan().params)
          if (param.name == name)
            return true;
        return false;
      };
      for (size_t k = 0; gradient && k < stats.size(); ++k) {
        if (reads(stats[k])) // the saved statistics the adjoints read
          buffers[stats[k]] = {saved[k].data(), "f32", p.n};
        float *g = stats[k] == "cross_entropy" || stats[k] == "jsd" ? adjoint.data()
                   : stats[k] == "teacher_entropy"                  ? other.data()
                                                                    : zero.data();
        buffers["grad_" + stats[k]] = {g, "f32", p.n};
      }
      std::vector<std::vector<char>> outputs;
      outputs.reserve((*op)->plan().params.size());
      for (const PlanParam &param : (*op)->plan().params) {
        if (!param.isOutput)
          continue;
        int64_t count = 1;
        for (const std::string &dim : param.shape)
          count *= dim == "N" ? p.n : dim == "V" ? p.v : dim == "D" ? p.d : t.d;
        outputs.emplace_back(count * dtypeBytes(param.dtype), 0x55);
        buffers[param.name] = {outputs.back().data(), param.dtype, count};
      }
      llvm::Error err = (*op)->run(buffers, {p.n, p.v, p.d, t.d});
      EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
      return outputs;
    };
    for (bool gradient : {false, true}) {
      SCOPED_TRACE(gradient ? "backward" : "forward");
      std::vector<std::vector<char>> first = sameBitsOnEveryTarget(
          [&](const CpuTarget &target) { return runOn(target, gradient); });
      if (!gradient) {
        ASSERT_EQ(first.size(), stats.size());
        for (const std::vector<char> &bytes : first) {
          const float *f = reinterpret_cast<const float *>(bytes.data());
          saved.emplace_back(f, f + p.n);
        }
        // teacher_lse against fp64: u = 0.5 · x'·w'ᵀ (the inputs as stored).
        LceProblem scaled = t;
        scaled.logitScale = 0.5;
        LceReference ref = referenceLinearCrossEntropy(scaled);
        for (int64_t i = 0; i < p.n; ++i)
          EXPECT_NEAR(saved[1][i], ref.lse[i], 1e-4 * std::fabs(ref.lse[i]) + 1e-5) << "row " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(StorageTypes, CpuTargetBits, ::testing::Values("f32", "f16", "bf16"));
} // namespace
