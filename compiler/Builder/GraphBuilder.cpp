//===- GraphBuilder.cpp ---------------------------------------------------===//

#include "compiler/Builder/GraphBuilder.h"
#include "dialects/Loss/LossOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace lossjit;

llvm::Expected<Type> lossjit::storageTypeNamed(MLIRContext &ctx, llvm::StringRef dtype) {
  if (dtype == "f16")
    return Float16Type::get(&ctx);
  if (dtype == "bf16")
    return BFloat16Type::get(&ctx);
  if (dtype == "f32")
    return Float32Type::get(&ctx);
  if (dtype == "f64")
    return Float64Type::get(&ctx);
  return llvm::createStringError("dtype must be f16, bf16, f32 or f64, got '" +
                                 dtype.str() + "'");
}

namespace {
/// The backward function: one loss.linear_cross_entropy_grad.
OwningOpRef<ModuleOp> buildGradient(OpBuilder &b, OwningOpRef<ModuleOp> &module,
                                    SmallVector<Type> args,
                                    const LceGraphOptions &options, Type storage,
                                    loss::Reduction reduction, Type gradLossType) {
  Location loc = b.getUnknownLoc();
  const int64_t dyn = ShapedType::kDynamic;
  Type compute = loss::computeTypeFor(storage);
  args.push_back(RankedTensorType::get({dyn}, compute)); // lse
  args.push_back(gradLossType);                          // grad_loss
  if (options.gradLse)
    args.push_back(RankedTensorType::get({dyn}, compute)); // grad_lse
  SmallVector<Type> results;
  if (options.needsGradX)
    results.push_back(RankedTensorType::get({dyn, dyn}, storage));
  if (options.needsGradW) {
    results.push_back(RankedTensorType::get({dyn, dyn}, storage));
    if (options.bias)
      results.push_back(RankedTensorType::get({dyn}, storage));
  }
  auto fn = func::FuncOp::create(b, loc, options.name, b.getFunctionType(args, results));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  unsigned n = entry->getNumArguments() - (options.gradLse ? 1 : 0);
  Value bias = options.bias ? entry->getArgument(3) : Value();
  Value gradLse = options.gradLse ? entry->getArgument(n) : Value();
  auto grad = loss::LinearCrossEntropyGradOp::create(
      b, loc, results, entry->getArgument(0), entry->getArgument(1),
      entry->getArgument(2), bias, entry->getArgument(n - 2), entry->getArgument(n - 1),
      gradLse,
      b.getI64IntegerAttr(options.ignoreIndex),
      loss::ReductionAttr::get(b.getContext(), reduction), TypeAttr::get(storage),
      TypeAttr::get(compute), b.getStringAttr(options.strategy),
      b.getBoolAttr(options.needsGradX), b.getBoolAttr(options.needsGradW),
      b.getI64IntegerAttr(options.workspaceBytes), b.getF64FloatAttr(options.logitScale),
      b.getF64FloatAttr(options.softcap));
  func::ReturnOp::create(b, loc, grad.getResults());
  return std::move(module);
}
/// The fused forward+backward function: one loss.linear_cross_entropy_with_grad.
OwningOpRef<ModuleOp> buildFusedGradient(OpBuilder &b, OwningOpRef<ModuleOp> &module,
                                         SmallVector<Type> args,
                                         const LceGraphOptions &options, Type storage,
                                         loss::Reduction reduction) {
  Location loc = b.getUnknownLoc();
  const int64_t dyn = ShapedType::kDynamic;
  Type compute = loss::computeTypeFor(storage);
  SmallVector<Type> results = {RankedTensorType::get({}, compute),
                               RankedTensorType::get({dyn}, compute)};
  SmallVector<Type> grads;
  if (options.needsGradX)
    grads.push_back(RankedTensorType::get({dyn, dyn}, storage));
  if (options.needsGradW) {
    grads.push_back(RankedTensorType::get({dyn, dyn}, storage));
    if (options.bias)
      grads.push_back(RankedTensorType::get({dyn}, storage));
  }
  results.append(grads.begin(), grads.end());
  auto fn = func::FuncOp::create(b, loc, options.name, b.getFunctionType(args, results));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value bias = options.bias ? entry->getArgument(3) : Value();
  auto op = loss::LinearCrossEntropyWithGradOp::create(
      b, loc, results[0], results[1], grads, entry->getArgument(0), entry->getArgument(1),
      entry->getArgument(2), bias, b.getI64IntegerAttr(options.ignoreIndex),
      loss::ReductionAttr::get(b.getContext(), reduction), TypeAttr::get(storage),
      TypeAttr::get(compute), b.getStringAttr(options.strategy), b.getBoolAttr(options.needsGradX),
      b.getBoolAttr(options.needsGradW), b.getI64IntegerAttr(options.workspaceBytes),
      b.getF64FloatAttr(options.logitScale), b.getF64FloatAttr(options.softcap));
  func::ReturnOp::create(b, loc, op->getResults());
  return std::move(module);
}
} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
lossjit::buildLinearCrossEntropyGraph(MLIRContext &ctx,
                                      const LceGraphOptions &options) {
  ctx.loadDialect<loss::LossDialect, func::FuncDialect>();
  auto storage = storageTypeNamed(ctx, options.dtype);
  if (!storage)
    return storage.takeError();
  if (options.labelType != "i32" && options.labelType != "i64")
    return llvm::createStringError("label type must be i32 or i64, got '" +
                                   options.labelType + "'");
  std::optional<loss::Reduction> reduction =
      loss::symbolizeReduction(options.reduction);
  if (!reduction)
    return llvm::createStringError("reduction must be none, mean or sum, got '" +
                                   options.reduction + "'");
  if (!std::isfinite(options.logitScale) || options.logitScale == 0)
    return llvm::createStringError("logit scale must be finite and nonzero, got " +
                                   loss::formatF64(options.logitScale));
  if (!std::isfinite(options.softcap) || options.softcap < 0)
    return llvm::createStringError(
        "softcap must be 0 (none) or positive and finite, got " +
        loss::formatF64(options.softcap));
  if (options.name.empty())
    return llvm::createStringError("function name must not be empty");
  if (options.gradient && options.strategy != "auto" && options.strategy != "chunked" &&
      options.strategy != "vocab_chunked" && options.strategy != "recompute")
    return llvm::createStringError(
        "strategy must be auto, chunked, vocab_chunked or recompute, got '" + options.strategy +
        "'");
  if (options.gradient && !options.needsGradX && !options.needsGradW)
    return llvm::createStringError(
        "a gradient graph needs grad_x or grad_w (both were turned off)");
  if (options.fusedForward && !options.gradient)
    return llvm::createStringError("fusedForward builds gradients: set gradient too");
  if (options.gradLse && (!options.gradient || options.fusedForward))
    return llvm::createStringError(
        "gradLse is an input of the backward (gradient without fusedForward): the fused "
        "forward+backward computes its gradients before any gradient of lse exists");
  if (options.fusedForward && options.strategy == "recompute")
    return llvm::createStringError(
        "strategy recompute does not apply to the fused forward+backward (it forms each "
        "logit tile once per chunk): use auto, chunked or vocab_chunked");
  if (options.fusedForward && *reduction == loss::Reduction::none)
    return llvm::createStringError(
        "the fused forward+backward needs reduction mean or sum (with none every "
        "row has its own loss gradient)");
  if (options.gradient && options.workspaceBytes < 1)
    return llvm::createStringError("workspace bytes must be positive, got " +
                                   std::to_string(options.workspaceBytes));

  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  const int64_t dyn = ShapedType::kDynamic;
  Type compute = loss::computeTypeFor(*storage);
  auto matrix = RankedTensorType::get({dyn, dyn}, *storage);
  auto vector = RankedTensorType::get({dyn}, *storage);
  auto labels = RankedTensorType::get(
      {dyn}, b.getIntegerType(options.labelType == "i32" ? 32 : 64));
  auto lossType = *reduction == loss::Reduction::none
                      ? RankedTensorType::get({dyn}, compute)
                      : RankedTensorType::get({}, compute);
  SmallVector<Type> args = {Type(matrix), Type(matrix), Type(labels)};
  if (options.bias)
    args.push_back(vector);
  if (options.gradient && options.fusedForward)
    return buildFusedGradient(b, module, args, options, *storage, *reduction);
  if (options.gradient)
    return buildGradient(b, module, args, options, *storage, *reduction, lossType);
  auto fn = func::FuncOp::create(b, loc, options.name,
                                 b.getFunctionType(args, {lossType}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value bias = options.bias ? entry->getArgument(3) : Value();
  Value logits = loss::LinearOp::create(b, loc, matrix, entry->getArgument(0),
                                        entry->getArgument(1), bias);
  auto wide = RankedTensorType::get({dyn, dyn}, compute);
  if (*storage != compute)
    logits = loss::CastOp::create(b, loc, wide, logits);
  if (options.logitScale != 1.0)
    logits = loss::ScaleOp::create(b, loc, wide, logits,
                                   b.getF64FloatAttr(options.logitScale));
  if (options.softcap != 0.0)
    logits = loss::SoftcapOp::create(b, loc, wide, logits, b.getF64FloatAttr(options.softcap));
  Value logp = loss::LogSoftmaxOp::create(b, loc, wide, logits);
  Value lossValue = loss::NllOp::create(
      b, loc, lossType, logp, entry->getArgument(2),
      b.getI64IntegerAttr(options.ignoreIndex),
      loss::ReductionAttr::get(&ctx, *reduction));
  func::ReturnOp::create(b, loc, lossValue);
  return module;
}
