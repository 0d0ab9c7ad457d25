// A graph whose argument types have static extents runs only on inputs of
// those extents (issue 16: tensor<3x4xf32> ran on 5 rows). The kernels see
// only N, V, D, so the launch plan carries the declared extents and every
// call compares them, on both backends and through the kernel cache.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/runner-data.py make %t
// Matching extents (x is 3x4, w 5x4, y 3): the results are right.
// RUN: env LOSSJIT_CACHE_DIR=%t/cache lossjit-runner %s %t/w.npy %t/x.npy %t/y.npy -o %t/ok | FileCheck %s --check-prefix=OUT
// RUN: %python %S/runner-data.py check %t %t/ok lse,loss | FileCheck %s --check-prefix=GRAPH
// RUN: lossjit-runner --backend=simt %s %t/w.npy %t/x.npy %t/y.npy -o %t/simt | FileCheck %s --check-prefix=OUT
// RUN: %python %S/runner-data.py check %t %t/simt lse,loss | FileCheck %s --check-prefix=GRAPH
// The same graph declaring 2 rows, and one declaring V = 6: errors naming
// the argument, the dimension, the declared and the actual extent.
// RUN: sed -e 's/3x4xf32/2x4xf32/g' -e 's/tensor<3xi64>/tensor<2xi64>/g' -e 's/tensor<3xf32>/tensor<2xf32>/g' %s > %t/rows.mlir
// RUN: not lossjit-runner %t/rows.mlir %t/w.npy %t/x.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not lossjit-runner --backend=simt %t/rows.mlir %t/w.npy %t/x.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: sed -e 's/5x4xf32/6x4xf32/g' %s > %t/vocab.mlir
// RUN: not env LOSSJIT_CACHE_DIR=%t/cache lossjit-runner %t/vocab.mlir %t/w.npy %t/x.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=VOCAB
// A cache hit (the plan read back from the entry) checks them too.
// RUN: not env LOSSJIT_CACHE_DIR=%t/cache lossjit-runner %t/vocab.mlir %t/w.npy %t/x.npy %t/y.npy 2>&1 | FileCheck %s --check-prefix=VOCAB
// RUN: env LOSSJIT_CACHE_DIR=%t/cache lossjit-runner %s %t/w.npy %t/x.npy %t/y.npy | FileCheck %s --check-prefix=HIT

// OUT: shape N=3 V=5 D=4 storage=f32 reduction=mean
// GRAPH: lse ok
// GRAPH-NEXT: loss ok
// ROWS: lossjit-runner: error: argument 1 ('x') of @lce is declared 2x4: dimension 0 (N) must be 2, the input has 3
// VOCAB: lossjit-runner: error: argument 0 ('w') of @lce is declared 6x4: dimension 0 (V) must be 6, the input has 5
// HIT: backend cpu: cache hit

func.func @lce(%w: tensor<5x4xf32>, %x: tensor<3x4xf32>, %y: tensor<3xi64>) -> (tensor<3xf32>, tensor<f32>) {
  %loss, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f32, compute = f32} : tensor<3x4xf32>, tensor<5x4xf32>, tensor<3xi64> -> tensor<f32>, tensor<3xf32>
  return %lse, %loss : tensor<3xf32>, tensor<f32>
}
