// loss-verify-precision: the softmax path must compute in f32 (f64 for f64 data).
// RUN: lossjit-opt %s --loss-verify-precision --split-input-file --verify-diagnostics | FileCheck %s

// Positive: f32 compute behind explicit casts passes unchanged.
// CHECK-LABEL: func.func @explicit_f32_passes
// CHECK:         loss.cast %{{.*}} : tensor<?x?xf16> to tensor<?x?xf32>
// CHECK-NEXT:    loss.log_softmax %{{.*}} : tensor<?x?xf32>
// CHECK:         loss.nll
func.func @explicit_f32_passes(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %lp = loss.log_softmax %c : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @all_f32_passes
// CHECK:         loss.logsumexp
// CHECK:         loss.cross_entropy
func.func @all_f32_passes(%z: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<?xf32>, tensor<f32>) {
  %s = loss.logsumexp %z : tensor<?x?xf32> -> tensor<?xf32>
  %l = loss.cross_entropy %z, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %s, %l : tensor<?xf32>, tensor<f32>
}

// -----

// A 16-bit linear is fine: it is not a transcendental or a reduction.
// CHECK-LABEL: func.func @linear_f16_passes
// CHECK:         loss.linear
func.func @linear_f16_passes(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>) -> tensor<?x?xf16> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  return %z : tensor<?x?xf16>
}

// -----

// f64 data computes in f64: the unfused chain and the fused op pass.
// CHECK-LABEL: func.func @f64_passes
// CHECK:         loss.log_softmax %{{.*}} : tensor<?x?xf64>
// CHECK:         loss.linear_cross_entropy {{.*}}compute = f64
func.func @f64_passes(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>) -> (tensor<f64>, tensor<f64>) {
  %z = loss.linear %x, %w : tensor<?x?xf64>, tensor<?x?xf64> -> tensor<?x?xf64>
  %lp = loss.log_softmax %z : tensor<?x?xf64> -> tensor<?x?xf64>
  %l = loss.nll %lp, %y : tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>
  %f, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f64, compute = f64} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64> -> tensor<f64>, tensor<?xf64>
  return %l, %f : tensor<f64>, tensor<f64>
}

// -----

// CHECK-LABEL: func.func @fused_f32_compute_passes
// CHECK:         loss.linear_cross_entropy {{.*}}compute = f32
func.func @fused_f32_compute_passes(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

func.func @log_softmax_f16_rejected(%z: tensor<?x?xf16>) -> tensor<?x?xf16> {
  // expected-error @+1 {{'loss.log_softmax' op computes in 'f16'; the softmax path must compute in f32 (f64 for f64 data; run loss-make-precision-explicit first)}}
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  return %lp : tensor<?x?xf16>
}

// -----

func.func @log_softmax_bf16_rejected(%z: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  // expected-error @+1 {{'loss.log_softmax' op computes in 'bf16'; the softmax path must compute in f32}}
  %lp = loss.log_softmax %z : tensor<4x8xbf16> -> tensor<4x8xbf16>
  return %lp : tensor<4x8xbf16>
}

// -----

func.func @logsumexp_f16_rejected(%z: tensor<?x?xf16>) -> tensor<?xf16> {
  // expected-error @+1 {{'loss.logsumexp' op computes in 'f16'; the softmax path must compute in f32}}
  %s = loss.logsumexp %z : tensor<?x?xf16> -> tensor<?xf16>
  return %s : tensor<?xf16>
}

// -----

func.func @nll_f16_rejected(%lp: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{'loss.nll' op computes in 'f16'; the softmax path must compute in f32}}
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @cross_entropy_bf16_rejected(%z: tensor<?x?xbf16>, %y: tensor<?xi32>) -> tensor<f32> {
  // expected-error @+1 {{'loss.cross_entropy' op computes in 'bf16'; the softmax path must compute in f32}}
  %l = loss.cross_entropy %z, %y : tensor<?x?xbf16>, tensor<?xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Every offending op is reported, not only the first.
func.func @chain_f16_rejected_twice(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  // expected-error @+1 {{'loss.log_softmax' op computes in 'f16'}}
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  // expected-error @+1 {{'loss.nll' op computes in 'f16'}}
  %l = loss.nll %lp, %y : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @scale_f16_rejected(%z: tensor<?x?xf16>) -> tensor<?x?xf16> {
  // expected-error @+1 {{'loss.scale' op computes in 'f16'; the softmax path must compute in f32 (f64 for f64 data; run loss-make-precision-explicit first)}}
  %s = loss.scale %z {factor = 0.5} : tensor<?x?xf16> -> tensor<?x?xf16>
  return %s : tensor<?x?xf16>
}

// -----

func.func @softcap_bf16_rejected(%z: tensor<?x?xbf16>) -> tensor<?x?xbf16> {
  // expected-error @+1 {{'loss.softcap' op computes in 'bf16'; the softmax path must compute in f32}}
  %c = loss.softcap %z {cap = 30.0} : tensor<?x?xbf16> -> tensor<?x?xbf16>
  return %c : tensor<?x?xbf16>
}

// -----

// f32 logit transforms behind an explicit cast pass.
// CHECK-LABEL: func.func @logit_transforms_f32_pass
// CHECK:         loss.scale
// CHECK:         loss.softcap
func.func @logit_transforms_f32_pass(%z: tensor<?x?xf16>) -> tensor<?x?xf32> {
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %s = loss.scale %c {factor = 0.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  %t = loss.softcap %s {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  return %t : tensor<?x?xf32>
}
