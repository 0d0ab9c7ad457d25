// loss-make-precision-explicit: every softmax-path op computes in f32 through
// explicit loss.cast ops; tensors keep their storage type elsewhere.
// RUN: lossjit-opt %s --loss-make-precision-explicit --split-input-file | FileCheck %s
// The result passes the precision verifier, and a second run changes nothing.
// RUN: lossjit-opt %s --loss-make-precision-explicit --loss-verify-precision --split-input-file > /dev/null
// RUN: lossjit-opt %s --loss-make-precision-explicit --split-input-file > %t.once.mlir
// RUN: lossjit-opt %s --loss-make-precision-explicit --loss-make-precision-explicit --split-input-file > %t.twice.mlir
// RUN: diff %t.once.mlir %t.twice.mlir

// The linear stays in f16; log_softmax reads an f32 cast of the logits and
// its f32 result is narrowed back for its f16 users (like PyTorch's f16
// log_softmax output); the nll then widens its operand again.
// CHECK-LABEL: func.func @chain_f16
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf16>, %[[W:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[Z:.*]] = loss.linear %[[X]], %[[W]] : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
// CHECK-NEXT:    %[[Z32:.*]] = loss.cast %[[Z]] : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[LP32:.*]] = loss.log_softmax %[[Z32]] : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    %[[LP16:.*]] = loss.cast %[[LP32]] : tensor<?x?xf32> to tensor<?x?xf16>
// CHECK-NEXT:    %[[LPW:.*]] = loss.cast %[[LP16]] : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[L:.*]] = loss.nll %[[LPW]], %[[Y]] : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
// CHECK-NEXT:    return %[[L]] : tensor<f32>
func.func @chain_f16(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @chain_bf16
// CHECK-NEXT:    %[[Z:.*]] = loss.linear {{.*}} -> tensor<4x32xbf16>
// CHECK-NEXT:    %[[Z32:.*]] = loss.cast %[[Z]] : tensor<4x32xbf16> to tensor<4x32xf32>
// CHECK-NEXT:    %[[LP32:.*]] = loss.log_softmax %[[Z32]] : tensor<4x32xf32> -> tensor<4x32xf32>
// CHECK-NEXT:    %[[LP16:.*]] = loss.cast %[[LP32]] : tensor<4x32xf32> to tensor<4x32xbf16>
// CHECK-NEXT:    %[[LPW:.*]] = loss.cast %[[LP16]] : tensor<4x32xbf16> to tensor<4x32xf32>
// CHECK-NEXT:    loss.nll %[[LPW]], %{{.*}} {reduction = #loss<reduction sum>} : tensor<4x32xf32>, tensor<4xi32> -> tensor<f32>
func.func @chain_bf16(%x: tensor<4x16xbf16>, %w: tensor<32x16xbf16>, %y: tensor<4xi32>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<4x16xbf16>, tensor<32x16xbf16> -> tensor<4x32xbf16>
  %lp = loss.log_softmax %z : tensor<4x32xbf16> -> tensor<4x32xbf16>
  %l = loss.nll %lp, %y {reduction = #loss<reduction sum>} : tensor<4x32xbf16>, tensor<4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: an all-f32 graph needs no cast.
// CHECK-LABEL: func.func @chain_f32_noop
// CHECK-NEXT:    loss.linear {{.*}} -> tensor<?x?xf32>
// CHECK-NEXT:    loss.log_softmax %{{.*}} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    loss.nll %{{.*}}, %{{.*}} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
// CHECK-NEXT:    return
// CHECK-NOT:     loss.cast
func.func @chain_f32_noop(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %lp = loss.log_softmax %z : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: f64 data computes in f64; nothing is narrowed to f32.
// CHECK-LABEL: func.func @chain_f64_noop
// CHECK-NEXT:    loss.linear {{.*}} -> tensor<?x?xf64>
// CHECK-NEXT:    loss.log_softmax %{{.*}} : tensor<?x?xf64> -> tensor<?x?xf64>
// CHECK-NEXT:    loss.nll %{{.*}}, %{{.*}} : tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>
// CHECK-NEXT:    return
// CHECK-NOT:     loss.cast
func.func @chain_f64_noop(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>) -> tensor<f64> {
  %z = loss.linear %x, %w : tensor<?x?xf64>, tensor<?x?xf64> -> tensor<?x?xf64>
  %lp = loss.log_softmax %z : tensor<?x?xf64> -> tensor<?x?xf64>
  %l = loss.nll %lp, %y : tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>
  return %l : tensor<f64>
}

// -----

// Negative: casts the user already wrote are kept, none are added.
// CHECK-LABEL: func.func @already_explicit
// CHECK-NEXT:    loss.linear
// CHECK-NEXT:    loss.cast %{{.*}} : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    loss.log_softmax %{{.*}} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    loss.nll %{{.*}}, %{{.*}} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
// CHECK-NEXT:    return
func.func @already_explicit(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %lp = loss.log_softmax %c : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: a linear alone is not on the softmax path (its accumulation
// precision is decided when it is lowered).
// CHECK-LABEL: func.func @linear_alone
// CHECK-NEXT:    loss.linear {{.*}} -> tensor<?x?xf16>
// CHECK-NEXT:    return
func.func @linear_alone(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) -> tensor<?x?xf16> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  return %z : tensor<?x?xf16>
}

// -----

// CHECK-LABEL: func.func @logsumexp_f16
// CHECK-SAME:    (%[[Z:.*]]: tensor<4x10xf16>)
// CHECK-NEXT:    %[[W:.*]] = loss.cast %[[Z]] : tensor<4x10xf16> to tensor<4x10xf32>
// CHECK-NEXT:    %[[S:.*]] = loss.logsumexp %[[W]] : tensor<4x10xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = loss.cast %[[S]] : tensor<4xf32> to tensor<4xf16>
// CHECK-NEXT:    return %[[N]] : tensor<4xf16>
func.func @logsumexp_f16(%z: tensor<4x10xf16>) -> tensor<4xf16> {
  %s = loss.logsumexp %z : tensor<4x10xf16> -> tensor<4xf16>
  return %s : tensor<4xf16>
}

// -----

// CHECK-LABEL: func.func @logsumexp_bf16_dynamic
// CHECK-NEXT:    %[[W:.*]] = loss.cast %{{.*}} : tensor<?x?xbf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[S:.*]] = loss.logsumexp %[[W]] : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT:    loss.cast %[[S]] : tensor<?xf32> to tensor<?xbf16>
func.func @logsumexp_bf16_dynamic(%z: tensor<?x?xbf16>) -> tensor<?xbf16> {
  %s = loss.logsumexp %z : tensor<?x?xbf16> -> tensor<?xbf16>
  return %s : tensor<?xbf16>
}

// -----

// Negative: f32 logsumexp is left alone.
// CHECK-LABEL: func.func @logsumexp_f32_noop
// CHECK-NEXT:    loss.logsumexp %{{.*}} : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT:    return
func.func @logsumexp_f32_noop(%z: tensor<?x?xf32>) -> tensor<?xf32> {
  %s = loss.logsumexp %z : tensor<?x?xf32> -> tensor<?xf32>
  return %s : tensor<?xf32>
}

// -----

// nll directly on f16 scores: only its operand is widened (its result is f32).
// CHECK-LABEL: func.func @nll_on_f16
// CHECK-SAME:    (%[[LP:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi32>)
// CHECK-NEXT:    %[[W:.*]] = loss.cast %[[LP]] : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[L:.*]] = loss.nll %[[W]], %[[Y]] {reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?xi32> -> tensor<?xf32>
// CHECK-NEXT:    return %[[L]]
func.func @nll_on_f16(%lp: tensor<?x?xf16>, %y: tensor<?xi32>) -> tensor<?xf32> {
  %l = loss.nll %lp, %y {reduction = #loss<reduction none>} : tensor<?x?xf16>, tensor<?xi32> -> tensor<?xf32>
  return %l : tensor<?xf32>
}

// -----

// cross_entropy (not expanded by this pass) gets its logits widened.
// CHECK-LABEL: func.func @cross_entropy_f16
// CHECK-SAME:    (%[[Z:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[W:.*]] = loss.cast %[[Z]] : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[L:.*]] = loss.cross_entropy %[[W]], %[[Y]] {ignore_index = 0 : i64} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
// CHECK-NEXT:    return %[[L]]
func.func @cross_entropy_f16(%z: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l = loss.cross_entropy %z, %y {ignore_index = 0 : i64} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Every user of a narrowed log_softmax sees the storage type it had before.
// CHECK-LABEL: func.func @log_softmax_two_users
// CHECK:         %[[LP32:.*]] = loss.log_softmax %{{.*}} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    %[[LP16:.*]] = loss.cast %[[LP32]] : tensor<?x?xf32> to tensor<?x?xf16>
// CHECK:         loss.nll
// CHECK:         return %{{.*}}, %[[LP16]] : tensor<f32>, tensor<?x?xf16>
func.func @log_softmax_two_users(%z: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf16>) {
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l, %lp : tensor<f32>, tensor<?x?xf16>
}

// -----

// Negative: the fused op carries compute = f32 itself; nothing is inserted.
// CHECK-LABEL: func.func @fused_untouched
// CHECK-NEXT:    loss.linear_cross_entropy {{.*}} {compute = f32, storage = f16}
// CHECK-NEXT:    return
// CHECK-NOT:     loss.cast
func.func @fused_untouched(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// loss.scale and loss.softcap are softmax-path compute: a 16-bit operand is
// widened to f32 like log_softmax's, attributes kept, and a 16-bit result
// type restored by an explicit narrowing cast.
// CHECK-LABEL: func.func @logit_transforms_f16
// CHECK-SAME:    (%[[Z:.*]]: tensor<?x?xf16>)
// CHECK-NEXT:    %[[Z32:.*]] = loss.cast %[[Z]] : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[S32:.*]] = loss.scale %[[Z32]] {factor = 5.000000e-01 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    %[[S16:.*]] = loss.cast %[[S32]] : tensor<?x?xf32> to tensor<?x?xf16>
// CHECK-NEXT:    %[[S:.*]] = loss.cast %[[S16]] : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    %[[C32:.*]] = loss.softcap %[[S]] {cap = 3.000000e+01 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    %[[C16:.*]] = loss.cast %[[C32]] : tensor<?x?xf32> to tensor<?x?xf16>
// CHECK-NEXT:    return %[[C16]] : tensor<?x?xf16>
func.func @logit_transforms_f16(%z: tensor<?x?xf16>) -> tensor<?x?xf16> {
  %s = loss.scale %z {factor = 0.5} : tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.softcap %s {cap = 30.0} : tensor<?x?xf16> -> tensor<?x?xf16>
  return %c : tensor<?x?xf16>
}

// -----

// bf16 too; f32 transforms are left alone.
// CHECK-LABEL: func.func @logit_transforms_bf16_and_f32
// CHECK-NEXT:    %[[W:.*]] = loss.cast %{{.*}} : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT:    %[[C:.*]] = loss.softcap %[[W]] {cap = 5.000000e+00 : f64} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    loss.cast %[[C]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK-NEXT:    loss.scale %{{.*}} {factor = 2.000000e+00 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    return
func.func @logit_transforms_bf16_and_f32(%h: tensor<4x8xbf16>, %z: tensor<?x?xf32>) -> (tensor<4x8xbf16>, tensor<?x?xf32>) {
  %c = loss.softcap %h {cap = 5.0} : tensor<4x8xbf16> -> tensor<4x8xbf16>
  %s = loss.scale %z {factor = 2.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  return %c, %s : tensor<4x8xbf16>, tensor<?x?xf32>
}
