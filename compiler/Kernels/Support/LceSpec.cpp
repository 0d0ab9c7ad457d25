//===- LceSpec.cpp --------------------------------------------------------===//

#include "compiler/Kernels/Support/LceSpec.h"

using namespace mlir;
using namespace lossjit;

namespace {
/// The facts every fused op states the same way.
template <typename OpTy> LceSpec commonSpec(OpTy op) {
  LceSpec spec;
  spec.storage = op.getStorage();
  spec.compute = op.getCompute();
  spec.labelType = cast<RankedTensorType>(op.getLabels().getType()).getElementType();
  spec.hasBias = static_cast<bool>(op.getBias());
  spec.ignoreIndex = op.getIgnoreIndex();
  spec.reduction = op.getReduction();
  spec.logitScale = op.getLogitScale().convertToDouble();
  spec.softcap = op.getSoftcap().convertToDouble();
  return spec;
}
} // namespace

LceSpec LceSpec::fromOp(loss::LinearCrossEntropyOp op) { return commonSpec(op); }

LceSpec LceSpec::fromOp(loss::LinearCrossEntropyGradOp op) {
  LceSpec spec = commonSpec(op);
  spec.gradient = true;
  spec.needsGradX = op.getNeedsInput();
  spec.needsGradW = op.getNeedsWeight();
  spec.hasGradLse = static_cast<bool>(op.getGradLse());
  // "auto" picks the 6·N·D·V schedule; its chunk size follows the budget.
  spec.strategy = op.getStrategy() == "recompute" ? "recompute" : "chunked";
  spec.workspaceBytes = op.getWorkspaceBytes();
  return spec;
}

LceSpec LceSpec::fromOp(loss::LinearCrossEntropyWithGradOp op) {
  LceSpec spec = commonSpec(op);
  spec.gradient = true;
  spec.fusedForward = true;
  spec.needsGradX = op.getNeedsInput();
  spec.needsGradW = op.getNeedsWeight();
  spec.strategy = "chunked"; // the one pass over the logits is a chunked schedule
  spec.workspaceBytes = op.getWorkspaceBytes();
  return spec;
}

namespace {
/// The facts a vocabulary reduction and its gradient state the same way.
template <typename OpTy> LceSpec reduceSpec(OpTy op) {
  LceSpec spec;
  spec.storage = op.getStorage();
  spec.compute = op.getCompute();
  spec.hasLabels = static_cast<bool>(op.getLabels());
  if (spec.hasLabels) {
    auto labels = cast<RankedTensorType>(op.getLabels().getType());
    spec.labelType = labels.getElementType();
    if (labels.getRank() == 2)
      spec.labelsPerRow = labels.getDimSize(1);
  }
  spec.hasBias = static_cast<bool>(op.getBias());
  spec.hasClassWeights = static_cast<bool>(op.getClassWeights());
  if (Value targets = op.getTargets())
    spec.targetsType = cast<RankedTensorType>(targets.getType()).getElementType();
  spec.hasTeacher = static_cast<bool>(op.getTeacherInput());
  spec.hasTeacherBias = static_cast<bool>(op.getTeacherBias());
  spec.teacherScale = op.getTeacherScale().convertToDouble();
  spec.jsdBeta = op.getJsdBeta().convertToDouble();
  spec.ignoreIndex = op.getIgnoreIndex();
  spec.reduction = loss::Reduction::none;
  spec.logitScale = op.getLogitScale().convertToDouble();
  spec.softcap = op.getSoftcap().convertToDouble();
  for (loss::Statistic kind : op.getStatisticKinds())
    spec.statistics.push_back(kind);
  return spec;
}

std::string labelTypeName(Type labelType) {
  return labelType.isInteger(32) ? "i32" : "i64";
}
} // namespace

LceSpec LceSpec::fromOp(loss::VocabReduceOp op) { return reduceSpec(op); }

LceSpec LceSpec::fromOp(loss::VocabReduceGradOp op) {
  LceSpec spec = reduceSpec(op);
  spec.gradient = true;
  spec.needsGradX = op.getNeedsInput();
  spec.needsGradW = op.getNeedsWeight();
  spec.strategy = op.getStrategy() == "recompute" ? "recompute" : "chunked";
  spec.workspaceBytes = op.getWorkspaceBytes();
  return spec;
}

bool LceSpec::hasStatistic(loss::Statistic kind) const {
  return llvm::is_contained(statistics, kind);
}

std::vector<std::string> LceSpec::dims() const {
  if (hasTeacher)
    return {"N", "V", "D", "T"};
  return {"N", "V", "D"};
}

namespace {
/// The buffers of a vocabulary reduction (LceSpec::planParams).
std::vector<PlanParam> reduceParams(const LceSpec &spec) {
  std::string dt = loss::storageTypeName(spec.storage).str();
  const std::string ct = spec.computeName();
  std::vector<PlanParam> params = {{"x", dt, {"N", "D"}, false}, {"w", dt, {"V", "D"}, false}};
  // Labels [N] or [N, K], and label_logit (and its adjoint) shaped alike.
  std::vector<std::string> labelShape = {"N"};
  if (spec.labelsPerRow > 0)
    labelShape.push_back(std::to_string(spec.labelsPerRow));
  auto shapeOf = [&](loss::Statistic kind) {
    return kind == loss::Statistic::label_logit ? labelShape : std::vector<std::string>{"N"};
  };
  if (spec.hasLabels)
    params.push_back({"labels", labelTypeName(spec.labelType), labelShape, false});
  if (spec.hasBias)
    params.push_back({"bias", dt, {"V"}, false});
  if (spec.hasClassWeights)
    params.push_back({"class_weights", ct, {"V"}, false});
  if (spec.hasTargets())
    params.push_back(
        {"targets", loss::storageTypeName(spec.targetsType).str(), {"N", "V"}, false});
  if (spec.hasTeacher) {
    params.push_back({"teacher_x", dt, {"N", "T"}, false});
    params.push_back({"teacher_w", dt, {"V", "T"}, false});
    if (spec.hasTeacherBias)
      params.push_back({"teacher_bias", dt, {"V"}, false});
  }
  if (!spec.gradient) {
    for (loss::Statistic kind : spec.statistics)
      params.push_back({loss::stringifyStatistic(kind).str(), ct, shapeOf(kind), true});
    return params;
  }
  for (loss::Statistic kind :
       {loss::Statistic::lse, loss::Statistic::entropy, loss::Statistic::teacher_lse,
        loss::Statistic::reverse_cross_entropy, loss::Statistic::mixture_kl,
        loss::Statistic::mixture_p2})
    if (spec.gradientReadsSaved(kind))
      params.push_back({loss::stringifyStatistic(kind).str(), ct, {"N"}, false});
  for (loss::Statistic kind : spec.statistics)
    params.push_back({"grad_" + loss::stringifyStatistic(kind).str(), ct, shapeOf(kind), false});
  if (spec.needsGradX)
    params.push_back({"grad_x", dt, {"N", "D"}, true});
  if (spec.needsGradW)
    params.push_back({"grad_w", dt, {"V", "D"}, true});
  if (spec.needsGradBias())
    params.push_back({"grad_bias", dt, {"V"}, true});
  return params;
}
} // namespace

std::vector<PlanParam> LceSpec::planParams() const {
  if (isVocabReduce())
    return reduceParams(*this);
  std::string dt = loss::storageTypeName(storage).str();
  std::string lt = labelTypeName(labelType);
  const std::string ct = computeName();
  std::vector<PlanParam> params = {
      {"x", dt, {"N", "D"}, false},
      {"w", dt, {"V", "D"}, false},
      {"labels", lt, {"N"}, false},
  };
  if (hasBias)
    params.push_back({"bias", dt, {"V"}, false});
  std::vector<std::string> rowShape;
  if (reduction == loss::Reduction::none)
    rowShape = {"N"};
  if (fusedForward) {
    // Outputs only: the loss (mean/sum), lse, and the gradients of grad = 1.
    params.push_back({"loss", ct, {}, true});
    params.push_back({"lse", ct, {"N"}, true});
  } else if (gradient) {
    params.push_back({"lse", ct, {"N"}, false});
    params.push_back({"grad_loss", ct, rowShape, false});
    if (hasGradLse)
      params.push_back({"grad_lse", ct, {"N"}, false});
  }
  if (gradient) {
    if (needsGradX)
      params.push_back({"grad_x", dt, {"N", "D"}, true});
    if (needsGradW)
      params.push_back({"grad_w", dt, {"V", "D"}, true});
    if (needsGradBias())
      params.push_back({"grad_bias", dt, {"V"}, true});
    return params;
  }
  std::vector<std::string> lossShape;
  if (reduction == loss::Reduction::none)
    lossShape = {"N"};
  params.push_back({"loss", ct, lossShape, true});
  params.push_back({"lse", ct, {"N"}, true});
  return params;
}

std::map<std::string, std::string> LceSpec::planOptions() const {
  if (isVocabReduce()) {
    std::string stats;
    for (loss::Statistic kind : statistics)
      stats += (stats.empty() ? "" : ",") + loss::stringifyStatistic(kind).str();
    std::map<std::string, std::string> options = {
        {"dtype", loss::storageTypeName(storage).str()},
        {"bias", hasBias ? "true" : "false"},
        {"class_weights", hasClassWeights ? "true" : "false"},
        {"targets", hasTargets() ? loss::storageTypeName(targetsType).str() : "none"},
        {"statistics", stats},
        {"pass", gradient ? "backward" : "forward"},
    };
    if (hasLabels) {
      options["label_type"] = labelTypeName(labelType);
      options["ignore_index"] = std::to_string(ignoreIndex);
      if (labelsPerRow > 0)
        options["labels_per_row"] = std::to_string(labelsPerRow);
    }
    if (logitScale != 1.0)
      options["logit_scale"] = loss::formatF64(logitScale);
    if (softcap != 0.0)
      options["softcap"] = loss::formatF64(softcap);
    if (hasTeacher) {
      options["teacher"] = hasTeacherBias ? "bias" : "true";
      if (teacherScale != 1.0)
        options["teacher_scale"] = loss::formatF64(teacherScale);
      if (hasMixtureStatistics())
        options["jsd_beta"] = loss::formatF64(jsdBeta);
    }
    if (gradient) {
      options["strategy"] = strategy;
      options["grad_x"] = needsGradX ? "true" : "false";
      options["grad_w"] = needsGradW ? "true" : "false";
      options["workspace_bytes"] = std::to_string(workspaceBytes);
    }
    return options;
  }
  std::map<std::string, std::string> options = {
      {"dtype", loss::storageTypeName(storage).str()},
      {"label_type", labelTypeName(labelType)},
      {"bias", hasBias ? "true" : "false"},
      {"ignore_index", std::to_string(ignoreIndex)},
      {"reduction", loss::stringifyReduction(reduction).str()},
      {"pass", fusedForward ? "forward_backward"
               : gradient   ? "backward"
                            : "forward"},
  };
  // Only when set, so manifests and plans of plain variants stay as they were.
  if (logitScale != 1.0)
    options["logit_scale"] = loss::formatF64(logitScale);
  if (softcap != 0.0)
    options["softcap"] = loss::formatF64(softcap);
  if (gradient) {
    options["strategy"] = strategy;
    options["grad_x"] = needsGradX ? "true" : "false";
    options["grad_w"] = needsGradW ? "true" : "false";
    options["workspace_bytes"] = std::to_string(workspaceBytes);
    // Only when set, so plans of plain backward variants stay as they were.
    if (hasGradLse)
      options["grad_lse"] = "true";
  }
  return options;
}
