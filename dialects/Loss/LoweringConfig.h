//===- LoweringConfig.h - the lowering decisions on a fused op --*- C++ -*-===//

#ifndef LOSSJIT_DIALECTS_LOSS_LOWERINGCONFIG_H
#define LOSSJIT_DIALECTS_LOSS_LOWERINGCONFIG_H

#include "dialects/Loss/LossDialect.h"

#include "mlir/IR/Operation.h"

#include <string>

namespace lossjit::loss {

/// The discardable attribute on a fused op holding its #loss.gpu_config or
/// #loss.cpu_config.
inline constexpr llvm::StringLiteral kLoweringConfigAttrName = "loss.lowering_config";
/// The discardable attribute on a GPU kernel counting the TMA tensor maps it
/// takes (its !llvm.ptr parameters with llvm.align = 64), which
/// loss-tensor-map-grid-constant passes by value.
inline constexpr llvm::StringLiteral kTensorMapsAttrName = "loss.tensor_maps";
/// The discardable attribute on a GPU kernel whose dynamic shared memory
/// must start more than 16-byte aligned (TMA's swizzled stages: 1024), which
/// loss-extern-dynamic-shared-memory gives the base and the interpreter
/// honours.
inline constexpr llvm::StringLiteral kDynamicSharedAlignAttrName = "loss.dynamic_shared_align";

/// The most blocks tile persistent may name (grid.x of the kernels it
/// applies to; a multiple of any SM count in sight).
inline constexpr int64_t kMaxPersistentBlocks = 65536;
/// The most KiB tile band may name (1 GiB: more than any L2 in sight).
inline constexpr int64_t kMaxBandKiB = 1 << 20;
/// The rules every GPU tile must meet; "" when it does, else why not (the
/// attribute's verifier and the compiler's TileConfig share them).
std::string checkGpuConfig(MatmulKind matmul, int64_t blockRows, int64_t threads, int64_t splits,
                           int64_t stages, int64_t blockCols, int64_t blockK, int64_t gradCols = 0,
                           int64_t tma = 0, int64_t persistent = 0, int64_t band = 0,
                           int64_t cluster = 0);
/// Whether `matmul` multiplies on tensor cores (16-bit operands, f32
/// accumulators): mma_sync and wgmma.
inline bool isTensorCoreMatmul(MatmulKind matmul) { return matmul != MatmulKind::simt; }
/// "" when chip `chip` (sm_NN[a]) runs `matmul`'s instructions, else why
/// not: wgmma is specific to sm_90a.
std::string checkMatmulChip(MatmulKind matmul, llvm::StringRef chip);
/// Likewise for the host kernels.
std::string checkCpuConfig(int64_t blockRows, int64_t blockCols, int64_t vectorWidth,
                           int64_t panelBlocks, int64_t vocabTile, int64_t reduceLanes);

/// The schedules `op` (a fused op) can be lowered with: forward for
/// linear_cross_entropy, chunked, vocab_chunked or recompute for _grad,
/// fused or fused_vocab_chunked for _with_grad. False for any other op.
bool scheduleFits(mlir::Operation *op, Schedule schedule);

/// The op's config attribute, or null when it has none.
mlir::Attribute getLoweringConfig(mlir::Operation *op);

} // namespace lossjit::loss

#endif // LOSSJIT_DIALECTS_LOSS_LOWERINGCONFIG_H
