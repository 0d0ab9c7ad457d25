// lossjit-aot's defaults on Hopper. With the tile left at auto, each arch
// gets its own: --arch sm_90,sm_90a builds mma_sync bundles for sm_90 (any
// chip from 9.0 up) and wgmma bundles for sm_90a (9.0 alone; the C API and
// the Python lookup prefer them there). --workspace-bytes sets the chunked
// backward's scratch budget (default 256 MiB; in the manifest's constants
// and options and in the C API's chunk formula), and is refused where
// nothing would read it.
// RUN: rm -rf %t && mkdir -p %t
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --no-gradients --arch sm_90,sm_90a -o %t/auto --quiet
// RUN: %python -c "import glob, json; [print(m['arch'], m['tile']['matmul']) for m in sorted((json.load(open(f)) for f in glob.glob('%t/auto/*/manifest.json')), key=lambda m: m['arch'])]" | FileCheck %s --check-prefix=AUTO
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --workspace-bytes 268435456 --arch sm_90a -o %t/ws --quiet
// RUN: lossjit-aot --check %t/ws --quiet
// RUN: cat %t/ws/manifest.json | FileCheck %s --check-prefix=INDEX
// RUN: FileCheck %s --check-prefix=CAPI --input-file=%t/ws/lce.c
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --fused --arch sm_90a -o %t/default --quiet
// RUN: cat %t/default/manifest.json | FileCheck %s --check-prefix=DEFAULT
// The fused op takes --strategy too: vocab_chunked runs the forward's
// statistics, then the backward's vocabulary chunks; next to a recompute
// backward (which it has no schedule for) it keeps the lowering's row chunks.
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --fused --strategy vocab_chunked --arch sm_90a -o %t/vocab --quiet
// RUN: lossjit-aot --check %t/vocab --quiet
// RUN: grep -l '"pass": "forward_backward"' %t/vocab/*/manifest.json | xargs cat | FileCheck %s --check-prefix=FUSEDVOCAB
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --fused --strategy recompute --arch sm_80 -o %t/rc --quiet
// RUN: grep -l '"pass": "forward_backward"' %t/rc/*/manifest.json | xargs cat | FileCheck %s --check-prefix=FUSEDRC
// RUN: lossjit-aot --preset linear-log-prob --dtype f16 --workspace-bytes 1048576 --arch sm_90a -o %t/lp --quiet
// RUN: cat %t/lp/manifest.json | FileCheck %s --check-prefix=FAMILY
// RUN: not lossjit-aot --preset linear-cross-entropy --no-gradients --workspace-bytes 1048576 --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=NOGRAD
// RUN: not lossjit-aot --preset linear-cross-entropy --workspace-bytes 0 --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not lossjit-aot --preset linear-cross-entropy --strategy recompute --workspace-bytes 4096 --arch sm_90a -o %t/bad 2>&1 | FileCheck %s --check-prefix=RECOMPUTE

// AUTO:      sm_90 mma_sync
// AUTO-NEXT: sm_90a wgmma
// INDEX: "workspace_bytes": "268435456"
// CAPI: lce_i_constants_backward_sm_90a[] = {INT64_C(268435456)}; /* WB */
// FAMILY: "workspace_bytes": "1048576"
// The default budget is the Python package's on CUDA: 256 MiB.
// DEFAULT: "workspace_bytes": "268435456"
// FUSEDVOCAB-DAG: "chunk_dim": "V"
// FUSEDVOCAB-DAG: "name": "lce_partial"
// FUSEDVOCAB-DAG: "name": "lce_bwd_dz"
// FUSEDVOCAB-DAG: "strategy": "vocab_chunked"
// FUSEDRC-DAG: "name": "lce_fused_z"
// FUSEDRC-DAG: "strategy": "chunked"
// NOGRAD: error: --workspace-bytes budgets the backward, which --no-gradients leaves out
// ZERO: error: --workspace-bytes must be at least 1, got 0
// RECOMPUTE: error: --workspace-bytes budgets the chunked backward and the fused op; --strategy recompute keeps no workspace
