//===- Passes.h - lowering of the fused op to kernels -----------*- C++ -*-===//

#ifndef LOSSJIT_COMPILER_CONVERSION_PASSES_H
#define LOSSJIT_COMPILER_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace lossjit {

#define GEN_PASS_DECL
#include "compiler/Conversion/Passes.h.inc"

/// Adds the patterns expanding f16/bf16 ↔ f32 conversions and f32/f64
/// math.exp2/log2 into arithmetic (no compiler-runtime or libm calls);
/// f16 → f32 widening is left alone when `f16ExtendInHardware`. (The
/// pass's expand-f32-fma runs before these, on the kernels' own fmas.)
void populateExpandHostLibcallsPatterns(mlir::RewritePatternSet &patterns,
                                        bool f16ExtendInHardware = false);

/// Adds the patterns expanding f64 math.exp2/log2 into arithmetic (a Taylor
/// series of 2^f, the odd series of atanh): both backends' f64 path.
void populateExpandF64MathPatterns(mlir::RewritePatternSet &patterns);

/// Adds the patterns rewriting f32 math.exp2/log2 into NVVM approx
/// intrinsics, f64 exp2/log2 into arithmetic, and math.fma into llvm.fma.
void populateMathToNVVMApproxPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "compiler/Conversion/Passes.h.inc"

} // namespace lossjit

#endif // LOSSJIT_COMPILER_CONVERSION_PASSES_H
