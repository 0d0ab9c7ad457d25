// The GPU kernels after the NVVM stage of lossjit-gpu-pipeline (run here
// pass by pass, without attaching a target or serializing): every kernel is
// plain LLVM + NVVM with no libdevice function (__nv_*) declared or called,
// whatever CUDA_HOME says, f16 is only ever widened (fpext) before any math,
// exp2/log2 are the approx intrinsics, and nothing is atomic.
// RUN: lossjit-opt %s --pass-pipeline="builtin.module(loss-select-lowering-config{target=gpu},loss-lower-to-gpu,gpu.module(loss-math-to-nvvm-approx,arith-expand,convert-scf-to-cf,convert-gpu-to-nvvm,canonicalize,cse),reconcile-unrealized-casts)" \
// RUN:   | FileCheck %s --implicit-check-not=__nv_ --implicit-check-not=atomic --implicit-check-not=nvvm.redux \
// RUN:   --implicit-check-not='{{llvm\.(fadd|fsub|fmul|fdiv|fneg|intr\.[a-z.]+)[^:]*: (\(|vector<[0-9]+x)?b?f16}}' \
// RUN:   --implicit-check-not='{{(= |^ *)((math|arith|scf|cf|memref)\.|gpu\.(thread_id|block_id|barrier))}}'

// Partial LSE: shared buffers are addrspace(3) globals of block_rows*threads f32.
// CHECK-LABEL: gpu.module @lce_lce_partial
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_partial_0() {addr_space = 3 : i32} : !llvm.array<512 x f32>
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_partial_1() {addr_space = 3 : i32} : !llvm.array<512 x f32>
// CHECK:         llvm.func @lce_partial(
// CHECK-SAME:      nvvm.kernel
// CHECK-SAME:      nvvm.maxntid = array<i32: 128, 1, 1>
// CHECK:           llvm.fpext %{{.*}} : f16 to f32
// CHECK:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
// CHECK:           nvvm.barrier0
// CHECK:           llvm.return
// Combine: the target logit from the block's shared tiles of x and w
// (32 × 33 f32 each, f16 widened as it is staged; the rows' labels as
// i64), then the LSE of the partials (ex2, lg2).
// CHECK-LABEL: gpu.module @lce_lce_combine
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_combine_0() {addr_space = 3 : i32} : !llvm.array<1056 x f32>
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_combine_1() {addr_space = 3 : i32} : !llvm.array<1056 x f32>
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_combine_2() {addr_space = 3 : i32} : !llvm.array<32 x i64>
// CHECK:         llvm.func @lce_combine(
// CHECK-SAME:      nvvm.maxntid = array<i32: 32, 1, 1>
// CHECK:           llvm.fpext %{{.*}} : f16 to f32
// CHECK:           nvvm.barrier0
// CHECK:           llvm.call_intrinsic "llvm.fma.f32"
// CHECK:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
// CHECK:           llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"
// CHECK:           llvm.return
// Reduce: a block tree over 128 f32 sums, their 128 Neumaier compensations
// and 128 i32 counts.
// CHECK-LABEL: gpu.module @lce_lce_reduce
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_reduce_0() {addr_space = 3 : i32} : !llvm.array<128 x f32>
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_reduce_1() {addr_space = 3 : i32} : !llvm.array<128 x f32>
// CHECK-DAG:     llvm.mlir.global internal @__wg_lce_reduce_2() {addr_space = 3 : i32} : !llvm.array<128 x i32>
// CHECK:         llvm.func @lce_reduce(
// CHECK-COUNT-7:   nvvm.barrier0
// CHECK:           llvm.sitofp
// CHECK-NEXT:      llvm.fdiv
// CHECK:           llvm.return
func.func @lce(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}
