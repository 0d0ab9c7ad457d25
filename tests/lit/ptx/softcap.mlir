// Logit scaling and tanh softcap through the whole lossjit-gpu-pipeline, from
// the unfused graph (loss.scale → loss.softcap → cross_entropy, fused by the
// pipeline) and from the gradient ops (chunked and recompute): every kernel's
// PTX is f32 math on ex2.approx with no libdevice (__nv_tanhf) and no tanh
// instruction, and ptxas accepts every kernel for sm_80 and sm_90.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/sm80 %t/sm90
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_80" -o %t/sm80.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90" -o %t/sm90.mlir
// RUN: FileCheck %s --check-prefix=PLAN < %t/sm80.mlir
// RUN: %extract-ptx %t/sm80.mlir %t/sm80 | FileCheck %s --check-prefix=FILES
// RUN: %extract-ptx %t/sm90.mlir %t/sm90 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=PARTIAL --input-file=%t/sm80/capped_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=COMBINE --input-file=%t/sm90/capped_lce_combine.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=DZ --input-file=%t/sm90/capped_grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=RC --input-file=%t/sm80/capped_rc_lce_bwd_dx_rc.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=RC --input-file=%t/sm80/capped_rc_lce_bwd_dw_rc.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_lce_combine.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_lce_reduce.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_grad_lce_bwd_scale.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_grad_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_grad_lce_bwd_dw_single.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_grad_lce_bwd_finish.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_rc_lce_bwd_scale.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_rc_lce_bwd_dx_rc.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=tanh --check-prefix=ANY --input-file=%t/sm90/capped_rc_lce_bwd_dw_rc.ptx
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_lce_partial.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_lce_combine.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_lce_reduce.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_grad_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_grad_lce_bwd_dz.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_grad_lce_bwd_dx.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_grad_lce_bwd_dw.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_grad_lce_bwd_dw_single.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_grad_lce_bwd_finish.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_rc_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_rc_lce_bwd_dx_rc.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/capped_rc_lce_bwd_dw_rc.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_lce_partial.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_lce_combine.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_lce_reduce.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_grad_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_grad_lce_bwd_dz.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_grad_lce_bwd_dx.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_grad_lce_bwd_dw.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_grad_lce_bwd_dw_single.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_grad_lce_bwd_finish.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_rc_lce_bwd_scale.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_rc_lce_bwd_dx_rc.ptx -o %t/a.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/capped_rc_lce_bwd_dw_rc.ptx -o %t/a.cubin

// The fused forward records the transforms in its plan (and so in its
// manifest); the gradients too.
// PLAN: capped = {
// PLAN-SAME: options = {arch = "sm_80", bias = "true", dtype = "f16", ignore_index = "-100", label_type = "i64", logit_scale = "0.5", pass = "forward", reduction = "mean", softcap = "30.0"}
// PLAN: capped_grad = {
// PLAN-SAME: logit_scale = "2.0", pass = "backward", reduction = "sum", softcap = "15.0", strategy = "chunked"
// PLAN: capped_rc = {
// PLAN-SAME: pass = "backward", reduction = "none", softcap = "5.0", strategy = "recompute"

// FILES:      capped_lce_partial.ptx sm_80
// FILES-NEXT: capped_lce_combine.ptx sm_80
// FILES-NEXT: capped_lce_reduce.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_scale.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_zero.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_dz.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_dx.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_dw.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_dw_single.ptx sm_80
// FILES-NEXT: capped_grad_lce_bwd_finish.ptx sm_80
// FILES-NEXT: capped_rc_lce_bwd_scale.ptx sm_80
// FILES-NEXT: capped_rc_lce_bwd_dx_rc.ptx sm_80
// FILES-NEXT: capped_rc_lce_bwd_dw_rc.ptx sm_80
// FILES-NOT:  .ptx

// u = scale·raw / cap with a correctly rounded division, exp(2|u|) on
// ex2.approx, q = 2 / (e + 1), then the online softmax.
// PARTIAL-LABEL: .entry lce_partial
// PARTIAL:       cvt.f32.f16
// PARTIAL:       fma.rn.f32
// PARTIAL:       div.rn.f32 {{.*}}0f41F00000;
// PARTIAL:       ex2.approx.f32
// PARTIAL:       div.rn.f32
// PARTIAL:       ex2.approx.f32
// COMBINE-LABEL: .entry lce_combine
// COMBINE:       lg2.approx.f32
// COMBINE:       div.rn.f32
// COMBINE:       ex2.approx.f32
// DZ-LABEL: .entry lce_bwd_dz
// DZ:       cvt.f32.bf16
// DZ:       div.rn.f32 {{.*}}0f41700000;
// DZ:       ex2.approx.f32
// DZ:       ex2.approx.f32
// RC:       .entry lce_bwd_d{{[xw]}}_rc
// RC:       div.rn.f32 {{.*}}0f40A00000;
// RC:       ex2.approx.f32
// ANY:      .entry

func.func @capped(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>) -> tensor<f32> {
  %z = loss.linear %x, %w, %b : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16> -> tensor<?x?xf16>
  %c = loss.cast %z : tensor<?x?xf16> to tensor<?x?xf32>
  %s = loss.scale %c {factor = 0.5} : tensor<?x?xf32> -> tensor<?x?xf32>
  %t = loss.softcap %s {cap = 30.0} : tensor<?x?xf32> -> tensor<?x?xf32>
  %l = loss.cross_entropy %t, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @capped_grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32, logit_scale = 2.0, softcap = 15.0, reduction = #loss<reduction sum>} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}

// -----

func.func @capped_rc(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi32>, %lse: tensor<?xf32>, %g: tensor<?xf32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, softcap = 5.0, strategy = "recompute", reduction = #loss<reduction none>} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi32>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}
