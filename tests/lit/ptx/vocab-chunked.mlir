// The backward in vocabulary chunks (strategy vocab_chunked) on the GPU: a
// plan that chunks V (chunk_dim), every row's dZ of a chunk's columns in an
// [N, C] workspace — its tensor maps [N rows × C] — dX accumulated in f32
// across the chunks (zeroed first, rounded last) and each dW row formed once
// over all N rows straight into grad_w: no V × D workspace. What matmul=auto
// builds for each chip assembles with zero spills, and launches
// (launch-fits.py).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a matmul=auto" -o %t/sm_90a.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_80 matmul=auto" -o %t/sm_80.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/sm_90a.mlir
// RUN: FileCheck %s --check-prefix=PLAN80 --input-file=%t/sm_80.mlir
// RUN: %extract-ptx %t/sm_90a.mlir %t/k/sm_90a > /dev/null
// RUN: %extract-ptx %t/sm_80.mlir %t/k/sm_80 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DW --input-file=%t/k/sm_90a/grad_lce_bwd_dw.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/sm_90a/grad_*.ptx -o %t/a.cubin > %t/ptxas1.log 2>&1
// RUN: FileCheck %s --check-prefix=PTXAS --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas1.log
// RUN: %python %S/../launch-fits.py %t/k/sm_90a/grad_*.ptx < %t/ptxas1.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_80 %t/k/sm_80/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS --implicit-check-not="spill stores"

// PLAN-LABEL: loss.launch_plans = {grad = {chunk = "C", chunk_dim = "V"
// The widest chunk the budget takes (CMAX), then as many chunks as it
// needs, evened out in multiples of 64 columns.
// PLAN-SAME:    derived = {{\[\[}}"CMAX", "max(1,min(V,max(((max(WB-N*4-N*D*4,WB/2-N*4))/(max(1,N)*2))/64*64,min(((max(WB-N*4-N*D*4,WB/2-N*4))/(max(1,N)*2)),63))))"], ["C", "min(CMAX,cdiv(cdiv(V,cdiv(V,CMAX)),64)*64)"]]
// PLAN-SAME:    name = "lce_bwd_scale", parallel = "none", per_chunk = false
// PLAN-SAME:    name = "lce_bwd_zero_dx", parallel = "none", per_chunk = false
// PLAN-SAME:    {args = ["x", "w", "bias", "labels", "lse", "grow", "gscale", "dz", "chunk_begin", "chunk_end", "N", "C", "V", "D", {{.*}}], {{.*}}grid = ["cdiv(N,128)", "cdiv(C,128)", "1"], {{.*}}name = "lce_bwd_dz", parallel = "none", per_chunk = true
// PLAN-SAME:    {args = ["dz", "w", "gscale", "dx_acc", "chunk_begin", "chunk_end", "N", "C", "V", "D", {{.*}}], {{.*}}grid = ["cdiv(N,128)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dx", parallel = "none", per_chunk = true
// PLAN-SAME:    {args = ["dz", "x", "gscale", "grad_w", "grad_bias", "chunk_begin", "chunk_end", "N", "C", "V", "D", {{.*}}], {{.*}}grid = ["cdiv(C,128)", "max(1,cdiv(D,128))", "1"], {{.*}}name = "lce_bwd_dw", parallel = "none", per_chunk = true
// PLAN-SAME:    name = "lce_bwd_finish_dx", parallel = "none", per_chunk = false
// PLAN-SAME:    strategy = "vocab_chunked"
// PLAN-SAME:    {box = [64, 128], buffer = "dz", dims = ["C", "N"], name = "dz_tma_128x64", swizzle = 128 : i64}
// PLAN-SAME:    {box = [64, 64], buffer = "dz", dims = ["C", "N"], name = "dzt_tma_64x64", swizzle = 128 : i64}
// PLAN-SAME:    tma=1
// PLAN-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}, {count = "N*C", dtype = "bf16", name = "dz"}, {count = "1", dtype = "f32", name = "gscale"}, {count = "N*D", dtype = "f32", name = "dx_acc"}]
// PLAN-NOT:     V*D
// PLAN80-LABEL: loss.launch_plans = {grad = {chunk = "C", chunk_dim = "V"
// PLAN80-SAME:    matmul=mma_sync
// dW's products are wgmma's, their k the N rows, stored once as bf16.
// DW-LABEL: .entry lce_bwd_dw(
// DW:         wgmma.mma_async
// DW:         cvt.rn.bf16.f32
// PTXAS-DAG: Compiling entry function 'lce_bwd_dz'
// PTXAS-DAG: Compiling entry function 'lce_bwd_dx'
// PTXAS-DAG: Compiling entry function 'lce_bwd_dw'
// PTXAS-DAG: Compiling entry function 'lce_bwd_zero_dx'
// PTXAS-DAG: Compiling entry function 'lce_bwd_finish_dx'
// FITS-DAG: lce_bwd_dz: {{.*}}: fits
// FITS-DAG: lce_bwd_dx: {{.*}}: fits
// FITS-DAG: lce_bwd_dw: {{.*}}: fits
func.func @grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %b: tensor<?xbf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = bf16, compute = f32, strategy = "vocab_chunked"} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16>
}
