//===- RaceDetector.cpp - data-race checks of the SIMT interpreter --------===//
//
// Race detection follows the barrier-interval model: an access is ordered
// after an earlier one when both come from the same thread, or from the same
// block with a gpu.barrier between them (different epoch). Each element keeps
// its last write and its last reads (AccessShadow); a new access that is not
// ordered after a conflicting one is a race.
//
// Records carry block serials: records left by an earlier launch have
// serials below launchFirstSerial and order before everything. The
// destination of an nvgpu.device_async_copy is "in flight" from the copy to
// the issuing thread's covering device_async_wait; any access meanwhile is an
// error.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

std::string Executor::elementText(const SimtBuffer &buf, int64_t i) const {
  return llvm::formatv("element {0} of '{1}' ({2})", i, buf.getName(),
                       getMemorySpaceName(buf.getSpace()));
}

bool Executor::checkRead(const Instr &in, SimtBuffer &buf, int64_t i, uint32_t t) {
  if (!buf.isInitialized(i))
    return fail(in, t, "read of uninitialized " + elementText(buf, i));
  if (!tracksRaces(buf))
    return true;
  AccessShadow &s = buf.shadow[size_t(i)];
  if (s.asyncPending)
    return fail(in, t,
                "read of " + elementText(buf, i) +
                    " while an nvgpu.device_async_copy to it is in flight "
                    "(no nvgpu.device_async_wait covered its group) or a TMA copy to it "
                    "(its mbarrier phase has not completed)");
  if (s.writeBlock >= launchFirstSerial) {
    bool ordered = s.writeBlock == blockSerial && (s.writeThread == t || s.writeEpoch != epoch ||
                                                  s.writeThread == AccessShadow::kAsyncProxy);
    if (!ordered)
      return fail(in, t, raceText("read", buf, i, "write", s.writeBlock, s.writeThread));
  }
  if (s.readBlock < launchFirstSerial) {
    s.readBlock = blockSerial;
    s.readEpoch = epoch;
    s.readThread = t;
    s.readInManyBlocks = false;
  } else if (s.readBlock != blockSerial) {
    s.readInManyBlocks = true;
    s.readBlock = blockSerial;
    s.readEpoch = epoch;
    s.readThread = t;
  } else if (s.readEpoch != epoch) {
    s.readEpoch = epoch;
    s.readThread = t;
  } else if (s.readThread != t) {
    s.readThread = AccessShadow::kManyThreads;
  }
  return true;
}

bool Executor::checkWrite(const Instr &in, SimtBuffer &buf, int64_t i, uint32_t t) {
  if (!tracksRaces(buf))
    return true;
  if (!checkWgmmaOperandRetired(in, buf, i, t))
    return false;
  AccessShadow &s = buf.shadow[size_t(i)];
  if (s.asyncPending)
    return fail(in, t,
                "write to " + elementText(buf, i) +
                    " while an nvgpu.device_async_copy to it is in flight");
  if (s.writeBlock >= launchFirstSerial) {
    bool ordered = s.writeBlock == blockSerial && (s.writeThread == t || s.writeEpoch != epoch ||
                                                  s.writeThread == AccessShadow::kAsyncProxy);
    if (!ordered)
      return fail(in, t, raceText("write", buf, i, "write", s.writeBlock, s.writeThread));
  }
  if (s.readBlock >= launchFirstSerial) {
    if (s.readInManyBlocks || s.readBlock != blockSerial)
      return fail(in, t,
                  "data race: write of " + elementText(buf, i) +
                      " that a thread of another block read in the same "
                      "launch");
    if (s.readEpoch == epoch && s.readThread != t) {
      if (s.readThread == AccessShadow::kManyThreads)
        return fail(in, t,
                    "data race: write of " + elementText(buf, i) +
                        " that other threads of the block read with no "
                        "gpu.barrier in between");
      return fail(in, t, raceText("write", buf, i, "read", s.readBlock, s.readThread));
    }
  }
  s.writeBlock = blockSerial;
  s.writeEpoch = epoch;
  s.writeThread = t;
  s.writeFences = proxyFences[t];
  s.readBlock = 0;
  s.readInManyBlocks = false;
  return true;
}

std::string Executor::raceText(const char *access, const SimtBuffer &buf, int64_t i,
                               const char *earlier, uint64_t otherBlock,
                               uint32_t otherThread) const {
  std::string where = otherBlock == blockSerial ? std::string(" with no gpu.barrier in between")
                                                : " of block " + blockTextOfSerial(otherBlock);
  return std::string("data race: ") + access + " of " + elementText(buf, i) + " after a " +
         earlier + " by thread " + threadText(otherThread) + where;
}

void Executor::setUpRaceRecords(llvm::ArrayRef<SimtArg> args) {
  // Race records only for buffers some parameter may write through.
  for (size_t i = 0; i < args.size(); ++i)
    if (prog.args[i].first)
      args[i].buf->trackRaces = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto [isMemref, index] = prog.args[i];
    if (!isMemref || !options.detectRaces || !prog.memrefParamWritten[index])
      continue;
    SimtBuffer &buf = *args[i].buf;
    buf.trackRaces = true;
    if (buf.shadow.size() != size_t(buf.size()))
      buf.shadow.assign(size_t(buf.size()), AccessShadow());
  }
}

void Executor::markAsyncPending(SimtBuffer &buf, int64_t i) {
  if (tracksRaces(buf))
    buf.shadow[size_t(i)].asyncPending = true;
}

void Executor::landAsyncCopy(const PendingCopy &copy, uint32_t t) {
  if (tracksRaces(*copy.buffer))
    for (int64_t e = 0; e < copy.count; ++e) {
      AccessShadow &s = copy.buffer->shadow[size_t(copy.begin + e)];
      s.asyncPending = false;
      // The data lands now: order later accesses against this point.
      s.writeBlock = blockSerial;
      s.writeEpoch = epoch;
      s.writeThread = t;
      s.writeFences = proxyFences[t];
    }
}
