// matmul=mma_sync for the chunked backward and the fused forward+backward:
// all three products run on tensor cores with their operand rings in
// dynamic shared memory — the logits (lce_bwd_dz, lce_fused_z: both
// operands K-major), dX = dZ·W (lce_bwd_dx: W read with ldmatrix.trans) and
// dW = dZᵀ·X (lce_bwd_dw: both operands with ldmatrix.trans) — on a 16-bit
// dZ prescaled by the power of two lce_bwd_scale writes. f32 math only, no
// libdevice, no atomics; ptxas accepts every kernel, the tensor-core ones
// with zero spills.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_80 matmul=mma_sync" -o %t/sm80.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/sm80.mlir
// RUN: %extract-ptx %t/sm80.mlir %t/k > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DZ --input-file=%t/k/grad_bf16_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=FZ --input-file=%t/k/fused_f16_lce_fused_z.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DX --input-file=%t/k/grad_bf16_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DW --input-file=%t/k/grad_bf16_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --implicit-check-not=st.global.f32 --check-prefix=DWS --input-file=%t/k/grad_bf16_lce_bwd_dw_single.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=FDX --input-file=%t/k/fused_f16_lce_bwd_dx.ptx
// RUN: %ptxas -v -arch=sm_80 %t/k/grad_bf16_lce_bwd_dz.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/k/fused_f16_lce_fused_z.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/k/grad_bf16_lce_bwd_dx.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/k/grad_bf16_lce_bwd_dw.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90 %t/k/grad_bf16_lce_bwd_dw.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/k/grad_bf16_lce_bwd_dw_single.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/k/fused_f16_lce_bwd_dw_single.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -arch=sm_80 %t/k/grad_bf16_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/grad_bf16_lce_bwd_finish.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/fused_f16_lce_fused_lse.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/k/fused_f16_lce_fused_dz.ptx -o %t/a.cubin

// Every product kernel asks for its rings (3 × 2 operands × 64 × 40 × 2
// bytes) and launches 64×64 tiles of 128 threads: dX over (C, D), dW over
// (V, D). The chunked backward keeps a 16-bit dZ [C, V] and the scale G;
// the fused op its f32 raw logits and the 16-bit dZ next to them, and
// lce_fused_z's row statistics of each tile (one state of each 32-column
// warp half of a 64-column tile: 2 per tile) for lce_fused_lse, so its
// chunks are sized by 6 bytes per element and 8 per state.
// PLAN:     "CMAX", "max(1,min(N,(WB-N*4)/(V*2)))"], ["C", "max(1,min(CMAX,cdiv(cdiv(N,max(1,cdiv(N,CMAX))),64)*64))"
// PLAN-SAME: name = "lce_bwd_dz", parallel = "none", per_chunk = true, shared_bytes = 30720
// PLAN-SAME: grid = ["cdiv(C,64)", "cdiv(D,64)", "1"], module = "grad_bf16_lce_bwd_dx", name = "lce_bwd_dx", parallel = "none", per_chunk = true, shared_bytes = 30720
// PLAN-SAME: grid = ["(cdiv(V,64))*(1-SINGLE)", "max(1,cdiv(D,64))", "1"], module = "grad_bf16_lce_bwd_dw", name = "lce_bwd_dw", parallel = "none", per_chunk = true, shared_bytes = 30720
// PLAN-SAME: grid = ["(cdiv(V,64))*SINGLE", "max(1,cdiv(D,64))", "1"], module = "grad_bf16_lce_bwd_dw_single", name = "lce_bwd_dw_single", parallel = "none", per_chunk = true, shared_bytes = 30720
// PLAN-SAME: {count = "C*V", dtype = "bf16", name = "dz"}, {count = "1", dtype = "f32", name = "gscale"}
// PLAN:     "CMAX", "max(1,min(N,(WB-N*4)/(V*6+(cdiv(V,64)*2)*8)))"], ["C", "max(1,min(CMAX,cdiv(cdiv(N,max(1,cdiv(N,CMAX))),64)*64))"
// PLAN-SAME: {args = ["x", "w", "dz", "tile_max", "tile_sum", "chunk_begin", "chunk_end", "V", "D"]
// PLAN-SAME: name = "lce_fused_z", parallel = "none", per_chunk = true, shared_bytes = 30720
// PLAN-SAME: {args = ["labels", "dz", "tile_max", "tile_sum", "lse", "loss_rows", "chunk_begin", "chunk_end", "V"], block = [512, 1, 1], grid = ["cdiv(C,32)", "1", "1"], module = "fused_f16_lce_fused_lse"
// PLAN-SAME: {count = "C*V", dtype = "f32", name = "dz"}, {count = "C*V", dtype = "f16", name = "dzs"}
// PLAN-SAME: {count = "C*(cdiv(V,64)*2)", dtype = "f32", name = "tile_max"}, {count = "C*(cdiv(V,64)*2)", dtype = "f32", name = "tile_sum"}

// DZ-LABEL: .visible .entry lce_bwd_dz(
// DZ-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// DZ:       ex2.approx
// FZ-LABEL: .visible .entry lce_fused_z(
// FZ-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// Each tile's row statistics merge across a quad's lanes by shuffles (no
// barrier after the products' ring).
// FZ:       ex2.approx
// FZ:       shfl.sync.bfly.b32
// DX-LABEL: .visible .entry lce_bwd_dx(
// DX:       cp.async.cg.shared.global
// DX:       ldmatrix.sync.aligned.m8n8.x4.shared.b16
// DX:       ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// DX-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// DW-LABEL: .visible .entry lce_bwd_dw(
// DW:       ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// DW:       ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// DW-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// lce_bwd_dw_single: the same product, its sums rounded to bf16 where
// they are stored (lce_bwd_dw stores f32 sums; this kernel none).
// DWS-LABEL: .visible .entry lce_bwd_dw_single(
// DWS-DAG:   ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// DWS-DAG:   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// DWS-DAG:   cvt.rn.bf16.f32
// DWS-DAG:   st.global.b16
// FDX-LABEL: .visible .entry lce_bwd_dx(
// FDX-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
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
