// tile band=B: the tensor-core product kernels (lce_bwd_dz, lce_fused_z,
// dX, dW) take their tiles in bands of row blocks whose A rows (BM × the
// product's depth, 16-bit) fit B KiB, each band column by column. The grid
// stays the same; each block turns blockIdx.x + blockIdx.y · gridDim.x into
// its tile (a persistent block likewise its sweep's index), past the last
// tile (a short last chunk) none. B is in [1,
// 1048576] (1 GiB), and the SIMT strategy (no tile grid of its own) refuses it.
// RUN: split-file %s %t
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma band=32768" \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=ATTR
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma band=32768" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=BAND
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=ROWS
// RUN: lossjit-opt %t/grad.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=auto band=32768 persistent=132" \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=AUTO
// RUN: not lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_80 matmul=simt band=64" 2>&1 \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=SIMT
// RUN: not lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma band=1048577" 2>&1 \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=LARGE

//--- grad.mlir
// ATTR-LABEL: func.func @grad
// ATTR:         #loss.gpu_config<schedule = chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 4, block_cols = 64, block_k = 32, grad_cols = 128, band = 32768>
// The grids are a block per tile as without bands.
// BAND:         loss.launch_plans
// BAND-SAME:    grid = ["cdiv(C,128)", "cdiv(V,64)", "1"], {{.*}}name = "lce_bwd_dz"
// BAND-SAME:    grid = ["cdiv(C,128)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dx"
// BAND-SAME:    grid = ["(cdiv(V,128))*(1-SINGLE)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dw"
// BAND-SAME:    grid = ["(cdiv(V,128))*SINGLE", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dw_single"
// dW's depth is the chunk's rows: a band holds 32 MiB / (128 rows · 2 bytes
// · depth) row blocks, at least one and at most all (V's); the block's
// linear index blockIdx.x + blockIdx.y · gridDim.x picks the band, then the
// row within it (row blocks first) and the column, in i32. The row blocks
// and the depth pass an empty asm, so that a persistent sweep recomputes
// the band per tile rather than keeping it live through the tile loop.
// BAND-LABEL:   gpu.func @lce_bwd_dw
// BAND:           %[[ROWBLOCKS:.*]] = arith.ceildivui %arg6
// BAND-DAG:       %[[BY:.*]] = gpu.block_id y
// BAND-DAG:       %[[GX:.*]] = gpu.grid_dim x
// BAND:           %[[BYR:.*]] = arith.muli %[[BY]], %[[GX]]
// BAND:           %[[BX:.*]] = gpu.block_id x
// BAND:           %[[LINEAR:.*]] = arith.addi %[[BX]], %[[BYR]]
// BAND:           %[[R32:.*]] = arith.index_castui %[[ROWBLOCKS]] : index to i32
// BAND:           %[[PINNED:.*]] = llvm.inline_asm has_side_effects "", "=r,0" %[[R32]]
// BAND:           %[[R:.*]] = arith.index_castui %[[PINNED]] : i32 to index
// BAND:           %[[DEPTH:.*]] = arith.subi %arg5, %arg4
// BAND:           llvm.inline_asm has_side_effects "", "=r,0"
// BAND:           arith.constant 33554432 : index
// BAND:           %[[FIT:.*]] = arith.divui
// BAND:           %[[ATLEAST:.*]] = arith.maxui %[[FIT]], %c1
// BAND:           %[[G:.*]] = arith.minui %[[ATLEAST]], %[[R]]
// BAND:           %[[G32:.*]] = arith.index_castui %[[G]] : index to i32
// BAND:           %[[AT:.*]] = arith.index_castui %[[LINEAR]] : index to i32
// BAND:           %[[PERBAND:.*]] = arith.muli %[[G32]], %{{.*}} : i32
// BAND:           arith.divui %[[AT]], %[[PERBAND]] : i32
// BAND:           arith.remui %{{.*}}, %{{.*}} : i32
// BAND:         gpu.return
// Without bands a block's tile is its (blockIdx.x, blockIdx.y) as before.
// ROWS-LABEL:   gpu.func @lce_bwd_dw
// ROWS:           %[[BX:.*]] = gpu.block_id x
// ROWS-NEXT:      %[[C:.*]] = arith.constant 128 : index
// ROWS-NEXT:      arith.muli %[[BX]], %[[C]]
// ROWS:         gpu.return
// AUTO:         module = "grad_lce_bwd_dz"
// AUTO-SAME:    tile = "block_rows=128,threads=256,splits=8,matmul=wgmma,stages=3,block_cols=128,block_k=64,grad_cols=128,tma=1,persistent=132,band=32768"
// SIMT: error: loss-select-lowering-config: tile band is for tensor-core products (matmul mma_sync or wgmma), got matmul simt
// LARGE: error: loss-select-lowering-config: tile band must be 0 (row blocks first through the grid) or the KiB of A rows a band of tiles keeps in L2, in [1, 1048576], got 1048577
func.func @grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xbf16>, tensor<?x?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?x?xbf16>
}
