// The chunked GPU backward through the whole lossjit-gpu-pipeline (bf16 with
// bias at sm_90, f16 without at sm_80): one PTX file per kernel, f32 math
// only, ex2.approx for the softmax, no libdevice, no atomics, and ptxas
// accepts every kernel.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/bf16 %t/f16
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90" -o %t/sm90.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_80" -o %t/sm80.mlir
// RUN: FileCheck %s --check-prefix=PLAN < %t/sm90.mlir
// RUN: %extract-ptx %t/sm90.mlir %t/bf16 | FileCheck %s --check-prefix=FILES
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=DZ --input-file=%t/bf16/grad_bf16_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=DX --input-file=%t/bf16/grad_bf16_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=DW --input-file=%t/bf16/grad_bf16_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=DWS --input-file=%t/bf16/grad_bf16_lce_bwd_dw_single.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=FIN --input-file=%t/bf16/grad_bf16_lce_bwd_finish.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=SCALE --input-file=%t/bf16/grad_bf16_lce_bwd_scale.ptx
// RUN: %ptxas -arch=sm_90 %t/bf16/grad_bf16_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/bf16/grad_bf16_lce_bwd_dz.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/bf16/grad_bf16_lce_bwd_dx.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/bf16/grad_bf16_lce_bwd_dw.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/bf16/grad_bf16_lce_bwd_dw_single.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/bf16/grad_bf16_lce_bwd_finish.ptx -o %t/a.cubin
// RUN: %extract-ptx %t/sm80.mlir %t/f16 | FileCheck %s --check-prefix=FILES80
// RUN: %ptxas -arch=sm_80 %t/f16/grad_f16_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_f16_lce_bwd_dz.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_f16_lce_bwd_dx.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_f16_lce_bwd_dw.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_f16_lce_bwd_dw_single.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_f16_lce_bwd_finish.ptx -o %t/a.cubin
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=RC --input-file=%t/f16/grad_rc_lce_bwd_dx_rc.ptx
// RUN: %ptxas -arch=sm_80 %t/f16/grad_rc_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_rc_lce_bwd_dx_rc.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/grad_rc_lce_bwd_dw_rc.ptx -o %t/a.cubin
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=FUSED --input-file=%t/f16/fused_lce_fused_lse.ptx
// RUN: %ptxas -arch=sm_80 %t/f16/fused_lce_fused_z.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/fused_lce_fused_lse.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/fused_lce_fused_dz.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/fused_lce_reduce.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/f16/fused_lce_bwd_dw_single.ptx -o %t/a.cubin

// PLAN: chunk = "C"
// PLAN-SAME: derived = {{\[\[}}"CMAX", "max(1,min(N,(WB-N*4)/(V*4)))"], ["C", "max(1,min(CMAX,cdiv(cdiv(N,max(1,cdiv(N,CMAX))),4)*4))"], ["SINGLE", "min(N,1)-min(1,max(0,N-C))"]]
// PLAN-SAME: name = "lce_bwd_dz", parallel = "none", per_chunk = true
// PLAN-SAME: name = "lce_bwd_dw", parallel = "none", per_chunk = true
// PLAN-SAME: name = "lce_bwd_dw_single", parallel = "none", per_chunk = true
// PLAN-SAME: name = "lce_bwd_finish", parallel = "none", per_chunk = false
// PLAN-SAME: workspaces = [{count = "N", dtype = "f32", name = "grow"}, {count = "C*V", dtype = "f32", name = "dz"}, {count = "(V*D)*(1-SINGLE)", dtype = "f32", name = "dw_acc"}, {count = "(V)*(1-SINGLE)", dtype = "f32", name = "db_acc"}]

// FILES: grad_bf16_lce_bwd_scale.ptx sm_90
// FILES: grad_bf16_lce_bwd_dz.ptx sm_90
// FILES: grad_bf16_lce_bwd_dx.ptx sm_90
// FILES: grad_bf16_lce_bwd_dw.ptx sm_90
// FILES: grad_bf16_lce_bwd_dw_single.ptx sm_90
// FILES: grad_bf16_lce_bwd_finish.ptx sm_90
// FILES80: grad_f16_lce_bwd_finish.ptx sm_80
// FILES80: grad_rc_lce_bwd_dx_rc.ptx sm_80
// FILES80: grad_rc_lce_bwd_dw_rc.ptx sm_80

// FUSED-LABEL: .entry lce_fused_lse
// FUSED: ex2.approx.f32
// FUSED: lg2.approx.f32

// RC-LABEL: .entry lce_bwd_dx_rc
// RC: .shared .align 4 .b8
// RC: bar.sync
// RC: ex2.approx.f32
// RC: cvt.rn.f16.f32

// DZ-LABEL: .entry lce_bwd_dz
// DZ: cvt.f32.bf16
// DZ: fma.rn.f32
// DZ: ex2.approx.f32
// DX-LABEL: .entry lce_bwd_dx
// DX: fma.rn.f32
// DX: cvt.rn.bf16.f32
// DW-LABEL: .entry lce_bwd_dw
// DW: cvt.f32.bf16
// DW: fma.rn.f32
// The single chunk's dW: the same sums, rounded where they are stored.
// DWS-LABEL: .entry lce_bwd_dw_single
// DWS: cvt.f32.bf16
// DWS: fma.rn.f32
// DWS: cvt.rn.bf16.f32
// DWS: st.global.b16
// FIN-LABEL: .entry lce_bwd_finish
// FIN: cvt.rn.bf16.f32
// SCALE-LABEL: .entry lce_bwd_scale
// SCALE: bar.sync
// SCALE: div.rn.f32

func.func @grad_bf16(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}

// -----

func.func @grad_f16(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi32>, %lse: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, reduction = #loss<reduction none>, ignore_index = 0 : i64} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi32>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}

// -----

func.func @grad_rc(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32, strategy = "recompute"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %dx, %dw, %db : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}

// -----

func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
