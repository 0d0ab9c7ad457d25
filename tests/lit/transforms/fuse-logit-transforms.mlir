// loss-fuse-linear-cross-entropy with logit transforms:
// nll(log_softmax([cast]([softcap]([scale]([cast](linear(x, w[, b])))))))
// becomes one loss.linear_cross_entropy {logit_scale, softcap}; the other
// orders stay, with a remark saying why.
// RUN: lossjit-opt %s --loss-fuse-linear-cross-entropy --split-input-file --verify-diagnostics | FileCheck %s
// The usual order (precision first, then fusion) fuses the same chains.
// RUN: lossjit-opt %s --loss-make-precision-explicit --loss-fuse-linear-cross-entropy="remarks=false" --split-input-file 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=AFTERPREC

// Both transforms, in the order users write softcap(z * s), behind a cast.
// CHECK-LABEL: func.func @scale_then_softcap
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf16>, %[[W:.*]]: tensor<?x?xf16>, %[[Y:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[L:.*]], %{{.*}} = loss.linear_cross_entropy %[[X]], %[[W]], %[[Y]] {compute = f32, logit_scale = 5.000000e-01 : f64, softcap = 3.000000e+01 : f64, storage = f16} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
// CHECK-NEXT:    return %[[L]] : tensor<f32>
// AFTERPREC-LABEL: func.func @scale_then_softcap
// AFTERPREC-NEXT:    loss.linear_cross_entropy {{.*}} {compute = f32, logit_scale = 5.000000e-01 : f64, softcap = 3.000000e+01 : f64, storage = f16}
// AFTERPREC-NEXT:    return
func.func @scale_then_softcap(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %s = loss.scale %c {factor = 0.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  %t = loss.softcap %s {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.cross_entropy %t, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Softcap alone, 16-bit all the way (casts may sit anywhere), bias and options kept.
// CHECK-LABEL: func.func @softcap_alone_bf16_bias
// CHECK-NEXT:    loss.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, ignore_index = 3 : i64, reduction = #loss<reduction none>, softcap = 1.500000e+01 : f64, storage = bf16}
// CHECK-NEXT:    return
// CHECK-NOT:     loss.softcap
// AFTERPREC-LABEL: func.func @softcap_alone_bf16_bias
// AFTERPREC-NEXT:    loss.linear_cross_entropy {{.*}} softcap = 1.500000e+01 : f64, storage = bf16}
// AFTERPREC-NEXT:    return
func.func @softcap_alone_bf16_bias(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %b: tensor<?xbf16>, %y: tensor<?xi32>) -> tensor<?xf32> {
  %z = loss.linear %x, %w, %b : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16> -> tensor<?x?xbf16>
  %t = loss.softcap %z {cap = 15.0} : tensor<?x?xbf16> -> tensor<?x?xbf16>
  %c = loss.cast %t : tensor<?x?xbf16> to tensor<?x?xf32>
  %lp = loss.log_softmax %c : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y {ignore_index = 3 : i64, reduction = #loss<reduction none>} : tensor<?x?xf32>, tensor<?xi32> -> tensor<?xf32>
  return %l : tensor<?xf32>
}

// -----

// Scale alone; consecutive scales multiply (a temperature after a muP factor).
// CHECK-LABEL: func.func @scales_multiply
// CHECK-NEXT:    loss.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, logit_scale = -1.250000e+00 : f64, reduction = #loss<reduction sum>, storage = f32}
// CHECK-NEXT:    return
// AFTERPREC-LABEL: func.func @scales_multiply
// AFTERPREC-NEXT:    loss.linear_cross_entropy {{.*}} logit_scale = -1.250000e+00 : f64
func.func @scales_multiply(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %s1 = loss.scale %z {factor = 0.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  %s2 = loss.scale %s1 {factor = -2.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.cross_entropy %s2, %y {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A scale of exactly 1 leaves the default (elided) attribute.
// CHECK-LABEL: func.func @unit_scale
// CHECK-NEXT:    loss.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, storage = f16} :
func.func @unit_scale(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %s = loss.scale %z {factor = 1.0} : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.cross_entropy %s, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: a scale after the softcap (scale · softcap(z)) is another
// function; the fused op only scales before capping.
// CHECK-LABEL: func.func @scale_after_softcap
// CHECK:         loss.softcap
// CHECK-NEXT:    loss.scale
// CHECK:         loss.nll
// CHECK-NOT:     loss.linear_cross_entropy
func.func @scale_after_softcap(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %t = loss.softcap %z {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %s = loss.scale %t {factor = 0.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: a loss.scale follows the loss.softcap; the fused op scales the logits before capping them (softcap(z * s)), so the scale must come first}}
  %l = loss.cross_entropy %s, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: two soft-caps.
// CHECK-LABEL: func.func @two_softcaps
// CHECK-COUNT-2: loss.softcap
// CHECK-NOT:     loss.linear_cross_entropy
func.func @two_softcaps(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %t1 = loss.softcap %z {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %t2 = loss.softcap %t1 {cap = 10.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: the chain has two loss.softcap ops; the fused op applies one}}
  %l = loss.cross_entropy %t2, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Negative: the capped logits are returned too, so [N,V] exists anyway.
// CHECK-LABEL: func.func @softcap_has_another_user
// CHECK:         %[[T:.*]] = loss.softcap
// CHECK:         return %{{.*}}, %[[T]]
// CHECK-NOT:     loss.linear_cross_entropy
func.func @softcap_has_another_user(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?x?xf32>) {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %t = loss.softcap %z {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %lp = loss.log_softmax %t : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: the loss.softcap result has another user, so the [N,V] tensor must be materialized}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l, %t : tensor<f32>, tensor<?x?xf32>
}

// -----

// Negative: the scaled logits feed a logsumexp too.
// CHECK-LABEL: func.func @scale_has_another_user
// CHECK:         loss.scale
// CHECK:         loss.nll
// CHECK-NOT:     loss.linear_cross_entropy
func.func @scale_has_another_user(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %s = loss.scale %z {factor = 2.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %lp = loss.log_softmax %s : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: the loss.scale result has another user, so the [N,V] tensor must be materialized}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  %e = loss.logsumexp %s : tensor<?x?xf32> -> tensor<?xf32>
  return %l, %e : tensor<f32>, tensor<?xf32>
}

// -----

// Negative: a softcap of logits that do not come from loss.linear.
// CHECK-LABEL: func.func @softcap_of_argument
// CHECK:         loss.softcap
// CHECK-NOT:     loss.linear_cross_entropy
func.func @softcap_of_argument(%z: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %t = loss.softcap %z {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  // expected-remark @+1 {{not fused into loss.linear_cross_entropy: logits are not produced by loss.linear}}
  %l = loss.cross_entropy %t, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
