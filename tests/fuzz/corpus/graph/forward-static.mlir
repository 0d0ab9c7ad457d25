func.func @lce(%w: tensor<5x4xf32>, %x: tensor<3x4xf32>, %y: tensor<3xi64>) -> (tensor<3xf32>, tensor<f32>) {
  %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<3x4xf32>, tensor<5x4xf32>, tensor<3xi64> -> tensor<f32>, tensor<3xf32>
  return %lse, %loss : tensor<3xf32>, tensor<f32>
}
