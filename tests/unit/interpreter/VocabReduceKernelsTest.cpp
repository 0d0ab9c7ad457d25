//===- VocabReduceKernelsTest.cpp - the row statistics on both backends ---===//
//
// loss.vocab_reduce and its derived backward, lowered to the GPU kernels
// (run by the SIMT interpreter: SIMT and tensor-core logits) and to the host
// kernels (LLVM JIT: row-chunked, vocabulary-chunked and recompute
// schedules), against the fp64 oracle written from the statistics'
// definitions (testing/reference/VocabReduceReference.h). Also: the
// cross-entropy op is the special case {lse, label_logit}: its lse and row
// loss are the reduction's bits.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Builder/VocabReduceGraph.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Pipeline/StageRunner.h"
#include "compiler/Target/CpuJit.h"
#include "dialects/Loss/LossOps.h"
#include "testing/reference/HalfFloat.h"
#include "testing/reference/VocabReduceReference.h"
#include "testing/simt/PlanRunner.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace lossjit;

namespace {
struct Case {
  int64_t n, v, d;
  std::string dtype = "f32";
  std::vector<std::string> statistics = {"lse", "label_logit", "logit_sum", "entropy"};
  bool bias = false, classWeights = false;
  double scale = 1.0, cap = 0.0;
  double magnitude = 4.0; ///< typical |x·w|.
  double ignored = 0.2;   ///< fraction of rows labelled ignore_index.
  std::string strategy = "chunked";
  std::string tile = "block_rows=2,threads=32,splits=3";
  int64_t labelsPerRow = 0; ///< K labels per row (a top-K gather); 0: one.
  std::string targets;      ///< dtype of [N, V] class-probability targets, "" none.
  int64_t teacherDim = 0;   ///< T: a teacher of hidden size T; 0 none.
  bool teacherBias = false;
  double teacherScale = 1.0;
  double jsdBeta = 0.5; ///< β of jsd / mixture_kl.
  std::string chip = "sm_80"; ///< the GPU lowering's chip.
};

std::string describe(const Case &c) {
  std::string stats;
  for (const std::string &s : c.statistics)
    stats += (stats.empty() ? "" : ",") + s;
  return "N=" + std::to_string(c.n) + " V=" + std::to_string(c.v) + " D=" + std::to_string(c.d) +
         " " + c.dtype + " {" + stats + "}" + (c.bias ? " bias" : "") +
         (c.classWeights ? " class_weights" : "") + " scale=" + loss::formatF64(c.scale) +
         " cap=" + loss::formatF64(c.cap) + " " + c.strategy + " tile=" + c.tile +
         (c.labelsPerRow ? " K=" + std::to_string(c.labelsPerRow) : "") +
         (c.targets.empty() ? "" : " targets " + c.targets) +
         (c.teacherDim ? " teacher T=" + std::to_string(c.teacherDim) +
                             (c.teacherBias ? "+bias" : "") +
                             " scale=" + loss::formatF64(c.teacherScale)
                       : "");
}

bool has(const Case &c, const std::string &name) {
  return std::find(c.statistics.begin(), c.statistics.end(), name) != c.statistics.end();
}

/// Random inputs of one case, the oracle's view of them and the buffers.
struct Inputs {
  RandomLceInputs random;
  std::vector<int64_t> labelsK; ///< N·K labels when the case has K per row.
  std::vector<double> targets64;   ///< [N, V] targets as the oracle reads them.
  std::vector<float> targets32;    ///< ... stored as f32,
  std::vector<uint16_t> targets16; ///< ... or as the 16-bit storage type.
  TeacherProblem teacher;               ///< the teacher as the oracle reads it,
  std::vector<float> teacher32[3];      ///< stored (x', w', b') as f32,
  std::vector<uint16_t> teacher16[3];   ///< or as the 16-bit storage type.
  std::vector<float> classWeights;
  std::vector<double> classWeights64;
  std::map<std::string, HostBuffer> buffers;
};

class VocabReduceKernels : public ::testing::Test {
protected:
  VocabReduceKernels() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
  }

  VocabReduceGraphOptions options(const Case &c, bool gradient) {
    VocabReduceGraphOptions o;
    o.dtype = c.dtype;
    o.statistics = c.statistics;
    o.bias = c.bias;
    o.classWeights = c.classWeights;
    o.logitScale = c.scale;
    o.softcap = c.cap;
    o.gradient = gradient;
    o.strategy = c.strategy;
    o.labelsPerRow = c.labelsPerRow;
    o.targets = c.targets;
    o.teacher = c.teacherDim > 0;
    o.teacherBias = c.teacherBias;
    o.teacherScale = c.teacherScale;
    o.jsdBeta = c.jsdBeta;
    return o;
  }

  /// Elements of statistic `s`: N, or N·K for label_logit of K labels.
  static int64_t countOf(const Case &c, const std::string &s) {
    return s == "label_logit" && c.labelsPerRow ? c.n * c.labelsPerRow : c.n;
  }

  void makeInputs(const Case &c, Inputs &in) {
    RandomLceOptions o;
    o.n = c.n, o.v = c.v, o.d = c.d, o.dtype = c.dtype;
    o.bias = c.bias, o.ignoredFraction = c.ignored, o.logitScale = c.magnitude, o.seed = 7;
    makeRandomLceInputs(o, in.random);
    LceProblem &p = in.random.problem;
    p.logitScale = c.scale;
    p.softcap = c.cap;
    if (!has(c, "label_logit"))
      p.labels = nullptr;
    in.buffers = {{"x", {const_cast<void *>(p.x), c.dtype, c.n * c.d}},
                  {"w", {const_cast<void *>(p.w), c.dtype, c.v * c.d}}};
    if (p.labels && c.labelsPerRow) {
      // K labels per row: distinct, repeated and ignored entries.
      std::mt19937 rng(5);
      std::uniform_int_distribution<int64_t> u(0, c.v - 1);
      for (int64_t i = 0; i < c.n * c.labelsPerRow; ++i)
        in.labelsK.push_back(i % 5 == 3 ? -100 : i % 7 == 6 ? in.labelsK.back() : u(rng));
      p.labels = in.labelsK.data();
      in.buffers["labels"] = {in.labelsK.data(), "i64", c.n * c.labelsPerRow};
    } else if (p.labels) {
      in.buffers["labels"] = {in.random.labels64.data(), "i64", c.n};
    }
    if (c.bias)
      in.buffers["bias"] = {const_cast<void *>(p.bias), c.dtype, c.v};
    if (!c.targets.empty()) {
      // Rows of class probabilities (a softmax of random scores), rounded
      // once to the targets' type; the oracle reads the rounded values.
      std::mt19937 rng(9);
      std::normal_distribution<float> score(0.0f, 2.0f);
      for (int64_t i = 0; i < c.n; ++i) {
        std::vector<float> row(c.v);
        float total = 0;
        for (float &t : row)
          total += (t = std::exp(score(rng)));
        for (float t : row) {
          float value = t / total;
          if (c.targets == "f32")
            in.targets32.push_back(value);
          else
            in.targets16.push_back(c.targets == "f16" ? floatToHalf(value)
                                                      : floatToBfloat16(value));
          in.targets64.push_back(c.targets == "f32" ? value
                                 : c.targets == "f16" ? halfToFloat(in.targets16.back())
                                                      : bfloat16ToFloat(in.targets16.back()));
        }
      }
      void *data = c.targets == "f32" ? static_cast<void *>(in.targets32.data())
                                      : static_cast<void *>(in.targets16.data());
      in.buffers["targets"] = {data, c.targets, c.n * c.v};
    }
    if (c.teacherDim) {
      // The teacher's x' [N, T], w' [V, T] and b' [V], rounded once to storage.
      std::mt19937 rng(13);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      in.teacher.t = c.teacherDim;
      in.teacher.scale = c.teacherScale;
      in.teacher.beta = c.jsdBeta;
      const int64_t counts[3] = {c.n * c.teacherDim, c.v * c.teacherDim, c.teacherBias ? c.v : 0};
      const float scales[3] = {1.0f, 3.0f / std::sqrt(float(c.teacherDim)), 0.5f};
      std::vector<double> *oracle[3] = {&in.teacher.x, &in.teacher.w, &in.teacher.bias};
      const char *names[3] = {"teacher_x", "teacher_w", "teacher_bias"};
      for (int b = 0; b < 3; ++b) {
        for (int64_t i = 0; i < counts[b]; ++i) {
          float value = normal(rng) * scales[b];
          if (c.dtype == "f32") {
            in.teacher32[b].push_back(value);
            oracle[b]->push_back(value);
          } else {
            in.teacher16[b].push_back(c.dtype == "f16" ? floatToHalf(value)
                                                       : floatToBfloat16(value));
            oracle[b]->push_back(c.dtype == "f16" ? halfToFloat(in.teacher16[b].back())
                                                  : bfloat16ToFloat(in.teacher16[b].back()));
          }
        }
        if (!counts[b])
          continue;
        void *data = c.dtype == "f32" ? static_cast<void *>(in.teacher32[b].data())
                                      : static_cast<void *>(in.teacher16[b].data());
        in.buffers[names[b]] = {data, c.dtype, counts[b]};
      }
    }
    if (c.classWeights) {
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> u(0.1f, 2.0f);
      for (int64_t j = 0; j < c.v; ++j)
        in.classWeights.push_back(u(rng));
      in.classWeights64.assign(in.classWeights.begin(), in.classWeights.end());
      in.buffers["class_weights"] = {in.classWeights.data(), "f32", c.v};
    }
  }

  /// Runs `c`'s forward or backward graph on the host kernels.
  void runOnCpu(const Case &c, bool gradient, std::map<std::string, HostBuffer> buffers) {
    auto graph = buildVocabReduceGraph(*context, options(c, gradient));
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    auto op = simt::test::compileCpuReference(**graph);
    ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    llvm::Error err = (*op)->run(buffers, {c.n, c.v, c.d, c.teacherDim});
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  }

  /// Lowers `c`'s graph to GPU kernels with `c.tile` and runs its plan on
  /// the interpreter.
  void runOnSimt(const Case &c, bool gradient, const std::map<std::string, HostBuffer> &buffers) {
    auto graph = buildVocabReduceGraph(*context, options(c, gradient));
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    auto tile = TileConfig::parse(c.tile);
    ASSERT_TRUE(static_cast<bool>(tile)) << llvm::toString(tile.takeError());
    std::vector<Stage> stages = gpuStages(GpuTarget{c.chip}, *tile);
    while (stages.back().name != "kernels")
      stages.pop_back();
    auto timings = runStages(**graph, stages);
    ASSERT_TRUE(static_cast<bool>(timings)) << llvm::toString(timings.takeError());
    std::string error;
    auto plans = readLaunchPlans(**graph, error);
    ASSERT_TRUE(mlir::succeeded(plans)) << error;
    EXPECT_EQ(plans->front().op, "vocab_reduce");
    std::map<std::string, simt::SimtHostBuffer> simtBuffers;
    for (const auto &[name, b] : buffers)
      simtBuffers[name] = {b.data, simt::elementTypeOf(b.dtype), b.count};
    std::vector<int64_t> dims = {c.n, c.v, c.d};
    if (c.teacherDim)
      dims.push_back(c.teacherDim);
    llvm::Error err = simt::runPlanOnSimt(**graph, plans->front(), simtBuffers, dims);
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  }

  /// The forward's statistics on `backend` ("cpu" or "simt").
  std::map<std::string, std::vector<float>> forward(const Case &c, Inputs &in,
                                                    const std::string &backend) {
    std::map<std::string, std::vector<float>> out;
    auto buffers = in.buffers;
    for (const std::string &s : c.statistics) {
      out[s].assign(countOf(c, s), -12345.0f);
      buffers[s] = {out[s].data(), "f32", countOf(c, s)};
    }
    if (backend == "cpu")
      runOnCpu(c, false, buffers);
    else
      runOnSimt(c, false, buffers);
    return out;
  }

  void checkForward(const Case &c, const std::string &backend) {
    SCOPED_TRACE(backend + " " + describe(c));
    Inputs in;
    makeInputs(c, in);
    auto got = forward(c, in, backend);
    auto want = referenceVocabReduce(in.random.problem, in.classWeights64, c.labelsPerRow,
                                     in.targets64, in.teacher);
    for (const std::string &s : c.statistics)
      for (int64_t i = 0; i < countOf(c, s); ++i) {
        int64_t row = s == "label_logit" && c.labelsPerRow ? i / c.labelsPerRow : i;
        double ref = want[s][i], scaleOfRow = std::fabs(want["lse"][row]) + std::fabs(ref) + 1.0;
        // logit_sum adds V terms of |z|: its rounding grows with their size.
        if (s == "logit_sum" || s == "target_logit_sum")
          scaleOfRow = c.v * (c.magnitude + 1.0);
        EXPECT_LE(std::fabs(got[s][i] - ref), 2e-6 * scaleOfRow)
            << s << " row " << i << " got " << got[s][i] << " want " << ref;
      }
  }

  /// Forward and derived backward of `c` on the host and on the GPU kernels.
  void checkBothBackends(const Case &c) {
    checkForward(c, "cpu");
    checkForward(c, "simt");
    checkBackwardOnBothBackends(c);
  }
  /// The derived backward of `c` on the host and on the GPU kernels.
  void checkBackwardOnBothBackends(const Case &c) {
    checkBackward(c, "cpu");
    checkBackward(c, "simt");
  }

  void checkBackward(const Case &c, const std::string &backend) {
    SCOPED_TRACE(backend + " " + describe(c));
    Inputs in;
    makeInputs(c, in);
    auto stats = forward(c, in, "cpu");
    std::map<std::string, std::vector<float>> adjoints;
    std::map<std::string, std::vector<double>> adjoints64;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.5f, 1.5f);
    auto buffers = in.buffers;
    for (const std::string &s : c.statistics) {
      // mixture_p2 is saved for mixture_kl's rule, not differentiated: 0.
      for (int64_t i = 0; i < countOf(c, s); ++i)
        adjoints[s].push_back(s == "mixture_p2" ? 0.0f : u(rng));
      adjoints64[s].assign(adjoints[s].begin(), adjoints[s].end());
      // The backward reads the saved lse, entropy, teacher lse and reverse
      // cross-entropy (its adjoints' rules do); the plan refuses any other
      // buffer.
      auto has = [&](const char *name) {
        return std::find(c.statistics.begin(), c.statistics.end(), name) != c.statistics.end();
      };
      bool teacherAdjoint = has("cross_entropy") || has("reverse_cross_entropy") ||
                            has("jsd") || has("mixture_kl");
      if (s == "lse" || s == "entropy" || s == "reverse_cross_entropy" ||
          (s == "teacher_lse" && teacherAdjoint) || s == "mixture_kl" || s == "mixture_p2")
        buffers[s] = {stats[s].data(), "f32", c.n};
      buffers["grad_" + s] = {adjoints[s].data(), "f32", countOf(c, s)};
    }
    const int64_t es = c.dtype == "f32" ? 4 : 2;
    std::vector<char> gx(c.n * c.d * es), gw(c.v * c.d * es), gb(c.v * es);
    buffers["grad_x"] = {gx.data(), c.dtype, c.n * c.d};
    buffers["grad_w"] = {gw.data(), c.dtype, c.v * c.d};
    if (c.bias)
      buffers["grad_bias"] = {gb.data(), c.dtype, c.v};
    if (backend == "cpu")
      runOnCpu(c, true, buffers);
    else
      runOnSimt(c, true, buffers);
    LceGradReference want = referenceVocabReduceGrad(
        in.random.problem, in.classWeights64, adjoints64, c.labelsPerRow, in.targets64, in.teacher);
    // The products are f32 from storage-rounded inputs: one rounding of
    // the result to storage dominates for 16-bit types.
    const double tol = c.dtype == "f32" ? 2e-5 : c.dtype == "f16" ? 2e-3 : 1e-2;
    EXPECT_LE(relativeL2Error(gx.data(), c.dtype, want.gradX), tol) << "grad_x";
    EXPECT_LE(relativeL2Error(gw.data(), c.dtype, want.gradW), tol) << "grad_w";
    if (c.bias)
      EXPECT_LE(relativeL2Error(gb.data(), c.dtype, want.gradBias), tol) << "grad_bias";
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
};
} // namespace

TEST_F(VocabReduceKernels, EveryStatisticOnTheHost) {
  for (std::string dtype : {"f32", "f16", "bf16"}) {
    Case c{9, 53, 12, dtype};
    c.bias = true;
    c.classWeights = true;
    checkForward(c, "cpu");
  }
}

TEST_F(VocabReduceKernels, EveryStatisticOnTheGpuKernels) {
  for (std::string dtype : {"f32", "bf16"}) {
    Case c{7, 45, 10, dtype};
    c.bias = true;
    c.classWeights = true;
    checkForward(c, "simt");
  }
  // Tensor-core logits (mma_sync) carry the same statistics.
  Case tc{21, 70, 40, "f16"};
  tc.classWeights = true;
  tc.tile = "matmul=mma_sync";
  checkForward(tc, "simt");
}

TEST_F(VocabReduceKernels, StatisticSubsetsAndLogitMaps) {
  Case entropyOnly{6, 31, 8, "f32", {"entropy"}};
  entropyOnly.scale = 1.0 / 0.7;
  checkForward(entropyOnly, "cpu");
  checkForward(entropyOnly, "simt");
  Case sumOnly{5, 29, 7, "bf16", {"logit_sum"}};
  sumOnly.cap = 6.0;
  sumOnly.magnitude = 20.0;
  checkForward(sumOnly, "cpu");
  checkForward(sumOnly, "simt");
  Case logProb{8, 40, 9, "f16", {"label_logit", "lse"}};
  logProb.cap = 15.0;
  logProb.scale = 0.5;
  checkForward(logProb, "cpu");
  checkForward(logProb, "simt");
}

TEST_F(VocabReduceKernels, TensorCoreRowsFoldMaskedStreamsTogether) {
  // When every carried kind folds its stream masked to −inf (the softmax
  // entropy, the teacher's too), RowStats::pushRows masks a fragment's rows
  // a column at a time before their folds. V = 300 in 2 splits of 150
  // columns: whole tiles (mma.sync's 64 columns twice, wgmma's 128 once),
  // then a ragged last tile whose masked columns must add nothing; the
  // bias and the softcap reach the streams before the masks.
  for (bool teacher : {false, true}) {
    SCOPED_TRACE(teacher);
    Case tc{21, 300, 40, "f16", {"lse", "entropy"}};
    if (teacher) {
      tc.statistics = {"lse", "entropy", "teacher_lse", "teacher_entropy"};
      tc.teacherDim = 24;
      tc.teacherBias = true;
    }
    tc.bias = true;
    tc.cap = 12.0;
    tc.tile = "matmul=mma_sync,splits=2";
    checkForward(tc, "simt");
    tc.dtype = "bf16";
    tc.chip = "sm_90a";
    tc.tile = "matmul=wgmma,block_k=64,stages=3,splits=2,tma=2";
    checkForward(tc, "simt");
  }
}

TEST_F(VocabReduceKernels, LongRowsKeepEntropyAndSumsAccurate) {
  // 3 rows over 20000 columns: the wide (compensated) states keep the sums'
  // error that of one vocabulary tile.
  Case c{3, 20000, 4, "f32"};
  c.classWeights = true;
  c.magnitude = 2.0;
  checkForward(c, "cpu");
}

TEST_F(VocabReduceKernels, DerivedBackwardOnTheHost) {
  for (std::string dtype : {"f32", "bf16"})
    for (std::string strategy : {"chunked", "recompute", "auto"}) {
      Case c{11, 47, 13, dtype};
      c.bias = true;
      c.classWeights = true;
      c.cap = 12.0;
      c.magnitude = 10.0;
      c.strategy = strategy;
      checkBackward(c, "cpu");
    }
}

TEST_F(VocabReduceKernels, DerivedBackwardOnTheGpuKernels) {
  for (std::string strategy : {"chunked", "recompute"}) {
    Case c{7, 41, 9, "f32"};
    c.bias = true;
    c.classWeights = true;
    c.scale = 0.75;
    c.strategy = strategy;
    checkBackward(c, "simt");
  }
  // Tensor-core logits; the gradient products stay SIMT on f32 dZ.
  Case tc{20, 66, 36, "bf16"};
  tc.tile = "matmul=mma_sync";
  checkBackward(tc, "simt");
}

TEST_F(VocabReduceKernels, EachAdjointAlone) {
  for (std::vector<std::string> stats :
       {std::vector<std::string>{"lse"}, {"label_logit"}, {"logit_sum"}, {"lse", "entropy"}}) {
    Case c{6, 33, 8, "f32", stats};
    checkBackwardOnBothBackends(c);
  }
}

TEST_F(VocabReduceKernels, SeveralLabelsPerRow) {
  // A top-K gather: K label logits per row (repeated and ignored entries
  // included), forward and backward, on both backends.
  for (std::string dtype : {"f32", "bf16"}) {
    Case c{9, 43, 11, dtype, {"lse", "label_logit"}};
    c.labelsPerRow = 5;
    c.cap = 20.0;
    checkBothBackends(c);
  }
  Case recompute{7, 37, 8, "f32", {"lse", "label_logit", "entropy"}};
  recompute.labelsPerRow = 3;
  recompute.strategy = "recompute";
  checkBackwardOnBothBackends(recompute);
  // Labels spread over several host vocabulary tiles (the chunked dZ
  // kernels scatter each tile's label adjoints once per row block): the
  // row-chunked and the vocabulary-chunked schedule.
  for (std::string strategy : {"chunked", "auto"}) {
    Case wide{11, 300, 9, "bf16", {"lse", "label_logit"}};
    wide.labelsPerRow = 7;
    wide.strategy = strategy;
    checkBackward(wide, "cpu");
  }
}

TEST_F(VocabReduceKernels, ClassProbabilityTargets) {
  // target_logit_sum = Σ_j c_j t_j z_j with [N, V] targets in f32 or in
  // the storage type, next to the other statistics, forward and backward.
  for (auto [dtype, targets] : {std::pair<std::string, std::string>{"f32", "f32"},
                                {"bf16", "bf16"},
                                {"f16", "f32"}}) {
    Case c{8, 41, 10, dtype, {"lse", "logit_sum", "target_logit_sum"}};
    c.targets = targets;
    c.classWeights = true;
    c.bias = true;
    c.cap = 15.0;
    checkBothBackends(c);
  }
  Case recompute{6, 37, 8, "f32", {"lse", "target_logit_sum"}};
  recompute.targets = "f32";
  recompute.strategy = "recompute";
  checkBackwardOnBothBackends(recompute);
}

TEST_F(VocabReduceKernels, TeacherStatistics) {
  // A teacher stream of its own hidden size (T ≠ D), with a bias and a
  // temperature: its lse and entropy, and both cross-entropies (forward and
  // reverse KL's) with their derived gradients, on both backends.
  for (std::string dtype : {"f32", "bf16"}) {
    Case c{7, 39, 10, dtype,
           {"lse", "entropy", "teacher_lse", "teacher_entropy", "cross_entropy",
            "reverse_cross_entropy"}};
    c.teacherDim = 13;
    c.teacherBias = true;
    c.teacherScale = 1.0 / 1.5;
    c.scale = 1.0 / 1.5;
    checkBothBackends(c);
  }
  // Each cross-entropy alone (its adjoint next to lse and the teacher lse),
  // recompute and chunked, and with tensor-core logits.
  for (std::string kind : {"cross_entropy", "reverse_cross_entropy"}) {
    Case c{6, 33, 8, "f32", {"lse", "teacher_lse", kind}};
    c.teacherDim = 5;
    c.strategy = "recompute";
    checkBackwardOnBothBackends(c);
  }
  Case tc{20, 66, 36, "f16", {"lse", "teacher_lse", "cross_entropy"}};
  tc.teacherDim = 24;
  tc.tile = "matmul=mma_sync";
  checkForward(tc, "simt");
  checkBackward(tc, "simt");
}

TEST_F(VocabReduceKernels, TeacherLogitsTakeTheStudentsTileProduct) {
  // The GPU kernels form the teacher's logits by the student's tile product
  // over T (GpuSchedule::teacherTile): on tensor cores when the student's
  // product runs there, through the same operand ring, with a T that is not
  // a whole number of 16-byte pieces (plain staged loads) and one that is,
  // a teacher bias and a temperature; the backward's dZ kernel forms them
  // the same way.
  for (int64_t teacherDim : {19, 40}) {
    SCOPED_TRACE(teacherDim);
    Case tc{20, 70, 36, "bf16", {"lse", "teacher_lse", "teacher_entropy", "cross_entropy"}};
    tc.teacherDim = teacherDim;
    tc.teacherBias = true;
    tc.teacherScale = 0.8;
    tc.tile = "matmul=mma_sync";
    checkForward(tc, "simt");
    checkBackward(tc, "simt");
  }
}

TEST_F(VocabReduceKernels, HopperWarpSpecializedSweeps) {
  // sm_90a, tile tma=2: without a teacher, lce_partial's sweep over a
  // split's column tiles runs one TMA ring through all of them (the
  // producer warp copies the next tile while the consumers fold this one);
  // with one, each tile forms two products (the teacher's operands carry no
  // tensor maps: the cp.async ring), so the sweep goes tile by tile.
  // D and T are multiples of 8 (16-byte rows): the runtime encodes the maps;
  // three k tiles per column tile and three column tiles per split wrap the
  // three-stage ring across tiles.
  for (int64_t teacherDim : {0, 40}) {
    SCOPED_TRACE(teacherDim);
    Case tc{20, 300, 136, "bf16"};
    if (teacherDim) {
      tc.statistics = {"lse", "teacher_lse", "teacher_entropy", "cross_entropy"};
      tc.teacherDim = teacherDim;
      tc.teacherBias = true;
      tc.teacherScale = 0.8;
    }
    tc.chip = "sm_90a";
    tc.tile = "matmul=wgmma,block_k=64,stages=3,splits=2,tma=2";
    checkForward(tc, "simt");
    checkBackward(tc, "simt");
  }
}

TEST_F(VocabReduceKernels, LogProbFamilyTakesWideWgmmaLogits) {
  // What matmul=auto gives the log-prob family (lse, label_logit, entropy)
  // on sm_90a: 128-column logits, on the TMA ring and with a producer warp
  // (V = 300 in two splits: a whole tile and a ragged one each), with a
  // bias and a softcap, forward and backward against the SIMT kernels.
  for (const char *ring : {"stages=3,tma=1", "stages=2,tma=2"}) {
    SCOPED_TRACE(ring);
    Case c{20, 300, 136, "bf16", {"lse", "label_logit", "entropy"}};
    c.bias = true;
    c.cap = 12.0;
    c.chip = "sm_90a";
    c.tile = std::string("matmul=wgmma,block_cols=128,block_k=64,splits=2,") + ring;
    checkForward(c, "simt");
    checkBackward(c, "simt");
  }
}

TEST_F(VocabReduceKernels, GeneralizedJsdTakesADependentSweep) {
  // jsd and mixture_kl read both streams' finished lse: a second sweep on
  // both backends, and the derived gradient reads the saved mixture_kl.
  for (std::string dtype : {"f32", "bf16"})
    for (double beta : {0.5, 0.2}) {
      Case c{7, 39, 10, dtype, {"lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"}};
      c.teacherDim = 13;
      c.teacherBias = true;
      c.bias = true;
      c.teacherScale = 1.0 / 1.5;
      c.scale = 1.0 / 1.5;
      c.jsdBeta = beta;
      checkBothBackends(c);
    }
  // jsd alone (the lse pair is carried, not yielded); a row longer than a
  // host vocabulary tile and spread over the GPU's splits; the recompute
  // backward; tensor-core logits.
  Case alone{5, 300, 9, "f32", {"jsd"}};
  alone.teacherDim = 6;
  alone.jsdBeta = 0.7;
  checkForward(alone, "cpu");
  checkForward(alone, "simt");
  Case recompute{6, 33, 8, "f32", {"lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"}};
  recompute.teacherDim = 5;
  recompute.strategy = "recompute";
  checkBackwardOnBothBackends(recompute);
  Case tc{20, 66, 36, "f16", {"lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"}};
  tc.teacherDim = 24;
  tc.tile = "matmul=mma_sync";
  checkForward(tc, "simt");
  checkBackward(tc, "simt");
}

TEST_F(VocabReduceKernels, MixtureP2IsNotDifferentiated) {
  // A non-zero adjoint of mixture_p2 poisons its row's gradient with NaN
  // (its true gradient would need another dependent sum): never a
  // silently wrong gradient.
  Case c{4, 21, 6, "f32", {"lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"}};
  c.teacherDim = 5;
  for (std::string backend : {"cpu", "simt"}) {
    SCOPED_TRACE(backend);
    Inputs in;
    makeInputs(c, in);
    auto stats = forward(c, in, "cpu");
    auto buffers = in.buffers;
    std::map<std::string, std::vector<float>> adjoints;
    for (const std::string &s : c.statistics) {
      adjoints[s].assign(c.n, s == "jsd" ? 1.0f : 0.0f);
      buffers["grad_" + s] = {adjoints[s].data(), "f32", c.n};
      if (s != "jsd")
        buffers[s] = {stats[s].data(), "f32", c.n};
    }
    adjoints["mixture_p2"][2] = 0.5f;
    std::vector<float> gx(c.n * c.d), gw(c.v * c.d);
    buffers["grad_x"] = {gx.data(), "f32", c.n * c.d};
    buffers["grad_w"] = {gw.data(), "f32", c.v * c.d};
    if (backend == "cpu")
      runOnCpu(c, true, buffers);
    else
      runOnSimt(c, true, buffers);
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t k = 0; k < c.d; ++k)
        EXPECT_EQ(std::isnan(gx[i * c.d + k]), i == 2) << "grad_x row " << i;
    EXPECT_TRUE(std::isnan(gw[0]));
  }
}

TEST_F(VocabReduceKernels, CrossEntropyIsTheLseAndLabelLogitSpecialCase) {
  // The cross-entropy op's lse and row loss are the bits of the reduction
  // {lse, label_logit} and lse − label_logit: one statistic kind, one
  // order, one row rule.
  for (std::string dtype : {"f32", "bf16"}) {
    Case c{13, 61, 11, dtype, {"lse", "label_logit"}};
    c.bias = true;
    c.cap = 20.0;
    SCOPED_TRACE(describe(c));
    Inputs in;
    makeInputs(c, in);
    auto stats = forward(c, in, "cpu");
    LceGraphOptions o;
    o.dtype = dtype;
    o.bias = true;
    o.reduction = "none";
    o.softcap = c.cap;
    auto graph = buildLinearCrossEntropyGraph(*context, o);
    ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
    auto op = simt::test::compileCpuReference(**graph);
    ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    std::vector<float> loss(c.n), lse(c.n);
    auto buffers = in.buffers;
    buffers["loss"] = {loss.data(), "f32", c.n};
    buffers["lse"] = {lse.data(), "f32", c.n};
    llvm::Error err = (*op)->run(buffers, {c.n, c.v, c.d});
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    for (int64_t i = 0; i < c.n; ++i) {
      EXPECT_EQ(std::memcmp(&lse[i], &stats["lse"][i], 4), 0) << "lse row " << i;
      float rowLoss = stats["lse"][i] - stats["label_logit"][i];
      bool ignored = in.random.labels64[i] == -100;
      EXPECT_EQ(ignored ? 0.0f : rowLoss, loss[i]) << "row loss " << i;
    }
  }
}

TEST_F(VocabReduceKernels, BuilderRejectsBadOptions) {
  VocabReduceGraphOptions o;
  o.statistics = {"lse", "softmax"};
  auto bad = buildVocabReduceGraph(*context, o);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("unknown statistic 'softmax'"), std::string::npos);
  o.statistics = {"entropy"};
  o.gradient = true;
  auto noLse = buildVocabReduceGraph(*context, o);
  ASSERT_FALSE(static_cast<bool>(noLse));
  EXPECT_NE(llvm::toString(noLse.takeError())
                .find("adjoint of entropy reads lse: yield lse as well"),
            std::string::npos);
  o.statistics = {"lse"};
  o.gradient = false;
  o.classWeights = true;
  auto weights = buildVocabReduceGraph(*context, o);
  ASSERT_FALSE(static_cast<bool>(weights));
  EXPECT_NE(llvm::toString(weights.takeError()).find("read by logit_sum and target_logit_sum only"), std::string::npos);
  o.classWeights = false;
  o.teacher = true;
  o.statistics = {"jsd"};
  o.jsdBeta = 1.0;
  auto edge = buildVocabReduceGraph(*context, o);
  ASSERT_FALSE(static_cast<bool>(edge));
  EXPECT_NE(llvm::toString(edge.takeError()).find("jsd beta must be in (0, 1)"),
            std::string::npos);
  o.jsdBeta = 0.5;
  o.statistics = {"lse", "teacher_lse", "jsd"};
  o.gradient = true;
  auto noKl = buildVocabReduceGraph(*context, o);
  o.statistics = {"lse", "teacher_lse", "mixture_kl"};
  auto noP2 = buildVocabReduceGraph(*context, o);
  ASSERT_FALSE(static_cast<bool>(noP2));
  EXPECT_NE(llvm::toString(noP2.takeError()).find("adjoint of mixture_kl reads lse, "
                                                  "teacher_lse and mixture_p2"),
            std::string::npos);
  ASSERT_FALSE(static_cast<bool>(noKl));
  EXPECT_NE(llvm::toString(noKl.takeError()).find("adjoint of jsd reads lse, teacher_lse and "
                                                  "mixture_kl"),
            std::string::npos);
}
