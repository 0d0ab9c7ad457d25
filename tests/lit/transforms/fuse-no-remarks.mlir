// loss-fuse-linear-cross-entropy{remarks=false}: the same rewrites, and not a
// single remark on the chains that stay (-verify-diagnostics fails on any
// diagnostic that is not annotated, and none is).
// RUN: lossjit-opt %s --loss-fuse-linear-cross-entropy="remarks=false" --split-input-file --verify-diagnostics | FileCheck %s
// With the default (remarks=true) the same input does produce remarks.
// RUN: lossjit-opt %s --loss-fuse-linear-cross-entropy --split-input-file 2>&1 >/dev/null | FileCheck %s --check-prefix=LOUD

// LOUD: remark: not fused into loss.linear_cross_entropy: the logits have another user
// LOUD: remark: not fused into loss.linear_cross_entropy: the log-probabilities have another user
// LOUD: remark: not fused into loss.linear_cross_entropy: log-probabilities are not produced by loss.log_softmax

// CHECK-LABEL: func.func @still_fuses
// CHECK-NEXT:    loss.linear_cross_entropy
// CHECK-NEXT:    return
func.func @still_fuses(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %l2 = loss.cross_entropy %z, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l2 : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @logits_have_another_user
// CHECK:         loss.nll
// CHECK-NOT:     loss.linear_cross_entropy
func.func @logits_have_another_user(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf16>) {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l, %z : tensor<f32>, tensor<?x?xf16>
}

// -----

// CHECK-LABEL: func.func @log_softmax_has_another_user
// CHECK:         loss.nll
// CHECK-NOT:     loss.linear_cross_entropy
func.func @log_softmax_has_another_user(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf32>) {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %lp = loss.log_softmax %z : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l, %lp : tensor<f32>, tensor<?x?xf32>
}

// -----

// CHECK-LABEL: func.func @nll_of_argument
// CHECK-NEXT:    loss.nll
func.func @nll_of_argument(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
