// Errors found while parsing (before any verifier runs).
// RUN: not lossjit-opt %s -split-input-file 2>&1 | FileCheck %s

// The reduction attribute lists the accepted values.
// CHECK-LABEL: invalid-parse.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected {{.*}}Reduction to be one of: none, mean, sum
// CHECK-NEXT:    {{.*}}#loss<reduction avg>
func.func @reduction_avg(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) {
  %l = loss.nll %lp, %y {reduction = #loss<reduction avg>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return
}

// -----

// CHECK-LABEL: error: expected {{.*}}Reduction to be one of: none, mean, sum
// CHECK-NEXT:    {{.*}}#loss<reduction Mean>
func.func @reduction_case_sensitive(%z: tensor<?x?xf32>, %y: tensor<?xi64>) {
  %l = loss.cross_entropy %z, %y {reduction = #loss<reduction Mean>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return
}

// -----

// A plain integer is not a reduction.
// CHECK-LABEL: error: {{.*}}'loss.nll' op attribute 'reduction' failed to satisfy constraint
func.func @reduction_integer(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) {
  %l = loss.nll %lp, %y {reduction = 1 : i32} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return
}

// -----

// CHECK-LABEL: error: {{.*}}'loss.nll' op attribute 'ignore_index' failed to satisfy constraint: 64-bit signless integer attribute
func.func @ignore_index_i32(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) {
  %l = loss.nll %lp, %y {ignore_index = -100 : i32} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return
}

// -----

// Tensors only: the loss graph has value semantics.
// CHECK-LABEL: error: 'loss.log_softmax' op operand #0 must be ranked tensor of
func.func @memref_operand(%z: memref<?x?xf32>) {
  %a = "loss.log_softmax"(%z) : (memref<?x?xf32>) -> memref<?x?xf32>
  return
}

// -----

// CHECK-LABEL: error: 'loss.log_softmax' op operand #0 must be ranked tensor of
func.func @unranked_operand(%z: tensor<*xf32>) {
  %a = "loss.log_softmax"(%z) : (tensor<*xf32>) -> tensor<*xf32>
  return
}
