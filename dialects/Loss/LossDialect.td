//===- LossDialect.td - the `loss` dialect -----------------*- tablegen -*-===//
//
// Graph-level ops of a loss head: linear, explicit precision casts, logit
// transforms (scale, softcap), log-softmax, NLL and their fused form. Value
// semantics on builtin tensors.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_LOSS_DIALECT
#define LOSSJIT_LOSS_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Loss_Dialect : Dialect {
  let name = "loss";
  let summary = "Loss-head graph ops (linear, log-softmax, NLL) and their fused form";
  let description = [{
    The `loss` dialect describes the cross-entropy head of a language model at
    graph level. Storage types (f16, bf16, f32, f64) and compute types are
    kept apart: `loss.cast` is the only op that changes an element type, so a
    pass can prove that every transcendental and reduction runs in f32 (in
    f64 for f64 storage).
  }];
  let cppNamespace = "::lossjit::loss";
  let useDefaultAttributePrinterParser = 1;
  // `loss.lowering_config` on a fused op (LoweringConfig.td).
  let hasOperationAttrVerify = 1;
}

class Loss_Op<string mnemonic, list<Trait> traits = []>
    : Op<Loss_Dialect, mnemonic, traits>;

def Loss_ReductionNone : I32EnumAttrCase<"none", 0>;
def Loss_ReductionMean : I32EnumAttrCase<"mean", 1>;
def Loss_ReductionSum  : I32EnumAttrCase<"sum", 2>;
def Loss_Reduction : I32EnumAttr<"Reduction", "how per-row losses are reduced",
    [Loss_ReductionNone, Loss_ReductionMean, Loss_ReductionSum]> {
  let cppNamespace = "::lossjit::loss";
  let genSpecializedAttr = 0;
}
def Loss_ReductionAttr : EnumAttr<Loss_Dialect, Loss_Reduction, "reduction">;

#endif // LOSSJIT_LOSS_DIALECT
