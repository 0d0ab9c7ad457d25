// 128-column logit tiles with a bias through the whole GPU pipeline for
// sm_90a: wgmma TMA (tma=1, 3 stages of k 64), warp specialization (tma=2)
// and a persistent grid. Two things kept ptxas from spilling here:
// - the cp.async copies of each k step read the thread's id afresh (an
//   empty "=r,0" asm): LLVM hoisted their pieces' 64-bit offsets out of the
//   k loop, live through the wgmmas and the epilogue (lce_partial with
//   tma=1: 255 registers and 264 bytes of spill stores);
// - lce_bwd_dz / lce_fused_z go through their fragment column by column,
//   so a column's bias lives for its own rows only: loading every column's
//   first kept 64 of them live (dZ: 255 registers and 56 bytes).
// Every kernel of the forward, the backward and the fused op, f16 and
// bf16: zero spills, no advisory that ptxas serialized the wgmmas. The
// warp-specialized forward (288 threads get at most 168 registers at
// launch: a launch counts 9 warps as 12) spilled 388 bytes in lce_partial
// with a bias while whole tiles were masked; tensor-cores-whole-tiles.mlir
// checks it now.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=3 tma=1" -o %t/tma.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2" -o %t/ws.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 persistent=132" -o %t/persist.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/tma.mlir
// RUN: %extract-ptx %t/tma.mlir %t/k/tma > /dev/null
// RUN: %extract-ptx %t/ws.mlir %t/k/ws > /dev/null
// RUN: %extract-ptx %t/persist.mlir %t/k/persist > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=FILL --input-file=%t/k/tma/fwd_lce_partial.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/tma/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/tma/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/tma/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/persist/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/persist/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751

// The logits' tiles are 128 columns wide in the forward and the backward.
// PLAN:      grid = ["cdiv(N,128)", "S", "1"], module = "fwd_lce_partial"
// PLAN:      grid = ["cdiv(C,128)", "cdiv(V,128)", "1"], module = "grad_lce_bwd_dz"
// PLAN:      grid = ["cdiv(C,128)", "cdiv(V,128)", "1"], module = "fused_lce_fused_z"

// The cp.async fallback's k loop (after the TMA path's products): once
// the stage landed and the block synchronized, the step's copies start
// from the thread's id through the empty asm, not from offsets formed
// before the loop.
// FILL:      wgmma.mma_async.sync.aligned.m64n128k16
// FILL:      fence.proxy.async.shared::cta;
// FILL-NEXT: bar.sync 0;
// FILL-NOT:  cp.async.cg
// FILL:      // begin inline asm
// FILL-NOT:  cp.async.cg
// FILL:      // end inline asm
// FILL:      cp.async.cg.shared.global

// FWD-COUNT-3:   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// GRAD-COUNT-7:  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FUSED-COUNT-10: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @fwd(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

func.func @grad(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %dx, %dw, %db : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}

// -----

func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %l, %lse, %dx, %dw, %db = loss.linear_cross_entropy_with_grad %x, %w, %y, %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf16> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %l, %lse, %dx, %dw, %db : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}
