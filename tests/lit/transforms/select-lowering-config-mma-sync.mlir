// loss-select-lowering-config with matmul=mma_sync: switching strategy
// starts from that strategy's own tile (64x64 logits, 4 warps, k steps of
// 32, 3 stages), and the other options still override it. It forms the
// logits of the forward and of the chunked and fused backward, for 16-bit
// storage: the recompute schedule or f32 storage is an error naming the
// rule, never a silent fallback.
// RUN: split-file %s %t
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu matmul=mma_sync" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=DEFAULT
// RUN: lossjit-opt %t/forward.mlir \
// RUN:   --loss-select-lowering-config="target=gpu matmul=mma_sync block-cols=128 threads=256 stages=2 block-k=16" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=TUNED
// The config round-trips, and a config already in the IR keeps its strategy.
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu matmul=mma_sync" \
// RUN:   | lossjit-opt --loss-select-lowering-config="target=gpu splits=4" | FileCheck %t/forward.mlir --check-prefix=KEPT
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu matmul=mma_sync" \
// RUN:   | FileCheck %t/grad.mlir
// RUN: not lossjit-opt %t/recompute.mlir --loss-select-lowering-config="target=gpu matmul=mma_sync" 2>&1 \
// RUN:   | FileCheck %t/recompute.mlir
// RUN: not lossjit-opt %t/f32.mlir --loss-select-lowering-config="target=gpu matmul=mma_sync" 2>&1 \
// RUN:   | FileCheck %t/f32.mlir

//--- forward.mlir
// DEFAULT-LABEL: func.func @forward
// DEFAULT:         #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// TUNED-LABEL:   func.func @forward
// TUNED:           #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 256, splits = 8, stages = 2, block_cols = 128, block_k = 16>
// KEPT-LABEL:    func.func @forward
// KEPT:            #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 4, stages = 3, block_cols = 64, block_k = 32>
func.func @forward(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

//--- grad.mlir
// CHECK-LABEL: func.func @grad
// CHECK:         #loss.gpu_config<schedule = chunked, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
func.func @grad(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}

//--- recompute.mlir
// CHECK: error: loss-select-lowering-config: matmul mma_sync does not build the recompute schedule (use schedule = chunked, or matmul = simt)
func.func @recompute(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, strategy = "recompute"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}

//--- f32.mlir
// CHECK: error: matmul mma_sync multiplies f16 or bf16 storage; f32 stays on matmul simt (TF32 would round the operands)
func.func @forward_f32(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
