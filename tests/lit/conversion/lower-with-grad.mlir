// loss.linear_cross_entropy_with_grad: loss, lse and the gradients of
// grad_loss = 1 in one chunked pass over the logits, on both backends.
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics --loss-select-lowering-config=target=gpu --loss-lower-to-gpu | FileCheck %s --check-prefix=GPU
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics --loss-select-lowering-config=target=cpu --loss-lower-to-cpu | FileCheck %s --check-prefix=CPU
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=ROUND

// ROUND-LABEL: func.func @fused
// ROUND: loss.linear_cross_entropy_with_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, storage = bf16, workspace_bytes = 65536 : i64} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
// GPU-LABEL: loss.launch_plans = {fused = {
// GPU-SAME:    entry_results = ["loss", "lse", "grad_x", "grad_w", "grad_bias"]
// GPU-SAME:    name = "lce_bwd_scale", parallel = "none", per_chunk = false
// GPU-SAME:    name = "lce_fused_z", parallel = "none", per_chunk = true
// GPU-SAME:    {args = ["labels", "dz", "lse", "loss_rows", "chunk_begin", "chunk_end", "V"], {{.*}}name = "lce_fused_lse", parallel = "none", per_chunk = true
// GPU-SAME:    {args = ["labels", "lse", "grow", "dz", "chunk_begin", "chunk_end", "V"], block = [128, 1, 1], grid = ["cdiv(C*V,128)", "1", "1"], {{.*}}name = "lce_fused_dz", parallel = "none", per_chunk = true
// GPU-SAME:    name = "lce_bwd_dx", parallel = "none", per_chunk = true
// GPU-SAME:    name = "lce_bwd_dw", parallel = "none", per_chunk = true
// GPU-SAME:    name = "lce_bwd_finish", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["labels", "loss_rows", "loss", "N"], {{.*}}name = "lce_reduce", parallel = "none", per_chunk = false
// GPU-SAME:    pass = "forward_backward"
// GPU-SAME:    params = [{{.*}}{dtype = "f32", name = "loss", output = true, shape = []}, {dtype = "f32", name = "lse", output = true, shape = ["N"]}, {dtype = "bf16", name = "grad_x", output = true
// On the host 16-bit storage runs the forward's statistics, then chunks the
// vocabulary (fused_vocab_chunked): bounded memory, no V×D f32 accumulator.
// CPU-LABEL: loss.launch_plans = {fused = {
// CPU-SAME:    chunk_dim = "V"
// CPU-SAME:    name = "lce_rows", parallel = "rows", per_chunk = false
// CPU-SAME:    name = "lce_bwd_scale", parallel = "none", per_chunk = false
// CPU-SAME:    {args = ["x", "w", "bias", "labels", "lse", "grow", "dz", "target_raw", {{.*}}name = "lce_bwd_dz_v", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_bwd_dx_v", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_bwd_dw_v", parallel = "vocab", per_chunk = true
// CPU-SAME:    name = "lce_fused_loss", parallel = "rows", per_chunk = false
// CPU-SAME:    name = "lce_reduce", parallel = "none", per_chunk = false
func.func @fused(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %l, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = bf16, compute = f32, workspace_bytes = 65536 : i64} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %l, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}

// -----

func.func @none(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) {
  // expected-error @+1 {{needs reduction mean or sum: with none every row has its own loss gradient, so the gradients cannot be rescaled after the fact (use loss.linear_cross_entropy_grad)}}
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f32, compute = f32, reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>, tensor<?x?xf32>
  return %l, %lse, %dx, %dw : tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// The row-chunked fused schedule on the host, asked for in the IR: raw
// logits per row chunk, lse and row losses from them, dZ in place.
// GPU-LABEL: loss.launch_plans = {fused_rows = {
// GPU-SAME:    name = "lce_fused_z"
// CPU-LABEL: loss.launch_plans = {fused_rows = {
// CPU-NOT:     chunk_dim
// CPU-SAME:    name = "lce_fused_z", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_fused_lse", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_fused_dz", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_reduce", parallel = "none", per_chunk = false
func.func @fused_rows(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = bf16, compute = f32, loss.lowering_config = #loss.cpu_config<schedule = fused, block_rows = 4, block_cols = 2, vector_width = 8, panel_blocks = 16, vocab_tile = 64, reduce_lanes = 128>} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
}
