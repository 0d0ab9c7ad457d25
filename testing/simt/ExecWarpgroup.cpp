//===- ExecWarpgroup.cpp - execution of the sm_90a warpgroup ops ----------===//
//
// wgmma.mma_async computes at issue: its operands are read from dynamic
// shared memory through the descriptors (WarpgroupMatrix.h), every element
// checked as a read by the warpgroup's first thread (initialized, no race
// with an unordered write, no cp.async in flight) and for the async proxy:
// the thread that last wrote it must have executed a fence.proxy.async since
// (a cp.async's data counts as written when its wait lands it). Products of
// f16/bf16 values are exact in f64; each k16 step's sum is rounded once to
// f32, as the mma.sync model does, so a wgmma tile and an mma.sync tile over
// the same k steps agree bit for bit here.
//
// The group rules: commit_group closes the thread's issued wgmmas into a
// group, wait_group N leaves at most N groups in flight, and no group may be
// in flight when the block ends. The shared memory a wgmma read stays its
// operand until a wait covers its group: writing it earlier (a refill of a
// stage the tensor cores may still be reading) is an error. Reading
// accumulators before the wait that covers them is not detected (the
// results exist at issue).
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

using namespace lossjit::simt;
using namespace lossjit::simt::detail;

bool Executor::requireFullWarpgroups(const Instr &in, const uint32_t *act, uint32_t n,
                                     const char *what) {
  for (uint32_t i = 0; i < n;) {
    uint32_t first = act[i];
    if (first % 128 != 0 || i + 128 > n || act[i + 127] != first + 127)
      return fail(
          in, first,
          llvm::formatv("{0} needs whole warpgroups (128 converged threads from a "
                        "multiple of 128){1}",
                        what, ctaThreads % 128 ? "; the block size is not a multiple of 128" : ""));
    i += 128;
  }
  return true;
}

bool Executor::readAsyncProxy(const Instr &in, int64_t address, ElementType input, uint32_t t,
                              double &value) {
  // Thread t's block's shared memory.
  const size_t perCta = prog.workgroup.size();
  for (size_t b = ctaOf(t) * perCta; b < (ctaOf(t) + 1) * perCta; ++b) {
    auto &buf = sharedBuffers[b];
    if (buf->sharedAddress < 0)
      continue;
    const int64_t bytes = int64_t(getBitWidth(buf->getType()) + 7) / 8;
    const int64_t offset = address - buf->sharedAddress;
    if (offset < 0 || offset >= buf->size() * bytes)
      continue;
    if (buf->getType() != input || offset % bytes)
      return fail(in, t,
                  llvm::formatv("wgmma operand at shared address {0} lies in '{1}', which "
                                "holds {2}, not {3}",
                                address, buf->getName(), getElementTypeName(buf->getType()),
                                getElementTypeName(input)));
    const int64_t i = offset / bytes;
    if (!checkRead(in, *buf, i, t))
      return false;
    if (tracksRaces(*buf)) {
      const AccessShadow &s = buf->shadow[size_t(i)];
      if (s.writeBlock == serialOf(t) && !s.tmaWrite && proxyFences[s.writeThread] == s.writeFences)
        return fail(in, t,
                    "wgmma reads " + elementText(*buf, i) + ", written by thread " +
                        threadText(s.writeThread) +
                        " with no nvvm.fence.proxy (async.shared::cta) by that thread since: "
                        "the async proxy may not see the write");
    }
    // The operand stays read by this wgmma until a wait covers its group
    // (the one the next commit closes).
    if (tracksRaces(*buf)) {
      AccessShadow &s = buf->shadow[size_t(i)];
      s.wgmmaWarpgroup = t / 128;
      s.wgmmaGroup = wgmmaCommitted[t / 128] + 1;
    }
    value = floatWordValue(ElementType::F32, buf->loadWord(i));
    return true;
  }
  return fail(in, t,
              llvm::formatv("wgmma operand at shared address {0} is outside every view of "
                            "dynamic shared memory",
                            address));
}

bool Executor::execWgmma(const Instr &in, const uint32_t *act, uint32_t n) {
  if (!requireFullWarpgroups(in, act, n, "nvvm.wgmma.mma_async"))
    return false;
  const WgmmaInfo &info = prog.wgmmas[in.aux];
  const uint64_t *descA = slot(in.a), *descB = slot(in.b);
  std::vector<double> a(64 * 16), b(size_t(info.n) * 16);
  for (uint32_t g = 0; g < n; g += 128) {
    const uint32_t base = act[g];
    for (uint32_t t = base; t < base + 128; ++t)
      if (descA[t] != descA[base] || descB[t] != descB[base])
        return fail(in, t, "wgmma descriptors differ between threads of the warpgroup");
    auto load = [&](uint64_t bits, bool kMajor, int64_t lines, std::vector<double> &out) {
      MatrixDescriptor desc = MatrixDescriptor::decode(bits);
      for (int64_t line = 0; line < lines; ++line)
        for (int64_t k = 0; k < 16; ++k) {
          std::optional<int64_t> address = wgmmaOperandAddress(desc, kMajor, 2, line, k);
          if (!address)
            return fail(in, base,
                        "wgmma descriptor with a non-zero matrix base offset (not modeled)");
          if (!readAsyncProxy(in, *address, info.input, base, out[size_t(line * 16 + k)]))
            return false;
        }
      return true;
    };
    if (!load(descA[base], info.aKMajor, 64, a) || !load(descB[base], info.bKMajor, info.n, b))
      return false;
    for (uint32_t t = 0; t < 128; ++t)
      for (uint32_t i = 0; i < in.lanes; ++i) {
        auto [row, col] = wgmmaElementD(int(t), int(i));
        double sum = info.accumulate ? floatWordValue(ElementType::F32, slot(in.c + i)[base + t])
                                     : 0.0;
        for (int k = 0; k < 16; ++k)
          sum += a[size_t(row * 16 + k)] * b[size_t(col * 16 + k)];
        slot(in.res + i)[base + t] = makeFloatWord(ElementType::F32, sum);
      }
    for (uint32_t t = base; t < base + 128; ++t)
      ++wgmmaUncommitted[t];
  }
  return true;
}

bool Executor::execWgmmaSync(const Instr &in, const uint32_t *act, uint32_t n) {
  switch (in.opc) {
  case Opc::ProxyFence:
    for (uint32_t i = 0; i < n; ++i)
      ++proxyFences[act[i]];
    return true;
  case Opc::WgmmaFence:
    return requireFullWarpgroups(in, act, n, "nvvm.wgmma.fence.aligned");
  case Opc::WgmmaCommit:
    if (!requireFullWarpgroups(in, act, n, "nvvm.wgmma.commit.group.sync.aligned"))
      return false;
    for (uint32_t i = 0; i < n; ++i) {
      wgmmaUncommitted[act[i]] = 0;
      ++wgmmaGroups[act[i]];
    }
    for (uint32_t i = 0; i < n; i += 128)
      ++wgmmaCommitted[act[i] / 128];
    return true;
  case Opc::WgmmaWait:
    if (!requireFullWarpgroups(in, act, n, "nvvm.wgmma.wait.group.sync.aligned"))
      return false;
    for (uint32_t i = 0; i < n; ++i)
      wgmmaGroups[act[i]] = std::min(wgmmaGroups[act[i]], in.imm);
    for (uint32_t i = 0; i < n; i += 128) {
      const uint32_t wg = act[i] / 128;
      wgmmaRetired[wg] = std::max<int64_t>(wgmmaRetired[wg], int64_t(wgmmaCommitted[wg]) - in.imm);
    }
    return true;
  default:
    llvm_unreachable("not a warpgroup synchronization op");
  }
}

bool Executor::checkAsyncDrained(const Instr &in) {
  if (!pendingTma.empty())
    return failBlock(in, llvm::formatv("the block ends with {0} TMA copy(ies) in flight (their "
                                       "mbarrier phase never completed: do the arrive.expect_tx "
                                       "bytes match the boxes?)",
                                       pendingTma.size()));
  for (uint32_t t = 0; t < numThreads; ++t) {
    if (wgmmaUncommitted[t])
      return fail(in, t,
                  "the block ends with a wgmma.mma_async that no wgmma.commit_group committed");
    if (wgmmaGroups[t])
      return fail(in, t,
                  llvm::formatv("the block ends with {0} wgmma group(s) in flight (no "
                                "wgmma.wait_group 0 covered them)",
                                wgmmaGroups[t]));
  }
  return true;
}

bool Executor::checkWgmmaOperandRetired(const Instr &in, const SimtBuffer &buf, int64_t i,
                                        uint32_t t) {
  const AccessShadow &s = buf.shadow[size_t(i)];
  if (s.wgmmaGroup == 0 || s.wgmmaWarpgroup >= wgmmaRetired.size() ||
      wgmmaRetired[s.wgmmaWarpgroup] >= s.wgmmaGroup)
    return true;
  return fail(in, t,
              llvm::formatv("write to {0} while the wgmma of warpgroup {1} that reads it (its "
                            "group {2}) is in flight: no wgmma.wait_group has covered it",
                            elementText(buf, i), s.wgmmaWarpgroup, s.wgmmaGroup));
}

bool Executor::execSetMaxRegister(const Instr &in, const uint32_t *act, uint32_t n) {
  if (!requireFullWarpgroups(in, act, n, "nvvm.setmaxregister"))
    return false;
  const bool increase = in.mode == 1;
  const uint32_t count = uint32_t(in.imm);
  // Each block has its own pool of registers.
  return forEachCta(act, n, [&](uint32_t c, const uint32_t *act, uint32_t n) {
    int64_t needed = 0;
    for (uint32_t i = 0; i < n; i += 128) {
      // PTX ISA: after a setmaxnreg, all warps of the warpgroup synchronize
      // explicitly before the next one.
      if (setRegistersUnsynced[act[i] / 128])
        return fail(in, act[i],
                    llvm::formatv("nvvm.setmaxregister: warpgroup {0} set its registers before "
                                  "and passed no barrier of all its threads since (the PTX ISA "
                                  "asks its warps to synchronize between two setmaxnregs)",
                                  act[i] / 128));
      const uint32_t held = warpgroupRegisters[act[i] / 128];
      // PTX ISA: an increase below, or a decrease above, the count the
      // warpgroup holds is undefined.
      if (increase ? count < held : count > held)
        return fail(in, act[i],
                    llvm::formatv("nvvm.setmaxregister {0} {1} but the warpgroup holds {2} "
                                  "registers per thread",
                                  increase ? "increase" : "decrease", count, held));
      needed += (int64_t(count) - int64_t(held)) * 128;
    }
    if (increase && !blockUntil(
                        in, [this, c, needed] { return freeRegisters[c] >= needed; },
                        [this, c, needed, act] {
                          return llvm::formatv("warpgroup {0} waits in setmaxregister increase for "
                                               "{1} registers; the block's pool holds {2}",
                                               act[0] / 128, needed, freeRegisters[c])
                              .str();
                        }))
      return false;
    freeRegisters[c] -= needed;
    for (uint32_t i = 0; i < n; i += 128) {
      warpgroupRegisters[act[i] / 128] = count;
      setRegistersUnsynced[act[i] / 128] = 1;
    }
    return true;
  });
}

bool Executor::execNamedBarrier(const Instr &in, const uint32_t *act, uint32_t n) {
  // Each block has its own named barriers.
  return forEachCta(act, n, [&](uint32_t c, const uint32_t *act, uint32_t n) {
    return namedBarrier(in, c, act, n);
  });
}

bool Executor::namedBarrier(const Instr &in, uint32_t c, const uint32_t *act, uint32_t n) {
  const bool arriveOnly = in.mode == 1;
  const char *what = arriveOnly ? "nvvm.barrier.arrive" : "nvvm.barrier";
  const uint32_t id = uint32_t(slot(in.a)[act[0]]), count = uint32_t(slot(in.b)[act[0]]);
  for (uint32_t i = 1; i < n; ++i)
    if (uint32_t(slot(in.a)[act[i]]) != id || uint32_t(slot(in.b)[act[i]]) != count)
      return fail(in, act[i],
                  llvm::formatv("{0}: the barrier id and thread count must be the same in "
                                "every thread that reaches it",
                                what));
  if (id < 1 || id > 15)
    return fail(in, act[0],
                llvm::formatv("{0} id must be in [1, 15] (0 is the block's, gpu.barrier), "
                              "got {1}",
                              what, id));
  if (count == 0 || count % 32 || count > ctaThreads)
    return fail(in, act[0],
                llvm::formatv("{0} {1}: its thread count must be a multiple of 32 in [32, "
                              "{2}], got {3}",
                              what, id, ctaThreads, count));
  if (!requireFullWarps(in, act, n, what))
    return false;
  NamedBarrierModel &bar = namedBarriers[c][id];
  if (bar.arrived && bar.count != count)
    return fail(in, act[0],
                llvm::formatv("{0} {1} for {2} threads while its phase counts {3} (PTX ISA: "
                              "undefined)",
                              what, id, count, bar.count));
  // The hardware would carry the surplus into the next phase; the kernels
  // never arrive with more threads than a phase counts, so more is an error
  // here (stricter than the hardware).
  if (bar.arrived + n > count)
    return fail(in, act[0],
                llvm::formatv("{0} {1}: {2} threads arrive in a phase of {3} ({4} already did)",
                              what, id, n, count, bar.arrived));
  bar.count = count;
  if (syncClocks())
    for (uint32_t i = 0; i < n; ++i)
      releaseInto(bar.pendingClocks, act[i]);
  bar.arrived += n;
  if (!arriveOnly)
    bar.waiting += n;
  const uint64_t phase = bar.completed;
  if (bar.arrived == count) {
    // The waiters of this phase acquire what it released, however many
    // phases complete before they wake.
    if (bar.waiting)
      bar.released[phase] = {std::move(bar.pendingClocks), bar.waiting};
    ++bar.completed;
    bar.arrived = bar.waiting = 0;
    bar.pendingClocks.clear();
  }
  if (arriveOnly)
    return true;
  if (!blockUntil(
          in, [&bar, phase] { return bar.completed > phase; },
          [this, &bar, id, act] {
            return llvm::formatv("thread {0} waits in nvvm.barrier {1} for {2} threads; {3} "
                                 "arrived",
                                 threadText(act[0]), id, bar.count, bar.arrived)
                .str();
          }))
    return false;
  auto it = bar.released.find(phase);
  assert(it != bar.released.end() && "a completed phase with waiters keeps its clocks");
  for (uint32_t i = 0; i < n; ++i)
    acquireFrom(it->second.first, act[i]);
  it->second.second -= n;
  if (!it->second.second)
    bar.released.erase(it);
  noteWarpgroupsSynchronized(act, n);
  return true;
}

void Executor::noteWarpgroupsSynchronized(const uint32_t *act, uint32_t n) {
  for (uint32_t i = 0; i < n;) {
    const uint32_t group = act[i] / 128;
    uint32_t inGroup = 0;
    while (i < n && act[i] / 128 == group)
      ++inGroup, ++i;
    if (inGroup == std::min<uint32_t>(128, ctaThreads - (group * 128) % ctaStride))
      setRegistersUnsynced[group] = 0;
  }
}

bool Executor::checkNamedBarriersDrained(const Instr &end) {
  for (uint32_t c = 0; c < numCtas; ++c)
    for (uint32_t id = 1; id < 16; ++id)
      if (const NamedBarrierModel &bar = namedBarriers[c][id]; bar.arrived)
        return fail(end, c * ctaStride,
                    llvm::formatv("named barrier {0}: {1} of its {2} threads arrived and the "
                                  "block ended before the rest did",
                                  id, bar.arrived, bar.count));
  return true;
}
