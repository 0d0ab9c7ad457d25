// lossjit-aot with the tensor-core forward (--tile matmul=mma_sync): the
// bundle manifests and the index carry the tile, the launch plan's block and
// grid follow it (not SIMT's one column per thread), the PTX multiplies with
// mma.sync and ptxas accepts every kernel for sm_80. The backward and the
// fused op build on tensor cores too (16-bit dZ and its scale in the plan);
// --tile auto (the default) gives f16/bf16 tensor cores and f32 SIMT. What the
// tile cannot build (f32 storage, the recompute backward) is refused before
// anything is compiled.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t
// RUN: not lossjit-aot --preset linear-cross-entropy --dtype f32 --tile matmul=mma_sync -o %t/f32 2>&1 | FileCheck %s --check-prefix=F32
// RUN: not lossjit-aot --preset linear-cross-entropy --strategy recompute --tile matmul=mma_sync -o %t/rc 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --fused --tile matmul=mma_sync --arch sm_80 -o %t/grad --quiet
// RUN: lossjit-aot --check %t/grad --quiet
// RUN: grep -l '"pass": "backward"' %t/grad/*/manifest.json | xargs cat | FileCheck %s --check-prefix=GRAD
// RUN: grep -l '"pass": "forward_backward"' %t/grad/*/manifest.json | xargs cat | FileCheck %s --check-prefix=FUSED
// RUN: ls %t/grad/*/lce_bwd_*.sm_80.ptx %t/grad/*/lce_fused_*.sm_80.ptx | xargs -I{} %ptxas -arch=sm_80 {} -o %t/k.cubin
// RUN: lossjit-aot --preset linear-cross-entropy --dtype f16 --no-gradients --arch sm_80 -o %t/auto16 --quiet
// RUN: FileCheck %s --check-prefix=AUTO16 --input-file=%t/auto16/manifest.json
// RUN: lossjit-aot --preset linear-cross-entropy --dtype f32 --no-gradients --arch sm_80 -o %t/auto32 --quiet
// RUN: FileCheck %s --check-prefix=AUTO32 --input-file=%t/auto32/manifest.json
// RUN: lossjit-aot --preset linear-cross-entropy --dtype f16 --no-gradients --tile matmul=mma_sync --arch sm_80 -o %t/d --quiet
// RUN: lossjit-aot --check %t/d --quiet
// RUN: FileCheck %s --check-prefix=INDEX --input-file=%t/d/manifest.json
// RUN: cat %t/d/*/manifest.json | FileCheck %s --check-prefix=DEFAULT
// RUN: FileCheck %s --check-prefix=MMA --input-file=%t/d/lce.c
// RUN: cat %t/d/*/lce_partial.sm_80.ptx | FileCheck %s --check-prefix=PTX
// RUN: %ptxas -arch=sm_80 %t/d/*/lce_partial.sm_80.ptx -o %t/partial.cubin
// RUN: %ptxas -arch=sm_80 %t/d/*/lce_combine.sm_80.ptx -o %t/combine.cubin
// RUN: %ptxas -arch=sm_80 %t/d/*/lce_reduce.sm_80.ptx -o %t/reduce.cubin
// The one-warp tile, bf16 with a bias, per-row losses.
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --bias --reduction none --no-gradients --no-c-api --tile matmul=mma_sync,block_rows=32,block_cols=32,block_k=16,threads=32,stages=2 --arch sm_80 -o %t/w --quiet
// RUN: cat %t/w/*/manifest.json | FileCheck %s --check-prefix=WARP
// RUN: %ptxas -arch=sm_80 %t/w/*/lce_partial.sm_80.ptx -o %t/w-partial.cubin
// RUN: %ptxas -arch=sm_80 %t/w/*/lce_combine.sm_80.ptx -o %t/w-combine.cubin

// F32: error: --tile matmul=mma_sync multiplies f16 or bf16; --dtype f32 stays on SIMT (leave --tile at auto)
// RECOMPUTE: error: --tile matmul=mma_sync does not build the recompute backward; use --strategy chunked or leave --tile at auto

// GRAD:      "pass": "backward"
// GRAD:      "name": "dz",
// GRAD-NEXT: "dtype": "bf16",
// GRAD-NEXT: "count": "C*V"
// GRAD:      "name": "gscale",
// GRAD-NEXT: "dtype": "f32",
// GRAD:      "name": "lce_bwd_dx",
// GRAD:      "grid": ["cdiv(C,64)", "cdiv(D,64)", "1"],
// GRAD:      "shared_bytes": 30720,
// GRAD:      "name": "lce_bwd_dw",
// GRAD:      "grid": ["(cdiv(V,64))*(1-SINGLE)", "cdiv(D,64)", "1"],
// GRAD:      "shared_bytes": 30720,
// GRAD:      "name": "lce_bwd_dw_single",
// GRAD:      "grid": ["(cdiv(V,64))*SINGLE", "cdiv(D,64)", "1"],
// GRAD:      "shared_bytes": 30720,
// FUSED:      "pass": "forward_backward"
// FUSED:      "name": "dz",
// FUSED-NEXT: "dtype": "f32",
// FUSED:      "name": "dzs",
// FUSED-NEXT: "dtype": "bf16",
// FUSED:      "name": "lce_fused_z",
// FUSED:      "shared_bytes": 30720,

// AUTO16:   "matmul": "mma_sync",
// AUTO32:   "matmul": "simt",

// INDEX:      "tile": {
// INDEX-NEXT:   "block_rows": 64,
// INDEX-NEXT:   "threads": 128,
// INDEX-NEXT:   "splits": 8,
// INDEX-NEXT:   "matmul": "mma_sync",
// INDEX-NEXT:   "stages": 3,
// INDEX-NEXT:   "block_cols": 64,
// INDEX-NEXT:   "block_k": 32
// INDEX:      "functions": {
// INDEX-NEXT:   "forward": "lce_forward"
// INDEX-NEXT: },

// DEFAULT:      "pass": "forward",
// DEFAULT:      "tile": {
// DEFAULT-NEXT:   "block_rows": 64,
// DEFAULT-NEXT:   "threads": 128,
// DEFAULT-NEXT:   "splits": 8,
// DEFAULT-NEXT:   "matmul": "mma_sync",
// DEFAULT:      "name": "lce_partial",
// DEFAULT:      "grid": ["cdiv(N,64)", "S", "1"],
// DEFAULT-NEXT: "block": [128, 1, 1],
// DEFAULT:      "name": "lce_combine",
// DEFAULT:      "grid": ["cdiv(N,32)", "1", "1"],
// DEFAULT-NEXT: "block": [32, 1, 1],

// The C API names the tile among its variant's facts.
// MMA: mma_sync

// PTX: .maxntid 128, 1, 1
// PTX: cp.async
// PTX: ldmatrix.sync.aligned
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32

// WARP:      "tile": {
// WARP-NEXT:   "block_rows": 32,
// WARP-NEXT:   "threads": 32,
// WARP-NEXT:   "splits": 8,
// WARP-NEXT:   "matmul": "mma_sync",
// WARP-NEXT:   "stages": 2,
// WARP-NEXT:   "block_cols": 32,
// WARP-NEXT:   "block_k": 16
// WARP:      "name": "lce_partial",
// WARP:      "grid": ["cdiv(N,32)", "S", "1"],
// WARP-NEXT: "block": [32, 1, 1],
// WARP:      "name": "lce_combine",
// WARP:      "grid": ["cdiv(N,32)", "1", "1"],
// WARP-NEXT: "block": [32, 1, 1],
