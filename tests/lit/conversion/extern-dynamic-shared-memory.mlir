// loss-extern-dynamic-shared-memory: convert-gpu-to-nvvm lowers
// gpu.dynamic_shared_memory to an *internal* zero-length shared global,
// which NVPTX emits as a one-byte static `.shared .b8 __dynamic_shmem__0;`
// (the launch's dynamic bytes are not behind it). The pass makes it
// external (`.extern .shared ... []`) with at least `alignment` bytes of
// alignment; sized or non-shared globals keep their linkage.
// RUN: lossjit-opt %s --split-input-file \
// RUN:   --pass-pipeline="builtin.module(gpu.module(convert-gpu-to-nvvm,loss-extern-dynamic-shared-memory))" \
// RUN:   | FileCheck %s
// RUN: lossjit-opt %s --split-input-file \
// RUN:   --pass-pipeline="builtin.module(gpu.module(convert-gpu-to-nvvm,loss-extern-dynamic-shared-memory{alignment=1024}))" \
// RUN:   | FileCheck %s --check-prefix=ALIGN
// Without the pass the base stays internal (what the pass is for).
// RUN: lossjit-opt %s --split-input-file --pass-pipeline="builtin.module(gpu.module(convert-gpu-to-nvvm))" \
// RUN:   | FileCheck %s --check-prefix=UPSTREAM
// RUN: not lossjit-opt %s --split-input-file \
// RUN:   --pass-pipeline="builtin.module(gpu.module(loss-extern-dynamic-shared-memory{alignment=24}))" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADALIGN

// CHECK-LABEL: gpu.module @dynamic
// CHECK:         llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
// CHECK:         llvm.mlir.global internal @__wg_k_0() {addr_space = 3 : i32} : !llvm.array<64 x f32>
// ALIGN-LABEL:   gpu.module @dynamic
// ALIGN:           llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 1024 : i64}
// UPSTREAM-LABEL: gpu.module @dynamic
// UPSTREAM:         llvm.mlir.global internal @__dynamic_shmem__0()
// BADALIGN: error: loss-extern-dynamic-shared-memory: alignment must be a power of two, got 24
gpu.module @dynamic {
  gpu.func @k(%out: memref<?xf32>) workgroup(%st : memref<64xf32, #gpu.address_space<workgroup>>) kernel {
    %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %c0 = arith.constant 0 : index
    %a = memref.view %dyn[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<256xf32, #gpu.address_space<workgroup>>
    %t = gpu.thread_id x
    %v = memref.load %a[%t] : memref<256xf32, #gpu.address_space<workgroup>>
    %w = memref.load %st[%t] : memref<64xf32, #gpu.address_space<workgroup>>
    %s = arith.addf %v, %w : f32
    memref.store %s, %out[%t] : memref<?xf32>
    gpu.return
  }
}

// -----

// Only static shared memory: nothing to change.
// CHECK-LABEL: gpu.module @static_only
// CHECK:         llvm.mlir.global internal @__wg_k_0() {addr_space = 3 : i32} : !llvm.array<64 x f32>
// CHECK-NOT:     external
gpu.module @static_only {
  gpu.func @k(%out: memref<?xf32>) workgroup(%st : memref<64xf32, #gpu.address_space<workgroup>>) kernel {
    %t = gpu.thread_id x
    %w = memref.load %st[%t] : memref<64xf32, #gpu.address_space<workgroup>>
    memref.store %w, %out[%t] : memref<?xf32>
    gpu.return
  }
}

// -----

// A zero-length global outside shared memory is not a dynamic base.
// CHECK-LABEL: gpu.module @global_space
// CHECK:         llvm.mlir.global internal @empty() {addr_space = 1 : i32} : !llvm.array<0 x i8>
gpu.module @global_space {
  llvm.mlir.global internal @empty() {addr_space = 1 : i32} : !llvm.array<0 x i8>
}

// -----

// A kernel that asks for more (loss.dynamic_shared_align: TMA's swizzled
// stages) gets it, even without the option.
// CHECK-LABEL: gpu.module @kernel_asks
// CHECK:         llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 1024 : i64}
// ALIGN-LABEL:   gpu.module @kernel_asks
// ALIGN:           alignment = 1024 : i64
gpu.module @kernel_asks {
  gpu.func @k(%out: memref<?xf32>) kernel attributes {loss.dynamic_shared_align = 1024 : i64} {
    %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %c0 = arith.constant 0 : index
    %a = memref.view %dyn[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<256xf32, #gpu.address_space<workgroup>>
    %t = gpu.thread_id x
    %v = memref.load %a[%t] : memref<256xf32, #gpu.address_space<workgroup>>
    memref.store %v, %out[%t] : memref<?xf32>
    gpu.return
  }
}
