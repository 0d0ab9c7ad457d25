// Verifier errors of the `loss` dialect, one per split.
// RUN: lossjit-opt %s -split-input-file -verify-diagnostics

// Each split is one test function; -verify-diagnostics pins every expected
// diagnostic to its op's line (and fails on any unexpected one), which takes
// the place of CHECK-LABEL here. Positive forms are in ops.mlir.

func.func @linear_input_rank3(%x: tensor<2x3x4xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{'loss.linear' op input (x, [N,D]) must have rank 2, got rank 3 ('tensor<2x3x4xf16>')}}
  %z = loss.linear %x, %w : tensor<2x3x4xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  return
}

// -----

func.func @linear_weight_rank1(%x: tensor<?x?xf16>, %w: tensor<?xf16>) {
  // expected-error @+1 {{weight (w, [V,D]) must have rank 2, got rank 1}}
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?xf16> -> tensor<?x?xf16>
  return
}

// -----

func.func @linear_result_rank1(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{result ([N,V]) must have rank 2, got rank 1}}
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf16>
  return
}

// -----

func.func @linear_d_mismatch(%x: tensor<4x64xf16>, %w: tensor<10x32xf16>) {
  // expected-error @+1 {{reduction dim D of input and weight differ: 64 vs 32}}
  %z = loss.linear %x, %w : tensor<4x64xf16>, tensor<10x32xf16> -> tensor<4x10xf16>
  return
}

// -----

func.func @linear_bias_length(%x: tensor<4x64xf16>, %w: tensor<10x64xf16>, %b: tensor<9xf16>) {
  // expected-error @+1 {{bias length differs from vocabulary size V of weight: 9 vs 10}}
  %z = loss.linear %x, %w, %b : tensor<4x64xf16>, tensor<10x64xf16>, tensor<9xf16> -> tensor<4x10xf16>
  return
}

// -----

func.func @linear_bias_rank2(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %b: tensor<1x?xf16>) {
  // expected-error @+1 {{bias (b, [V]) must have rank 1, got rank 2}}
  %z = loss.linear %x, %w, %b : tensor<?x?xf16>, tensor<?x?xf16>, tensor<1x?xf16> -> tensor<?x?xf16>
  return
}

// -----

func.func @linear_bias_type(%x: tensor<?x?xf16>, %w: tensor<10x?xf16>, %b: tensor<10xf32>) {
  // expected-error @+1 {{bias must have the storage type of input ('f16'), got 'f32'}}
  %z = loss.linear %x, %w, %b : tensor<?x?xf16>, tensor<10x?xf16>, tensor<10xf32> -> tensor<?x10xf16>
  return
}

// -----

func.func @linear_mixed_storage(%x: tensor<?x?xf16>, %w: tensor<?x?xf32>) {
  // expected-error @+1 {{input and weight must share one storage type, got 'f16' and 'f32'}}
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf32> -> tensor<?x?xf16>
  return
}

// -----

// The result keeps the storage type: widening needs an explicit loss.cast.
func.func @linear_result_widened(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) {
  // expected-error @+1 {{result keeps the storage type of input ('f16'), got 'f32'; use loss.cast to change it}}
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf32>
  return
}

// -----

func.func @linear_result_rows(%x: tensor<4x?xf16>, %w: tensor<10x?xf16>) {
  // expected-error @+1 {{result rows differ from input rows N: 5 vs 4}}
  %z = loss.linear %x, %w : tensor<4x?xf16>, tensor<10x?xf16> -> tensor<5x10xf16>
  return
}

// -----

func.func @linear_result_cols(%x: tensor<4x?xf16>, %w: tensor<10x?xf16>) {
  // expected-error @+1 {{result columns differ from weight rows V: 11 vs 10}}
  %z = loss.linear %x, %w : tensor<4x?xf16>, tensor<10x?xf16> -> tensor<4x11xf16>
  return
}

// -----

// f8 is not a storage type of the loss graph.
func.func @linear_f8_storage(%x: tensor<?x?xf8E4M3FN>, %w: tensor<?x?xf8E4M3FN>) {
  // expected-error @+1 {{'loss.linear' op operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<?x?xf8E4M3FN>'}}
  %z = loss.linear %x, %w : tensor<?x?xf8E4M3FN>, tensor<?x?xf8E4M3FN> -> tensor<?x?xf8E4M3FN>
  return
}

// -----

func.func @cast_f8(%t: tensor<4xf32>) {
  // expected-error @+1 {{'loss.cast' op result #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<4xf8E4M3FN>'}}
  %a = loss.cast %t : tensor<4xf32> to tensor<4xf8E4M3FN>
  return
}

// -----

func.func @cast_changes_shape(%t: tensor<4x8xf16>) {
  // expected-error @+1 {{'loss.cast' op changes only the element type; shapes differ: 8 vs 9}}
  %a = loss.cast %t : tensor<4x8xf16> to tensor<4x9xf32>
  return
}

// -----

func.func @cast_changes_rank(%t: tensor<4x8xf16>) {
  // expected-error @+1 {{'loss.cast' op changes only the element type; rank 2 vs 1}}
  %a = loss.cast %t : tensor<4x8xf16> to tensor<32xf32>
  return
}

// -----

func.func @log_softmax_rank0(%z: tensor<f32>) {
  // expected-error @+1 {{'loss.log_softmax' op needs at least one axis (the vocabulary)}}
  %a = loss.log_softmax %z : tensor<f32> -> tensor<f32>
  return
}

// -----

// log_softmax never changes the element type by itself.
func.func @log_softmax_widens(%z: tensor<?x?xf16>) {
  // expected-error @+1 {{'loss.log_softmax' op result type must equal input type 'tensor<?x?xf16>', got 'tensor<?x?xf32>'}}
  %a = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf32>
  return
}

// -----

func.func @logsumexp_keeps_axis(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.logsumexp' op drops the last axis: result rank must be 1, got 2}}
  %a = loss.logsumexp %z : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @logsumexp_element_type(%z: tensor<?x?xf16>) {
  // expected-error @+1 {{'loss.logsumexp' op result element type must equal input's ('f16')}}
  %a = loss.logsumexp %z : tensor<?x?xf16> -> tensor<?xf32>
  return
}

// -----

func.func @logsumexp_leading_dims(%z: tensor<4x10xf32>) {
  // expected-error @+1 {{'loss.logsumexp' op leading dims of input and result differ: 4 vs 3}}
  %a = loss.logsumexp %z : tensor<4x10xf32> -> tensor<3xf32>
  return
}

// -----

func.func @nll_label_f32(%lp: tensor<?x?xf32>, %y: tensor<?xf32>) {
  // expected-error @+1 {{'loss.nll' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<?xf32>'}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xf32> -> tensor<f32>
  return
}

// -----

func.func @nll_label_i16(%lp: tensor<?x?xf32>, %y: tensor<?xi16>) {
  // expected-error @+1 {{'loss.nll' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<?xi16>'}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi16> -> tensor<f32>
  return
}

// -----

func.func @nll_logp_rank3(%lp: tensor<?x?x?xf32>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.nll' op logp ([N,V]) must have rank 2, got rank 3}}
  %l = loss.nll %lp, %y : tensor<?x?x?xf32>, tensor<?xi64> -> tensor<f32>
  return
}

// -----

func.func @nll_label_count(%lp: tensor<4x?xf32>, %y: tensor<5xi64>) {
  // expected-error @+1 {{'loss.nll' op row count N of labels differs: 4 vs 5}}
  %l = loss.nll %lp, %y : tensor<4x?xf32>, tensor<5xi64> -> tensor<f32>
  return
}

// -----

func.func @nll_none_scalar(%lp: tensor<4x?xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'loss.nll' op result of reduction = none must have rank 1, got rank 0 ('tensor<f32>')}}
  %l = loss.nll %lp, %y {reduction = #loss<reduction none>} : tensor<4x?xf32>, tensor<4xi64> -> tensor<f32>
  return
}

// -----

func.func @nll_none_length(%lp: tensor<4x?xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'loss.nll' op result length differs from row count N: 3 vs 4}}
  %l = loss.nll %lp, %y {reduction = #loss<reduction none>} : tensor<4x?xf32>, tensor<4xi64> -> tensor<3xf32>
  return
}

// -----

func.func @nll_mean_vector(%lp: tensor<4x?xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'loss.nll' op result of reduction = mean/sum must have rank 0, got rank 1 ('tensor<4xf32>')}}
  %l = loss.nll %lp, %y : tensor<4x?xf32>, tensor<4xi64> -> tensor<4xf32>
  return
}

// -----

// The loss is of the compute type: f32 for 16-bit and f32 data, f64 for f64.
func.func @nll_result_f16(%lp: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.nll' op result #0 must be ranked tensor of 32-bit float or 64-bit float values, but got 'tensor<f16>'}}
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f16>
  return
}

// -----

func.func @nll_result_f64_of_f32(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.nll' op result must be 'f32' (the compute type of 'f32'), got 'f64'}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f64>
  return
}

// -----

func.func @cross_entropy_labels_rank2(%z: tensor<?x?xf32>, %y: tensor<?x?xi64>) {
  // expected-error @+1 {{'loss.cross_entropy' op labels ([N]) must have rank 1, got rank 2 ('tensor<?x?xi64>')}}
  %l = loss.cross_entropy %z, %y : tensor<?x?xf32>, tensor<?x?xi64> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_label_f32(%z: tensor<?x?xf16>, %y: tensor<?xf32>) {
  // expected-error @+1 {{'loss.cross_entropy' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<?xf32>'}}
  %l = loss.cross_entropy %z, %y : tensor<?x?xf16>, tensor<?xf32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_none_scalar(%z: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.cross_entropy' op result of reduction = none must have rank 1, got rank 0}}
  %l = loss.cross_entropy %z, %y {reduction = #loss<reduction none>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return
}

// -----

// fp16 storage never means fp16 math.
func.func @fused_compute_f16(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op compute must be 'f32' for 'f16' storage (fp16/bf16 storage never means fp16 math; f64 storage computes in f64), got 'f16'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f16} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_compute_bf16(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{compute must be 'f32' for 'bf16' storage (fp16/bf16 storage never means fp16 math; f64 storage computes in f64), got 'bf16'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = bf16} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_storage_mismatch(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op storage attribute 'bf16' must be f16, bf16, f32 or f64 and equal the input element type 'f16'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_storage_f64(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op storage attribute 'f64' must be f16, bf16, f32 or f64 and equal the input element type 'f32'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f64, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

// f64 storage computes in f64, never in f32.
func.func @fused_f64_compute_f32(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op compute must be 'f64' for 'f64' storage (fp16/bf16 storage never means fp16 math; f64 storage computes in f64), got 'f32'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f64, compute = f32} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>, tensor<?xf64>
  return
}

// -----

// Row values are of the compute type: an f32 lse of f64 data is refused.
func.func @fused_f64_lse_f32(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op result #1 is 'f32': row values must be of the compute type 'f64'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f64, compute = f64} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>, tensor<?xf32>
  return
}

// -----

func.func @fused_missing_compute(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op requires attribute 'compute'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_d_mismatch(%x: tensor<?x64xf16>, %w: tensor<?x32xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op reduction dim D of input and weight differ: 64 vs 32}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x64xf16>, tensor<?x32xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_bias_length(%x: tensor<?x?xf16>, %w: tensor<10x?xf16>, %y: tensor<?xi64>, %b: tensor<11xf16>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op bias length differs from vocabulary size V of weight: 11 vs 10}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<10x?xf16>, tensor<?xi64>, tensor<11xf16> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_label_count(%x: tensor<4x?xf16>, %w: tensor<?x?xf16>, %y: tensor<8xi32>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op row count N of labels differs: 4 vs 8}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<4x?xf16>, tensor<?x?xf16>, tensor<8xi32> -> tensor<f32>, tensor<4xf32>
  return
}

// -----

func.func @fused_label_f32(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xf32>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op operand #2 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<?xf32>'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf32> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_lse_length(%x: tensor<4x?xf16>, %w: tensor<?x?xf16>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op lse length differs from row count N: 5 vs 4}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<4x?xf16>, tensor<?x?xf16>, tensor<4xi64> -> tensor<f32>, tensor<5xf32>
  return
}

// -----

func.func @fused_none_scalar(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op result of reduction = none must have rank 1, got rank 0}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {reduction = #loss<reduction none>, storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_loss_f16(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op result #0 must be ranked tensor of 32-bit float or 64-bit float values, but got 'tensor<f16>'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f16>, tensor<?xf32>
  return
}

// -----

// The fused forward+backward forms each logit tile in a chunk: no recompute.
func.func @fused_recompute(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy_with_grad' op strategy must be auto, chunked or vocab_chunked (the fused forward+backward has no recompute schedule), got 'recompute'}}
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32, strategy = "recompute"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return
}

// -----

// loss.lowering_config: only a #loss.gpu_config / #loss.cpu_config, only on
// a fused op, with a schedule that lowers that op, with a valid tile.
func.func @config_wrong_schedule(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{schedule chunked does not lower this op (forward: linear_cross_entropy and vocab_reduce; chunked, vocab_chunked or recompute: their _grad; fused or fused_vocab_chunked: linear_cross_entropy_with_grad)}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = chunked, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @config_not_a_config(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{'loss.lowering_config' must be a #loss.gpu_config or #loss.cpu_config, got "fast"}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = "fast"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @config_on_a_graph_op(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) -> tensor<?x?xf16> {
  // expected-error @+1 {{'loss.lowering_config' belongs on a fused loss op, not on 'loss.linear'}}
  %z = loss.linear %x, %w {loss.lowering_config = #loss.cpu_config<schedule = forward, block_rows = 8, block_cols = 1, vector_width = 8, panel_blocks = 16, vocab_tile = 64, reduce_lanes = 128>} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  return %z : tensor<?x?xf16>
}

// -----

func.func @config_bad_tile(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{tile threads must be a power of two in [32, 1024], got 100}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 100, splits = 8, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @config_mma_sync_f32_storage(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{matmul mma_sync multiplies f16 or bf16 storage; f32 stays on matmul simt (TF32 would round the operands)}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @config_mma_sync_bad_warp_count(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{matmul mma_sync: threads must be 32 per 32x32 warp tile, 128 for 64x64, got 64}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 64, splits = 8, stages = 3, block_cols = 64, block_k = 32>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @config_simt_with_k_tile(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{matmul simt has one column per thread and no k tile: block_cols and block_k must be 0, got 0 and 32}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1, block_k = 32>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @config_unknown_attr(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{unknown loss dialect attribute 'loss.tile'}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, loss.tile = 4} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}
