// f64 storage computes in f64: every kernel argument, workspace, stack
// buffer and vector of the lowered host kernels is f64 (no f32 anywhere),
// and the GPU kernels are SIMT in f64 (tensor cores take f16/bf16 only).
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu block-rows=2 vector-width=8" --loss-lower-to-cpu --split-input-file | FileCheck %s
// RUN: lossjit-opt %s --loss-select-lowering-config="target=gpu matmul=auto" --loss-lower-to-gpu --split-input-file | FileCheck %s --check-prefix=GPU
// A tensor-core config is refused by name.
// RUN: not lossjit-opt %S/Inputs/f64-gpu-config.mlir --loss-lower-to-gpu 2>&1 | FileCheck %s --check-prefix=MMA

// GPU-LABEL: loss.launch_plans = {f64_forward = {
// GPU-SAME:    tile = "block_rows=4,threads=128,splits=8,matmul=simt,stages=1"
// GPU-SAME:    workspaces = [{count = "S*N", dtype = "f64", name = "part_max"}, {count = "S*N", dtype = "f64", name = "part_sum"}, {count = "N", dtype = "f64", name = "loss_rows"}]
// GPU:         gpu.func @lce_partial(%{{.*}}: memref<?xf64>, %{{.*}}: memref<?xf64>, %{{.*}}: memref<?xf64>, %{{.*}}: memref<?xf64>,
// GPU-SAME:      workgroup(%{{.*}} : memref<{{[0-9]+}}xf64, #gpu.address_space<workgroup>>
// GPU-NOT:     f32
// GPU-LABEL: loss.launch_plans = {f64_backward = {
// GPU-SAME:    workspaces = [{count = "N", dtype = "f64", name = "grow"}, {count = "C*V", dtype = "f64", name = "dz"}]
// GPU-NOT:     f32
// MMA: error: loss-lower-to-gpu: matmul mma_sync multiplies f16 or bf16 operands; f32 and f64 storage stay on matmul simt

// CHECK-LABEL: module attributes {loss.launch_plans = {f64_forward = {
// CHECK-SAME:    options = {bias = "false", dtype = "f64",
// CHECK-SAME:    params = [{dtype = "f64", name = "x", {{[^}]*}}}, {dtype = "f64", name = "w", {{[^}]*}}}, {dtype = "i64", name = "labels", {{[^}]*}}}, {dtype = "f64", name = "loss", {{[^}]*}}}, {dtype = "f64", name = "lse", {{[^}]*}}}]
// CHECK-SAME:    workspaces = [{count = "N", dtype = "f64", name = "loss_rows"}]
// CHECK:         func.func @lce_rows(%{{.*}}: memref<?xf64>, %{{.*}}: memref<?xf64>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf64>, %{{.*}}: memref<?xf64>,
// The packed micro-kernel: per k one vector<8xf64> of W, x broadcast, fma.
// CHECK:           vector.broadcast %{{.*}} : f64 to vector<8xf64>
// CHECK:           math.fma %{{.*}} : vector<8xf64>
// CHECK:           math.exp2 %{{.*}} : f64
// CHECK:           math.log2 %{{.*}} : f64
// CHECK-NOT:       f32
func.func @f64_forward(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>) -> tensor<f64> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f64, compute = f64} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>, tensor<?xf64>
  return %l : tensor<f64>
}

// -----

// The backward accumulates dW in grad_w itself (storage is the compute
// type), in f64 chunks of dZ sized by 8-byte elements.
// CHECK-LABEL: module attributes {loss.launch_plans = {f64_backward = {
// CHECK-SAME:    derived = {{\[\[}}"C", "max(1,min(N,(WB-N*8-min(4194304,WB/16))/(V*8)))"]]
// CHECK-SAME:    workspaces = [{count = "N", dtype = "f64", name = "grow"}, {count = "C*V", dtype = "f64", name = "dz"}]
// CHECK-NOT:       f32
func.func @f64_backward(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>, %lse: tensor<?xf64>, %g: tensor<f64>) -> (tensor<?x?xf64>, tensor<?x?xf64>) {
  %gx, %gw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f64, compute = f64, strategy = "chunked"} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64>, tensor<?xf64>, tensor<f64> -> tensor<?x?xf64>, tensor<?x?xf64>
  return %gx, %gw : tensor<?x?xf64>, tensor<?x?xf64>
}
