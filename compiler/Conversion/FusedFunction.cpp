//===- FusedFunction.cpp --------------------------------------------------===//

#include "compiler/Conversion/FusedFunction.h"

using namespace mlir;
using namespace lossjit;

namespace {
/// Why `fn` (which holds `op`) is not a fused function, or "" if it is.
std::string whyNotFused(func::FuncOp fn, Operation *op) {
  Block &entry = fn.getBody().front();
  if (!fn.getBody().hasOneBlock())
    return "the function has more than one block";
  llvm::SmallPtrSet<void *, 8> seen;
  for (Value operand : op->getOperands()) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner() != &entry)
      return "every operand of the fused op must be a function argument";
    if (!seen.insert(operand.getAsOpaquePointer()).second)
      return "each operand of the fused op must be a distinct function argument "
             "(the launch plan binds buffers by role)";
  }
  for (Operation &other : entry.without_terminator())
    if (&other != op)
      return "the function computes more than the fused op ('" +
             other.getName().getStringRef().str() +
             "'); run loss-fuse-linear-cross-entropy and canonicalize first";
  for (Value r : entry.getTerminator()->getOperands())
    if (r.getDefiningOp() != op)
      return "the function must return only results of the fused op";
  return "";
}
} // namespace

FailureOr<SmallVector<FusedFunction>>
lossjit::collectFusedFunctions(ModuleOp module, StringRef passName) {
  SmallVector<FusedFunction> found;
  bool ok = true;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    SmallVector<Operation *> ops;
    fn.walk([&](loss::FusedOpInterface op) { ops.push_back(op); });
    if (ops.empty())
      continue;
    if (ops.size() > 1) {
      ops[1]->emitError() << passName << ": one fused op per function, @"
                         << fn.getName() << " has " << ops.size();
      ok = false;
      continue;
    }
    std::string why = whyNotFused(fn, ops.front());
    if (!why.empty()) {
      ops.front()->emitError() << passName << ": cannot lower @" << fn.getName()
                              << ": " << why;
      ok = false;
      continue;
    }
    found.push_back({fn, ops.front()});
  }
  // Anything of the loss dialect left outside a fused function would be
  // silently dropped by the lowering: report it instead.
  // (The statistics inside a vocabulary reduction's region are part of it.)
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "loss" &&
        !isa<loss::FusedOpInterface>(op) && !op->getParentOfType<loss::FusedOpInterface>()) {
      op->emitOpError() << "was not fused into loss.linear_cross_entropy; "
                        << passName
                        << " lowers fused functions only (the remarks of "
                           "loss-fuse-linear-cross-entropy say why a chain "
                           "does not fuse)";
      ok = false;
    }
  });
  if (!ok)
    return failure();
  return found;
}

LceSpec lossjit::specOf(const FusedFunction &f) {
  if (auto reduce = dyn_cast<loss::VocabReduceOp>(f.op))
    return LceSpec::fromOp(reduce);
  if (auto reduceGrad = dyn_cast<loss::VocabReduceGradOp>(f.op))
    return LceSpec::fromOp(reduceGrad);
  if (auto grad = dyn_cast<loss::LinearCrossEntropyGradOp>(f.op))
    return LceSpec::fromOp(grad);
  if (auto fused = dyn_cast<loss::LinearCrossEntropyWithGradOp>(f.op))
    return LceSpec::fromOp(fused);
  return LceSpec::fromOp(cast<loss::LinearCrossEntropyOp>(f.op));
}

std::vector<std::string> lossjit::resultRoles(const FusedFunction &f) {
  std::vector<std::string> names;
  LceSpec spec = specOf(f);
  if (spec.isVocabReduce() && !spec.gradient)
    for (loss::Statistic kind : spec.statistics)
      names.push_back(loss::stringifyStatistic(kind).str());
  else if (!spec.gradient || spec.fusedForward)
    names = {"loss", "lse"};
  if (spec.gradient) {
    if (spec.needsGradX)
      names.push_back("grad_x");
    if (spec.needsGradW) {
      names.push_back("grad_w");
      if (spec.hasBias)
        names.push_back("grad_bias");
    }
  }
  std::vector<std::string> roles;
  func::FuncOp fn = f.func;
  for (Value r : fn.getBody().front().getTerminator()->getOperands())
    roles.push_back(names[cast<OpResult>(r).getResultNumber()]);
  return roles;
}

std::vector<std::vector<int64_t>> lossjit::argumentExtents(const FusedFunction &f) {
  std::vector<std::vector<int64_t>> result;
  bool anyStatic = false;
  func::FuncOp fn = f.func;
  for (Type type : fn.getArgumentTypes()) {
    std::vector<int64_t> &extents = result.emplace_back();
    auto ranked = dyn_cast<RankedTensorType>(type);
    if (!ranked)
      continue;
    for (int64_t e : ranked.getShape()) {
      extents.push_back(ShapedType::isDynamic(e) ? -1 : e);
      anyStatic |= !ShapedType::isDynamic(e);
    }
  }
  if (!anyStatic)
    result.clear();
  return result;
}

std::vector<std::string> lossjit::argumentRoles(const FusedFunction &f) {
  // Operand roles in the order the ops declare them.
  SmallVector<std::pair<Value, std::string>> roles;
  if (auto fwd = dyn_cast<loss::LinearCrossEntropyOp>(f.op)) {
    roles = {{fwd.getInput(), "x"}, {fwd.getWeight(), "w"},
             {fwd.getLabels(), "labels"}, {fwd.getBias(), "bias"}};
  } else if (auto fused = dyn_cast<loss::LinearCrossEntropyWithGradOp>(f.op)) {
    roles = {{fused.getInput(), "x"}, {fused.getWeight(), "w"},
             {fused.getLabels(), "labels"}, {fused.getBias(), "bias"}};
  } else if (auto reduce = dyn_cast<loss::VocabReduceOp>(f.op)) {
    roles = {{reduce.getInput(), "x"},
             {reduce.getWeight(), "w"},
             {reduce.getLabels(), "labels"},
             {reduce.getBias(), "bias"},
             {reduce.getClassWeights(), "class_weights"},
             {reduce.getTargets(), "targets"},
             {reduce.getTeacherInput(), "teacher_x"},
             {reduce.getTeacherWeight(), "teacher_w"},
             {reduce.getTeacherBias(), "teacher_bias"}};
  } else if (auto reduceGrad = dyn_cast<loss::VocabReduceGradOp>(f.op)) {
    roles = {{reduceGrad.getInput(), "x"},
             {reduceGrad.getWeight(), "w"},
             {reduceGrad.getLabels(), "labels"},
             {reduceGrad.getBias(), "bias"},
             {reduceGrad.getClassWeights(), "class_weights"},
             {reduceGrad.getTargets(), "targets"},
             {reduceGrad.getTeacherInput(), "teacher_x"},
             {reduceGrad.getTeacherWeight(), "teacher_w"},
             {reduceGrad.getTeacherBias(), "teacher_bias"}};
    // The saved statistics the gradient reads (lse, entropy, ...) keep their
    // names; the adjoints are grad_<statistic>. A saved statistic the
    // gradient does not read has no role.
    LceSpec spec = LceSpec::fromOp(reduceGrad);
    for (auto [kind, saved, adjoint] :
         llvm::zip(spec.statistics, reduceGrad.getSaved(), reduceGrad.getAdjoints())) {
      std::string name = loss::stringifyStatistic(kind).str();
      if (spec.gradientReadsSaved(kind))
        roles.push_back({saved, name});
      roles.push_back({adjoint, "grad_" + name});
    }
  } else {
    auto grad = cast<loss::LinearCrossEntropyGradOp>(f.op);
    roles = {{grad.getInput(), "x"},       {grad.getWeight(), "w"},
             {grad.getLabels(), "labels"}, {grad.getBias(), "bias"},
             {grad.getLse(), "lse"},       {grad.getGradLoss(), "grad_loss"},
             {grad.getGradLse(), "grad_lse"}};
  }
  std::vector<std::string> result;
  func::FuncOp fn = f.func;
  for (BlockArgument arg : fn.getArguments()) {
    std::string role;
    for (const auto &[value, name] : roles)
      if (value && value == arg) {
        role = name;
        break;
      }
    result.push_back(role);
  }
  return result;
}
