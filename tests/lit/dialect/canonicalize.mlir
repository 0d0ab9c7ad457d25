// Canonicalization of the `loss` dialect: cross_entropy is sugar for
// log_softmax + nll; a cast to the same type folds away; nothing else moves.
// RUN: lossjit-opt %s --canonicalize --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @cross_entropy_expands
// CHECK-SAME:    (%[[Z:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[LP:.*]] = loss.log_softmax %[[Z]] : tensor<?x?xf16> -> tensor<?x?xf16>
// CHECK-NEXT:    %[[L:.*]] = loss.nll %[[LP]], %[[Y]] : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
// CHECK-NEXT:    return %[[L]]
// CHECK-NOT:     loss.cross_entropy
func.func @cross_entropy_expands(%z: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l = loss.cross_entropy %z, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The options travel to the nll unchanged.
// CHECK-LABEL: func.func @cross_entropy_keeps_options
// CHECK:         %[[LP:.*]] = loss.log_softmax %{{.*}} : tensor<8x100xbf16> -> tensor<8x100xbf16>
// CHECK:         loss.nll %[[LP]], %{{.*}} {ignore_index = 7 : i64, reduction = #loss<reduction none>} : tensor<8x100xbf16>, tensor<8xi32> -> tensor<8xf32>
// CHECK-NOT:     loss.cross_entropy
func.func @cross_entropy_keeps_options(%z: tensor<8x100xbf16>, %y: tensor<8xi32>) -> tensor<8xf32> {
  %l = loss.cross_entropy %z, %y {ignore_index = 7 : i64, reduction = #loss<reduction none>} : tensor<8x100xbf16>, tensor<8xi32> -> tensor<8xf32>
  return %l : tensor<8xf32>
}

// -----

// CHECK-LABEL: func.func @cross_entropy_sum
// CHECK:         loss.nll %{{.*}}, %{{.*}} {reduction = #loss<reduction sum>}
func.func @cross_entropy_sum(%z: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %l = loss.cross_entropy %z, %y {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A cast to its own type is the identity.
// CHECK-LABEL: func.func @cast_same_type_folds
// CHECK-SAME:    (%[[T:.*]]: tensor<?x?xf32>)
// CHECK-NEXT:    return %[[T]]
func.func @cast_same_type_folds(%t: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %a = loss.cast %t : tensor<?x?xf32> to tensor<?x?xf32>
  return %a : tensor<?x?xf32>
}

// -----

// Negative: a widening cast changes the value and stays.
// CHECK-LABEL: func.func @cast_widen_stays
// CHECK-NEXT:    loss.cast %{{.*}} : tensor<?x?xf16> to tensor<?x?xf32>
func.func @cast_widen_stays(%t: tensor<?x?xf16>) -> tensor<?x?xf32> {
  %a = loss.cast %t : tensor<?x?xf16> to tensor<?x?xf32>
  return %a : tensor<?x?xf32>
}

// -----

// Negative: f32 -> f16 -> f32 rounds; the pair must not fold to the input.
// CHECK-LABEL: func.func @cast_round_trip_stays
// CHECK-NEXT:    %[[N:.*]] = loss.cast %{{.*}} : tensor<?xf32> to tensor<?xf16>
// CHECK-NEXT:    %[[W:.*]] = loss.cast %[[N]] : tensor<?xf16> to tensor<?xf32>
// CHECK-NEXT:    return %[[W]]
func.func @cast_round_trip_stays(%t: tensor<?xf32>) -> tensor<?xf32> {
  %a = loss.cast %t : tensor<?xf32> to tensor<?xf16>
  %b = loss.cast %a : tensor<?xf16> to tensor<?xf32>
  return %b : tensor<?xf32>
}

// -----

// Negative: an explicit log_softmax + nll is already canonical, and the
// linear is not fused by canonicalize (that is the fusion pass's job).
// CHECK-LABEL: func.func @chain_unchanged
// CHECK-NEXT:    loss.linear
// CHECK-NEXT:    loss.log_softmax
// CHECK-NEXT:    loss.nll
// CHECK-NEXT:    return
// CHECK-NOT:     loss.linear_cross_entropy
func.func @chain_unchanged(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %lp = loss.log_softmax %z : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Pure ops without users are erased.
// CHECK-LABEL: func.func @dead_ops_erased
// CHECK-NEXT:    return
func.func @dead_ops_erased(%z: tensor<?x?xf16>, %y: tensor<?xi64>) {
  %a = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %b = loss.cross_entropy %z, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return
}
