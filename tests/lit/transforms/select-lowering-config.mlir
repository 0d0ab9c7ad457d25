// loss-select-lowering-config: every fused op gets its loss.lowering_config
// (schedule, matmul strategy, tile) for the target; a config already in the
// IR keeps the fields the options do not set. The lowerings only read it.
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --split-input-file | FileCheck %s --check-prefix=GPU
// RUN: lossjit-opt %s --loss-select-lowering-config="target=gpu chip=sm_90 threads=256 splits=4" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=TUNED
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu vector-width=16" --split-input-file | FileCheck %s --check-prefix=CPU
// Invalid options and configs are errors that name the rule.
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu threads=100" --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=THREADS
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=cpu reduce-lanes=3" --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=LANES
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=tpu" --split-input-file 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu matmul=tcgen05" --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=MATMUL
// The lowerings refuse an op without a config.
// RUN: not lossjit-opt %s --loss-lower-to-gpu --split-input-file 2>&1 | FileCheck %s --check-prefix=NOCONFIG

// THREADS: error: loss-select-lowering-config: tile threads must be a power of two in [32, 1024], got 100
// LANES: error: loss-select-lowering-config: reduce-lanes must be a power of two in [1, 4096], got 3
// TARGET: error: loss-select-lowering-config: target must be gpu or cpu, got 'tpu'
// MATMUL: error: loss-select-lowering-config: matmul must be simt, mma_sync, wgmma or auto, got 'tcgen05'
// NOCONFIG: error: loss-lower-to-gpu: @forward has no #loss.gpu_config lowering config (run loss-select-lowering-config{target=gpu} first)

// GPU-LABEL: func.func @forward
// GPU:         loss.linear_cross_entropy
// GPU-SAME:      loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>
// TUNED-LABEL: func.func @forward
// TUNED:         #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 256, splits = 4, stages = 1>
// CPU-LABEL: func.func @forward
// CPU:         #loss.cpu_config<schedule = forward, block_rows = 8, block_cols = 1, vector_width = 16, panel_blocks = 16, vocab_tile = 64, reduce_lanes = 128>
func.func @forward(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

// strategy auto → chunked, recompute → recompute; _with_grad → fused.
// GPU-LABEL: func.func @grad_auto
// GPU:         #loss.gpu_config<schedule = chunked,
// CPU-LABEL: func.func @grad_auto
// CPU:         #loss.cpu_config<schedule = chunked,
func.func @grad_auto(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// GPU-LABEL: func.func @grad_recompute
// GPU:         #loss.gpu_config<schedule = recompute,
func.func @grad_recompute(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, strategy = "recompute"} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// GPU-LABEL: func.func @fused
// GPU:         #loss.gpu_config<schedule = fused,
func.func @fused(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// A config written in the IR is kept; options replace only their fields.
// GPU-LABEL: func.func @given
// GPU:         #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 2, threads = 64, splits = 3, stages = 1>
// TUNED-LABEL: func.func @given
// TUNED:         #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 2, threads = 256, splits = 4, stages = 1>
// A GPU config is replaced by the CPU defaults for target=cpu.
// CPU-LABEL: func.func @given
// CPU:         #loss.cpu_config<schedule = forward, block_rows = 8,
func.func @given(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 2, threads = 64, splits = 3, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

// vector-registers sizes the CPU register tile (rows × cols) for the
// target: 32 (AVX-512), 16 (AVX: 4 × 2 ymm, a power of two of columns),
// 8 (SSE); explicit block sizes win.
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu vector-registers=32" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=AVX512
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu vector-registers=16" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=AVX2
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu vector-registers=16 block-rows=6 block-cols=1" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=GIVEN
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu vector-registers=8" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=SSE
// AVX512-LABEL: func.func @register_tile
// AVX512:         #loss.cpu_config<schedule = forward, block_rows = 8, block_cols = 2, vector_width = 16, panel_blocks = 128,
// AVX2-LABEL: func.func @register_tile
// AVX2:           #loss.cpu_config<schedule = forward, block_rows = 4, block_cols = 2, vector_width = 8, panel_blocks = 256,
// GIVEN-LABEL: func.func @register_tile
// GIVEN:          #loss.cpu_config<schedule = forward, block_rows = 6, block_cols = 1, vector_width = 8, panel_blocks = 256,
// SSE-LABEL: func.func @register_tile
// SSE:            #loss.cpu_config<schedule = forward, block_rows = 4, block_cols = 1, vector_width = 8, panel_blocks = 256,
func.func @register_tile(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}
