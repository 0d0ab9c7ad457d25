func.func @chunked_f32(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, workspace_bytes = 1048576 : i64} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dw, %dx : tensor<?x?xf32>, tensor<?x?xf32>
}
