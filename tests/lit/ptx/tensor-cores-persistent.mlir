// tile persistent=P through the whole GPU pipeline for sm_90a: the
// gradient-side product kernels (lce_bwd_dz, dX, dW; lce_fused_z) launch at
// most P blocks, each sweeping every gridDim.x-th tile from blockIdx.x. The
// sweep reads the thread's id afresh in each tile (an empty "=r,0" asm):
// LLVM would otherwise hoist the lane offsets of the copies and fragments
// out of the tile loop and ptxas would spill (dW: 255 registers, 88 bytes).
// Every kernel of the backward (with a bias: db in dW's first-column
// tiles) and of the fused op takes zero spills and no advisory that ptxas
// serialized wgmmas, on the cp.async ring and with a producer warp (tma=2,
// one TMA ring through all of a block's tiles).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma persistent=132" -o %t/ring.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=2 persistent=132" -o %t/ws.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/ring.mlir
// RUN: %extract-ptx %t/ring.mlir %t/k/ring > /dev/null
// RUN: %extract-ptx %t/ws.mlir %t/k/ws > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=SWEEP --input-file=%t/k/ring/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=SWEEP --input-file=%t/k/ws/fused_lce_fused_z.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/ring/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ring/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751

// The plan marks the sweeping kernels persistent (the launchers run at most
// the blocks that fit the device at once), and no other kernel.
// PLAN:      module = "grad_lce_bwd_zero", name = "lce_bwd_zero", parallel = "none", per_chunk = false, shared_bytes
// PLAN-SAME: grid = ["min(cdiv(C,128)*cdiv(V,64),132)", "1", "1"], module = "grad_lce_bwd_dz", name = "lce_bwd_dz", parallel = "none", per_chunk = true, persistent = true,
// PLAN-SAME: grid = ["min(cdiv(C,128)*cdiv(D,128),132)", "1", "1"], module = "grad_lce_bwd_dx", name = "lce_bwd_dx", parallel = "none", per_chunk = true, persistent = true,
// PLAN-SAME: grid = ["(min(cdiv(V,128)*max(1,cdiv(D,128)),132))*(1-SINGLE)", "1", "1"], module = "grad_lce_bwd_dw", name = "lce_bwd_dw", parallel = "none", per_chunk = true, persistent = true,
// PLAN-SAME: grid = ["(min(cdiv(V,128)*max(1,cdiv(D,128)),132))*SINGLE", "1", "1"], module = "grad_lce_bwd_dw_single", name = "lce_bwd_dw_single", parallel = "none", per_chunk = true, persistent = true,
// PLAN-SAME: module = "grad_lce_bwd_finish", name = "lce_bwd_finish", parallel = "none", per_chunk = false, shared_bytes
// PLAN:      grid = ["min(cdiv(C,128)*cdiv(V,64),132)", "1", "1"], module = "fused_lce_fused_z", name = "lce_fused_z", parallel = "none", per_chunk = true, persistent = true,

// The tile loop: from %ctaid.x in steps of %nctaid.x, the thread's id
// passed through the empty asm inside it.
// SWEEP:     mov.u32 {{%r[0-9]+}}, %ctaid.x;
// SWEEP:     mov.u32 {{%r[0-9]+}}, %nctaid.x;
// SWEEP:     // begin inline asm
// SWEEP:     wgmma.mma_async

// GRAD-COUNT-7:  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FUSED-COUNT-10: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @grad(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %dx, %dw, %db : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}

// -----

func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
