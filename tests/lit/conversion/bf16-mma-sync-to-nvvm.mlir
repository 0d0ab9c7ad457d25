// loss-bf16-mma-sync-to-nvvm: a bf16 nvgpu.mma.sync becomes nvvm.mma.sync on
// the fragments' .bf16x2 registers bitcast to i32, with the f32 accumulators
// passed and returned element by element in the vector's row-major order
// (MLIR 22's convert-nvgpu-to-nvvm cannot type bf16 operands). Every other
// mma.sync is left to convert-nvgpu-to-nvvm.
// RUN: split-file %s %t
// RUN: lossjit-opt %t/lowerable.mlir --loss-bf16-mma-sync-to-nvvm --split-input-file | FileCheck %t/lowerable.mlir
// RUN: lossjit-opt %t/negative.mlir --loss-bf16-mma-sync-to-nvvm | FileCheck %t/negative.mlir
// After it, the whole nvgpu lowering succeeds on bf16; without it, the
// upstream pattern reports the error (and leaves the op: the pass still
// exits 0, which is why the pipeline must run this pass first).
// RUN: lossjit-opt %t/lowerable.mlir --loss-bf16-mma-sync-to-nvvm --convert-nvgpu-to-nvvm \
// RUN:   --split-input-file | FileCheck %t/lowerable.mlir --check-prefix=LOWERED
// RUN: lossjit-opt %t/lowerable.mlir --convert-nvgpu-to-nvvm --split-input-file -o /dev/null 2>&1 \
// RUN:   | FileCheck %t/lowerable.mlir --check-prefix=UPSTREAM

//--- lowerable.mlir
// CHECK-LABEL: func.func @bf16_m16n8k16
// CHECK-SAME:    (%[[A:.*]]: vector<4x2xbf16>, %[[B:.*]]: vector<2x2xbf16>, %[[C:.*]]: vector<2x2xf32>)
// CHECK:         %[[A0:.*]] = vector.extract %[[A]][0] : vector<2xbf16> from vector<4x2xbf16>
// CHECK-NEXT:    %[[A0W:.*]] = vector.bitcast %[[A0]] : vector<2xbf16> to vector<1xi32>
// CHECK-NEXT:    %[[A0I:.*]] = vector.extract %[[A0W]][0] : i32 from vector<1xi32>
// CHECK-COUNT-3: vector.bitcast %{{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK-COUNT-2: vector.bitcast %{{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK:         %[[C00:.*]] = vector.extract %[[C]][0, 0] : f32 from vector<2x2xf32>
// CHECK-NEXT:    %[[C01:.*]] = vector.extract %[[C]][0, 1] : f32 from vector<2x2xf32>
// CHECK-NEXT:    %[[C10:.*]] = vector.extract %[[C]][1, 0] : f32 from vector<2x2xf32>
// CHECK-NEXT:    %[[C11:.*]] = vector.extract %[[C]][1, 1] : f32 from vector<2x2xf32>
// CHECK-NEXT:    %[[D:.*]] = nvvm.mma.sync A[%[[A0I]], {{.*}}] B[{{.*}}] C[%[[C00]], %[[C01]], %[[C10]], %[[C11]]]
// CHECK-SAME:      layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>
// CHECK-SAME:      multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>
// CHECK-SAME:      shape = #nvvm.shape<m = 16, n = 8, k = 16>
// CHECK-SAME:      (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK:         %[[D0:.*]] = llvm.extractvalue %[[D]][0]
// CHECK-NEXT:    %[[D1:.*]] = llvm.extractvalue %[[D]][1]
// CHECK-NEXT:    %[[D2:.*]] = llvm.extractvalue %[[D]][2]
// CHECK-NEXT:    %[[D3:.*]] = llvm.extractvalue %[[D]][3]
// CHECK-NEXT:    %[[R:.*]] = vector.from_elements %[[D0]], %[[D1]], %[[D2]], %[[D3]] : vector<2x2xf32>
// CHECK-NEXT:    return %[[R]]
// CHECK-NOT:     nvgpu.mma.sync
// LOWERED-LABEL: func.func @bf16_m16n8k16
// LOWERED:         nvvm.mma.sync
// LOWERED-NOT:     nvgpu.mma.sync
// UPSTREAM:      error: 'nvgpu.mma.sync' op failed to deduce operand PTX types
func.func @bf16_m16n8k16(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = nvgpu.mma.sync(%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// -----
// f16 is convert-nvgpu-to-nvvm's: the pass leaves it alone.
// CHECK-LABEL: func.func @f16_is_left_alone
// CHECK:         nvgpu.mma.sync
// CHECK-NOT:     nvvm.mma.sync
// LOWERED-LABEL: func.func @f16_is_left_alone
// LOWERED:         nvvm.mma.sync
func.func @f16_is_left_alone(%a: vector<4x2xf16>, %b: vector<2x2xf16>, %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = nvgpu.mma.sync(%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

//--- negative.mlir
// An f16 accumulator is not a shape this pass rewrites (the kernels
// accumulate in f32 only): left alone.
// CHECK-LABEL: func.func @bf16_f16_accumulator_is_left_alone
// CHECK:         nvgpu.mma.sync
// CHECK-NOT:     nvvm.mma.sync
func.func @bf16_f16_accumulator_is_left_alone(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf16>) -> vector<2x2xf16> {
  %d = nvgpu.mma.sync(%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf16>) -> vector<2x2xf16>
  return %d : vector<2x2xf16>
}
