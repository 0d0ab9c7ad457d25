// recompute: the CPU backend recomputes logits in lce_bwd_dx (rows) and
// lce_bwd_dw (vocab); the GPU lowering refuses it with a clear reason.
// RUN: lossjit-opt %s --loss-lower-to-cpu | FileCheck %s --check-prefix=CPU
// RUN: not lossjit-opt %s --loss-lower-to-gpu 2>&1 | FileCheck %s --check-prefix=GPU

// GPU: error: loss-lower-to-gpu: the GPU backward implements the chunked strategy only (recompute needs launch-time dynamic shared memory, not built yet); use strategy auto or chunked
// CPU-LABEL: loss.launch_plans = {recompute = {
// CPU-SAME:    name = "lce_bwd_dx", parallel = "rows", per_chunk = false
// CPU-SAME:    name = "lce_bwd_dw", parallel = "vocab", per_chunk = false
// CPU-SAME:    strategy = "recompute"
// CPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}]
func.func @recompute(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, strategy = "recompute", reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}
