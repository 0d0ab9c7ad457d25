// loss-select-lowering-config with matmul=auto (what the JIT and
// lossjit-aot compile with): per op, tensor cores for f16/bf16 storage on
// sm_80 and newer (wgmma's default tile on sm_90a, what the JIT builds on a
// Hopper, 128 logit columns wide for the cross-entropy ops, whose
// epilogues fit them, a forward with a bias and a softcap included now that
// whole tiles fold without column masks, and then on the TMA ring, k 64, 3
// stages: 64.3 ms against the cp.async ring's 139.5 for forward + backward
// on an H200; mma_sync's on every other arch, sm_90 included), SIMT for
// f32 storage
// (TF32 is never a default), for the recompute schedule (tensor cores do
// not build it) and on chips before sm_80; a config already on an op wins.
// RUN: split-file %s %t
// RUN: lossjit-opt %t/ops.mlir --loss-select-lowering-config="target=gpu chip=sm_90 matmul=auto" \
// RUN:   | FileCheck %t/ops.mlir
// RUN: lossjit-opt %t/ops.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=auto" \
// RUN:   | FileCheck %t/ops.mlir --check-prefix=HOPPER
// RUN: lossjit-opt %t/ops.mlir --loss-select-lowering-config="target=gpu chip=sm_75 matmul=auto" \
// RUN:   | FileCheck %t/ops.mlir --check-prefix=TURING
// With tma=2 (288 threads, 168 registers a launch can give) a forward with
// a bias and a softcap takes 128 columns too (it kept 64 while lce_partial
// spilled 4 bytes at 128), k 64, 2 stages. tma=0 keeps the cp.async ring:
// 128 columns, k 32, 4 stages.
// RUN: lossjit-opt %t/ws.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=auto tma=2" \
// RUN:   | FileCheck %t/ws.mlir
// RUN: lossjit-opt %t/ws.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=auto tma=0" \
// RUN:   | FileCheck %t/ws.mlir --check-prefix=CPASYNC
// RUN: lossjit-opt %t/given.mlir --loss-select-lowering-config="target=gpu matmul=auto" \
// RUN:   | FileCheck %t/given.mlir
// RUN: not lossjit-opt %t/given.mlir --loss-select-lowering-config="target=gpu matmul=tf32" 2>&1 \
// RUN:   | FileCheck %t/given.mlir --check-prefix=BAD

//--- ops.mlir
// CHECK-LABEL: func.func @bf16_forward
// CHECK:         #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// TURING-LABEL: func.func @bf16_forward
// TURING:        #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>
// HOPPER-LABEL: func.func @bf16_forward
// HOPPER:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_forward(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
// CHECK-LABEL: func.func @f32_forward
// CHECK:         #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>
// HOPPER-LABEL: func.func @f32_forward
// HOPPER:         #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>
func.func @f32_forward(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
// CHECK-LABEL: func.func @f16_chunked
// CHECK:         #loss.gpu_config<schedule = chunked, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// HOPPER-LABEL: func.func @f16_chunked
// HOPPER:         #loss.gpu_config<schedule = chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @f16_chunked(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}
// CHECK-LABEL: func.func @f16_recompute
// CHECK:         #loss.gpu_config<schedule = recompute, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>
// HOPPER-LABEL: func.func @f16_recompute
// HOPPER:         #loss.gpu_config<schedule = recompute, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>
func.func @f16_recompute(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, strategy = "recompute"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}
// CHECK-LABEL: func.func @bf16_fused
// CHECK:         #loss.gpu_config<schedule = fused, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// HOPPER-LABEL: func.func @bf16_fused
// HOPPER:         #loss.gpu_config<schedule = fused, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_fused(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
}

// A bias or a softcap fits 128 columns, the chunked backward's dZ kernel
// included, and so does a forward with both (its lce_partial took all 255
// registers while whole tiles were masked; 135 now).
// CHECK-LABEL: func.func @bf16_forward_bias
// CHECK:         #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// HOPPER-LABEL: func.func @bf16_forward_bias
// HOPPER:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_forward_bias(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
// CHECK-LABEL: func.func @f16_fused_softcap
// CHECK:         #loss.gpu_config<schedule = fused, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// HOPPER-LABEL: func.func @f16_fused_softcap
// HOPPER:         #loss.gpu_config<schedule = fused, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @f16_fused_softcap(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32, softcap = 30.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}

// CHECK-LABEL: func.func @bf16_grad_bias
// CHECK:         #loss.gpu_config<schedule = chunked, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// HOPPER-LABEL: func.func @bf16_grad_bias
// HOPPER:         #loss.gpu_config<schedule = chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_grad_bias(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}
// CHECK-LABEL: func.func @bf16_forward_bias_softcap
// CHECK:         #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>
// HOPPER-LABEL: func.func @bf16_forward_bias_softcap
// HOPPER:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_forward_bias_softcap(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = bf16, compute = f32, softcap = 30.0} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
// The fused op in vocabulary chunks runs the forward's lce_partial: the
// forward's rule (128 columns, but a bias and a softcap with tma=2), as its
// row chunks take 128.
// HOPPER-LABEL: func.func @bf16_fused_vocab_bias_softcap
// HOPPER:         #loss.gpu_config<schedule = fused_vocab_chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_fused_vocab_bias_softcap(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %l, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = bf16, compute = f32, softcap = 30.0, strategy = "vocab_chunked"} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %l, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}
// HOPPER-LABEL: func.func @bf16_fused_vocab_bias
// HOPPER:         #loss.gpu_config<schedule = fused_vocab_chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_fused_vocab_bias(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %l, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = bf16, compute = f32, strategy = "vocab_chunked"} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %l, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}
// HOPPER-LABEL: func.func @bf16_fused_rows_bias_softcap
// HOPPER:         #loss.gpu_config<schedule = fused, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 128, block_k = 64, grad_cols = 128, tma = 1>
func.func @bf16_fused_rows_bias_softcap(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %l, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = bf16, compute = f32, softcap = 30.0} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %l, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}

//--- ws.mlir
// CHECK-LABEL: func.func @bf16_forward_bias_softcap_ws
// CHECK:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 2, block_cols = 128, block_k = 64, grad_cols = 128, tma = 2>
func.func @bf16_forward_bias_softcap_ws(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = bf16, compute = f32, softcap = 30.0} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
// A bias alone takes 128 columns (it spilled 388 bytes while every column
// of a whole tile was masked and clamped).
// CHECK-LABEL: func.func @bf16_forward_bias_ws
// CHECK:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 2, block_cols = 128, block_k = 64, grad_cols = 128, tma = 2>
func.func @bf16_forward_bias_ws(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
// Without a bias it takes 128 columns, k 64, and 2 stages (with a bias
// lce_partial spilled 76 bytes at 3; 2 is the count that ran on hardware).
// CHECK-LABEL: func.func @bf16_forward_ws
// CHECK:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 2, block_cols = 128, block_k = 64, grad_cols = 128, tma = 2>
// CPASYNC-LABEL: func.func @bf16_forward_ws
// CPASYNC:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 4, block_cols = 128, block_k = 32, grad_cols = 128>
func.func @bf16_forward_ws(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// The log-prob family (lse, label_logit, entropy) takes 128 columns like
// the cross-entropy ops; a family with more statistics (a logit sum) keeps
// 64 with a producer warp, on the tile that ran on an H200: k 64, 2 stages.
// CHECK-LABEL: func.func @bf16_log_prob_ws
// CHECK:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 2, block_cols = 128, block_k = 64, grad_cols = 128, tma = 2>
func.func @bf16_log_prob_ws(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:3 = loss.vocab_reduce %x, %w labels %y : tensor<?xi64> {storage = bf16, compute = f32}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat entropy %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}
// CHECK-LABEL: func.func @bf16_logit_sum_ws
// CHECK:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 2, block_cols = 64, block_k = 64, grad_cols = 128, tma = 2>
func.func @bf16_logit_sum_ws(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:3 = loss.vocab_reduce %x, %w labels %y : tensor<?xi64> {storage = bf16, compute = f32}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

//--- given.mlir
// CHECK-LABEL: func.func @given
// CHECK:         #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 2, threads = 64, splits = 4, stages = 1>
// BAD: error: loss-select-lowering-config: matmul must be simt, mma_sync, wgmma or auto, got 'tf32'
func.func @given(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 2, threads = 64, splits = 4, stages = 1>} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
