//===- FusedFunction.cpp --------------------------------------------------===//

#include "compiler/Conversion/FusedFunction.h"

using namespace mlir;
using namespace lossjit;

namespace {
/// Why `fn` (which holds `op`) is not a fused function, or "" if it is.
std::string whyNotFused(func::FuncOp fn, loss::LinearCrossEntropyOp op) {
  Block &entry = fn.getBody().front();
  if (!fn.getBody().hasOneBlock())
    return "the function has more than one block";
  for (Value operand : op->getOperands()) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner() != &entry)
      return "every operand of the fused op must be a function argument";
  }
  for (Operation &other : entry.without_terminator())
    if (&other != op.getOperation())
      return "the function computes more than the fused op ('" +
             other.getName().getStringRef().str() +
             "'); run loss-fuse-linear-cross-entropy and canonicalize first";
  for (Value r : entry.getTerminator()->getOperands())
    if (r.getDefiningOp() != op.getOperation())
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
    SmallVector<loss::LinearCrossEntropyOp> ops;
    fn.walk([&](loss::LinearCrossEntropyOp op) { ops.push_back(op); });
    if (ops.empty())
      continue;
    if (ops.size() > 1) {
      ops[1].emitError() << passName << ": one fused op per function, @"
                         << fn.getName() << " has " << ops.size();
      ok = false;
      continue;
    }
    std::string why = whyNotFused(fn, ops.front());
    if (!why.empty()) {
      ops.front().emitError() << passName << ": cannot lower @" << fn.getName()
                              << ": " << why;
      ok = false;
      continue;
    }
    found.push_back({fn, ops.front()});
  }
  if (!ok)
    return failure();
  return found;
}

std::vector<std::string> lossjit::argumentRoles(FusedFunction f) {
  std::vector<std::string> roles;
  for (BlockArgument arg : f.func.getArguments()) {
    std::string role;
    if (arg == f.op.getInput())
      role = "x";
    else if (arg == f.op.getWeight())
      role = "w";
    else if (arg == f.op.getLabels())
      role = "labels";
    else if (arg == f.op.getBias())
      role = "bias";
    roles.push_back(role);
  }
  return roles;
}
