// The fused op's row chunks on tensor-core tiles: lce_fused_z folds each
// tile's row statistics as it stores the raw logits (merged across a quad's
// lanes by xor shuffles, one writer a state), and lce_fused_lse merges those
// few states a row instead of reading the row's V raw logits again. A SIMT
// tile (one column a thread) and the vocabulary chunks keep their kernels.
// RUN: lossjit-opt %s --split-input-file --loss-select-lowering-config="target=gpu matmul=mma_sync" --loss-lower-to-gpu | FileCheck %s --check-prefix=MMA
// RUN: lossjit-opt %s --split-input-file --loss-select-lowering-config="target=gpu chip=sm_90a matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3" --loss-lower-to-gpu=chip=sm_90a | FileCheck %s --check-prefix=WG
// RUN: lossjit-opt %s --split-input-file --loss-select-lowering-config="target=gpu matmul=simt" --loss-lower-to-gpu | FileCheck %s --check-prefix=SIMT

// mma_sync's 64x64 tile: two warp columns of 32, so a tile leaves two states
// a row (RowSharing::groups); the chunk rows are sized with their 8 bytes.
// MMA-LABEL: loss.launch_plans = {fused_bf16 = {
// MMA-SAME:    ["CMAX", "max(1,min(N,(WB-N*4)/(V*6+(cdiv(V,64)*2)*8)))"]
// MMA-SAME:    {args = ["x", "w", "dz", "tile_max", "tile_sum", "chunk_begin", "chunk_end", "V", "D"]{{.*}}name = "lce_fused_z"
// MMA-SAME:    {args = ["labels", "dz", "tile_max", "tile_sum", "lse", "loss_rows", "chunk_begin", "chunk_end", "V"], block = [512, 1, 1], grid = ["cdiv(C,32)", "1", "1"]{{.*}}name = "lce_fused_lse"
// MMA-SAME:    {count = "C*(cdiv(V,64)*2)", dtype = "f32", name = "tile_max"}, {count = "C*(cdiv(V,64)*2)", dtype = "f32", name = "tile_sum"}
// The product's epilogue: raw logits out, the quad's states merged by
// shuffles (masks 1, 2), then the leader lanes store each row's state at
// (column tile · 2 + warp column) · chunk rows + chunk row.
// MMA-LABEL: gpu.func @lce_fused_z(
// MMA:         memref.store %{{.*}}, %arg2[%{{.*}}] : memref<?xf32>
// MMA:         gpu.shuffle  xor %{{.*}}, %c1_i32
// MMA:         gpu.shuffle  xor %{{.*}}, %c2_i32
// MMA:         %[[CHUNK:.*]] = arith.subi %arg6, %arg5 : index
// MMA:         %[[TILE:.*]] = arith.divui %{{.*}}, %c64{{.*}} : index
// MMA:         %[[SLOT0:.*]] = arith.muli %[[TILE]], %c2{{.*}} : index
// MMA:         %[[SLOT:.*]] = arith.addi %[[SLOT0]], %{{.*}} : index
// MMA:         scf.if
// MMA:         scf.if
// MMA:         %[[AT0:.*]] = arith.muli %[[SLOT]], %[[CHUNK]] : index
// MMA:         %[[AT:.*]] = arith.addi %[[AT0]], %{{.*}} : index
// MMA-NEXT:    memref.store %{{.*}}, %arg3[%[[AT]]] : memref<?xf32>
// MMA-NEXT:    memref.store %{{.*}}, %arg4[%[[AT]]] : memref<?xf32>
// MMA:         gpu.return
// lce_fused_lse: warp q of a block merges states q, q + 16, … of its lane's
// row (none past the chunk), then warp 0 the 16 warps' in order. No loop
// reads the raw logits: only the label's one.
// MMA-LABEL: gpu.func @lce_fused_lse(
// MMA:         %[[STATES:.*]] = arith.ceildivui %arg8, %c64 : index
// MMA:         arith.muli %[[STATES]], %c2 : index
// MMA:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16 iter_args
// MMA-NOT:       memref.load %arg1
// MMA:           memref.load %arg2[
// MMA-NEXT:      memref.load %arg3[
// MMA-NOT:       memref.load %arg1
// MMA:         scf.yield
// MMA:         gpu.barrier
// MMA-COUNT-1: memref.load %arg1[
// MMA-NOT:     memref.load %arg1[
// MMA:         gpu.return

// wgmma's rows live in one warp's quads: one state a row per 256-column tile.
// WG-LABEL: loss.launch_plans = {fused_bf16 = {
// WG-SAME:    ["CMAX", "max(1,min(N,(WB-N*4)/(V*6+(cdiv(V,256))*8)))"]
// WG-SAME:    {count = "C*(cdiv(V,256))", dtype = "f32", name = "tile_max"}, {count = "C*(cdiv(V,256))", dtype = "f32", name = "tile_sum"}
// WG-LABEL: gpu.func @lce_fused_z(
// WG:         gpu.shuffle  xor
// WG-LABEL: gpu.func @lce_fused_lse(
// WG:         arith.ceildivui %arg8, %c256 : index
// WG:         gpu.barrier

// A SIMT tile's thread holds one column: lce_fused_lse folds the raw logits.
// SIMT-LABEL: loss.launch_plans = {fused_bf16 = {
// SIMT-SAME:    ["CMAX", "max(1,min(N,(WB-N*4)/(V*4)))"]
// SIMT-SAME:    {args = ["labels", "dz", "lse", "loss_rows", "chunk_begin", "chunk_end", "V"]{{.*}}name = "lce_fused_lse"
// SIMT-NOT:     tile_max
// SIMT-LABEL: gpu.func @lce_fused_z(
// SIMT-NOT:     gpu.shuffle
// SIMT:         gpu.return
func.func @fused_bf16(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// The fused op in vocabulary chunks has no lce_fused_z: its lse comes from
// the forward's partials (lce_partial, lce_combine), so no tile states.
// MMA-LABEL: loss.launch_plans = {fused_vocab = {
// MMA-SAME:    chunk_dim = "V"
// MMA-SAME:    name = "lce_combine"
// MMA-NOT:     tile_max
// MMA-NOT:     lce_fused_lse
// MMA-LABEL: gpu.module @fused_vocab_lce_partial
func.func @fused_vocab(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = bf16, compute = f32, strategy = "vocab_chunked"} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>
}
