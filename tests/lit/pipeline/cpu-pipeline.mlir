// lossjit-cpu-pipeline: graph → precision → fusion → host kernels → LLVM
// dialect. Each fused function leaves a nested module of llvm.func kernels
// and nothing else (no scf/memref/vector/arith/math/cf/func/loss op inside),
// and nothing LLVM would turn into a compiler-runtime or libm call on some
// host: no fpext/fptrunc of 16-bit floats, no exp2/log2 intrinsics (f32
// fma stays, for FMA units: see NOFMA below for a CPU without).
// RUN: lossjit-opt %s --lossjit-cpu-pipeline --split-input-file | FileCheck %s \
// RUN:   --implicit-check-not='{{(= |^ *)"?(scf|memref|vector|arith|math|cf|func|index|loss|affine|ub|builtin\.unrealized_conversion_cast)\.}}' \
// RUN:   --implicit-check-not='{{llvm\.(fpext|fptrunc|intr\.exp2|intr\.log2|intr\.exp|intr\.log)\b}}'
// The stages, in order, with the options passed through.
// RUN: lossjit-opt %s --lossjit-cpu-pipeline="block-rows=2 vector-width=16 f16-extend-in-hardware=true fma-in-hardware=false" --dump-pass-pipeline -o /dev/null --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=STAGES
// For a CPU without FMA units (as the JIT runs it for x86-64-v2) the
// products' f32 fused multiply-adds reach LLVM as f64 arithmetic rather
// than as fmas it would turn into fmaf calls per element (the exp2/log2
// polynomials keep theirs: see expand-host-libcalls.mlir).
// RUN: lossjit-opt %s --lossjit-cpu-pipeline="fma-in-hardware=false" --split-input-file \
// RUN:   | FileCheck %s --check-prefix=NOFMA
// NOFMA-LABEL:   llvm.func @lce_rows
// NOFMA:         llvm.fmul {{.*}} : vector<{{[0-9]+}}xf64>
// NOFMA:         llvm.fptrunc {{.*}} : vector<{{[0-9]+}}xf64> to vector<{{[0-9]+}}xf32>

// STAGES-LABEL: Pass Manager with
// STAGES-NEXT:  builtin.module(
// STAGES-NEXT:    loss-make-precision-explicit,
// STAGES-NEXT:    loss-verify-precision,
// STAGES-NEXT:    loss-fuse-linear-cross-entropy{remarks=false},
// STAGES-NEXT:    canonicalize
// STAGES-NEXT:    cse,
// STAGES-NEXT:    loss-select-lowering-config{band=-1 block-cols=-1 block-k=-1 block-rows=2 {{.*}}target=cpu {{.*}}vector-width=16 vocab-tile=-1},
// STAGES-NEXT:    loss-lower-to-cpu,
// STAGES-NEXT:    canonicalize
// STAGES-NEXT:    cse,
// STAGES-NEXT:    builtin.module(
// STAGES-NEXT:      loss-expand-host-libcalls{expand-f32-fma=true f16-extend-in-hardware=true},
// STAGES:           convert-vector-to-llvm
// STAGES:           finalize-memref-to-llvm
// STAGES:           convert-func-to-llvm
// STAGES:           reconcile-unrealized-casts
// STAGES-NEXT:    )
// STAGES-NEXT:  )

// f16, mean: lce_rows (row range; memref descriptors expanded) and
// lce_reduce, W packed (vector<16> loads) for the outer-product vector FMA,
// no horizontal add; f16 widened by integer
// ops, exp2/log2 expanded (loss-expand-host-libcalls).
// CHECK-LABEL: module attributes {loss.launch_plans = {lce = {
// CHECK-SAME:    module = "lce_kernels", name = "lce_rows", parallel = "rows"
// CHECK-SAME:    module = "lce_kernels", name = "lce_reduce", parallel = "none"
// CHECK-NEXT:    module @lce_kernels {
// CHECK-NEXT:      llvm.func @lce_rows(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64,
// CHECK:             llvm.load %{{.*}} : !llvm.ptr -> vector<16xf16>
// CHECK:             llvm.bitcast %{{.*}} : vector<16xf16> to vector<16xi16>
// CHECK:             llvm.zext %{{.*}} : vector<16xi16> to vector<16xi32>
// CHECK:             llvm.intr.fma({{.*}}) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
// CHECK-NOT:         llvm.intr.vector.reduce.fadd
// CHECK:             llvm.return
// CHECK:           llvm.func @lce_reduce(
// CHECK:             llvm.alloca {{.*}} x f32
// CHECK:             llvm.alloca {{.*}} x i32
// CHECK:             llvm.sitofp
// CHECK-NEXT:        llvm.fdiv
// CHECK:             llvm.return
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:  }
func.func @lce(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// bf16 with bias, reduction none, i32 labels: one kernel, no reduce.
// CHECK-LABEL: module attributes {loss.launch_plans = {head = {
// CHECK-SAME:    options = {bias = "true", dtype = "bf16", ignore_index = "-100", label_type = "i32", {{[^}]*}}reduction = "none"}
// CHECK-NEXT:    module @head_kernels {
// CHECK-NEXT:      llvm.func @lce_rows(
// CHECK:             llvm.bitcast %{{.*}} : vector<16xbf16> to vector<16xi16>
// CHECK:             llvm.return
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:  }
func.func @head(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %b: tensor<?xbf16>, %y: tensor<?xi32>) -> tensor<?xf32> {
  %z = loss.linear %x, %w, %b : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xbf16> -> tensor<?x?xbf16>
  %l = loss.cross_entropy %z, %y {reduction = #loss<reduction none>} : tensor<?x?xbf16>, tensor<?xi32> -> tensor<?xf32>
  return %l : tensor<?xf32>
}

// -----

// f32 storage: no 16-bit widening on the loads.
// CHECK-LABEL: module attributes {loss.launch_plans = {plain = {
// CHECK-NEXT:    module @plain_kernels {
// CHECK:           llvm.load %{{.*}} : !llvm.ptr -> vector<8xf32>
// CHECK-NOT:       xi16>
// CHECK:           llvm.func @lce_reduce(
func.func @plain(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %l = loss.cross_entropy %x, %y {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %l2 = loss.cross_entropy %z, %y {reduction = #loss<reduction sum>} : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l2 : tensor<f32>
}
