// loss-math-to-nvvm-approx: scalar f32 exp2/log2 become the ex2/lg2 approx
// intrinsics (no libdevice), f64 exp2/log2 arithmetic whose fmas become
// llvm.fma.f64; every other type keeps its math op.
// RUN: lossjit-opt %s --loss-math-to-nvvm-approx --split-input-file | FileCheck %s
// It runs nested in a gpu.module, as in the GPU pipeline.
// RUN: lossjit-opt %s --pass-pipeline="builtin.module(gpu.module(loss-math-to-nvvm-approx))" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=NESTED

// CHECK-LABEL: func.func @exp2_f32
// CHECK-SAME:    (%[[A:.*]]: f32)
// CHECK-NEXT:    %[[R:.*]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"(%[[A]]) : (f32) -> f32
// CHECK-NEXT:    return %[[R]] : f32
func.func @exp2_f32(%a: f32) -> f32 {
  %r = math.exp2 %a : f32
  return %r : f32
}

// -----

// LLVM 22 spells the lg2 intrinsic without the type suffix.
// CHECK-LABEL: func.func @log2_f32
// CHECK-SAME:    (%[[A:.*]]: f32)
// CHECK-NEXT:    %[[R:.*]] = llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"(%[[A]]) : (f32) -> f32
// CHECK-NEXT:    return %[[R]] : f32
func.func @log2_f32(%a: f32) -> f32 {
  %r = math.log2 %a : f32
  return %r : f32
}

// -----

// Both in one chain, with fastmath flags on the math op: still rewritten.
// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[E:.*]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"(%{{.*}}) : (f32) -> f32
// CHECK-NEXT:    %[[L:.*]] = llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"(%[[E]]) : (f32) -> f32
// CHECK-NEXT:    return %[[L]]
// CHECK-NOT:     math.
func.func @chain(%a: f32) -> f32 {
  %e = math.exp2 %a fastmath<afn> : f32
  %l = math.log2 %e : f32
  return %l : f32
}

// -----

// f64 has no approx instruction: exp2 (13 fma of its Taylor series) and
// log2 (11 of its atanh series) become arithmetic, each fma llvm.fma.f64.
// CHECK-LABEL: func.func @f64_expanded
// CHECK-COUNT-24: llvm.call_intrinsic "llvm.fma.f64"
// CHECK-NOT:     math.
// CHECK-NOT:     llvm.call_intrinsic
func.func @f64_expanded(%a: f64) -> f64 {
  %e = math.exp2 %a : f64
  %l = math.log2 %e : f64
  return %l : f64
}

// -----

// Negative: f16 and vectors are not scalar f32.
// CHECK-LABEL: func.func @f16_and_vector_untouched
// CHECK-NEXT:    math.exp2 %{{.*}} : f16
// CHECK-NEXT:    math.log2 %{{.*}} : vector<4xf32>
// CHECK-NEXT:    return
func.func @f16_and_vector_untouched(%h: f16, %v: vector<4xf32>) -> (f16, vector<4xf32>) {
  %e = math.exp2 %h : f16
  %l = math.log2 %v : vector<4xf32>
  return %e, %l : f16, vector<4xf32>
}

// -----

// Negative: natural exp/log are not rewritten (the kernels use exp2/log2 on
// pre-scaled arguments; math.exp would go to libdevice).
// CHECK-LABEL: func.func @natural_exp_log_untouched
// CHECK-NEXT:    math.exp %{{.*}} : f32
// CHECK-NEXT:    math.log %{{.*}} : f32
func.func @natural_exp_log_untouched(%a: f32) -> f32 {
  %e = math.exp %a : f32
  %l = math.log %e : f32
  return %l : f32
}

// -----

// NESTED-LABEL: gpu.module @kernels
// NESTED:         gpu.func @k(%[[A:.*]]: f32, %{{.*}}: memref<?xf32>) kernel
// NESTED:           %[[E:.*]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"(%[[A]]) : (f32) -> f32
// NESTED-NEXT:      %[[L:.*]] = llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"(%[[E]]) : (f32) -> f32
// NESTED-NEXT:      memref.store %[[L]]
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: f32, %out: memref<?xf32>) kernel {
      %e = math.exp2 %a : f32
      %l = math.log2 %e : f32
      %c0 = arith.constant 0 : index
      memref.store %l, %out[%c0] : memref<?xf32>
      gpu.return
    }
  }
}
