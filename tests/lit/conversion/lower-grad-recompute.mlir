// recompute: the CPU backend recomputes logits in lce_bwd_dx (rows) and
// lce_bwd_dw (vocab); the GPU in lce_bwd_dx_rc / lce_bwd_dw_rc with dZ tiles
// in shared memory. No chunking, no [C,V] workspace.
// RUN: lossjit-opt %s --loss-select-lowering-config=target=cpu --loss-lower-to-cpu | FileCheck %s --check-prefix=CPU
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --loss-lower-to-gpu | FileCheck %s --check-prefix=GPU

// GPU-LABEL: loss.launch_plans = {recompute = {
// GPU-NOT:     chunk = "C"
// GPU-SAME:    name = "lce_bwd_scale"
// GPU-SAME:    {args = ["x", "w", "labels", "lse", "grow", "grad_x", "N", "V", "D"], block = [128, 1, 1], grid = ["cdiv(N,4)", "1", "1"], {{.*}}name = "lce_bwd_dx_rc", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["x", "w", "labels", "lse", "grow", "grad_w", "N", "V", "D"], block = [128, 1, 1], grid = ["cdiv(V,4)", "1", "1"], {{.*}}name = "lce_bwd_dw_rc", parallel = "none", per_chunk = false
// GPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}]
// GPU:         gpu.func @lce_bwd_dx_rc({{.*}}) workgroup(%{{.*}} : memref<512xf32, #gpu.address_space<workgroup>>) kernel
// GPU-COUNT-2:   gpu.barrier
// GPU:         gpu.func @lce_bwd_dw_rc(
// CPU-LABEL: loss.launch_plans = {recompute = {
// CPU-SAME:    name = "lce_bwd_dx", parallel = "rows", per_chunk = false
// CPU-SAME:    name = "lce_bwd_dw", parallel = "vocab", per_chunk = false
// CPU-SAME:    strategy = "recompute"
// CPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}]
func.func @recompute(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, strategy = "recompute", reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}
