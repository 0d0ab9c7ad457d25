// Vocabulary chunks for a GPU. The backward takes them (strategy
// vocab_chunked, or a #loss.gpu_config that names the schedule), and so does
// the fused forward+backward (fused_vocab_chunked): the forward's statistics
// (lse and row losses of every row), the loss, then the backward's chunks.
// Without a strategy the GPU's fused op keeps its row chunks.
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

// KEPT-LABEL: func.func @fused
// KEPT:         #loss.gpu_config<schedule = fused_vocab_chunked,
// GPU-LABEL: fused = {chunk = "C", chunk_dim = "V"
// GPU-SAME:    constants = {S = 8 : i64, WB = 65536 : i64}
// The per-row terms (grow, the row losses, S splits of two partials) come
// off the budget before dX's accumulator and the dZ chunk.
// GPU-SAME:    ["CMAX", "max(1,min(V,max(((max(WB-N*4*(2+S*2)-N*D*4,WB/2-N*4*(2+S*2)))/(max(1,N)*4))/64*64
// GPU-SAME:    name = "lce_partial", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["x", "w", "bias", "labels", "part_max", "part_sum", "lse", "loss_rows", "N", "V", "D", "S"], {{.*}}name = "lce_combine", parallel = "none", per_chunk = false
// GPU-SAME:    name = "lce_reduce", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["labels", "grow", "N", "V"], {{.*}}name = "lce_bwd_scale", parallel = "none", per_chunk = false
// GPU-SAME:    name = "lce_bwd_zero_dx", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["x", "w", "bias", "labels", "lse", "grow", "dz", "chunk_begin", "chunk_end", "N", "C", "V", "D"], {{.*}}name = "lce_bwd_dz", parallel = "none", per_chunk = true
// GPU-SAME:    name = "lce_bwd_dx", parallel = "none", per_chunk = true
// GPU-SAME:    name = "lce_bwd_dw", parallel = "none", per_chunk = true
// GPU-SAME:    name = "lce_bwd_finish_dx", parallel = "none", per_chunk = false
// GPU-SAME:    pass = "forward_backward"
// GPU-SAME:    strategy = "vocab_chunked"
// No V × D accumulator: the workspaces are per row, the dZ chunk and dX's.
// GPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}, {count = "S*N", dtype = "f32", name = "part_max"}, {count = "S*N", dtype = "f32", name = "part_sum"}, {count = "N", dtype = "f32", name = "loss_rows"}, {count = "N*C", dtype = "f32", name = "dz"}, {count = "N*D", dtype = "f32", name = "dx_acc"}]
func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %loss, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = f16, compute = f32, strategy = "vocab_chunked", workspace_bytes = 65536 : i64} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %loss, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}

// -----

// A config naming the schedule gives it too.
// KEPT-LABEL: func.func @configured
// KEPT:         #loss.gpu_config<schedule = fused_vocab_chunked,
// GPU-LABEL: configured = {chunk = "C", chunk_dim = "V"
// GPU-SAME:    name = "lce_bwd_dz", parallel = "none", per_chunk = true
func.func @configured(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %loss, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = fused_vocab_chunked, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %loss, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}

// -----

// Without a strategy (auto) the GPU's fused op chunks rows; strategy
// chunked asks for them on the host too.
// KEPT-LABEL: func.func @rows
// KEPT:         #loss.gpu_config<schedule = fused,
// GPU-LABEL: rows = {chunk = "C", constants = {WB = 67108864 : i64}, derived = {{\[\[}}"CMAX", "max(1,min(N,
// GPU-SAME:    name = "lce_fused_z", parallel = "none", per_chunk = true
func.func @rows(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %loss, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %loss, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
