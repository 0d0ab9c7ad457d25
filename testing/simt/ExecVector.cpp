//===- ExecVector.cpp - execution of vector ops ---------------------------===//
//
// A vector value is one slot per lane, so most vector ops are lane moves
// between slots. arith.select runs here too: it is the one op whose
// condition may be a scalar for vector operands (`mode`).
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

bool Executor::execVector(const Instr &in, const uint32_t *act, uint32_t n) {
  switch (in.opc) {
  case Opc::Select: {
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pc = slot(in.a + (in.mode ? 0 : l)), *pt = slot(in.b + l),
               *pf = slot(in.c + l);
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t t = act[i];
        r[t] = pc[t] ? pt[t] : pf[t];
      }
    }
    return true;
  }
  case Opc::LaneMap:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a + prog.slots[in.aux + l]);
      for (uint32_t i = 0; i < n; ++i)
        r[act[i]] = pa[act[i]];
    }
    return true;
  case Opc::FromElements:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(prog.slots[in.aux + l]);
      for (uint32_t i = 0; i < n; ++i)
        r[act[i]] = pa[act[i]];
    }
    return true;
  case Opc::CreateMask:
    for (uint32_t l = 0; l < in.lanes; ++l) {
      uint64_t *r = slot(in.res + l), *pa = slot(in.a);
      for (uint32_t i = 0; i < n; ++i)
        r[act[i]] = int64_t(l) < int64_t(pa[act[i]]);
    }
    return true;
  case Opc::Extract:
  case Opc::Insert:
    return execExtractInsert(in, act, n);
  case Opc::Reduction:
    return execReduction(in, act, n);
  default:
    llvm_unreachable("not a vector op");
  }
}

bool Executor::execExtractInsert(const Instr &in, const uint32_t *act, uint32_t n) {
  const PositionInfo &pos = prog.positions[in.aux];
  bool isInsert = in.opc == Opc::Insert;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    int64_t offset = 0;
    for (unsigned d = 0; d < pos.count; ++d) {
      const MixedInt &p = pos.positions[d];
      int64_t v = p.slot == kNoSlot ? p.value : int64_t(slot(p.slot)[t]);
      if (v < 0 || v >= pos.dims[d])
        return fail(in, t,
                    llvm::formatv("position {0} out of range for "
                                  "dimension {1} of size {2}",
                                  v, d, pos.dims[d]));
      offset += v * pos.strides[d];
    }
    if (isInsert) {
      for (uint32_t l = 0; l < in.lanes; ++l)
        slot(in.res + l)[t] = slot(in.b + l)[t];
      for (uint32_t l = 0; l < pos.chunk; ++l)
        slot(in.res + uint32_t(offset) + l)[t] = slot(in.a + l)[t];
    } else {
      for (uint32_t l = 0; l < pos.chunk; ++l)
        slot(in.res + l)[t] = slot(in.a + uint32_t(offset) + l)[t];
    }
  }
  return true;
}

bool Executor::execReduction(const Instr &in, const uint32_t *act, uint32_t n) {
  auto kind = vector::CombiningKind(in.mode);
  ElementType ty = in.ty;
  unsigned w = in.width;
  uint64_t mask = widthMask(w);
  auto combine = [&](uint64_t x, uint64_t y) -> uint64_t {
    using K = vector::CombiningKind;
    if (isFloatType(ty)) {
      double a = floatWordValue(ty, x), b = floatWordValue(ty, y), v = 0;
      switch (kind) {
      case K::ADD:
        v = a + b;
        break;
      case K::MUL:
        v = a * b;
        break;
      case K::MINNUMF:
        v = minNumF(a, b);
        break;
      case K::MAXNUMF:
        v = maxNumF(a, b);
        break;
      case K::MINIMUMF:
        v = minimumF(a, b);
        break;
      case K::MAXIMUMF:
        v = maximumF(a, b);
        break;
      default:
        v = std::nan("");
      }
      // a + b in f64 then rounded: exact-then-round for f32 and narrower.
      return makeFloatWord(ty, v);
    }
    int64_t sx = signExtend(x, w), sy = signExtend(y, w);
    switch (kind) {
    case K::ADD:
      return (x + y) & mask;
    case K::MUL:
      return (x * y) & mask;
    case K::MINUI:
      return x < y ? x : y;
    case K::MAXUI:
      return x > y ? x : y;
    case K::MINSI:
      return sx < sy ? x : y;
    case K::MAXSI:
      return sx > sy ? x : y;
    case K::AND:
      return x & y;
    case K::OR:
      return x | y;
    case K::XOR:
      return x ^ y;
    default:
      return 0;
    }
  };
  uint64_t *r = slot(in.res);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    // Sequential order, as LLVM's ordered vector reductions.
    uint64_t acc;
    uint32_t l = 0;
    if (in.b != kNoSlot) {
      acc = slot(in.b)[t];
    } else {
      acc = slot(in.a)[t];
      l = 1;
    }
    for (; l < in.lanes; ++l)
      acc = combine(acc, slot(in.a + l)[t]);
    r[t] = acc;
  }
  return true;
}
