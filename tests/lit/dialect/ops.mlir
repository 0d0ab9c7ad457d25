// Round trip of every op of the `loss` dialect: custom form → print → parse
// again, and the generic form must parse back to the same custom form.
// RUN: lossjit-opt %s | lossjit-opt | FileCheck %s
// RUN: lossjit-opt %s --mlir-print-op-generic | lossjit-opt | FileCheck %s

// CHECK-LABEL: func.func @linear_dynamic
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf16>, %[[W:.*]]: tensor<?x?xf16>)
// CHECK:         %[[Z:.*]] = loss.linear %[[X]], %[[W]] : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
// CHECK:         return %[[Z]]
func.func @linear_dynamic(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) -> tensor<?x?xf16> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  return %z : tensor<?x?xf16>
}

// CHECK-LABEL: func.func @linear_static_bias
// CHECK-SAME:    (%[[X:.*]]: tensor<8x64xbf16>, %[[W:.*]]: tensor<1000x64xbf16>, %[[B:.*]]: tensor<1000xbf16>)
// CHECK:         loss.linear %[[X]], %[[W]], %[[B]] : tensor<8x64xbf16>, tensor<1000x64xbf16>, tensor<1000xbf16> -> tensor<8x1000xbf16>
func.func @linear_static_bias(%x: tensor<8x64xbf16>, %w: tensor<1000x64xbf16>, %b: tensor<1000xbf16>) -> tensor<8x1000xbf16> {
  %z = loss.linear %x, %w, %b : tensor<8x64xbf16>, tensor<1000x64xbf16>, tensor<1000xbf16> -> tensor<8x1000xbf16>
  return %z : tensor<8x1000xbf16>
}

// A static dimension may meet a dynamic one (checked at run time).
// CHECK-LABEL: func.func @linear_mixed_static_dynamic
// CHECK:         loss.linear %{{.*}}, %{{.*}} : tensor<?x64xf32>, tensor<1000x?xf32> -> tensor<?x1000xf32>
func.func @linear_mixed_static_dynamic(%x: tensor<?x64xf32>, %w: tensor<1000x?xf32>) -> tensor<?x1000xf32> {
  %z = loss.linear %x, %w : tensor<?x64xf32>, tensor<1000x?xf32> -> tensor<?x1000xf32>
  return %z : tensor<?x1000xf32>
}

// CHECK-LABEL: func.func @cast_widen_and_narrow
// CHECK:         %[[A:.*]] = loss.cast %{{.*}} : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK:         %[[B:.*]] = loss.cast %[[A]] : tensor<?x?xf32> to tensor<?x?xbf16>
// CHECK:         return %[[B]]
func.func @cast_widen_and_narrow(%t: tensor<?x?xf16>) -> tensor<?x?xbf16> {
  %a = loss.cast %t : tensor<?x?xf16> to tensor<?x?xf32>
  %b = loss.cast %a : tensor<?x?xf32> to tensor<?x?xbf16>
  return %b : tensor<?x?xbf16>
}

// CHECK-LABEL: func.func @cast_static_to_dynamic
// CHECK:         loss.cast %{{.*}} : tensor<4x8xf16> to tensor<?x8xf32>
func.func @cast_static_to_dynamic(%t: tensor<4x8xf16>) -> tensor<?x8xf32> {
  %a = loss.cast %t : tensor<4x8xf16> to tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @log_softmax_and_logsumexp
// CHECK:         loss.log_softmax %{{.*}} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK:         loss.logsumexp %{{.*}} : tensor<?x?xf32> -> tensor<?xf32>
// CHECK:         loss.log_softmax %{{.*}} : tensor<4x10xbf16> -> tensor<4x10xbf16>
// CHECK:         loss.logsumexp %{{.*}} : tensor<4x10xbf16> -> tensor<4xbf16>
// CHECK:         loss.logsumexp %{{.*}} : tensor<10xf16> -> tensor<f16>
func.func @log_softmax_and_logsumexp(%z: tensor<?x?xf32>, %s: tensor<4x10xbf16>, %v: tensor<10xf16>) {
  %0 = loss.log_softmax %z : tensor<?x?xf32> -> tensor<?x?xf32>
  %1 = loss.logsumexp %z : tensor<?x?xf32> -> tensor<?xf32>
  %2 = loss.log_softmax %s : tensor<4x10xbf16> -> tensor<4x10xbf16>
  %3 = loss.logsumexp %s : tensor<4x10xbf16> -> tensor<4xbf16>
  %4 = loss.logsumexp %v : tensor<10xf16> -> tensor<f16>
  return
}

// Defaults (ignore_index = -100, reduction = mean) are elided when printed.
// CHECK-LABEL: func.func @nll_reductions
// CHECK:         loss.nll %{{.*}}, %{{.*}} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
// CHECK:         loss.nll %{{.*}}, %{{.*}} {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
// CHECK:         loss.nll %{{.*}}, %{{.*}} {ignore_index = 0 : i64, reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<?xf32>
// CHECK:         loss.nll %{{.*}}, %{{.*}} {ignore_index = -1 : i64} : tensor<4x10xf16>, tensor<4xi32> -> tensor<f32>
// CHECK:         loss.nll %{{.*}}, %{{.*}} {reduction = #loss<reduction none>} : tensor<4x10xf16>, tensor<4xi32> -> tensor<4xf32>
func.func @nll_reductions(%lp: tensor<?x?xf32>, %y: tensor<?xi64>, %lp16: tensor<4x10xf16>, %y32: tensor<4xi32>) {
  %0 = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  %1 = loss.nll %lp, %y {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  %2 = loss.nll %lp, %y {ignore_index = 0 : i64, reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<?xf32>
  %3 = loss.nll %lp16, %y32 {ignore_index = -1 : i64} : tensor<4x10xf16>, tensor<4xi32> -> tensor<f32>
  %4 = loss.nll %lp16, %y32 {reduction = #loss<reduction none>} : tensor<4x10xf16>, tensor<4xi32> -> tensor<4xf32>
  return
}

// CHECK-LABEL: func.func @cross_entropy
// CHECK:         loss.cross_entropy %{{.*}}, %{{.*}} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
// CHECK:         loss.cross_entropy %{{.*}}, %{{.*}} {ignore_index = 3 : i64, reduction = #loss<reduction none>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<?xf32>
// CHECK:         loss.cross_entropy %{{.*}}, %{{.*}} {reduction = #loss<reduction sum>} : tensor<2x5xbf16>, tensor<2xi32> -> tensor<f32>
func.func @cross_entropy(%z: tensor<?x?xf16>, %y: tensor<?xi64>, %zs: tensor<2x5xbf16>, %ys: tensor<2xi32>) {
  %0 = loss.cross_entropy %z, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  %1 = loss.cross_entropy %z, %y {ignore_index = 3 : i64, reduction = #loss<reduction none>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<?xf32>
  %2 = loss.cross_entropy %zs, %ys {reduction = #loss<reduction sum>} : tensor<2x5xbf16>, tensor<2xi32> -> tensor<f32>
  return
}

// CHECK-LABEL: func.func @fused_f16_mean
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf16>, %[[W:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK:         %[[L:.*]], %[[LSE:.*]] = loss.linear_cross_entropy %[[X]], %[[W]], %[[Y]] {compute = f32, storage = f16} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
// CHECK:         return %[[L]], %[[LSE]]
func.func @fused_f16_mean(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @fused_bf16_bias_none_i32
// CHECK-SAME:    (%[[X:.*]]: tensor<16x128xbf16>, %[[W:.*]]: tensor<512x128xbf16>, %[[Y:.*]]: tensor<16xi32>, %[[B:.*]]: tensor<512xbf16>)
// CHECK:         loss.linear_cross_entropy %[[X]], %[[W]], %[[Y]], %[[B]] {compute = f32, ignore_index = -1 : i64, reduction = #loss<reduction none>, storage = bf16} : tensor<16x128xbf16>, tensor<512x128xbf16>, tensor<16xi32>, tensor<512xbf16> -> tensor<16xf32>, tensor<16xf32>
func.func @fused_bf16_bias_none_i32(%x: tensor<16x128xbf16>, %w: tensor<512x128xbf16>, %y: tensor<16xi32>, %b: tensor<512xbf16>) -> tensor<16xf32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {ignore_index = -1 : i64, reduction = #loss<reduction none>, storage = bf16, compute = f32} : tensor<16x128xbf16>, tensor<512x128xbf16>, tensor<16xi32>, tensor<512xbf16> -> tensor<16xf32>, tensor<16xf32>
  return %l : tensor<16xf32>
}

// CHECK-LABEL: func.func @fused_f32_sum
// CHECK:         loss.linear_cross_entropy {{.*}} {compute = f32, reduction = #loss<reduction sum>, storage = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
func.func @fused_f32_sum(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {reduction = #loss<reduction sum>, storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}
