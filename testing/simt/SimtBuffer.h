//===- SimtBuffer.h - memory seen by interpreted kernels --------*- C++ -*-===//
//
// A typed, flat array of elements (global, shared or private memory) plus
// the bookkeeping that makes the interpreter an oracle rather than an
// emulator: which elements were ever written (reading one that was not is an
// error) and, per element, the last accesses needed to find data races
// (accesses by different threads of a launch that no gpu.barrier orders).
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TESTING_SIMT_SIMTBUFFER_H
#define LOSSJIT_TESTING_SIMT_SIMTBUFFER_H

#include "testing/simt/SimtTypes.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lossjit::simt {

enum class MemorySpace : uint8_t { Global, Shared, Private };

/// "global memory", "shared memory", "private memory".
const char *getMemorySpaceName(MemorySpace space);

/// The accesses of one element that later accesses are checked against.
/// Blocks are identified by a process-wide serial (so records left by an
/// earlier launch are recognizably stale), threads by their linear id in the
/// block, barrier intervals by an epoch counted per block.
struct AccessShadow {
  uint64_t writeBlock = 0; ///< 0: no write in this launch
  uint64_t readBlock = 0;  ///< 0: no read since the last write
  uint32_t writeEpoch = 0;
  uint32_t writeThread = 0;
  uint32_t readEpoch = 0;
  uint32_t readThread = 0; ///< kManyThreads: more than kReaders threads read
  /// The writer's own vector clock at the write (kernels with mbarriers).
  uint32_t writeClock = 0;
  /// The readers of readEpoch and their clocks at their last read:
  /// readThread and readClock, then `moreReaders` more (kernels with
  /// mbarriers order a write after reads through them).
  uint32_t readClock = 0;
  static constexpr unsigned kReaders = 4;
  uint8_t moreReaders = 0;
  std::array<uint32_t, kReaders - 1> otherReader{}, otherClock{};
  bool readInManyBlocks = false;
  /// Written by an nvgpu.device_async_copy whose group was not waited for.
  bool asyncPending = false;
  /// The writer's count of async-proxy fences at the write: the async proxy
  /// (wgmma) may read the element once the writer has fenced since.
  uint32_t writeFences = 0;
  /// The last wgmma that read the element: its warpgroup and the serial of
  /// its commit group in that warpgroup (0: none). Writing the element is
  /// an error until a wgmma.wait_group has covered that group.
  uint32_t wgmmaWarpgroup = 0, wgmmaGroup = 0;
  static constexpr uint32_t kManyThreads = ~0u;
  /// Written by a TMA copy (the async proxy: wgmma reads it with no proxy
  /// fence). It landed at its mbarrier's phase completion; writeThread is
  /// the thread that issued it and writeClock that thread's clock in the
  /// phase, so a thread reaches the data by acquiring that phase (passing
  /// its wait) or by a gpu.barrier after the landing.
  bool tmaWrite = false;
  /// A peer block's multicast TMA copy: writeThread is a thread of this
  /// block that arrived in the phase it completed (ExecAsyncTransfer.cpp).
  bool peerTma = false;
  /// writeThread of a landed TMA copy in a kernel without vector clocks:
  /// ordered before every thread of the block.
  static constexpr uint32_t kAsyncProxy = ~0u - 1;
};

/// Memory of an interpreted kernel.
class SimtBuffer {
public:
  /// Wraps caller-owned memory of `numElements` elements of `type`; every
  /// element counts as initialized.
  SimtBuffer(std::string name, ElementType type, void *data,
             int64_t numElements, MemorySpace space = MemorySpace::Global);
  /// Owns zero-filled storage whose elements are uninitialized until a kernel
  /// writes them (workspaces, shared and private memory).
  SimtBuffer(std::string name, ElementType type, int64_t numElements,
             MemorySpace space = MemorySpace::Global);
  SimtBuffer(const SimtBuffer &) = delete;
  SimtBuffer &operator=(const SimtBuffer &) = delete;

  const std::string &getName() const { return name; }
  ElementType getType() const { return type; }
  MemorySpace getSpace() const { return space; }
  int64_t size() const { return numElements; }
  void *data() { return base; }
  const void *data() const { return base; }
  template <typename T> T *dataAs() { return static_cast<T *>(base); }

  /// Byte alignment of the buffer's start as the hardware would place it
  /// (shared memory: its attribution's llvm.align, else the element size;
  /// global memory: 256, as cudaMalloc gives).
  int64_t alignment() const { return align; }
  void setAlignment(int64_t bytes) { align = bytes; }

  bool isInitialized(int64_t i) const {
    return initialized.empty() || initialized[i];
  }
  /// Marks every element (un)initialized.
  void setAllInitialized(bool value);

  /// Element `i` as an interpreter word (see SimtTypes.h).
  uint64_t loadWord(int64_t i) const;
  /// Stores a word; marks the element initialized.
  void storeWord(int64_t i, uint64_t word);

  /// One byte per element (empty: all initialized). Interpreter internal.
  std::vector<uint8_t> initialized;
  /// Race-detection records, allocated on first use. Interpreter internal.
  std::vector<AccessShadow> shadow;
  /// Whether the running launch checks races on this buffer. Interpreter
  /// internal.
  bool trackRaces = false;
  /// Views of dynamic shared memory: the shared-window byte address of
  /// element 0 (kDynamicSharedWindowBase + the view's offset); -1 for other
  /// buffers. Interpreter internal.
  int64_t sharedAddress = -1;

private:
  std::string name;
  ElementType type;
  MemorySpace space;
  int64_t numElements;
  int64_t align = 256;
  std::vector<uint64_t> storage; // owned storage (8-byte aligned)
  void *base;
};

} // namespace lossjit::simt

#endif // LOSSJIT_TESTING_SIMT_SIMTBUFFER_H
