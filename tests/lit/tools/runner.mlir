// lossjit-runner on a graph file: inputs are bound by the function's
// argument roles (here w before x), results are written in the function's
// result order (here lse, then loss), and both match a float64 evaluation.
// The preset writes loss then lse. Bad input is a clear error.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/runner-data.py make %t
// RUN: lossjit-runner %s %t/w.npy %t/x.npy %t/y.npy -o %t/graph | FileCheck %s --check-prefix=OUT
// RUN: %python %S/runner-data.py check %t %t/graph lse,loss | FileCheck %s --check-prefix=GRAPH
// RUN: lossjit-runner --preset linear-cross-entropy %t/x.npy %t/w.npy %t/y.npy -o %t/preset
// RUN: %python %S/runner-data.py check %t %t/preset loss,lse | FileCheck %s --check-prefix=PRESET
// RUN: lossjit-runner --backend=simt --preset linear-cross-entropy %t/x.npy %t/w.npy %t/y.npy -o %t/simt
// RUN: %python %S/runner-data.py check %t %t/simt loss,lse | FileCheck %s --check-prefix=PRESET
// RUN: not lossjit-runner --preset linear-cross-entropy %t/x.npy %t/w.npy 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not lossjit-runner --preset linear-cross-entropy %t/x.npy %t/x.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=LABEL
// RUN: not lossjit-runner --preset linear-cross-entropy %t/w.npy %t/w.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not lossjit-runner --preset linear-cross-entropy %t/x.npy %t/w.npy %t/nothere.npy 2>&1 | FileCheck %s --check-prefix=MISSING

// OUT: shape N=3 V=5 D=4 storage=f32 reduction=mean
// GRAPH: lse ok
// GRAPH-NEXT: loss ok
// PRESET: loss ok
// PRESET-NEXT: lse ok
// COUNT: lossjit-runner: error: --preset linear-cross-entropy expects x.npy w.npy labels.npy [bias.npy], got 2 inputs
// LABEL: lossjit-runner: error: labels[2] = 4 is outside [0, V=3) and is not ignore_index=-100
// SHAPE: lossjit-runner: error: labels has 3 rows, x has 5
// MISSING: lossjit-runner: error: {{.*}}nothere.npy: cannot read

func.func @lce(%w: tensor<?x?xf32>, %x: tensor<?x?xf32>, %y: tensor<?xi64>) -> (tensor<?xf32>, tensor<f32>) {
  %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %lse, %loss : tensor<?xf32>, tensor<f32>
}
