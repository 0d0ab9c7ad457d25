// The vocabulary-chunked schedules are host-only: the GPU lowering refuses a
// #loss.gpu_config that names one (the selection never picks it for a GPU).
// RUN: not lossjit-opt %s --loss-lower-to-gpu 2>&1 | FileCheck %s
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu | FileCheck %s --check-prefix=KEPT

// CHECK: error: loss-lower-to-gpu: schedule vocab_chunked is host-only; the GPU chunks rows (chunked, fused)
// KEPT-LABEL: func.func @vocab
// KEPT:         #loss.gpu_config<schedule = vocab_chunked,
func.func @vocab(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, loss.lowering_config = #loss.gpu_config<schedule = vocab_chunked, matmul = simt, block_rows = 4, threads = 128, splits = 8, stages = 1>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}
