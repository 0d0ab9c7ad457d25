//===- LossOps.h - ops of the `loss` dialect --------------------*- C++ -*-===//

#ifndef LOSSJIT_DIALECTS_LOSS_LOSSOPS_H
#define LOSSJIT_DIALECTS_LOSS_LOSSOPS_H

#include "dialects/Loss/LossDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Loss/LossInterfaces.h.inc"

#include <string>

#define GET_OP_CLASSES
#include "dialects/Loss/LossOps.h.inc"

namespace lossjit::loss {
/// True for the element types a loss tensor may be stored in (f16, bf16,
/// f32, f64).
bool isStorageType(mlir::Type type);
/// The type the softmax path of `storage` computes in: f32 for f16, bf16
/// and f32 (16-bit storage never means 16-bit math), f64 for f64 (what
/// float64 callers — gradcheck, reference runs — ask for).
mlir::Type computeTypeFor(mlir::Type storage);
/// Spells a storage type the way users and manifests do: "f16", "bf16",
/// "f32", "f64".
llvm::StringRef storageTypeName(mlir::Type type);
/// Spells a double the way Python's repr() does ("30.0", "0.1", "1e-05"): the
/// shortest text that reads back to the same value. Diagnostics and manifest
/// options use it, so Python can form the same option strings.
std::string formatF64(double value);
/// The other statistics the adjoint rule of `kind` reads as saved row values
/// (entropy's reads lse; jsd's lse, teacher_lse and mixture_kl; ...): a
/// loss.vocab_reduce_grad must yield them too (its verifier says which).
llvm::ArrayRef<Statistic> adjointReads(Statistic kind);
} // namespace lossjit::loss

#endif // LOSSJIT_DIALECTS_LOSS_LOSSOPS_H
