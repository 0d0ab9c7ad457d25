//===- ExecCast.cpp - execution of conversions ----------------------------===//
//
// Integer casts sign- or zero-extend and truncate words; int → float rounds
// once; float → int truncates toward zero and fails when the result does not
// fit; bitcasts go through the raw bits (f16/bf16 re-encoded from their f32
// register form).
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

namespace {

/// The raw bits of a register word of type `type` (f16/bf16 re-encoded).
uint64_t toBits(ElementType type, uint64_t word) {
  switch (type) {
  case ElementType::F16:
    return doubleToHalfBits(asF32(word));
  case ElementType::BF16:
    return doubleToBFloat16Bits(asF32(word));
  default:
    return word;
  }
}
/// The register word of type `type` whose raw bits are `bits`.
uint64_t fromBits(ElementType type, uint64_t bits) {
  switch (type) {
  case ElementType::F16:
    return fromF32(halfBitsToFloat(uint16_t(bits)));
  case ElementType::BF16:
    return fromF32(bfloat16BitsToFloat(uint16_t(bits)));
  case ElementType::F32:
    return bits & 0xffffffffu;
  default:
    return bits & widthMask(getBitWidth(type));
  }
}

} // namespace

bool Executor::execCast(const Instr &in, const uint32_t *act, uint32_t n) {
  unsigned srcWidth = getBitWidth(in.ty), dstWidth = getBitWidth(in.rty);
  uint64_t dstMask = widthMask(dstWidth);
  for (uint32_t l = 0; l < in.lanes; ++l) {
    uint64_t *r = slot(in.res + l), *pa = slot(in.a + l);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      uint64_t a = pa[t];
      switch (in.opc) {
      case Opc::IntCastS:
        r[t] = uint64_t(signExtend(a, srcWidth)) & dstMask;
        break;
      case Opc::IntCastU:
        r[t] = a & dstMask;
        break;
      case Opc::SIToFP: {
        int64_t v = signExtend(a, srcWidth);
        // int64 → f32 directly: one rounding (via f64 would be two).
        r[t] = in.rty == ElementType::F32 ? fromF32(float(v)) : makeFloatWord(in.rty, double(v));
        break;
      }
      case Opc::UIToFP:
        r[t] = in.rty == ElementType::F32 ? fromF32(float(a)) : makeFloatWord(in.rty, double(a));
        break;
      case Opc::FPToSI:
      case Opc::FPToUI: {
        double x = std::trunc(floatWordValue(in.ty, a));
        bool isSigned = in.opc == Opc::FPToSI;
        double lo = isSigned ? -std::ldexp(1.0, int(dstWidth) - 1) : 0.0;
        double hi = std::ldexp(1.0, int(dstWidth) - (isSigned ? 1 : 0));
        if (!(x >= lo && x < hi))
          return fail(in, t,
                      llvm::formatv("{0} of {1} is out of range for i{2}",
                                    isSigned ? "fptosi" : "fptoui", floatWordValue(in.ty, a),
                                    dstWidth));
        r[t] = (isSigned ? uint64_t(int64_t(x)) : uint64_t(x)) & dstMask;
        break;
      }
      case Opc::FloatCast:
        r[t] = makeFloatWord(in.rty, floatWordValue(in.ty, a));
        break;
      case Opc::Bitcast:
        r[t] = fromBits(in.rty, toBits(in.ty, a));
        break;
      default:
        llvm_unreachable("not a cast");
      }
    }
  }
  return true;
}
