// matmul=wgmma through the whole GPU pipeline for sm_90a: the forward (f16
// and bf16), the chunked backward (bf16, with a bias) and the fused
// forward+backward (f16) form every product — the logits, dZ·W and dZᵀ·X —
// with wgmma.mma_async from shared-memory descriptors, keep f32 math, and
// ptxas -arch=sm_90a takes every kernel of all four with zero spills and
// without its advisories that it serialized the wgmmas (C7514-C7518: a k
// loop that the no-k path joins while a group is still in flight, see
// Wgmma::retiredLoop).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma" -o %t/f16.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma" -o %t/bf16.out.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/f16.mlir
// RUN: %extract-ptx %t/f16.mlir %t/k/f16 > /dev/null
// RUN: %extract-ptx %t/bf16.out.mlir %t/k/bf16 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --implicit-check-not=mma.sync \
// RUN:   --implicit-check-not=ldmatrix --check-prefixes=PARTIAL,F16 --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --implicit-check-not=mma.sync \
// RUN:   --implicit-check-not=ldmatrix --check-prefixes=PARTIAL,BF16 --input-file=%t/k/bf16/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=SYNC --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=DRAIN --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DX --input-file=%t/k/bf16/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=DW --input-file=%t/k/bf16/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefix=FZ --input-file=%t/k/f16/fused_lce_fused_z.ptx
// Every kernel of a variant (one ptxas call links them: one variant at a time).
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// matmul=auto (what the JIT builds on a Hopper): the ops take 128-column
// logit tiles on the TMA ring, the backward with a bias too (its dZ kernel
// spilled before it went through its fragment column by column); every
// kernel still assembles without spills, and the registers ptxas gave it
// are ones a launch can give (launch-fits.py: the check the hardware makes).
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=auto" -o %t/auto-f16.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=auto" -o %t/auto-bf16.mlir
// RUN: FileCheck %s --check-prefix=AUTO --input-file=%t/auto-bf16.mlir
// RUN: %extract-ptx %t/auto-f16.mlir %t/k/auto-f16 > /dev/null
// RUN: %extract-ptx %t/auto-bf16.mlir %t/k/auto-bf16 > /dev/null
// RUN: FileCheck %s --check-prefix=WIDE --input-file=%t/k/auto-bf16/fwd_lce_partial.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/auto-f16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/auto-f16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/auto-f16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/auto-bf16/fwd_*.ptx -o %t/a.cubin > %t/ptxas1.log 2>&1
// RUN: FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas1.log
// RUN: %python %S/../launch-fits.py %t/k/auto-bf16/fwd_*.ptx < %t/ptxas1.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/auto-bf16/grad_*.ptx -o %t/a.cubin > %t/ptxas2.log 2>&1
// RUN: FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas2.log
// RUN: %python %S/../launch-fits.py %t/k/auto-bf16/grad_*.ptx < %t/ptxas2.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/auto-bf16/fused_*.ptx -o %t/a.cubin > %t/ptxas3.log 2>&1
// RUN: FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas3.log
// RUN: %python %S/../launch-fits.py %t/k/auto-bf16/fused_*.ptx < %t/ptxas3.log | FileCheck %s --check-prefix=FITS
// The strategy exists on sm_90a only.
// RUN: not lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90 matmul=wgmma" -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CHIP

// Two operand rings of 4 stages × (128 + 64) lines × 32 k of 16-bit
// elements, unpadded; the gradient products' (128 + 128) lines.
// PLAN: name = "lce_partial"{{.*}}shared_bytes = 49152
// PLAN: name = "lce_bwd_dx"{{.*}}shared_bytes = 65536
// PLAN: name = "lce_bwd_dw"{{.*}}shared_bytes = 65536

// Two warpgroups (256 threads) per block; k tiles of 32 are two m64n64k16
// steps between a wgmma fence and a commit; one group stays in flight
// (wait_group 1) while the next step refills the stage the one before read,
// and all are waited for before the accumulators are read. No mma.sync, no ldmatrix, no FMA
// loop (--implicit-check-not): wgmma reads shared memory itself.
// PARTIAL-LABEL: .visible .entry lce_partial(
// PARTIAL:       .maxntid 256, 1, 1
// PARTIAL:       cp.async.cg.shared.global [{{%rd[0-9]+}}], [{{%rd[0-9]+}}], 16, {{%r[0-9]+}};
// PARTIAL:       wgmma.fence.sync.aligned;
// F16-COUNT-2:   wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16
// BF16-COUNT-2:  wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// PARTIAL:       wgmma.commit_group.sync.aligned;
// PARTIAL-NEXT:  wgmma.wait_group.sync.aligned {{[[:space:]]*}}1;
// PARTIAL:       ret;
// DRAIN:         wgmma.wait_group.sync.aligned {{[[:space:]]*}}0;

// Each step waits for its tile's copies (two tiles are copied ahead, so one
// group may stay pending), fences them for the async proxy and only then
// barriers (LLVM places this after the products: the loop is rotated).
// SYNC:       cp.async.wait_group {{[[:space:]]*}}1;
// SYNC-NEXT:  fence.proxy.async.shared::cta;
// SYNC-NEXT:  bar.sync {{[[:space:]]*}}0;

// dX = dZ·W: A (dZ) K-major, B (W) N-major (imm-trans-b 1). dW = dZᵀ·X: both
// MN-major (imm-trans-a 1, imm-trans-b 1). The last four operands are
// scale-a, scale-b, trans-a, trans-b.
// DX-LABEL: .visible .entry lce_bwd_dx(
// The gradient products take the 128-column tile of grad_cols.
// DX-COUNT-2: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 1;
// DW-LABEL: .visible .entry lce_bwd_dw(
// DW-COUNT-2: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1, 1;
// FZ-LABEL: .visible .entry lce_fused_z(
// FZ-COUNT-2: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 0, 0;

// AUTO:       fwd = {{.*}}tile = "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=3,block_cols=128,block_k=64,grad_cols=128,tma=1"
// AUTO:       grad = {{.*}}tile = "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=3,block_cols=128,block_k=64,grad_cols=128,tma=1"
// AUTO:       fused = {{.*}}tile = "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=3,block_cols=128,block_k=64,grad_cols=128,tma=1"
// FITS:        : 256 threads x {{[0-9]+}} registers: fits
// FITS-NOT:    DOES NOT LAUNCH

// WIDE-LABEL: .visible .entry lce_partial(
// WIDE-COUNT-2: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16

// FWD-COUNT-3:   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// GRAD-COUNT-7:  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FUSED-COUNT-10: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// CHIP: error: loss-select-lowering-config: matmul wgmma needs chip sm_90a (wgmma and its descriptors are specific to it), got 'sm_90'

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
