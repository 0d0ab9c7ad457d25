// loss-fuse-linear-cross-entropy: nll(log_softmax([cast](linear(x, w[, b]))))
// becomes one loss.linear_cross_entropy; what cannot fuse stays, with a remark.
// RUN: lossjit-opt %s --loss-fuse-linear-cross-entropy --split-input-file --verify-diagnostics | FileCheck %s
// remarks=false is tested in fuse-no-remarks.mlir.
// The usual order (precision first, then fusion) fuses the same chains.
// RUN: lossjit-opt %s --loss-make-precision-explicit --loss-fuse-linear-cross-entropy="remarks=false" --split-input-file 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=AFTERPREC

// CHECK-LABEL: func.func @plain_chain
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf16>, %[[W:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[L:.*]], %[[LSE:.*]] = loss.linear_cross_entropy %[[X]], %[[W]], %[[Y]] {compute = f32, storage = f16} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
// CHECK-NEXT:    return %[[L]] : tensor<f32>
// CHECK-NOT:     loss.linear {{.*}}->
// CHECK-NOT:     loss.log_softmax
// CHECK-NOT:     loss.nll
// AFTERPREC-LABEL: func.func @plain_chain
// AFTERPREC-NEXT:    loss.linear_cross_entropy {{.*}} {compute = f32, storage = f16}
// AFTERPREC-NEXT:    return
func.func @plain_chain(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Bias, i32 labels and the nll's options travel into the fused op.
// CHECK-LABEL: func.func @with_bias
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xbf16>, %[[W:.*]]: tensor<?x?xbf16>, %[[B:.*]]: tensor<?xbf16>, %[[Y:.*]]: tensor<?xi32>)
// CHECK-NEXT:    %[[L:.*]], %{{.*}} = loss.linear_cross_entropy %[[X]], %[[W]], %[[Y]], %[[B]] {compute = f32, ignore_index = 5 : i64, reduction = #loss<reduction none>, storage = bf16} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi32>, tensor<?xbf16> -> tensor<?xf32>, tensor<?xf32>
// CHECK-NEXT:    return %[[L]] : tensor<?xf32>
// AFTERPREC-LABEL: func.func @with_bias
// AFTERPREC-NEXT:    loss.linear_cross_entropy {{.*}} storage = bf16
// AFTERPREC-NEXT:    return
func.func @with_bias(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %b: tensor<?xbf16>, %y: tensor<?xi32>) -> tensor<?xf32> {
  %z = loss.linear %x, %w, %b : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16> -> tensor<?x?xbf16>
  %lp = loss.log_softmax %z : tensor<?x?xbf16> -> tensor<?x?xbf16>
  %l = loss.nll %lp, %y {ignore_index = 5 : i64, reduction = #loss<reduction none>} : tensor<?x?xbf16>, tensor<?xi32> -> tensor<?xf32>
  return %l : tensor<?xf32>
}

// -----

// An explicit widening cast on the chain is absorbed: storage stays f16.
// CHECK-LABEL: func.func @with_cast
// CHECK-NEXT:    loss.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, reduction = #loss<reduction sum>, storage = f16} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
// CHECK-NEXT:    return
// CHECK-NOT:     loss.cast
func.func @with_cast(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %lp = loss.log_softmax %c : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Static shapes give a static lse.
// CHECK-LABEL: func.func @static_shapes
// CHECK-NEXT:    %[[L:.*]], %{{.*}} = loss.linear_cross_entropy {{.*}} : tensor<8x64xf32>, tensor<100x64xf32>, tensor<8xi64> -> tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT:    return %[[L]]
func.func @static_shapes(%x: tensor<8x64xf32>, %w: tensor<100x64xf32>, %y: tensor<8xi64>) -> tensor<8xf32> {
  %z = loss.linear %x, %w : tensor<8x64xf32>, tensor<100x64xf32> -> tensor<8x100xf32>
  %lp = loss.log_softmax %z : tensor<8x100xf32> -> tensor<8x100xf32>
  %l = loss.nll %lp, %y {reduction = #loss<reduction none>} : tensor<8x100xf32>, tensor<8xi64> -> tensor<8xf32>
  return %l : tensor<8xf32>
}

// -----

// cross_entropy sugar is expanded, then fused (through the widening cast).
// CHECK-LABEL: func.func @cross_entropy_sugar
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf16>, %[[W:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[L:.*]], %{{.*}} = loss.linear_cross_entropy %[[X]], %[[W]], %[[Y]] {compute = f32, ignore_index = 0 : i64, storage = f16}
// CHECK-NEXT:    return %[[L]]
// CHECK-NOT:     loss.cross_entropy
// AFTERPREC-LABEL: func.func @cross_entropy_sugar
// AFTERPREC-NEXT:    loss.linear_cross_entropy {{.*}} {compute = f32, ignore_index = 0 : i64, storage = f16}
// AFTERPREC-NEXT:    return
func.func @cross_entropy_sugar(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %l = loss.cross_entropy %c, %y {ignore_index = 0 : i64} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Two independent heads in one function: both fuse.
// CHECK-LABEL: func.func @two_heads
// CHECK-COUNT-2: loss.linear_cross_entropy
// CHECK-NOT:     loss.nll
func.func @two_heads(%x: tensor<?x?xf16>, %w1: tensor<?x?xf16>, %w2: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<f32>) {
  %z1 = loss.linear %x, %w1 : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %l1 = loss.cross_entropy %z1, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  %z2 = loss.linear %x, %w2 : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %l2 = loss.cross_entropy %z2, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l1, %l2 : tensor<f32>, tensor<f32>
}

// -----

// Negative: the logits are returned too, so [N,V] exists anyway.
// CHECK-LABEL: func.func @logits_have_another_user
// CHECK-NEXT:    %[[Z:.*]] = loss.linear
// CHECK-NEXT:    %[[LP:.*]] = loss.log_softmax %[[Z]]
// CHECK-NEXT:    %[[L:.*]] = loss.nll %[[LP]]
// CHECK-NEXT:    return %[[L]], %[[Z]]
// CHECK-NOT:     loss.linear_cross_entropy
func.func @logits_have_another_user(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf16>) {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: the logits have another user, so the [N,V] tensor must be materialized}}
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l, %z : tensor<f32>, tensor<?x?xf16>
}

// -----

// Negative: the log-probabilities are returned too.
// CHECK-LABEL: func.func @log_softmax_has_another_user
// CHECK-NEXT:    loss.linear
// CHECK-NEXT:    %[[LP:.*]] = loss.log_softmax
// CHECK-NEXT:    %[[L:.*]] = loss.nll %[[LP]]
// CHECK-NEXT:    return %[[L]], %[[LP]]
func.func @log_softmax_has_another_user(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf32>) {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %lp = loss.log_softmax %z : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: the log-probabilities have another user, so the [N,V] tensor must be materialized}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l, %lp : tensor<f32>, tensor<?x?xf32>
}

// -----

// Negative: the cast between linear and log_softmax feeds a second user.
// CHECK-LABEL: func.func @cast_has_another_user
// CHECK:         loss.cast
// CHECK:         loss.nll
// CHECK-NOT:     loss.linear_cross_entropy
func.func @cast_has_another_user(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %lp = loss.log_softmax %c : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: a loss.cast on the chain has another user}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  %s = loss.logsumexp %c : tensor<?x?xf32> -> tensor<?xf32>
  return %l, %s : tensor<f32>, tensor<?xf32>
}

// -----

// Negative: nll of log-probabilities that come from outside.
// CHECK-LABEL: func.func @nll_of_argument
// CHECK-NEXT:    loss.nll
// CHECK-NEXT:    return
func.func @nll_of_argument(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: log-probabilities are not produced by loss.log_softmax}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: softmax of logits that do not come from a loss.linear.
// CHECK-LABEL: func.func @logits_of_argument
// CHECK-NEXT:    %[[LP:.*]] = loss.log_softmax
// CHECK-NEXT:    loss.nll %[[LP]]
// CHECK-NEXT:    return
func.func @logits_of_argument(%z: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: logits are not produced by loss.linear}}
  %l = loss.cross_entropy %z, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
