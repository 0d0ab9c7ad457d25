//===- RowStats.cpp -------------------------------------------------------===//

#include "compiler/Kernels/RowStats/RowStats.h"
#include "compiler/Kernels/Matmul/TileMatmul.h"
#include "compiler/Kernels/Support/BlockReduce.h"
#include "compiler/Kernels/Support/LceSpec.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace lossjit;

RowStats::RowStats(llvm::ArrayRef<StatKind> list) : kinds(list.begin(), list.end()) {
  for (StatKind kind : kinds) {
    offsets.push_back(width());
    for (const StatField &f : statKindRules(kind).fields())
      names.push_back(f.name);
  }
}

RowStats RowStats::forSpec(const LceSpec &spec) {
  if (!spec.isVocabReduce())
    return RowStats(llvm::ArrayRef<StatKind>{StatKind::LogSumExp});
  SmallVector<StatKind> kinds = {spec.hasStatistic(loss::Statistic::entropy)
                                     ? StatKind::SoftmaxEntropy
                                     : StatKind::LogSumExp};
  if (spec.hasStatistic(loss::Statistic::logit_sum))
    kinds.push_back(StatKind::LogitSum);
  if (spec.hasStatistic(loss::Statistic::target_logit_sum))
    kinds.push_back(StatKind::TargetLogitSum);
  // (The dependent sweep reads the teacher's finished lse, yielded or not.)
  if (spec.hasStatistic(loss::Statistic::teacher_entropy))
    kinds.push_back(StatKind::TeacherSoftmaxEntropy);
  else if (spec.hasStatistic(loss::Statistic::teacher_lse) || spec.hasMixtureStatistics())
    kinds.push_back(StatKind::TeacherLogSumExp);
  if (spec.hasStatistic(loss::Statistic::cross_entropy))
    kinds.push_back(StatKind::CrossEntropyForward);
  if (spec.hasStatistic(loss::Statistic::reverse_cross_entropy))
    kinds.push_back(StatKind::CrossEntropyReverse);
  return RowStats(kinds);
}

RowStats RowStats::dependentForSpec(const LceSpec &spec) {
  if (!spec.isVocabReduce() || !spec.hasMixtureStatistics())
    return RowStats(llvm::ArrayRef<StatKind>{});
  return RowStats(llvm::ArrayRef<StatKind>{StatKind::MixtureSums});
}

bool RowStats::isDependent(loss::Statistic what) {
  return what == loss::Statistic::jsd || what == loss::Statistic::mixture_kl ||
         what == loss::Statistic::mixture_p2;
}

SmallVector<Value> RowStats::identity(KernelEmitter &e, unsigned rows) const {
  SmallVector<Value> out;
  for (unsigned r = 0; r < rows; ++r)
    for (StatKind kind : kinds)
      for (const StatField &f : statKindRules(kind).fields())
        out.push_back(e.real(f.identity));
  return out;
}

ValueRange RowStats::row(ValueRange state, unsigned i) const {
  return state.slice(i * width(), width());
}

SmallVector<Value> RowStats::push(KernelEmitter &e, ValueRange row, Value z,
                                  const LogitInputs &in) const {
  SmallVector<Value> out;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const StatKindRules &rules = statKindRules(kinds[k]);
    llvm::append_range(out, rules.push(e, row.slice(offsets[k], rules.fields().size()), z, in));
  }
  return out;
}

SmallVector<Value> RowStats::pushMany(KernelEmitter &e, ValueRange row, ArrayRef<Value> z,
                                      ArrayRef<Value> valid, ArrayRef<LogitInputs> inputs) const {
  SmallVector<Value> out;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const StatKindRules &rules = statKindRules(kinds[k]);
    ValueRange mine = row.slice(offsets[k], rules.fields().size());
    // One logit: exactly push() (the SIMT kernels' bits).
    if (z.size() == 1) {
      SmallVector<Value> pushed =
          rules.push(e, mine, z[0], inputs.empty() ? LogitInputs{} : inputs[0]);
      for (auto [p, old] : llvm::zip_equal(pushed, mine))
        out.push_back(e.select(valid[0], p, old));
      continue;
    }
    llvm::append_range(out, rules.pushMany(e, mine, z, valid, inputs));
  }
  return out;
}

bool RowStats::pushesGroups() const {
  return !kinds.empty() && llvm::all_of(kinds, [](StatKind kind) {
    return statKindRules(kind).pushesGroups();
  });
}

SmallVector<Value> RowStats::pushRows(KernelEmitter &e, ValueRange state,
                                      ArrayRef<SmallVector<Value>> z, ArrayRef<Value> valid,
                                      ArrayRef<SmallVector<LogitInputs>> inputs) const {
  const size_t rows = z.size(), cols = valid.size();
  assert(state.size() == rows * width() && "pushRows: one state per row");
  assert((inputs.empty() || inputs.size() == rows) && "pushRows: inputs per row");
  assert(llvm::all_of(z, [&](const SmallVector<Value> &r) { return r.size() == cols; }) &&
         "pushRows: every row has the columns of `valid`");
  auto rowInputs = [&](size_t i) {
    return inputs.empty() ? ArrayRef<LogitInputs>() : ArrayRef<LogitInputs>(inputs[i]);
  };
  auto input = [&](size_t i, size_t j) {
    return rowInputs(i).empty() ? LogitInputs{} : rowInputs(i)[j];
  };
  // Masked streams replace the logits only when every kind folds one: a
  // kind that reads the raw logits (a logit sum, a cross-entropy) keeps
  // them alive whatever its neighbours do, so masking those first would
  // only add live values. (Every row's inputs are alike: row 0 decides.)
  const bool masked = cols > 1 && rows > 0 && llvm::all_of(kinds, [&](StatKind kind) {
                        return bool(statKindRules(kind).maskableStream(z[0][0], input(0, 0)));
                      });
  SmallVector<Value> out;
  if (!masked) {
    for (size_t i = 0; i < rows; ++i)
      llvm::append_range(out, pushMany(e, row(state, unsigned(i)), z[i], valid, rowInputs(i)));
    return out;
  }
  // Per kind, its stream of every row masked a column at a time.
  std::vector<std::vector<SmallVector<Value>>> streams(kinds.size(),
                                                       std::vector<SmallVector<Value>>(rows));
  for (size_t j = 0; j < cols; ++j)
    for (size_t k = 0; k < kinds.size(); ++k)
      for (size_t i = 0; i < rows; ++i)
        streams[k][i].push_back(e.select(
            valid[j], statKindRules(kinds[k]).maskableStream(z[i][j], input(i, j)), e.negInf()));
  for (size_t i = 0; i < rows; ++i)
    for (size_t k = 0; k < kinds.size(); ++k) {
      const StatKindRules &rules = statKindRules(kinds[k]);
      ValueRange mine = row(state, unsigned(i)).slice(offsets[k], rules.fields().size());
      llvm::append_range(out, rules.foldMasked(e, mine, streams[k][i]));
    }
  return out;
}

SmallVector<Value> RowStats::pushGroup(KernelEmitter &e, ValueRange row, Value z) const {
  SmallVector<Value> out;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const StatKindRules &rules = statKindRules(kinds[k]);
    llvm::append_range(out, rules.pushGroup(e, row.slice(offsets[k], rules.fields().size()), z));
  }
  return out;
}

SmallVector<Value> RowStats::merge(KernelEmitter &e, ValueRange a, ValueRange b) const {
  SmallVector<Value> out;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const StatKindRules &rules = statKindRules(kinds[k]);
    size_t n = rules.fields().size();
    llvm::append_range(out, rules.merge(e, a.slice(offsets[k], n), b.slice(offsets[k], n)));
  }
  return out;
}

Value RowStats::finish(KernelEmitter &e, ValueRange row, loss::Statistic what) const {
  for (size_t k = 0; k < kinds.size(); ++k) {
    const StatKindRules &rules = statKindRules(kinds[k]);
    if (rules.provides(what))
      return rules.finish(e, row.slice(offsets[k], rules.fields().size()), what);
  }
  llvm_unreachable("statistic not carried by this RowStats");
}

unsigned RowStats::wideWidth() const {
  unsigned n = 0;
  for (StatKind kind : kinds)
    n += statKindRules(kind).wideFields().size();
  return n;
}

SmallVector<Value> RowStats::identityWide(KernelEmitter &e) const {
  SmallVector<Value> out;
  for (StatKind kind : kinds)
    for (const StatField &f : statKindRules(kind).wideFields())
      out.push_back(e.real(f.identity));
  return out;
}

SmallVector<Value> RowStats::mergeWide(KernelEmitter &e, ValueRange wide, ValueRange part) const {
  SmallVector<Value> out;
  size_t wideOffset = 0;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const StatKindRules &rules = statKindRules(kinds[k]);
    size_t n = rules.fields().size(), w = rules.wideFields().size();
    llvm::append_range(out, rules.mergeWide(e, wide.slice(wideOffset, w),
                                            part.slice(offsets[k], n)));
    wideOffset += w;
  }
  return out;
}

Value RowStats::finishWide(KernelEmitter &e, ValueRange wide, loss::Statistic what) const {
  size_t wideOffset = 0;
  for (StatKind k : kinds) {
    const StatKindRules &rules = statKindRules(k);
    if (rules.provides(what))
      return rules.finishWide(e, wide.slice(wideOffset, rules.wideFields().size()), what);
    wideOffset += rules.wideFields().size();
  }
  llvm_unreachable("statistic not carried by this RowStats");
}

SmallVector<Value> RowStats::load(KernelEmitter &e, ArrayRef<Value> buffers, Value at) const {
  SmallVector<Value> out;
  for (Value buffer : buffers)
    out.push_back(e.load(buffer, at));
  return out;
}

void RowStats::store(KernelEmitter &e, ValueRange row, ArrayRef<Value> buffers, Value at) const {
  for (size_t f = 0; f < buffers.size(); ++f)
    e.store(row[f], buffers[f], at);
}

void RowStats::mergeAcrossBlock(KernelEmitter &e, Value tid, int64_t threads,
                                ArrayRef<Value> shared, ValueRange state, unsigned rows) const {
  for (unsigned i = 0; i < rows; ++i)
    store(e, row(state, i), shared, e.add(e.index(i * threads), tid));
  gpuBarrier(e);
  emitBlockTree(e, tid, threads, [&](KernelEmitter &in, Value dst, Value src) {
    for (unsigned i = 0; i < rows; ++i) {
      Value base = in.index(i * threads);
      Value di = in.add(base, dst), si = in.add(base, src);
      store(in, merge(in, load(in, shared, di), load(in, shared, si)), shared, di);
    }
  });
}

void RowStats::mergeFragmentRows(
    KernelEmitter &e, const RowSharing &sharing, ArrayRef<Value> shared, ValueRange state,
    int64_t rows,
    const std::function<void(KernelEmitter &, Value, ValueRange)> &emit) const {
  Value tid = gpuThreadIdx(e);
  auto emitRow = [&](KernelEmitter &re, Value at) {
    emit(re, tid, load(re, shared, at));
  };
  if (sharing.everyThread) {
    // Every thread holds every row: the block tree, row t's state at t·T.
    mergeAcrossBlock(e, tid, sharing.groups, shared, state, static_cast<unsigned>(rows));
    e.ifThen(e.cmpI(arith::CmpIPredicate::ult, tid, e.index(rows)), [&](KernelEmitter &re) {
      emitRow(re, re.mul(tid, re.index(sharing.groups)));
    });
    return;
  }
  const unsigned fragmentRows = static_cast<unsigned>(sharing.tileRows.size());
  SmallVector<Value> merged = mergeSharingLanes(e, sharing, state);
  e.ifThen(sharing.leader, [&](KernelEmitter &we) {
    for (unsigned i = 0; i < fragmentRows; ++i)
      store(we, row(merged, i), shared,
            we.add(we.mul(sharing.tileRows[i], we.index(sharing.groups)), sharing.group));
  });
  gpuBarrier(e);
  e.ifThen(e.cmpI(arith::CmpIPredicate::ult, tid, e.index(rows)), [&](KernelEmitter &re) {
    Value base = re.mul(tid, re.index(sharing.groups));
    SmallVector<Value> acc = load(re, shared, base);
    for (int64_t g = 1; g < sharing.groups; ++g)
      acc = this->merge(re, acc, load(re, shared, re.add(base, re.index(g))));
    emit(re, tid, acc);
  });
}

SmallVector<Value> RowStats::mergeSharingLanes(KernelEmitter &e, const RowSharing &sharing,
                                               ValueRange state) const {
  assert(!sharing.everyThread && "lanes merge where a warp's quads share rows");
  const unsigned fragmentRows = static_cast<unsigned>(sharing.tileRows.size());
  SmallVector<Value> merged(state.begin(), state.end());
  // Lanes sharing rows: butterflies in a fixed mask order; each pair merges
  // the lower lane's state first, so both lanes hold the same bits.
  for (int32_t mask : sharing.laneXor) {
    Value upper = e.cmpI(arith::CmpIPredicate::ne,
                         e.andI(sharing.lane, e.index(mask)), e.index(0));
    SmallVector<Value> next;
    for (unsigned i = 0; i < fragmentRows; ++i) {
      ValueRange mine = row(merged, i);
      SmallVector<Value> other;
      for (Value v : mine)
        other.push_back(gpu::ShuffleOp::create(e.builder(), e.location(), v, mask, 32,
                                               gpu::ShuffleMode::XOR)
                            .getShuffleResult());
      SmallVector<Value> lo, hi;
      for (unsigned f = 0; f < width(); ++f) {
        lo.push_back(e.select(upper, other[f], mine[f]));
        hi.push_back(e.select(upper, mine[f], other[f]));
      }
      llvm::append_range(next, this->merge(e, lo, hi));
    }
    merged = std::move(next);
  }
  return merged;
}
