// matmul=mma_sync through the whole GPU pipeline, f16 and bf16, for sm_80 and
// sm_90: the partial kernel multiplies on tensor cores (mma.sync m16n8k16,
// ldmatrix, a cp.async ring) with no FMA loop, keeps f32 math, and ptxas
// accepts it with zero spills. bf16 goes through loss-bf16-mma-sync-to-nvvm
// (MLIR 22's nvgpu lowering cannot type bf16 mma.sync).
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/f16-80 %t/f16-90 %t/bf16-80 %t/bf16-90
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_80 matmul=mma_sync" -o %t/f16-80.mlir
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90 matmul=mma_sync" -o %t/f16-90.mlir
// RUN: lossjit-opt %t/bf16.mlir --lossjit-gpu-pipeline="chip=sm_80 matmul=mma_sync" -o %t/bf16-80.mlir
// RUN: lossjit-opt %t/bf16.mlir --lossjit-gpu-pipeline="chip=sm_90 matmul=mma_sync" -o %t/bf16-90.mlir
// The launch plan asks for the ring's 30720 bytes of dynamic shared memory.
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t/f16-80.mlir
// PLAN: name = "lce_partial"{{.*}}shared_bytes = 30720
// RUN: %extract-ptx %t/f16-80.mlir %t/f16-80 > /dev/null
// RUN: %extract-ptx %t/f16-90.mlir %t/f16-90 > /dev/null
// RUN: %extract-ptx %t/bf16-80.mlir %t/bf16-80 > /dev/null
// RUN: %extract-ptx %t/bf16-90.mlir %t/bf16-90 > /dev/null
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefixes=DECL,F16 --input-file=%t/f16-80/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=RING --input-file=%t/f16-80/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=WAIT --input-file=%t/f16-80/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=EPILOGUE --input-file=%t/f16-80/lce_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefixes=DECL,F16 --input-file=%t/f16-90/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=RING --input-file=%t/f16-90/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=WAIT --input-file=%t/f16-90/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=EPILOGUE --input-file=%t/f16-90/lce_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefixes=DECL,BF16 --input-file=%t/bf16-80/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=RING --input-file=%t/bf16-80/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=WAIT --input-file=%t/bf16-80/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=EPILOGUE --input-file=%t/bf16-80/lce_lce_partial.ptx
// RUN: FileCheck %s %{ptx-forbidden} --implicit-check-not=fma.rn.f32 --check-prefixes=DECL,BF16 --input-file=%t/bf16-90/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=RING --input-file=%t/bf16-90/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=WAIT --input-file=%t/bf16-90/lce_lce_partial.ptx
// RUN: FileCheck %s --check-prefix=EPILOGUE --input-file=%t/bf16-90/lce_lce_partial.ptx
// RUN: %ptxas -v -arch=sm_80 %t/f16-80/lce_lce_partial.ptx -o %t/f16-80.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90 %t/f16-90/lce_lce_partial.ptx -o %t/f16-90.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_80 %t/bf16-80/lce_lce_partial.ptx -o %t/bf16-80.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// RUN: %ptxas -v -arch=sm_90 %t/bf16-90/lce_lce_partial.ptx -o %t/bf16-90.cubin 2>&1 | FileCheck %s --check-prefix=SPILLS
// The combine and reduce kernels are the SIMT ones; ptxas takes them too.
// RUN: %ptxas -arch=sm_80 %t/bf16-80/lce_lce_combine.ptx -o %t/combine.cubin
// RUN: %ptxas -arch=sm_80 %t/bf16-80/lce_lce_reduce.ptx -o %t/reduce.cubin

// Each property is checked on its own (LLVM places the k loop's body after
// the epilogue, so one ordered sequence would pin the block layout).
// 128 threads; the two row-merge buffers (64 rows × 2 warp columns of f32)
// in static shared memory, the operand rings (3 stages × 64 rows × 40 16-bit
// elements, 15360 bytes each) in dynamic shared memory behind a 16-byte
// aligned `.extern .shared` base (loss-extern-dynamic-shared-memory; a
// static `__dynamic_shmem__0` would be a one-byte variable); no other
// shared buffer;
// two k16 steps per k tile of 2 ldmatrix.x4 (A), 4 ldmatrix.x2 (B) and 8
// mma.sync each — once in the loop, so 16 of each product in the PTX are
// the two unrolled k16 steps — and no FMA dot-product loop anywhere
// (--implicit-check-not=fma.rn.f32): the products are the tensor cores'.
// DECL:       .extern .shared .align 16 .b8 __dynamic_shmem__0[];
// DECL-LABEL: .visible .entry lce_partial(
// DECL:       .maxntid 128, 1, 1
// DECL-DAG:   .shared .align {{[0-9]+}} .b8 __wg_lce_partial_0[512];
// DECL-DAG:   .shared .align {{[0-9]+}} .b8 __wg_lce_partial_1[512];
// DECL-NOT:   .shared .align
// DECL-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// DECL-COUNT-4: ldmatrix.sync.aligned.m8n8.x2.shared.b16
// F16-COUNT-8:  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// BF16-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// DECL-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// DECL-COUNT-4: ldmatrix.sync.aligned.m8n8.x2.shared.b16
// F16-COUNT-8:  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// BF16-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// DECL-NOT:   mma.sync
// DECL:       ret;

// The ring is filled by 16-byte cp.async with a source size (zero fill
// past D and past the last row), one commit group per fill: two in the
// prologue, one per k step.
// RING:         cp.async.cg.shared.global [{{%rd[0-9]+}}], [{{%rd[0-9]+}}], 16, {{%r[0-9]+}};
// RING-COUNT-3: cp.async.commit_group;
// RING-NOT:     cp.async.commit_group;
// RING:         ret;

// Step kt waits for all but the newest stages − 2 = 1 group; the drain
// after the last step waits for none.
// WAIT-DAG:   cp.async.wait_group {{[[:space:]]*}}1;
// WAIT-DAG:   cp.async.wait_group {{[[:space:]]*}}0;

// Online log-sum-exp on the accumulator registers, then quad butterflies
// (xor 1, then xor 2) merge the four lanes that share a row.
// EPILOGUE:   ex2.approx
// EPILOGUE:   shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// EPILOGUE:   shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;

// SPILLS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @lce(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
