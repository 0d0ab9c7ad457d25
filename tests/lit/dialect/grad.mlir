// loss.linear_cross_entropy_grad: round trip and verifier diagnostics.
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @round_trip
// CHECK: loss.linear_cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} {compute = f32, storage = f16, strategy = "recompute", workspace_bytes = 4096 : i64}
func.func @round_trip(%x: tensor<4x8xf16>, %w: tensor<10x8xf16>, %y: tensor<4xi32>, %b: tensor<10xf16>, %lse: tensor<4xf32>, %g: tensor<f32>) -> (tensor<4x8xf16>, tensor<10x8xf16>, tensor<10xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32, strategy = "recompute", workspace_bytes = 4096 : i64} : tensor<4x8xf16>, tensor<10x8xf16>, tensor<4xi32>, tensor<4xf32>, tensor<f32>, tensor<10xf16> -> tensor<4x8xf16>, tensor<10x8xf16>, tensor<10xf16>
  return %dx, %dw, %db : tensor<4x8xf16>, tensor<10x8xf16>, tensor<10xf16>
}

// -----

// The gradient reaching lse (a z-loss) is an optional [N] f32 operand.
// CHECK-LABEL: func.func @round_trip_grad_lse
// CHECK: loss.linear_cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} grad_lse %{{.*}} : tensor<4xf32> {compute = f32, storage = f16}
// CHECK-LABEL: func.func @round_trip_grad_lse_no_bias
// CHECK: loss.linear_cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} grad_lse %{{.*}} : tensor<?xf32> {compute = f32, storage = f32}
func.func @round_trip_grad_lse(%x: tensor<4x8xf16>, %w: tensor<10x8xf16>, %y: tensor<4xi32>, %b: tensor<10xf16>, %lse: tensor<4xf32>, %g: tensor<f32>, %a: tensor<4xf32>) -> (tensor<4x8xf16>, tensor<10x8xf16>, tensor<10xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b grad_lse %a : tensor<4xf32> {storage = f16, compute = f32} : tensor<4x8xf16>, tensor<10x8xf16>, tensor<4xi32>, tensor<4xf32>, tensor<f32>, tensor<10xf16> -> tensor<4x8xf16>, tensor<10x8xf16>, tensor<10xf16>
  return %dx, %dw, %db : tensor<4x8xf16>, tensor<10x8xf16>, tensor<10xf16>
}
func.func @round_trip_grad_lse_no_bias(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>, %a: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g grad_lse %a : tensor<?xf32> {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

func.func @grad_lse_length(%x: tensor<4x8xf32>, %w: tensor<10x8xf32>, %y: tensor<4xi64>, %lse: tensor<4xf32>, %g: tensor<f32>, %a: tensor<3xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{grad_lse length differs from row count N: 3 vs 4}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g grad_lse %a : tensor<3xf32> {storage = f32, compute = f32, needs_weight = false} : tensor<4x8xf32>, tensor<10x8xf32>, tensor<4xi64>, tensor<4xf32>, tensor<f32> -> tensor<4x8xf32>
  return %dx : tensor<4x8xf32>
}

// -----

func.func @grad_lse_rank(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>, %a: tensor<f32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{grad_lse ([N] f32) must have rank 1, got rank 0}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g grad_lse %a : tensor<f32> {storage = f32, compute = f32, needs_weight = false} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>
  return %dx : tensor<?x?xf32>
}

// -----

func.func @wrong_result_count(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{'loss.linear_cross_entropy_grad' op expects 2 gradient results for needs_input=1 needs_weight=1, got 1}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>
  return %dx : tensor<?x?xf32>
}

// -----

func.func @none_needs_row_gradients(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{'loss.linear_cross_entropy_grad' op grad_loss of reduction = none ([N]) must have rank 1, got rank 0}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, reduction = #loss<reduction none>, needs_weight = false} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>
  return %dx : tensor<?x?xf32>
}

// -----

func.func @bad_strategy(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{strategy must be auto, chunked, vocab_chunked or recompute, got 'fast'}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, strategy = "fast", needs_weight = false} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>
  return %dx : tensor<?x?xf32>
}

// -----

func.func @nothing_needed(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) {
  // expected-error @+1 {{computes nothing: needs_input and needs_weight are both false}}
  "loss.linear_cross_entropy_grad"(%x, %w, %y, %lse, %g) <{storage = f32, compute = f32, needs_input = false, needs_weight = false, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 1, 0>}> : (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32>) -> ()
  return
}

// -----

func.func @grad_type_mismatch(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{grad_input must be a rank-2 tensor of 'bf16', got 'tensor<?x?xf32>'}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = bf16, compute = f32, needs_weight = false} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>
  return %dx : tensor<?x?xf32>
}

// -----

func.func @lse_length(%x: tensor<4x8xf32>, %w: tensor<10x8xf32>, %y: tensor<4xi64>, %lse: tensor<5xf32>, %g: tensor<f32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{lse length differs from row count N: 5 vs 4}}
  %dx = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, needs_weight = false} : tensor<4x8xf32>, tensor<10x8xf32>, tensor<4xi64>, tensor<5xf32>, tensor<f32> -> tensor<4x8xf32>
  return %dx : tensor<4x8xf32>
}
