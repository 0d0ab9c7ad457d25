//===- ArithOpsTest.cpp - arith and math ops against hand-computed results ===//

#include "TestUtil.h"

#include "testing/simt/SimtTypes.h"

#include <cmath>
#include <limits>

using namespace lossjit::simt;
using namespace lossjit::simt::test;

namespace {

/// Words of the interpreter's register format for building inputs.
uint64_t word(ElementType type, double value) {
  switch (type) {
  case ElementType::F64:
    return std::bit_cast<uint64_t>(value);
  case ElementType::F32:
    return f32Word(float(value));
  case ElementType::F16:
    return f32Word(float(roundToHalf(value)));
  case ElementType::BF16:
    return f32Word(float(roundToBFloat16(value)));
  default: {
    unsigned w = getBitWidth(type);
    uint64_t mask = w >= 64 ? ~uint64_t(0) : (uint64_t(1) << w) - 1;
    return uint64_t(int64_t(value)) & mask;
  }
  }
}
double value(ElementType type, uint64_t w) {
  if (type == ElementType::F64)
    return std::bit_cast<double>(w);
  return wordF32(w);
}

struct Operand {
  ElementType type;
  std::vector<uint64_t> words;
};

/// Runs `body` once per element on its own thread: the body reads %x0, %x1,
/// ... (loaded from the operands) and defines %z of `resultType`.
/// Returns the result words, or fills `error`.
std::vector<uint64_t> runOp(const std::string &body,
                            const std::vector<Operand> &operands,
                            ElementType resultType,
                            std::string *error = nullptr) {
  size_t n = operands[0].words.size();
  std::string params, loads;
  std::vector<std::unique_ptr<SimtBuffer>> buffers;
  std::vector<SimtArg> args;
  for (size_t i = 0; i < operands.size(); ++i) {
    std::string t = getElementTypeName(operands[i].type).str();
    params += "%in" + std::to_string(i) + ": memref<?x" + t + ">, ";
    loads += "  %x" + std::to_string(i) + " = memref.load %in" +
             std::to_string(i) + "[%t] : memref<?x" + t + ">\n";
    buffers.push_back(std::make_unique<SimtBuffer>(
        "in" + std::to_string(i), operands[i].type, int64_t(n)));
    for (size_t e = 0; e < n; ++e)
      buffers.back()->storeWord(int64_t(e), operands[i].words[e]);
    args.push_back(SimtArg::buffer(*buffers.back()));
  }
  std::string r = getElementTypeName(resultType).str();
  SimtBuffer out("out", resultType, int64_t(n));
  args.push_back(SimtArg::buffer(out));
  std::string func = "gpu.func @k(" + params + "%out: memref<?x" + r +
                     ">) kernel {\n  %t = gpu.thread_id x\n" + loads + body +
                     "\n  memref.store %z, %out[%t] : memref<?x" + r +
                     ">\n  gpu.return\n}";
  std::string err = runKernel(func, {1, 1, 1}, {int64_t(n), 1, 1}, args);
  if (error)
    *error = err;
  else
    EXPECT_EQ("", err) << func;
  std::vector<uint64_t> result(n);
  if (err.empty())
    for (size_t e = 0; e < n; ++e)
      result[e] = out.loadWord(int64_t(e));
  return result;
}

Operand ints(ElementType type, std::vector<int64_t> values) {
  Operand op{type, {}};
  for (int64_t v : values)
    op.words.push_back(word(type, double(v)));
  return op;
}
Operand uints(ElementType type, std::vector<uint64_t> values) {
  return Operand{type, values};
}
Operand floats(ElementType type, std::vector<double> values) {
  Operand op{type, {}};
  for (double v : values)
    op.words.push_back(word(type, v));
  return op;
}

std::vector<int64_t> asSigned(ElementType type,
                              const std::vector<uint64_t> &w) {
  std::vector<int64_t> out;
  unsigned bits = getBitWidth(type);
  for (uint64_t x : w)
    out.push_back(bits >= 64 ? int64_t(x)
                             : int64_t(x << (64 - bits)) >> (64 - bits));
  return out;
}
std::vector<double> asDouble(ElementType type, const std::vector<uint64_t> &w) {
  std::vector<double> out;
  for (uint64_t x : w)
    out.push_back(value(type, x));
  return out;
}

constexpr auto I8 = ElementType::I8;
constexpr auto I16 = ElementType::I16;
constexpr auto I32 = ElementType::I32;
constexpr auto I64 = ElementType::I64;
constexpr auto Idx = ElementType::Index;
constexpr auto I1 = ElementType::I1;
constexpr auto F16 = ElementType::F16;
constexpr auto BF16 = ElementType::BF16;
constexpr auto F32 = ElementType::F32;
constexpr auto F64 = ElementType::F64;

std::vector<int64_t> intBinary(const std::string &op, ElementType type,
                               std::vector<int64_t> a, std::vector<int64_t> b) {
  std::string t = getElementTypeName(type).str();
  return asSigned(type, runOp("  %z = arith." + op + " %x0, %x1 : " + t,
                              {ints(type, a), ints(type, b)}, type));
}

TEST(ArithOps, IntegerArithmeticWraps) {
  EXPECT_EQ(intBinary("addi", I32, {2147483647, 5}, {1, -7}),
            (std::vector<int64_t>{-2147483648LL, -2}));
  EXPECT_EQ(intBinary("subi", I8, {0, -128}, {1, 1}),
            (std::vector<int64_t>{-1, 127}));
  EXPECT_EQ(intBinary("muli", I16, {300, -3}, {300, 7}),
            (std::vector<int64_t>{24464, -21})); // 90000 mod 2^16 = 24464
  EXPECT_EQ(intBinary("muli", I64, {1LL << 40}, {1LL << 23}),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(intBinary("addi", Idx, {-5}, {3}), (std::vector<int64_t>{-2}));
}

TEST(ArithOps, IntegerDivisionFamilies) {
  std::vector<int64_t> a = {7, -7, 7, -7, 6, 0}, b = {2, 2, -2, -2, 3, 5};
  EXPECT_EQ(intBinary("divsi", I32, a, b),
            (std::vector<int64_t>{3, -3, -3, 3, 2, 0}));
  EXPECT_EQ(intBinary("remsi", I32, a, b),
            (std::vector<int64_t>{1, -1, 1, -1, 0, 0}));
  EXPECT_EQ(intBinary("ceildivsi", I32, a, b),
            (std::vector<int64_t>{4, -3, -3, 4, 2, 0}));
  EXPECT_EQ(intBinary("floordivsi", Idx, a, b),
            (std::vector<int64_t>{3, -4, -4, 3, 2, 0}));
  // Unsigned: -7 is 2^32 - 7.
  EXPECT_EQ(intBinary("divui", I32, {7, -7}, {2, 2}),
            (std::vector<int64_t>{3, 2147483644}));
  EXPECT_EQ(intBinary("remui", I32, {7, -7}, {2, 2}),
            (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(intBinary("ceildivui", Idx, {7, 8, 0, 1}, {2, 2, 3, 1}),
            (std::vector<int64_t>{4, 4, 0, 1}));
}

TEST(ArithOps, DivisionByZeroIsAnError) {
  std::string error;
  runOp("  %z = arith.divui %x0, %x1 : i32",
        {ints(I32, {1, 2}), ints(I32, {1, 0})}, I32, &error);
  EXPECT_NE(error.find("integer division by zero"), std::string::npos) << error;
  EXPECT_NE(error.find("thread (1,0,0)"), std::string::npos) << error;
  runOp("  %z = arith.divsi %x0, %x1 : i8", {ints(I8, {-128}), ints(I8, {-1})},
        I8, &error);
  EXPECT_NE(error.find("overflow"), std::string::npos) << error;
}

TEST(ArithOps, MinMaxBitwiseShifts) {
  std::vector<int64_t> a = {-1, 1}, b = {1, 1};
  EXPECT_EQ(intBinary("minsi", I32, {-1, 3}, {1, 2}),
            (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(intBinary("maxsi", I32, {-1, 3}, {1, 2}),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(intBinary("minui", I32, {-1, 3}, {1, 2}),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(intBinary("maxui", I32, {-1, 3}, {1, 2}),
            (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(intBinary("andi", I32, {0b1100}, {0b1010}),
            (std::vector<int64_t>{0b1000}));
  EXPECT_EQ(intBinary("ori", I32, {0b1100}, {0b1010}),
            (std::vector<int64_t>{0b1110}));
  EXPECT_EQ(intBinary("xori", I32, {0b1100}, {0b1010}),
            (std::vector<int64_t>{0b0110}));
  EXPECT_EQ(intBinary("shli", I8, {3, 1}, {2, 7}),
            (std::vector<int64_t>{12, -128}));
  EXPECT_EQ(intBinary("shrsi", I32, {-8, 8}, {1, 2}),
            (std::vector<int64_t>{-4, 2}));
  EXPECT_EQ(intBinary("shrui", I32, {-8}, {1}),
            (std::vector<int64_t>{0x7ffffffc}));
  std::string error;
  runOp("  %z = arith.shli %x0, %x1 : i32", {ints(I32, {1}), ints(I32, {32})},
        I32, &error);
  EXPECT_NE(error.find("shift amount 32"), std::string::npos) << error;
  EXPECT_EQ(asSigned(I32, runOp("  %z = math.absi %x0 : i32",
                                {ints(I32, {-5, 5})}, I32)),
            (std::vector<int64_t>{5, 5}));
}

TEST(ArithOps, CmpIAllPredicates) {
  // (a, b) = (-1, 1), (1, 1), (2, 1)
  std::vector<int64_t> a = {-1, 1, 2}, b = {1, 1, 1};
  std::map<std::string, std::vector<int64_t>> want = {
      {"eq", {0, 1, 0}},  {"ne", {1, 0, 1}},  {"slt", {1, 0, 0}},
      {"sle", {1, 1, 0}}, {"sgt", {0, 0, 1}}, {"sge", {0, 1, 1}},
      {"ult", {0, 0, 0}}, {"ule", {0, 1, 0}}, {"ugt", {1, 0, 1}},
      {"uge", {1, 1, 1}}};
  for (auto &[pred, expected] : want) {
    auto got = runOp("  %z = arith.cmpi " + pred + ", %x0, %x1 : i32",
                     {ints(I32, a), ints(I32, b)}, I1);
    EXPECT_EQ(std::vector<uint64_t>(expected.begin(), expected.end()), got)
        << pred;
  }
}

TEST(ArithOps, FloatArithmeticIsIEEE) {
  auto f32 = asDouble(
      F32, runOp("  %z = arith.addf %x0, %x1 : f32",
                 {floats(F32, {0.1, 1e30}), floats(F32, {0.2, -1e30})}, F32));
  EXPECT_EQ(f32[0], double(0.1f + 0.2f));
  EXPECT_EQ(f32[1], 0.0);
  auto div = asDouble(
      F32, runOp("  %z = arith.divf %x0, %x1 : f32",
                 {floats(F32, {1, 1, 0}), floats(F32, {3, 0, 0})}, F32));
  EXPECT_EQ(div[0], double(1.0f / 3.0f));
  EXPECT_EQ(div[1], INFINITY);
  EXPECT_TRUE(std::isnan(div[2]));
  // f16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 → even (1); 1 + 3*2^-11
  // ties between 1 + 2^-10 and 1 + 2^-9 → 1 + 2^-9. Overflow → inf.
  auto f16 = asDouble(F16, runOp("  %z = arith.addf %x0, %x1 : f16",
                                 {floats(F16, {1, 1, 65504}),
                                  floats(F16, {0x1p-11, 0x1p-11 * 3, 16})},
                                 F16));
  EXPECT_EQ(f16[0], 1.0);
  // 3*2^-11 is not representable... in f16 it is (normal): 1.5 * 2^-10.
  EXPECT_EQ(f16[1], 1.0 + 0x1p-9);
  EXPECT_EQ(f16[2], INFINITY);
  auto bf16 = asDouble(
      BF16, runOp("  %z = arith.mulf %x0, %x1 : bf16",
                  {floats(BF16, {1.0 + 0x1p-7}), floats(BF16, {1.0 + 0x1p-7})},
                  BF16));
  // (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 → nearest bf16 is 1 + 2^-6.
  EXPECT_EQ(bf16[0], 1.0 + 0x1p-6);
  auto f64 =
      asDouble(F64, runOp("  %z = arith.subf %x0, %x1 : f64",
                          {floats(F64, {0.3}), floats(F64, {0.1})}, F64));
  EXPECT_EQ(f64[0], 0.3 - 0.1);
  auto neg = asDouble(
      F32, runOp("  %z = arith.negf %x0 : f32", {floats(F32, {0.0, 2})}, F32));
  EXPECT_TRUE(std::signbit(neg[0]));
  EXPECT_EQ(neg[1], -2.0);
  auto rem = asDouble(
      F32, runOp("  %z = arith.remf %x0, %x1 : f32",
                 {floats(F32, {7.5, -7.5}), floats(F32, {2, 2})}, F32));
  EXPECT_EQ(rem, (std::vector<double>{1.5, -1.5}));
}

TEST(ArithOps, MinMaxFloatNaNAndSignedZero) {
  Operand a = floats(F32, {NAN, -0.0, 1, 3, NAN});
  Operand b = floats(F32, {1, 0.0, NAN, 2, NAN});
  auto maximum =
      asDouble(F32, runOp("  %z = arith.maximumf %x0, %x1 : f32", {a, b}, F32));
  auto minimum =
      asDouble(F32, runOp("  %z = arith.minimumf %x0, %x1 : f32", {a, b}, F32));
  auto maxnum =
      asDouble(F32, runOp("  %z = arith.maxnumf %x0, %x1 : f32", {a, b}, F32));
  auto minnum =
      asDouble(F32, runOp("  %z = arith.minnumf %x0, %x1 : f32", {a, b}, F32));
  EXPECT_TRUE(std::isnan(maximum[0]));
  EXPECT_EQ(maximum[1], 0.0);
  EXPECT_FALSE(std::signbit(maximum[1]));
  EXPECT_TRUE(std::isnan(maximum[2]));
  EXPECT_EQ(maximum[3], 3.0);
  EXPECT_TRUE(std::signbit(minimum[1]));
  EXPECT_TRUE(std::isnan(minimum[0]));
  EXPECT_EQ(minimum[3], 2.0);
  EXPECT_EQ(maxnum[0], 1.0);
  EXPECT_EQ(maxnum[2], 1.0);
  EXPECT_TRUE(std::isnan(maxnum[4]));
  EXPECT_EQ(minnum[0], 1.0);
  EXPECT_EQ(minnum[3], 2.0);
}

TEST(ArithOps, CmpFAllPredicates) {
  // (a, b) = (1, NaN), (1, 2), (2, 2)
  Operand a = floats(F32, {1, 1, 2}), b = floats(F32, {NAN, 2, 2});
  std::map<std::string, std::vector<uint64_t>> want = {
      {"false", {0, 0, 0}}, {"oeq", {0, 0, 1}}, {"ogt", {0, 0, 0}},
      {"oge", {0, 0, 1}},   {"olt", {0, 1, 0}}, {"ole", {0, 1, 1}},
      {"one", {0, 1, 0}},   {"ord", {0, 1, 1}}, {"ueq", {1, 0, 1}},
      {"ugt", {1, 0, 0}},   {"uge", {1, 0, 1}}, {"ult", {1, 1, 0}},
      {"ule", {1, 1, 1}},   {"une", {1, 1, 0}}, {"uno", {1, 0, 0}},
      {"true", {1, 1, 1}}};
  for (auto &[pred, expected] : want)
    EXPECT_EQ(expected, runOp("  %z = arith.cmpf " + pred + ", %x0, %x1 : f32",
                              {a, b}, I1))
        << pred;
}

TEST(ArithOps, Select) {
  auto got =
      runOp("  %z = arith.select %x0, %x1, %x2 : i32",
            {uints(I1, {1, 0}), ints(I32, {10, 11}), ints(I32, {20, 21})}, I32);
  EXPECT_EQ(asSigned(I32, got), (std::vector<int64_t>{10, 21}));
}

TEST(ArithOps, FloatCastsRoundToNearestEven) {
  auto ext = asDouble(F32, runOp("  %z = arith.extf %x0 : f16 to f32",
                                 {floats(F16, {0.1, -65504, 0x1p-24})}, F32));
  EXPECT_EQ(ext[0], roundToHalf(0.1));
  EXPECT_EQ(ext[1], -65504.0);
  EXPECT_EQ(ext[2], 0x1p-24);
  // 65519 → 65504; 65520 (tie with 65536) → inf; 1e-8 → 0; 3e-8 → 2^-24.
  auto trunc = asDouble(
      F16, runOp("  %z = arith.truncf %x0 : f32 to f16",
                 {floats(F32, {65519, 65520, 1e-8, 3e-8, 1 + 0x1p-11})}, F16));
  EXPECT_EQ(trunc, (std::vector<double>{65504, INFINITY, 0, 0x1p-24, 1.0}));
  auto bf = asDouble(
      BF16, runOp("  %z = arith.truncf %x0 : f32 to bf16",
                  {floats(F32, {1 + 0x1p-8, 1 + 3 * 0x1p-8, 3.0e38f})}, BF16));
  EXPECT_EQ(bf[0], 1.0);
  EXPECT_EQ(bf[1], 1.0 + 0x1p-6);
  EXPECT_EQ(bf[2], roundToBFloat16(3.0e38f));
  auto wide = asDouble(F64, runOp("  %z = arith.extf %x0 : bf16 to f64",
                                  {floats(BF16, {1.5})}, F64));
  EXPECT_EQ(wide[0], 1.5);
  auto narrow = asDouble(F32, runOp("  %z = arith.truncf %x0 : f64 to f32",
                                    {floats(F64, {0.1})}, F32));
  EXPECT_EQ(narrow[0], double(0.1f));
  // f64 → f16 rounds once (no double rounding through f32).
  double once = 1.0 + 0x1p-11 + 0x1p-40; // just above a f16 tie
  auto direct = asDouble(F16, runOp("  %z = arith.truncf %x0 : f64 to f16",
                                    {floats(F64, {once})}, F16));
  EXPECT_EQ(direct[0], 1.0 + 0x1p-10);
}

TEST(ArithOps, IntegerCasts) {
  EXPECT_EQ(asSigned(Idx, runOp("  %z = arith.index_cast %x0 : i32 to index",
                                {ints(I32, {-1, 7})}, Idx)),
            (std::vector<int64_t>{-1, 7}));
  EXPECT_EQ(runOp("  %z = arith.index_castui %x0 : i32 to index",
                  {ints(I32, {-1})}, Idx),
            (std::vector<uint64_t>{0xffffffffu}));
  EXPECT_EQ(asSigned(I32, runOp("  %z = arith.index_cast %x0 : index to i32",
                                {ints(Idx, {0x100000005LL})}, I32)),
            (std::vector<int64_t>{5}));
  EXPECT_EQ(asSigned(I32, runOp("  %z = arith.extsi %x0 : i8 to i32",
                                {ints(I8, {-3})}, I32)),
            (std::vector<int64_t>{-3}));
  EXPECT_EQ(runOp("  %z = arith.extui %x0 : i8 to i32", {ints(I8, {-3})}, I32),
            (std::vector<uint64_t>{253}));
  EXPECT_EQ(
      runOp("  %z = arith.extui %x0 : i1 to i32", {uints(I1, {1, 0})}, I32),
      (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(runOp("  %z = arith.trunci %x0 : i32 to i8",
                  {ints(I32, {0x12345678})}, I8),
            (std::vector<uint64_t>{0x78}));
}

TEST(ArithOps, IntFloatConversions) {
  EXPECT_EQ(asDouble(F32, runOp("  %z = arith.sitofp %x0 : i32 to f32",
                                {ints(I32, {-3, 16777217})}, F32)),
            (std::vector<double>{-3, 16777216})); // ties to even
  EXPECT_EQ(asDouble(F32, runOp("  %z = arith.uitofp %x0 : i32 to f32",
                                {ints(I32, {-1})}, F32)),
            (std::vector<double>{4294967296.0}));
  EXPECT_EQ(asDouble(F16, runOp("  %z = arith.sitofp %x0 : i64 to f16",
                                {ints(I64, {2049})}, F16)),
            (std::vector<double>{2048}));
  EXPECT_EQ(asSigned(I32, runOp("  %z = arith.fptosi %x0 : f32 to i32",
                                {floats(F32, {-3.7, 3.7, -0.5})}, I32)),
            (std::vector<int64_t>{-3, 3, 0}));
  EXPECT_EQ(
      runOp("  %z = arith.fptoui %x0 : f64 to i8", {floats(F64, {255.9})}, I8),
      (std::vector<uint64_t>{255}));
  std::string error;
  runOp("  %z = arith.fptosi %x0 : f32 to i32", {floats(F32, {3e9})}, I32,
        &error);
  EXPECT_NE(error.find("out of range for i32"), std::string::npos) << error;
  runOp("  %z = arith.fptoui %x0 : f32 to i32", {floats(F32, {NAN})}, I32,
        &error);
  EXPECT_NE(error.find("out of range"), std::string::npos) << error;
}

TEST(ArithOps, Bitcasts) {
  EXPECT_EQ(
      runOp("  %z = arith.bitcast %x0 : f32 to i32", {floats(F32, {1.0})}, I32),
      (std::vector<uint64_t>{0x3f800000}));
  EXPECT_EQ(asDouble(F16, runOp("  %z = arith.bitcast %x0 : i16 to f16",
                                {uints(I16, {0x3c00, 0xc000})}, F16)),
            (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(runOp("  %z = arith.bitcast %x0 : bf16 to i16",
                  {floats(BF16, {1.0})}, I16),
            (std::vector<uint64_t>{0x3f80}));
  EXPECT_EQ(
      runOp("  %z = arith.bitcast %x0 : f64 to i64", {floats(F64, {2.0})}, I64),
      (std::vector<uint64_t>{0x4000000000000000ull}));
}

TEST(MathOps, ElementaryFunctions) {
  auto run1 = [](const std::string &op, double x) {
    return asDouble(F32, runOp("  %z = math." + op + " %x0 : f32",
                               {floats(F32, {x})}, F32))[0];
  };
  EXPECT_EQ(run1("exp2", 3), 8.0);
  EXPECT_EQ(run1("exp2", -1.5), double(float(std::exp2(-1.5))));
  EXPECT_EQ(run1("log2", 8), 3.0);
  EXPECT_EQ(run1("log2", 0.1f), double(float(std::log2(double(0.1f)))));
  EXPECT_EQ(run1("exp", 1), double(float(std::exp(1.0))));
  EXPECT_EQ(run1("log", 2), double(float(std::log(2.0))));
  EXPECT_EQ(run1("sqrt", 2), double(std::sqrt(2.0f)));
  EXPECT_EQ(run1("rsqrt", 4), 0.5);
  EXPECT_EQ(run1("tanh", 0.5), double(float(std::tanh(0.5))));
  EXPECT_EQ(run1("absf", -2), 2.0);
  EXPECT_EQ(run1("floor", -1.5), -2.0);
  EXPECT_EQ(run1("ceil", -1.5), -1.0);
  EXPECT_EQ(run1("round", 2.5), 3.0);
  EXPECT_EQ(run1("roundeven", 2.5), 2.0);
  EXPECT_EQ(run1("log1p", 0), 0.0);
  EXPECT_EQ(run1("expm1", 0), 0.0);
  EXPECT_EQ(run1("sin", 0.5), double(float(std::sin(0.5))));
  EXPECT_EQ(run1("cos", 0.5), double(float(std::cos(0.5))));
  EXPECT_EQ(run1("erf", 0.5), double(float(std::erf(0.5))));
  EXPECT_EQ(run1("trunc", -1.7), -1.0);
  EXPECT_TRUE(std::isnan(run1("log", -1)));
  EXPECT_EQ(run1("log", 0), -INFINITY);
  // exp2 in f16 rounds to f16.
  auto h = asDouble(
      F16, runOp("  %z = math.exp2 %x0 : f16", {floats(F16, {0.5})}, F16));
  EXPECT_EQ(h[0], roundToHalf(std::sqrt(2.0)));
}

TEST(MathOps, FmaIsFused) {
  // (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46 exactly; unfused f32 gives 0.
  float a = 1.0f + 0x1p-23f, b = 1.0f - 0x1p-23f;
  auto got = asDouble(
      F32, runOp("  %z = math.fma %x0, %x1, %x2 : f32",
                 {floats(F32, {a}), floats(F32, {b}), floats(F32, {-1})}, F32));
  EXPECT_EQ(got[0], -0x1p-46);
  auto f64 =
      asDouble(F64, runOp("  %z = math.fma %x0, %x1, %x2 : f64",
                          {floats(F64, {1 + 0x1p-52}),
                           floats(F64, {1 - 0x1p-52}), floats(F64, {-1})},
                          F64));
  EXPECT_EQ(f64[0], -0x1p-104);
  auto pw = asDouble(F32, runOp("  %z = math.powf %x0, %x1 : f32",
                                {floats(F32, {2}), floats(F32, {10})}, F32));
  EXPECT_EQ(pw[0], 1024.0);
  auto cs = asDouble(F32, runOp("  %z = math.copysign %x0, %x1 : f32",
                                {floats(F32, {2}), floats(F32, {-0.0})}, F32));
  EXPECT_EQ(cs[0], -2.0);
}

TEST(ArithOps, ConstantsAndIds) {
  // Constants of every kind, and the id ops, in a 2x2x1 block of a 3x1x2 grid.
  std::string func = R"(
gpu.func @k(%out: memref<?xindex>, %f: memref<?xf32>) kernel {
  %tx = gpu.thread_id x
  %ty = gpu.thread_id y
  %bx = gpu.block_id x
  %bz = gpu.block_id z
  %gx = gpu.grid_dim x
  %dx = gpu.block_dim y
  %lane = gpu.lane_id
  %glob = gpu.global_id x
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %c100 = arith.constant 100 : index
  %tl = arith.muli %ty, %c2 : index
  %t = arith.addi %tl, %tx : index
  %bl = arith.muli %bz, %gx : index
  %b = arith.addi %bl, %bx : index
  %base0 = arith.muli %b, %c4 : index
  %base = arith.addi %base0, %t : index
  %slot = arith.muli %base, %c6 : index
  memref.store %tx, %out[%slot] : memref<?xindex>
  %s1 = arith.addi %slot, %c1 : index
  memref.store %ty, %out[%s1] : memref<?xindex>
  %s2 = arith.addi %slot, %c2 : index
  memref.store %b, %out[%s2] : memref<?xindex>
  %s3 = arith.addi %s2, %c1 : index
  %gd = arith.muli %gx, %c100 : index
  %gdd = arith.addi %gd, %dx : index
  memref.store %gdd, %out[%s3] : memref<?xindex>
  %s4 = arith.addi %s3, %c1 : index
  memref.store %lane, %out[%s4] : memref<?xindex>
  %s5 = arith.addi %s4, %c1 : index
  memref.store %glob, %out[%s5] : memref<?xindex>
  %half = arith.constant 0.5 : f32
  %v = arith.constant dense<[1.0, 2.0]> : vector<2xf32>
  %e = vector.extract %v[1] : f32 from vector<2xf32>
  %r = arith.addf %half, %e : f32
  memref.store %r, %f[%base] : memref<?xf32>
  gpu.return
})";
  std::vector<int64_t> out(6 * 6 * 4, -1);
  std::vector<float> f(24, 0);
  SimtBuffer outBuf("out", Idx, out.data(), int64_t(out.size()));
  SimtBuffer fBuf("f", F32, f.data(), int64_t(f.size()));
  ASSERT_EQ("", runKernel(func, {3, 1, 2}, {2, 2, 1},
                          {SimtArg::buffer(outBuf), SimtArg::buffer(fBuf)}));
  for (int64_t b = 0; b < 6; ++b)
    for (int64_t t = 0; t < 4; ++t) {
      int64_t *row = &out[size_t((b * 4 + t) * 6)];
      EXPECT_EQ(row[0], t % 2);
      EXPECT_EQ(row[1], t / 2);
      EXPECT_EQ(row[2], b);
      EXPECT_EQ(row[3], 3 * 100 + 2);
      EXPECT_EQ(row[4], t); // lane = linear thread id % 32
      EXPECT_EQ(row[5], (b % 3) * 2 + t % 2);
      EXPECT_EQ(f[size_t(b * 4 + t)], 2.5f);
    }
}

TEST(ArithOps, SubgroupIds) {
  std::string func = R"(
gpu.func @k(%out: memref<?xindex>) kernel {
  %t = gpu.thread_id x
  %ty = gpu.thread_id y
  %bd = gpu.block_dim x
  %row = arith.muli %ty, %bd : index
  %lin = arith.addi %row, %t : index
  %sg = gpu.subgroup_id : index
  %n = gpu.num_subgroups : index
  %sz = gpu.subgroup_size : index
  %c100 = arith.constant 100 : index
  %c10000 = arith.constant 10000 : index
  %a = arith.muli %n, %c100 : index
  %b = arith.muli %sz, %c10000 : index
  %ab = arith.addi %a, %b : index
  %v = arith.addi %ab, %sg : index
  memref.store %v, %out[%lin] : memref<?xindex>
  gpu.return
})";
  std::vector<int64_t> out(80, -1);
  SimtBuffer outBuf("out", Idx, out.data(), 80);
  ASSERT_EQ("",
            runKernel(func, {1, 1, 1}, {40, 2, 1}, {SimtArg::buffer(outBuf)}));
  for (int64_t t = 0; t < 80; ++t) // 3 subgroups of 32 over 80 threads
    EXPECT_EQ(out[size_t(t)], 32 * 10000 + 3 * 100 + t / 32) << t;
}

TEST(ArithOps, UnstructuredControlFlowIsReported) {
  std::string func = R"(
gpu.func @k() kernel {
  cf.br ^bb1
^bb1:
  gpu.return
})";
  std::string error = runKernel(func, {1, 1, 1}, {1, 1, 1}, {});
  EXPECT_NE(error.find("unsupported op 'cf.br' at loc(\"test.mlir\":"),
            std::string::npos)
      << error;
  std::string reduce = R"(
gpu.func @k(%out: memref<?xf32>) kernel {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %s = gpu.subgroup_reduce add %one : (f32) -> f32
  memref.store %s, %out[%c0] : memref<?xf32>
  gpu.return
})";
  std::vector<float> out(1);
  SimtBuffer outBuf("out", F32, out.data(), 1);
  error = runKernel(reduce, {1, 1, 1}, {32, 1, 1}, {SimtArg::buffer(outBuf)});
  EXPECT_NE(error.find("unsupported op 'gpu.subgroup_reduce' at loc("),
            std::string::npos)
      << error;
}

TEST(ArithOps, UnsupportedOpIsReported) {
  std::string error;
  runOp("  %z = math.atan %x0 : f32", {floats(F32, {1})}, F32, &error);
  EXPECT_NE(error.find("unsupported op 'math.atan' at loc(\"test.mlir\":"),
            std::string::npos)
      << error;
}

} // namespace
