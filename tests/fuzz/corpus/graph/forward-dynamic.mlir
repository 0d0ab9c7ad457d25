func.func @lce(%w: tensor<?x?xf32>, %x: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<?xf32>, tensor<f32>) {
  %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %lse, %loss : tensor<?xf32>, tensor<f32>
}
