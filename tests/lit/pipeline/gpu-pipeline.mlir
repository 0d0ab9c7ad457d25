// lossjit-gpu-pipeline: the stages and their options (the PTX it emits is
// checked in ../ptx), and the errors it must give instead of emitting
// nothing or something unusable.
// RUN: lossjit-opt %s --lossjit-gpu-pipeline --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=DEFAULT
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90 block-rows=2 threads=256 splits=16" --dump-pass-pipeline -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SM90
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a features=+ptx83" --dump-pass-pipeline -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FEATURES
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="threads=100" -o /dev/null 2>&1 | FileCheck %s --check-prefix=THREADS
// Tensor cores: matmul=mma_sync starts from its own tile; knobs override it.
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="matmul=mma_sync" --dump-pass-pipeline -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=MMA
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="matmul=mma_sync block-cols=128 threads=256 stages=2" --dump-pass-pipeline -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=MMA128
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="matmul=tcgen05" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADMATMUL
// Arch validation: gpu-pipeline-arch.mlir.

// DEFAULT-LABEL: Pass Manager with
// DEFAULT-NEXT:  builtin.module(
// DEFAULT-NEXT:    loss-make-precision-explicit,
// DEFAULT-NEXT:    loss-verify-precision,
// DEFAULT-NEXT:    loss-fuse-linear-cross-entropy{remarks=false},
// DEFAULT-NEXT:    canonicalize
// DEFAULT-NEXT:    cse,
// DEFAULT-NEXT:    loss-select-lowering-config{band=-1 block-cols=-1 block-k=-1 block-rows=-1 chip=sm_80 cluster=-1 grad-cols=-1 matmul= {{.*}}splits=-1 stages=-1 target=gpu threads=-1
// DEFAULT-NEXT:    loss-lower-to-gpu{chip=sm_80},
// DEFAULT-NEXT:    canonicalize
// DEFAULT-NEXT:    cse,
// DEFAULT-NEXT:    nvvm-attach-target{O=3 chip=sm_80 {{.*}}features=+ptx80
// DEFAULT-NEXT:    gpu.module(
// DEFAULT-NEXT:      expand-strided-metadata,
// DEFAULT-NEXT:      lower-affine,
// DEFAULT-NEXT:      loss-math-to-nvvm-approx,
// DEFAULT-NEXT:      arith-expand
// DEFAULT-NEXT:      loss-bf16-mma-sync-to-nvvm,
// DEFAULT-NEXT:      convert-nvgpu-to-nvvm,
// DEFAULT-NEXT:      convert-scf-to-cf
// DEFAULT-NEXT:      convert-vector-to-llvm
// DEFAULT:           convert-gpu-to-nvvm
// DEFAULT:         ),
// DEFAULT-NEXT:    reconcile-unrealized-casts,
// DEFAULT-NEXT:    gpu-module-to-binary{format=isa
// DEFAULT-NEXT:  )

// SM90:       loss-select-lowering-config{band=-1 block-cols=-1 block-k=-1 block-rows=2 chip=sm_90 {{.*}}splits=16 stages=-1 target=gpu threads=256
// SM90-NEXT:  loss-lower-to-gpu{chip=sm_90},
// SM90:       nvvm-attach-target{O=3 chip=sm_90 {{.*}}features=+ptx80

// FEATURES:   nvvm-attach-target{O=3 chip=sm_90a {{.*}}features=+ptx83

// THREADS:    error: loss-select-lowering-config: tile threads must be a power of two in [32, 1024], got 100

// Only the strategy is passed: its tile is the selection's starting point.
// MMA:        loss-select-lowering-config{band=-1 block-cols=-1 block-k=-1 block-rows=-1 chip=sm_80 cluster=-1 grad-cols=-1 matmul=mma_sync {{.*}}splits=-1 stages=-1 target=gpu threads=-1
// MMA128:     loss-select-lowering-config{band=-1 block-cols=128 block-k=-1 block-rows=-1 chip=sm_80 cluster=-1 grad-cols=-1 matmul=mma_sync {{.*}}splits=-1 stages=2 target=gpu threads=256
// BADMATMUL:  Cannot find option named 'tcgen05'

func.func @lce(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf16>, tensor<?x?xf16> -> tensor<?x?xf16>
  %lp = loss.log_softmax %z : tensor<?x?xf16> -> tensor<?x?xf16>
  %l = loss.nll %lp, %y {ignore_index = -100 : i64, reduction = #loss<reduction mean>} : tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>
  return %l : tensor<f32>
}
