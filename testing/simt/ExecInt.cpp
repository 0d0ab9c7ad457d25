//===- ExecInt.cpp - execution of integer ops -----------------------------===//
//
// Integer ops work on zero-extended words of the operand's bit width; every
// result is masked back to that width. Division by zero, signed division
// overflow and shifts by the bit width or more are UB in arith, so they are
// errors here rather than some value.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

namespace {

/// arith.cmpi's `pred` on the `width`-bit words `a` and `b`.
bool compareInt(arith::CmpIPredicate pred, uint64_t a, uint64_t b, unsigned width) {
  int64_t sa = signExtend(a, width), sb = signExtend(b, width);
  using P = arith::CmpIPredicate;
  switch (pred) {
  case P::eq:
    return a == b;
  case P::ne:
    return a != b;
  case P::slt:
    return sa < sb;
  case P::sle:
    return sa <= sb;
  case P::sgt:
    return sa > sb;
  case P::sge:
    return sa >= sb;
  case P::ult:
    return a < b;
  case P::ule:
    return a <= b;
  case P::ugt:
    return a > b;
  case P::uge:
    return a >= b;
  }
  return false;
}

} // namespace

bool Executor::execInt(const Instr &in, const uint32_t *act, uint32_t n) {
  if (in.opc == Opc::CmpI)
    return execCmpI(in, act, n);
  return execIntBinary(in, act, n);
}

bool Executor::execIntBinary(const Instr &in, const uint32_t *act, uint32_t n) {
  unsigned w = in.width;
  uint64_t mask = widthMask(w);
  int64_t minSigned = w >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (w - 1));
  for (uint32_t l = 0; l < in.lanes; ++l) {
    uint64_t *r = slot(in.res + l), *pa = slot(in.a + l);
    uint64_t *pb = in.b == kNoSlot ? nullptr : slot(in.b + l);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      uint64_t a = pa[t], b = pb ? pb[t] : 0;
      int64_t sa = signExtend(a, w), sb = signExtend(b, w);
      uint64_t v = 0;
      switch (in.opc) {
      case Opc::AddI:
        v = a + b;
        break;
      case Opc::SubI:
        v = a - b;
        break;
      case Opc::MulI:
        v = a * b;
        break;
      case Opc::AndI:
        v = a & b;
        break;
      case Opc::OrI:
        v = a | b;
        break;
      case Opc::XOrI:
        v = a ^ b;
        break;
      case Opc::MinSI:
        v = sa < sb ? a : b;
        break;
      case Opc::MaxSI:
        v = sa > sb ? a : b;
        break;
      case Opc::MinUI:
        v = a < b ? a : b;
        break;
      case Opc::MaxUI:
        v = a > b ? a : b;
        break;
      case Opc::AbsI:
        v = uint64_t(sa < 0 ? -sa : sa);
        break;
      case Opc::ShLI:
      case Opc::ShRSI:
      case Opc::ShRUI:
        if (b >= w)
          return fail(in, t,
                      llvm::formatv("shift amount {0} is not below the "
                                    "bit width {1}",
                                    b, w));
        v = in.opc == Opc::ShLI ? a << b : in.opc == Opc::ShRUI ? a >> b : uint64_t(sa >> b);
        break;
      case Opc::DivUI:
      case Opc::RemUI:
      case Opc::CeilDivUI:
        if (b == 0)
          return fail(in, t, "integer division by zero");
        v = in.opc == Opc::DivUI ? a / b : in.opc == Opc::RemUI ? a % b : a / b + (a % b != 0);
        break;
      case Opc::DivSI:
      case Opc::RemSI:
      case Opc::CeilDivSI:
      case Opc::FloorDivSI: {
        if (b == 0)
          return fail(in, t, "integer division by zero");
        if (sa == minSigned && sb == -1)
          return fail(in, t, "signed integer division overflow");
        int64_t q = sa / sb, rem = sa % sb;
        if (in.opc == Opc::RemSI)
          v = uint64_t(rem);
        else if (in.opc == Opc::DivSI)
          v = uint64_t(q);
        else if (in.opc == Opc::CeilDivSI)
          v = uint64_t(q + (rem != 0 && ((sa < 0) == (sb < 0))));
        else
          v = uint64_t(q - (rem != 0 && ((sa < 0) != (sb < 0))));
        break;
      }
      default:
        llvm_unreachable("not an integer op");
      }
      r[t] = v & mask;
    }
  }
  return true;
}

bool Executor::execCmpI(const Instr &in, const uint32_t *act, uint32_t n) {
  auto pred = arith::CmpIPredicate(in.mode);
  for (uint32_t l = 0; l < in.lanes; ++l) {
    uint64_t *r = slot(in.res + l), *pa = slot(in.a + l), *pb = slot(in.b + l);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t t = act[i];
      r[t] = compareInt(pred, pa[t], pb[t], in.width);
    }
  }
  return true;
}
