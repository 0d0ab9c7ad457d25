// lossjit-aot with Hopper's warpgroup MMA (--tile matmul=wgmma): only for
// --arch sm_90a (every other arch is refused before anything is compiled,
// naming it); the bundles of the forward, backward and fused op carry the
// tile, their PTX multiplies with wgmma.mma_async, the C API's check passes
// and ptxas -arch=sm_90a accepts every kernel.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t
// RUN: not lossjit-aot --preset linear-cross-entropy --tile matmul=wgmma --arch sm_90a,sm_90 -o %t/bad 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not lossjit-aot --preset linear-cross-entropy --dtype f32 --tile matmul=wgmma --arch sm_90a -o %t/f32 2>&1 | FileCheck %s --check-prefix=F32
// RUN: lossjit-aot --preset linear-cross-entropy --dtype bf16 --fused --tile matmul=wgmma --arch sm_90a -o %t/k --quiet
// RUN: lossjit-aot --check %t/k --quiet
// RUN: cat %t/k/*/manifest.json | FileCheck %s --check-prefix=TILE
// RUN: cat %t/k/*/lce_partial.sm_90a.ptx | FileCheck %s --check-prefix=PTX
// RUN: ls %t/k/*/*.sm_90a.ptx | xargs -I{} %ptxas -arch=sm_90a {} -o %t/k.cubin

// ARCH: --tile with --arch sm_90: matmul wgmma needs chip sm_90a (wgmma and its descriptors are specific to it), got 'sm_90'
// F32: --tile matmul=wgmma multiplies f16 or bf16; --dtype f32 stays on SIMT (leave --tile at auto)
// TILE-COUNT-3: "matmul": "wgmma",
// PTX: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
