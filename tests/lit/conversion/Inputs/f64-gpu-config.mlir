// An f64 op carrying a tensor-core GPU config (as a hand-written or
// overridden config would): loss-lower-to-gpu refuses it (lower-f64.mlir).
func.func @f64_given_a_gpu_config(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>) -> tensor<f64> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f64, compute = f64, loss.lowering_config = #loss.gpu_config<schedule = forward, matmul = mma_sync, block_rows = 64, threads = 128, splits = 8, stages = 3, block_cols = 64, block_k = 32>} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>, tensor<?xf64>
  return %l : tensor<f64>
}
