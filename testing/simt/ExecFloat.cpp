//===- ExecFloat.cpp - execution of float ops -----------------------------===//
//
// f32/f64 arithmetic is IEEE with round-to-nearest-even; f16/bf16 values live
// in registers as f32 and every result is rounded to its type; math.fma is
// fused; transcendental functions are evaluated in f64 and rounded once.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <cmath>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

namespace {

/// arith.cmpf's `pred` on `x` and `y`.
bool compareFloat(arith::CmpFPredicate pred, double x, double y) {
  bool unordered = std::isnan(x) || std::isnan(y);
  using P = arith::CmpFPredicate;
  switch (pred) {
  case P::AlwaysFalse:
    return false;
  case P::OEQ:
    return !unordered && x == y;
  case P::OGT:
    return !unordered && x > y;
  case P::OGE:
    return !unordered && x >= y;
  case P::OLT:
    return !unordered && x < y;
  case P::OLE:
    return !unordered && x <= y;
  case P::ONE:
    return !unordered && x != y;
  case P::ORD:
    return !unordered;
  case P::UEQ:
    return unordered || x == y;
  case P::UGT:
    return unordered || x > y;
  case P::UGE:
    return unordered || x >= y;
  case P::ULT:
    return unordered || x < y;
  case P::ULE:
    return unordered || x <= y;
  case P::UNE:
    return unordered || x != y;
  case P::UNO:
    return unordered;
  case P::AlwaysTrue:
    return true;
  }
  return false;
}

} // namespace

bool Executor::execFloat(const Instr &in, const uint32_t *act, uint32_t n) {
  ElementType ty = in.ty;
  // Operations whose f32 result is exact in IEEE single arithmetic are done
  // in the operand type; f16/bf16 results are rounded from the f32 result,
  // which for + - * / and sqrt equals direct rounding (f32 has more than
  // 2p+2 significand bits). Everything else is evaluated in f64 and rounded
  // once to the result type.
  auto binary = [&](auto f) {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l), *pb = slot(in.b + l);
      switch (ty) {
      case ElementType::F32:
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t t = act[i];
          r[t] = fromF32(f(asF32(pa[t]), asF32(pb[t])));
        }
        break;
      case ElementType::F64:
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t t = act[i];
          r[t] = fromF64(f(asF64(pa[t]), asF64(pb[t])));
        }
        break;
      default:
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t t = act[i];
          r[t] = makeFloatWord(ty, f(asF32(pa[t]), asF32(pb[t])));
        }
      }
    }
  };
  auto unaryF64 = [&](auto f) {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = makeFloatWord(ty, f(floatWordValue(ty, pa[t])));
      }
    }
  };
  auto binaryF64 = [&](auto f) {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l), *pb = slot(in.b + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = makeFloatWord(ty, f(floatWordValue(ty, pa[t]), floatWordValue(ty, pb[t])));
      }
    }
  };
  switch (in.opc) {
  case Opc::AddF:
    binary([](auto x, auto y) { return x + y; });
    break;
  case Opc::SubF:
    binary([](auto x, auto y) { return x - y; });
    break;
  case Opc::MulF:
    binary([](auto x, auto y) { return x * y; });
    break;
  case Opc::DivF:
    binary([](auto x, auto y) { return x / y; });
    break;
  case Opc::MaximumF:
    binary([](auto x, auto y) { return maximumF(x, y); });
    break;
  case Opc::MinimumF:
    binary([](auto x, auto y) { return minimumF(x, y); });
    break;
  case Opc::MaxNumF:
    binary([](auto x, auto y) { return maxNumF(x, y); });
    break;
  case Opc::MinNumF:
    binary([](auto x, auto y) { return minNumF(x, y); });
    break;
  case Opc::RemF:
    binaryF64([](double x, double y) { return std::fmod(x, y); });
    break;
  case Opc::PowF:
    binaryF64([](double x, double y) { return std::pow(x, y); });
    break;
  case Opc::CopySign:
    binaryF64([](double x, double y) { return std::copysign(x, y); });
    break;
  case Opc::NegF:
    unaryF64([](double x) { return -x; });
    break;
  case Opc::AbsF:
    unaryF64([](double x) { return std::fabs(x); });
    break;
  case Opc::Sqrt:
    unaryF64([](double x) { return std::sqrt(x); });
    break;
  case Opc::Rsqrt:
    unaryF64([](double x) { return 1.0 / std::sqrt(x); });
    break;
  case Opc::Exp:
    unaryF64([](double x) { return std::exp(x); });
    break;
  case Opc::Exp2:
    unaryF64([](double x) { return std::exp2(x); });
    break;
  case Opc::ExpM1:
    unaryF64([](double x) { return std::expm1(x); });
    break;
  case Opc::Log:
    unaryF64([](double x) { return std::log(x); });
    break;
  case Opc::Log2:
    unaryF64([](double x) { return std::log2(x); });
    break;
  case Opc::Log1p:
    unaryF64([](double x) { return std::log1p(x); });
    break;
  case Opc::Tanh:
    unaryF64([](double x) { return std::tanh(x); });
    break;
  case Opc::Sin:
    unaryF64([](double x) { return std::sin(x); });
    break;
  case Opc::Cos:
    unaryF64([](double x) { return std::cos(x); });
    break;
  case Opc::Erf:
    unaryF64([](double x) { return std::erf(x); });
    break;
  case Opc::Floor:
    unaryF64([](double x) { return std::floor(x); });
    break;
  case Opc::Ceil:
    unaryF64([](double x) { return std::ceil(x); });
    break;
  case Opc::Round:
    unaryF64([](double x) { return std::round(x); });
    break;
  case Opc::RoundEven:
    unaryF64([](double x) { return std::nearbyint(x); });
    break;
  case Opc::Trunc:
    unaryF64([](double x) { return std::trunc(x); });
    break;
  case Opc::Fma:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l), *pb = slot(in.b + l),
               *pc = slot(in.c + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        if (ty == ElementType::F32)
          r[t] = fromF32(std::fma(asF32(pa[t]), asF32(pb[t]), asF32(pc[t])));
        else
          r[t] = makeFloatWord(ty, std::fma(floatWordValue(ty, pa[t]), floatWordValue(ty, pb[t]),
                                            floatWordValue(ty, pc[t])));
      }
    }
    break;
  case Opc::CmpF: {
    auto pred = arith::CmpFPredicate(in.mode);
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + l), *pb = slot(in.b + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = compareFloat(pred, floatWordValue(ty, pa[t]), floatWordValue(ty, pb[t]));
      }
    }
    break;
  }
  default:
    llvm_unreachable("not a float op");
  }
  return true;
}
