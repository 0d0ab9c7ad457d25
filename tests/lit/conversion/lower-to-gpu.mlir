// loss-lower-to-gpu: a function whose body is one loss.linear_cross_entropy
// becomes gpu.modules of kernels plus a loss.launch_plans entry.
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --loss-lower-to-gpu --split-input-file --verify-diagnostics | FileCheck %s
// RUN: lossjit-opt %s --loss-select-lowering-config="target=gpu block-rows=2 threads=64 splits=3" --loss-lower-to-gpu --split-input-file --verify-diagnostics \
// RUN:   | FileCheck %s --check-prefix=SMALL
// RUN: lossjit-opt %s --loss-select-lowering-config="target=gpu block-rows=8 threads=256 splits=16" --loss-lower-to-gpu --split-input-file --verify-diagnostics \
// RUN:   | FileCheck %s --check-prefix=BIG
// Determinism: no atomics (or warp-level reductions of unspecified order)
// in any kernel, and only exp2/log2 (which have approx intrinsics).
// RUN: lossjit-opt %s --loss-select-lowering-config=target=gpu --loss-lower-to-gpu --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=SAFE \
// RUN:   --implicit-check-not=atomic --implicit-check-not=gpu.all_reduce --implicit-check-not=gpu.subgroup_reduce \
// RUN:   --implicit-check-not='{{math\.(exp|log)[^2]}}' --implicit-check-not=math.powf
// SAFE-COUNT-11: gpu.module @
// SAFE-NOT:      gpu.module @
// Invalid tiles are rejected before anything is built.
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu threads=100" --loss-lower-to-gpu --split-input-file 2>&1 | FileCheck %s --check-prefix=THREADS100
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu threads=16" --loss-lower-to-gpu --split-input-file 2>&1 | FileCheck %s --check-prefix=THREADS16
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu block-rows=0" --loss-lower-to-gpu --split-input-file 2>&1 | FileCheck %s --check-prefix=ROWS0
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu splits=0" --loss-lower-to-gpu --split-input-file 2>&1 | FileCheck %s --check-prefix=SPLITS0
// RUN: not lossjit-opt %s --loss-select-lowering-config="target=gpu block-rows=16 threads=1024" --loss-lower-to-gpu --split-input-file 2>&1 | FileCheck %s --check-prefix=SHMEM

// THREADS100: error: loss-select-lowering-config: tile threads must be a power of two in [32, 1024], got 100
// THREADS16: error: loss-select-lowering-config: tile threads must be a power of two in [32, 1024], got 16
// ROWS0: error: loss-select-lowering-config: tile block_rows must be in [1, 16], got 0
// SPLITS0: error: loss-select-lowering-config: tile splits must be in [1, 1024], got 0
// SHMEM: error: loss-select-lowering-config: tile block_rows*threads*8 {{.*}}exceed 48 KiB

// f16, mean, i64 labels, default tile (block-rows=4 threads=128 splits=8):
// three kernels, each in its own gpu.module named after the function.
// CHECK-LABEL: module attributes {gpu.container_module, loss.launch_plans = {f16_mean = {
// CHECK-SAME:    constants = {S = 8 : i64}, {{.*}}dims = ["N", "V", "D"], entry = "f16_mean", entry_args = ["x", "w", "labels"],
// CHECK-SAME:    kernels = [
// CHECK-SAME:      {args = ["x", "w", "part_max", "part_sum", "N", "V", "D"], block = [128, 1, 1], grid = ["cdiv(N,4)", "S", "1"], module = "f16_mean_lce_partial", name = "lce_partial", parallel = "none"{{[^}]*}}shared_bytes = 0 : i64},
// CHECK-SAME:      {args = ["x", "w", "labels", "part_max", "part_sum", "lse", "loss_rows", "N", "V", "D", "S"], block = [32, 1, 1], grid = ["cdiv(N,32)", "1", "1"], module = "f16_mean_lce_combine", name = "lce_combine", parallel = "none"{{[^}]*}}shared_bytes = 0 : i64},
// CHECK-SAME:      {args = ["labels", "loss_rows", "loss", "N"], block = [128, 1, 1], grid = ["1", "1", "1"], module = "f16_mean_lce_reduce", name = "lce_reduce", parallel = "none"{{[^}]*}}shared_bytes = 0 : i64}],
// CHECK-SAME:    op = "linear_cross_entropy",
// CHECK-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", {{[^}]*}}reduction = "mean"},
// CHECK-SAME:    params = [{dtype = "f16", name = "x", output = false, shape = ["N", "D"]}, {dtype = "f16", name = "w", output = false, shape = ["V", "D"]}, {dtype = "i64", name = "labels", output = false, shape = ["N"]}, {dtype = "f32", name = "loss", output = true, shape = []}, {dtype = "f32", name = "lse", output = true, shape = ["N"]}],
// CHECK-SAME:    tile = "block_rows=4,threads=128,splits=8,matmul=simt,stages=1",
// CHECK-SAME:    workspaces = [{count = "S*N", dtype = "f32", name = "part_max"}, {count = "S*N", dtype = "f32", name = "part_sum"}, {count = "N", dtype = "f32", name = "loss_rows"}]}}}
// The function itself is gone.
// CHECK-NOT:   func.func @f16_mean
// Partial LSE: x, w, part_max, part_sum, N, V, D; two block_rows*threads f32
// workgroup buffers (4*128 = 512).
// CHECK:       gpu.module @f16_mean_lce_partial {
// CHECK-NEXT:    gpu.func @lce_partial(%{{.*}}: memref<?xf16>, %{{.*}}: memref<?xf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// CHECK-SAME:      workgroup(%{{.*}} : memref<512xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<512xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME:      kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK:           gpu.block_id  y
// CHECK:           math.exp2
// CHECK:           gpu.barrier
// CHECK:           gpu.return
// Combine: x, w, labels, part_max, part_sum, lse, loss_rows, N, V, D, S;
// a block of one warp, a thread per row, whatever the tile's threads. The
// block stages 32 k of its 32 rows of x and of their labels' rows of w
// (32 × 33 f32 each, and the 32 label rows as i64) between two barriers,
// all 64 loads of a tile before its stores;
// each thread then sums its own row's label logit from them with fma in
// ascending k, before the row's lse (log2) and loss. A block none of whose
// rows counts skips the tiles: each thread stores whether its row's logit
// is used (a row of the op, its label in range and not ignored), and every
// thread sums the 32 flags, so all take the same depth (D, or 0).
// CHECK:       gpu.module @f16_mean_lce_combine {
// CHECK-NEXT:    gpu.func @lce_combine(%{{.*}}: memref<?xf16>, %{{.*}}: memref<?xf16>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %[[N:.*]]: index, %{{.*}}: index, %[[D:.*]]: index, %{{.*}}: index)
// CHECK-SAME:      workgroup(%{{.*}} : memref<1056xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<1056xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<32xi64, #gpu.address_space<workgroup>>, %[[FLAGS:.*]] : memref<32xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME:      kernel attributes {known_block_size = array<i32: 32, 1, 1>}
// CHECK:           memref.store %{{.*}} : memref<32xi64, #gpu.address_space<workgroup>>
// CHECK:           %[[ROW:.*]] = arith.cmpi ult, %{{.*}}, %[[N]] : index
// CHECK:           %[[USED:.*]] = arith.andi %[[ROW]], %{{.*}} : i1
// CHECK:           %[[IGNORED:.*]] = arith.cmpi eq, %{{.*}}, %c-100 : index
// CHECK:           %[[COUNTS:.*]] = arith.select %[[IGNORED]], %{{.*}}, %{{.*}} : i32
// CHECK:           %[[FLAG:.*]] = arith.select %[[USED]], %[[COUNTS]], %{{.*}} : i32
// CHECK:           memref.store %[[FLAG]], %[[FLAGS]]
// CHECK-NEXT:      gpu.barrier
// CHECK:           %[[NEEDED:.*]] = scf.for
// CHECK:             memref.load %[[FLAGS]]
// CHECK:           %[[NONE:.*]] = arith.cmpi eq, %[[NEEDED]], %{{.*}} : i32
// CHECK:           %[[DEPTH:.*]] = arith.select %[[NONE]], %{{.*}}, %[[D]] : index
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[DEPTH]]
// CHECK-COUNT-64:      memref.load %{{.*}} : memref<?xf16>
// CHECK-COUNT-64:      memref.store %{{.*}} : memref<1056xf32, #gpu.address_space<workgroup>>
// CHECK:             gpu.barrier
// CHECK:             scf.for
// CHECK:               math.fma
// CHECK:             gpu.barrier
// CHECK:           math.log2
// CHECK:           gpu.return
// Reduce: labels, loss_rows, loss, N; threads f32 sums + threads i32 counts;
// mean divides by the count of non-ignored rows.
// CHECK:       gpu.module @f16_mean_lce_reduce {
// CHECK-NEXT:    gpu.func @lce_reduce(%{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index)
// CHECK-SAME:      workgroup(%{{.*}} : memref<128xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<128xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME:      kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK:           arith.constant -100 : index
// CHECK:           arith.sitofp
// CHECK-NEXT:      arith.divf
// CHECK:           gpu.return
// SMALL-LABEL: loss.launch_plans = {f16_mean = {
// SMALL-SAME:    constants = {S = 3 : i64}
// SMALL-SAME:    block = [64, 1, 1], grid = ["cdiv(N,2)", "S", "1"], module = "f16_mean_lce_partial"
// SMALL-SAME:    block = [32, 1, 1], grid = ["cdiv(N,32)", "1", "1"], module = "f16_mean_lce_combine"
// SMALL-SAME:    block = [64, 1, 1], grid = ["1", "1", "1"], module = "f16_mean_lce_reduce"
// SMALL-SAME:    tile = "block_rows=2,threads=64,splits=3,matmul=simt,stages=1"
// SMALL:       gpu.func @lce_partial
// SMALL-SAME:    workgroup(%{{.*}} : memref<128xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<128xf32, #gpu.address_space<workgroup>>)
// SMALL-SAME:    known_block_size = array<i32: 64, 1, 1>
// SMALL:       gpu.func @lce_reduce
// SMALL-SAME:    workgroup(%{{.*}} : memref<64xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<64xi32, #gpu.address_space<workgroup>>)
// BIG-LABEL:   loss.launch_plans = {f16_mean = {
// BIG-SAME:      constants = {S = 16 : i64}
// BIG-SAME:      block = [256, 1, 1], grid = ["cdiv(N,8)", "S", "1"]
// BIG-SAME:      block = [32, 1, 1], grid = ["cdiv(N,32)", "1", "1"]
// BIG:         gpu.func @lce_partial
// BIG-SAME:      workgroup(%{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>)
// BIG:         gpu.func @lce_reduce
// BIG-SAME:      workgroup(%{{.*}} : memref<256xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<256xi32, #gpu.address_space<workgroup>>)
func.func @f16_mean(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// reduction = none: no reduce kernel, no loss_rows workspace, and the
// combine kernel writes the per-row losses straight into "loss". A bias
// adds a "bias" buffer after w in both kernels; i32 labels stay i32.
// CHECK-LABEL: loss.launch_plans = {bf16_none_bias = {
// CHECK-SAME:    entry_args = ["x", "w", "labels", "bias"],
// CHECK-SAME:    kernels = [
// CHECK-SAME:      {args = ["x", "w", "bias", "part_max", "part_sum", "N", "V", "D"], {{.*}}name = "lce_partial"
// CHECK-SAME:      {args = ["x", "w", "bias", "labels", "part_max", "part_sum", "lse", "loss", "N", "V", "D", "S"], {{.*}}name = "lce_combine", parallel = "none"{{[^}]*}}shared_bytes = 0 : i64}],
// CHECK-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "true", dtype = "bf16", ignore_index = "3", label_type = "i32", {{[^}]*}}reduction = "none"},
// CHECK-SAME:    {dtype = "bf16", name = "bias", output = false, shape = ["V"]}, {dtype = "f32", name = "loss", output = true, shape = ["N"]}, {dtype = "f32", name = "lse", output = true, shape = ["N"]}],
// CHECK-SAME:    workspaces = [{count = "S*N", dtype = "f32", name = "part_max"}, {count = "S*N", dtype = "f32", name = "part_sum"}]}}}
// CHECK-NOT:   lce_reduce
// CHECK-NOT:   loss_rows
// CHECK:       gpu.module @bf16_none_bias_lce_partial {
// CHECK-NEXT:    gpu.func @lce_partial(%{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// CHECK:       gpu.module @bf16_none_bias_lce_combine {
// CHECK-NEXT:    gpu.func @lce_combine(%{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xi32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// CHECK:           arith.constant 3 : index
// CHECK-NOT:   gpu.module
// SMALL-LABEL: loss.launch_plans = {bf16_none_bias = {
// SMALL-NOT:     lce_reduce
// SMALL:       gpu.func @lce_partial
// SMALL-SAME:    workgroup(%{{.*}} : memref<128xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<128xf32, #gpu.address_space<workgroup>>)
// BIG-LABEL:   loss.launch_plans = {bf16_none_bias = {
// BIG:         gpu.func @lce_partial
// BIG-SAME:      workgroup(%{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<2048xf32, #gpu.address_space<workgroup>>)
func.func @bf16_none_bias(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %y: tensor<?xi32>, %b: tensor<?xbf16>) -> tensor<?xf32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {ignore_index = 3 : i64, reduction = #loss<reduction none>, storage = bf16, compute = f32} : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xi32>, tensor<?xbf16> -> tensor<?xf32>, tensor<?xf32>
  return %l : tensor<?xf32>
}

// -----

// Two fused functions get one plan each; a function without a fused op is
// left alone; entry_args follows the function's own argument order ("" for
// an argument the op does not read). sum: no division in the reduce kernel.
// CHECK-LABEL: loss.launch_plans = {
// CHECK-SAME:    first = {{.*}}entry = "first", entry_args = ["x", "w", "labels"]{{.*}}reduction = "sum"
// CHECK-SAME:    second = {{.*}}entry = "second", entry_args = ["w", "x", "labels", ""]
// CHECK:       func.func @helper
// CHECK:       gpu.module @first_lce_partial
// CHECK:       gpu.module @first_lce_combine
// CHECK:       gpu.module @first_lce_reduce
// CHECK-NOT:     arith.divf
// CHECK:       gpu.module @second_lce_partial
// CHECK:       gpu.module @second_lce_combine
// CHECK:       gpu.module @second_lce_reduce
// CHECK-NOT:   func.func @first
// CHECK-NOT:   func.func @second
func.func @helper(%a: tensor<f32>) -> tensor<f32> {
  return %a : tensor<f32>
}
func.func @first(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {reduction = #loss<reduction sum>, storage = f32, compute = f32} : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}
func.func @second(%w: tensor<?x?xf16>, %x: tensor<?x?xf16>, %y: tensor<?xi32>, %unused: index) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi32> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

// Negative: an unfused op cannot be lowered; the pass reports it.
func.func @no_fused_op(%z: tensor<?x?xf32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{'loss.log_softmax' op was not fused into loss.linear_cross_entropy; loss-lower-to-gpu lowers fused functions only}}
  %lp = loss.log_softmax %z : tensor<?x?xf32> -> tensor<?x?xf32>
  return %lp : tensor<?x?xf32>
}

// -----

// Negative: the function computes more than the fused op.
func.func @computes_more(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{loss-lower-to-gpu: cannot lower @computes_more: the function computes more than the fused op ('arith.addf'); run loss-fuse-linear-cross-entropy and canonicalize first}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  %s = arith.addf %l, %l : tensor<f32>
  return %s : tensor<f32>
}

// -----

// Negative: an operand computed inside the function.
func.func @operand_not_argument(%x: tensor<?x?xf32>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  // expected-error @+1 {{'loss.cast' op was not fused into loss.linear_cross_entropy}}
  %x16 = loss.cast %x : tensor<?x?xf32> to tensor<?x?xf16>
  // expected-error @+1 {{loss-lower-to-gpu: cannot lower @operand_not_argument: every operand of the fused op must be a function argument}}
  %l, %lse = loss.linear_cross_entropy %x16, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l : tensor<f32>
}

// -----

// Negative: two fused ops in one function.
func.func @two_fused_ops(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<f32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  // expected-error @+1 {{loss-lower-to-gpu: one fused op per function, @two_fused_ops has 2}}
  %l2, %lse2 = loss.linear_cross_entropy %x, %w, %y {reduction = #loss<reduction sum>, storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %l2 : tensor<f32>, tensor<f32>
}

// -----

// Negative: the function returns something that is not a fused result.
func.func @returns_an_argument(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xi64>) {
  // expected-error @+1 {{loss-lower-to-gpu: cannot lower @returns_an_argument: the function must return only results of the fused op}}
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %y : tensor<f32>, tensor<?xi64>
}
