// matmul=mma_sync for the chunked backward and the fused forward+backward:
// the kernels whose product is the logits (lce_bwd_dz, lce_fused_z)
// multiply on tensor cores with their operand rings in dynamic shared
// memory; dZ·W and dZᵀ·X (lce_bwd_dx, lce_bwd_dw) stay SIMT FMA so far. f32
// math only, no libdevice, no atomics; ptxas accepts every kernel, and the
// tensor-core ones with zero spills.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_80 matmul=mma_sync" -o %t/sm80.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/sm80.mlir
// RUN: %extract-ptx %t/sm80.mlir %t/k > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DZ --input-file=%t/k/grad_bf16_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=FZ --input-file=%t/k/fused_f16_lce_fused_z.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=DX --input-file=%t/k/grad_bf16_lce_bwd_dx.ptx
// RUN: %ptxas -v -arch=sm_80 %t/k/grad_bf16_lce_bwd_dz.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/k/fused_f16_lce_fused_z.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -arch=sm_80 %t/k/grad_bf16_lce_bwd_dx.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/grad_bf16_lce_bwd_dw.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/grad_bf16_lce_bwd_finish.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/fused_f16_lce_fused_lse.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/fused_f16_lce_fused_dz.ptx -o %t/a.cubin

// The logits kernels ask for their rings (3 × (64 + 64) × 40 × 2 bytes) and
// launch 64×64 tiles of 128 threads; the SIMT kernels keep 128 threads and
// 4 rows per thread (grid cdiv(C, 4)).
// PLAN:     name = "lce_bwd_dz"{{.*}}shared_bytes = 30720
// PLAN:     grid = ["cdiv(C,4)", "cdiv(D,128)", "1"]{{.*}}name = "lce_bwd_dx"
// PLAN:     name = "lce_fused_z"{{.*}}shared_bytes = 30720

// DZ-LABEL: .visible .entry lce_bwd_dz(
// DZ-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// DZ:       ex2.approx
// FZ-LABEL: .visible .entry lce_fused_z(
// FZ-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// DX-LABEL: .visible .entry lce_bwd_dx(
// DX-NOT:   mma.sync
// DX:       fma.rn.f32
// SPILLS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @grad_bf16(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}

// -----

func.func @fused_f16(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
