"""The ``torch.library`` custom ops behind the public functions.

``lossjit::linear_cross_entropy(hidden[N,D], weight[V,D], target[N], bias[V]?,
ignore_index, reduction, graph, logit_scale=1.0, softcap=0.0) -> (loss, lse)``
and its backward ``lossjit::linear_cross_entropy_backward``; the opt-in fused
forward+backward ``lossjit::linear_cross_entropy_with_grad`` (loss, lse and the
gradients of grad_loss = 1 in one pass, mean/sum) behind the autograd
Function ``FusedLinearCrossEntropy``. The logits are
``softcap(logit_scale * (hidden @ weight.T + bias))`` with
``softcap(u) = c * tanh(u / c)`` (``softcap = 0``: none). Both have fake (meta) kernels, so
FakeTensor, meta tensors, ``torch.compile`` and ``opcheck`` see exact shapes
and dtypes; the forward has an autograd formula (through the backward op) and
autocast kernels for CPU and CUDA.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _kernels as K

REDUCTIONS = ("none", "mean", "sum")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


#: The names the public functions give the four tensors (torch's
#: F.linear_cross_entropy spelling); the ops' own names are the defaults.
PUBLIC_NAMES = ("input", "linear_weight", "target", "linear_bias")


def check_inputs(hidden: Tensor, weight: Tensor, target: Tensor,
                 bias: Optional[Tensor], ignore_index: int, reduction: str,
                 names: Tuple[str, str, str, str] = ("hidden", "weight", "target",
                                                     "bias")) -> None:
    """Metadata checks only (dtype, device, shape): valid for real, meta and
    fake tensors and for tensor subclasses alike. `hidden` may be [..., D].
    Errors name the arguments as `names` (hidden, weight, target, bias)."""
    xn, wn, tn, bn = names
    for arg, value in ((xn, hidden), (wn, weight), (tn, target)):
        if not isinstance(value, Tensor):
            raise TypeError(f"lossjit: {arg} must be a Tensor, got {type(value).__name__}")
    if bias is not None and not isinstance(bias, Tensor):
        raise TypeError(f"lossjit: {bn} must be a Tensor or None, got {type(bias).__name__}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"lossjit: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if weight.dim() != 2:
        raise ValueError(f"lossjit: {wn} must have shape [V, D], got {list(weight.shape)}"
                         + (" (K-dimensional losses, a weight [V, d_1, ..., d_K, D], are not "
                            "supported)" if weight.dim() > 2 else ""))
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise TypeError(f"lossjit: ignore_index must be an int, got {type(ignore_index).__name__}")
    if not -(1 << 63) <= ignore_index < (1 << 63):
        raise ValueError(f"lossjit: ignore_index must fit in int64 (the target's index type), "
                         f"got {ignore_index}")
    dtype = hidden.dtype
    if dtype not in K.STORAGE_DTYPES:
        raise TypeError(
            f"lossjit: {xn} has dtype {_name(dtype)}; lossjit stores float16, bfloat16, "
            "float32 (math in float32) or float64 (math in float64)")
    if weight.dtype != dtype:
        raise TypeError(
            f"lossjit: {wn} has dtype {_name(weight.dtype)} but {xn} has {_name(dtype)}; "
            "they must match (as for F.linear)")
    if bias is not None and bias.dtype != dtype:
        raise TypeError(
            f"lossjit: {bn} has dtype {_name(bias.dtype)} but {xn} has {_name(dtype)}; "
            "they must match (as for F.linear)")
    if target.dtype not in K.LABEL_DTYPES:
        kind = "floating-point" if target.is_floating_point() else "non-index"
        raise TypeError(
            f"lossjit: {tn} must hold class indices as torch.int64 or torch.int32, got "
            f"{kind} dtype {_name(target.dtype)} (class-probability targets are not "
            "supported)")
    device = hidden.device
    for arg, value in ((wn, weight), (tn, target), (bn, bias)):
        if value is not None and value.device != device:
            raise RuntimeError(
                f"lossjit: expected all tensors on one device, but {xn} is on {device} "
                f"and {arg} is on {value.device}")
    if hidden.dim() < 1:
        raise ValueError(f"lossjit: {xn} must have shape [..., D], got a 0-d tensor")
    d = hidden.shape[-1]
    if weight.shape[1] != d:
        raise ValueError(
            f"lossjit: {xn} has D={d} features but {wn} has shape {list(weight.shape)} "
            "(expected [V, D])")
    if weight.shape[0] < 1:
        raise ValueError(f"lossjit: {wn} has no rows; the vocabulary size V must be >= 1")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(
            f"lossjit: {bn} must have shape [V] = [{weight.shape[0]}], got {list(bias.shape)}")
    if tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(
            f"lossjit: {tn} must have shape {list(hidden.shape[:-1])} ({xn}'s leading "
            f"dims), got {list(target.shape)}")


def check_logit_transforms(logit_scale: float, softcap: float) -> None:
    """logit_scale: a finite nonzero number; softcap: 0 (none) or positive, finite.
    Comparisons only, so a symbolic number under torch.compile passes as well."""
    for name, value in (("logit_scale", logit_scale), ("softcap", softcap)):
        if isinstance(value, bool) or not isinstance(
                value, (int, float, torch.SymInt, torch.SymFloat)):
            raise TypeError(f"lossjit: {name} must be a Python number, got "
                            f"{type(value).__name__}")
    if not -math.inf < logit_scale < math.inf or logit_scale == 0:
        raise ValueError(f"lossjit: logit_scale must be finite and nonzero, got {logit_scale!r}")
    if not 0 <= softcap < math.inf:
        raise ValueError(f"lossjit: softcap must be positive and finite (or None for no "
                         f"soft-capping), got {softcap!r}")


def fake_gradients(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], needs_grad_x: bool,
                   needs_grad_w: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """What a gradient op's fake kernel returns: the real kernels write
    contiguous gradients (they fill buffers made like the contiguous inputs),
    so the fakes have contiguous strides too, whatever the inputs' are — a
    transposed weight's fake gradient with its strides would fail inductor's
    stride checks. Empty tensors stand for gradients not asked for."""
    grad_x = hidden.new_empty(hidden.shape) if needs_grad_x else hidden.new_empty((0,))
    grad_w = weight.new_empty(weight.shape) if needs_grad_w else hidden.new_empty((0,))
    grad_b = bias.new_empty(bias.shape) if (needs_grad_w and bias is not None) \
        else hidden.new_empty((0,))
    return grad_x, grad_w, grad_b


@torch.library.custom_op("lossjit::linear_cross_entropy", mutates_args=())
def linear_cross_entropy_op(hidden: Tensor, weight: Tensor, target: Tensor,
                            bias: Optional[Tensor], ignore_index: int, reduction: str,
                            graph: str, logit_scale: float = 1.0,
                            softcap: float = 0.0) -> Tuple[Tensor, Tensor]:
    """Fused loss of hidden [N, D], weight [V, D], target [N]: (loss, lse)."""
    check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    check_logit_transforms(logit_scale, softcap)
    if hidden.dim() != 2:
        raise ValueError(f"lossjit::linear_cross_entropy takes hidden [N, D], got "
                         f"{list(hidden.shape)}")
    device = hidden.device
    n, d = hidden.shape
    v = weight.shape[0]
    kernel = K.forward_kernel(hidden.dtype, target.dtype, bias is not None, ignore_index,
                              reduction, graph, device, float(logit_scale), float(softcap))
    loss = hidden.new_empty((n,) if reduction == "none" else (), dtype=K.compute_dtype(hidden.dtype))
    lse = hidden.new_empty((n,), dtype=K.compute_dtype(hidden.dtype))
    buffers = {"x": hidden.contiguous(), "w": weight.contiguous(),
               "labels": target.contiguous(), "loss": loss, "lse": lse}
    if bias is not None:
        buffers["bias"] = bias.contiguous()
    # On CPU the labels are range-checked (IndexError) before any kernel runs.
    kernel.run(device, n, v, d, buffers)
    return loss, lse


@linear_cross_entropy_op.register_fake
def _(hidden, weight, target, bias, ignore_index, reduction, graph, logit_scale=1.0,
      softcap=0.0):
    # (No check of the logit transforms here: under torch.compile they may
    # be symbolic; the real kernel and the public functions check them.)
    check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    if hidden.dim() != 2:
        raise ValueError(f"lossjit::linear_cross_entropy takes hidden [N, D], got "
                         f"{list(hidden.shape)}")
    n = hidden.shape[0]
    loss = hidden.new_empty((n,) if reduction == "none" else (), dtype=K.compute_dtype(hidden.dtype))
    lse = hidden.new_empty((n,), dtype=K.compute_dtype(hidden.dtype))
    return loss, lse


@torch.library.custom_op("lossjit::linear_cross_entropy_backward", mutates_args=())
def linear_cross_entropy_backward_op(
        hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor],
        lse: Tensor, grad_loss: Tensor, ignore_index: int, reduction: str,
        needs_grad_x: bool, needs_grad_w: bool, logit_scale: float = 1.0,
        softcap: float = 0.0, grad_lse: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor, Tensor]:
    """(grad_hidden, grad_weight, grad_bias); a gradient not asked for is an
    empty tensor (so is grad_bias without a bias). `grad_lse` ([N]) is the
    gradient reaching lse (a z-loss, say): it adds grad_lse · softmax to dZ."""
    check_logit_transforms(logit_scale, softcap)
    device = hidden.device
    n, d = hidden.shape
    v = weight.shape[0]
    if grad_lse is not None and tuple(grad_lse.shape) != (n,):
        raise ValueError(f"lossjit: grad_lse must have shape [{n}] (one value per row), got "
                         f"{list(grad_lse.shape)}")
    flags = K.BackwardFlags(needs_grad_x, needs_grad_w,
                            strategy=K.backward_strategy(hidden.dtype, device, n, v,
                                                         needs_grad_w),
                            grad_lse=grad_lse is not None)
    kernel = K.backward_kernel(hidden.dtype, target.dtype, bias is not None, ignore_index,
                               reduction, flags, device, float(logit_scale), float(softcap))
    buffers = {"x": hidden.contiguous(), "w": weight.contiguous(),
               "labels": target.contiguous(), "lse": lse.contiguous(),
               "grad_loss": grad_loss.to(K.compute_dtype(hidden.dtype)).contiguous()}
    if grad_lse is not None:
        buffers["grad_lse"] = grad_lse.to(K.compute_dtype(hidden.dtype)).contiguous()
    if bias is not None:
        buffers["bias"] = bias.contiguous()
    # The kernel may compute more than asked (prebuilt bundles always make
    # both gradients): allocate what it writes, return what was asked.
    names = kernel.names
    if "grad_x" in names:
        buffers["grad_x"] = torch.empty_like(buffers["x"])
    if "grad_w" in names:
        buffers["grad_w"] = torch.empty_like(buffers["w"])
    if "grad_bias" in names:
        buffers["grad_bias"] = torch.empty_like(buffers["bias"])
    empty = hidden.new_empty((0,))
    grad_x = buffers["grad_x"] if needs_grad_x else empty
    grad_w = buffers["grad_w"] if needs_grad_w else empty
    grad_b = buffers["grad_bias"] if (needs_grad_w and bias is not None) else \
        hidden.new_empty((0,))
    kernel.run(device, n, v, d, buffers)
    return grad_x, grad_w, grad_b


@linear_cross_entropy_backward_op.register_fake
def _(hidden, weight, target, bias, lse, grad_loss, ignore_index, reduction,
      needs_grad_x, needs_grad_w, logit_scale=1.0, softcap=0.0, grad_lse=None):
    return fake_gradients(hidden, weight, bias, needs_grad_x, needs_grad_w)


def _setup_context(ctx, inputs, output):
    hidden, weight, target, bias, ignore_index, reduction, _graph = inputs[:7]
    _loss, lse = output
    # lse is differentiable (∂lse/∂z = softmax): its gradient goes to the
    # backward kernel as grad_lse. Unused outputs give None, not zeros, so a
    # plain loss never pays for an lse term.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(hidden, weight, target, bias, lse)
    ctx.ignore_index = ignore_index
    ctx.reduction = reduction
    # The logit transforms (defaults when the call left them out).
    ctx.logit_scale = inputs[7] if len(inputs) > 7 else 1.0
    ctx.softcap = inputs[8] if len(inputs) > 8 else 0.0
    ctx.num_inputs = len(inputs)


def _backward(ctx, grad_loss, grad_lse):
    hidden, weight, target, bias, lse = ctx.saved_tensors
    needs_x, needs_w, _, needs_b = ctx.needs_input_grad[:4]
    rest = (None,) * (ctx.num_inputs - 4)
    if (grad_loss is None and grad_lse is None) or not (needs_x or needs_w or needs_b):
        return (None, None, None, None) + rest
    if grad_loss is None:  # only lse was used
        shape = (hidden.shape[0],) if ctx.reduction == "none" else ()
        grad_loss = hidden.new_zeros(shape, dtype=K.compute_dtype(hidden.dtype))
    extra = () if grad_lse is None else (grad_lse,)
    grad_x, grad_w, grad_b = torch.ops.lossjit.linear_cross_entropy_backward(
        hidden, weight, target, bias, lse, grad_loss, ctx.ignore_index, ctx.reduction,
        bool(needs_x), bool(needs_w or needs_b), ctx.logit_scale, ctx.softcap, *extra)
    return (grad_x if needs_x else None, grad_w if needs_w else None, None,
            grad_b if (needs_b and bias is not None) else None) + rest


linear_cross_entropy_op.register_autograd(_backward, setup_context=_setup_context)

DOUBLE_BACKWARD_MESSAGE = (
    "lossjit: the gradients of lossjit's linear cross-entropy are not differentiable "
    "(double backward, e.g. a gradient penalty through create_graph=True, is not "
    "supported); compute such a term with F.linear + F.cross_entropy")


def _no_double_backward(ctx, *grads):
    raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)


# Differentiating the backward op's outputs (what create_graph=True then a
# second backward does) names what lossjit supports instead of torch's
# generic "no autograd formula".
linear_cross_entropy_backward_op.register_autograd(_no_double_backward)


@torch.library.custom_op("lossjit::linear_cross_entropy_with_grad", mutates_args=())
def linear_cross_entropy_with_grad_op(
        hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor],
        ignore_index: int, reduction: str, needs_grad_x: bool, needs_grad_w: bool,
        logit_scale: float = 1.0, softcap: float = 0.0
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The fused forward+backward in one pass over the logits, reduction mean
    or sum: (loss, lse, grad_hidden, grad_weight, grad_bias), the gradients
    those of grad_loss = 1. A gradient not asked for is an empty tensor (so
    is grad_bias without a bias; needs_grad_w covers weight and bias)."""
    check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    check_logit_transforms(logit_scale, softcap)
    _check_fused(hidden, reduction)
    device = hidden.device
    n, d = hidden.shape
    v = weight.shape[0]
    # The backward's schedule: on CUDA with 16-bit storage, vocabulary chunks
    # (the forward's statistics first, then no V x D f32 dW accumulator),
    # unless all rows fit one row chunk (the logits once, no accumulator);
    # on the host, row chunks where that accumulator is small.
    flags = K.BackwardFlags(needs_grad_x, needs_grad_w,
                            strategy=K.backward_strategy(hidden.dtype, device, n, v,
                                                         needs_grad_w, fused=True, d=d))
    kernel = K.fused_kernel(hidden.dtype, target.dtype, bias is not None, ignore_index,
                            reduction, flags, device, float(logit_scale), float(softcap))
    loss = hidden.new_empty((), dtype=K.compute_dtype(hidden.dtype))
    lse = hidden.new_empty((n,), dtype=K.compute_dtype(hidden.dtype))
    buffers = {"x": hidden.contiguous(), "w": weight.contiguous(),
               "labels": target.contiguous(), "loss": loss, "lse": lse}
    if bias is not None:
        buffers["bias"] = bias.contiguous()
    # As for the backward: allocate what the kernel writes, return what was asked.
    names = kernel.names
    if "grad_x" in names:
        buffers["grad_x"] = torch.empty_like(buffers["x"])
    if "grad_w" in names:
        buffers["grad_w"] = torch.empty_like(buffers["w"])
    if "grad_bias" in names:
        buffers["grad_bias"] = torch.empty_like(buffers["bias"])
    grad_x = buffers["grad_x"] if needs_grad_x else hidden.new_empty((0,))
    grad_w = buffers["grad_w"] if needs_grad_w else hidden.new_empty((0,))
    grad_b = buffers["grad_bias"] if (needs_grad_w and bias is not None) else \
        hidden.new_empty((0,))
    # On CPU the labels are range-checked (IndexError) before any kernel runs.
    kernel.run(device, n, v, d, buffers)
    return loss, lse, grad_x, grad_w, grad_b


def _check_fused(hidden: Tensor, reduction: str) -> None:
    if hidden.dim() != 2:
        raise ValueError(f"lossjit::linear_cross_entropy_with_grad takes hidden [N, D], "
                         f"got {list(hidden.shape)}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"lossjit::linear_cross_entropy_with_grad needs reduction 'mean' "
                         f"or 'sum', got {reduction!r}")


@linear_cross_entropy_with_grad_op.register_fake
def _(hidden, weight, target, bias, ignore_index, reduction, needs_grad_x, needs_grad_w,
      logit_scale=1.0, softcap=0.0):
    check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    _check_fused(hidden, reduction)
    n = hidden.shape[0]
    loss = hidden.new_empty((), dtype=K.compute_dtype(hidden.dtype))
    lse = hidden.new_empty((n,), dtype=K.compute_dtype(hidden.dtype))
    return (loss, lse) + fake_gradients(hidden, weight, bias, needs_grad_x, needs_grad_w)


# Elements of a 16-bit gradient rescaled at a time by _scaled(): a 4 MiB
# float32 temporary instead of a gradient-sized one (V·D·4 bytes for grad_w).
_SCALE_BLOCK = 1 << 20


def _scaled(grad: Tensor, grad_loss: Tensor) -> Tensor:
    """grad_loss (a 0-d tensor of the compute dtype) × a stored gradient, in
    float32 (float64 for float64) and rounded once to the gradient's dtype.
    For grad_loss = 1 on the CPU (what loss.backward() passes) the stored gradient is returned as it is: the
    same bits, without a gradient-sized copy (on a GPU reading the value
    would synchronize, so the product is always formed there). A 16-bit
    gradient is multiplied by a 1-element (not 0-d) float32 factor into a
    16-bit output: type promotion forms each product in float32 and the
    output rounds it once. On CUDA that is one kernel, which casts inside
    it; on the CPU torch computes through a float32 temporary, so there the
    gradient goes _SCALE_BLOCK elements at a time and no float32 copy of it
    exists (under torch.compile the expression is fused instead)."""
    if (type(grad_loss) is torch.Tensor and grad_loss.device.type == "cpu"
            and not torch.compiler.is_compiling() and float(grad_loss) == 1.0):
        return grad
    if grad.dtype == grad_loss.dtype:  # float32 or float64: nothing to round
        return grad * grad_loss
    if torch.compiler.is_compiling():
        return (grad.float() * grad_loss).to(grad.dtype)
    out = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device)
    src, dst = grad.reshape(-1), out.view(-1)
    factor = grad_loss.reshape(1)
    step = _SCALE_BLOCK if grad.device.type == "cpu" else max(src.numel(), 1)
    for i in range(0, src.numel(), step):
        torch.mul(src[i:i + step], factor, out=dst[i:i + step])
    return out


class FusedLinearCrossEntropy(torch.autograd.Function):
    """(loss, lse) of hidden [N, D] through the fused forward+backward op: the
    gradients of grad_loss = 1 are computed in the forward and kept; the
    backward only rescales them by grad_loss. Gradients are made only for the
    inputs that require them (hidden; weight and bias)."""

    @staticmethod
    def forward(ctx, hidden, weight, target, bias, ignore_index, reduction, logit_scale,
                softcap):
        needs_x = bool(ctx.needs_input_grad[0])
        needs_w = bool(ctx.needs_input_grad[1] or ctx.needs_input_grad[3])
        loss, lse, grad_x, grad_w, grad_b = torch.ops.lossjit.linear_cross_entropy_with_grad(
            hidden, weight, target, bias, ignore_index, reduction, needs_x, needs_w,
            logit_scale, softcap)
        ctx.mark_non_differentiable(lse)
        # The inputs too (no copy): a gradient asked for with create_graph=True
        # is tied to them, so differentiating it raises instead of silently
        # giving a gradient without a graph.
        ctx.save_for_backward(grad_x, grad_w, grad_b, hidden, weight, bias)
        ctx.has_bias = bias is not None
        return loss, lse

    @staticmethod
    def backward(ctx, grad_loss, _grad_lse):
        grad_x, grad_w, grad_b, hidden, weight, bias = ctx.saved_tensors
        needs_x, needs_w, _, needs_b = ctx.needs_input_grad[:4]
        rest = (None,) * 4
        if grad_loss is None:
            return (None, None, None, None) + rest
        with torch.no_grad():
            scale = grad_loss.to(K.compute_dtype(hidden.dtype))
            grads = (_scaled(grad_x, scale) if needs_x else None,
                     _scaled(grad_w, scale) if needs_w else None, None,
                     _scaled(grad_b, scale) if (needs_b and ctx.has_bias) else None)
        if torch.is_grad_enabled():  # create_graph=True
            tied = [t for t in (grad_loss, hidden, weight, bias)
                    if t is not None and t.requires_grad]
            if tied:
                grads = tuple(None if g is None else _NotDifferentiable.apply(g, *tied)
                              for g in grads)
        return grads + rest


class _NotDifferentiable(torch.autograd.Function):
    """A copy of a gradient whose own gradient is an error naming what lossjit
    supports (the fused path keeps no graph to differentiate)."""

    @staticmethod
    def forward(ctx, grad, *tied):
        return grad.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)


def autocast_cast(t: Optional[Tensor], dtype: torch.dtype,
                  device_type: str) -> Optional[Tensor]:
    """Autocast's own rule for an operand of F.linear: floating tensors on
    this device type, except float64, take the autocast dtype."""
    if t is None or not t.is_floating_point() or t.dtype == torch.float64 \
            or t.device.type != device_type:
        return t
    return t.to(dtype)


_autocast_lib = torch.library.Library("lossjit", "IMPL")


def register_autocast(op_name: str, linear_args: Tuple[int, ...] = (0, 1, 3)) -> None:
    """Autocast kernels (CPU and CUDA) for op lossjit::`op_name`: its
    arguments at `linear_args` (hidden, weight, bias) take the autocast dtype
    as F.linear's operands would (float64 stays float64); the results are
    float32 for the autocast dtypes (the losses and statistics autocast to
    float32, like F.cross_entropy)."""

    def make(device_type: str, key_name: str):
        key = getattr(torch._C.DispatchKey, key_name)
        op = getattr(torch.ops.lossjit, op_name)

        def kernel(_keyset, *args):
            dtype = torch.get_autocast_dtype(device_type)
            cast = [autocast_cast(a, dtype, device_type) if i in linear_args else a
                    for i, a in enumerate(args)]
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
                return op(*cast)
        return kernel

    for device_type, key in (("cpu", "AutocastCPU"), ("cuda", "AutocastCUDA")):
        _autocast_lib.impl(op_name, make(device_type, key), key, with_keyset=True)


register_autocast("linear_cross_entropy")
