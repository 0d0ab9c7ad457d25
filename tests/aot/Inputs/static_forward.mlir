// A forward whose graph fixes N = 3 and V = 5 (D dynamic): the C API must
// refuse other dims (AotCApiTest.DeclaredDimsAreChecked).
func.func @lce(%x: tensor<3x?xf16>, %w: tensor<5x?xf16>, %y: tensor<3xi64>) -> tensor<f32> {
  %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32}
      : tensor<3x?xf16>, tensor<5x?xf16>, tensor<3xi64> -> tensor<f32>, tensor<3xf32>
  return %loss : tensor<f32>
}
