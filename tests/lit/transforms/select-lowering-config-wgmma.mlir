// loss-select-lowering-config with matmul=wgmma: Hopper's warpgroup MMA,
// chip sm_90a only. Its own tile (128x64 logits, two warpgroups of 128
// threads, k steps of 32, 4 stages, 128-column gradient products) is the starting point, the options
// override it and the rules name what is wrong; any other chip is refused by
// the selection and, for a config written by hand, by the lowering.
// RUN: split-file %s %t
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=DEFAULT
// RUN: lossjit-opt %t/forward.mlir \
// RUN:   --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-rows=64 threads=128 block-cols=96" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=TUNED
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma" \
// RUN:   | FileCheck %t/grad.mlir
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90 matmul=wgmma" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=CHIP
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma" \
// RUN:   | not lossjit-opt --loss-lower-to-gpu=chip=sm_80 2>&1 | FileCheck %t/forward.mlir --check-prefix=LOWER
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma threads=128" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=THREADS
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=40" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=COLS
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma grad-cols=0" \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=SAME
// RUN: not lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma grad-cols=24" 2>&1 \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=GRADCOLS
// RUN: not lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90 matmul=mma_sync grad-cols=128" 2>&1 \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=MMA
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=1" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=TMA
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90 matmul=mma_sync tma=1" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=TMAMMA
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=2" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=WS
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=3" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=LEND
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-rows=64 threads=128 block-k=64 tma=3" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=LENDROWS
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma tma=4" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=TMAFLAG
// RUN: not lossjit-opt %t/recompute.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma" 2>&1 \
// RUN:   | FileCheck %t/recompute.mlir

//--- forward.mlir
// DEFAULT-LABEL: func.func @forward
// DEFAULT:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 4, block_cols = 64, block_k = 32, grad_cols = 128>
// TUNED-LABEL:   func.func @forward
// TUNED:           #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 64, threads = 128, splits = 8, stages = 4, block_cols = 96, block_k = 32, grad_cols = 128>
// CHIP: error: loss-select-lowering-config: matmul wgmma needs chip sm_90a (wgmma and its descriptors are specific to it), got 'sm_90'
// LOWER: error: loss-lower-to-gpu: matmul wgmma needs chip sm_90a (wgmma and its descriptors are specific to it), got 'sm_80'
// THREADS: error: loss-select-lowering-config: matmul wgmma: threads must be 128 per 64 rows (one warpgroup each), 256 for block_rows 128, got 128
// COLS: error: loss-select-lowering-config: matmul wgmma: block_cols must be a multiple of 16 in [16, 256] (wgmma's N), got 40
// TMA-LABEL:     func.func @forward
// TMA:             #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 64, block_k = 64, grad_cols = 128, tma = 1>
// TMAMMA: error: loss-select-lowering-config: tile tma is for matmul wgmma (TMA tiles in the swizzled layouts wgmma reads), got matmul mma_sync
// WS-LABEL:      func.func @forward
// WS:              #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 64, block_k = 64, grad_cols = 128, tma = 2>
// LEND-LABEL:    func.func @forward
// LEND:            #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 3, block_cols = 64, block_k = 64, grad_cols = 128, tma = 3>
// LENDROWS: error: loss-select-lowering-config: matmul wgmma: tma 3 (a producer warpgroup lending its registers) needs block_rows 128 (two consumer warpgroups), got 64
// TMAFLAG: error: loss-select-lowering-config: tile tma must be 0 (cp.async), 1 (TMA), 2 (TMA from a producer warp) or 3 (TMA from a producer warpgroup that lends its registers), got 4
func.func @forward(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

//--- grad.mlir
// CHECK-LABEL: func.func @grad
// CHECK:         #loss.gpu_config<schedule = chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 4, block_cols = 64, block_k = 32, grad_cols = 128>
// grad_cols 0 (the gradient products on the logits' tile) is the default value: not printed.
// SAME-LABEL: func.func @grad
// SAME:         #loss.gpu_config<schedule = chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 4, block_cols = 64, block_k = 32>
// GRADCOLS: error: loss-select-lowering-config: matmul wgmma: grad_cols must be 0 (as block_cols) or a multiple of 16 in [16, 256] (wgmma's N), got 24
// MMA: error: loss-select-lowering-config: tile grad_cols is for matmul wgmma (its threads do not depend on the columns), got matmul mma_sync
func.func @grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xbf16>, tensor<?x?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?x?xbf16>
}

//--- recompute.mlir
// CHECK: error: loss-select-lowering-config: matmul wgmma does not build the recompute schedule (use schedule = chunked, or matmul = simt)
func.func @recompute(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, strategy = "recompute"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}
