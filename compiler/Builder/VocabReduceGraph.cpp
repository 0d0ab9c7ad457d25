//===- VocabReduceGraph.cpp -----------------------------------------------===//

#include "compiler/Builder/VocabReduceGraph.h"
#include "compiler/Builder/GraphBuilder.h"
#include "dialects/Loss/LossOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <cmath>

using namespace mlir;
using namespace lossjit;

namespace {
llvm::Error checkOptions(const VocabReduceGraphOptions &o,
                         SmallVectorImpl<loss::Statistic> &kinds) {
  if (o.name.empty())
    return llvm::createStringError("function name must not be empty");
  if (o.statistics.empty())
    return llvm::createStringError(
        "statistics must name at least one of lse, label_logit, logit_sum, entropy");
  for (const std::string &name : o.statistics) {
    std::optional<loss::Statistic> kind = loss::symbolizeStatistic(name);
    if (!kind)
      return llvm::createStringError("unknown statistic '" + name +
                                     "' (expected lse, label_logit, logit_sum, entropy, "
                                     "target_logit_sum, teacher_lse, teacher_entropy, "
                                     "cross_entropy or reverse_cross_entropy)");
    if (llvm::is_contained(kinds, *kind))
      return llvm::createStringError("statistic '" + name + "' is asked for twice");
    kinds.push_back(*kind);
  }
  if (llvm::is_contained(kinds, loss::Statistic::label_logit) && o.labelType != "i32" &&
      o.labelType != "i64")
    return llvm::createStringError("label type must be i32 or i64, got '" + o.labelType + "'");
  if (o.labelsPerRow < 0 || o.labelsPerRow > (1 << 16))
    return llvm::createStringError("labels per row must be 0 (labels [N]) or in [1, 65536], got " +
                                   std::to_string(o.labelsPerRow));
  if (o.classWeights && !llvm::is_contained(kinds, loss::Statistic::logit_sum) &&
      !llvm::is_contained(kinds, loss::Statistic::target_logit_sum))
    return llvm::createStringError(
        "class weights are read by logit_sum and target_logit_sum only; ask for one");
  if (llvm::is_contained(kinds, loss::Statistic::target_logit_sum) != !o.targets.empty())
    return llvm::createStringError(
        "target_logit_sum reads the targets, and only it does: give targets exactly when it "
        "is asked for");
  if (!o.targets.empty() && o.targets != "f32" && o.targets != o.dtype)
    return llvm::createStringError("targets must be f32 or the dtype (" + o.dtype + "), got '" +
                                   o.targets + "'");
  if (!std::isfinite(o.logitScale) || o.logitScale == 0)
    return llvm::createStringError("logit scale must be finite and nonzero, got " +
                                   loss::formatF64(o.logitScale));
  if (!std::isfinite(o.softcap) || o.softcap < 0)
    return llvm::createStringError("softcap must be 0 (none) or positive and finite, got " +
                                   loss::formatF64(o.softcap));
  const bool teacherStats = llvm::any_of(kinds, [](loss::Statistic kind) {
    return kind == loss::Statistic::teacher_lse || kind == loss::Statistic::teacher_entropy ||
           kind == loss::Statistic::cross_entropy ||
           kind == loss::Statistic::reverse_cross_entropy || kind == loss::Statistic::jsd ||
           kind == loss::Statistic::mixture_kl || kind == loss::Statistic::mixture_p2;
  });
  if (teacherStats != o.teacher)
    return llvm::createStringError(
        "the teacher statistics (teacher_lse, teacher_entropy, cross_entropy, "
        "reverse_cross_entropy, jsd, mixture_kl, mixture_p2) read the teacher, and only they "
        "do: give a "
        "teacher exactly when one of them is asked for");
  const bool mixture = llvm::is_contained(kinds, loss::Statistic::jsd) ||
                       llvm::is_contained(kinds, loss::Statistic::mixture_kl) ||
                       llvm::is_contained(kinds, loss::Statistic::mixture_p2);
  if (mixture && !(o.jsdBeta > 0 && o.jsdBeta < 1))
    return llvm::createStringError("jsd beta must be in (0, 1) (0 and 1 mean the KL "
                                   "divergences), got " + loss::formatF64(o.jsdBeta));
  if (!mixture && o.jsdBeta != 0.5)
    return llvm::createStringError(
        "jsd beta is read by jsd, mixture_kl and mixture_p2 only; ask for one");
  if (o.teacherBias && !o.teacher)
    return llvm::createStringError("a teacher bias needs a teacher");
  if (!std::isfinite(o.teacherScale) || o.teacherScale == 0)
    return llvm::createStringError("teacher scale must be finite and nonzero, got " +
                                   loss::formatF64(o.teacherScale));
  if (!o.gradient)
    return llvm::Error::success();
  if (o.strategy != "auto" && o.strategy != "chunked" && o.strategy != "recompute")
    return llvm::createStringError("strategy must be auto, chunked or recompute, got '" +
                                   o.strategy + "'");
  if (!o.needsGradX && !o.needsGradW)
    return llvm::createStringError(
        "a gradient graph needs grad_x or grad_w (both were turned off)");
  if (o.workspaceBytes < 1)
    return llvm::createStringError("workspace bytes must be positive, got " +
                                   std::to_string(o.workspaceBytes));
  // (The statistics an adjoint reads are the verifier's rule: its
  // diagnostic names them.)
  return llvm::Error::success();
}

/// The type of statistic `kind`: [N] of the compute type, or [N, K] for
/// label_logit of K labels per row.
Type statisticType(Type compute, loss::Statistic kind, int64_t labelsPerRow) {
  const int64_t dyn = ShapedType::kDynamic;
  if (kind == loss::Statistic::label_logit && labelsPerRow > 0)
    return RankedTensorType::get({dyn, labelsPerRow}, compute);
  return RankedTensorType::get({dyn}, compute);
}

/// The region arguments a statistic reads: z, u, (u, z) or (z, u).
SmallVector<Value> streamsOf(Block *block, loss::Statistic kind) {
  switch (kind) {
  case loss::Statistic::teacher_lse:
  case loss::Statistic::teacher_entropy:
    return {block->getArgument(1)};
  case loss::Statistic::cross_entropy:
    return {block->getArgument(1), block->getArgument(0)};
  case loss::Statistic::reverse_cross_entropy:
  case loss::Statistic::jsd:
  case loss::Statistic::mixture_kl:
  case loss::Statistic::mixture_p2:
    return {block->getArgument(0), block->getArgument(1)};
  default:
    return {block->getArgument(0)};
  }
}

/// Fills `op`'s region: the logits argument(s), one loss.stat per kind, the
/// yield.
void buildRegion(OpBuilder &b, Location loc, Region &body, ArrayRef<loss::Statistic> kinds,
                 int64_t labelsPerRow, bool teacher, Type compute) {
  const int64_t dyn = ShapedType::kDynamic;
  OpBuilder::InsertionGuard guard(b);
  Type logits = RankedTensorType::get({dyn, dyn}, compute);
  SmallVector<Type> args(teacher ? 2 : 1, logits);
  SmallVector<Location> locs(args.size(), loc);
  Block *block = b.createBlock(&body, {}, args, locs);
  SmallVector<Value> stats;
  for (loss::Statistic kind : kinds)
    stats.push_back(loss::StatOp::create(b, loc, statisticType(compute, kind, labelsPerRow),
                                         loss::StatisticAttr::get(b.getContext(), kind),
                                         streamsOf(block, kind)));
  loss::YieldOp::create(b, loc, stats);
}
} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
lossjit::buildVocabReduceGraph(MLIRContext &ctx, const VocabReduceGraphOptions &o) {
  ctx.loadDialect<loss::LossDialect, func::FuncDialect>();
  auto storage = storageTypeNamed(ctx, o.dtype);
  if (!storage)
    return storage.takeError();
  SmallVector<loss::Statistic> kinds;
  if (llvm::Error err = checkOptions(o, kinds))
    return std::move(err);
  const bool labels = llvm::is_contained(kinds, loss::Statistic::label_logit);

  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  const int64_t dyn = ShapedType::kDynamic;
  Type compute = loss::computeTypeFor(*storage);
  auto matrix = RankedTensorType::get({dyn, dyn}, *storage);
  auto vector = RankedTensorType::get({dyn}, *storage);
  auto row = RankedTensorType::get({dyn}, compute);
  SmallVector<Type> args = {matrix, matrix};
  Type labelElement = b.getIntegerType(o.labelType == "i32" ? 32 : 64);
  if (labels)
    args.push_back(o.labelsPerRow > 0
                       ? RankedTensorType::get({dyn, o.labelsPerRow}, labelElement)
                       : RankedTensorType::get({dyn}, labelElement));
  if (o.bias)
    args.push_back(vector);
  if (o.classWeights)
    args.push_back(row);
  if (!o.targets.empty())
    args.push_back(RankedTensorType::get(
        {dyn, dyn}, o.targets == "f32" ? Type(b.getF32Type()) : *storage));
  if (o.teacher) {
    args.push_back(matrix);
    args.push_back(matrix);
    if (o.teacherBias)
      args.push_back(vector);
  }
  const unsigned operands = args.size();
  SmallVector<Type> results;
  SmallVector<Type> statTypes;
  for (loss::Statistic kind : kinds)
    statTypes.push_back(statisticType(compute, kind, o.labelsPerRow));
  if (o.gradient) {
    args.append(statTypes.begin(), statTypes.end()); // saved
    args.append(statTypes.begin(), statTypes.end()); // adjoints
    if (o.needsGradX)
      results.push_back(matrix);
    if (o.needsGradW) {
      results.push_back(matrix);
      if (o.bias)
        results.push_back(vector);
    }
  } else {
    results = statTypes;
  }
  auto fn = func::FuncOp::create(b, loc, o.name, b.getFunctionType(args, results));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  unsigned next = 2;
  Value labelsArg = labels ? entry->getArgument(next++) : Value();
  Value biasArg = o.bias ? entry->getArgument(next++) : Value();
  Value weightsArg = o.classWeights ? entry->getArgument(next++) : Value();
  Value targetsArg = !o.targets.empty() ? entry->getArgument(next++) : Value();
  Value teacherX = o.teacher ? entry->getArgument(next++) : Value();
  Value teacherW = o.teacher ? entry->getArgument(next++) : Value();
  Value teacherB = o.teacherBias ? entry->getArgument(next++) : Value();
  Value x = entry->getArgument(0), w = entry->getArgument(1);
  Operation *op;
  if (o.gradient) {
    ValueRange rest = entry->getArguments().drop_front(operands);
    auto grad = loss::VocabReduceGradOp::create(
        b, loc, results, x, w, biasArg, labelsArg, weightsArg, targetsArg, teacherX, teacherW,
        teacherB, rest.take_front(kinds.size()), rest.drop_front(kinds.size()),
        b.getI64IntegerAttr(o.ignoreIndex), TypeAttr::get(*storage), TypeAttr::get(compute),
        b.getF64FloatAttr(o.logitScale), b.getF64FloatAttr(o.softcap),
        b.getF64FloatAttr(o.teacherScale), b.getF64FloatAttr(o.jsdBeta),
        b.getStringAttr(o.strategy), b.getBoolAttr(o.needsGradX), b.getBoolAttr(o.needsGradW),
        b.getI64IntegerAttr(o.workspaceBytes));
    buildRegion(b, loc, grad.getBody(), kinds, o.labelsPerRow, o.teacher, compute);
    op = grad;
  } else {
    auto fwd = loss::VocabReduceOp::create(
        b, loc, results, x, w, biasArg, labelsArg, weightsArg, targetsArg, teacherX, teacherW,
        teacherB, b.getI64IntegerAttr(o.ignoreIndex), TypeAttr::get(*storage),
        TypeAttr::get(compute), b.getF64FloatAttr(o.logitScale), b.getF64FloatAttr(o.softcap),
        b.getF64FloatAttr(o.teacherScale), b.getF64FloatAttr(o.jsdBeta));
    buildRegion(b, loc, fwd.getBody(), kinds, o.labelsPerRow, o.teacher, compute);
    op = fwd;
  }
  func::ReturnOp::create(b, loc, op->getResults());
  // The op verifiers are the last word on what a graph may say: report
  // their diagnostic as the error.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    diagnostics += (diagnostics.empty() ? "" : "; ") + diag.str();
    return success();
  });
  if (failed(verify(*module)))
    return llvm::createStringError("invalid vocab_reduce graph: " + diagnostics);
  return module;
}
