//===- ExecControl.cpp - execution of ids, control flow and barriers ------===//
//
// Structured control flow narrows the active thread list: scf.if runs each
// branch for the threads that take it, scf.for and scf.while iterate while
// any thread continues. The narrower lists live in a bump arena, one level
// per region nesting (per task: ExecTasks.cpp runs the branches of a
// divergent scf.if as tasks where they may wait on each other). A gpu.barrier must be reached by every thread of the
// block; it starts a new epoch for the race detector.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace mlir;
using namespace lossjit::simt;
using namespace lossjit::simt::detail;

bool Executor::execId(const Instr &in, const uint32_t *act, uint32_t n) {
  uint64_t *r = slot(in.res);
  unsigned d = in.mode;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    uint64_t v = 0;
    switch (in.opc) {
    case Opc::ThreadId:
      v = threadIds[d][t];
      break;
    case Opc::BlockId:
      v = uint64_t(ctaBlockIds[ctaOf(t)][d]);
      break;
    case Opc::ClusterId:
      v = uint64_t(ctaBlockIds[ctaOf(t)][d] / cluster[d]);
      break;
    case Opc::ClusterDim:
      v = uint64_t(grid[d] / cluster[d]);
      break;
    case Opc::ClusterBlockId:
      v = uint64_t(ctaBlockIds[ctaOf(t)][d] % cluster[d]);
      break;
    case Opc::ClusterDimBlocks:
      v = uint64_t(cluster[d]);
      break;
    case Opc::BlockDim:
      v = uint64_t(block[d]);
      break;
    case Opc::GridDim:
      v = uint64_t(grid[d]);
      break;
    case Opc::GlobalId:
      v = uint64_t(ctaBlockIds[ctaOf(t)][d] * block[d]) + threadIds[d][t];
      break;
    case Opc::LaneId:
      v = t % 32;
      break;
    case Opc::SubgroupId:
      v = (t % ctaStride) / 32;
      break;
    default:
      v = (ctaThreads + 31) / 32;
      break;
    }
    r[t] = v;
  }
  return true;
}

bool Executor::execControl(const Instr &in, const uint32_t *act, uint32_t n) {
  switch (in.opc) {
  case Opc::If:
    return execIf(in, act, n);
  case Opc::For:
    return execFor(in, act, n);
  case Opc::While:
    return execWhile(in, act, n);
  case Opc::Yield:
    copies(in.aux, act, n);
    return true;
  case Opc::Barrier:
    return execBarrier(in, act, n);
  case Opc::Condition:
  case Opc::Nop:
    return true;
  default:
    llvm_unreachable("not a control op");
  }
}

void Executor::copies(uint32_t setIndex, const uint32_t *act, uint32_t n) {
  const CopySet &set = prog.copySets[setIndex];
  if (!set.viaTemp) {
    for (uint32_t c = 0; c < set.count; ++c) {
      const Copy &copy = prog.copies[set.begin + c];
      for (uint32_t l = 0; l < copy.lanes; ++l) {
        uint64_t *dst = slot(copy.dst + l), *src = slot(copy.src + l);
        for (uint32_t i = 0; i < n; ++i)
          dst[act[i]] = src[act[i]];
      }
    }
    return;
  }
  size_t staged = 0;
  for (uint32_t c = 0; c < set.count; ++c) {
    const Copy &copy = prog.copies[set.begin + c];
    for (uint32_t l = 0; l < copy.lanes; ++l, ++staged) {
      uint64_t *src = slot(copy.src + l);
      uint64_t *tmp = temp.data() + staged * numThreads;
      for (uint32_t i = 0; i < n; ++i)
        tmp[act[i]] = src[act[i]];
    }
  }
  staged = 0;
  for (uint32_t c = 0; c < set.count; ++c) {
    const Copy &copy = prog.copies[set.begin + c];
    for (uint32_t l = 0; l < copy.lanes; ++l, ++staged) {
      uint64_t *dst = slot(copy.dst + l);
      uint64_t *tmp = temp.data() + staged * numThreads;
      for (uint32_t i = 0; i < n; ++i)
        dst[act[i]] = tmp[act[i]];
    }
  }
}

bool Executor::execIf(const Instr &in, const uint32_t *act, uint32_t n) {
  const IfInfo &info = prog.ifs[in.aux];
  uint64_t *cond = slot(info.cond);
  uint32_t mark = current->arenaTop;
  uint32_t *lists = arenaAlloc(n);
  uint32_t numThen = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (cond[act[i]])
      lists[numThen++] = act[i];
  uint32_t numElse = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (!cond[act[i]])
      lists[numThen + numElse++] = act[i];
  bool ok = true;
  if (numThen && numElse && mayBlock()) {
    // The branches may wait on each other (ExecTasks.cpp): the second one
    // starts as a task of its own if the first one blocks.
    Deferred second{info.elseRegion, std::vector<uint32_t>(lists + numThen, lists + n)};
    current->deferred.push_back(&second);
    ok = exec(info.thenRegion.begin, info.thenRegion.end, lists, numThen);
    current->deferred.pop_back();
    // A started branch is joined even after a failure (its task unwinds).
    if (!ok && second.task)
      aborted = true;
    if (ok || second.task)
      ok = finishDeferred(second) && ok;
    current->arenaTop = mark;
    return ok;
  }
  if (numThen)
    ok = exec(info.thenRegion.begin, info.thenRegion.end, lists, numThen);
  if (ok && numElse)
    ok = exec(info.elseRegion.begin, info.elseRegion.end, lists + numThen, numElse);
  current->arenaTop = mark;
  return ok;
}

bool Executor::execFor(const Instr &in, const uint32_t *act, uint32_t n) {
  const ForInfo &f = prog.fors[in.aux];
  unsigned w = getBitWidth(f.ivType);
  uint64_t mask = widthMask(w);
  copies(f.init, act, n);
  uint64_t *iv = slot(f.iv), *lb = slot(f.lb), *ub = slot(f.ub), *step = slot(f.step);
  auto less = [&](uint64_t x, uint64_t y) {
    return f.unsignedCmp ? x < y : signExtend(x, w) < signExtend(y, w);
  };
  uint32_t mark = current->arenaTop;
  uint32_t *run = arenaAlloc(n);
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = act[i];
    if (signExtend(step[t], w) <= 0 && !(f.unsignedCmp && step[t] != 0)) {
      current->arenaTop = mark;
      return fail(in, t, llvm::formatv("scf.for step {0} is not positive", signExtend(step[t], w)));
    }
    iv[t] = lb[t];
    if (less(lb[t], ub[t]))
      run[m++] = t;
  }
  while (m) {
    if (!exec(f.body.begin, f.body.end, run, m)) {
      current->arenaTop = mark;
      return false;
    }
    uint32_t k = 0;
    for (uint32_t j = 0; j < m; ++j) {
      uint32_t t = run[j];
      // Continue iff iv + step < ub, computed without overflow: ub > iv, so
      // ub - iv is exact as an unsigned w-bit number.
      uint64_t remaining = (ub[t] - iv[t]) & mask;
      if ((step[t] & mask) < remaining) {
        iv[t] = (iv[t] + step[t]) & mask;
        run[k++] = t;
      }
    }
    m = k;
  }
  current->arenaTop = mark;
  return true;
}

bool Executor::execWhile(const Instr &in, const uint32_t *act, uint32_t n) {
  const WhileInfo &w = prog.whiles[in.aux];
  copies(w.init, act, n);
  uint32_t mark = current->arenaTop;
  uint32_t *run = arenaAlloc(n);
  uint32_t *exiting = arenaAlloc(n);
  std::copy(act, act + n, run);
  uint32_t m = n;
  bool ok = true;
  while (ok && m) {
    if (!(ok = exec(w.before.begin, w.before.end, run, m)))
      break;
    uint64_t *cond = slot(w.cond);
    uint32_t k = 0, e = 0;
    for (uint32_t j = 0; j < m; ++j) {
      uint32_t t = run[j];
      if (cond[t])
        run[k++] = t;
      else
        exiting[e++] = t;
    }
    copies(w.toResult, exiting, e);
    copies(w.toAfter, run, k);
    m = k;
    if (m)
      ok = exec(w.after.begin, w.after.end, run, m);
  }
  current->arenaTop = mark;
  return ok;
}

bool Executor::execBarrier(const Instr &in, const uint32_t *act, uint32_t n) {
  // Each block's threads pass their own barrier (in lockstep with the
  // other blocks of a cluster that reach it).
  return forEachCta(act, n, [&](uint32_t c, const uint32_t *threads, uint32_t count) {
    if (count != ctaThreads)
      return fail(in, threads[0],
                  llvm::formatv("gpu.barrier reached by {0} of the {1} "
                                "threads of the block (barrier in divergent "
                                "control flow)",
                                count, ctaThreads));
    ++ctaEpochs[c];
    // Epochs order the block's own accesses; a peer block sees them through
    // the clocks a later arrival of any of these threads releases (bar.sync
    // is cumulative): every thread takes what all of them have seen.
    if (numCtas > 1 && syncClocks()) {
      std::vector<uint32_t> merged(numThreads, 0);
      for (uint32_t i = 0; i < count; ++i) {
        const uint32_t *own = clocks.data() + size_t(threads[i]) * numThreads;
        for (uint32_t u = 0; u < numThreads; ++u)
          merged[u] = std::max(merged[u], own[u]);
      }
      for (uint32_t i = 0; i < count; ++i) {
        uint32_t *own = clocks.data() + size_t(threads[i]) * numThreads;
        std::copy(merged.begin(), merged.end(), own);
        ++own[threads[i]];
      }
    }
    const uint32_t groups = (ctaStride + 127) / 128;
    std::fill_n(setRegistersUnsynced.begin() + size_t(c * ctaStride / 128), groups, 0);
    return true;
  });
}
