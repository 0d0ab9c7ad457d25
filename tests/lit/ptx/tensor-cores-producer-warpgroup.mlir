// matmul=wgmma tma=3 through the whole GPU pipeline for sm_90a: the
// tensor-core kernels get a producer warpgroup after their two consumer
// warpgroups (384 threads) and state the registers each thread launches
// with (.maxnreg 168: the whole file). Around a sweep of tiles the roles
// are the two branches of one if/else: the producer keeps 40 registers
// (setmaxnreg.dec) and the consumers take 232 (setmaxnreg.inc), so the
// gradient products' 128x256 tiles (128 accumulators per thread) and the
// logit epilogues fit. Then the consumers synchronize on their named
// barrier, give the registers back and arrive on the handback barrier
// (bar.arrive 2, 384), on which the producer waits (bar.sync 2, 384)
// before it takes its own back — were it done first, it would take back
// what the consumers had not taken yet, and they would wait forever.
// ptxas -arch=sm_90a takes every kernel with zero spills, without
// ignoring a setmaxnreg (C7508) and without serializing the wgmmas
// (C7514-C7518), at 3 and 4 stages and persistent (its sweeps in 32 MiB
// bands: the band's tile order per tile, in i32 and kept in the loop);
// every kernel launches.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=3 grad-cols=256 tma=3" -o %t/f16.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=4 grad-cols=256 tma=3 persistent=132 band=32768" -o %t/bf16.out.mlir
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/f16.mlir
// RUN: %extract-ptx %t/f16.mlir %t/k/f16 > /dev/null
// RUN: %extract-ptx %t/bf16.out.mlir %t/k/bf16 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=ROLES,ROLES128 --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=ROLES,ROLES256 --input-file=%t/k/bf16/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=ROLES,ROLES256 --input-file=%t/k/f16/fused_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=HANDBACK --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=PRODUCER --input-file=%t/k/f16/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=HANDBACK --input-file=%t/k/bf16/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=PRODUCER --input-file=%t/k/bf16/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=ROWS --input-file=%t/k/f16/fwd_lce_combine.ptx
// Every kernel of a variant (one ptxas call links them: one variant at a time).
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/grad_*.ptx -o %t/a.cubin > %t/ptxas1.log 2>&1
// RUN: FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C75 --input-file=%t/ptxas1.log
// RUN: %python %S/../launch-fits.py %t/k/f16/grad_*.ptx < %t/ptxas1.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/f16/fused_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/bf16/fused_*.ptx -o %t/a.cubin > %t/ptxas2.log 2>&1
// RUN: FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C75 --input-file=%t/ptxas2.log
// RUN: %python %S/../launch-fits.py %t/k/bf16/fused_*.ptx < %t/ptxas2.log | FileCheck %s --check-prefix=FITS

// The tensor-core kernels launch the producer warpgroup too; lce_combine
// runs in blocks of one warp (a thread per row).
// PLAN: block = [384, 1, 1], grid = ["cdiv(N,128)", "S", "1"], module = "fwd_lce_partial"
// PLAN-SAME: block = [32, 1, 1], grid = ["cdiv(N,32)", "1", "1"], module = "fwd_lce_combine"

// ROLES:       .maxntid 384, 1, 1
// ROLES-NEXT:  .maxnreg 168
// (Block layout orders the roles' code freely: each fact on its own.)
// The consumers take the producer's registers and multiply; the producer
// keeps 40 while it copies.
// ROLES-DAG:   setmaxnreg.inc.sync.aligned.u32 232;
// ROLES-DAG:   mbarrier.try_wait.parity.shared.b64
// ROLES128-DAG: wgmma.mma_async.sync.aligned.m64n128k16
// ROLES256-DAG: wgmma.mma_async.sync.aligned.m64n256k16
// ROLES-DAG:   setmaxnreg.dec.sync.aligned.u32 40;
// ROLES-DAG:   cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// ROLES-DAG:   bar.sync 1, 256;
// The consumers' return: their registers, then the arrival.
// HANDBACK:      setmaxnreg.dec.sync.aligned.u32 168;
// HANDBACK-NEXT: // begin inline asm
// HANDBACK-NEXT: bar.arrive 2, 384;
// The producer's: it waits for that arrival before its increase.
// PRODUCER:      bar.sync 2, 384;
// PRODUCER-NEXT: setmaxnreg.inc.sync.aligned.u32 168;

// ROWS:        .maxntid 32, 1, 1
// ROWS-NOT:    .maxnreg

// FITS:        : 384 threads x 168 registers: fits
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
