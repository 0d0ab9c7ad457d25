//===- ExecCluster.cpp - thread-block clusters (sm_90) --------------------===//
//
// The blocks of a cluster run together (SimtExecutor.cpp): their threads
// share one lockstep thread space and one set of vector clocks, so the only
// orderings between blocks are the ones the hardware gives — mbarrier
// phases (a consumer's arrival on a peer's mbarrier, a multicast copy's
// completion) and the cluster barrier.
//
// The cluster barrier (barrier.cluster.arrive / wait): every thread of the
// cluster arrives once per phase and then waits for it; an arrival releases
// the thread's clocks (not a relaxed one) and the wait acquires what the
// phase released.
//
// mbarrier addresses: nvgpu.mbarrier.get gives a word naming (group, id)
// with kAddressTag set; nvvm.mapa adds the block rank + 1 above bit 32;
// nvvm.mbarrier.arrive arrives on the block the word names (its own when
// no rank was mapped). The words are opaque: nothing but these ops may use
// them.
//
// A block's mbarrier is a peer's to use only after the cluster barrier
// that follows its mbarrier.init (the PTX ISA's fence.mbarrier_init and
// cluster barrier; its use earlier races with the init on hardware). No
// block may end while a peer may still touch its shared memory: a cluster
// barrier must complete after the last access to a peer.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

using namespace lossjit::simt;
using namespace lossjit::simt::detail;

namespace {
/// Marks an mbarrier's address word (nvgpu.mbarrier.get).
constexpr uint64_t kAddressTag = uint64_t(1) << 31;
/// Not arrived on the cluster barrier (ClusterBarrierModel::arrivedOn).
constexpr uint64_t kNotArrived = ~uint64_t(0);
} // namespace

bool Executor::notePeerAccess(const Instr &in, uint32_t t, uint32_t c, uint64_t group,
                              uint64_t id) {
  if (c == ctaOf(t))
    return true;
  if (group != ~uint64_t(0)) {
    const uint64_t published = mbarrierInitPhase[c][group][id];
    if (published == kUnpublished || clusterBarrier.completed <= published)
      return fail(in, t,
                  llvm::formatv("uses mbarrier {0} of block rank {1} before its mbarrier.init "
                                "reached the cluster (nvvm.fence.mbarrier.init or a non-relaxed "
                                "nvvm.cluster.arrive after the init, then a cluster barrier "
                                "phase that completes, before peers use it)",
                                id, c));
  }
  // A cluster barrier phase after this access must complete before the
  // blocks end.
  const uint64_t after = clusterPhaseAfter(t);
  if (lastPeerAccessPhase == ~uint64_t(0) || after > lastPeerAccessPhase)
    lastPeerAccessPhase = after;
  return true;
}

void Executor::publishInits(uint32_t t, uint64_t phase) {
  for (const auto &[c, group, id] : unpublishedInits[t])
    mbarrierInitPhase[c][group][id] = phase;
  unpublishedInits[t].clear();
}

bool Executor::execCluster(const Instr &in, const uint32_t *act, uint32_t n) {
  ClusterBarrierModel &bar = clusterBarrier;
  switch (in.opc) {
  case Opc::ClusterArrive: {
    const bool relaxed = in.mode == 1;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = act[i];
      if (bar.arrivedOn[t] != kNotArrived)
        return fail(in, t,
                    "nvvm.cluster.arrive again before the nvvm.cluster.wait of its last "
                    "arrival");
      bar.arrivedOn[t] = bar.completed;
      // A release arrival publishes the thread's inits with this phase; a
      // relaxed one publishes nothing (the fence must have).
      if (!relaxed)
        publishInits(t, bar.completed);
      if (syncClocks() && !relaxed)
        releaseInto(bar.pendingClocks, t);
    }
    bar.arrived += n;
    if (bar.arrived == all.size()) {
      bar.completedClocks = std::move(bar.pendingClocks);
      bar.pendingClocks.clear();
      bar.arrived = 0;
      ++bar.completed;
    }
    return true;
  }
  case Opc::ClusterWait: {
    for (uint32_t i = 0; i < n; ++i)
      if (bar.arrivedOn[act[i]] == kNotArrived)
        return fail(in, act[i], "nvvm.cluster.wait with no nvvm.cluster.arrive before it");
    auto ready = [this, act, n] {
      for (uint32_t i = 0; i < n; ++i)
        if (clusterBarrier.completed <= clusterBarrier.arrivedOn[act[i]])
          return false;
      return true;
    };
    auto why = [this, act] {
      return llvm::formatv("thread {0} waits in nvvm.cluster.wait for the cluster's {1} "
                           "threads; {2} arrived",
                           threadText(act[0]), all.size(), clusterBarrier.arrived)
          .str();
    };
    if (!blockUntil(in, ready, why))
      return false;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = act[i];
      bar.arrivedOn[t] = kNotArrived;
      if (syncClocks())
        acquireFrom(bar.completedClocks, t);
    }
    noteWarpgroupsSynchronized(act, n);
    return true;
  }
  case Opc::FenceMbarrierInit:
    // fence.mbarrier_init.release.cluster: the thread's inits reach the
    // peers with the next cluster barrier phase it arrives on.
    for (uint32_t i = 0; i < n; ++i)
      publishInits(act[i], clusterPhaseAfter(act[i]));
    return true;
  case Opc::MbarrierGet:
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = act[i];
      const uint64_t group = slot(in.a)[t], id = slot(in.b)[t];
      if (!mbarrier(in, t, ctaOf(t), group, id))
        return false;
      slot(in.res)[t] = kAddressTag | group << 16 | id;
    }
    return true;
  case Opc::Mapa:
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = act[i];
      const uint64_t address = slot(in.a)[t], rank = slot(in.b)[t] & 0xffffffff;
      if (!(address & kAddressTag) || address >> 32)
        return fail(in, t,
                    "nvvm.mapa of a shared address that is not an mbarrier's (only "
                    "nvgpu.mbarrier.get addresses are modeled)");
      if (rank >= numCtas)
        return fail(
            in, t, llvm::formatv("nvvm.mapa to block rank {0} of a cluster of {1}", rank, numCtas));
      slot(in.res)[t] = address | (rank + 1) << 32;
    }
    return true;
  case Opc::PtrArrive:
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = act[i];
      const uint64_t address = slot(in.a)[t];
      if (!(address & kAddressTag))
        return fail(in, t,
                    "nvvm.mbarrier.arrive on an address that is not an mbarrier's "
                    "(nvgpu.mbarrier.get, then nvvm.mapa for a peer's)");
      const uint32_t c = address >> 32 ? uint32_t((address >> 32) - 1) : ctaOf(t);
      const uint64_t group = (address & (kAddressTag - 1)) >> 16, id = address & 0xffff;
      MbarrierModel *m = mbarrier(in, t, c, group, id);
      if (!m || !notePeerAccess(in, t, c, group, id))
        return false;
      const int64_t count = in.b == kNoSlot ? 1 : int64_t(int32_t(slot(in.b)[t]));
      if (count < 1)
        return fail(in, t,
                    llvm::formatv("nvvm.mbarrier.arrive count {0} (must be positive)", count));
      if (m->initialized())
        releaseClocks(c, group, id, t);
      for (int64_t k = 0; k < count; ++k) {
        const uint64_t before = m->phases();
        if (std::string why = m->arrive(); !why.empty())
          return fail(in, t, why);
        if (m->phases() != before)
          completePhase(c, group, id);
      }
    }
    return true;
  default:
    llvm_unreachable("not a cluster op");
  }
}

bool Executor::checkClusterDrained(const Instr &end) {
  for (uint32_t t : all)
    if (clusterBarrier.arrivedOn[t] != kNotArrived)
      return fail(end, t, "the block ends after an nvvm.cluster.arrive with no nvvm.cluster.wait");
  if (lastPeerAccessPhase != ~uint64_t(0) && clusterBarrier.completed <= lastPeerAccessPhase)
    return failBlock(end, "the cluster's blocks end with no cluster barrier after the last "
                          "access to a peer's shared memory or mbarriers (a block may exit "
                          "while its peer still writes to it: nvvm.cluster.arrive and "
                          "nvvm.cluster.wait before the end)");
  return true;
}
