//===- VocabReduceOps.cpp - verifiers of the vocabulary reductions --------===//

#include "dialects/Loss/LossOps.h"
#include "dialects/Loss/VerifyUtils.h"

#include "llvm/ADT/SmallSet.h"

#include <cmath>

using namespace mlir;
using namespace lossjit::loss;
using namespace lossjit::loss::detail;

namespace {
/// The statistics a vocabulary-reduction region yields, in order (the
/// region verifier has checked that each yielded value is a loss.stat).
SmallVector<Statistic> yieldedStatistics(Region &body) {
  SmallVector<Statistic> kinds;
  for (Value v : body.front().getTerminator()->getOperands())
    kinds.push_back(cast<StatOp>(v.getDefiningOp()).getKind());
  return kinds;
}

/// The teacher stream's operands: x' [N, D'] and w' [V, D'] (and b' [V])
/// in the storage type, rows and vocabulary those of the student.
LogicalResult verifyTeacher(Operation *op, Value input, Value weight, Value teacherInput,
                            Value teacherWeight, Value teacherBias, Type storage,
                            double teacherScale) {
  if (!teacherInput)
    return teacherBias ? op->emitOpError() << "has a teacher_bias but no teacher" : success();
  if (failed(verifyLinearOperands(op, teacherInput, teacherWeight, teacherBias)))
    return failure();
  if (rankedType(teacherInput).getElementType() != storage)
    return op->emitOpError() << "the teacher must be stored like the student (" << storage
                             << "), got " << rankedType(teacherInput).getElementType();
  if (failed(expectDim(op, rankedType(teacherInput).getDimSize(0),
                       rankedType(input).getDimSize(0), "row count N of the teacher differs")) ||
      failed(expectDim(op, rankedType(teacherWeight).getDimSize(0),
                       rankedType(weight).getDimSize(0),
                       "vocabulary size V of the teacher differs")))
    return failure();
  if (!std::isfinite(teacherScale) || teacherScale == 0)
    return op->emitOpError() << "teacher_scale must be finite and nonzero, got "
                             << formatF64(teacherScale);
  return success();
}

/// Operand checks both ops share: the linear operands, storage and
/// compute, the logit maps, labels [N] and class weights [V].
LogicalResult verifyReduceOperands(Operation *op, Value input, Value weight, Value bias,
                                   Value labels, Value classWeights, Value targets,
                                   Type storage, Type compute, double logitScale,
                                   double softcap) {
  if (failed(verifyLinearOperands(op, input, weight, bias)) ||
      failed(verifyStorageAndCompute(op, storage, compute, input)) ||
      failed(verifyLogitTransforms(op, logitScale, softcap)))
    return failure();
  int64_t n = rankedType(input).getDimSize(0), v = rankedType(weight).getDimSize(0);
  if (labels) {
    auto type = rankedType(labels);
    if (type.getRank() != 1 && type.getRank() != 2)
      return op->emitOpError() << "labels must be [N] or [N, K] (K labels per row), got "
                               << labels.getType();
    if (failed(expectDim(op, type.getDimSize(0), n, "row count N of labels differs")))
      return failure();
    // The kernels are specialized on K (a loop over a row's labels).
    if (type.getRank() == 2 && (ShapedType::isDynamic(type.getDimSize(1)) ||
                                type.getDimSize(1) < 1))
      return op->emitOpError() << "labels [N, K] need a static K >= 1, got "
                               << labels.getType();
  }
  if (classWeights &&
      (failed(expectRank(op, classWeights, 1, "class_weights ([V])")) ||
       failed(expectDim(op, rankedType(classWeights).getDimSize(0), v,
                        "class_weights length differs from vocabulary size V of weight"))))
    return failure();
  if (!targets)
    return success();
  auto t = rankedType(targets);
  if (failed(expectRank(op, targets, 2, "targets ([N, V] class probabilities)")) ||
      failed(expectDim(op, t.getDimSize(0), n, "row count N of targets differs")) ||
      failed(expectDim(op, t.getDimSize(1), v,
                       "targets width differs from vocabulary size V of weight")))
    return failure();
  if (t.getElementType() != compute && t.getElementType() != storage)
    return op->emitOpError() << "targets must be " << compute << " or the storage type "
                             << storage << ", got " << t.getElementType();
  return success();
}

/// Each value of `values` (one per statistic of `kinds`) is an [N] f32
/// tensor, or [N, K] for label_logit of labels [N, K]; `what` names the list.
LogicalResult verifyRowValues(Operation *op, ValueRange values, ArrayRef<Statistic> kinds,
                              Value input, Value labels, StringRef what) {
  int64_t n = rankedType(input).getDimSize(0);
  for (auto [i, value, kind] : llvm::enumerate(values, kinds)) {
    std::string name = (what + " #" + std::to_string(i)).str();
    bool perLabel = kind == Statistic::label_logit && labels && rankedType(labels).getRank() == 2;
    if (perLabel) {
      if (failed(expectRank(op, value, 2, name + " ([N, K] f32: one per label)")) ||
          failed(expectDim(op, rankedType(value).getDimSize(1),
                           rankedType(labels).getDimSize(1),
                           name + " has another K than the labels")))
        return failure();
    } else if (failed(expectRank(op, value, 1, name + " ([N] f32)"))) {
      return failure();
    }
    if (failed(expectDim(op, rankedType(value).getDimSize(0), n,
                         name + " length differs from row count N")))
      return failure();
  }
  return success();
}

/// The region: one block whose argument is the logits [N, V] in the
/// compute type, holding
/// loss.stat ops on it and a loss.yield of each of them exactly once, each
/// kind at most once; the optional operands must have a reader and the
/// readers their operand.
LogicalResult verifyReduceRegion(Operation *op, Region &body, Value input, Value weight,
                                 Value labels, Value classWeights, Value targets,
                                 bool teacher, double jsdBeta, Type compute) {
  Block &block = body.front();
  const unsigned streams = teacher ? 2 : 1;
  if (block.getNumArguments() != streams)
    return op->emitOpError() << "region must take " << streams
                             << (teacher ? " arguments, the logits and the teacher's logits"
                                         : " argument, the logits")
                             << " [N, V] (" << compute << "), got " << block.getNumArguments();
  for (BlockArgument arg : block.getArguments()) {
    auto logits = dyn_cast<RankedTensorType>(arg.getType());
    if (!logits || logits.getRank() != 2 || logits.getElementType() != compute)
      return op->emitOpError() << "region argument must be the " << compute
                               << " logits tensor [N, V], got " << arg.getType();
    if (failed(expectDim(op, logits.getDimSize(0), rankedType(input).getDimSize(0),
                         "row count N of the region's logits differs")) ||
        failed(expectDim(op, logits.getDimSize(1), rankedType(weight).getDimSize(0),
                         "vocabulary size V of the region's logits differs")))
      return failure();
  }
  Operation *yield = block.getTerminator();
  llvm::SmallPtrSet<Operation *, 4> yielded;
  llvm::SmallSet<Statistic, 4> kinds;
  for (Value value : yield->getOperands()) {
    auto stat = value.getDefiningOp<StatOp>();
    if (!stat || stat->getBlock() != &block)
      return yield->emitOpError() << "must yield loss.stat results of this region";
    if (!yielded.insert(stat).second)
      return yield->emitOpError() << "yields the statistic '" << stringifyStatistic(stat.getKind())
                                  << "' twice";
    if (!kinds.insert(stat.getKind()).second)
      return stat.emitOpError() << "computes '" << stringifyStatistic(stat.getKind())
                                << "' a second time; one of each kind per region";
  }
  for (Operation &inner : block.without_terminator()) {
    auto stat = dyn_cast<StatOp>(inner);
    if (!stat)
      return inner.emitOpError() << "is not a loss.stat: a vocabulary-reduction region holds "
                                    "statistics of its logits only";
    if (!yielded.contains(stat))
      return stat.emitOpError() << "computes a statistic the region does not yield";
  }
  if (kinds.empty())
    return op->emitOpError() << "region yields no statistic";
  if (kinds.contains(Statistic::label_logit) != static_cast<bool>(labels))
    return op->emitOpError() << (labels ? "has labels but no label_logit statistic reads them"
                                        : "label_logit needs the labels operand");
  if (classWeights && !kinds.contains(Statistic::logit_sum) &&
      !kinds.contains(Statistic::target_logit_sum))
    return op->emitOpError() << "has class_weights but no logit_sum or target_logit_sum "
                                "statistic reads them";
  if (teacher && !kinds.contains(Statistic::teacher_lse) &&
      !kinds.contains(Statistic::teacher_entropy) && !kinds.contains(Statistic::cross_entropy) &&
      !kinds.contains(Statistic::reverse_cross_entropy) && !kinds.contains(Statistic::jsd) &&
      !kinds.contains(Statistic::mixture_kl) && !kinds.contains(Statistic::mixture_p2))
    return op->emitOpError() << "has a teacher but no statistic reads it";
  // By TRL's convention β = 0 and β = 1 mean the KL divergences
  // (cross_entropy − teacher_entropy and reverse_cross_entropy − entropy;
  // the mixture's formula itself is 0 there): the mixture is strictly inside.
  const bool mixture = kinds.contains(Statistic::jsd) || kinds.contains(Statistic::mixture_kl) ||
                       kinds.contains(Statistic::mixture_p2);
  if (mixture && !(jsdBeta > 0 && jsdBeta < 1))
    return op->emitOpError() << "jsd_beta must be in (0, 1) (β = 0 and β = 1 mean the KL "
                                "divergences: use cross_entropy or reverse_cross_entropy), got "
                             << formatF64(jsdBeta);
  if (!mixture && jsdBeta != 0.5)
    return op->emitOpError() << "sets jsd_beta (" << formatF64(jsdBeta)
                             << ") but no jsd, mixture_kl or mixture_p2 statistic reads it";
  if (kinds.contains(Statistic::target_logit_sum) != static_cast<bool>(targets))
    return op->emitOpError() << (targets ? "has targets but no target_logit_sum statistic "
                                           "reads them"
                                         : "target_logit_sum needs the targets operand");
  return success();
}

/// Whether `kinds` holds `kind`; its position if so.
std::optional<unsigned> position(ArrayRef<Statistic> kinds, Statistic kind) {
  auto it = llvm::find(kinds, kind);
  if (it == kinds.end())
    return std::nullopt;
  return static_cast<unsigned>(it - kinds.begin());
}
} // namespace

//===----------------------------------------------------------------------===//
// StatOp
//===----------------------------------------------------------------------===//

/// The streams statistic `kind` reads, in order: 0 the logits z, 1 the
/// teacher's logits u.
static ArrayRef<unsigned> streamsOf(Statistic kind) {
  static const unsigned student[] = {0}, teacher[] = {1}, forward[] = {1, 0},
                        reverse[] = {0, 1};
  switch (kind) {
  case Statistic::teacher_lse:
  case Statistic::teacher_entropy:
    return teacher;
  case Statistic::cross_entropy:
    return forward;
  case Statistic::reverse_cross_entropy:
  case Statistic::jsd:
  case Statistic::mixture_kl:
  case Statistic::mixture_p2:
    return reverse;
  default:
    return student;
  }
}

LogicalResult StatOp::verify() {
  Block *block = getOperation()->getBlock();
  ArrayRef<unsigned> streams = streamsOf(getKind());
  auto names = [&]() {
    std::string text;
    for (unsigned stream : streams)
      text += std::string(text.empty() ? "" : ", ") + (stream ? "the teacher's logits" : "the logits");
    return text;
  };
  if (getLogits().size() != streams.size())
    return emitOpError() << "'" << stringifyStatistic(getKind()) << "' reads " << names()
                         << " (" << streams.size() << " operand(s)), got "
                         << getLogits().size();
  for (auto [value, stream] : llvm::zip(getLogits(), streams))
    if (stream >= block->getNumArguments() || value != block->getArgument(stream))
      return emitOpError() << "'" << stringifyStatistic(getKind()) << "' reads " << names()
                           << ": the region's arguments in that order"
                           << (stream >= block->getNumArguments() ? " (the op has no teacher)"
                                                                  : "");
  // label_logit of labels [N, K] is [N, K] (the parent checks K).
  int64_t rank = getKind() == Statistic::label_logit && rankedType(getResult()).getRank() == 2
                     ? 2
                     : 1;
  Type compute = rankedType(getLogits().front()).getElementType();
  if (rankedType(getResult()).getElementType() != compute)
    return emitOpError() << "result must be " << compute << " like the logits, got "
                         << rankedType(getResult()).getElementType();
  if (failed(expectRank(*this, getResult(), rank, "result ([N] f32)")) ||
      failed(expectDim(*this, rankedType(getResult()).getDimSize(0),
                       rankedType(getLogits().front()).getDimSize(0),
                       "result length differs from the logits' row count N")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// VocabReduceOp
//===----------------------------------------------------------------------===//

KernelPass VocabReduceOp::getKernelPass() { return KernelPass::forward; }
StringRef VocabReduceOp::getGradientStrategy() { return ""; }

SmallVector<Statistic> VocabReduceOp::getStatisticKinds() { return yieldedStatistics(getBody()); }

std::optional<unsigned> VocabReduceOp::findStatistic(Statistic kind) {
  return position(getStatisticKinds(), kind);
}

LogicalResult VocabReduceOp::verify() {
  if (failed(verifyReduceOperands(*this, getInput(), getWeight(), getBias(), getLabels(),
                                  getClassWeights(), getTargets(), getStorage(), getCompute(),
                                  getLogitScale().convertToDouble(),
                                  getSoftcap().convertToDouble())) ||
      failed(verifyTeacher(*this, getInput(), getWeight(), getTeacherInput(),
                           getTeacherWeight(), getTeacherBias(), getStorage(),
                           getTeacherScale().convertToDouble())))
    return failure();
  return success();
}

LogicalResult VocabReduceOp::verifyRegions() {
  if (failed(verifyReduceRegion(*this, getBody(), getInput(), getWeight(), getLabels(),
                                getClassWeights(), getTargets(), hasTeacher(),
                                getJsdBeta().convertToDouble(), getCompute())))
    return failure();
  Operation *yield = getBody().front().getTerminator();
  if (yield->getNumOperands() != getNumResults())
    return emitOpError() << "has " << getNumResults() << " results but its region yields "
                         << yield->getNumOperands() << " statistics";
  SmallVector<Statistic> kinds = getStatisticKinds();
  if (failed(verifyRowValues(*this, getStatistics(), kinds, getInput(), getLabels(),
                             "statistic")) ||
      failed(verifyRowValues(*this, yield->getOperands(), kinds, getInput(), getLabels(),
                             "yielded statistic")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// VocabReduceGradOp
//===----------------------------------------------------------------------===//

KernelPass VocabReduceGradOp::getKernelPass() { return KernelPass::backward; }
StringRef VocabReduceGradOp::getGradientStrategy() { return getStrategy(); }

SmallVector<Statistic> VocabReduceGradOp::getStatisticKinds() {
  return yieldedStatistics(getBody());
}

std::optional<unsigned> VocabReduceGradOp::findStatistic(Statistic kind) {
  return position(getStatisticKinds(), kind);
}

LogicalResult VocabReduceGradOp::verify() {
  if (failed(verifyReduceOperands(*this, getInput(), getWeight(), getBias(), getLabels(),
                                  getClassWeights(), getTargets(), getStorage(), getCompute(),
                                  getLogitScale().convertToDouble(),
                                  getSoftcap().convertToDouble())) ||
      failed(verifyTeacher(*this, getInput(), getWeight(), getTeacherInput(),
                           getTeacherWeight(), getTeacherBias(), getStorage(),
                           getTeacherScale().convertToDouble())))
    return failure();
  if (getSaved().size() != getAdjoints().size())
    return emitOpError() << "takes " << getSaved().size() << " saved statistics but "
                         << getAdjoints().size() << " adjoints; one of each per statistic";
  StringRef strategy = getStrategy();
  if (strategy != "auto" && strategy != "chunked" && strategy != "recompute")
    return emitOpError() << "strategy must be auto, chunked or recompute, got '" << strategy
                         << "'";
  if (getWorkspaceBytes() < 1)
    return emitOpError() << "workspace_bytes must be positive, got " << getWorkspaceBytes();
  return verifyGradientResults(*this, getInput(), getWeight(), getBias(), getStorage(),
                               getNeedsInput(), getNeedsWeight(), getGradients());
}

LogicalResult VocabReduceGradOp::verifyRegions() {
  if (failed(verifyReduceRegion(*this, getBody(), getInput(), getWeight(), getLabels(),
                                getClassWeights(), getTargets(), hasTeacher(),
                                getJsdBeta().convertToDouble(), getCompute())))
    return failure();
  SmallVector<Statistic> kinds = getStatisticKinds();
  if (getSaved().size() != kinds.size())
    return emitOpError() << "takes " << getSaved().size()
                         << " saved statistics but its region yields " << kinds.size();
  if (failed(verifyRowValues(*this, getSaved(), kinds, getInput(), getLabels(),
                             "saved statistic")) ||
      failed(verifyRowValues(*this, getAdjoints(), kinds, getInput(), getLabels(), "adjoint")))
    return failure();
  // The saved values each adjoint rule reads (Adjoints.h) must be yielded.
  for (Statistic kind : kinds) {
    ArrayRef<Statistic> reads = adjointReads(kind);
    if (llvm::all_of(reads, [&](Statistic r) { return llvm::is_contained(kinds, r); }))
      continue;
    std::string list;
    for (auto [i, r] : llvm::enumerate(reads))
      list += (i == 0 ? "" : i + 1 == reads.size() ? " and " : ", ") +
              stringifyStatistic(r).str();
    const char *what[] = {"", "", "both", "all three"};
    return emitOpError() << "the adjoint of " << stringifyStatistic(kind) << " reads " << list
                         << ": yield "
                         << (reads.size() == 1 ? stringifyStatistic(reads[0]) : what[reads.size()])
                         << " as well";
  }
  return success();
}

ArrayRef<Statistic> lossjit::loss::adjointReads(Statistic kind) {
  static const Statistic lse[] = {Statistic::lse},
                         pair[] = {Statistic::lse, Statistic::teacher_lse},
                         jsd[] = {Statistic::lse, Statistic::teacher_lse, Statistic::mixture_kl},
                         kl[] = {Statistic::lse, Statistic::teacher_lse, Statistic::mixture_p2};
  switch (kind) {
  case Statistic::entropy:
    return lse;
  case Statistic::cross_entropy:
  case Statistic::reverse_cross_entropy:
    return pair;
  case Statistic::jsd:
    return jsd;
  case Statistic::mixture_kl:
    return kl;
  default:
    return {};
  }
}
