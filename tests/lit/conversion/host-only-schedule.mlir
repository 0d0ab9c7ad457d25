// Vocabulary chunks for a GPU. The backward takes them (strategy
// vocab_chunked, or a #loss.gpu_config that names the schedule); the fused
// forward+backward in vocabulary chunks is host-only, and the GPU lowering
// refuses a config that names it (the selection never picks it for a GPU).
// RUN: lossjit-opt %s --split-input-file --loss-select-lowering-config=target=gpu | FileCheck %s --check-prefix=KEPT
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics --loss-select-lowering-config=target=gpu --loss-lower-to-gpu | FileCheck %s --check-prefix=GPU

// KEPT-LABEL: func.func @vocab
// KEPT:         #loss.gpu_config<schedule = vocab_chunked,
// GPU-LABEL: loss.launch_plans = {vocab = {chunk = "C", chunk_dim = "V"
// GPU-SAME:    name = "lce_bwd_dz", parallel = "none", per_chunk = true
// GPU-SAME:    strategy = "vocab_chunked"
func.func @vocab(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = vocab_chunked, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}

// -----

// Without a config, the strategy asks for the schedule.
// KEPT-LABEL: func.func @asked
// KEPT:         #loss.gpu_config<schedule = vocab_chunked,
func.func @asked(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, strategy = "vocab_chunked"} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  // expected-error @+1 {{loss-lower-to-gpu: schedule fused_vocab_chunked is host-only; the GPU's fused forward+backward chunks rows (fused), its backward either (chunked, vocab_chunked)}}
  %loss, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = fused_vocab_chunked, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %loss, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
