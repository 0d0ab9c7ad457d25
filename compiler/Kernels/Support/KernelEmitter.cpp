//===- KernelEmitter.cpp --------------------------------------------------===//

#include "compiler/Kernels/Support/KernelEmitter.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>
#include <limits>
#include <numbers>

using namespace mlir;
using namespace lossjit;

Value KernelEmitter::index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
Type KernelEmitter::realType() const {
  return width ? Type(VectorType::get({width}, computeType)) : computeType;
}
Value KernelEmitter::real(double v) {
  if (!width)
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(computeType, v));
  auto type = VectorType::get({width}, computeType);
  return arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(type, b.getFloatAttr(computeType, v).getValue()));
}
Value KernelEmitter::i32(int32_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}
Value KernelEmitter::negInf() { return real(-std::numeric_limits<double>::infinity()); }
Value KernelEmitter::truth() { return arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1); }

Value KernelEmitter::add(Value a, Value c) { return arith::AddIOp::create(b, loc, a, c); }
Value KernelEmitter::sub(Value a, Value c) { return arith::SubIOp::create(b, loc, a, c); }
Value KernelEmitter::mul(Value a, Value c) { return arith::MulIOp::create(b, loc, a, c); }
Value KernelEmitter::divUI(Value a, Value c) { return arith::DivUIOp::create(b, loc, a, c); }
Value KernelEmitter::remUI(Value a, Value c) { return arith::RemUIOp::create(b, loc, a, c); }
Value KernelEmitter::ceilDiv(Value a, Value c) { return arith::CeilDivUIOp::create(b, loc, a, c); }
Value KernelEmitter::minUI(Value a, Value c) { return arith::MinUIOp::create(b, loc, a, c); }
Value KernelEmitter::maxUI(Value a, Value c) { return arith::MaxUIOp::create(b, loc, a, c); }
Value KernelEmitter::cmpI(arith::CmpIPredicate p, Value a, Value c) {
  return arith::CmpIOp::create(b, loc, p, a, c);
}
Value KernelEmitter::cmpF(arith::CmpFPredicate p, Value a, Value c) {
  return arith::CmpFOp::create(b, loc, p, a, c);
}
Value KernelEmitter::select(Value cond, Value a, Value c) {
  return arith::SelectOp::create(b, loc, cond, a, c);
}
Value KernelEmitter::andI(Value a, Value c) { return arith::AndIOp::create(b, loc, a, c); }
Value KernelEmitter::addI32(Value a, Value c) { return arith::AddIOp::create(b, loc, a, c); }
Value KernelEmitter::i32ToReal(Value v) {
  return arith::SIToFPOp::create(b, loc, computeType, v);
}
Value KernelEmitter::toStorage(Value v, Type storage) {
  if (storage == v.getType())
    return v;
  return arith::TruncFOp::create(b, loc, storage, v);
}
Value KernelEmitter::addF(Value a, Value c) { return arith::AddFOp::create(b, loc, a, c); }
Value KernelEmitter::subF(Value a, Value c) { return arith::SubFOp::create(b, loc, a, c); }
Value KernelEmitter::mulF(Value a, Value c) { return arith::MulFOp::create(b, loc, a, c); }
Value KernelEmitter::divF(Value a, Value c) { return arith::DivFOp::create(b, loc, a, c); }
Value KernelEmitter::maxF(Value a, Value c) { return arith::MaximumFOp::create(b, loc, a, c); }
Value KernelEmitter::fma(Value a, Value c, Value acc) {
  return math::FmaOp::create(b, loc, a, c, acc);
}
// A select, not math.absf: that lowers to libdevice's __nv_fabsf on the GPU.
Value KernelEmitter::absF(Value a) {
  Value zero = arith::ConstantOp::create(b, loc, b.getFloatAttr(a.getType(), 0.0));
  return select(cmpF(arith::CmpFPredicate::OLT, a, zero), arith::NegFOp::create(b, loc, a), a);
}
Value KernelEmitter::addError(Value a, Value c, Value sum) {
  Value aLarger = cmpF(arith::CmpFPredicate::OGE, absF(a), absF(c));
  Value big = select(aLarger, a, c), small = select(aLarger, c, a);
  return addF(subF(big, sum), small);
}

Value KernelEmitter::load(Value memref, Value idx) {
  return memref::LoadOp::create(b, loc, memref, ValueRange{idx});
}
void KernelEmitter::store(Value value, Value memref, Value idx) {
  memref::StoreOp::create(b, loc, value, memref, ValueRange{idx});
}
Value KernelEmitter::toReal(Value v) {
  if (getElementTypeOrSelf(v.getType()) == computeType)
    return v;
  Type to = computeType;
  if (auto vector = dyn_cast<VectorType>(v.getType()))
    to = VectorType::get(vector.getShape(), computeType);
  return arith::ExtFOp::create(b, loc, to, v);
}
Value KernelEmitter::loadReal(Value memref, Value idx) { return toReal(load(memref, idx)); }
Value KernelEmitter::loadLabel(Value labels, Value idx) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), load(labels, idx));
}

Value KernelEmitter::exp(Value x) {
  return math::Exp2Op::create(b, loc, mulF(x, real(std::numbers::log2e)));
}
Value KernelEmitter::log(Value x) {
  return mulF(math::Log2Op::create(b, loc, x), real(std::numbers::ln2));
}
Value KernelEmitter::dot(Value x, Value xOff, Value w, Value wOff, Value d) {
  auto r =
      forLoop(index(0), d, index(1), {real(0.0)}, [&](KernelEmitter &e, Value k, ValueRange it) {
        Value xv = e.loadReal(x, e.add(xOff, k));
        Value wv = e.loadReal(w, e.add(wOff, k));
        return SmallVector<Value>{e.fma(xv, wv, it[0])};
      });
  return r[0];
}

SmallVector<Value> KernelEmitter::forLoop(Value lb, Value ub, Value step, ValueRange iters,
                                          const LoopBody &body) {
  auto loop = scf::ForOp::create(b, loc, lb, ub, step, iters,
                                 [&](OpBuilder &nb, Location nloc, Value iv, ValueRange args) {
                                   KernelEmitter inner = at(nb, nloc);
                                   SmallVector<Value> next = body(inner, iv, args);
                                   scf::YieldOp::create(nb, nloc, next);
                                 });
  return SmallVector<Value>(loop.getResults());
}

void KernelEmitter::ifThen(Value cond, const std::function<void(KernelEmitter &)> &then) {
  scf::IfOp::create(b, loc, cond, [&](OpBuilder &nb, Location nloc) {
    KernelEmitter inner = at(nb, nloc);
    then(inner);
    scf::YieldOp::create(nb, nloc);
  });
}

void KernelEmitter::ifThenElse(Value cond, const std::function<void(KernelEmitter &)> &then,
                               const std::function<void(KernelEmitter &)> &otherwise) {
  scf::IfOp::create(
      b, loc, cond,
      [&](OpBuilder &nb, Location nloc) {
        KernelEmitter inner = at(nb, nloc);
        then(inner);
        scf::YieldOp::create(nb, nloc);
      },
      [&](OpBuilder &nb, Location nloc) {
        KernelEmitter inner = at(nb, nloc);
        otherwise(inner);
        scf::YieldOp::create(nb, nloc);
      });
}

Value KernelEmitter::ifElse(Value cond, const std::function<Value(KernelEmitter &)> &then,
                            const std::function<Value(KernelEmitter &)> &otherwise) {
  return ifElseValues(
      cond, [&](KernelEmitter &e) { return Values{then(e)}; },
      [&](KernelEmitter &e) { return Values{otherwise(e)}; })[0];
}

KernelEmitter::Values
KernelEmitter::ifElseValues(Value cond, const std::function<Values(KernelEmitter &)> &then,
                            const std::function<Values(KernelEmitter &)> &otherwise) {
  auto op = scf::IfOp::create(
      b, loc, cond,
      [&](OpBuilder &nb, Location nloc) {
        KernelEmitter inner = at(nb, nloc);
        scf::YieldOp::create(nb, nloc, then(inner));
      },
      [&](OpBuilder &nb, Location nloc) {
        KernelEmitter inner = at(nb, nloc);
        scf::YieldOp::create(nb, nloc, otherwise(inner));
      });
  return Values(op.getResults());
}
