// A TMA tile load (nvgpu.tma.async.load on an mbarrier) through the GPU
// pipeline's nvvm and ptx stages for sm_90a: the tensor map parameter is a
// 128-byte, 64-byte aligned by-value grid constant the copy addresses in
// param space, and ptxas takes the kernel.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t
// RUN: lossjit-opt %s --pass-pipeline="builtin.module(nvvm-attach-target{chip=sm_90a features=+ptx80 O=3},gpu.module(convert-nvgpu-to-nvvm,convert-scf-to-cf,convert-vector-to-llvm,convert-gpu-to-nvvm,convert-nvvm-to-llvm,loss-extern-dynamic-shared-memory,loss-tensor-map-grid-constant,canonicalize,cse),reconcile-unrealized-casts,gpu-module-to-binary{format=isa})" -o %t/k.mlir
// RUN: %extract-ptx %t/k.mlir %t > /dev/null
// RUN: FileCheck %s --input-file=%t/k.ptx
// RUN: %ptxas -arch=sm_90a %t/k.ptx -o %t/k.cubin

// CHECK-LABEL: .visible .entry tma(
// CHECK-NEXT:  .param .align 64 .b8 tma_param_0[128],
// CHECK:       mbarrier.arrive.expect_tx.shared.b64
// CHECK:       cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK:       mbarrier.try_wait.parity.shared.b64

!tm = !nvgpu.tensormap.descriptor<tensor = memref<64x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
!bars = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 1>
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @tma(%map: !llvm.ptr {llvm.align = 64 : i64}, %out: memref<?xf32>) kernel
        attributes {known_block_size = array<i32: 128, 1, 1>, loss.tensor_maps = 1 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %bytes = arith.constant 8192 : index
      %ticks = arith.constant 1000000 : index
      %false = arith.constant false
      %desc = builtin.unrealized_conversion_cast %map : !llvm.ptr to !tm
      %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %v = memref.view %dyn[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xbf16, #gpu.address_space<workgroup>>
      %bar = nvgpu.mbarrier.create -> !bars
      %t = gpu.thread_id x
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        nvgpu.mbarrier.init %bar[%c0], %c1 : !bars
      }
      gpu.barrier
      scf.if %first {
        nvgpu.mbarrier.arrive.expect_tx %bar[%c0], %bytes : !bars
        nvgpu.tma.async.load %desc[%c0, %c0], %bar[%c0] to %v : !tm, !bars -> memref<64x64xbf16, #gpu.address_space<workgroup>>
      }
      nvgpu.mbarrier.try_wait.parity %bar[%c0], %false, %ticks : !bars
      %x = memref.load %v[%c0, %t] : memref<64x64xbf16, #gpu.address_space<workgroup>>
      %xf = arith.extf %x : bf16 to f32
      memref.store %xf, %out[%t] : memref<?xf32>
      gpu.return
    }
  }
}
