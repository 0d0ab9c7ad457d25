//===- CpuTargetTest.cpp - JIT target choice, libcall-free host code -----===//
//
// The CPU backend must not depend on the CI host's CPU: these tests compile
// for explicit targets (x86-64-v2, x86-64-v3, native, and x86-64-v4 where
// this host can run it), check that the expanded conversions and exp2/log2
// are correct against independent references, and that every target gives
// the same bits.
//
//===----------------------------------------------------------------------===//

#include "compiler/Target/CpuTarget.h"
#include "compiler/Builder/GraphBuilder.h"
#include "compiler/Pipeline/Pipelines.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Target/CpuJit.h"
#include "compiler/Target/CpuCodegen.h"
#include "runtime/KernelCache.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/TargetParser/Host.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace lossjit;

namespace {
/// The targets every host-code test runs under: two baselines below what CI
/// machines have, the host itself, and x86-64-v4 where the host runs it.
std::vector<CpuTarget> testTargets() {
  std::vector<CpuTarget> targets;
  for (const char *spec : {"x86-64-v2", "x86-64-v3", "native"}) {
    auto t = CpuTarget::resolve(spec);
    EXPECT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
    if (t)
      targets.push_back(*t);
  }
  if (featuresMissingOnHost("x86-64-v4").empty())
    targets.push_back(cantFail(CpuTarget::resolve("x86-64-v4")));
  return targets;
}

TEST(CpuTarget, NamedLevelsImplyTheirFeaturesOnly) {
  auto v2 = CpuTarget::resolve("x86-64-v2");
  ASSERT_TRUE(static_cast<bool>(v2)) << llvm::toString(v2.takeError());
  EXPECT_EQ(v2->cpu, "x86-64-v2");
  EXPECT_TRUE(v2->hasFeature("sse4.2"));
  EXPECT_FALSE(v2->hasFeature("avx"));
  EXPECT_FALSE(v2->hasFeature("fma"));
  EXPECT_FALSE(v2->hasFmaUnits());
  auto v3 = cantFail(CpuTarget::resolve("x86-64-v3"));
  EXPECT_TRUE(v3.hasFeature("avx2"));
  EXPECT_TRUE(v3.hasFeature("fma"));
  EXPECT_TRUE(v3.hasFmaUnits());
  // AMD's four-operand FMA (Bulldozer; no host here runs it) fuses as well.
  CpuTarget bulldozer = v3;
  bulldozer.features = "+avx,+fma4,+sse4.2";
  EXPECT_TRUE(bulldozer.hasFmaUnits());
  EXPECT_TRUE(v3.hasFeature("f16c"));
  EXPECT_FALSE(v3.hasFeature("avx512f"));
  EXPECT_FALSE(v3.hasFeature("avx512bf16"));
  EXPECT_NE(v2.get().key(), v3.key());
  EXPECT_EQ(v3.key(), llvm::sys::getProcessTriple() + ";cpu=x86-64-v3;features=" + v3.features);
}

TEST(CpuTarget, NativeIsTheHostCpuWithItsFeatures) {
  auto native = cantFail(CpuTarget::resolve("native"));
  EXPECT_EQ(native.cpu, llvm::sys::getHostCPUName().str());
  for (const auto &f : llvm::sys::getHostCPUFeatures())
    EXPECT_TRUE(llvm::StringRef(native.features).contains((f.second ? "+" : "-") + f.first().str()))
        << f.first().str();
}

TEST(CpuTarget, UnknownNamesAreErrorsNamingTheVariable) {
  auto bad = CpuTarget::resolve("pentium-9000", kCpuTargetVariable);
  ASSERT_FALSE(static_cast<bool>(bad));
  std::string message = llvm::toString(bad.takeError());
  EXPECT_NE(message.find("LOSSJIT_CPU_TARGET 'pentium-9000' is not a CPU LLVM"), std::string::npos)
      << message;
  EXPECT_NE(message.find("expected native, x86-64-v2, x86-64-v3, x86-64-v4"), std::string::npos)
      << message;
  auto empty = CpuTarget::resolve("", kCpuTargetVariable);
  ASSERT_FALSE(static_cast<bool>(empty));
  EXPECT_NE(llvm::toString(empty.takeError()).find("LOSSJIT_CPU_TARGET is empty"),
            std::string::npos);
}

TEST(CpuTarget, ACpuTheHostCannotRunIsRefused) {
  // A host without AVX-512 must not run x86-64-v4 code (SIGILL otherwise).
  llvm::StringMap<bool> avx2Host;
  for (const char *f :
       {"avx", "avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe", "sse4.2", "popcnt", "xsave"})
    avx2Host[f] = true;
  for (const char *f : {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})
    avx2Host[f] = false;
  // (LLVM lists the level's own features; avx512f comes implied by them.)
  EXPECT_EQ(missingFeatures("x86-64-v4", avx2Host),
            (std::vector<std::string>{"avx512bw", "avx512cd", "avx512dq", "avx512vl"}));
  EXPECT_TRUE(missingFeatures("x86-64-v3", avx2Host).empty());
  // The baseline a feature map does not mention counts as present.
  EXPECT_TRUE(missingFeatures("x86-64", {}).empty());
  // On this host: whatever it lacks, resolve() names it.
  for (const char *cpu : {"x86-64-v4", "sapphirerapids", "graniterapids", "znver5"}) {
    std::vector<std::string> missing = featuresMissingOnHost(cpu);
    auto t = CpuTarget::resolve(cpu, kCpuTargetVariable);
    EXPECT_EQ(static_cast<bool>(t), missing.empty()) << cpu;
    if (!t) {
      std::string message = llvm::toString(t.takeError());
      EXPECT_NE(message.find("needs CPU features this host lacks (" + missing.front()),
                std::string::npos)
          << message;
    }
  }
}

TEST(CpuTarget, EnvironmentPicksTheTarget) {
  ::setenv(kCpuTargetVariable, "x86-64-v3", 1);
  auto t = CpuTarget::fromEnvironment();
  ::unsetenv(kCpuTargetVariable);
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(t->cpu, "x86-64-v3");
  auto native = CpuTarget::fromEnvironment();
  ASSERT_TRUE(static_cast<bool>(native));
  EXPECT_EQ(native->spec, "native");
}

/// Small host functions over memrefs, lowered exactly as the CPU pipeline
/// lowers its kernels, compiled and linked for one target.
class HostFunctions {
public:
  HostFunctions(mlir::MLIRContext &context, llvm::StringRef source, const CpuTarget &target,
                bool expand = true) {
    module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
    if (!module) {
      error = "parse failed";
      return;
    }
    // As CpuCompiledOp lowers for this target (f16 widening left to F16C
    // where the target has it), or with the expansion pass removed.
    std::string pipeline = cpuStages(CpuTileConfig{}, target.hasFeature("f16c"),
                                     /*vectorRegisters=*/0, target.hasFmaUnits())
                               .back()
                               .pipeline;
    if (!expand) {
      pipeline = cpuStages(CpuTileConfig{}).back().pipeline;
      llvm::StringRef pass = "loss-expand-host-libcalls,";
      pipeline.erase(pipeline.find(pass.str()), pass.size());
    }
    mlir::PassManager pm(&context);
    if (mlir::failed(mlir::parsePassPipeline(stripModuleAnchor(pipeline), pm)) ||
        mlir::failed(pm.run(*module))) {
      error = "lowering failed";
      return;
    }
    auto inner = *module->getOps<mlir::ModuleOp>().begin();
    auto object = emitCpuObject(inner, target);
    if (!object) {
      error = llvm::toString(object.takeError());
      return;
    }
    calls = cantFail(undefinedSymbols(*object));
    auto linked = linkCpuObject(*object);
    if (!linked) {
      error = llvm::toString(linked.takeError());
      return;
    }
    jit = std::move(*linked);
  }

  /// Calls `name(in, out, n)` on two rank-1 buffers.
  void call(llvm::StringRef name, void *in, void *out, int64_t n) {
    auto symbol = jit->lookup(("_mlir_" + name).str());
    ASSERT_TRUE(static_cast<bool>(symbol)) << llvm::toString(symbol.takeError());
    int64_t zero = 0, one = 1;
    void *args[] = {&in, &in, &zero, &n, &one, &out, &out, &zero, &n, &one, &n};
    symbol->toPtr<void (*)(void **)>()(args);
  }

  std::string error;
  /// The object's undefined symbols: the routines it calls.
  std::vector<std::string> calls;

private:
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::unique_ptr<llvm::orc::LLJIT> jit;
};

/// Element-wise functions, 8 lanes per step as the kernels use them.
std::string elementwise(llvm::StringRef name, llvm::StringRef from, llvm::StringRef to,
                        llvm::StringRef body) {
  std::string text = R"(
  func.func @NAME(%in: memref<?xFROM>, %out: memref<?xTO>, %n: index) {
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    scf.for %i = %c0 to %n step %c8 {
      %v = vector.load %in[%i] : memref<?xFROM>, vector<8xFROM>
      %r = BODY
      vector.store %r, %out[%i] : memref<?xTO>, vector<8xTO>
    }
    return
  })";
  auto replaceAll = [&](llvm::StringRef key, llvm::StringRef value) {
    for (size_t at; (at = text.find(key.str())) != std::string::npos;)
      text.replace(at, key.size(), value.str());
  };
  replaceAll("BODY", body);
  replaceAll("NAME", name);
  replaceAll("FROM", from);
  replaceAll("TO", to);
  return text;
}

std::string hostMathSource() {
  return "module { module @k {" +
         elementwise("exp2", "f32", "f32", "math.exp2 %v : vector<8xf32>") +
         elementwise("log2", "f32", "f32", "math.log2 %v : vector<8xf32>") +
         elementwise("exp2_f64", "f64", "f64", "math.exp2 %v : vector<8xf64>") +
         elementwise("log2_f64", "f64", "f64", "math.log2 %v : vector<8xf64>") +
         elementwise("to_bf16", "f32", "bf16",
                     "arith.truncf %v : vector<8xf32> to vector<8xbf16>") +
         elementwise("to_f16", "f32", "f16", "arith.truncf %v : vector<8xf32> to vector<8xf16>") +
         elementwise("from_bf16", "bf16", "f32",
                     "arith.extf %v : vector<8xbf16> to vector<8xf32>") +
         elementwise("from_f16", "f16", "f32", "arith.extf %v : vector<8xf16> to vector<8xf32>") +
         "} }";
}

/// @<name>(in, out, n): fma(a, b, c) on f32 with a, b and c at in[i],
/// in[n + i] and in[2n + i], `lanes` elements per step (vector<lanes>, or
/// scalars for 1): the two shapes the kernels' products use.
std::string fmaFunction(llvm::StringRef name, int lanes) {
  const bool scalar = lanes == 1;
  const std::string type = scalar ? "f32" : "vector<" + std::to_string(lanes) + "xf32>";
  const std::string access = scalar ? "memref<?xf32>" : "memref<?xf32>, " + type;
  const std::string load = scalar ? " = memref.load %in[" : " = vector.load %in[";
  std::string text = "  func.func @" + name.str() +
                     "(%in: memref<?xf32>, %out: memref<?xf32>, %n: index) {\n"
                     "    %c0 = arith.constant 0 : index\n"
                     "    %step = arith.constant " +
                     std::to_string(lanes) + " : index\n" +
                     "    scf.for %i = %c0 to %n step %step {\n"
                     "      %j = arith.addi %i, %n : index\n"
                     "      %k = arith.addi %j, %n : index\n";
  const std::pair<const char *, const char *> operands[] = {{"a", "i"}, {"b", "j"}, {"c", "k"}};
  for (auto [value, index] : operands)
    text += "      %" + std::string(value) + load + "%" + index + "] : " + access + "\n";
  text += "      %r = math.fma %a, %b, %c : " + type + "\n";
  text += std::string("      ") + (scalar ? "memref.store" : "vector.store") +
          " %r, %out[%i] : " + access + "\n";
  return text + "    }\n    return\n  }\n";
}

std::string fmaSource() {
  return "module { module @k {\n" + fmaFunction("fma_vector", 8) + fmaFunction("fma_scalar", 1) +
         "} }";
}

float fromBits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t toBits(float f) { return std::bit_cast<uint32_t>(f); }

/// An f16 encoding's value, decoded field by field (independent of the
/// kernels' bit tricks).
double decodeHalf(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                     : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                      : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

/// The value of x rounded to nearest-even with `bits` significant bits and
/// minimum normal exponent `minExp`, or ±inf above `maxFinite`.
double roundToFormat(float x, int bits, int minExp, double maxFinite) {
  double ax = std::fabs(static_cast<double>(x));
  int e = 0;
  std::frexp(ax, &e);
  int exponent = std::max(e - 1, minExp);
  double quantum = std::ldexp(1.0, exponent - (bits - 1));
  double rounded = std::nearbyint(ax / quantum) * quantum; // exact quotient
  if (rounded > maxFinite)
    rounded = INFINITY;
  return std::copysign(rounded, static_cast<double>(x));
}

/// Interesting f32 inputs: every exponent and sign with low halves around
/// the bf16 (bit 16) and f16 (bit 13) rounding points, plus specials.
std::vector<float> conversionInputs() {
  std::vector<float> xs;
  for (uint32_t high = 0; high < 0x10000; ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu, 0x2000u, 0x3000u,
                         0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      xs.push_back(fromBits(high << 16 | low));
  xs.push_back(std::numeric_limits<float>::denorm_min());
  xs.push_back(65504.0f), xs.push_back(65519.99f), xs.push_back(65520.0f);
  while (xs.size() % 8)
    xs.push_back(1.0f);
  return xs;
}

class HostMath : public ::testing::Test {
protected:
  HostMath() {
    registerLossJITDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
    context->loadAllAvailableDialects();
    registerLossJITPasses();
  }
  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;

  /// exp2 and log2 of one width (kernels `exp2Name`, `log2Name`) on every
  /// test target, against the wider `Wide` evaluation: within `expBound` and
  /// `logBound` ulp (`ulp`), NaN where the reference is NaN, exp2 of the
  /// integers in [minExp, maxExp] exact, and the same bits on every target.
  template <typename T, typename Wide>
  void checkExp2Log2(std::vector<T> ex, std::vector<T> lx, const char *exp2Name,
                     const char *log2Name, int minExp, int maxExp, double expBound,
                     double logBound, double (*ulp)(T, Wide)) {
    while (ex.size() % 8) // the kernels take 8 lanes per step
      ex.push_back(T(0));
    while (lx.size() % 8)
      lx.push_back(T(1));
    std::vector<T> firstE, firstL;
    for (const CpuTarget &target : testTargets()) {
      SCOPED_TRACE(target.cpu);
      HostFunctions fns(*context, hostMathSource(), target);
      ASSERT_EQ(fns.error, "");
      std::vector<T> e(ex.size()), l(lx.size());
      fns.call(exp2Name, ex.data(), e.data(), static_cast<int64_t>(ex.size()));
      fns.call(log2Name, lx.data(), l.data(), static_cast<int64_t>(lx.size()));
      double worstE = 0, worstL = 0;
      for (size_t i = 0; i < ex.size(); ++i) {
        Wide want = std::exp2(static_cast<Wide>(ex[i]));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(e[i]));
          continue;
        }
        worstE = std::max(worstE, ulp(e[i], want));
      }
      for (int k = minExp; k <= maxExp; ++k)
        EXPECT_EQ(e[std::find(ex.begin(), ex.end(), static_cast<T>(k)) - ex.begin()],
                  std::ldexp(T(1), k))
            << "exp2 of the integer " << k << " is exact";
      for (size_t i = 0; i < lx.size(); ++i) {
        Wide want = std::log2(static_cast<Wide>(lx[i]));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(l[i])) << lx[i];
          continue;
        }
        worstL = std::max(worstL, ulp(l[i], want));
      }
      EXPECT_LE(worstE, expBound) << exp2Name;
      EXPECT_LE(worstL, logBound) << log2Name;
      RecordProperty(std::string(exp2Name) + "_max_ulp_" + target.cpu, std::to_string(worstE));
      RecordProperty(std::string(log2Name) + "_max_ulp_" + target.cpu, std::to_string(worstL));
      if (firstE.empty())
        firstE = e, firstL = l;
      EXPECT_EQ(0, std::memcmp(e.data(), firstE.data(), e.size() * sizeof(T)))
          << exp2Name << " bits differ";
      EXPECT_EQ(0, std::memcmp(l.data(), firstL.data(), l.size() * sizeof(T)))
          << log2Name << " bits differ";
    }
  }
};

TEST_F(HostMath, ConversionsRoundToNearestEvenOnEveryTarget) {
  std::vector<float> xs = conversionInputs();
  int64_t n = static_cast<int64_t>(xs.size());
  std::vector<uint16_t> firstBf16, firstF16;
  for (const CpuTarget &target : testTargets()) {
    SCOPED_TRACE(target.cpu);
    HostFunctions fns(*context, hostMathSource(), target);
    ASSERT_EQ(fns.error, "");
    std::vector<uint16_t> bf16(n), f16(n);
    fns.call("to_bf16", xs.data(), bf16.data(), n);
    fns.call("to_f16", xs.data(), f16.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 10; ++i) {
      float x = xs[i];
      uint32_t sign = toBits(x) >> 31;
      if (std::isnan(x)) {
        // c10::BFloat16 makes every NaN 0x7FC0; c10::Half keeps the sign.
        bad += bf16[i] != 0x7FC0;
        bad += f16[i] != (sign << 15 | 0x7E00);
        EXPECT_EQ(bf16[i], 0x7FC0) << std::hex << toBits(x);
        EXPECT_EQ(f16[i], sign << 15 | 0x7E00) << std::hex << toBits(x);
        continue;
      }
      double wantB = roundToFormat(x, 8, -126, 0x1.FEp127);
      double gotB = fromBits(static_cast<uint32_t>(bf16[i]) << 16);
      double wantH = roundToFormat(x, 11, -14, 65504.0);
      double gotH = decodeHalf(f16[i]);
      bool okB = gotB == wantB && std::signbit(gotB) == std::signbit(wantB);
      bool okH = gotH == wantH && std::signbit(gotH) == std::signbit(wantH);
      bad += !okB + !okH;
      EXPECT_TRUE(okB) << "bf16 of " << std::hexfloat << x << " = " << gotB << ", want " << wantB;
      EXPECT_TRUE(okH) << "f16 of " << std::hexfloat << x << " = " << gotH << ", want " << wantH;
    }
    if (firstBf16.empty())
      firstBf16 = bf16, firstF16 = f16;
    EXPECT_TRUE(bf16 == firstBf16) << "bf16 bits differ from " << testTargets().front().cpu;
    EXPECT_TRUE(f16 == firstF16) << "f16 bits differ from " << testTargets().front().cpu;
  }
}

TEST_F(HostMath, WideningIsExactForEvery16BitEncoding) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i)
    all[i] = static_cast<uint16_t>(i);
  for (const CpuTarget &target : testTargets()) {
    SCOPED_TRACE(target.cpu);
    HostFunctions fns(*context, hostMathSource(), target);
    ASSERT_EQ(fns.error, "");
    std::vector<float> fromB(0x10000), fromH(0x10000);
    fns.call("from_bf16", all.data(), fromB.data(), 0x10000);
    fns.call("from_f16", all.data(), fromH.data(), 0x10000);
    for (uint32_t i = 0; i < 0x10000; ++i) {
      ASSERT_EQ(toBits(fromB[i]), i << 16) << std::hex << i;
      double want = decodeHalf(static_cast<uint16_t>(i));
      if (std::isnan(want)) {
        // Quiet NaN with the payload kept (what F16C and c10::Half give).
        ASSERT_EQ(toBits(fromH[i]), (i >> 15) << 31 | 0x7FC00000u | (i & 0x3FF) << 13)
            << std::hex << i;
        continue;
      }
      ASSERT_EQ(static_cast<double>(fromH[i]), want) << std::hex << i;
      ASSERT_EQ(std::signbit(fromH[i]), std::signbit(want)) << std::hex << i;
    }
  }
}

/// |got − want| in units of the f32 spacing at `want` (subnormal spacing
/// below 2^-126).
double ulpError(float got, double want) {
  // Beyond the f32 range the only right answer is the infinity it rounds to.
  if (float rounded = static_cast<float>(want); std::isinf(rounded) || std::isinf(got))
    return got == rounded ? 0 : INFINITY;
  int e = std::ilogb(want == 0 ? 0x1p-149 : want);
  double ulp = std::ldexp(1.0, std::max(e, -126) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST_F(HostMath, Exp2AndLog2AreWithinAnUlpOnEveryTarget) {
  std::mt19937 rng(11);
  std::vector<float> ex, lx;
  std::uniform_real_distribution<float> range(-155.0f, 135.0f), unit(-1.0f, 1.0f);
  for (int i = 0; i < (1 << 19); ++i)
    ex.push_back(range(rng)), ex.push_back(unit(rng));
  for (int k = -160; k <= 140; ++k)
    ex.push_back(static_cast<float>(k)), ex.push_back(k + 0.5f);
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -149.5f, -149.0f, 127.99999f})
    ex.push_back(s);
  std::uniform_int_distribution<uint32_t> positive(0, 0x7F7FFFFF);
  std::uniform_real_distribution<float> nearOne(0.5f, 2.0f);
  for (int i = 0; i < (1 << 19); ++i)
    lx.push_back(fromBits(positive(rng))), lx.push_back(nearOne(rng));
  for (float s : {0.0f, -0.0f, 1.0f, 2.0f, 0.5f, -1.0f, INFINITY, -INFINITY, NAN,
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                  std::nextafter(1.0f, 2.0f), std::nextafter(1.0f, 0.0f)})
    lx.push_back(s);
  // The exhaustive maxima (scripts/numerics/host-math-exhaustive.cpp) are
  // 0.898 and 1.0024 ulp; these samples must stay within them.
  checkExp2Log2<float, double>(std::move(ex), std::move(lx), "exp2", "log2", -149, 127, 0.898,
                               1.0024, ulpError);
}

/// |got − want| in units of the f64 spacing at `want` (want in long
/// double: 11 more bits than f64 on x86).
double ulpErrorF64(double got, long double want) {
  if (double rounded = static_cast<double>(want); std::isinf(rounded) || std::isinf(got))
    return got == rounded ? 0 : INFINITY;
  int e = std::ilogb(want == 0 ? 0x1p-1074 : static_cast<double>(want));
  long double ulp = std::ldexp(1.0L, std::max(e, -1022) - 52);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

TEST_F(HostMath, F64Exp2AndLog2AreWithinAFewUlpOnEveryTarget) {
  // f64 data computes in f64: its exp2 (Taylor series of degree 13) and
  // log2 (odd series of atanh) are expanded too, the same bits everywhere.
  std::mt19937_64 rng(12);
  std::vector<double> ex, lx;
  std::uniform_real_distribution<double> range(-1080.0, 1030.0), unit(-1.0, 1.0);
  for (int i = 0; i < (1 << 17); ++i)
    ex.push_back(range(rng)), ex.push_back(unit(rng));
  for (int k = -1074; k <= 1023; ++k)
    ex.push_back(k);
  for (double s : {0.0, -0.0, double(INFINITY), double(-INFINITY), double(NAN), 0.5, -1074.5})
    ex.push_back(s);
  std::uniform_int_distribution<uint64_t> positive(0, 0x7FEFFFFFFFFFFFFFull);
  std::uniform_real_distribution<double> nearOne(0.5, 2.0);
  for (int i = 0; i < (1 << 17); ++i)
    lx.push_back(std::bit_cast<double>(positive(rng))), lx.push_back(nearOne(rng));
  for (double s : {0.0, -0.0, 1.0, 2.0, 0.5, -1.0, double(INFINITY), double(-INFINITY),
                   double(NAN), std::numeric_limits<double>::denorm_min(),
                   std::numeric_limits<double>::max(), std::nextafter(1.0, 2.0),
                   std::nextafter(1.0, 0.0)})
    lx.push_back(s);
  // Measured on these samples: log2 3.17 ulp (s = (m − 1)/(m + 1) rounds
  // m + 1 and the quotient; fine for f64 reference runs and gradcheck).
  checkExp2Log2<double, long double>(std::move(ex), std::move(lx), "exp2_f64", "log2_f64", -1074,
                                     1023, 2.0, 3.5, ulpErrorF64);
}

/// Triples for fma: random bit patterns (specials included), cancellation,
/// products that are exactly an f32 midpoint plus a tiny c (where rounding
/// the f64 sum to nearest before rounding to f32 would round twice), and
/// underflow to f32 subnormals, at many scales.
std::vector<std::array<float, 3>> fmaInputs() {
  std::mt19937 rng(13);
  std::uniform_int_distribution<uint32_t> anyBits;
  std::uniform_int_distribution<int> scale(-70, 60), tinyExponent(-62, -1), coin(0, 1);
  std::uniform_int_distribution<uint32_t> odd13(2048, 4095); // 2k + 1: 13 bits
  std::vector<std::array<float, 3>> t;
  for (int i = 0; i < (1 << 16); ++i)
    t.push_back({fromBits(anyBits(rng)), fromBits(anyBits(rng)), fromBits(anyBits(rng))});
  for (int i = 0; i < (1 << 16); ++i) {
    float a = fromBits(anyBits(rng) & 0xBFFFFFFFu), b = fromBits(anyBits(rng) & 0xBFFFFFFFu);
    float p = a * b;
    t.push_back({a, b, -p});
    t.push_back({a, b, std::nextafter(-p, coin(rng) ? INFINITY : -INFINITY)});
  }
  for (size_t end = t.size() + (1 << 16); t.size() < end;) {
    // a·b with 25 significant bits, the last one set: an f32 midpoint.
    uint32_t x = 2 * odd13(rng) + 1, y = 2 * odd13(rng) + 1;
    if (uint64_t{x} * y >= (1u << 25))
      continue;
    int sa = scale(rng), sb = scale(rng) / 2;
    float a = std::ldexp(static_cast<float>(x), sa), b = std::ldexp(static_cast<float>(y), sb);
    float c = std::ldexp(coin(rng) ? 1.0f : -1.0f, sa + sb + tinyExponent(rng));
    t.push_back({coin(rng) ? a : -a, b, c});
  }
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < (1 << 14); ++i) // products near and below f32's normal range
    t.push_back({std::ldexp(unit(rng), -60 - scale(rng) / 4), std::ldexp(unit(rng), -70),
                 std::ldexp(unit(rng), -126 - (i % 24))});
  const float inf = INFINITY, nan = NAN, big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (float a : {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, big, tiny})
    for (float b : {0.0f, -0.0f, 2.0f, -0.5f, inf, -inf, nan, big, tiny})
      for (float c : {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, -big, tiny})
        t.push_back({a, b, c});
  while (t.size() % 8)
    t.push_back({1.0f, 1.0f, 1.0f});
  return t;
}

TEST_F(HostMath, FmaIsExactlyRoundedOnEveryTarget) {
  // On a target without FMA units (x86-64-v2) f32 fma is expanded into f64
  // arithmetic rounded to odd: it must give std::fma's bits (IEEE 754's
  // fusedMultiplyAdd, which the FMA targets compute in one instruction).
  std::vector<std::array<float, 3>> t = fmaInputs();
  const int64_t n = static_cast<int64_t>(t.size());
  std::vector<float> in(3 * t.size());
  for (size_t i = 0; i < t.size(); ++i)
    for (int k = 0; k < 3; ++k)
      in[k * t.size() + i] = t[i][k];
  for (const CpuTarget &target : testTargets()) {
    SCOPED_TRACE(target.cpu);
    HostFunctions fns(*context, fmaSource(), target);
    ASSERT_EQ(fns.error, "");
    // No fmaf call on any target: FMA units, or the expansion.
    EXPECT_FALSE(llvm::is_contained(fns.calls, "fmaf"));
    for (const char *name : {"fma_vector", "fma_scalar"}) {
      SCOPED_TRACE(name);
      std::vector<float> out(t.size());
      fns.call(name, in.data(), out.data(), n);
      int wrong = 0;
      for (size_t i = 0; i < t.size(); ++i) {
        float want = std::fma(t[i][0], t[i][1], t[i][2]);
        bool same = std::isnan(want) ? std::isnan(out[i]) : toBits(out[i]) == toBits(want);
        if (!same && ++wrong <= 5)
          ADD_FAILURE() << "fma(" << std::hexfloat << t[i][0] << ", " << t[i][1] << ", " << t[i][2]
                        << ") = " << out[i] << ", want " << want;
      }
      EXPECT_EQ(wrong, 0);
    }
  }
  // The check sees what the expansion replaces: without the pass, the
  // FMA-less target's object calls fmaf.
  auto v2 = cantFail(CpuTarget::resolve("x86-64-v2"));
  EXPECT_FALSE(v2.hasFmaUnits());
  HostFunctions raw(*context, fmaSource(), v2, /*expand=*/false);
  ASSERT_EQ(raw.error, "");
  EXPECT_TRUE(llvm::is_contained(raw.calls, "fmaf"));
}

TEST_F(HostMath, ObjectsCallingUnprovidedRoutinesAreRejected) {
  // Without the expansion, x86-64-v3 (no AVX512_BF16) needs __truncsfbf2 —
  // the libcall gcc 12's libgcc lacks — and every target needs exp2f: the
  // object check names them instead of a JIT "symbols not found" at run time.
  auto v3 = cantFail(CpuTarget::resolve("x86-64-v3"));
  HostFunctions raw(*context, hostMathSource(), v3, /*expand=*/false);
  EXPECT_NE(raw.error.find("__truncsfbf2"), std::string::npos) << raw.error;
  EXPECT_NE(raw.error.find("exp2f"), std::string::npos) << raw.error;
  EXPECT_NE(raw.error.find("which lossjit does not provide"), std::string::npos) << raw.error;
  HostFunctions expanded(*context, hostMathSource(), v3);
  EXPECT_EQ(expanded.error, "");
}

TEST_F(HostMath, KernelObjectsNeedOnlyLossjitsRoutines) {
  // Every kernel family, every storage type, every target: the object's
  // undefined symbols are a subset of cpuRuntimeSymbols(); x86-64-v2 (no
  // FMA units) is the only one that calls fmaf (its exp2/log2 polynomials;
  // the products' fmas are expanded) and fma (f64).
  for (const CpuTarget &target : testTargets())
    for (std::string dtype : {"f16", "bf16", "f32", "f64"})
      for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE(target.cpu + " " + dtype + " variant " + std::to_string(variant));
        LceGraphOptions o;
        o.dtype = dtype;
        o.bias = true;
        o.softcap = variant == 0 ? 0.0 : 30.0;
        o.gradient = variant > 0;
        o.strategy = variant == 2 ? "recompute" : "chunked";
        auto graph = buildLinearCrossEntropyGraph(*context, o);
        ASSERT_TRUE(static_cast<bool>(graph)) << llvm::toString(graph.takeError());
        auto op = CpuCompiledOp::compile(**graph, CpuTileConfig{}, target);
        ASSERT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
        EXPECT_EQ((*op)->target().key(), target.key());
        std::vector<std::string> calls = cantFail(undefinedSymbols((*op)->objectCode()));
        if (target.hasFmaUnits()) {
          EXPECT_FALSE(llvm::is_contained(calls, "fmaf"));
          EXPECT_FALSE(llvm::is_contained(calls, "fma"));
        }
      }
}

TEST_F(HostMath, TwoTargetsAreTwoCacheEntries) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("lossjit-target-cache", dir));
  runtime::KernelCacheOptions options;
  options.directory = dir.str().str();
  runtime::KernelCache cache(options);
  LceGraphOptions g;
  g.dtype = "bf16";
  auto compileFor = [&](const char *spec) {
    auto graph = buildLinearCrossEntropyGraph(*context, g);
    EXPECT_TRUE(static_cast<bool>(graph));
    auto op = CpuCompiledOp::compileCached(**graph, CpuTileConfig{},
                                           cantFail(CpuTarget::resolve(spec)), cache);
    EXPECT_TRUE(static_cast<bool>(op)) << llvm::toString(op.takeError());
    return op ? std::move(*op) : nullptr;
  };
  auto v2 = compileFor("x86-64-v2");
  auto v3 = compileFor("x86-64-v3");
  EXPECT_EQ(cache.stats().compiles, 2u);
  int entries = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    entries += llvm::sys::fs::is_directory(it->path());
  EXPECT_EQ(entries, 2);
  // The same target again is a hit; a second process (fresh cache) links it.
  cache.clearMemory();
  auto again = compileFor("x86-64-v3");
  EXPECT_EQ(cache.stats().compiles, 2u);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->fromCache());
  EXPECT_EQ(again->target().cpu, "x86-64-v3");
  llvm::sys::fs::remove_directories(dir);
}
} // namespace
