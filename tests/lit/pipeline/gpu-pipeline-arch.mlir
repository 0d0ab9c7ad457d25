// lossjit-gpu-pipeline validates its chip option (GpuTarget::validate): an
// unsupported or misspelled arch is a lossjit error, not a silent success
// (sm_60) or an LLVM message about sm_20 (foo).
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_60" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SM60
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=foo" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FOO
// Accepted spellings still work.
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a" -o /dev/null

// SM60: error: {{.*}}arch sm_60 is not supported: lossjit needs sm_70 or newer
// FOO:  error: {{.*}}arch must look like sm_80, sm_90 or sm_90a, got 'foo'

func.func @lce(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %l2 = loss.cross_entropy %z, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l2 : tensor<f32>
}
