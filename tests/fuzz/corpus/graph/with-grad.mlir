func.func @fused(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %l, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = bf16, compute = f32, workspace_bytes = 65536 : i64} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xbf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %l, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}
