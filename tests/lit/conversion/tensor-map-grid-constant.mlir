// loss-tensor-map-grid-constant alone: the tensor-map parameters (the
// !llvm.ptr ones with llvm.align = 64) of a kernel that declares
// loss.tensor_maps become 128-byte by-value grid constants; other
// parameters and kernels without the attribute stay as they are; a count
// that does not match is an error.
// RUN: lossjit-opt %s --split-input-file --verify-diagnostics \
// RUN:   --pass-pipeline="builtin.module(gpu.module(loss-tensor-map-grid-constant))" | FileCheck %s

// CHECK-LABEL: llvm.func @two_maps(
// CHECK-SAME:    %arg0: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME:    %arg1: !llvm.ptr,
// CHECK-SAME:    %arg2: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME:    %arg3: i64)
// CHECK-LABEL: llvm.func @no_attribute(
// CHECK-SAME:    %arg0: !llvm.ptr {llvm.align = 64 : i64})
// CHECK-NOT:   grid_constant
module attributes {gpu.container_module} {
  gpu.module @k {
    llvm.func @two_maps(%a: !llvm.ptr {llvm.align = 64 : i64}, %out: !llvm.ptr,
                        %b: !llvm.ptr {llvm.align = 64 : i64}, %n: i64)
        attributes {loss.tensor_maps = 2 : i64, nvvm.kernel} {
      llvm.return
    }
    llvm.func @no_attribute(%a: !llvm.ptr {llvm.align = 64 : i64}) attributes {nvvm.kernel} {
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @below {{loss-tensor-map-grid-constant: @miscounted declares 2 tensor map(s) (loss.tensor_maps) but has 1 !llvm.ptr parameter(s) with llvm.align = 64, the tensor-map mark}}
    llvm.func @miscounted(%a: !llvm.ptr {llvm.align = 64 : i64}, %b: !llvm.ptr {llvm.align = 16 : i64})
        attributes {loss.tensor_maps = 2 : i64, nvvm.kernel} {
      llvm.return
    }
  }
}
