//===- TileConfig.h - the knobs of the kernel builders ----------*- C++ -*-===//
//
// The C++ view of the `#loss.gpu_config` / `#loss.cpu_config` lowering
// attributes (dialects/Loss/LoweringConfig.td): the selection pass builds
// the attribute from one of these, the lowerings read it back into one.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_COMPILER_KERNELS_SUPPORT_TILECONFIG_H
#define LOSSJIT_COMPILER_KERNELS_SUPPORT_TILECONFIG_H

#include "dialects/Loss/LossDialect.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace lossjit {

/// Tile configuration of the GPU kernels. Kernels are specialized on it (and
/// on dtype and options) but stay generic in N, V and D.
struct TileConfig {
  /// Rows of x per thread block (BN): each thread keeps BN accumulators.
  int64_t blockRows = 4;
  /// Threads per block; a power of two so the block reductions are trees.
  int64_t threads = 128;
  /// Vocabulary splits (S): grid.y of the partial-statistics kernel.
  int64_t splits = 8;
  /// How tile products are formed (Matmul/ has one strategy per kind).
  loss::MatmulKind matmul = loss::MatmulKind::simt;
  /// Stages of the operand pipeline (1: none).
  int64_t stages = 1;
  /// mma_sync: vocabulary columns per block tile (BN) and the reduction
  /// step (BK); 0 for simt (one column per thread, no k tile).
  int64_t blockCols = 0;
  int64_t blockK = 0;
  /// wgmma: columns of the gradient products' tiles (0: blockCols). They
  /// have no LSE epilogue, so wider accumulator tiles fit their registers.
  int64_t gradCols = 0;
  /// wgmma: 1 to load the logit products' operands by TMA into swizzled
  /// stages on an mbarrier ring (Wgmma.cpp) — with blockK 64 the gradient
  /// products' too — 0 for the cp.async ring; 2 for TMA issued by a
  /// producer warp of its own (warp specialization: productThreads()); 3
  /// by a producer warpgroup that lends its registers to the consumers
  /// while they sweep tiles (setmaxnreg: warpgroupRegisters()).
  int64_t tma = 0;
  /// Tensor cores: 0, or the most blocks the gradient-side product kernels
  /// launch, each sweeping several tiles (GpuSchedule::forEachTile).
  int64_t persistent = 0;
  /// Tensor cores: 0, or the KiB of A operand rows a band of the product
  /// kernels' tiles keeps in L2 (GpuSchedule::forEachTile's tile order).
  int64_t band = 0;
  /// wgmma with tma ≥ 2: 0, or 2 or 4 to launch the products (lce_partial, and
  /// with a block per tile lce_bwd_dz / lce_fused_z, lce_bwd_dx and
  /// lce_bwd_dw: GpuSchedule::logitsCluster, gradientCluster) in clusters of
  /// that many row blocks that multicast each shared tile (Wgmma.cpp,
  /// "Clusters").
  int64_t cluster = 0;
  /// "auto": no tile of its own. The selection pass gives every op the
  /// tile defaultFor() picks for its chip, storage and schedule (the other
  /// fields are unused). What the JIT and lossjit-aot compile with unless
  /// told a tile.
  bool automatic = false;

  /// The automatic choice ("auto").
  static TileConfig automaticChoice();
  /// The tile an op starts from on `chip` (sm_NN[a]): tensor cores for
  /// f16/bf16 storage on sm_80 and newer — forMatmul(wgmma) on sm_90a,
  /// forMatmul(mma_sync) elsewhere — except for the recompute schedule,
  /// which they do not build; SIMT otherwise (f32 storage stays f32 FMA:
  /// TF32 is never a default).
  static TileConfig defaultFor(llvm::StringRef chip, mlir::Type storage, loss::Schedule schedule);

  /// The tile a strategy starts from: the defaults above for simt; for
  /// mma_sync 64×64 logits per block in four 32×32 warp tiles, k steps of
  /// 32 through a 3-stage cp.async ring (30 KiB of shared memory); for
  /// wgmma 128×64 per block (two warpgroups sharing the W tile), k steps
  /// of 32 through a 4-stage ring (48 KiB: two k tiles copied ahead while
  /// one wgmma group is in flight), which every op's epilogue fits (the
  /// loss families' too; the cross-entropy ops take 128 columns from
  /// matmul=auto), and a second warpgroup halves the W traffic that bounds
  /// these kernels in bench/gpu/perf_model.py. The gradient products dZ·W
  /// and dZᵀ·X have no epilogue and take 128×128 (grad_cols; 147–176
  /// registers, 64 KiB ring).
  static TileConfig forMatmul(loss::MatmulKind kind);

  /// Knobs a user or a pass option sets; -1 leaves a field as it is.
  struct Knobs {
    int64_t blockRows = -1, threads = -1, splits = -1, stages = -1, blockCols = -1, blockK = -1;
    int64_t gradCols = -1, tma = -1, persistent = -1, band = -1, cluster = -1;
  };
  /// This tile with every set knob replaced.
  TileConfig with(const Knobs &knobs) const;
  /// With `automatic`: the knobs the selection sets over each op's choice
  /// (lossjit-gpu-pipeline="matmul=auto persistent=132"); all unset else.
  Knobs overrides;
  /// The automatic choice with `knobs` over it.
  static TileConfig automaticChoice(const Knobs &knobs) {
    TileConfig t = automaticChoice();
    t.overrides = knobs;
    return t;
  }

  /// Threads of a warp-specialized product's producer: a warp with tma=2,
  /// a warpgroup with tma=3, none otherwise.
  int64_t producerThreads() const { return tma == 2 ? 32 : tma == 3 ? 128 : 0; }
  /// Threads per block of the kernels that form tile products with this
  /// tile: `threads`, plus the producer's.
  int64_t productThreads() const { return threads + producerThreads(); }
  /// Registers per thread of a product kernel whose warpgroups trade them
  /// (tma=3; all 0 otherwise): `launch`, what each starts with (the
  /// kernel's nvvm.maxnreg: the 64 Ki register file over productThreads(),
  /// rounded down to a multiple of 8, so a block takes nearly all of it:
  /// 384 × 168 = 64512); `producer`, what the producer keeps while it
  /// copies; `consumer`, what each consumer warpgroup takes while it
  /// multiplies (the producer's release, shared). 384 threads: 168, 40
  /// and 232.
  struct WarpgroupRegisters {
    int64_t launch = 0, producer = 0, consumer = 0;
  };
  /// This tile's WarpgroupRegisters.
  WarpgroupRegisters warpgroupRegisters() const;
  /// Columns of C one block tile covers: BN, or one per thread (simt).
  int64_t tileCols() const { return blockCols ? blockCols : threads; }
  /// The tile of the gradient products dZ·W and dZᵀ·X: this one, with
  /// gradCols columns where set.
  TileConfig gradientTile() const {
    TileConfig t = *this;
    if (gradCols)
      t.blockCols = gradCols, t.gradCols = 0;
    return t;
  }
  /// Canonical text, e.g. "block_rows=4,threads=128,splits=8,matmul=simt,
  /// stages=1" (block_cols and block_k follow when not 0), or "auto"; launch
  /// plans and bundle manifests carry it.
  std::string str() const;
  /// Checks the ranges every kernel builder relies on (the attribute's
  /// verifier applies the same rules).
  llvm::Error validate() const;
  /// Parses `str()`'s format; keys may be omitted: they keep the default
  /// tile of the `matmul` given (forMatmul), so "matmul=mma_sync" alone is
  /// that strategy's default tile. "auto" is automaticChoice().
  static llvm::Expected<TileConfig> parse(llvm::StringRef text);

  /// As the lowering attribute, for an op lowered with `schedule`.
  loss::GpuConfigAttr toAttr(mlir::MLIRContext *context, loss::Schedule schedule) const;
  static TileConfig fromAttr(loss::GpuConfigAttr attr);
};

/// Options of the host kernels. Every product element is summed in
/// ascending k with one fma per term whatever the tile, so every host (and
/// every register tile) gets the same bits (see compiler/Target/CpuTarget.h).
struct CpuTileConfig {
  /// The register tile of the three products: blockRows rows by blockCols
  /// vectors of vectorWidth columns (the logits: blockRows rows of x by
  /// blockCols·vectorWidth packed columns of w; dX and dW: blockRows rows by
  /// blockCols column groups). Sized to the target's vector registers;
  /// never a bit of the result depends on it.
  int64_t blockRows = 8;
  int64_t blockCols = 1;
  int64_t vectorWidth = 8; ///< f32 lanes of a column group (speed only).
  /// Register blocks per panel: the forward sweeps the vocabulary in tiles
  /// for a panel of blockRows·panelBlocks rows, so each W tile is read once
  /// per panel.
  int64_t panelBlocks = 16;
  /// Vocabulary columns per tile (the W rows kept hot in cache).
  int64_t vocabTile = 64;
  /// Lanes of the fixed-order reduction; equal to the GPU block size so the
  /// two backends sum per-row losses in the same order.
  int64_t reduceLanes = 128;

  std::string str() const;
  llvm::Error validate() const;
  /// The register tile for a CPU with `registers` vector registers that each
  /// hold a vector<vectorWidth x f32> (32 with AVX-512, 16 with AVX, 8 with
  /// SSE where a vector<8> takes two registers).
  static CpuTileConfig forVectorRegisters(int64_t registers);
  loss::CpuConfigAttr toAttr(mlir::MLIRContext *context, loss::Schedule schedule) const;
  static CpuTileConfig fromAttr(loss::CpuConfigAttr attr);
};

} // namespace lossjit

#endif // LOSSJIT_COMPILER_KERNELS_SUPPORT_TILECONFIG_H
