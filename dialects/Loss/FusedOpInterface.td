//===- FusedOpInterface.td - ops that lower to kernels -----*- tablegen -*-===//
//
// The fused ops (the cross-entropy family and the vocabulary reductions)
// are the only ops the lowering passes turn into kernels. What a pass needs
// to know of one without knowing which it is — its storage type, which
// kernel pass it is, its gradient strategy — is this interface, so adding a
// fused op does not mean finding every list of op classes.
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_LOSS_FUSEDOPINTERFACE
#define LOSSJIT_LOSS_FUSEDOPINTERFACE

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def Loss_KernelPassForward : I32EnumAttrCase<"forward", 0>;
def Loss_KernelPassBackward : I32EnumAttrCase<"backward", 1>;
def Loss_KernelPassForwardBackward : I32EnumAttrCase<"forward_backward", 2>;
def Loss_KernelPass : I32EnumAttr<"KernelPass",
    "which pass a fused op's kernels run: the forward, the backward, or both in one",
    [Loss_KernelPassForward, Loss_KernelPassBackward, Loss_KernelPassForwardBackward]> {
  let cppNamespace = "::lossjit::loss";
  let genSpecializedAttr = 0;
}

def Loss_FusedOpInterface : OpInterface<"FusedOpInterface"> {
  let cppNamespace = "::lossjit::loss";
  let description = [{
    An op the lowering passes turn into kernels and a launch plan: it reads
    x [N, D] and w [V, D] in one storage type and never materializes the
    [N, V] logits.
  }];
  let methods = [
    InterfaceMethod<"The storage element type of x, w and the bias.", "::mlir::Type",
                    "getStorage">,
    InterfaceMethod<"Which kernel pass the op is.", "::lossjit::loss::KernelPass",
                    "getKernelPass">,
    InterfaceMethod<[{The gradient strategy the op asks for ("auto", "chunked",
                      "vocab_chunked" or "recompute"; a vocabulary reduction
                      has no "vocab_chunked"); "" for a forward op.}],
                    "::llvm::StringRef", "getGradientStrategy">,
  ];
}

#endif // LOSSJIT_LOSS_FUSEDOPINTERFACE
