// tile persistent=P: the tensor-core product kernels of the backward
// (lce_bwd_dz, dX, dW) and of the fused op (lce_fused_z) launch at most P
// blocks along x, each sweeping tiles blockIdx.x, + gridDim.x, … of the
// grid a block per tile would have; the forward's lce_partial and the row
// kernels keep their grids. P must be positive and at most 65536, and the
// SIMT strategy (whose blocks loop over their own tiles) refuses it.
// RUN: split-file %s %t
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma persistent=132" \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=ATTR
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma persistent=132" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=PLAN
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma" \
// RUN:   --loss-lower-to-gpu=chip=sm_90a | FileCheck %t/grad.mlir --check-prefix=TILES
// RUN: lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_80 matmul=mma_sync persistent=216" \
// RUN:   --loss-lower-to-gpu=chip=sm_80 | FileCheck %t/grad.mlir --check-prefix=MMA
// The pipeline passes knobs given with matmul=auto to the selection, over
// each op's automatic choice (they were dropped before).
// RUN: lossjit-opt %t/grad.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=auto persistent=132 splits=4" \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=AUTO
// RUN: not lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_80 matmul=simt persistent=8" 2>&1 \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=SIMT
// RUN: not lossjit-opt %t/grad.mlir --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma persistent=65537" 2>&1 \
// RUN:   | FileCheck %t/grad.mlir --check-prefix=LARGE

//--- grad.mlir
// ATTR-LABEL: func.func @grad
// ATTR:         #loss.gpu_config<schedule = chunked, matmul = wgmma, block_rows = 128, threads = 256, splits = 8, stages = 4, block_cols = 64, block_k = 32, grad_cols = 128, persistent = 132>
// PLAN:        loss.launch_plans
// PLAN-SAME:    grid = ["min(cdiv(C,128)*cdiv(V,64),132)", "1", "1"], {{.*}}name = "lce_bwd_dz"
// PLAN-SAME:    grid = ["min(cdiv(C,128)*cdiv(D,128),132)", "1", "1"], {{.*}}name = "lce_bwd_dx"
// PLAN-SAME:    grid = ["(min(cdiv(V,128)*cdiv(D,128),132))*(1-SINGLE)", "1", "1"], {{.*}}name = "lce_bwd_dw"
// PLAN-SAME:    grid = ["(min(cdiv(V,128)*cdiv(D,128),132))*SINGLE", "1", "1"], {{.*}}name = "lce_bwd_dw_single"
// PLAN:         gpu.func @lce_bwd_dz
// PLAN:           gpu.grid_dim x
// TILES:        loss.launch_plans
// TILES-SAME:   grid = ["cdiv(C,128)", "cdiv(V,64)", "1"], {{.*}}name = "lce_bwd_dz"
// TILES-SAME:   grid = ["cdiv(C,128)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dx"
// TILES-SAME:   grid = ["(cdiv(V,128))*(1-SINGLE)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dw"
// MMA:          loss.launch_plans
// MMA-SAME:     grid = ["min(cdiv(C,64)*cdiv(V,64),216)", "1", "1"], {{.*}}name = "lce_bwd_dz"
// AUTO:         grid = ["min(cdiv(C,128)*cdiv(V,128),132)", "1", "1"], module = "grad_lce_bwd_dz"
// AUTO-SAME:    tile = "block_rows=128,threads=256,splits=4,matmul=wgmma,stages=3,block_cols=128,block_k=64,grad_cols=128,tma=1,persistent=132"
// SIMT: error: loss-select-lowering-config: tile persistent is for tensor-core products (matmul mma_sync or wgmma), got matmul simt
// LARGE: error: loss-select-lowering-config: tile persistent must be 0 (a block per tile) or the most blocks a product kernel launches, in [1, 65536], got 65537
func.func @grad(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xbf16>, tensor<?x?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?x?xbf16>
}
