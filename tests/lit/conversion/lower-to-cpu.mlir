// loss-lower-to-cpu: a fused function becomes a nested module of host
// kernels (lce_rows over a row range, lce_reduce) and a launch plan.
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu block-rows=4" --loss-lower-to-cpu --split-input-file --verify-diagnostics | FileCheck %s
// RUN: lossjit-opt %s --loss-select-lowering-config="target=cpu block-rows=2 vector-width=16" --loss-lower-to-cpu --split-input-file --verify-diagnostics \
// RUN:   | FileCheck %s --check-prefix=WIDE
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=cpu vector-width=0" --loss-lower-to-cpu --split-input-file 2>&1 | FileCheck %s --check-prefix=WIDTH0
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=cpu block-rows=17 vector-width=65" --loss-lower-to-cpu --split-input-file 2>&1 | FileCheck %s --check-prefix=ROWS17

// The values must be printed as numbers.
// WIDTH0: error: loss-select-lowering-config: block-rows must be in [1, 16] and vector-width in [1, 64], got 8 and 0{{$}}
// ROWS17: error: loss-select-lowering-config: block-rows must be in [1, 16] and vector-width in [1, 64], got 17 and 65{{$}}

// CHECK-LABEL: module attributes {loss.launch_plans = {f16_mean = {
// CHECK-SAME:    constants = {}, {{.*}}dims = ["N", "V", "D"], entry = "f16_mean", entry_args = ["x", "w", "labels"],
// CHECK-SAME:    kernels = [
// CHECK-SAME:      {args = ["x", "w", "labels", "lse", "loss_rows", "row_begin", "row_end", "V", "D"], block = [1, 1, 1], grid = ["1", "1", "1"], module = "f16_mean_kernels", name = "lce_rows", parallel = "rows"{{[^}]*}}shared_bytes = 0 : i64},
// CHECK-SAME:      {args = ["labels", "loss_rows", "loss", "N"], block = [1, 1, 1], grid = ["1", "1", "1"], module = "f16_mean_kernels", name = "lce_reduce", parallel = "none"{{[^}]*}}shared_bytes = 0 : i64}],
// CHECK-SAME:    options = {bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", {{[^}]*}}reduction = "mean"},
// CHECK-SAME:    tile = "cpu:block_rows=4,block_cols=1,vector_width=8,panel_blocks=16,vocab_tile=64,reduce_lanes=128",
// CHECK-SAME:    workspaces = [{count = "N", dtype = "f32", name = "loss_rows"}]}}}
// CHECK-NOT:   func.func @f16_mean(
// CHECK:       module @f16_mean_kernels {
// lce_rows(x, w, labels, lse, loss_rows, row_begin, row_end, V, D)
// CHECK-NEXT:    func.func @lce_rows(%{{.*}}: memref<?xf16>, %{{.*}}: memref<?xf16>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index) {
// Rows go in panels of block-rows·16 = 64 whose running (max, sum, Neumaier
// compensation) live in a 3·64 stack array while the vocabulary is swept in
// tiles; each tile's local (max, sum) merges into it compensated. f16 rows
// of x are widened to f32 once per panel (into a stack copy of at most
// 256 Ki floats: vector<16> loads and extf), so the micro-kernel never
// widens per broadcast. Each tile of W is packed once per panel into a
// stack buffer (64·D f32): k-major blocks of 8 columns, read in chunks of
// 16 along k (vector<16> f16 loads widened to f32) and transposed by
// rounds of vector shuffles (zips); inside, register blocks
// of block-rows rows run the outer-product micro-kernel: per k one
// vector<8> of packed W, each row's f32 x broadcast, one fma per row; then
// the columns left over as scalar dots in the same (ascending k, one fma
// per term) order.
// CHECK:           memref.alloca(%{{.*}}) : memref<?xf32>
// CHECK:           memref.alloca(%{{.*}}) : memref<?xf32>
// CHECK:           memref.alloca() : memref<192xf32>
// CHECK:           scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{[0-9]+}} {
// CHECK:             vector.load %{{.*}} : memref<?xf16>, vector<16xf16>
// CHECK-NEXT:        arith.extf %{{.*}} : vector<16xf16> to vector<16xf32>
// CHECK-NEXT:        vector.store %{{.*}} : memref<?xf32>, vector<16xf32>
// CHECK:             scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{c64.*}} {
// CHECK:               vector.load %{{.*}} : memref<?xf16>, vector<16xf16>
// CHECK-NEXT:          arith.extf %{{.*}} : vector<16xf16> to vector<16xf32>
// CHECK:               vector.shuffle %{{.*}}, %{{.*}} [0, 16, 1, 17, {{.*}}] : vector<16xf32>, vector<16xf32>
// CHECK:               scf.for %{{.*}} = %arg{{[0-9]+}} to %{{[0-9]+}} step %{{c4(_[0-9]+)?}} {
// CHECK:             scf.for {{.*}} -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
// CHECK:             %[[WP:.*]] = vector.load %{{.*}} : memref<?xf32>, vector<8xf32>
// CHECK:             %[[XF:.*]] = memref.load %{{.*}} : memref<?xf32>
// CHECK-NEXT:        %[[XB:.*]] = vector.broadcast %[[XF]] : f32 to vector<8xf32>
// CHECK-NEXT:        math.fma %[[XB]], %[[WP]], %{{.*}} : vector<8xf32>
// CHECK-NOT:         vector.reduction
// CHECK:             math.exp2
// CHECK:             math.log2
// CHECK:           return
// Fixed-order reduction over 128 lanes, like the GPU block tree.
// Lane sums are Neumaier-compensated: a sum and a compensation per lane.
// CHECK:         func.func @lce_reduce(%{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index) {
// CHECK:           memref.alloca() : memref<128xf32>
// CHECK:           memref.alloca() : memref<128xf32>
// CHECK:           memref.alloca() : memref<128xi32>
// CHECK:           arith.sitofp
// CHECK-NEXT:      arith.divf
// CHECK:           return
// WIDE-LABEL:  loss.launch_plans = {f16_mean = {
// WIDE-SAME:     tile = "cpu:block_rows=2,block_cols=1,vector_width=16,panel_blocks=16,vocab_tile=64,reduce_lanes=128"
// WIDE:        func.func @lce_rows
// WIDE:          scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{c32.*}} {
// WIDE:          scf.for %{{.*}} = %arg{{[0-9]+}} to %{{[0-9]+}} step %{{c2(_[0-9]+)?}} {
// WIDE:          scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>) {
// WIDE:          vector.load %{{.*}} : memref<?xf32>, vector<16xf32>
// WIDE:          math.fma {{.*}} : vector<16xf32>
// WIDE-NOT:      vector.reduction
// WIDE:        func.func @lce_reduce
func.func @f16_mean(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// f32 storage: no widening; bias is read per column.
// CHECK-LABEL: loss.launch_plans = {f32_sum_bias = {
// CHECK-SAME:    {args = ["x", "w", "bias", "labels", "lse", "loss_rows", "row_begin", "row_end", "V", "D"], {{.*}}name = "lce_rows", parallel = "rows"
// CHECK-SAME:    options = {bias = "true", dtype = "f32", ignore_index = "-100", label_type = "i32", {{[^}]*}}reduction = "sum"}
// CHECK:       module @f32_sum_bias_kernels {
// CHECK-NEXT:    func.func @lce_rows(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi32>,
// CHECK:           vector.load %{{.*}} : memref<?xf32>, vector<8xf32>
// CHECK-NOT:       arith.extf
// CHECK:         func.func @lce_reduce(%{{.*}}: memref<?xi32>,
// CHECK-NOT:       arith.divf
// CHECK:           return
func.func @f32_sum_bias(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi32>, %b: tensor<?xf32>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {reduction = #loss<reduction sum>, storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi32>, tensor<?xf32> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// reduction = none: lce_rows writes "loss" directly, no lce_reduce, no workspace.
// CHECK-LABEL: loss.launch_plans = {bf16_none = {
// CHECK-SAME:    kernels = [{args = ["x", "w", "labels", "lse", "loss", "row_begin", "row_end", "V", "D"], {{.*}}name = "lce_rows", parallel = "rows"{{[^}]*}}shared_bytes = 0 : i64}]
// CHECK-SAME:    workspaces = []
// CHECK:       module @bf16_none_kernels {
// CHECK:         func.func @lce_rows(%{{.*}}: memref<?xbf16>,
// CHECK:           arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// CHECK-NOT:     func.func @lce_reduce
func.func @bf16_none(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi64>) -> tensor<?xf32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {reduction = #loss<reduction none>, storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?xf32>
  return %l : tensor<?xf32>
}

// -----

// Negative: the function computes more than the fused op.
func.func @computes_more(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{loss-lower-to-cpu: cannot lower @computes_more: the function computes more than the fused op ('arith.mulf'); run loss-fuse-linear-cross-entropy and canonicalize first}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  %s = arith.mulf %l, %l : tensor<f32>
  return %s : tensor<f32>
}

// -----

// Negative: an unfused chain cannot be lowered; the pass says so instead of
// leaving it behind silently.
func.func @not_fused(%lp: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{'loss.nll' op was not fused into loss.linear_cross_entropy; loss-lower-to-cpu lowers fused functions only}}
  %l = loss.nll %lp, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
