// Full lossjit-gpu-pipeline with a bias, i32 labels, ignore_index = 3 and
// reduction = none, on a non-default tile, for sm_80 and sm_90: two kernels
// only (no reduce), the bias is an f16 load widened and added in f32, and
// ptxas accepts everything.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/sm80 %t/sm90
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_80 block-rows=2 threads=64 splits=4" -o %t/sm80.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90 block-rows=2 threads=64 splits=4" -o %t/sm90.mlir
// RUN: FileCheck %s --check-prefix=MLIR < %t/sm90.mlir
// RUN: %extract-ptx %t/sm80.mlir %t/sm80 | FileCheck %s --check-prefix=FILES80
// RUN: %extract-ptx %t/sm90.mlir %t/sm90 | FileCheck %s --check-prefix=FILES90
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=PARTIAL,SM80 --input-file=%t/sm80/head_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=COMBINE,SM80 --input-file=%t/sm80/head_lce_combine.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=PARTIAL,SM90 --input-file=%t/sm90/head_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --check-prefixes=COMBINE,SM90 --input-file=%t/sm90/head_lce_combine.ptx
// RUN: %ptxas -arch=sm_80 %t/sm80/head_lce_partial.ptx -o %t/sm80/head_lce_partial.cubin
// RUN: %ptxas -arch=sm_80 %t/sm80/head_lce_combine.ptx -o %t/sm80/head_lce_combine.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/head_lce_partial.ptx -o %t/sm90/head_lce_partial.cubin
// RUN: %ptxas -arch=sm_90 %t/sm90/head_lce_combine.ptx -o %t/sm90/head_lce_combine.cubin

// cross_entropy sugar was expanded and fused; the plan carries the bias, the
// per-row loss output and the tile.
// MLIR-LABEL: module attributes {gpu.container_module, loss.launch_plans = {head = {
// MLIR-SAME:    constants = {S = 4 : i64}
// MLIR-SAME:    entry_args = ["x", "w", "bias", "labels"]
// MLIR-SAME:    {args = ["x", "w", "bias", "labels", "part_max", "part_sum", "lse", "loss", "N", "V", "D", "S"], block = [32, 1, 1], grid = ["cdiv(N,32)", "1", "1"], module = "head_lce_combine"
// MLIR-SAME:    options = {arch = "{{sm_[0-9]+}}", bias = "true", dtype = "f16", ignore_index = "3", label_type = "i32", {{[^}]*}}reduction = "none"}
// MLIR-SAME:    tile = "block_rows=2,threads=64,splits=4,matmul=simt,stages=1"
// MLIR-NEXT:    gpu.binary @head_lce_partial  [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">,
// MLIR-NEXT:    gpu.binary @head_lce_combine  [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">,
// MLIR-NEXT:  {{^}}}{{$}}

// FILES80:      head_lce_partial.ptx sm_80
// FILES80-NEXT: head_lce_combine.ptx sm_80
// FILES80-NOT:  .ptx
// FILES90:      head_lce_partial.ptx sm_90
// FILES90-NEXT: head_lce_combine.ptx sm_90
// FILES90-NOT:  .ptx

// SM80:       .target sm_80
// SM90:       .target sm_90

// 64 threads, 2 rows: two workgroup buffers of 2*64 f32 (512 bytes). The
// bias value is widened and added to the f32 dot product.
// PARTIAL-LABEL: .visible .entry lce_partial(
// PARTIAL:       .maxntid 64, 1, 1
// PARTIAL-DAG:   .shared .align 4 .b8 __wg_lce_partial_0[512];
// PARTIAL-DAG:   .shared .align 4 .b8 __wg_lce_partial_1[512];
// PARTIAL:       ld.global.b16 [[B:%rs[0-9]+]], [{{%rd[0-9]+}}];
// PARTIAL-NEXT:  cvt.f32.f16 [[BF:%r[0-9]+]], [[B]];
// PARTIAL-NEXT:  add.rn.f32 {{%r[0-9]+}}, {{%r[0-9]+}}, [[BF]];
// PARTIAL:       ex2.approx.f32
// PARTIAL:       bar.sync 0;
// PARTIAL:       ret;

// i32 labels are sign-extended, compared with ignore_index = 3; the target
// logit adds the widened bias; the per-row loss is stored (no reduction).
// The label logit is summed first, from the block's shared tiles of x and w
// (labelLogitsByTiles), so the bias sequence (cvt, add into z, lse - z)
// after the label check is matched as one multi-line pattern.
// COMBINE-LABEL: .visible .entry lce_combine(
// COMBINE:       .maxntid 32, 1, 1
// COMBINE:       .shared .align 4 .b8 __wg_lce_combine_0[4224];
// COMBINE:       bar.sync 0;
// COMBINE:       fma.rn.f32
// COMBINE:       lg2.approx.f32
// COMBINE:       ld.global.s32 [[L:%rd[0-9]+]], [{{%rd[0-9]+}}];
// COMBINE-NEXT:  setp.eq.b64 {{%p[0-9]+}}, [[L]], 3;
// COMBINE:       {{cvt.f32.f16[[:space:]]+}}[[BF:%r[0-9]+]]{{, %rs[0-9]+;[[:space:]]+add.rn.f32[[:space:]]+}}[[Z:%r[0-9]+]]{{, %r[0-9]+, }}[[BF]]{{;[[:space:]]+sub.rn.f32[[:space:]]+%r[0-9]+, %r[0-9]+, }}[[Z]];
// COMBINE:       st.global.b32
// COMBINE:       ret;

func.func @head(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %b: tensor<?xf16>, %y: tensor<?xi32>) -> tensor<?xf32> {
  %z = loss.linear %x, %w, %b : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xf16> -> tensor<?x?xf16>
  %l = loss.cross_entropy %z, %y {ignore_index = 3 : i64, reduction = #loss<reduction none>} : tensor<?x?xf16>, tensor<?xi32> -> tensor<?xf32>
  return %l : tensor<?xf32>
}
