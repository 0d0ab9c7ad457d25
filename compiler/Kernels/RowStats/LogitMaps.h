//===- LogitMaps.h - the element-wise maps from raw logit to z --*- C++ -*-===//
//
// z = softcap(logitScale · raw) with raw = x·w (+ b): the one place the
// logit transforms and their derivative are written, so the forward, the
// target logit and the backward of both backends agree.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_ROWSTATS_LOGITMAPS_H
#define LOSSJIT_COMPILER_KERNELS_ROWSTATS_LOGITMAPS_H

#include "compiler/Kernels/Support/KernelEmitter.h"
#include "compiler/Kernels/Support/LceSpec.h"

#include <functional>

namespace lossjit {

/// The logit the softmax sees, from the raw x·w (+ b).
mlir::Value emitLogit(KernelEmitter &e, const LceSpec &spec, mlir::Value raw);

/// A logit z and ∂z/∂raw (null when it is exactly 1: no maps).
struct LogitAndSlope {
  mlir::Value z;
  mlir::Value dzdraw;
};
/// z = emitLogit(raw) and its derivative, computed together.
LogitAndSlope emitLogitAndSlope(KernelEmitter &e, const LceSpec &spec, mlir::Value raw);

/// How a backend forms one dot product x[xOff, xOff + n)·w[wOff, wOff + n)
/// of two buffers of the storage type (f32 result). Empty: KernelEmitter::dot,
/// one FMA chain in ascending k (the GPU kernels' order).
using DotProduct = std::function<mlir::Value(KernelEmitter &, mlir::Value x, mlir::Value xOff,
                                             mlir::Value w, mlir::Value wOff, mlir::Value n)>;

/// The teacher's logit u = teacherScale · (x'[row]·w'[col] + b'[col]), one
/// dot product over its hidden size T (buffers teacher_x [N, T], teacher_w
/// [V, T], teacher_bias [V]) formed by `dot`: the teacher is read, never
/// differentiated.
mlir::Value emitTeacherLogit(KernelEmitter &e, const LceSpec &spec, mlir::Value teacherX,
                             mlir::Value teacherW, mlir::Value teacherBias, mlir::Value t,
                             mlir::Value row, mlir::Value col, const DotProduct &dot = {});
/// u from its raw product x'[row]·w'[col] (formed by a tile product next to
/// the student's): + b'[col] (null: none), then × teacherScale.
mlir::Value emitTeacherFromRaw(KernelEmitter &e, const LceSpec &spec, mlir::Value raw,
                               mlir::Value teacherBias, mlir::Value col);

/// ∂loss/∂raw = g · (exp(z − lse) − [target]) · ∂z/∂raw with z = emitLogit(raw):
/// ∂z/∂raw = logitScale · (1 − tanh²(u)) with a softcap (u = z_scaled / cap),
/// logitScale without one. The bias is part of raw, so dbias uses it as is.
/// With `lseGrad` (a, the row's gradient of lse; ∂lse/∂z = p) the term
/// a · p joins before the ∂z/∂raw factor: fma(a, p, g · (p − [target])).
mlir::Value emitLogitGrad(KernelEmitter &e, const LceSpec &spec, mlir::Value raw, mlir::Value lse,
                          mlir::Value g, mlir::Value isTarget, mlir::Value lseGrad = {});

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_ROWSTATS_LOGITMAPS_H
