// The vocabulary reductions print and parse back (round trip), with every
// optional operand; the verifier's rules are in vocab-reduce-invalid.mlir.
// RUN: lossjit-opt %s | lossjit-opt | FileCheck %s

// CHECK-LABEL: func.func @cross_entropy_statistics
// CHECK: %{{.*}}:2 = loss.vocab_reduce %arg0, %arg1 labels %arg2 : tensor<?xi64> {compute = f32, storage = f16} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32>, tensor<?xf32> {
// CHECK-NEXT: ^bb0(%[[Z:.*]]: tensor<?x?xf32>):
// CHECK-NEXT: %[[L:.*]] = loss.stat lse %[[Z]] : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT: %[[Y:.*]] = loss.stat label_logit %[[Z]] : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT: loss.yield %[[L]], %[[Y]] : tensor<?xf32>, tensor<?xf32>
func.func @cross_entropy_statistics(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>)
    -> (tensor<?xf32>, tensor<?xf32>) {
  %r:2 = loss.vocab_reduce %x, %w labels %y : tensor<?xi64> {storage = f16, compute = f32}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1 : tensor<?xf32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @smoothing_with_class_weights
// CHECK: loss.vocab_reduce %arg0, %arg1 bias %arg3 : tensor<?xbf16> labels %arg2 : tensor<?xi32> class_weights %arg4 : tensor<?xf32> {compute = f32, ignore_index = 0 : i64, logit_scale = 5.000000e-01 : f64, softcap = 3.000000e+01 : f64, storage = bf16}
// CHECK: loss.stat logit_sum
func.func @smoothing_with_class_weights(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>,
    %y: tensor<?xi32>, %b: tensor<?xbf16>, %c: tensor<?xf32>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:3 = loss.vocab_reduce %x, %w bias %b : tensor<?xbf16> labels %y : tensor<?xi32>
      class_weights %c : tensor<?xf32>
      {storage = bf16, compute = f32, ignore_index = 0, logit_scale = 0.5, softcap = 30.0}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat label_logit %z : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @entropy_without_labels
// CHECK: loss.vocab_reduce %arg0, %arg1 {compute = f32, storage = f32} : tensor<8x?xf32>, tensor<?x?xf32> -> tensor<8xf32>
// CHECK: loss.stat entropy
func.func @entropy_without_labels(%x: tensor<8x?xf32>, %w: tensor<?x?xf32>) -> tensor<8xf32> {
  %h = loss.vocab_reduce %x, %w {storage = f32, compute = f32}
      : tensor<8x?xf32>, tensor<?x?xf32> -> tensor<8xf32> {
  ^bb0(%z: tensor<8x?xf32>):
    %0 = loss.stat entropy %z : tensor<8x?xf32> -> tensor<8xf32>
    loss.yield %0 : tensor<8xf32>
  }
  return %h : tensor<8xf32>
}

// CHECK-LABEL: func.func @derived_backward
// CHECK: loss.vocab_reduce_grad %arg0, %arg1 saved(%arg2, %arg3 : tensor<?xf32>, tensor<?xf32>) adjoints(%arg4, %arg5 : tensor<?xf32>, tensor<?xf32>) {compute = f32, needs_input = false, storage = f16, strategy = "recompute"} : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16> {
// CHECK: loss.stat entropy
func.func @derived_backward(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>,
    %lse: tensor<?xf32>, %h: tensor<?xf32>, %glse: tensor<?xf32>, %gh: tensor<?xf32>)
    -> tensor<?x?xf16> {
  %gw = loss.vocab_reduce_grad %x, %w
      saved(%lse, %h : tensor<?xf32>, tensor<?xf32>) adjoints(%glse, %gh : tensor<?xf32>, tensor<?xf32>)
      {storage = f16, compute = f32, needs_input = false, strategy = "recompute"}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat entropy %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  return %gw : tensor<?x?xf16>
}

// CHECK-LABEL: func.func @probability_targets
// CHECK: loss.vocab_reduce %arg0, %arg1 class_weights %arg3 : tensor<?xf32> targets %arg2 : tensor<?x?xbf16> {compute = f32, storage = bf16}
// CHECK: loss.stat target_logit_sum
func.func @probability_targets(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %t: tensor<?x?xbf16>,
    %c: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
  %r:2 = loss.vocab_reduce %x, %w class_weights %c : tensor<?xf32> targets %t : tensor<?x?xbf16>
      {storage = bf16, compute = f32}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat target_logit_sum %z : tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1 : tensor<?xf32>, tensor<?xf32>
}

// The teacher stream: its own hidden size D' (here 48 against the student's
// ?), its bias, a teacher_scale; the region takes the teacher's logits as a
// second argument and the cross kinds read both streams in their order.
// CHECK-LABEL: func.func @teacher_statistics
// CHECK: loss.vocab_reduce %arg0, %arg1 teacher(%arg2, %arg3 bias %arg4 : tensor<?x48xf16>, tensor<?x48xf16>, tensor<?xf16>) {compute = f32, storage = f16, teacher_scale = 5.000000e-01 : f64}
// CHECK-NEXT: ^bb0(%[[Z:.*]]: tensor<?x?xf32>, %[[U:.*]]: tensor<?x?xf32>):
// CHECK: loss.stat teacher_lse %[[U]]
// CHECK: loss.stat cross_entropy %[[U]], %[[Z]]
// CHECK: loss.stat reverse_cross_entropy %[[Z]], %[[U]]
func.func @teacher_statistics(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %tx: tensor<?x48xf16>,
    %tw: tensor<?x48xf16>, %tb: tensor<?xf16>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:4 = loss.vocab_reduce %x, %w teacher(%tx, %tw bias %tb : tensor<?x48xf16>, tensor<?x48xf16>, tensor<?xf16>)
      {storage = f16, compute = f32, teacher_scale = 0.5}
      : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat cross_entropy %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat reverse_cross_entropy %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// The generalized JSD's two dependent sums read both streams (z, u) and
// the op's jsd_beta; the derived backward takes the saved mixture_kl.
// CHECK-LABEL: func.func @jsd_statistics
// CHECK: loss.vocab_reduce %arg0, %arg1 teacher(%arg2, %arg3 : tensor<?x?xbf16>, tensor<?x?xbf16>) {compute = f32, jsd_beta = 2.500000e-01 : f64, storage = bf16}
// CHECK-NEXT: ^bb0(%[[Z:.*]]: tensor<?x?xf32>, %[[U:.*]]: tensor<?x?xf32>):
// CHECK: loss.stat mixture_kl %[[Z]], %[[U]]
// CHECK: loss.stat jsd %[[Z]], %[[U]]
func.func @jsd_statistics(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %tx: tensor<?x?xbf16>,
    %tw: tensor<?x?xbf16>) -> (tensor<?xf32>, tensor<?xf32>) {
  %r:2 = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xbf16>, tensor<?x?xbf16>)
      {storage = bf16, compute = f32, jsd_beta = 0.25}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat mixture_kl %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1 : tensor<?xf32>, tensor<?xf32>
}

// CHECK-LABEL: func.func @jsd_gradient
// CHECK: loss.vocab_reduce_grad %arg0, %arg1 teacher(%arg2, %arg3 : tensor<?x?xf32>, tensor<?x?xf32>) saved(
// CHECK-SAME: jsd_beta = 0.69999999999999996 : f64
// CHECK: loss.stat mixture_p2 %{{.*}}, %{{.*}} : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
func.func @jsd_gradient(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %tx: tensor<?x?xf32>,
    %tw: tensor<?x?xf32>, %s0: tensor<?xf32>, %s1: tensor<?xf32>, %s2: tensor<?xf32>,
    %s3: tensor<?xf32>, %s4: tensor<?xf32>, %g0: tensor<?xf32>, %g1: tensor<?xf32>,
    %g2: tensor<?xf32>, %g3: tensor<?xf32>, %g4: tensor<?xf32>) -> tensor<?x?xf32> {
  %gx = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf32>, tensor<?x?xf32>)
      saved(%s0, %s1, %s2, %s3, %s4 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2, %g3, %g4 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      {storage = f32, compute = f32, jsd_beta = 0.7, needs_weight = false}
      : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat mixture_kl %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat mixture_p2 %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %4 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3, %4 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %gx : tensor<?x?xf32>
}
