"""``lossjit.LinearCrossEntropyLoss``: the module form of the fused loss."""

from __future__ import annotations

from typing import Optional

from torch import Tensor, nn

from .functional import linear_cross_entropy


class LinearCrossEntropyLoss(nn.Module):
    """``loss = LinearCrossEntropyLoss(...)(input, linear_weight, target, linear_bias=None)``.

    The loss of an output projection (language-model head) without the
    [tokens, vocabulary] logits; see :func:`lossjit.linear_cross_entropy` for
    shapes, dtypes and semantics. Like ``nn.CrossEntropyLoss`` it holds only
    options (and the class weights, as a buffer): the projection's weight
    (and bias) are passed in, so the module that owns them (e.g. ``lm_head``)
    stays as it is.
    """

    def __init__(self, ignore_index: int = -100, reduction: str = "mean",
                 return_lse: bool = False, logit_scale: float = 1.0,
                 softcap: Optional[float] = None, fused_backward: bool = False, *,
                 weight: Optional[Tensor] = None, label_smoothing: float = 0.0,
                 filter_ignored: bool = False) -> None:
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(
                f"lossjit: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
        self.register_buffer("weight", weight)
        self.label_smoothing = label_smoothing
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.return_lse = return_lse
        self.logit_scale = logit_scale
        self.softcap = softcap
        self.fused_backward = fused_backward
        self.filter_ignored = filter_ignored

    def forward(self, input: Tensor, linear_weight: Tensor, target: Tensor,
                linear_bias: Optional[Tensor] = None):
        return linear_cross_entropy(input, linear_weight, target, linear_bias,
                                    weight=self.weight, label_smoothing=self.label_smoothing,
                                    ignore_index=self.ignore_index,
                                    reduction=self.reduction, return_lse=self.return_lse,
                                    logit_scale=self.logit_scale, softcap=self.softcap,
                                    fused_backward=self.fused_backward,
                                    filter_ignored=self.filter_ignored)

    def extra_repr(self) -> str:
        extra = ""
        if self.label_smoothing:
            extra += f", label_smoothing={self.label_smoothing!r}"
        if self.logit_scale != 1.0:
            extra += f", logit_scale={self.logit_scale!r}"
        if self.softcap is not None:
            extra += f", softcap={self.softcap!r}"
        if self.fused_backward:
            extra += ", fused_backward=True"
        if self.filter_ignored:
            extra += ", filter_ignored=True"
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"return_lse={self.return_lse}{extra}")
