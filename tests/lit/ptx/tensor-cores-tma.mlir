// matmul=wgmma tma=1 through the whole GPU pipeline for sm_90a: the logit
// products (lce_partial, lce_bwd_dz, lce_fused_z) take x and w as 128-byte
// by-value tensor maps, copy their k tiles by TMA into 128-byte swizzled
// stages of a 1024-byte aligned dynamic shared base on an mbarrier ring, and
// name the swizzle in their wgmma descriptors; they keep the cp.async ring
// for launches whose maps the runtime cannot encode (tma_ready 0). With
// block_k 64 the gradient products load by TMA too: dX = dZ·W takes dZ
// (K-major, a workspace) and Wᵀ (MN-major: boxes of 64 columns of D), dW =
// dZᵀ·X both operands MN-major. The plan lists the maps; ptxas
// -arch=sm_90a takes every kernel with zero spills and without advisories
// that it serialized the wgmmas (C7514-C7518).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=1" -o %t/f16.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=1" -o %t/bf16.out.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/f16.mlir
// RUN: %extract-ptx %t/f16.mlir %t/k/f16 > /dev/null
// RUN: %extract-ptx %t/bf16.out.mlir %t/k/bf16 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=LOGITS,F16 --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=LOGITS,BF16 --input-file=%t/k/bf16/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=LOGITS,BF16 --input-file=%t/k/bf16/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=LOGITS,F16 --input-file=%t/k/f16/fused_lce_fused_z.ptx
// RUN: FileCheck %s --check-prefix=COPY --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=COPY --input-file=%t/k/bf16/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s --check-prefix=DX --input-file=%t/k/bf16/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s --check-prefix=DX --input-file=%t/k/f16/fused_lce_bwd_dx.ptx
// RUN: FileCheck %s --check-prefix=DW --input-file=%t/k/bf16/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=DW --input-file=%t/k/f16/fused_lce_bwd_dw.ptx
// Every kernel of a variant (one ptxas call links them: one variant at a time).
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751

// The maps: x in boxes of 64 k x 128 rows, w in 64 k x 64 rows, 128-byte
// swizzle; lce_partial takes them and tma_ready.
// PLAN: args = ["x", "w", "part_max", "part_sum", "x_tma_128x64", "w_tma_64x64", "tensor_maps_ready", "N", "V", "D"]
// PLAN-SAME: tensor_maps = [{box = [64, 128], buffer = "x", dims = ["D", "N"], name = "x_tma_128x64", swizzle = 128 : i64}, {box = [64, 64], buffer = "w", dims = ["D", "V"], name = "w_tma_64x64", swizzle = 128 : i64}]

// LOGITS:      .extern .shared .align 1024 .b8 __dynamic_shmem__0[];
// LOGITS:      .param .align 64 .b8 [[K:lce_[a-z_]+]]_param_{{[0-9]+}}[128],
// LOGITS-NEXT: .param .align 64 .b8 [[K]]_param_{{[0-9]+}}[128],
// LOGITS:      mbarrier.init.shared.b64
// LOGITS:      mbarrier.arrive.expect_tx.shared.b64
// LOGITS:      cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// LOGITS:      cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// LOGITS-DAG:  mbarrier.try_wait.parity.shared.b64
// K-major, 128-byte swizzle (layout type 1 << 62), SBO 1024 bytes, LBO 1.
// LOGITS-DAG:  or.b64 {{.*}}, 4611686293305360384;
// F16-DAG:     wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16
// BF16-DAG:    wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// The extra arrivals that even the phases out after every product.
// LOGITS:      mbarrier.arrive.shared.b64

// The copy path, for maps the runtime could not encode.
// COPY:        cp.async.cg.shared.global

// dX: dZ by 64 k x 128-row boxes, Wᵀ by two 64-column boxes per stage.
// DX:          .param .align 64 .b8 [[K:lce_[a-z_]+]]_param_{{[0-9]+}}[128],
// DX-NEXT:     .param .align 64 .b8 [[K]]_param_{{[0-9]+}}[128],
// DX:          cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// DX:          cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// DX:          cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// MN-major, 128-byte swizzle: LBO 8192 bytes (the next 64-column box), SBO 1024.
// DX-DAG:      or.b64 {{.*}}, 4611686293338849280;
// DX-DAG:      wgmma.mma_async.sync.aligned.m64n128k16

// dW: dZᵀ and Xᵀ, two 64-line boxes each per stage, both MN-major.
// DW:          .param .align 64 .b8 [[K:lce_[a-z_]+]]_param_{{[0-9]+}}[128],
// DW-NEXT:     .param .align 64 .b8 [[K]]_param_{{[0-9]+}}[128],
// DW-COUNT-4:  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// DW-DAG:      or.b64 {{.*}}, 4611686293338849280;
// DW-DAG:      wgmma.mma_async.sync.aligned.m64n128k16

// FWD-COUNT-3:   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// GRAD-COUNT-7:  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FUSED-COUNT-10: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @fwd(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @grad(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %dx, %dw, %db : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}

// -----

func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
