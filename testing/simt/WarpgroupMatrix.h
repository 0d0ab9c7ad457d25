//===- WarpgroupMatrix.h - PTX layouts of wgmma operands ---------*- C++ -*-===//
//
// Where wgmma.mma_async (sm_90a) finds its operands and puts its results,
// transcribed from the PTX ISA ("Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate": "Matrix Fragments for wgmma.mma_async.m64nNk16",
// "Shared Memory Matrix Layout", "Canonical Layouts", "Matrix Descriptor
// Format"). Like WarpMatrix.h, it is deliberately independent of the code
// that emits wgmma: it is what that code is checked against.
//
// A warpgroup is four consecutive warps whose first warp index is a multiple
// of four (128 threads). Shared-memory operands are described by a 64-bit
// matrix descriptor; within it, offsets are in bytes and the layouts are
// CuTe's canonical ones, with T = 16 bytes / element size elements per
// "128-bit element":
//
//   K-major,  no swizzle : ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
//   K-major,  swizzle W  : ((8,m),(T,2k)) : ((W·T,SBO),(1,T))
//   MN-major, no swizzle : ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
//   MN-major, swizzle W  : ((T,W,m),(8,k)) : ((1,T,LBO),(W·T,SBO))
//
// (first mode the M or N index, second the K index; W = 2, 4, 8 for the 32,
// 64 and 128-byte swizzles), after which a swizzle of W·16 bytes XORs byte
// address bits [4, 4 + log2 W) with bits [7, 7 + log2 W).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_WARPGROUPMATRIX_H
#define LOSSJIT_TESTING_SIMT_WARPGROUPMATRIX_H

#include <cstdint>
#include <optional>
#include <utility>

namespace lossjit::simt {

/// The swizzling mode of a matrix descriptor (bits 62–63).
enum class WgmmaSwizzle { None = 0, B128 = 1, B64 = 2, B32 = 3 };

/// A decoded wgmma shared-memory matrix descriptor. Byte quantities are
/// the encoded fields times 16.
struct MatrixDescriptor {
  int64_t startAddress = 0;       ///< bits 0–13, the start address >> 4.
  int64_t leadingByteOffset = 0;  ///< bits 16–29 (LBO).
  int64_t strideByteOffset = 0;   ///< bits 32–45 (SBO).
  int baseOffset = 0;             ///< bits 49–51 (swizzled modes only).
  WgmmaSwizzle swizzle = WgmmaSwizzle::None;

  /// The descriptor's fields; bits outside them are ignored, as the
  /// hardware does.
  static MatrixDescriptor decode(uint64_t bits);
  /// The 64-bit encoding (addresses and offsets must be multiples of 16
  /// below 2^18).
  uint64_t encode() const;
};

/// 16-byte units of a swizzle row: 1 (none), 2, 4 or 8.
int swizzleUnits(WgmmaSwizzle swizzle);

/// The byte address of element (mn, k) of an operand described by `desc`
/// whose elements take `elementBytes` bytes, `kMajor` or MN-major: the
/// canonical layout above from the descriptor's start address, then the
/// swizzle of the absolute address. nullopt for a non-zero base offset
/// (patterns that do not start on their 1024-, 512- or 256-byte repeat),
/// which the interpreter does not model.
std::optional<int64_t> wgmmaOperandAddress(const MatrixDescriptor &desc, bool kMajor,
                                           int elementBytes, int64_t mn, int64_t k);

/// (row, column) in the 64×N accumulator D of element `i` of the fragment
/// that thread `t` (0..127) of the warpgroup holds, for .m64nNk16 with an
/// f32 (or f16) D: N/2 elements per thread.
std::pair<int, int> wgmmaElementD(int t, int i);

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_WARPGROUPMATRIX_H
