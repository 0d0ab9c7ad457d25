// The gradient op through loss-lower-to-gpu (chunked only) and
// loss-lower-to-cpu (chunked and recompute): kernels, chunked plans, errors.
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --loss-lower-to-gpu --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=GPU
// RUN: lossjit-opt %s --loss-select-lowering-config=target=cpu --loss-lower-to-cpu --split-input-file --verify-diagnostics 2>&1 | FileCheck %s --check-prefix=CPU

// GPU-LABEL: module attributes {gpu.container_module, loss.launch_plans = {chunked_f32 = {
// GPU-SAME:    chunk = "C", constants = {WB = 1048576 : i64}, derived = {{\[\[}}"CMAX", "max(1,min(N,(WB-N*4)/(V*4)))"], ["C", "max(1,min(CMAX,cdiv(cdiv(N,max(1,cdiv(N,CMAX))),4)*4))"]]
// GPU-SAME:    entry_args = ["x", "w", "labels", "lse", "grad_loss"], entry_results = ["grad_w", "grad_x"]
// GPU-SAME:    {args = ["labels", "grad_loss", "grow", "N", "V"], {{.*}}name = "lce_bwd_scale", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["x", "w", "labels", "lse", "grow", "dz", "chunk_begin", "chunk_end", "V", "D"], block = [128, 1, 1], grid = ["cdiv(C,4)", "cdiv(V,128)", "1"], {{.*}}name = "lce_bwd_dz", parallel = "none", per_chunk = true
// GPU-SAME:    {args = ["dz", "w", "grad_x", "chunk_begin", "chunk_end", "V", "D"], block = [128, 1, 1], grid = ["cdiv(C,4)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dx"
// f32 storage sums dW straight into grad_w: no accumulator, no finish kernel.
// GPU-SAME:    {args = ["dz", "x", "grad_w", "chunk_begin", "chunk_end", "V", "D"], block = [128, 1, 1], grid = ["cdiv(V,4)", "cdiv(D,128)", "1"], {{.*}}name = "lce_bwd_dw", parallel = "none", per_chunk = true, shared_bytes = 0 : i64}]
// GPU-SAME:    strategy = "chunked"
// GPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}, {count = "C*V", dtype = "f32", name = "dz"}]
// GPU:         gpu.module @chunked_f32_lce_bwd_scale
// GPU:           gpu.func @lce_bwd_scale({{.*}}) workgroup(%{{.*}} : memref<128xi32, #gpu.address_space<workgroup>>) kernel
// GPU:         gpu.module @chunked_f32_lce_bwd_dz
// GPU:           math.exp2
// GPU:         gpu.module @chunked_f32_lce_bwd_dx
// GPU:         gpu.module @chunked_f32_lce_bwd_dw
// GPU-NOT:     gpu.module
// The host sets the threads' packing scratch aside from the budget.
// CPU-LABEL: module attributes {loss.launch_plans = {chunked_f32 = {
// CPU-SAME:    derived = {{\[\[}}"C", "max(1,min(N,(WB-N*4-min(4194304,WB/16))/(V*4)))"]]
// CPU-SAME:    name = "lce_bwd_dz", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_bwd_dx_chunk", parallel = "rows", per_chunk = true
// CPU-SAME:    name = "lce_bwd_dw_chunk", parallel = "vocab", per_chunk = true
// dX = dZ·W and dW = dZᵀ·X are packed products (CpuVector::accumulatePacked):
// 64-byte aligned stack blocks for packed A (64 lines × 512 k), packed B
// (1 MiB) and the edge tile (MR × NR); B packed one vector<NR> per k step;
// the register tile carries MR vector<NR> accumulators through the k loop,
// per k one vector of packed B, MR broadcasts of packed A, one fma each.
// CPU:         func.func @lce_bwd_dx_chunk(
// CPU-NEXT:      memref.alloca() {alignment = 64 : i64} : memref<32768xf32>
// CPU:           memref.alloca() {alignment = 64 : i64} : memref<262144xf32>
// CPU:           memref.alloca() {alignment = 64 : i64} : memref<64xf32>
// CPU:           vector.load %{{.*}} : memref<?xf32>, vector<8xf32>
// CPU:           vector.store %{{.*}} : memref<?xf32>, vector<8xf32>
// CPU:           scf.for {{.*}} -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
// CPU:             %[[DXB:.*]] = vector.load %{{.*}} : memref<?xf32>, vector<8xf32>
// CPU:             %[[DXA:.*]] = memref.load %{{.*}} : memref<?xf32>
// CPU-NEXT:        %[[DXS:.*]] = vector.broadcast %[[DXA]] : f32 to vector<8xf32>
// CPU-NEXT:        math.fma %[[DXS]], %[[DXB]], %{{.*}} : vector<8xf32>
// CPU:         func.func @lce_bwd_dw_chunk(
// CPU-NEXT:      memref.alloca() {alignment = 64 : i64} : memref<32768xf32>
// CPU:           scf.for {{.*}} -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
// CPU:             %[[DWB:.*]] = vector.load %{{.*}} : memref<?xf32>, vector<8xf32>
// CPU:             %[[DWA:.*]] = memref.load %{{.*}} : memref<?xf32>
// CPU-NEXT:        %[[DWS:.*]] = vector.broadcast %[[DWA]] : f32 to vector<8xf32>
// CPU-NEXT:        math.fma %[[DWS]], %[[DWB]], %{{.*}} : vector<8xf32>
func.func @chunked_f32(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f32, compute = f32, workspace_bytes = 1048576 : i64} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dw, %dx : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// Only grad_w with a bias, 16-bit storage: f32 accumulators and a finish
// kernel. lce_bwd_zero launches blocks only for N = 0 (where no chunk runs):
// with rows lce_bwd_dw starts the sums at the first chunk. Where the rows
// fit one chunk (SINGLE = 1) lce_bwd_dw_single rounds the sums into grad_w
// and grad_bias instead: the accumulators are sized 0, and lce_bwd_dw and
// lce_bwd_finish launch nothing.
// GPU-LABEL: loss.launch_plans = {weights_only = {
// GPU-SAME:    ["SINGLE", "min(N,1)-min(1,max(0,N-C))"]]
// GPU-SAME:    entry_results = ["grad_w", "grad_bias"]
// GPU-SAME:    {args = ["dw_acc", "db_acc", "N", "V", "D"], block = [128, 1, 1], grid = ["cdiv(max(V*D,V),128)*(1-min(N,1))", "1", "1"], {{.*}}name = "lce_bwd_zero", parallel = "none", per_chunk = false
// GPU-SAME:    {args = ["dz", "x", "dw_acc", "db_acc", "chunk_begin", "chunk_end", "V", "D"], block = [128, 1, 1], grid = ["(cdiv(V,4))*(1-SINGLE)", "max(1,cdiv(D,128))", "1"], {{.*}}name = "lce_bwd_dw", parallel = "none", per_chunk = true
// GPU-SAME:    {args = ["dz", "x", "grad_w", "grad_bias", "chunk_begin", "chunk_end", "V", "D"], block = [128, 1, 1], grid = ["(cdiv(V,4))*SINGLE", "max(1,cdiv(D,128))", "1"], {{.*}}name = "lce_bwd_dw_single", parallel = "none", per_chunk = true
// GPU-SAME:    {args = ["dw_acc", "grad_w", "db_acc", "grad_bias", "V", "D"], block = [128, 1, 1], grid = ["(cdiv(max(V*D,V),128))*(1-SINGLE)", "1", "1"], {{.*}}name = "lce_bwd_finish"
// GPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}, {count = "C*V", dtype = "f32", name = "dz"}, {count = "(V*D)*(1-SINGLE)", dtype = "f32", name = "dw_acc"}, {count = "(V)*(1-SINGLE)", dtype = "f32", name = "db_acc"}]
// GPU-NOT:     lce_bwd_dx
// In the first chunk (chunk_begin = 0) an element's sum starts from 0: the
// accumulator is read only in later chunks.
// GPU:         gpu.module @weights_only_lce_bwd_dw
// GPU:           %[[LATER:.*]] = arith.cmpi ne, %{{.*}}, %c0{{.*}} : index
// GPU:           %[[READ:.*]] = arith.andi %{{.*}}, %[[LATER]] : i1
// GPU-NEXT:      scf.if %[[READ]] -> (f32) {
// GPU-NEXT:        memref.load
// GPU:           } else {
// GPU-NEXT:        arith.constant 0.000000e+00 : f32
// The single chunk's kernel has no accumulator: it reads dZ (f32) and x,
// and its sums are rounded to f16 where they are stored, into grad_w and
// grad_bias.
// GPU:         gpu.module @weights_only_lce_bwd_dw_single
// GPU:           gpu.func @lce_bwd_dw_single(%[[DZ:.*]]: memref<?xf32>, %[[X:.*]]: memref<?xf16>, %[[GW:.*]]: memref<?xf16>, %[[GB:.*]]: memref<?xf16>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// GPU-NOT:       gpu.module
// GPU:           %[[R:.*]] = arith.truncf %{{.*}} : f32 to f16
// GPU-NEXT:      memref.store %[[R]], %[[GW]][%{{.*}}] : memref<?xf16>
// GPU:           memref.store %{{.*}}, %[[GB]][%{{.*}}] : memref<?xf16>
// GPU:         gpu.module @weights_only_lce_bwd_finish
// 16-bit storage with strategy auto chunks the vocabulary on the host (no V×D
// f32 dW accumulator): dZ of every row per chunk, dW rounded per chunk.
// CPU-LABEL: loss.launch_plans = {weights_only = {
// CPU-SAME:    chunk = "C", chunk_dim = "V"
// CPU-SAME:    derived = {{\[\["C", "max\(1,min\(V,\(WB-\(N\*4\+min\(4194304,WB/16\)\)\)/\(max\(1,N\+D\)\*4\)\)\)"\]\]}}
// CPU-SAME:    name = "lce_bwd_scale", parallel = "none", per_chunk = false
// CPU-SAME:    name = "lce_bwd_dz_v", parallel = "rows", per_chunk = true
// CPU-SAME:    {args = ["dz", "x", "dw_acc", "grad_w", "grad_bias", "col_begin", "col_end", "chunk_begin", "chunk_end", "N", "D"], {{.*}}name = "lce_bwd_dw_v", parallel = "vocab", per_chunk = true
// CPU-SAME:    workspaces = [{count = "N", dtype = "f32", name = "grow"}, {count = "N*C", dtype = "f32", name = "dz"}, {count = "C*D", dtype = "f32", name = "dw_acc"}]
// CPU-NOT:     lce_bwd_dx
func.func @weights_only(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?xf16>) {
  %dw, %db = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g bias %b {storage = f16, compute = f32, needs_input = false} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32>, tensor<?xf16> -> tensor<?x?xf16>, tensor<?xf16>
  return %dw, %db : tensor<?x?xf16>, tensor<?xf16>
}

// -----

// A gradient of lse (z-loss) is one more [N] input: the kernels that form dZ
// read it, and with tensor cores lce_bwd_scale bounds G by |g| + |a|.
// GPU-LABEL: module attributes {gpu.container_module, loss.launch_plans = {with_grad_lse = {
// GPU-SAME:    entry_args = ["x", "w", "labels", "lse", "grad_loss", "grad_lse"]
// GPU-SAME:    {args = ["x", "w", "labels", "lse", "grow", "grad_lse", "dz", "chunk_begin", "chunk_end", "V", "D"], {{.*}}name = "lce_bwd_dz"
// GPU-SAME:    grad_lse = "true"
// GPU-SAME:    {dtype = "f32", name = "grad_lse", output = false, shape = ["N"]}
// CPU-LABEL: module attributes {loss.launch_plans = {with_grad_lse = {
// CPU-SAME:    entry_args = ["x", "w", "labels", "lse", "grad_loss", "grad_lse"]
// CPU-SAME:    {args = ["x", "w", "labels", "lse", "grow", "grad_lse"
func.func @with_grad_lse(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>, %a: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g grad_lse %a : tensor<?xf32> {storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf32>, tensor<?x?xf32>
  return %dx, %dw : tensor<?x?xf32>, tensor<?x?xf32>
}
