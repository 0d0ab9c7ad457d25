//===- AsyncTransferModel.h - TMA tensor maps and mbarriers -----*- C++ -*-===//
//
// Hopper's asynchronous transfers as the interpreter runs them, transcribed
// from the CUDA driver API ("cuTensorMapEncodeTiled": the requirements a
// tensor map must meet) and the PTX ISA ("cp.async.bulk.tensor" in tile
// mode: the bounding box, out-of-bounds fill and the shared-memory
// swizzles; "mbarrier": phases, pending arrivals and the transaction
// count). Like WarpMatrix.h and WarpgroupMatrix.h it is independent of the
// code that emits these instructions: it is what that code is checked
// against.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_ASYNCTRANSFERMODEL_H
#define LOSSJIT_TESTING_SIMT_ASYNCTRANSFERMODEL_H

#include "testing/simt/SimtTypes.h"

#include <array>
#include <cstdint>
#include <string>

namespace lossjit::simt {

/// CUtensorMapSwizzle: the 16-byte chunks of each `span`-byte row of the box
/// in shared memory are permuted by the row's index (address bits [7, ...)).
enum class TmaSwizzle { None, B32, B64, B128 };
/// CUtensorMapFloatOOBfill: what a box element outside the tensor reads as.
enum class TmaOobFill { Zero, Nan };

/// A tiled tensor map (CUtensorMap made by cuTensorMapEncodeTiled, no
/// interleave): dimension 0 is the innermost, contiguous one. The global
/// memory is a buffer the launch binds; `globalOffset` is where element
/// (0, …, 0) lies in it, in elements.
struct TensorMapDesc {
  ElementType type = ElementType::F16;
  int rank = 2;                           ///< 1..5
  std::array<uint64_t, 5> globalDim{};    ///< elements per dimension
  std::array<uint64_t, 4> globalStrides{}; ///< bytes, of dimensions 1..rank-1
  std::array<uint32_t, 5> boxDim{};       ///< elements per dimension
  std::array<uint32_t, 5> elementStrides{1, 1, 1, 1, 1};
  TmaSwizzle swizzle = TmaSwizzle::None;
  TmaOobFill oobFill = TmaOobFill::Zero;
  int64_t globalOffset = 0;

  /// "" when cuTensorMapEncodeTiled would accept the map for a global
  /// address that is `addressAlign`-byte aligned, else the rule it breaks.
  std::string validate(int64_t addressAlign) const;
  /// Bytes of one box: what a copy adds to its mbarrier's transaction count
  /// (out-of-bounds elements included).
  int64_t boxBytes() const;
  /// The byte offset from the destination of box element `index` (row-major
  /// over the box, dimension 0 fastest) at shared-window address
  /// `destination`, with the swizzle applied to the absolute address: for a
  /// span of 2^b·16 bytes, address bits [4, 4 + b) are XORed with bits
  /// [7, 7 + b).
  int64_t sharedOffset(int64_t destination, const std::array<uint32_t, 5> &index) const;
  /// The span of a swizzled row in bytes (0: none).
  int64_t swizzleSpan() const;
};

/// One mbarrier object. A phase completes when its pending arrivals reach
/// zero and its transaction count is zero; the next phase then starts with
/// the expected arrivals again and a zero count.
class MbarrierModel {
public:
  /// mbarrier.init: phase 0, `count` expected arrivals (1 .. 2^20 − 1).
  std::string init(int64_t count);
  /// mbarrier.arrive (one arrival); arrive.expect_tx adds `txBytes` to the
  /// transaction count first. "" or why the arrival is invalid.
  std::string arrive(int64_t txBytes = 0);
  /// The complete_tx of an asynchronous copy: the count drops by `bytes`.
  std::string completeTx(int64_t bytes);
  /// test_wait/try_wait.parity: whether the phase of parity `parity` (the
  /// current one or the one before it) has completed.
  bool phaseComplete(bool parity) const { return (completedPhases & 1) != uint64_t(parity); }

  bool initialized() const { return isInitialized; }
  uint64_t phases() const { return completedPhases; }
  int64_t pendingArrivals() const { return pending; }
  int64_t transactionCount() const { return tx; }

private:
  void completeIfDone();

  bool isInitialized = false;
  int64_t expected = 0, pending = 0, tx = 0;
  uint64_t completedPhases = 0;
};

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_ASYNCTRANSFERMODEL_H
