//===- RaceDetector.cpp - data-race checks of the SIMT interpreter --------===//
//
// Race detection follows the barrier-interval model: an access is ordered
// after an earlier one when both come from the same thread, or from the same
// block with a gpu.barrier between them (different epoch), or — in kernels
// with mbarriers — when the later thread passed a wait on a phase that the
// earlier one arrived on after its access, directly or through others
// (vector clocks: releaseClocks, acquireClocks). Each element keeps
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
  if (s.writeBlock >= launchFirstSerial && !writeOrdered(s, t))
    return fail(in, t,
                raceText("read", buf, i, writeKind(s), s.writeBlock, s.writeThread, t));
  const bool sameBlock = s.readBlock == serialOf(t);
  if (s.readBlock < launchFirstSerial || !sameBlock || s.readEpoch != epochOf(t)) {
    // A fresh record: the first read since the write, or in this block, or
    // since a barrier.
    s.readInManyBlocks = s.readBlock >= launchFirstSerial && !sameBlock ? true
                         : sameBlock                                      ? s.readInManyBlocks
                                                                          : false;
    s.readBlock = serialOf(t);
    s.readEpoch = epochOf(t);
    s.readThread = t;
    s.readClock = ownClock(t);
    s.moreReaders = 0;
    return true;
  }
  noteReader(s, t);
  return true;
}

bool Executor::writeOrdered(const AccessShadow &s, uint32_t t) const {
  // A peer block of the cluster: ordered only through the cluster's clocks
  // (its gpu.barrier epochs say nothing about this block).
  if (peerSerial(s.writeBlock, t))
    return s.writeThread == AccessShadow::kAsyncProxy ||
           synchronizedWith(t, s.writeThread, s.writeClock);
  return s.writeBlock == serialOf(t) && (s.writeThread == t || s.writeEpoch != epochOf(t) ||
                                         s.writeThread == AccessShadow::kAsyncProxy ||
                                         synchronizedWith(t, s.writeThread, s.writeClock));
}

void Executor::noteReader(AccessShadow &s, uint32_t t) const {
  if (s.readThread == AccessShadow::kManyThreads)
    return;
  if (s.readThread == t) {
    s.readClock = ownClock(t);
    return;
  }
  for (unsigned k = 0; k < s.moreReaders; ++k)
    if (s.otherReader[k] == t) {
      s.otherClock[k] = ownClock(t);
      return;
    }
  if (s.moreReaders + 1u == AccessShadow::kReaders) {
    s.readThread = AccessShadow::kManyThreads;
    return;
  }
  s.otherReader[s.moreReaders] = t;
  s.otherClock[s.moreReaders++] = ownClock(t);
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
  if (s.writeBlock >= launchFirstSerial && !writeOrdered(s, t))
    return fail(in, t,
                raceText("write", buf, i, writeKind(s), s.writeBlock, s.writeThread, t));
  if (s.readBlock >= launchFirstSerial) {
    // Reads by one peer block of the cluster order before the write only
    // through the cluster's clocks: as reads of the same epoch.
    const bool peer = !s.readInManyBlocks && peerSerial(s.readBlock, t);
    if (!peer && (s.readInManyBlocks || s.readBlock != serialOf(t)))
      return fail(in, t,
                  "data race: write of " + elementText(buf, i) +
                      " that a thread of another block read in the same "
                      "launch");
    if (peer || s.readEpoch == epochOf(t)) {
      if (s.readThread == AccessShadow::kManyThreads)
        return fail(in, t,
                    "data race: write of " + elementText(buf, i) +
                        " that other threads of the block read with no "
                        "gpu.barrier in between");
      // Every reader is this thread, or one it synchronized with since.
      auto unordered = [&](uint32_t reader, uint32_t clock) {
        return reader != t && !synchronizedWith(t, reader, clock);
      };
      if (unordered(s.readThread, s.readClock))
        return fail(in, t, raceText("write", buf, i, "read", s.readBlock, s.readThread, t));
      for (unsigned k = 0; k < s.moreReaders; ++k)
        if (unordered(s.otherReader[k], s.otherClock[k]))
          return fail(in, t, raceText("write", buf, i, "read", s.readBlock, s.otherReader[k], t));
    }
  }
  s.writeBlock = serialOf(t);
  s.writeEpoch = epochOf(t);
  s.writeThread = t;
  s.writeClock = ownClock(t);
  s.writeFences = proxyFences[t];
  s.tmaWrite = s.peerTma = false;
  s.readBlock = 0;
  s.readInManyBlocks = false;
  return true;
}

std::string Executor::raceText(const char *access, const SimtBuffer &buf, int64_t i,
                               const char *earlier, uint64_t otherBlock, uint32_t otherThread,
                               uint32_t t) const {
  std::string where = peerSerial(otherBlock, t) ? std::string(" with no mbarrier phase or cluster "
                                                              "barrier ordering them")
                      : otherBlock != serialOf(t) ? " of block " + blockTextOfSerial(otherBlock)
                      : syncClocks() ? std::string(" with no gpu.barrier in between and no "
                                                   "mbarrier phase ordering them")
                                     : std::string(" with no gpu.barrier in between");
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
      s.writeBlock = serialOf(t);
      s.writeEpoch = epochOf(t);
      s.writeThread = t;
      s.writeClock = ownClock(t);
      s.writeFences = proxyFences[t];
      s.tmaWrite = s.peerTma = false;
    }
}

void Executor::resetClocks() {
  clocks.clear();
  barrierClocks.clear();
  // Named barriers and cluster barriers order their threads only: clocks
  // too; and so does everything between the blocks of a cluster.
  if ((prog.mbarrierGroups.empty() && !prog.namedBarriers && !prog.clusterBarriers &&
       numCtas == 1) ||
      !options.detectRaces)
    return;
  clocks.assign(size_t(numThreads) * numThreads, 0);
  for (uint32_t t = 0; t < numThreads; ++t)
    clocks[size_t(t) * numThreads + t] = 1;
  barrierClocks.assign(numCtas, {});
  for (uint32_t c = 0; c < numCtas; ++c)
    for (size_t g = 0; g < prog.mbarrierGroups.size(); ++g)
      barrierClocks[c].push_back(std::vector<PhaseClocks>(prog.mbarrierGroups[g]));
}

void Executor::releaseClocks(uint32_t c, uint64_t group, uint64_t id, uint32_t t) {
  if (!syncClocks())
    return;
  releaseInto(barrierClocks[c][group][id].pending, t);
  barrierClocks[c][group][id].pendingArriver = t;
}

void Executor::releaseInto(std::vector<uint32_t> &phase, uint32_t t) {
  if (phase.empty())
    phase.assign(numThreads, 0);
  uint32_t *own = clocks.data() + size_t(t) * numThreads;
  for (uint32_t u = 0; u < numThreads; ++u)
    phase[u] = std::max(phase[u], own[u]);
  // Accesses after the arrival are not covered by it.
  ++own[t];
}

void Executor::acquireFrom(const std::vector<uint32_t> &phase, uint32_t t) {
  if (phase.empty())
    return;
  uint32_t *own = clocks.data() + size_t(t) * numThreads;
  for (uint32_t u = 0; u < numThreads; ++u)
    own[u] = std::max(own[u], phase[u]);
}

void Executor::completePhaseClocks(uint32_t c, uint64_t group, uint64_t id, uint64_t phases) {
  if (!syncClocks())
    return;
  PhaseClocks &p = barrierClocks[c][group][id];
  // The phase that completed is phases − 1.
  p.completed[(phases - 1) & 1] = std::move(p.pending);
  p.pending.clear();
  p.completedArriver[(phases - 1) & 1] = p.pendingArriver;
  p.pendingArriver = ~0u;
}

void Executor::acquireClocks(uint32_t c, uint64_t group, uint64_t id, bool parity, uint32_t t) {
  if (!syncClocks())
    return;
  acquireFrom(barrierClocks[c][group][id].completed[parity], t);
}
