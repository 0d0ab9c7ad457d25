"""``lossjit.linear_cross_entropy``: the redispatch-safe public entry point."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function_variadic

from . import _ops


_LSE_GRAD_MESSAGE = (
    "lossjit: gradients through the returned lse (log-sum-exp) are not supported "
    "yet (e.g. a z-loss term); only the loss is differentiable. Detach lse "
    "(lse.detach()) to use it as a constant.")


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

    The kernels have no gradient for lse (only for the loss). Returning lse
    as a plain non-differentiable tensor would let `loss + f(lse)` drop the
    f(lse) term from the gradient without a word, so lse is tied to the inputs
    and a non-zero gradient reaching it raises instead.
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


def _fused(hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor],
           ignore_index: int, reduction: str, return_lse: bool, graph: str,
           logit_scale: float = 1.0, softcap: float = 0.0):
    _ops.check_inputs(hidden, weight, target, bias, ignore_index, reduction)
    _ops.check_logit_transforms(logit_scale, softcap)
    lead = hidden.shape[:-1]
    flat = hidden.dim() != 2
    if flat:
        hidden = hidden.reshape(-1, hidden.shape[-1])
        target = target.reshape(-1)
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
        return loss, guard_lse(lse, hidden, weight, bias)
    return loss


def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor,
                         bias: Optional[Tensor] = None, *, ignore_index: int = -100,
                         reduction: str = "mean", return_lse: bool = False,
                         logit_scale: float = 1.0, softcap: Optional[float] = None):
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
            shaped like target. It carries no gradient: differentiating through
            it raises an error.

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
            return_lse=return_lse, logit_scale=logit_scale, softcap=softcap)
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(
            softcap, (int, float, torch.SymInt, torch.SymFloat)) or not softcap > 0):
        raise ValueError(f"lossjit: softcap must be a positive number or None, got {softcap!r}")
    return _fused(hidden, weight, target, bias, ignore_index, reduction, return_lse, "",
                  logit_scale, 0.0 if softcap is None else softcap)
