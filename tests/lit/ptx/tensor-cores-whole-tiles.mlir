// Whole logit tiles fold without column masks (foldColumns): every tile
// the matmul strategy says lies wholly inside the split's columns takes a
// second copy of the epilogue whose columns are the tile's first column
// plus constants, unclamped, and whose masks are constant true; only the
// ragged last tile of a split keeps the masked, clamped fold. Both copies
// give the same bits on a whole tile. Measured with ptxas -arch=sm_90a:
// - 128x128 logits with a bias and a softcap on the TMA ring (tma=1): the
//   bias of a whole tile is 32 loads a constant apart from one address, and
//   lce_partial takes 139 registers where it took 255 (the masks and
//   clamps of 64 columns stayed live through the epilogue);
// - with a producer warp (tma=2, 168 registers at most), a bias no longer
//   spills (388 bytes before; with a softcap too, 480 before);
// - 128x256 logits on the producer warpgroup (tma=3: the consumers run the
//   epilogue in 232 registers) fold 128 accumulators a thread without
//   spills (560 bytes before) — so the forward, the vocabulary chunks and
//   the fused op in vocabulary chunks can take 256-column logit tiles —
//   with a bias too: 48 bytes until RowStats::pushRows masked the two
//   rows' logits a column at a time (64 masks had lived through a row's
//   fold);
// - the last 4 bytes (128x256 with a bias; tma=2 with a bias and a
//   softcap) were one value kept through the sweep — lane 0's warp index,
//   the merge's leader — spilled because the ragged fold's peak was one
//   register over: that fold now clamps its columns from the thread's first
//   one (constant mins, Fragment::colFirst), the merge after the sweep
//   reads the thread's id afresh, and the rings' evening tells consumers
//   by the thread id;
// - mma.sync's 64x64 tiles (sm_80) fold whole tiles the same way: a warp's
//   32 columns of the block tile, the bias a constant apart too.
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t/k
// RUN: sed 's/f16/bf16/g' %s > %t/bf16.mlir
// (Where only @biased's kernels are checked, only @biased is compiled.)
// RUN: sed -n '/^func.func @biased(/,/^}$/p' %s > %t/biased.mlir
// RUN: sed 's/f16/bf16/g' %t/biased.mlir > %t/biased16.mlir
// RUN: sed 's/f16/bf16/g; s/, softcap = 30.0//' %t/biased.mlir > %t/nocap.mlir
// RUN: lossjit-opt %t/biased.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=3 tma=1" -o %t/tma.mlir
// RUN: lossjit-opt %t/biased16.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=3 tma=1" -o %t/tma16.mlir
// RUN: lossjit-opt %t/nocap.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2" -o %t/ws.mlir
// RUN: lossjit-opt %t/biased16.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=128 block-k=64 stages=2 tma=2" -o %t/wscap.mlir
// The 128x256 tiles compile only what the checks below read (each such
// run is 10-20 s): the f16 forwards, and the bf16 plain forward, vocabulary
// chunks and fused op.
// RUN: sed '/^func.func @vocab(/,$d' %s > %t/forwards.mlir
// RUN: sed -n '/^func.func @fwd(/,/^\/\/ --/p; /^func.func @vocab(/,$p' %t/bf16.mlir > %t/chunks16.mlir
// RUN: lossjit-opt %t/forwards.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3" -o %t/wide.mlir
// RUN: lossjit-opt %t/chunks16.mlir --split-input-file --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3" -o %t/wide16.mlir
// RUN: lossjit-opt %t/nocap.mlir --lossjit-gpu-pipeline="chip=sm_90a matmul=wgmma block-cols=256 block-k=64 stages=4 grad-cols=256 tma=3" -o %t/widebias.mlir
// RUN: lossjit-opt %t/biased.mlir --lossjit-gpu-pipeline="chip=sm_80 matmul=mma_sync" -o %t/mma.mlir
// RUN: %extract-ptx %t/mma.mlir %t/k/mma > /dev/null
// RUN: FileCheck %s --check-prefix=MMA --input-file=%t/k/mma/biased_lce_partial.ptx
// RUN: %ptxas -v -arch=sm_80 %t/k/mma/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores"
// RUN: %extract-ptx %t/tma.mlir %t/k/tma > /dev/null
// RUN: %extract-ptx %t/tma16.mlir %t/k/tma16 > /dev/null
// RUN: %extract-ptx %t/ws.mlir %t/k/ws > /dev/null
// RUN: %extract-ptx %t/wscap.mlir %t/k/wscap > /dev/null
// RUN: %extract-ptx %t/wide.mlir %t/k/wide > /dev/null
// RUN: %extract-ptx %t/wide16.mlir %t/k/wide16 > /dev/null
// RUN: %extract-ptx %t/widebias.mlir %t/k/widebias > /dev/null
// RUN: FileCheck %s --check-prefix=WHOLE --input-file=%t/k/tma/biased_lce_partial.ptx
// RUN: %ptxas -v -arch=sm_90a %t/k/tma/biased_*.ptx -o %t/a.cubin > %t/tma.ptxas 2>&1
// RUN: FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --input-file=%t/tma.ptxas
// RUN: FileCheck %s --check-prefix=REGS --input-file=%t/tma.ptxas
// RUN: %ptxas -v -arch=sm_90a %t/k/tma16/biased_*.ptx -o %t/a.cubin > %t/tma16.ptxas 2>&1
// RUN: FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --input-file=%t/tma16.ptxas
// RUN: FileCheck %s --check-prefix=REGS --input-file=%t/tma16.ptxas
// RUN: %ptxas -v -arch=sm_90a %t/k/ws/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores"
// RUN: %ptxas -v -arch=sm_90a %t/k/wscap/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores"
// RUN: %ptxas -v -arch=sm_90a %t/k/wide/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/wide16/fwd_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/wide/capped_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/wide16/vocab_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=VOCAB --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/wide16/fused_*.ptx -o %t/a.cubin > %t/ptxas1.log 2>&1
// RUN: FileCheck %s --check-prefix=FUSED --implicit-check-not="spill stores" --implicit-check-not=C75 --input-file=%t/ptxas1.log
// RUN: %python %S/../launch-fits.py %t/k/wide16/fused_*.ptx < %t/ptxas1.log | FileCheck %s --check-prefix=FITS
// RUN: %ptxas -v -arch=sm_90a %t/k/widebias/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75
// RUN: %ptxas -v -arch=sm_90a %t/k/wide/biased_*.ptx -o %t/a.cubin 2>&1 | FileCheck %s --check-prefix=FWD --implicit-check-not="spill stores" --implicit-check-not=C75

// A whole tile's bias: one address, the thread's columns a constant apart
// (2·(8j + q) bytes for column q of n8 block j).
// WHOLE-LABEL: .entry lce_partial
// WHOLE:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS:%rd[0-9]+]]+2];
// WHOLE:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS]]+16];
// WHOLE:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS]]+18];
// WHOLE:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS]]+242];

// mma.sync: column q of n8 block j of the warp's 32 at 2·(8j + q) bytes.
// MMA-LABEL: .entry lce_partial
// MMA:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS:%rd[0-9]+]]+2];
// MMA:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS]]+16];
// MMA:       ld.global.b16 {{%rs[0-9]+}}, [[[BIAS]]+50];

// FWD-COUNT-3:   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// REGS:          Function properties for lce_partial
// REGS-NEXT:     0 bytes stack frame
// REGS-NEXT:     Used {{1[0-4][0-9]}} registers
// VOCAB-COUNT-6: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FUSED-COUNT-9: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FITS-NOT:      DOES NOT LAUNCH
// FITS:          lce_partial: 384 threads x 168 registers: fits

func.func @biased(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %b: tensor<?xf16>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y, %b {storage = f16, compute = f32, softcap = 30.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf16> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

func.func @fwd(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

func.func @capped(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>) {
  %l, %lse = loss.linear_cross_entropy %x, %w, %y {storage = f16, compute = f32, softcap = 30.0} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>
  return %l, %lse : tensor<f32>, tensor<?xf32>
}

// -----

func.func @vocab(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>, %lse: tensor<?xf32>, %g: tensor<f32>) -> (tensor<?x?xf16>, tensor<?x?xf16>) {
  %dx, %dw = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %g {storage = f16, compute = f32, strategy = "vocab_chunked"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64>, tensor<?xf32>, tensor<f32> -> tensor<?x?xf16>, tensor<?x?xf16>
  return %dx, %dw : tensor<?x?xf16>, tensor<?x?xf16>
}

// -----

func.func @fused(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %y: tensor<?xi64>) -> (tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>) {
  %l, %lse, %dx, %dw = loss.linear_cross_entropy_with_grad %x, %w, %y {storage = f16, compute = f32, strategy = "vocab_chunked"} : tensor<?x?xf16>, tensor<?x?xf16>, tensor<?xi64> -> tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
  return %l, %lse, %dx, %dw : tensor<f32>, tensor<?xf32>, tensor<?x?xf16>, tensor<?x?xf16>
}
