// lossjit-gpu-pipeline validates its chip option (GpuTarget::validate): an
// unsupported or misspelled arch is a lossjit error, not a silent success
// (sm_60) or an LLVM message about sm_20 (foo).
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_60" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SM60
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=foo" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FOO
// The options go into a pass pipeline's text: a chip or features that would
// add options of their own, features too old for the chip (LLVM aborted),
// and mma_sync below sm_80 (the backend aborted on cp.async) are errors too,
// and the tool fails (it had exited 0 with the input unchanged).
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a} matmul=wgmma" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BRACE
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a features='+ptx80 O=0'" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SPACE
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a features=+ptx78 matmul=wgmma" -o /dev/null 2>&1 | FileCheck %s --check-prefix=OLDPTX
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_75 matmul=mma_sync" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MMA75
// A negative knob would read as "unset" (-1) and be dropped.
// RUN: not lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma persistent=-1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// Accepted spellings still work.
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90 features=+ptx78" -o /dev/null
// RUN: lossjit-opt %s --lossjit-gpu-pipeline="chip=sm_90a" -o /dev/null

// SM60: error: {{.*}}arch sm_60 is not supported: lossjit needs sm_70 or newer
// FOO:  error: {{.*}}arch must look like sm_80, sm_90 or sm_90a, got 'foo'
// BRACE: error: lossjit-gpu-pipeline: arch must look like sm_80, sm_90 or sm_90a, got 'sm_90a}'
// SPACE: error: lossjit-gpu-pipeline: features must be comma-separated +name or -name PTX features such as +ptx80, got '+ptx80 O=0'
// OLDPTX: error: lossjit-gpu-pipeline: arch sm_90a needs PTX ISA 8.0 or newer{{.*}}features '+ptx78'
// NEGATIVE: error: lossjit-gpu-pipeline: persistent must not be negative, got -1
// MMA75: error: loss-select-lowering-config: matmul mma_sync needs chip sm_80 or newer (mma.sync on bf16 and cp.async), got 'sm_75'

func.func @lce(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %y: tensor<?xi64>) -> tensor<f32> {
  %z = loss.linear %x, %w : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %l2 = loss.cross_entropy %z, %y : tensor<?x?xf32>, tensor<?xi64> -> tensor<f32>
  return %l2 : tensor<f32>
}
