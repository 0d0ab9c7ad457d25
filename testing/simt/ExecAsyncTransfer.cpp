//===- ExecAsyncTransfer.cpp - mbarriers and TMA tile loads (sm_90) -------===//
//
// The block's mbarriers follow AsyncTransferModel.h. A TMA load copies its
// box at issue (out-of-bounds elements filled with zero or NaN, the
// destination swizzled by its shared-window address) and applies its
// complete_tx to the mbarrier at once; its destination stays in flight —
// any access is an error — until that mbarrier's phase completes, when the
// copy lands: as a write by the issuing thread released into that phase, so
// a thread that reads it without passing the phase's wait (or a gpu.barrier
// after it) races with it. A parity wait whose phase has
// not completed blocks its task (ExecTasks.cpp): other threads run until
// the phase completes, or the block deadlocks. Arrivals release the
// arriving thread's vector clocks into the phase and a passed wait
// acquires them (RaceDetector.cpp): a producer that waits for its
// consumers' arrivals may then overwrite what they read.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace lossjit::simt;
using namespace lossjit::simt::detail;

MbarrierModel *Executor::mbarrier(const Instr &in, uint32_t t, uint32_t c, uint64_t group,
                                  uint64_t id) {
  const auto &groups = mbarriers[c];
  if (group >= groups.size() || id >= groups[group].size()) {
    fail(in, t,
         llvm::formatv("mbarrier {0} of a group of {1}", id,
                       group < groups.size() ? groups[group].size() : 0));
    return nullptr;
  }
  return &mbarriers[c][group][id];
}

void Executor::completePhase(uint32_t c, uint64_t group, uint64_t id) {
  const uint64_t phases = mbarriers[c][group][id].phases();
  completePhaseClocks(c, group, id, phases);
  landTma(c, group, id, phases);
}

void Executor::landTma(uint32_t c, uint64_t group, uint64_t id, uint64_t phases) {
  // The phase that completed (phases − 1) carries the clocks its arrivals
  // released: a copy lands as a write by its issuing thread at that
  // thread's clock there, so only a thread that acquires the phase (or
  // passes a gpu.barrier after it) is ordered after it. The issuing
  // thread arrived (expect_tx) in the phase, or the phase would not have
  // been waiting for the copy's bytes.
  const PhaseClocks *clocksOf = syncClocks() ? &barrierClocks[c][group][id] : nullptr;
  const std::vector<uint32_t> *released =
      clocksOf ? &clocksOf->completed[(phases - 1) & 1] : nullptr;
  // A peer's multicast copy lands as a write by a thread that arrived in
  // the phase, at its clock there: the peer's issuing thread never arrived
  // here, and what the phase released of its clock may be long stale (a
  // reader that skipped the wait would pass as ordered).
  const uint32_t arriver = clocksOf ? clocksOf->completedArriver[(phases - 1) & 1] : ~0u;
  auto landed = [&](const PendingTma &copy) {
    if (copy.cta != c || copy.group != group || copy.barrier != id)
      return false;
    if (tracksRaces(*copy.buffer))
      for (int64_t e : copy.elements) {
        AccessShadow &s = copy.buffer->shadow[size_t(e)];
        s.asyncPending = false;
        s.tmaWrite = true;
        s.writeBlock = ctaSerials[c];
        s.writeEpoch = ctaEpochs[c];
        const uint32_t writer = ctaOf(copy.thread) == c ? copy.thread : arriver;
        s.peerTma = writer != copy.thread;
        if (released && writer < released->size()) {
          s.writeThread = writer;
          s.writeClock = (*released)[writer];
        } else {
          s.writeThread = AccessShadow::kAsyncProxy;
        }
        s.readBlock = 0;
      }
    return true;
  };
  pendingTma.erase(std::remove_if(pendingTma.begin(), pendingTma.end(), landed),
                   pendingTma.end());
}

bool Executor::execAsyncTransfer(const Instr &in, const uint32_t *act, uint32_t n) {
  if (in.opc == Opc::MbarrierWait)
    return execMbarrierWait(in, act, n);
  const uint32_t predicate = uint32_t(in.imm);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t t = act[i];
    if (in.opc == Opc::TmaLoad) {
      if (!execTmaLoad(in, t))
        return false;
      continue;
    }
    if (predicate != kNoSlot && !(slot(predicate)[t] & 1))
      continue;
    const uint64_t group = slot(in.a)[t], id = slot(in.b)[t];
    const uint32_t c = ctaOf(t);
    MbarrierModel *m = mbarrier(in, t, c, group, id);
    if (!m)
      return false;
    std::string why;
    switch (in.opc) {
    case Opc::MbarrierInit:
      why = m->init(int64_t(slot(in.c)[t]));
      // Published to the peers by the thread's fence or cluster arrival.
      mbarrierInitPhase[c][group][id] = kUnpublished;
      unpublishedInits[t].push_back({c, group, id});
      break;
    case Opc::MbarrierArrive: {
      const uint64_t before = m->phases();
      if (m->initialized())
        releaseClocks(c, group, id, t);
      why = m->arrive(in.c == kNoSlot ? 0 : int64_t(slot(in.c)[t]));
      if (why.empty() && m->phases() != before)
        completePhase(c, group, id);
      if (in.res != kNoSlot)
        slot(in.res)[t] = m->phases();
      break;
    }
    default:
      llvm_unreachable("not an mbarrier op");
    }
    if (!why.empty())
      return fail(in, t, why);
  }
  return true;
}

bool Executor::execMbarrierWait(const Instr &in, const uint32_t *act, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t t = act[i];
    MbarrierModel *m = mbarrier(in, t, ctaOf(t), slot(in.a)[t], slot(in.b)[t]);
    if (!m)
      return false;
    if (!m->initialized())
      return fail(in, t,
                  "mbarrier.try_wait.parity on an mbarrier that no mbarrier.init initialized");
  }
  // The first thread whose phase has not completed (n when none).
  auto firstWaiting = [this, &in, act, n] {
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = act[i];
      if (!mbarriers[ctaOf(t)][slot(in.a)[t]][slot(in.b)[t]].phaseComplete(slot(in.c)[t] & 1))
        return i;
    }
    return n;
  };
  auto why = [this, &in, act, firstWaiting] {
    const uint32_t t = act[firstWaiting()];
    const uint64_t id = slot(in.b)[t];
    const MbarrierModel &m = mbarriers[ctaOf(t)][slot(in.a)[t]][id];
    return llvm::formatv("thread {0} waits for the phase of parity {1} of mbarrier {2}, which "
                         "has not completed ({3} arrival(s) and {4} transaction byte(s) "
                         "outstanding)",
                         threadText(t), int(slot(in.c)[t] & 1), id, m.pendingArrivals(),
                         m.transactionCount())
        .str();
  };
  if (!blockUntil(in, [firstWaiting, n] { return firstWaiting() == n; }, why))
    return false;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t t = act[i];
    acquireClocks(ctaOf(t), slot(in.a)[t], slot(in.b)[t], slot(in.c)[t] & 1, t);
  }
  return true;
}

bool Executor::execTmaLoad(const Instr &in, uint32_t t) {
  const TmaLoadInfo &info = prog.tmaLoads[in.aux];
  if (info.predicate != kNoSlot && !(slot(info.predicate)[t] & 1))
    return true;
  if (info.multicast == kNoSlot)
    return tmaLoadInto(in, t, ctaOf(t));
  // Multicast: the box lands in every block the mask names, at the same
  // offset of its shared memory, completing on its mbarrier of the same
  // group and index.
  const uint64_t mask = slot(info.multicast)[t] & 0xffff;
  if (mask == 0 || mask >> numCtas)
    return fail(in, t,
                llvm::formatv("nvgpu.tma.async.load multicast mask {0} must name at least one "
                              "block and only ranks of the cluster of {1}",
                              mask, numCtas));
  for (uint32_t c = 0; c < numCtas; ++c)
    if ((mask >> c & 1) && !tmaLoadInto(in, t, c))
      return false;
  return true;
}

bool Executor::tmaLoadInto(const Instr &in, uint32_t t, uint32_t c) {
  const TmaLoadInfo &info = prog.tmaLoads[in.aux];
  const uint64_t mapIndex = slot(in.a)[t];
  if (mapIndex >= tensorMaps.size())
    return fail(in, t, "nvgpu.tma.async.load descriptor is not a tensor map parameter");
  if (!tensorMaps[mapIndex].map)
    return fail(in, t,
                "nvgpu.tma.async.load through a tensor map the launch did not encode "
                "(SimtArg::unencodedTensorMap: the runtime passes zeros)");
  const TensorMapDesc &map = *tensorMaps[mapIndex].map;
  SimtBuffer &global = *tensorMaps[mapIndex].global;
  const int rank = int(info.box.size());
  // The descriptor type the kernel was compiled with must describe the map
  // the launch passes (box, element type, swizzle, fill).
  bool same = map.type == info.type && map.rank == rank &&
              int(map.swizzle) == info.swizzle && (map.oobFill == TmaOobFill::Nan) == info.nanFill;
  for (int d = 0; same && d < rank; ++d)
    same = int64_t(map.boxDim[d]) == info.box[size_t(d)];
  if (!same)
    return fail(in, t,
                "nvgpu.tma.async.load: the tensor map bound to the launch (its element type, "
                "box, swizzle or out-of-bounds fill) is not the one the descriptor type promises");
  const MemrefDesc &dst = descOf(info.dst.memref, t);
  // Block c's copy of the destination: the same attribution in its shared
  // memory.
  const size_t perCta = prog.workgroup.size();
  size_t own = 0;
  while (own < sharedBuffers.size() && sharedBuffers[own].get() != dst.buffer)
    ++own;
  if (own == sharedBuffers.size())
    return fail(in, t, "nvgpu.tma.async.load destination is not shared memory of the block");
  SimtBuffer &shared = *sharedBuffers[c * perCta + own % perCta];
  const int64_t bytes = int64_t((getBitWidth(map.type) + 7) / 8);
  if (shared.sharedAddress < 0 || shared.getType() != map.type)
    return fail(in, t,
                "nvgpu.tma.async.load destination '" + shared.getName() +
                    "' must be a view of dynamic shared memory of the tensor map's element type");
  const int64_t address = shared.sharedAddress + dst.offset * bytes;
  if (address % 128)
    return fail(in, t,
                llvm::formatv("nvgpu.tma.async.load destination at shared address {0} is not "
                              "128-byte aligned",
                              address));
  int64_t viewElements = 1;
  for (unsigned d = 0; d < dst.rank; ++d)
    viewElements *= dst.sizes[d];
  const uint64_t group = slot(in.b)[t], id = slot(in.c)[t];
  MbarrierModel *m = mbarrier(in, t, c, group, id);
  if (!m)
    return false;
  if (!notePeerAccess(in, t, c, group, id))
    return false;
  if (!m->initialized())
    return fail(in, t, "nvgpu.tma.async.load completes on an mbarrier that no mbarrier.init "
                       "initialized");
  std::array<int64_t, 5> coord{};
  for (int d = 0; d < rank; ++d)
    coord[size_t(d)] = int64_t(slot(prog.slots[info.coords + uint32_t(d)])[t]);
  const uint64_t fill = map.oobFill == TmaOobFill::Nan
                            ? makeFloatWord(map.type, std::numeric_limits<double>::quiet_NaN())
                            : 0;
  PendingTma copy{&shared, {}, group, id, t, c};
  std::array<uint32_t, 5> index{};
  const int64_t boxElements = map.boxBytes() / bytes;
  for (int64_t e = 0; e < boxElements; ++e) {
    int64_t rest = e, globalIndex = map.globalOffset;
    bool inside = true;
    for (int d = 0; d < rank; ++d) {
      index[size_t(d)] = uint32_t(rest % map.boxDim[d]);
      rest /= map.boxDim[d];
      const int64_t g = coord[size_t(d)] + index[size_t(d)];
      inside = inside && g >= 0 && g < int64_t(map.globalDim[d]);
      globalIndex += d == 0 ? g : g * int64_t(map.globalStrides[d - 1]) / bytes;
    }
    const int64_t at = (dst.offset * bytes + map.sharedOffset(address, index)) / bytes;
    if (at - dst.offset >= viewElements)
      return fail(in, t,
                  llvm::formatv("nvgpu.tma.async.load box of {0} bytes overruns its "
                                "destination view of {1} elements",
                                map.boxBytes(), viewElements));
    uint64_t word = fill;
    if (inside) {
      if (!checkRead(in, global, globalIndex, t))
        return false;
      word = global.loadWord(globalIndex);
    }
    if (!checkWrite(in, shared, at, t))
      return false;
    shared.storeWord(at, word);
    markAsyncPending(shared, at);
    copy.elements.push_back(at);
  }
  pendingTma.push_back(std::move(copy));
  const uint64_t before = m->phases();
  if (std::string why = m->completeTx(map.boxBytes()); !why.empty())
    return fail(in, t, why);
  if (m->phases() != before)
    completePhase(c, group, id);
  return true;
}
