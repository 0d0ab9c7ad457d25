// matmul=wgmma tma=2 (warp specialization) through the whole GPU pipeline
// for sm_90a: every tensor-core kernel gets a producer warp after its
// consumer warpgroups (288 threads for 128 rows, no register cap of our
// own: a launch counts 9 warps as 12, so ptxas's 168 for .maxntid 288 is
// also the most that launches — launch-fits.py checks every kernel). The
// producer's first thread waits on the "empty" ring, announces a stage's
// bytes on the "full" ring and issues its TMA boxes; the consumers wait on
// "full", multiply, and release the stage the retired wgmma group read
// with one arrival per warpgroup — no block barrier in their k loop. ptxas
// -arch=sm_90a takes every kernel with zero spills (at 2 stages and at 3)
// and without advisories that it serialized the wgmmas (C7514-C7518).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=2" -o %t/f16.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=2" -o %t/bf16.out.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=2" -o %t/deep.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/f16.mlir
// RUN: %extract-ptx %t/f16.mlir %t/k/f16 > /dev/null
// RUN: %extract-ptx %t/bf16.out.mlir %t/k/bf16 > /dev/null
// RUN: %extract-ptx %t/deep.mlir %t/k/deep > /dev/null
// (Each ptxas log is checked for spills and, by launch-fits.py, for the
// registers that a launch can give: nvvm.maxnreg 224 assembled, then failed
// every launch on an H200 with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.)
// RUN: %ptxas -v -arch=sm_90a %t/k/deep/fwd_*.ptx -o %t/a.cubin > %t/ptxas1.log 2>&1
// RUN: FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas1.log
// RUN: %python %S/../launch-fits.py %t/k/deep/fwd_*.ptx < %t/ptxas1.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/deep/grad_*.ptx -o %t/a.cubin > %t/ptxas2.log 2>&1
// RUN: FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas2.log
// RUN: %python %S/../launch-fits.py %t/k/deep/grad_*.ptx < %t/ptxas2.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/deep/fused_*.ptx -o %t/a.cubin > %t/ptxas3.log 2>&1
// RUN: FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas3.log
// RUN: %python %S/../launch-fits.py %t/k/deep/fused_*.ptx < %t/ptxas3.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/grad_*.ptx -o %t/a.cubin > %t/ptxas4.log 2>&1
// RUN: %python %S/../launch-fits.py %t/k/bf16/grad_*.ptx < %t/ptxas4.log | FileCheck %s --check-prefix=FITS
// RUN: FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas4.log
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=WS,WS64 --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=WS,WS64 --input-file=%t/k/bf16/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=WS,WS128 --input-file=%t/k/f16/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=WS,WS128 --input-file=%t/k/bf16/fused_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=ROWS --input-file=%t/k/f16/fwd_lce_combine.ptx
// Every kernel of a variant (one ptxas call links them: one variant at a time).
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C751

// The plan launches the tensor-core kernels with the producer warp and
// lce_combine in blocks of one warp (a thread per row).
// PLAN: block = [288, 1, 1], grid = ["cdiv(N,128)", "S", "1"], module = "fwd_lce_partial"
// PLAN-SAME: block = [32, 1, 1], grid = ["cdiv(N,32)", "1", "1"], module = "fwd_lce_combine"

// WS:          .maxntid 288, 1, 1
// WS-NOT:      .maxnreg
// Two rings of two stages: full (one arrival, the expect_tx) and empty
// (one arrival per consumer warpgroup).
// WS-COUNT-4:  mbarrier.init.shared.b64
// WS:          bar.sync 0;
// The consumers: wait for a full stage, multiply, release — no block
// barrier in between.
// WS:          mbarrier.try_wait.parity.shared.b64
// WS-NOT:      bar.sync
// WS64:        wgmma.mma_async.sync.aligned.m64n64k16
// WS128:       wgmma.mma_async.sync.aligned.m64n128k16
// WS-NOT:      bar.sync
// WS:          mbarrier.arrive.shared.b64
// The producer: the stage's bytes announced, then its boxes.
// WS:          mbarrier.arrive.expect_tx.shared.b64
// WS-NEXT:     cvta.shared
// WS:          cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// Its waits for empty stages, on the parity of the previous use.
// WS:          mbarrier.try_wait.parity.shared.b64
// WS:          mbarrier.arrive.expect_tx.shared.b64

// ROWS:        .maxntid 32, 1, 1
// ROWS-NOT:    .maxnreg

// FITS:        : 288 threads x {{[0-9]+}} registers: fits
// FITS-NOT:    DOES NOT LAUNCH

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
