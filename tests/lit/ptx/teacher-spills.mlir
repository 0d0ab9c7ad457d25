// The distillation forwards (a teacher head: KL's cross kind, the JSD's
// second sweep) on their default tile (matmul=auto, as the runtime and
// lossjit-aot pick it): SIMT with 2 rows per thread, which ptxas takes
// with zero spills on sm_80 and sm_90 in bf16 (the tensor-core tile spills
// 280 bytes in the KL's lce_partial now that the teacher's logits are a tile
// product too — 432 with per-logit dots — SIMT with 4 rows 72 in the JSD's).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/80 %t/90 %t/90a
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_80 matmul=auto" -o %t/80.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90 matmul=auto" -o %t/90.mlir
// RUN: FileCheck %s --check-prefix=TILE --input-file=%t/80.mlir
// RUN: %extract-ptx %t/80.mlir %t/80 > /dev/null
// RUN: %extract-ptx %t/90.mlir %t/90 > /dev/null
// RUN: %ptxas -v -arch=sm_80 %t/80/kl_lce_partial.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90 %t/90/kl_lce_partial.ptx -o %t/b.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/80/jsd_lce_partial.ptx -o %t/c.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/80/jsd_lce_partial_dep.ptx -o %t/d.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90 %t/90/jsd_lce_partial_dep.ptx -o %t/e.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// The KL's backward keeps the tensor-core tile (matmul=auto): its dZ kernel
// forms the teacher's logits by the same mma.sync tile product as the
// student's (16 mma.sync per product), without spills.
// RUN: %ptxas -v -arch=sm_80 %t/80/klg_lce_bwd_dz.ptx -o %t/f.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90 %t/90/klg_lce_bwd_dz.ptx -o %t/g.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: grep -c "mma.sync.aligned" %t/80/klg_lce_bwd_dz.ptx | FileCheck %s --check-prefix=MMA
// On sm_90a (what the JIT builds on a Hopper) the forwards keep the same
// SIMT tile and the KL's backward takes wgmma's (two wgmma per k step of
// each product), all without spills.
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a matmul=auto" -o %t/90a.mlir
// RUN: FileCheck %s --check-prefix=HOPPER --input-file=%t/90a.mlir
// RUN: %extract-ptx %t/90a.mlir %t/90a > /dev/null
// RUN: %ptxas -v -arch=sm_90a %t/90a/kl_lce_partial.ptx -o %t/h.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90a %t/90a/jsd_lce_partial_dep.ptx -o %t/i.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90a %t/90a/klg_lce_bwd_dz.ptx -o %t/j.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: grep -c "wgmma.mma_async" %t/90a/klg_lce_bwd_dz.ptx | FileCheck %s --check-prefix=WGMMA

// TILE-LABEL: loss.launch_plans = {jsd = {
// TILE-SAME:    tile = "block_rows=2,threads=128,splits=8,matmul=simt,stages=1"
// TILE-SAME:    kl = {
// TILE-SAME:    tile = "block_rows=2,threads=128,splits=8,matmul=simt,stages=1"
// TILE-SAME:    klg = {
// TILE-SAME:    tile = "block_rows=64,threads=128,splits=8,matmul=mma_sync,stages=3,block_cols=64,block_k=32"
// MMA: 32
// HOPPER-LABEL: loss.launch_plans = {jsd = {
// HOPPER-SAME:    tile = "block_rows=2,threads=128,splits=8,matmul=simt,stages=1"
// HOPPER-SAME:    kl = {
// HOPPER-SAME:    tile = "block_rows=2,threads=128,splits=8,matmul=simt,stages=1"
// HOPPER-SAME:    klg = {
// HOPPER-SAME:    tile = "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=4,block_cols=64,block_k=32,grad_cols=128"
// WGMMA: 4
// SPILLS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

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

func.func @jsd(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %tx: tensor<?x?xbf16>, %tw: tensor<?x?xbf16>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %r:4 = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xbf16>, tensor<?x?xbf16>)
      {storage = bf16, compute = f32, jsd_beta = 0.3}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat mixture_kl %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    %3 = loss.stat jsd %z, %u : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2, %3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

func.func @klg(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %tx: tensor<?x?xbf16>, %tw: tensor<?x?xbf16>,
               %s0: tensor<?xf32>, %s1: tensor<?xf32>, %s2: tensor<?xf32>,
               %g0: tensor<?xf32>, %g1: tensor<?xf32>, %g2: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %gx, %gw = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xbf16>, tensor<?x?xbf16>)
      saved(%s0, %s1, %s2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      adjoints(%g0, %g1, %g2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>)
      {storage = bf16, compute = f32, teacher_scale = 0.5}
      : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16> {
  ^bb0(%z: tensor<?x?xf32>, %u: tensor<?x?xf32>):
    %0 = loss.stat lse %z : tensor<?x?xf32> -> tensor<?xf32>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf32> -> tensor<?xf32>
    %2 = loss.stat cross_entropy %u, %z : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?xf32>
    loss.yield %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
  }
  return %gx, %gw : tensor<?x?xbf16>, tensor<?x?xbf16>
}
