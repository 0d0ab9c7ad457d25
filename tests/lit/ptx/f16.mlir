// Full lossjit-gpu-pipeline on an f16 graph, for sm_80 and sm_90: the PTX
// widens every f16 load to f32, uses ex2/lg2.approx.f32, never calls
// libdevice, never does 16-bit or f64 math, never uses atomics, and ptxas
// accepts every kernel.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/sm80 %t/sm90
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_80" -o %t/sm80.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90" -o %t/sm90.mlir
// RUN: FileCheck %s --check-prefix=MLIR < %t/sm80.mlir
// RUN: %extract-ptx %t/sm80.mlir %t/sm80 | FileCheck %s --check-prefix=FILES80
// RUN: %extract-ptx %t/sm90.mlir %t/sm90 | FileCheck %s --check-prefix=FILES90
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=PARTIAL,SM80 --input-file=%t/sm80/lce_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=COMBINE,SM80 --input-file=%t/sm80/lce_lce_combine.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=REDUCE,SM80 --input-file=%t/sm80/lce_lce_reduce.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=PARTIAL,SM90 --input-file=%t/sm90/lce_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=COMBINE,SM90 --input-file=%t/sm90/lce_lce_combine.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=REDUCE,SM90 --input-file=%t/sm90/lce_lce_reduce.ptx
// RUN: %ptxas -arch=sm_80 %t/sm80/lce_lce_partial.ptx -o %t/sm80/lce_lce_partial.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/lce_lce_combine.ptx -o %t/sm80/lce_lce_combine.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/lce_lce_reduce.ptx -o %t/sm80/lce_lce_reduce.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/lce_lce_partial.ptx -o %t/sm90/lce_lce_partial.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/lce_lce_combine.ptx -o %t/sm90/lce_lce_combine.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/lce_lce_reduce.ptx -o %t/sm90/lce_lce_reduce.cubin

// The module keeps only the launch plan and the three binaries (PTX text).
// MLIR-LABEL: module attributes {gpu.container_module, loss.launch_plans = {lce = {
// MLIR-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "false", dtype = "f16", ignore_index = "-100", label_type = "i64", {{[^}]*}}reduction = "mean"}
// MLIR-NEXT:    gpu.binary @lce_lce_partial  [#gpu.object<#nvvm.target<O = 3, chip = "sm_80", features = "+ptx80">, {{.*}}assembly = "
// MLIR-NEXT:    gpu.binary @lce_lce_combine
// MLIR-NEXT:    gpu.binary @lce_lce_reduce
// MLIR-NEXT:  {{^}}}{{$}}

// Exactly these three kernels, each compiled for the requested chip.
// FILES80:      lce_lce_partial.ptx sm_80
// FILES80-NEXT: lce_lce_combine.ptx sm_80
// FILES80-NEXT: lce_lce_reduce.ptx sm_80
// FILES80-NOT:  .ptx
// FILES90:      lce_lce_partial.ptx sm_90
// FILES90-NEXT: lce_lce_combine.ptx sm_90
// FILES90-NEXT: lce_lce_reduce.ptx sm_90
// FILES90-NOT:  .ptx

// SM80:       .version 8.0
// SM80-NEXT:  .target sm_80
// SM80-NEXT:  .address_size 64
// SM90:       .version 8.0
// SM90-NEXT:  .target sm_90
// SM90-NEXT:  .address_size 64

// Partial LSE: 128 threads; two f32 workgroup buffers of 4 rows x 128
// threads (2048 bytes); w and x loads are f16 widened right away and
// accumulated with f32 FMA; online max/sum with ex2.approx.f32; a
// barrier-separated tree merge in shared memory.
// PARTIAL-LABEL: .visible .entry lce_partial(
// PARTIAL:       .maxntid 128, 1, 1
// PARTIAL-DAG:   .shared .align 4 .b8 __wg_lce_partial_0[2048];
// PARTIAL-DAG:   .shared .align 4 .b8 __wg_lce_partial_1[2048];
// PARTIAL:       ld.global.b16 [[W:%rs[0-9]+]], [{{%rd[0-9]+}}];
// PARTIAL-NEXT:  cvt.f32.f16 [[WF:%r[0-9]+]], [[W]];
// PARTIAL:       ld.global.b16 [[X:%rs[0-9]+]], [{{%rd[0-9]+}}];
// PARTIAL-NEXT:  cvt.f32.f16 [[XF:%r[0-9]+]], [[X]];
// PARTIAL-NEXT:  fma.rn.f32 {{%r[0-9]+}}, [[XF]], [[WF]], {{%r[0-9]+}};
// PARTIAL:       ex2.approx.f32
// PARTIAL:       bar.sync 0;
// PARTIAL:       st.shared.b32
// PARTIAL:       bar.sync 0;
// PARTIAL:       st.global.b32
// PARTIAL:       ret;
// PARTIAL-NOT:   lg2.approx

// Combine, in blocks of one warp (a thread per row): first the target
// logits, an f16 dot product widened to f32 (labelLogitsByTiles). The block
// stages 32 k of its rows of x and of their labels' rows of w in shared
// memory, every load of a tile before its first store (all 64 in flight),
// between barriers (the IR's order: conversion/lower-to-gpu.mlir); each
// thread sums its own row from them (fma,
// ascending k). Then the fixed-order merge of the S partials (ex2) and
// lse = M + log(sum) (lg2). Ignored rows (-100) give 0, out-of-range
// labels NaN. The 32 i32 flags (128 bytes) say which rows use their logit:
// a block with none skips the tiles.
// COMBINE-LABEL: .visible .entry lce_combine(
// COMBINE:       .maxntid 32, 1, 1
// COMBINE:       .shared .align 4 .b8 __wg_lce_combine_0[4224];
// COMBINE:       .shared .align 4 .b8 __wg_lce_combine_1[4224];
// COMBINE:       .shared .align 8 .b8 __wg_lce_combine_2[256];
// COMBINE:       .shared .align 4 .b8 __wg_lce_combine_3[128];
// COMBINE:       bar.sync 0;
// COMBINE-COUNT-64: ld.global.b16
// COMBINE:       cvt.f32.f16
// COMBINE-COUNT-64: st.shared.b32
// COMBINE:       bar.sync 0;
// COMBINE:       ld.shared.b32
// COMBINE-NEXT:  ld.shared.b32
// COMBINE-NEXT:  fma.rn.f32
// COMBINE:       ex2.approx.f32
// COMBINE:       lg2.approx.f32
// COMBINE:       setp.eq.b64 {{%p[0-9]+}}, {{%rd[0-9]+}}, -100;
// COMBINE:       0f7FC00000
// COMBINE:       ret;

// Reduce (mean): one block; 128 f32 sums + 128 i32 counts in shared memory,
// a barrier-separated tree, then sum / count (non-ignored rows).
// REDUCE-LABEL: .visible .entry lce_reduce(
// REDUCE:       .maxntid 128, 1, 1
// REDUCE-DAG:   .shared .align 4 .b8 __wg_lce_reduce_0[512];
// REDUCE-DAG:   .shared .align 4 .b8 __wg_lce_reduce_1[512];
// REDUCE:       bar.sync 0;
// REDUCE-COUNT-7: bar.sync 0;
// REDUCE:       cvt.rn.f32.s32
// REDUCE-NEXT:  div.rn.f32
// REDUCE:       ret;
// REDUCE-NOT:   ld.global.b16
// REDUCE-NOT:   ex2.approx

func.func @lce(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
