// tile cluster=2 (wgmma with tma 2 or 3): lce_partial runs in thread-block
// clusters of two row blocks of one vocabulary split. The kernel carries
// known_cluster_size (the PTX's .reqnctapercluster) and its grid rounds the
// row blocks up to whole clusters; the W map's box is half the tile's
// columns: each block's producer copies its half of every W tile into both
// blocks' stages (multicast_mask 0b11). Each "empty" barrier counts the
// consumer warpgroups of both blocks (4), which release a stage to both
// producers (mbarrier.get, inttoptr, mapa to rank 0 and 1, arrive). A
// fence.mbarrier.init and a cluster barrier follow the inits; another ends
// the sweep. lce_combine has no cluster; in the backward lce_bwd_dz pairs
// its row blocks the same way, and so do dX and dW, whose shared operand is
// MN-major (each block multicasts its half of the tile's 64-line boxes).
// RUN: split-file %s %t
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 cluster=2" \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=ATTR
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 cluster=2" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/forward.mlir --check-prefix=IR
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2 cluster=4" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/forward.mlir --check-prefix=QUAD
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=48 tma=2 cluster=4" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=QUARTER
// RUN: lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/forward.mlir --check-prefix=PAIRLESS
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=3 cluster=2" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=2 grad-cols=64 tma=3 cluster=2" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=ONEBOX
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=3 cluster=2 persistent=132" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=SWEPT
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=3 cluster=4 block-cols=256 grad-cols=256 persistent=131" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=SWEPT4
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 stages=2 tma=3 cluster=2 band=32768" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=BANDED
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma cluster=3 tma=2" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=THREE
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-k=64 cluster=2 tma=1" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=TMA1
// RUN: not lossjit-opt %t/forward.mlir --loss-select-lowering-config="target=gpu chip=sm_80 matmul=mma_sync cluster=2" 2>&1 \
// RUN:   | FileCheck %t/forward.mlir --check-prefix=MMA

//--- forward.mlir
// ATTR-LABEL: func.func @forward
// ATTR:         #loss.gpu_config<schedule = forward, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 2, block_cols = 128, block_k = 64, grad_cols = 128, tma = 2, cluster = 2>
// IR:           loss.launch_plans
// IR-SAME:      grid = ["2*cdiv(N,256)", "S", "1"], module = "forward_lce_partial"
// IR-SAME:      {box = [64, 64], buffer = "w", dims = ["D", "V"], name = "w_tma_64x64", swizzle = 128 : i64}
// IR-LABEL:     gpu.func @lce_partial
// IR-SAME:        known_cluster_size = array<i32: 2, 1, 1>
// IR:             %[[FULL:.*]] = nvgpu.mbarrier.create
// IR:             %[[EMPTY:.*]] = nvgpu.mbarrier.create
// IR:             %[[FOUR:.*]] = arith.constant 4 : index
// IR:             nvgpu.mbarrier.init %[[EMPTY]][%{{.*}}], %[[FOUR]]
// IR:             nvvm.fence.mbarrier.init
// IR:             nvvm.cluster.arrive{{$}}
// IR-NEXT:        nvvm.cluster.wait
// The consumers release a stage on both blocks' empty barriers.
// IR:             %[[ADDRESS:.*]] = nvgpu.mbarrier.get %[[EMPTY]][%{{.*}}] {{.*}} -> i64
// IR-NEXT:        %[[LOCAL:.*]] = llvm.inttoptr %[[ADDRESS]] : i64 to !llvm.ptr<3>
// IR:             %[[MINE:.*]] = nvvm.mapa %[[LOCAL]], %{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// IR-NEXT:        nvvm.mbarrier.arrive %[[MINE]] : !llvm.ptr<7>
// IR:             %[[PEER:.*]] = nvvm.mapa %[[LOCAL]], %{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// IR-NEXT:        nvvm.mbarrier.arrive %[[PEER]] : !llvm.ptr<7>
// The producer: its own x box, then its half of the W box to both blocks.
// IR:             %[[RANK:.*]] = gpu.cluster_block_id x
// IR:             arith.muli %[[RANK]], %{{.*}} : index
// IR:             nvgpu.tma.async.load {{.*}} multicast_mask = %{{.*}} : <tensor = memref<64x64xf16, 3>
// IR:             nvvm.cluster.arrive{{$}}
// IR-NEXT:        nvvm.cluster.wait
// IR:             gpu.return
// IR-LABEL:     gpu.func @lce_combine
// IR-NOT:         known_cluster_size
// IR-NOT:         nvvm.cluster
// IR:             gpu.return
// Clusters of four: grid.x in whole clusters, a quarter W box (32 rows) a
// block, each empty barrier counting the 2 consumer warpgroups of all 4
// blocks, releases to ranks 0 … 3, multicast to all (mask 0b1111).
// QUAD:         grid = ["4*cdiv(N,512)", "S", "1"], module = "forward_lce_partial"
// QUAD-SAME:    {box = [64, 32], buffer = "w", dims = ["D", "V"], name = "w_tma_32x64", swizzle = 128 : i64}
// QUAD-LABEL:   gpu.func @lce_partial
// QUAD-SAME:      known_cluster_size = array<i32: 4, 1, 1>
// QUAD:           %[[FULL:.*]] = nvgpu.mbarrier.create
// QUAD:           %[[EMPTY:.*]] = nvgpu.mbarrier.create
// QUAD:           %[[EIGHT:.*]] = arith.constant 8 : index
// QUAD:           nvgpu.mbarrier.init %[[EMPTY]][%{{.*}}], %[[EIGHT]]
// QUAD-COUNT-4:   nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<7>
// QUAD:           nvgpu.tma.async.load {{.*}} multicast_mask = %c15_i16 : <tensor = memref<32x64xf16, 3>
// QUAD:           gpu.return
// QUARTER: error: loss-select-lowering-config: matmul wgmma: with tile cluster 4 each block copies block_cols / 4 lines of every W tile in whole swizzle atoms of 8, so block_cols must be a multiple of 32, got 48
// Without the knob: a block per row block, whole W boxes, no cluster.
// PAIRLESS:     grid = ["cdiv(N,128)", "S", "1"], module = "forward_lce_partial"
// PAIRLESS-LABEL: gpu.func @lce_partial
// PAIRLESS-NOT:   known_cluster_size
// PAIRLESS-NOT:   multicast_mask
// PAIRLESS-NOT:   nvvm.cluster
// PAIRLESS:       gpu.return
// THREE: error: loss-select-lowering-config: tile cluster must be 0 (no clusters), 2 or 4 (row blocks that multicast the tiles they share), got 3
// TMA1: error: loss-select-lowering-config: tile cluster is for matmul wgmma with tma 2 or 3 (a producer copies the multicast shares), got matmul wgmma and tma 1
// MMA: error: loss-select-lowering-config: tile cluster is for matmul wgmma with tma 2 or 3 (a producer copies the multicast shares), got matmul mma_sync and tma 0
func.func @forward(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

//--- grad.mlir
// The backward's logits product (dZ) pairs row blocks of a column as
// lce_partial does. dX and dW pair row blocks of a column block too: their
// B tile (Wᵀ, Xᵀ: MN-major, 128 columns) is two 64-line boxes, one
// multicast by each block. At 64 gradient columns (one box) they keep a
// block per tile. With persistent blocks or bands they pair too: a
// cluster's blocks take the tiles of one column block together (groups of
// two row blocks), so a persistent grid is whole clusters of at most
// `persistent` blocks (132: 66 clusters; 131 in fours: 32), and a banded
// grid is the block-per-tile one (the band order picks each cluster's
// group).
// CHECK:       grid = ["2*cdiv(C,256)", "cdiv(V,64)", "1"], module = "grad_lce_bwd_dz"
// CHECK:       grid = ["2*cdiv(C,256)", "cdiv(D,128)", "1"], module = "grad_lce_bwd_dx"
// CHECK:       grid = ["(2*cdiv(V,256))*(1-SINGLE)", "cdiv(D,128)", "1"], module = "grad_lce_bwd_dw"
// CHECK:       grid = ["(2*cdiv(V,256))*SINGLE", "cdiv(D,128)", "1"], module = "grad_lce_bwd_dw_single"
// CHECK-LABEL: gpu.func @lce_bwd_dz
// CHECK-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// CHECK:         nvvm.fence.mbarrier.init
// CHECK:         nvvm.mapa
// CHECK:         multicast_mask = %{{.*}} : <tensor = memref<32x64xbf16, 3>
// CHECK:         nvvm.cluster.wait
// CHECK:         gpu.return
// CHECK-LABEL: gpu.func @lce_bwd_dx
// CHECK-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// CHECK:         nvvm.fence.mbarrier.init
// CHECK:         nvvm.mapa
// CHECK:         %[[RANK:.*]] = gpu.cluster_block_id x
// CHECK:         arith.muli %[[RANK]], %c1{{(_[0-9]+)?}} : index
// CHECK:         multicast_mask = %{{.*}} : <tensor = memref<64x64xbf16, 3>
// CHECK:         nvvm.cluster.wait
// CHECK:         gpu.return
// CHECK-LABEL: gpu.func @lce_bwd_dw(
// CHECK-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// CHECK:         multicast_mask = %{{.*}} : <tensor = memref<64x64xbf16, 3>
// CHECK:         nvvm.cluster.wait
// CHECK:         gpu.return
// CHECK-LABEL: gpu.func @lce_bwd_dw_single(
// CHECK-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// CHECK:         multicast_mask = %{{.*}} : <tensor = memref<64x64xbf16, 3>
// CHECK:         nvvm.cluster.wait
// CHECK:         gpu.return
// ONEBOX:       grid = ["2*cdiv(C,256)", "cdiv(V,64)", "1"], module = "grad_lce_bwd_dz"
// ONEBOX:       grid = ["cdiv(C,128)", "cdiv(D,64)", "1"], module = "grad_lce_bwd_dx"
// ONEBOX:       grid = ["(cdiv(V,128))*(1-SINGLE)", "cdiv(D,64)", "1"], module = "grad_lce_bwd_dw"
// ONEBOX-LABEL: gpu.func @lce_bwd_dx
// ONEBOX-NOT:     known_cluster_size
// ONEBOX-NOT:     multicast_mask
// ONEBOX:         gpu.return
// ONEBOX-LABEL: gpu.func @lce_bwd_dw
// ONEBOX-NOT:     known_cluster_size
// ONEBOX-NOT:     multicast_mask
// ONEBOX:         gpu.return
// SWEPT:        grid = ["2*min(cdiv(C,256)*cdiv(V,64),66)", "1", "1"], module = "grad_lce_bwd_dz"
// SWEPT:        grid = ["2*min(cdiv(C,256)*cdiv(D,128),66)", "1", "1"], module = "grad_lce_bwd_dx"
// SWEPT:        grid = ["(2*min(cdiv(V,256)*cdiv(D,128),66))*(1-SINGLE)", "1", "1"], module = "grad_lce_bwd_dw"
// SWEPT-LABEL: gpu.func @lce_bwd_dz
// SWEPT-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// The cluster's first group and the clusters' stride in groups.
// SWEPT-DAG:     %[[BLOCK:.*]] = gpu.block_id x
// SWEPT-DAG:     %[[GRID:.*]] = gpu.grid_dim x
// SWEPT-DAG:     arith.divui %[[BLOCK]], %c2{{(_[0-9]+)?}} : index
// SWEPT-DAG:     arith.divui %[[GRID]], %c2{{(_[0-9]+)?}} : index
// SWEPT:         multicast_mask
// SWEPT:         nvvm.cluster.wait
// SWEPT:         gpu.return
// SWEPT-LABEL: gpu.func @lce_bwd_dx
// SWEPT-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// SWEPT:         multicast_mask
// SWEPT:         gpu.return
// SWEPT-LABEL: gpu.func @lce_bwd_dw
// SWEPT-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// SWEPT:         multicast_mask
// SWEPT:         gpu.return
// SWEPT4:       grid = ["4*min(cdiv(C,512)*cdiv(V,256),32)", "1", "1"], module = "grad_lce_bwd_dz"
// SWEPT4:       grid = ["4*min(cdiv(C,512)*cdiv(D,256),32)", "1", "1"], module = "grad_lce_bwd_dx"
// SWEPT4-LABEL: gpu.func @lce_bwd_dz
// SWEPT4-SAME:    known_cluster_size = array<i32: 4, 1, 1>
// SWEPT4-LABEL: gpu.func @lce_bwd_dx
// SWEPT4-SAME:    known_cluster_size = array<i32: 4, 1, 1>
// SWEPT4-LABEL: gpu.func @lce_bwd_dw
// SWEPT4-SAME:    known_cluster_size = array<i32: 4, 1, 1>
// BANDED:       grid = ["2*cdiv(C,256)", "cdiv(V,64)", "1"], module = "grad_lce_bwd_dz"
// BANDED:       grid = ["2*cdiv(C,256)", "cdiv(D,128)", "1"], module = "grad_lce_bwd_dx"
// BANDED-LABEL: gpu.func @lce_bwd_dz
// BANDED-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// BANDED:         multicast_mask
// BANDED:         gpu.return
// BANDED-LABEL: gpu.func @lce_bwd_dx
// BANDED-SAME:    known_cluster_size = array<i32: 2, 1, 1>
// BANDED-LABEL: gpu.func @lce_bwd_dw
// BANDED-SAME:    known_cluster_size = array<i32: 2, 1, 1>
func.func @grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xbf16>, tensor<?x?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?x?xbf16>
}
