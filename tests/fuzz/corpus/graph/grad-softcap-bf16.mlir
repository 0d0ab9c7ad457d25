func.func @capped_grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32, logit_scale = 2.0, softcap = 15.0} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}
