// A tile cluster size that no kernel of the op can take is an error naming
// what clusters need, not a tile recorded in the plan that changes nothing
// (a teacher's forward kept its kernels unclustered with cluster=2, and the
// manifest said cluster 2). The plain forward on the same tile clusters its
// lce_partial.
// RUN: rm -rf %t && mkdir -p %t
// RUN: sed -n '/^func.func @kl(/,/^}$/p' %s > %t/kl.mlir
// RUN: not lossjit-opt %t/kl.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 tma=2 cluster=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TEACHER
// RUN: sed -n '/^func.func @fwd(/,/^}$/p' %s > %t/fwd.mlir
// RUN: lossjit-opt %t/fwd.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 tma=2 cluster=2" -o %t/fwd.out.mlir
// RUN: %extract-ptx %t/fwd.out.mlir %t/k > /dev/null
// RUN: FileCheck %s --check-prefix=PLAIN --input-file=%t/k/fwd_lce_partial.ptx

// TEACHER: error: loss-lower-to-gpu: tile cluster=2 puts no kernel of this op in clusters: the logits products take them on a warp-specialized ring (tma >= 2) and not for a teacher's logits
// PLAIN-LABEL: .entry lce_partial(
// PLAIN: .reqnctapercluster 2, 1, 1

func.func @kl(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %tx: tensor<?x?xbf16>, %tw: tensor<?x?xbf16>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:4 = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xbf16>, tensor<?x?xbf16>)
      {storage = bf16, compute = f32, teacher_scale = 0.5}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat teacher_entropy %u : tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat cross_entropy %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

func.func @fwd(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
