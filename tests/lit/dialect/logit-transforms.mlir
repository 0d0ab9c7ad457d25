// loss.scale and loss.softcap, and the logit_scale / softcap attributes of
// the fused ops: round trip (custom and generic form) and verifier errors.
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics | FileCheck %s
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics --mlir-print-op-generic \
// RUN:   | lossjit-opt --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @transforms
// CHECK-SAME:    (%[[Z:.*]]: tensor<?x?xf32>, %[[H:.*]]: tensor<4x10xbf16>)
// CHECK:         %[[S:.*]] = loss.scale %[[Z]] {factor = 5.000000e-01 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK:         %[[C:.*]] = loss.softcap %[[S]] {cap = 3.000000e+01 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK:         loss.scale %[[H]] {factor = -2.500000e+00 : f64} : tensor<4x10xbf16> -> tensor<4x10xbf16>
// CHECK:         loss.softcap %[[H]] {cap = 1.000000e-03 : f64} : tensor<4x10xbf16> -> tensor<4x10xbf16>
// CHECK:         return %[[C]]
func.func @transforms(%z: tensor<?x?xf32>, %h: tensor<4x10xbf16>) -> tensor<?x?xf32> {
  %s = loss.scale %z {factor = 0.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  %c = loss.softcap %s {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %a = loss.scale %h {factor = -2.5} : tensor<4x10xbf16> -> tensor<4x10xbf16>
  %b = loss.softcap %h {cap = 1.0e-3} : tensor<4x10xbf16> -> tensor<4x10xbf16>
  return %c : tensor<?x?xf32>
}

// -----

// Defaults (logit_scale = 1.0, softcap = 0.0) are elided when printed.
// CHECK-LABEL: func.func @fused_attributes
// CHECK:         loss.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, storage = f16} : tensor<?x?xf16>
// CHECK:         loss.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}} {compute = f32, logit_scale = 1.250000e+00 : f64, softcap = 1.500000e+01 : f64, storage = f16}
// CHECK:         loss.linear_cross_entropy_grad {{.*}} {compute = f32, logit_scale = -5.000000e-01 : f64, softcap = 3.000000e+01 : f64, storage = f16}
func.func @fused_attributes(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %g: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l0, %lse0 = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, logit_scale = 1.0, softcap = 0.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  %l1, %lse1 = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, logit_scale = 1.25, softcap = 15.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse1, %g {storage = f16, compute = f32, logit_scale = -0.5, softcap = 30.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %l0, %l1, %dx, %dw : tensor<f32>, tensor<f32>, tensor<?x?xf16>, tensor<?x?xf16>
}

// -----

func.func @scale_zero(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.scale' op factor must be finite and nonzero, got 0.0}}
  %s = loss.scale %z {factor = 0.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @scale_inf(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.scale' op factor must be finite and nonzero, got inf}}
  %s = loss.scale %z {factor = 0x7FF0000000000000 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @scale_changes_type(%z: tensor<?x?xf16>) {
  // expected-error @+1 {{'loss.scale' op is element-wise: result type must equal input type 'tensor<?x?xf16>', got 'tensor<?x?xf32>'}}
  %s = loss.scale %z {factor = 2.0} : tensor<?x?xf16> -> tensor<?x?xf32>
  return
}

// -----

func.func @scale_needs_factor(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.scale' op requires attribute 'factor'}}
  %s = loss.scale %z : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @softcap_negative(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.softcap' op cap must be positive and finite, got -30.0}}
  %c = loss.softcap %z {cap = -30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @softcap_zero(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.softcap' op cap must be positive and finite, got 0.0}}
  %c = loss.softcap %z {cap = 0.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @softcap_nan(%z: tensor<?x?xf32>) {
  // expected-error @+1 {{'loss.softcap' op cap must be positive and finite, got nan}}
  %c = loss.softcap %z {cap = 0x7FF8000000000000 : f64} : tensor<?x?xf32> -> tensor<?x?xf32>
  return
}

// -----

func.func @softcap_changes_shape(%z: tensor<4x10xf32>) {
  // expected-error @+1 {{'loss.softcap' op is element-wise: result type must equal input type 'tensor<4x10xf32>', got 'tensor<4x?xf32>'}}
  %c = loss.softcap %z {cap = 30.0} : tensor<4x10xf32> -> tensor<4x?xf32>
  return
}

// -----

func.func @fused_zero_scale(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op logit_scale must be finite and nonzero, got 0.0}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, logit_scale = 0.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @fused_negative_softcap(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) {
  // expected-error @+1 {{'loss.linear_cross_entropy' op softcap must be 0 (none) or positive and finite, got -1.5}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, softcap = -1.5} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return
}

// -----

func.func @grad_inf_softcap(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) {
  // expected-error @+1 {{'loss.linear_cross_entropy_grad' op softcap must be 0 (none) or positive and finite, got inf}}
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, softcap = 0x7FF0000000000000 : f64} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return
}

// -----

func.func @grad_infinite_scale(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) {
  // expected-error @+1 {{'loss.linear_cross_entropy_grad' op logit_scale must be finite and nonzero, got -inf}}
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, logit_scale = 0xFFF0000000000000 : f64} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return
}
