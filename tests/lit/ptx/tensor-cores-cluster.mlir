// tile cluster=2 through the whole GPU pipeline for sm_90a: lce_partial in
// thread-block clusters of two row blocks (.explicitcluster,
// .reqnctapercluster 2, 1, 1: a plain cuLaunchKernel runs it in clusters),
// each block's producer copying its half of every W tile into both blocks
// (cp.async.bulk.tensor ... .multicast::cluster with a 16-bit CTA mask), the
// consumers releasing each stage to both producers (mapa.shared::cluster,
// mbarrier.arrive.shared::cluster), the inits made visible by
// fence.mbarrier_init before a cluster barrier, and a cluster barrier after
// the sweep. ptxas -arch=sm_90a takes every kernel with zero spills on a
// producer warp (tma=2) and warpgroup (tma=3), 64 and 128 columns, with a
// bias and softcap too, and lce_combine and lce_reduce keep no cluster. The
// backward's lce_bwd_dz pairs its row blocks the same way, and so do dX and
// dW, whose shared operand (Wᵀ, Xᵀ) is MN-major: each block multicasts its
// half of the tile's 64-line boxes (128 columns: one each; 256: two each).
// (At 64 columns, one box, they keep a block of their own:
// transforms/select-lowering-config-cluster.mlir.) Clusters of four on
// 256-column tiles: every product, a quarter of each shared tile a block.
// Persistent and banded at once, the products' clusters take their tiles
// together (GpuSchedule::forEachTile), still with zero spills.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 cluster=2" -o %t/ws.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-k=64 stages=3 tma=2 cluster=2" -o %t/ws64.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=3 grad-cols=256 tma=3 cluster=2" -o %t/lend.mlir
// RUN: lossjit-opt %t/bf16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=4" -o %t/quad.mlir
// RUN: sed -n '/^func.func @grad(/,/^}$/p' %t/bf16.mlir > %t/grad16.mlir
// RUN: lossjit-opt %t/grad16.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3 cluster=2 persistent=132 band=32768" -o %t/swept.mlir
// RUN: FileCheck %s --check-prefix=SWEPTPLAN --input-file=%t/swept.mlir
// RUN: %extract-ptx %t/swept.mlir %t/k/swept > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/swept/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/swept/grad_lce_bwd_dw.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/swept/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %extract-ptx %t/quad.mlir %t/k/quad > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=QUAD --input-file=%t/k/quad/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=QUAD --input-file=%t/k/quad/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=QUAD --input-file=%t/k/quad/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=QUAD --input-file=%t/k/quad/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=QUADREL --input-file=%t/k/quad/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=QUADREL --input-file=%t/k/quad/grad_lce_bwd_dw.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/quad/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/quad/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/quad/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %extract-ptx %t/ws.mlir %t/k/ws > /dev/null
// RUN: %extract-ptx %t/ws64.mlir %t/k/ws64 > /dev/null
// RUN: %extract-ptx %t/lend.mlir %t/k/lend > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/ws/fwd_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/lend/biased_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=RELEASE --input-file=%t/k/ws/fwd_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=RELEASE --input-file=%t/k/lend/biased_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=ALONE --input-file=%t/k/ws/fwd_lce_combine.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/ws/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/lend/grad_lce_bwd_dz.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/ws/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/ws/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/lend/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/lend/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s --check-prefix=RELEASE --input-file=%t/k/ws/grad_lce_bwd_dx.ptx
// RUN: FileCheck %s --check-prefix=RELEASE --input-file=%t/k/lend/grad_lce_bwd_dw.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefix=PAIR --input-file=%t/k/ws64/grad_lce_bwd_dx.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/lend/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws64/grad_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=GRAD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/fwd_*.ptx -o %t/a.cubin > %t/ptxas1.log 2>&1
// RUN: FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas1.log
// RUN: %python %S/../launch-fits.py %t/k/ws/fwd_*.ptx < %t/ptxas1.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws64/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/ws64/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/lend/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751
// RUN: %ptxas -v -arch=sm_90a %t/k/lend/biased_*.ptx -o %t/a.cubin > %t/ptxas2.log 2>&1
// RUN: FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C751 --input-file=%t/ptxas2.log
// RUN: %python %S/../launch-fits.py %t/k/lend/biased_*.ptx < %t/ptxas2.log | FileCheck %s --check-prefix=FITS

// The persistent products in clusters: the plan names each one's cluster
// and marks it persistent (the launchers run at most the clusters that fit
// at once, cuOccupancyMaxActiveClusters); the row kernels take neither.
// SWEPTPLAN:      module = "grad_lce_bwd_zero", name = "lce_bwd_zero", parallel = "none", per_chunk = false, shared_bytes
// SWEPTPLAN-SAME: block = [384, 1, 1], cluster = 2 : i64, grid = ["2*min(cdiv(C,256)*cdiv(V,256),66)", "1", "1"], module = "grad_lce_bwd_dz", name = "lce_bwd_dz", parallel = "none", per_chunk = true, persistent = true,
// SWEPTPLAN-SAME: block = [384, 1, 1], cluster = 2 : i64, grid = ["2*min(cdiv(C,256)*cdiv(D,256),66)", "1", "1"], module = "grad_lce_bwd_dx", name = "lce_bwd_dx", parallel = "none", per_chunk = true, persistent = true,
// SWEPTPLAN-SAME: block = [384, 1, 1], cluster = 2 : i64, grid = ["(2*min(cdiv(V,256)*max(1,cdiv(D,256)),66))*(1-SINGLE)", "1", "1"], module = "grad_lce_bwd_dw", name = "lce_bwd_dw", parallel = "none", per_chunk = true, persistent = true,
// SWEPTPLAN-SAME: block = [256, 1, 1], grid = ["(cdiv(max(V*D,V),256))*(1-SINGLE)", "1", "1"], module = "grad_lce_bwd_finish", name = "lce_bwd_finish", parallel = "none", per_chunk = false, shared_bytes

// PAIR:          .explicitcluster
// PAIR-NEXT:     .reqnctapercluster 2, 1, 1
// PAIR:          fence.mbarrier_init.release.cluster;
// PAIR:          barrier.cluster.arrive;
// PAIR-NEXT:     barrier.cluster.wait;
// A consumer's release: its stage's barrier in both blocks (ranks 0 and 1).
// RELEASE-DAG:   mapa.shared::cluster.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, 0;
// RELEASE-DAG:   mapa.shared::cluster.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, 1;
// RELEASE-DAG:   mbarrier.arrive.shared::cluster.b64 _, [{{%rd[0-9]+}}]
// PAIR:          mov.u32 {{.*}}%cluster_ctaid.x;
// PAIR:          cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [{{.*}}], [{{.*}}], [{{.*}}], %rs{{[0-9]+}};
// PAIR:          barrier.cluster.arrive;
// PAIR-NEXT:     barrier.cluster.wait;

// (Plain TMA copies address shared::cluster too.)
// ALONE-NOT:     {{reqnctapercluster|multicast|barrier\.cluster|mapa}}

// Clusters of four (256 columns): a quarter of each shared tile a block,
// released on all four blocks' barriers.
// QUAD:          .explicitcluster
// QUAD-NEXT:     .reqnctapercluster 4, 1, 1
// QUAD:          fence.mbarrier_init.release.cluster;
// QUAD:          cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [{{.*}}], [{{.*}}], [{{.*}}], %rs{{[0-9]+}};
// QUAD:          barrier.cluster.arrive;
// QUAD-NEXT:     barrier.cluster.wait;
// QUADREL-DAG:   mapa.shared::cluster.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, 0;
// QUADREL-DAG:   mapa.shared::cluster.u64 {{%rd[0-9]+}}, {{%rd[0-9]+}}, 3;
// QUADREL-DAG:   mbarrier.arrive.shared::cluster.b64 _, [{{%rd[0-9]+}}]

// FITS:          threads x {{[0-9]+}} registers: fits
// FITS-NOT:      DOES NOT LAUNCH

// FWD-COUNT-3:   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// GRAD-COUNT-7:  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @fwd(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @biased(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %b: tensor<?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = f16, compute = f32, softcap = 30.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

func.func @grad(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>) {
  %dx, %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
  return %dx, %dw, %db : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16>
}
