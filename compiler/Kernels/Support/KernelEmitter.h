//===- KernelEmitter.h - shared IR building blocks of the kernels -*- C++ -*-===//
//
// The GPU and CPU kernel builders emit the same numerics: arithmetic in the
// compute type (f32; f64 for f64 storage, host only) on explicitly widened
// storage values, exp/log as exp2/log2 of pre-scaled
// arguments (which the GPU path lowers to ex2/lg2.approx, never libdevice,
// and the host path expands to polynomials). Keeping them in one place
// keeps the two backends' answers within rounding of each other.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_KERNELEMITTER_H
#define LOSSJIT_COMPILER_KERNELS_KERNELEMITTER_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

#include <functional>
#include <utility>

namespace lossjit {

/// Thin builder over one insertion point; methods return the new value.
class KernelEmitter {
public:
  /// `compute`: the float type of the arithmetic (f32 for f16/bf16/f32
  /// storage, f64 for f64 storage); null means f32.
  KernelEmitter(mlir::OpBuilder &builder, mlir::Location loc, mlir::Type compute = {})
      : b(builder), loc(loc), computeType(compute ? compute : builder.getF32Type()) {}

  mlir::OpBuilder &builder() { return b; }
  mlir::Location location() const { return loc; }
  /// The float type every exp, log, max, sum and accumulation uses.
  mlir::Type compute() const { return computeType; }
  /// An emitter at another insertion point with the same compute type.
  KernelEmitter at(mlir::OpBuilder &builder, mlir::Location where) const {
    KernelEmitter e(builder, where, computeType);
    e.width = width;
    e.threadId = threadId;
    return e;
  }
  /// This emitter, and those nested in it, with the thread's id
  /// (gpuThreadIdx) taken from `tid` instead of read afresh.
  KernelEmitter withThreadId(mlir::Value tid) const {
    KernelEmitter e = at(b, loc);
    e.threadId = tid;
    return e;
  }
  /// The id withThreadId() set; null when none.
  mlir::Value fixedThreadId() const { return threadId; }
  /// An emitter whose values are vector<n> of the compute type (n > 1):
  /// real() is a splat, toReal() widens vectors, so the float math written
  /// for one value (exp, the logit maps, a statistic's push) runs lane-wise
  /// with the same operations, and so the same bits, per lane.
  KernelEmitter lanes(int64_t n) const {
    KernelEmitter e(b, loc, computeType);
    e.width = n;
    e.threadId = threadId;
    return e;
  }
  /// Lanes per value (1: scalars).
  int64_t laneCount() const { return width ? width : 1; }
  /// The type of a value: the compute type, or vector<lanes> of it.
  mlir::Type realType() const;

  mlir::Value index(int64_t v);
  /// A constant of the compute type.
  mlir::Value real(double v);
  mlir::Value i32(int32_t v);
  mlir::Value negInf();
  /// The i1 constant true.
  mlir::Value truth();

  /// Index arithmetic (add/sub/mul/div/rem on index values).
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value sub(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value divUI(mlir::Value a, mlir::Value c);
  mlir::Value remUI(mlir::Value a, mlir::Value c);
  mlir::Value ceilDiv(mlir::Value a, mlir::Value c);
  mlir::Value minUI(mlir::Value a, mlir::Value c);
  mlir::Value maxUI(mlir::Value a, mlir::Value c);
  mlir::Value cmpI(mlir::arith::CmpIPredicate p, mlir::Value a, mlir::Value c);
  mlir::Value cmpF(mlir::arith::CmpFPredicate p, mlir::Value a, mlir::Value c);
  mlir::Value select(mlir::Value cond, mlir::Value a, mlir::Value c);
  mlir::Value andI(mlir::Value a, mlir::Value c);
  /// i32 addition (row counts).
  mlir::Value addI32(mlir::Value a, mlir::Value c);
  /// i32 → the compute type (a count as a divisor).
  mlir::Value i32ToReal(mlir::Value v);
  /// compute → `storage` (one rounding, arith.truncf); the compute type
  /// passes through.
  mlir::Value toStorage(mlir::Value v, mlir::Type storage);
  mlir::Value addF(mlir::Value a, mlir::Value c);
  mlir::Value subF(mlir::Value a, mlir::Value c);
  mlir::Value mulF(mlir::Value a, mlir::Value c);
  mlir::Value divF(mlir::Value a, mlir::Value c);
  mlir::Value maxF(mlir::Value a, mlir::Value c);
  mlir::Value fma(mlir::Value a, mlir::Value c, mlir::Value acc);
  mlir::Value absF(mlir::Value a);
  /// The rounding error of sum = a + b (Neumaier's branch-free form):
  /// a + b = sum + error exactly. What compensated sums carry, so their
  /// error does not grow with the number of terms. Never contracted or
  /// reassociated: the arith ops carry no fast-math flags.
  mlir::Value addError(mlir::Value a, mlir::Value b, mlir::Value sum);

  mlir::Value load(mlir::Value memref, mlir::Value idx);
  void store(mlir::Value value, mlir::Value memref, mlir::Value idx);
  /// Explicit storage → compute cast (arith.extf); the compute type passes
  /// through.
  mlir::Value toReal(mlir::Value v);
  /// load + toReal: a storage element as a compute value.
  mlir::Value loadReal(mlir::Value memref, mlir::Value idx);
  /// A label as an index (sign-extended from i32/i64).
  mlir::Value loadLabel(mlir::Value labels, mlir::Value idx);

  /// e^x as exp2(x · log2 e).
  mlir::Value exp(mlir::Value x);
  /// ln x as log2(x) · ln 2.
  mlir::Value log(mlir::Value x);
  /// Sequential dot product (compute type) Σₖ x[xOff+k]·w[wOff+k] for k < d.
  mlir::Value dot(mlir::Value x, mlir::Value xOff, mlir::Value w, mlir::Value wOff, mlir::Value d);

  using LoopBody = std::function<llvm::SmallVector<mlir::Value>(KernelEmitter &, mlir::Value iv,
                                                                mlir::ValueRange iters)>;
  /// scf.for lb..ub step with loop-carried `iters`; returns the results.
  llvm::SmallVector<mlir::Value> forLoop(mlir::Value lb, mlir::Value ub, mlir::Value step,
                                         mlir::ValueRange iters, const LoopBody &body);
  /// scf.if without results.
  void ifThen(mlir::Value cond, const std::function<void(KernelEmitter &)> &then);
  /// scf.if with an else branch and no results.
  void ifThenElse(mlir::Value cond, const std::function<void(KernelEmitter &)> &then,
                  const std::function<void(KernelEmitter &)> &otherwise);
  /// scf.if yielding one value from each branch.
  mlir::Value ifElse(mlir::Value cond, const std::function<mlir::Value(KernelEmitter &)> &then,
                     const std::function<mlir::Value(KernelEmitter &)> &otherwise);
  using Values = llvm::SmallVector<mlir::Value>;
  /// scf.if yielding several values from each branch (their types agree).
  Values ifElseValues(mlir::Value cond, const std::function<Values(KernelEmitter &)> &then,
                      const std::function<Values(KernelEmitter &)> &otherwise);

private:
  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Type computeType;
  /// Lanes of a vector emitter; 0 for scalars.
  int64_t width = 0;
  /// withThreadId()'s id, or null.
  mlir::Value threadId;
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_KERNELEMITTER_H
