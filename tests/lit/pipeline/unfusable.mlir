// A graph the fusion cannot handle must make both pipelines fail with an
// error (DESIGN §5: "what it cannot fuse is a clear error naming the op"),
// not succeed with the loss ops left in place and no kernel at all.
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline -o /dev/null 2>&1 | FileCheck %s
// RUN: not lossjit-opt %s --lossjit-cpu-pipeline -o /dev/null 2>&1 | FileCheck %s

// CHECK: error: {{.*}}loss.nll

// The logits are returned as well, so the chain cannot be fused.
func.func @logits_escape(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf16>) {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l, %z : tensor<f32>, tensor<?x?xf16>
}
