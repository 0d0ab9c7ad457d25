//===- ControlFlowTest.cpp - divergent scf.if / scf.for / scf.while -------===//

#include "TestUtil.h"

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

/// Runs `body` (which defines %z : i64 from %t, the thread id) on `threads`
/// threads and returns every thread's %z.
std::vector<int64_t> perThread(const std::string &body, int64_t threads,
                               std::string *error = nullptr,
                               const SimtOptions &options = {}) {
  std::vector<int64_t> out(size_t(threads), -999);
  SimtBuffer buf("out", ElementType::I64, out.data(), threads);
  std::string func = "gpu.func @k(%out: memref<?xi64>) kernel {\n"
                     "  %t = gpu.thread_id x\n"
                     "  %c0 = arith.constant 0 : index\n"
                     "  %c1 = arith.constant 1 : index\n"
                     "  %c2 = arith.constant 2 : index\n" +
                     body +
                     "\n  memref.store %z, %out[%t] : memref<?xi64>\n"
                     "  gpu.return\n}";
  std::string err = runKernel(func, {1, 1, 1}, {threads, 1, 1},
                              {SimtArg::buffer(buf)}, options);
  if (error)
    *error = err;
  else
    EXPECT_EQ("", err) << func;
  return out;
}

TEST(ControlFlow, DivergentIfWithResults) {
  auto got = perThread(R"(
  %rem = arith.remui %t, %c2 : index
  %even = arith.cmpi eq, %rem, %c0 : index
  %r = scf.if %even -> (index) {
    %d = arith.muli %t, %c2 : index
    scf.yield %d : index
  } else {
    %c100 = arith.constant 100 : index
    %p = arith.addi %t, %c100 : index
    scf.yield %p : index
  }
  %z = arith.index_cast %r : index to i64)",
                       37);
  for (int64_t t = 0; t < 37; ++t)
    EXPECT_EQ(got[size_t(t)], t % 2 == 0 ? 2 * t : t + 100) << t;
}

TEST(ControlFlow, IfWithoutElseRunsOnlyTakingThreads) {
  std::vector<int64_t> out(8, 7);
  SimtBuffer buf("out", ElementType::I64, out.data(), 8);
  std::string func = R"(
gpu.func @k(%out: memref<?xi64>) kernel {
  %t = gpu.thread_id x
  %c3 = arith.constant 3 : index
  %lt = arith.cmpi ult, %t, %c3 : index
  scf.if %lt {
    %v = arith.index_cast %t : index to i64
    memref.store %v, %out[%t] : memref<?xi64>
  }
  gpu.return
})";
  ASSERT_EQ("", runKernel(func, {1, 1, 1}, {8, 1, 1}, {SimtArg::buffer(buf)}));
  EXPECT_EQ(out, (std::vector<int64_t>{0, 1, 2, 7, 7, 7, 7, 7}));
}

TEST(ControlFlow, ForWithPerThreadBoundsAndIterArgs) {
  // sum_{i = t}^{t*2} i, and a pair swapped every iteration.
  auto got = perThread(R"(
  %ub = arith.muli %t, %c2 : index
  %ub1 = arith.addi %ub, %c1 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %r:3 = scf.for %i = %t to %ub1 step %c1 iter_args(%s = %zero, %a = %zero, %b = %one) -> (i64, i64, i64) {
    %ii = arith.index_cast %i : index to i64
    %s2 = arith.addi %s, %ii : i64
    scf.yield %s2, %b, %a : i64, i64, i64
  }
  %k = arith.constant 1000 : i64
  %bk = arith.muli %r#2, %k : i64
  %z = arith.addi %r#0, %bk : i64)",
                       20);
  for (int64_t t = 0; t < 20; ++t) {
    int64_t sum = 0, iterations = t + 1;
    for (int64_t i = t; i <= 2 * t; ++i)
      sum += i;
    int64_t b =
        iterations % 2 ? 0 : 1; // (a, b) starts (0, 1), swapped per step
    EXPECT_EQ(got[size_t(t)], sum + 1000 * b) << t;
  }
}

TEST(ControlFlow, ForWithLargeStepAndZeroTrips) {
  auto got = perThread(R"(
  %c5 = arith.constant 5 : index
  %c17 = arith.constant 17 : index
  %zero = arith.constant 0 : i64
  %r = scf.for %i = %t to %c17 step %c5 iter_args(%n = %zero) -> (i64) {
    %one = arith.constant 1 : i64
    %n1 = arith.addi %n, %one : i64
    scf.yield %n1 : i64
  }
  %z = arith.addi %r, %zero : i64)",
                       20);
  for (int64_t t = 0; t < 20; ++t)
    EXPECT_EQ(got[size_t(t)], t < 17 ? (16 - t) / 5 + 1 : 0) << t;
}

TEST(ControlFlow, ForIntegerInductionUnsigned) {
  // i8 loop 250..255 step 2 with unsigned compare: 250, 252, 254 (no wrap).
  auto got = perThread(R"(
  %lb = arith.constant 250 : i8
  %ub = arith.constant 255 : i8
  %st = arith.constant 2 : i8
  %zero = arith.constant 0 : i64
  %r = scf.for unsigned %i = %lb to %ub step %st iter_args(%n = %zero) -> (i64) : i8 {
    %ii = arith.extui %i : i8 to i64
    %n1 = arith.addi %n, %ii : i64
    scf.yield %n1 : i64
  }
  %z = arith.addi %r, %zero : i64)",
                       2);
  EXPECT_EQ(got[0], 250 + 252 + 254);
}

TEST(ControlFlow, WhileWithPerThreadTripCounts) {
  // Collatz steps of t + 1.
  auto got = perThread(R"(
  %start = arith.addi %t, %c1 : index
  %zero = arith.constant 0 : i64
  %r:2 = scf.while (%x = %start, %n = %zero) : (index, i64) -> (index, i64) {
    %more = arith.cmpi ne, %x, %c1 : index
    scf.condition(%more) %x, %n : index, i64
  } do {
  ^bb0(%x: index, %n: i64):
    %rem = arith.remui %x, %c2 : index
    %even = arith.cmpi eq, %rem, %c0 : index
    %next = scf.if %even -> (index) {
      %h = arith.divui %x, %c2 : index
      scf.yield %h : index
    } else {
      %c3 = arith.constant 3 : index
      %m = arith.muli %x, %c3 : index
      %p = arith.addi %m, %c1 : index
      scf.yield %p : index
    }
    %one = arith.constant 1 : i64
    %n1 = arith.addi %n, %one : i64
    scf.yield %next, %n1 : index, i64
  }
  %z = arith.addi %r#1, %zero : i64)",
                       64);
  for (int64_t t = 0; t < 64; ++t) {
    int64_t x = t + 1, steps = 0;
    while (x != 1) {
      x = x % 2 ? 3 * x + 1 : x / 2;
      ++steps;
    }
    EXPECT_EQ(got[size_t(t)], steps) << t;
  }
}

TEST(ControlFlow, NonPositiveStepIsAnError) {
  std::string error;
  perThread(R"(
  %zero = arith.constant 0 : i64
  %r = scf.for %i = %c0 to %c2 step %c0 iter_args(%n = %zero) -> (i64) {
    scf.yield %n : i64
  }
  %z = arith.addi %r, %zero : i64)",
            1, &error);
  EXPECT_NE(error.find("scf.for step 0 is not positive"), std::string::npos)
      << error;
}

TEST(ControlFlow, RunawayLoopHitsTheStepLimit) {
  std::string error;
  SimtOptions options;
  options.maxSteps = 10000;
  perThread(R"(
  %zero = arith.constant 0 : i64
  %r = scf.while (%n = %zero) : (i64) -> (i64) {
    %true = arith.constant true
    scf.condition(%true) %n : i64
  } do {
  ^bb0(%n: i64):
    scf.yield %n : i64
  }
  %z = arith.addi %r, %zero : i64)",
            1, &error, options);
  EXPECT_NE(error.find("instruction limit of 10000 exceeded"),
            std::string::npos)
      << error;
}

} // namespace
