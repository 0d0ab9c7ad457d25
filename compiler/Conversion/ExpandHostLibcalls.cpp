//===- ExpandHostLibcalls.cpp - conversions, exp2/log2, fma as arithmetic ===//
//
// Why: LLVM turns these ops into calls (__truncsfbf2, __extendhfsf2,
// __truncsfhf2, exp2f, log2f) when the target CPU has no instruction for
// them, and what those calls resolve to depends on the host's libgcc /
// compiler-rt / libm — or fails to resolve at all (gcc 12's libgcc has no
// __truncsfbf2). Expanded here, the host code is the same arithmetic on
// every CPU, so its bits do not depend on the CPU either. The polynomial
// coefficients come from scripts/fit-host-math.py (minimax fits, checked
// there and by tests/unit/compiler/HostMathTest.cpp).
//
//===----------------------------------------------------------------------===//

#include "compiler/Conversion/Passes.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <array>
#include <bit>
#include <cstdint>

namespace lossjit {
#define GEN_PASS_DEF_LOSSEXPANDHOSTLIBCALLS
#include "compiler/Conversion/Passes.h.inc"
} // namespace lossjit

using namespace mlir;
using namespace lossjit;

namespace {
/// `type` with its element type replaced (a scalar stays a scalar).
Type withElement(Type type, Type element) {
  if (auto vector = dyn_cast<VectorType>(type))
    return vector.clone(element);
  return element;
}

/// Emits element-wise integer/float arithmetic in the shape of one value
/// (a scalar or a vector), so each expansion reads like its scalar formula.
/// The float is the shape's element type when it is f64, else f32; the
/// integers are as wide as it (i64 or i32), for bit manipulation.
class Arith {
public:
  Arith(PatternRewriter &rewriter, Location loc, Type shape)
      : r(rewriter), loc(loc),
        width(getElementTypeOrSelf(shape).isF64() ? 64 : 32),
        intType(withElement(shape, r.getIntegerType(width))),
        floatType(withElement(shape, width == 64 ? Type(r.getF64Type()) : r.getF32Type())) {}

  /// An integer constant of the arithmetic's width (its low bits).
  Value i(uint64_t v) {
    return constant(intType, r.getIntegerAttr(getElementTypeOrSelf(intType), APInt(width, v)));
  }
  /// A float constant (for f32, `v` must be an f32 value: it is exact).
  Value f(double v) { return constant(floatType, r.getFloatAttr(getElementTypeOrSelf(floatType), v)); }
  /// The float whose bits are `bits`.
  Value fBits(uint64_t bits) {
    return width == 64 ? f(std::bit_cast<double>(bits))
                       : f(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }

  Value bitsOf(Value x) { return arith::BitcastOp::create(r, loc, intType, x); }
  Value floatOf(Value n) { return arith::BitcastOp::create(r, loc, floatType, n); }
  Value add(Value a, Value b) { return arith::AddIOp::create(r, loc, a, b); }
  Value sub(Value a, Value b) { return arith::SubIOp::create(r, loc, a, b); }
  Value band(Value a, Value b) { return arith::AndIOp::create(r, loc, a, b); }
  Value bor(Value a, Value b) { return arith::OrIOp::create(r, loc, a, b); }
  Value bxor(Value a, Value b) { return arith::XOrIOp::create(r, loc, a, b); }
  Value shl(Value a, uint32_t n) { return arith::ShLIOp::create(r, loc, a, i(n)); }
  Value shrU(Value a, uint32_t n) { return arith::ShRUIOp::create(r, loc, a, i(n)); }
  Value shrS(Value a, uint32_t n) { return arith::ShRSIOp::create(r, loc, a, i(n)); }
  Value cmpI(arith::CmpIPredicate p, Value a, Value b) {
    return arith::CmpIOp::create(r, loc, p, a, b);
  }
  Value cmpF(arith::CmpFPredicate p, Value a, Value b) {
    return arith::CmpFOp::create(r, loc, p, a, b);
  }
  Value select(Value c, Value a, Value b) { return arith::SelectOp::create(r, loc, c, a, b); }
  Value addF(Value a, Value b) { return arith::AddFOp::create(r, loc, a, b); }
  Value subF(Value a, Value b) { return arith::SubFOp::create(r, loc, a, b); }
  Value mulF(Value a, Value b) { return arith::MulFOp::create(r, loc, a, b); }
  Value divF(Value a, Value b) { return arith::DivFOp::create(r, loc, a, b); }
  Value fma(Value a, Value b, Value c) { return math::FmaOp::create(r, loc, a, b, c); }
  Value isNaN(Value x) { return cmpF(arith::CmpFPredicate::UNO, x, x); }
  Value toFloat(Value n) { return arith::SIToFPOp::create(r, loc, floatType, n); }
  Value toInt(Value x) { return arith::FPToSIOp::create(r, loc, intType, x); }
  /// Horner's rule with fma, highest coefficient first.
  Value horner(llvm::ArrayRef<float> highToLow, Value x) { return hornerOf(highToLow, x); }
  Value horner(llvm::ArrayRef<double> highToLow, Value x) { return hornerOf(highToLow, x); }

  /// Zero-extends 16-bit storage bits to the (32-bit) integer type.
  Value widen16(Value v16) {
    Type i16Type = withElement(v16.getType(), r.getI16Type());
    Value bits = arith::BitcastOp::create(r, loc, i16Type, v16);
    return arith::ExtUIOp::create(r, loc, intType, bits);
  }
  /// The low 16 bits of `bits` as a value of `type` (f16/bf16 shaped).
  Value narrow16(Value bits, Type type) {
    Type i16Type = withElement(type, r.getI16Type());
    Value low = arith::TruncIOp::create(r, loc, i16Type, bits);
    return arith::BitcastOp::create(r, loc, type, low);
  }

private:
  template <typename T> Value hornerOf(llvm::ArrayRef<T> highToLow, Value x) {
    Value p = f(highToLow.front());
    for (T c : highToLow.drop_front())
      p = fma(p, x, f(c));
    return p;
  }
  Value constant(Type type, TypedAttr scalar) {
    if (auto vector = dyn_cast<VectorType>(type))
      return arith::ConstantOp::create(r, loc, DenseElementsAttr::get(vector, scalar));
    return arith::ConstantOp::create(r, loc, scalar);
  }

  PatternRewriter &r;
  Location loc;
  unsigned width;
  Type intType, floatType;
};

bool isF32Shaped(Type t) { return getElementTypeOrSelf(t).isF32(); }
bool isF64Shaped(Type t) { return getElementTypeOrSelf(t).isF64(); }

/// (ln 2)^k / k! for k = 13 … 0: the Taylor series of 2^f = e^{f·ln 2}.
/// On |f| ≤ 1/2 the first term left out, (ln 2 / 2)^14 / 14!, is 4e-18
/// of the result: below half an f64 ulp, so Horner's rounding dominates.
constexpr std::array<double, 14> exp2TaylorF64() {
  std::array<double, 14> c{};
  double term = 1.0;
  for (int k = 0; k < 14; ++k) {
    c[13 - k] = term;
    term = term * 0.6931471805599453094 / (k + 1);
  }
  return c;
}

/// The range reduction both widths' exp2 share: x = n + f with n = round(x)
/// (by the 1.5·2^m shifter: exact for |x| < 2^(m−1), no roundeven
/// instruction or libcall), |f| ≤ 1/2, 2^f ≈ poly(f), then p·2^n in two
/// exact power-of-two steps (n = n1 + n2, each within the normal exponent
/// range), so a subnormal result is rounded only once. x is clamped to
/// [lo, hi] first: beyond it the result is 0 or inf either way, and the
/// scaling stays in range. NaN is restored last.
struct Exp2Format {
  double lo, hi, shifter;
  uint32_t bias, mantissaBits;
};
Value expandExp2(Arith &a, Value x, const Exp2Format &format,
                 llvm::function_ref<Value(Value)> poly) {
  using P = arith::CmpFPredicate;
  Value lo = a.f(format.lo), hi = a.f(format.hi);
  Value xc = a.select(a.cmpF(P::OLT, x, lo), lo, a.select(a.cmpF(P::OGT, x, hi), hi, x));
  Value shifter = a.f(format.shifter);
  Value n = a.subF(a.addF(xc, shifter), shifter);
  Value f = a.subF(xc, n); // exact: Sterbenz
  Value p = poly(f);
  Value ni = a.toInt(n);
  Value n1 = a.shrS(ni, 1);
  Value n2 = a.sub(ni, n1);
  auto pow2 = [&](Value k) {
    return a.floatOf(a.shl(a.add(k, a.i(format.bias)), format.mantissaBits));
  };
  Value result = a.mulF(a.mulF(p, pow2(n1)), pow2(n2));
  return a.select(a.isNaN(x), x, result);
}

/// 2^x for f64 x: 2^f by its Taylor series (exp2TaylorF64).
Value expandExp2F64(Arith &a, Value x) {
  static constexpr std::array<double, 14> kTaylor = exp2TaylorF64();
  return expandExp2(a, x, {-1076.0, 1025.0, 6755399441055744.0, 1023, 52},
                    [&](Value f) { return a.horner(llvm::ArrayRef<double>(kTaylor), f); });
}

/// The decomposition both widths' log2 share: x = 2^e·m with m ∈ [√½, √2)
/// (subnormal inputs scaled into the normal range first), log2 x =
/// log2m(m) + e, then the specials: log2(±0) = −inf, log2(+inf) = +inf,
/// log2(x < 0) = NaN, NaN stays.
struct Log2Format {
  double minNormal, subnormalScale;
  uint32_t bias, mantissaBits, scaleBits;
  uint64_t mantissaMask, one, sqrt2, inf, negInf, nan;
};
Value expandLog2(Arith &a, Value x, const Log2Format &format,
                 llvm::function_ref<Value(Value)> log2m) {
  using P = arith::CmpFPredicate;
  using I = arith::CmpIPredicate;
  Value tiny = a.cmpF(P::OLT, x, a.f(format.minNormal));
  Value xs = a.select(tiny, a.mulF(x, a.f(format.subnormalScale)), x);
  Value bits = a.bitsOf(xs);
  Value e = a.sub(a.shrU(bits, format.mantissaBits),
                  a.select(tiny, a.i(format.bias + format.scaleBits), a.i(format.bias)));
  Value m = a.bor(a.band(bits, a.i(format.mantissaMask)), a.i(format.one)); // [1, 2)
  Value above = a.cmpI(I::ugt, m, a.i(format.sqrt2));                      // > √2
  m = a.select(above, a.sub(m, a.i(1ull << format.mantissaBits)), m);     // halve
  e = a.select(above, a.add(e, a.i(1)), e);
  // (In sequence: an argument list's evaluation order is unspecified, and
  // the IR's op order should not depend on the C++ compiler.)
  Value mantissaLog = log2m(a.floatOf(m));
  Value result = a.addF(mantissaLog, a.toFloat(e));
  Value inf = a.fBits(format.inf);
  result = a.select(a.cmpF(P::OEQ, x, a.f(0.0)), a.fBits(format.negInf), result);
  result = a.select(a.cmpF(P::OEQ, x, inf), inf, result);
  result = a.select(a.cmpF(P::OLT, x, a.f(0.0)), a.fBits(format.nan), result);
  return a.select(a.isNaN(x), x, result);
}

/// log2(x) for f64 x: ln m = 2·atanh(s) with s = (m − 1)/(m + 1), |s| ≤
/// 0.1716: 2s·Σ_{k ≤ 11} s^{2k}/(2k + 1), the first term left out below
/// 1e-18 of the sum.
Value expandLog2F64(Arith &a, Value x) {
  static constexpr std::array<double, 12> kOdd = {
      1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
      1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3,  1.0};
  return expandLog2(a, x,
                    {0x1p-1022, 0x1p52, 1023, 52, 52, 0x000FFFFFFFFFFFFFull,
                     0x3FF0000000000000ull, 0x3FF6A09E667F3BCDull, 0x7FF0000000000000ull,
                     0xFFF0000000000000ull, 0x7FF8000000000000ull},
                    [&](Value m) {
                      Value s = a.divF(a.subF(m, a.f(1.0)), a.addF(m, a.f(1.0)));
                      Value series = a.horner(llvm::ArrayRef<double>(kOdd), a.mulF(s, s));
                      // log2 m = (2·log2 e)·s·series.
                      return a.mulF(a.mulF(s, a.f(2.0 * 1.44269504088896340736)), series);
                    });
}

/// arith.extf from f16/bf16 to f32.
struct ExpandExtendToF32 : OpRewritePattern<arith::ExtFOp> {
  ExpandExtendToF32(MLIRContext *ctx, bool f16InHardware)
      : OpRewritePattern(ctx), f16InHardware(f16InHardware) {}
  LogicalResult matchAndRewrite(arith::ExtFOp op, PatternRewriter &rewriter) const override {
    Type from = getElementTypeOrSelf(op.getIn().getType());
    if (!isF32Shaped(op.getType()) || !(from.isBF16() || from.isF16()))
      return rewriter.notifyMatchFailure(op, "only f16/bf16 → f32 needs a libcall on some hosts");
    if (from.isF16() && f16InHardware)
      return rewriter.notifyMatchFailure(op, "the target widens f16 exactly in hardware");
    Arith a(rewriter, op.getLoc(), op.getType());
    Value h = a.widen16(op.getIn());
    if (from.isBF16()) {
      // bf16 is the high half of an f32: exact, NaN payloads kept.
      rewriter.replaceOp(op, a.floatOf(a.shl(h, 16)));
      return success();
    }
    using P = arith::CmpIPredicate;
    Value sign = a.shl(a.band(h, a.i(0x8000)), 16);
    Value exponent = a.band(h, a.i(0x7C00));
    Value mantissa = a.band(h, a.i(0x03FF));
    // Normal: rebias the exponent by 127 − 15 = 112.
    Value normal = a.add(a.shl(a.band(h, a.i(0x7FFF)), 13), a.i(112u << 23));
    // Inf/NaN: all-ones exponent; a NaN comes back quiet, like a hardware
    // conversion (and c10::Half) gives it.
    Value quiet = a.select(a.cmpI(P::ne, mantissa, a.i(0)), a.i(0x00400000), a.i(0));
    Value special = a.bor(a.bor(a.i(0x7F800000), a.shl(mantissa, 13)), quiet);
    // Zero/subnormal: mantissa · 2^-24, exact in f32 (a normal number).
    Value tiny = a.bitsOf(a.mulF(a.toFloat(mantissa), a.f(0x1p-24f)));
    Value magnitude = a.select(a.cmpI(P::eq, exponent, a.i(0)), tiny,
                               a.select(a.cmpI(P::eq, exponent, a.i(0x7C00)), special, normal));
    rewriter.replaceOp(op, a.floatOf(a.bor(magnitude, sign)));
    return success();
  }
  bool f16InHardware;
};

/// arith.truncf from f32 to f16/bf16, round to nearest even.
struct ExpandTruncateFromF32 : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::TruncFOp op, PatternRewriter &rewriter) const override {
    Type to = getElementTypeOrSelf(op.getType());
    if (!isF32Shaped(op.getIn().getType()) || !(to.isBF16() || to.isF16()))
      return rewriter.notifyMatchFailure(op, "only f32 → f16/bf16 needs a libcall on some hosts");
    if (op.getRoundingmodeAttr() &&
        op.getRoundingmodeAttr().getValue() != arith::RoundingMode::to_nearest_even)
      return rewriter.notifyMatchFailure(op, "only round-to-nearest-even is expanded");
    Arith a(rewriter, op.getLoc(), op.getIn().getType());
    Value x = op.getIn();
    Value u = a.bitsOf(x);
    Value result = to.isBF16() ? truncateToBF16(a, x, u) : truncateToF16(a, u);
    rewriter.replaceOp(op, a.narrow16(result, op.getType()));
    return success();
  }

  /// c10::BFloat16's round_to_nearest_even: add 0x7FFF plus the lowest kept
  /// bit, keep the high half; a carry into the exponent rounds up correctly
  /// (to inf at the top); every NaN becomes 0x7FC0.
  static Value truncateToBF16(Arith &a, Value x, Value u) {
    Value lsb = a.band(a.shrU(u, 16), a.i(1));
    Value rounded = a.shrU(a.add(u, a.add(a.i(0x7FFF), lsb)), 16);
    return a.select(a.isNaN(x), a.i(0x7FC0), rounded);
  }

  /// Round to nearest even on the magnitude, sign reattached:
  /// |x| ≥ 2^16 (or inf) → inf, NaN → 0x7E00; |x| < 2^-14 → subnormal or
  /// zero by one f32 add that aligns the 10 kept bits at the bottom (the
  /// add's own round-to-nearest-even does the rounding); otherwise rebias
  /// and round on the 13 dropped bits.
  static Value truncateToF16(Arith &a, Value u) {
    using P = arith::CmpIPredicate;
    Value sign = a.band(u, a.i(0x80000000u));
    Value mag = a.bxor(u, sign);
    Value big = a.cmpI(P::uge, mag, a.i(0x47800000)); // (127 + 16) << 23
    Value special = a.select(a.cmpI(P::ugt, mag, a.i(0x7F800000)), a.i(0x7E00), a.i(0x7C00));
    Value small = a.cmpI(P::ult, mag, a.i(0x38800000)); // (127 - 14) << 23
    Value aligned = a.addF(a.floatOf(mag), a.f(0.5f));  // 0.5 = 2^-1: ulp 2^-24
    Value subnormal = a.sub(a.bitsOf(aligned), a.i(0x3F000000));
    Value odd = a.band(a.shrU(mag, 13), a.i(1));
    // (15 − 127) << 23 rebiases the exponent; 0xFFF + odd rounds half to even.
    Value normal = a.shrU(a.add(a.add(mag, a.i(0xC8000FFFu)), odd), 13);
    Value magnitude = a.select(big, special, a.select(small, subnormal, normal));
    return a.bor(magnitude, a.shrU(sign, 16));
  }
};

/// 2^x for f32 x: x = n + f with n = round(x), |f| ≤ 1/2, 2^f = 1 + f·q(f).
struct ExpandExp2 : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::Exp2Op op, PatternRewriter &rewriter) const override {
    if (!isF32Shaped(op.getType()))
      return rewriter.notifyMatchFailure(op, "only f32 exp2 is expanded here (f64: ExpandF64)");
    Arith a(rewriter, op.getLoc(), op.getType());
    // Minimax fit of q(f) = (2^f − 1)/f on [−1/2, 1/2], relative error 1.1e-8.
    static constexpr float kQ[] = {1.54035122e-4f, 1.33907353e-3f, 9.61823761e-3f,
                                   5.55035733e-2f, 2.40226492e-1f, 6.93147182e-1f};
    rewriter.replaceOp(op, expandExp2(a, op.getOperand(), {-151.0, 129.0, 12582912.0, 127, 23},
                                      [&](Value f) {
                                        return a.fma(a.horner(kQ, f), f, a.f(1.0f));
                                      }));
    return success();
  }
};

/// log2(x) for f32 x: x = 2^e·m, m ∈ [√½, √2), log2 m = r·g(r) with r = m − 1.
struct ExpandLog2 : OpRewritePattern<math::Log2Op> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::Log2Op op, PatternRewriter &rewriter) const override {
    if (!isF32Shaped(op.getType()))
      return rewriter.notifyMatchFailure(op, "only f32 log2 is expanded here (f64: ExpandF64)");
    Arith a(rewriter, op.getLoc(), op.getType());
    // g(r) = log2(1 + r)/r = C0 + r·h(r) with r = m − 1 (exact: Sterbenz);
    // minimax fit, relative error 4.1e-9. C0 = log2(e) is split in two so
    // r·C0 keeps its low bits for r → 0.
    static constexpr float kH[] = {-1.09949477e-1f, 1.86174989e-1f,  -1.91062793e-1f,
                                   2.04600617e-1f,  -2.39617392e-1f, 2.88567394e-1f,
                                   -3.60696644e-1f, 4.80898231e-1f,  -7.21347332e-1f};
    constexpr float kC0Hi = 1.44269502e+0f, kC0Lo = 1.92596303e-8f;
    Value result = expandLog2(a, op.getOperand(),
                              {0x1p-126, 0x1p23, 127, 23, 23, 0x007FFFFF, 0x3F800000,
                               0x3FB504F3, 0x7F800000, 0xFF800000, 0x7FC00000},
                              [&](Value m) {
                                Value r = a.subF(m, a.f(1.0f));
                                Value s = a.mulF(r, a.horner(kH, r));
                                Value t = a.fma(s, r, a.mulF(r, a.f(kC0Lo)));
                                return a.fma(r, a.f(kC0Hi), t);
                              });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// f64 exp2 / log2 as arithmetic: on the host (no libm call) and on the GPU
/// (PTX has no f64 ex2/lg2 and lossjit links no libdevice) alike.
template <typename MathOp, Value (*expand)(Arith &, Value)>
struct ExpandF64 : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(MathOp op, PatternRewriter &rewriter) const override {
    if (!isF64Shaped(op.getType()))
      return rewriter.notifyMatchFailure(op, "only f64 is expanded by this pattern");
    Arith a(rewriter, op.getLoc(), op.getType());
    rewriter.replaceOp(op, expand(a, op.getOperand()));
    return success();
  }
};

/// f32 fma(a, b, c), exactly rounded, in f64 arithmetic: for a target
/// without FMA units, where LLVM would call fmaf for each element (a
/// scalar call per lane of every vector: some 90 times slower than the
/// FMA target). a·b is exact in f64 (24 + 24 significant bits, and no f32
/// product leaves f64's normal range). s = a·b + c rounded to nearest
/// could land exactly on a midpoint between two f32 values that the exact
/// sum is not on, and the f32 rounding would then round twice; rounded to
/// odd instead (the exact error of the sum by two-sum, and s moved one f64
/// step toward it when inexact and even), s keeps the information the
/// final rounding needs: rounding to odd with 53 ≥ 24 + 2 bits, then to
/// nearest, rounds once (Boldo and Melquiond). Infinite or NaN sums make
/// the error NaN, which leaves s alone; zeros keep the signs a fused
/// multiply-add gives (an exact zero sum has no error).
struct ExpandF32Fma : OpRewritePattern<math::FmaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::FmaOp op, PatternRewriter &rewriter) const override {
    if (!isF32Shaped(op.getType()))
      return rewriter.notifyMatchFailure(
          op, "only f32 fma is expanded (f64 would need double-f64 arithmetic)");
    Type wide = withElement(op.getType(), rewriter.getF64Type());
    Arith d(rewriter, op.getLoc(), wide);
    auto widen = [&](Value x) { return arith::ExtFOp::create(rewriter, op.getLoc(), wide, x); };
    // (In sequence, as in expandLog2: the IR's op order should not depend
    // on the C++ compiler's argument evaluation order.)
    Value a = widen(op.getA());
    Value b = widen(op.getB());
    Value c = widen(op.getC());
    Value product = d.mulF(a, b); // exact
    Value sum = d.addF(product, c);
    // Two-sum (Knuth): the exact error of the rounded sum.
    Value cPart = d.subF(sum, product);
    Value productPart = d.subF(sum, cPart);
    Value productError = d.subF(product, productPart);
    Value cError = d.subF(c, cPart);
    Value error = d.addF(productError, cError);
    using P = arith::CmpIPredicate;
    Value bits = d.bitsOf(sum);
    Value zero = d.f(0.0);
    Value inexact = d.cmpF(arith::CmpFPredicate::ONE, error, zero); // NaN: false
    Value one = d.i(1);
    Value none = d.i(0);
    Value even = d.cmpI(P::eq, d.band(bits, one), none);
    // One step away from zero when the error has the sum's sign, else toward it.
    Value sameSign = d.cmpI(P::sge, d.bxor(bits, d.bitsOf(error)), none);
    Value minusOne = d.i(~uint64_t{0});
    Value step = d.select(sameSign, one, minusOne);
    Value stepped = d.add(bits, step);
    Value odd = d.select(d.band(inexact, even), stepped, bits);
    rewriter.replaceOpWithNewOp<arith::TruncFOp>(op, op.getType(), d.floatOf(odd));
    return success();
  }
};

struct ExpandHostLibcallsPass : lossjit::impl::LossExpandHostLibcallsBase<ExpandHostLibcallsPass> {
  using LossExpandHostLibcallsBase::LossExpandHostLibcallsBase;
  void runOnOperation() override {
    // The kernels' own fmas first, alone: the exp2/log2 polynomials below
    // add some ten more per call, which stay calls to the exact fmaf. They
    // are about 1 % of the work (one exp2 per logit against D fmas), and
    // expanded they would make up most of the code LLVM compiles.
    if (expandF32Fma) {
      RewritePatternSet fmas(&getContext());
      fmas.add<ExpandF32Fma>(&getContext());
      if (failed(applyPatternsGreedily(getOperation(), std::move(fmas))))
        return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    populateExpandHostLibcallsPatterns(patterns, f16ExtendInHardware);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void lossjit::populateExpandHostLibcallsPatterns(RewritePatternSet &patterns,
                                                 bool f16ExtendInHardware) {
  patterns.add<ExpandExtendToF32>(patterns.getContext(), f16ExtendInHardware);
  patterns.add<ExpandTruncateFromF32, ExpandExp2, ExpandLog2>(patterns.getContext());
  populateExpandF64MathPatterns(patterns);
}

void lossjit::populateExpandF64MathPatterns(RewritePatternSet &patterns) {
  patterns.add<ExpandF64<math::Exp2Op, expandExp2F64>, ExpandF64<math::Log2Op, expandLog2F64>>(
      patterns.getContext());
}
