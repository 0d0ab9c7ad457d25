"""``lossjit.linear_cross_entropy``: the redispatch-safe public entry point."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function_variadic

from . import _ops


_LSE_GRAD_MESSAGE = (
    "lossjit: with fused_backward=True the gradients are computed in the forward, "
    "before any gradient of the returned lse (log-sum-exp, e.g. a z-loss term) "
    "exists: use fused_backward=False (the default), where lse is differentiable, "
    "or detach lse (lse.detach()) to use it as a constant.")


@torch.library.custom_op("lossjit::lse_grad_unsupported", mutates_args=())
def _lse_grad_unsupported(grad: Tensor, like: Tensor) -> Tensor:
    """Raises when a non-zero gradient reaches lse; else zeros like `like`.
    An op (not a Python raise) so torch.compile can trace the backward and
    a zero tangent (lse returned but unused) passes."""
    if grad.numel() and bool((grad != 0).any()):
        raise RuntimeError(_LSE_GRAD_MESSAGE)
    return torch.zeros_like(like)


@_lse_grad_unsupported.register_fake
def _(grad, like):
    return torch.empty_like(like)


class _LseGuard(torch.autograd.Function):
    """Passes lse through and makes differentiating through it an error.

    For the fused forward+backward (and the distributed op): their gradients
    are formed before lse has one. Returning lse as a plain non-differentiable
    tensor would let `loss + f(lse)` drop the f(lse) term from the gradient
    without a word, so lse is tied to the inputs and a non-zero gradient
    reaching it raises instead. The default path's lse is differentiable.
    """

    @staticmethod
    def forward(ctx, lse, first, *others):
        ctx.save_for_backward(first)
        ctx.others = len(others)
        return lse.clone()

    @staticmethod
    def backward(ctx, grad):
        (first,) = ctx.saved_tensors
        return (None, torch.ops.lossjit.lse_grad_unsupported(grad, first)) + \
            (None,) * ctx.others


def guard_lse(lse: Tensor, *inputs: Optional[Tensor]) -> Tensor:
    tied = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not tied or not torch.is_grad_enabled():
        return lse
    return _LseGuard.apply(lse, *tied)


def _use_fused_backward(hidden: Tensor, weight: Tensor, bias: Optional[Tensor],
                        reduction: str, graph: str) -> bool:
    """Whether the opt-in one-pass forward+backward applies: the preset graph,
    reduction mean or sum, grad mode on and some input requiring grad."""
    return (not graph and reduction in ("mean", "sum") and torch.is_grad_enabled()
            and any(t is not None and t.requires_grad for t in (hidden, weight, bias)))


def _autocast(hidden: Tensor, weight: Tensor, bias: Optional[Tensor]):
    """What the forward op's autocast kernel does (F.linear's rule), done
    before the autograd Function so the casts get their own gradients."""
    device_type = hidden.device.type
    if device_type not in ("cpu", "cuda") or not torch.is_autocast_enabled(device_type):
        return hidden, weight, bias
    dtype = torch.get_autocast_dtype(device_type)

    def cast(t: Optional[Tensor]) -> Optional[Tensor]:
        if t is None or not t.is_floating_point() or t.dtype == torch.float64 \
                or t.device.type != device_type:
            return t
        return t.to(dtype)

    return cast(hidden), cast(weight), cast(bias)


def _fused(hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor],
           ignore_index: int, reduction: str, return_lse: bool, graph: str,
           logit_scale: float = 1.0, softcap: float = 0.0, fused_backward: bool = False):
    _ops.check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    _ops.check_logit_transforms(logit_scale, softcap)
    lead = hidden.shape[:-1]
    flat = hidden.dim() != 2
    if flat:
        hidden = hidden.reshape(-1, hidden.shape[-1])
        target = target.reshape(-1)
    use_fused = fused_backward and _use_fused_backward(hidden, weight, bias, reduction, graph)
    if use_fused:
        hidden, weight, bias = _autocast(hidden, weight, bias)
        loss, lse = _ops.FusedLinearCrossEntropy.apply(
            hidden, weight, target, bias, ignore_index, reduction, float(logit_scale),
            float(softcap))
    else:
        # The logit transforms only when set: the plain call stays the op's
        # 7-argument form.
        transforms = () if logit_scale == 1.0 and softcap == 0.0 else (logit_scale, softcap)
        loss, lse = torch.ops.lossjit.linear_cross_entropy(
            hidden, weight, target, bias, ignore_index, reduction, graph, *transforms)
    if flat:
        lse = lse.view(lead)
        if reduction == "none":
            loss = loss.view(lead)
    if return_lse:
        # The default path's lse is differentiable; the fused path's is
        # guarded (its gradients were formed before lse had one).
        if use_fused:
            return loss, guard_lse(lse, hidden, weight, bias)
        return loss, lse
    return loss


def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor,
                         bias: Optional[Tensor] = None, *, ignore_index: int = -100,
                         reduction: str = "mean", return_lse: bool = False,
                         logit_scale: float = 1.0, softcap: Optional[float] = None,
                         fused_backward: bool = False):
    """Cross-entropy of the linear layer ``hidden @ weight.T + bias`` at `target`,
    without materializing the [tokens, vocabulary] logits.

    Same result as ``F.cross_entropy(F.linear(hidden, weight, bias).float(),
    target, ignore_index=ignore_index, reduction=reduction)`` (with the logit
    transforms below applied to those logits) computed in
    float32 from the stored (float16, bfloat16 or float32) inputs, and bitwise
    deterministic: reductions run in a fixed order, never with atomics.

    Args:
        hidden: [..., D] float16, bfloat16 or float32 (CPU or CUDA).
        weight: [V, D], same dtype and device.
        target: [...] (hidden's leading dims) int64 or int32 class indices.
        bias: optional [V], same dtype.
        ignore_index: rows with this target contribute 0 and are not counted.
        reduction: 'mean' (over counted rows; NaN when none count), 'sum' or
            'none' (a float32 loss per row, shaped like target).
        logit_scale: multiply the logits by this number (a temperature
            ``1 / T``, a muP output multiplier), exactly: in float32 inside the
            kernel, never folded into ``hidden``.
        softcap: tanh soft-capping (Gemma 2 style) of the (scaled) logits,
            ``softcap * tanh(logits / softcap)``; a positive number, or None
            for none. The scale applies first: the logits are
            ``softcap * tanh(logit_scale * (hidden @ weight.T + bias) / softcap)``.
        return_lse: also return the float32 log-sum-exp of each row's logits,
            shaped like target. It is differentiable (∂lse/∂logits = softmax),
            so a z-loss ``1e-4 * lse.square().mean()`` is plain torch on it;
            the backward kernel takes its gradient in the same pass. With
            fused_backward=True (gradients formed in the forward)
            differentiating through it raises an error instead.
        fused_backward: opt-in. With reduction 'mean' or 'sum', grad mode on
            and some input requiring grad, compute the loss and the gradients
            (of grad_loss = 1) in one pass over the logits in the forward
            (6·N·D·V flops in all instead of 2 + 6) and keep them until the
            backward, which only scales them by the incoming grad_output. Only
            the gradients of inputs that require grad are computed; they are
            held from the forward on (memory like hidden, weight and bias).
            Otherwise (reduction 'none', no grad needed) the default path runs.

    Out-of-range targets raise IndexError before any kernel runs on CPU; on
    CUDA (no host sync) such a row's loss is NaN (and so are the gradients it
    reaches); the kernels compare labels with column indices and never read
    outside the inputs.

    Returns:
        loss (float32), or (loss, lse) with return_lse=True.
    """
    # First statement, before touching any attribute of the inputs: a tensor
    # subclass or mode overriding this function gets it exactly once.
    if has_torch_function_variadic(hidden, weight, target, bias):
        return handle_torch_function(
            linear_cross_entropy, (hidden, weight, target, bias), hidden, weight, target,
            bias=bias, ignore_index=ignore_index, reduction=reduction,
            return_lse=return_lse, logit_scale=logit_scale, softcap=softcap,
            **({"fused_backward": True} if fused_backward else {}))
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(
            softcap, (int, float, torch.SymInt, torch.SymFloat)) or not softcap > 0):
        raise ValueError(f"lossjit: softcap must be a positive number or None, got {softcap!r}")
    if not isinstance(fused_backward, bool):
        raise TypeError(f"lossjit: fused_backward must be a bool, got "
                        f"{type(fused_backward).__name__}")
    return _fused(hidden, weight, target, bias, ignore_index, reduction, return_lse, "",
                  logit_scale, 0.0 if softcap is None else softcap, fused_backward)
