// Full lossjit-gpu-pipeline on f64 graphs (the cross-entropy forward and
// backward, and a distillation head's statistics and derived backward), for
// sm_80 and sm_90: SIMT kernels computing in f64 — fma.rn.f64, exp2/log2
// as arithmetic (no ex2/lg2.approx, no call of any kind, no libdevice) —
// that ptxas takes without spills.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/80 %t/90
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_80 matmul=auto" -o %t/80.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90 matmul=auto" -o %t/90.mlir
// RUN: %extract-ptx %t/80.mlir %t/80 | FileCheck %s --check-prefix=FILES
// RUN: %extract-ptx %t/90.mlir %t/90 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden-f64} --implicit-check-not=ex2.approx --implicit-check-not=lg2.approx --check-prefix=PARTIAL --input-file=%t/80/ce_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden-f64} --implicit-check-not=ex2.approx --implicit-check-not=lg2.approx --check-prefix=DZ --input-file=%t/80/ce_grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden-f64} --implicit-check-not=ex2.approx --implicit-check-not=lg2.approx --check-prefix=PARTIAL --input-file=%t/90/kl_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden-f64} --implicit-check-not=ex2.approx --implicit-check-not=lg2.approx --check-prefix=DZ --input-file=%t/90/kl_grad_lce_bwd_dz.ptx
// RUN: bash -c 'for f in %t/80/*.ptx; do %ptxas -v -arch=sm_80 $f -o %t/k.cubin 2>&1; done' | FileCheck %s --check-prefix=SPILLS
// RUN: bash -c 'for f in %t/90/*.ptx; do %ptxas -v -arch=sm_90 $f -o %t/k.cubin 2>&1; done' | FileCheck %s --check-prefix=SPILLS

// FILES-DAG: ce_lce_partial.ptx
// FILES-DAG: ce_grad_lce_bwd_dz.ptx
// FILES-DAG: kl_lce_partial.ptx
// FILES-DAG: kl_grad_lce_bwd_dw.ptx
// PARTIAL: .visible .entry
// PARTIAL: ld.global.b64
// PARTIAL: fma.rn.f64
// DZ: .visible .entry
// DZ: fma.rn.f64
// DZ: st.global.b64
// Every kernel assembles (14 of them), none spills.
// SPILLS-COUNT-14: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SPILLS-NOT: bytes spill

func.func @ce(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>, %b: tensor<?xf64>) -> tensor<f64> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = f64, compute = f64, softcap = 30.0} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64>, tensor<?xf64> -> tensor<f64>, tensor<?xf64>
  return %l : tensor<f64>
}

func.func @ce_grad(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %y: tensor<?xi64>, %lse: tensor<?xf64>, %g: tensor<f64>) -> (tensor<?x?xf64>, tensor<?x?xf64>) {
  %gx, %gw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f64, compute = f64, strategy = "chunked"} : tensor<?x?xf64>, tensor<?x?xf64>, tensor<?xi64>, tensor<?xf64>, tensor<f64> -> tensor<?x?xf64>, tensor<?x?xf64>
  return %gx, %gw : tensor<?x?xf64>, tensor<?x?xf64>
}

func.func @kl(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %tx: tensor<?x?xf64>, %tw: tensor<?x?xf64>)
    -> (tensor<?xf64>, tensor<?xf64>, tensor<?xf64>) {
  %r:3 = loss.vocab_reduce %x, %w teacher(%tx, %tw : tensor<?x?xf64>, tensor<?x?xf64>)
      {storage = f64, compute = f64, teacher_scale = 0.5}
      : tensor<?x?xf64>, tensor<?x?xf64> -> tensor<?xf64>, tensor<?xf64>, tensor<?xf64> {
  ^bb0(%z: tensor<?x?xf64>, %u: tensor<?x?xf64>):
    %0 = loss.stat lse %z : tensor<?x?xf64> -> tensor<?xf64>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf64> -> tensor<?xf64>
    %2 = loss.stat cross_entropy %u, %z : tensor<?x?xf64>, tensor<?x?xf64> -> tensor<?xf64>
    loss.yield %0, %1, %2 : tensor<?xf64>, tensor<?xf64>, tensor<?xf64>
  }
  return %r#0, %r#1, %r#2 : tensor<?xf64>, tensor<?xf64>, tensor<?xf64>
}

func.func @kl_grad(%x: tensor<?x?xf64>, %w: tensor<?x?xf64>, %tx: tensor<?x?xf64>, %tw: tensor<?x?xf64>,
                   %s0: tensor<?xf64>, %s1: tensor<?xf64>, %s2: tensor<?xf64>,
                   %g0: tensor<?xf64>, %g1: tensor<?xf64>, %g2: tensor<?xf64>)
    -> (tensor<?x?xf64>, tensor<?x?xf64>) {
  %gx, %gw = loss.vocab_reduce_grad %x, %w teacher(%tx, %tw : tensor<?x?xf64>, tensor<?x?xf64>)
      saved(%s0, %s1, %s2 : tensor<?xf64>, tensor<?xf64>, tensor<?xf64>)
      adjoints(%g0, %g1, %g2 : tensor<?xf64>, tensor<?xf64>, tensor<?xf64>)
      {storage = f64, compute = f64, teacher_scale = 0.5}
      : tensor<?x?xf64>, tensor<?x?xf64> -> tensor<?x?xf64>, tensor<?x?xf64> {
  ^bb0(%z: tensor<?x?xf64>, %u: tensor<?x?xf64>):
    %0 = loss.stat lse %z : tensor<?x?xf64> -> tensor<?xf64>
    %1 = loss.stat teacher_lse %u : tensor<?x?xf64> -> tensor<?xf64>
    %2 = loss.stat cross_entropy %u, %z : tensor<?x?xf64>, tensor<?x?xf64> -> tensor<?xf64>
    loss.yield %0, %1, %2 : tensor<?xf64>, tensor<?xf64>, tensor<?xf64>
  }
  return %gx, %gw : tensor<?x?xf64>, tensor<?x?xf64>
}
