func.func @weights_only(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?xf16>) {
  %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32, needs_input = false} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?xf16>
  return %dw, %db : tensor<?x?xf16>, tensor<?xf16>
}
