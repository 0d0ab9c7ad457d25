"""``lossjit.linear_cross_entropy``: the redispatch-safe public entry point."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake
from torch.overrides import handle_torch_function, has_torch_function_variadic

from . import _kernels, _ops, _reduce


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
    # (Not while a CUDA graph is captured: the check waits for the host,
    # which a capture forbids; the captured step then passes lse's gradient
    # over, as the eager steps before it were checked.)
    if grad.numel() and not _capturing(grad) and bool((grad != 0).any()):
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
    return tuple(_ops.autocast_cast(t, dtype, device_type) for t in (hidden, weight, bias))


def _fused(hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor],
           ignore_index: int, reduction: str, return_lse: bool, graph: str,
           logit_scale: float = 1.0, softcap: float = 0.0, fused_backward: bool = False,
           names: Tuple[str, str, str, str] = ("hidden", "weight", "target", "bias")):
    _ops.check_inputs(hidden, weight, target, bias, ignore_index, reduction, names)
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


class _GatherRows(torch.autograd.Function):
    """rows = flat[index] for distinct indices, whose gradient goes back to
    those rows and zeros elsewhere: index_select forward, index_copy_
    backward — one writer per element, no atomics, the same bits every run
    (index_select's own backward adds with index_add_)."""

    @staticmethod
    def forward(ctx, flat, index):
        ctx.save_for_backward(index)
        ctx.rows = flat.shape[0]
        return flat.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        full = grad.new_zeros((ctx.rows,) + tuple(grad.shape[1:]))
        return full.index_copy_(0, index, grad), None


def _capturing(input: Tensor) -> bool:
    """Whether `input` lives on a CUDA stream being captured into a graph,
    where the host cannot wait for the labels."""
    return input.is_cuda and _kernels.capturing(input.device.index)


def _counted_rows(input: Tensor, target: Tensor, ignore_index: int) -> Optional[Tensor]:
    """The flat indices (in order) of the rows whose target is not
    ignore_index, or None where dropping rows changes nothing or cannot be
    done: none is ignored, the tensors carry no data (meta or fake tensors:
    the outputs' shapes are the same either way), or a CUDA graph is being
    captured (every row runs, as without the filter: counting them needs a
    host sync, which a capture forbids and which would invalidate it). On
    CUDA this waits for the labels (a host sync: the row count sizes the
    kernels).
    Traced by torch.compile the count is a data-dependent size (an unbacked
    symbol): nothing may branch on it, so the rows are gathered even when
    none is ignored."""
    if _capturing(input):
        return None
    counted = target.reshape(-1) != ignore_index
    if torch.compiler.is_compiling():
        return counted.nonzero().squeeze(1)
    if input.device.type == "meta" or is_fake(input) or is_fake(target):
        return None
    index = counted.nonzero().squeeze(1)
    return None if index.numel() == target.numel() else index


def _without_ignored(call, target: Tensor, ignore_index: int, reduction: str, *inputs: Tensor):
    """call(*input rows, target rows) on the counted rows only (`inputs`:
    [..., D_i] tensors with target's leading dims), the loss as on all of
    them: a dropped row contributes 0 and is not counted, so 'mean' and
    'sum' are the same sums over fewer terms (fewer terms can round
    differently from the unfiltered call, by the same bits each run), and
    'none' puts the counted rows' losses back among zeros. The inputs'
    gradients are zero on the dropped rows, as they are without the
    filter."""
    index = _counted_rows(inputs[0], target, ignore_index)
    if index is None:
        return call(*inputs, target)
    rows = [_GatherRows.apply(t.reshape(-1, t.shape[-1]), index) for t in inputs]
    loss = call(*rows, target.reshape(-1).index_select(0, index))
    if reduction != "none":
        return loss
    full = loss.new_zeros(target.numel()).index_copy(0, index, loss)
    return full.view(target.shape)


def _check_filter(filter_ignored, return_lse: bool = False) -> None:
    if not isinstance(filter_ignored, bool):
        raise TypeError(f"lossjit: filter_ignored must be a bool, got "
                        f"{type(filter_ignored).__name__}")
    if filter_ignored and return_lse:
        raise ValueError("lossjit: filter_ignored=True drops the ignored rows, whose lse "
                         "return_lse=True asks for; pass one of them")


def _check_class_weights(weight: Optional[Tensor], input: Tensor, v: int) -> None:
    if weight is None:
        return
    if not isinstance(weight, Tensor):
        raise TypeError(f"lossjit: weight (the class weights) must be a Tensor or None, got "
                        f"{type(weight).__name__}")
    if not weight.is_floating_point():
        raise TypeError(f"lossjit: weight (the class weights) must be floating point, got "
                        f"{_ops._name(weight.dtype)}")
    if weight.dim() != 1 or weight.shape[0] != v:
        hint = (" (the linear layer's weight is linear_weight, the second argument)"
                if weight.dim() == 2 else "")
        raise ValueError(f"lossjit: weight (the class weights) must have shape [V] = [{v}], "
                         f"got {list(weight.shape)}{hint}")
    if weight.device != input.device:
        raise RuntimeError(f"lossjit: expected all tensors on one device, but input is on "
                           f"{input.device} and weight is on {weight.device}")


def _check_options(options) -> None:
    """None or torch's LinearCrossEntropyOptions (where torch has it)."""
    if options is None:
        return
    expected = getattr(torch.nn, "LinearCrossEntropyOptions", None)
    if expected is None or not isinstance(options, expected):
        raise TypeError(f"lossjit: options must be None or a torch.nn.LinearCrossEntropyOptions, "
                        f"got {type(options).__name__}")


def _check_label_smoothing(label_smoothing: float) -> None:
    if isinstance(label_smoothing, bool) or not isinstance(
            label_smoothing, (int, float, torch.SymInt, torch.SymFloat)):
        raise TypeError(f"lossjit: label_smoothing must be a number, got "
                        f"{type(label_smoothing).__name__}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"lossjit: label_smoothing must be in [0, 1], got {label_smoothing!r}")


def _weighted_smoothed(input: Tensor, linear_weight: Tensor, target: Tensor,
                       linear_bias: Optional[Tensor], weight: Optional[Tensor],
                       ignore_index: int, reduction: str, label_smoothing: float,
                       return_lse: bool, logit_scale: float, softcap: float):
    """Class weights and label smoothing with PyTorch's exact semantics:
    per counted row (1 − ε)·w_y·(lse − z_y) + (ε / V)·(Σ_j w_j·lse − Σ_j w_j z_j),
    and 'mean' divides both terms by Σ w_y over the counted rows (the row
    count without weights). The kernel gives the row statistics lse, z_y
    and Σ_j w_j z_j (loss.vocab_reduce); the rest is torch, whose autograd
    hands the derived backward one adjoint per statistic."""
    _ops.check_inputs(input, linear_weight, target, linear_bias, ignore_index, reduction,
                      _ops.PUBLIC_NAMES)
    _ops.check_logit_transforms(logit_scale, softcap)
    v = linear_weight.shape[0]
    lead = input.shape[:-1]
    hidden = input.reshape(-1, input.shape[-1])
    labels = target.reshape(-1)
    hidden, linear_weight, linear_bias = _autocast(hidden, linear_weight, linear_bias)
    compute = _kernels.compute_dtype(hidden.dtype)
    class_weights = None if weight is None else weight.detach().to(compute)
    smooth = label_smoothing > 0
    statistics = ("lse", "label_logit") + (("logit_sum",) if smooth else ())
    stats = _reduce.vocab_reduce(
        hidden, linear_weight, statistics, target=labels, bias=linear_bias,
        class_weights=class_weights if smooth else None, ignore_index=ignore_index,
        logit_scale=logit_scale, softcap=softcap)
    lse, label_logit = stats[0], stats[1]
    counted = labels != ignore_index
    if class_weights is None:
        row_weight = counted.to(compute)
    else:
        # Only labels in [0, V) index the weights: on CUDA the kernel gives a
        # label out of range a NaN row (on CPU it raised first), and an index
        # out of range would be a device-side assert that poisons the
        # context, a negative one another class's weight.
        safe = torch.where(counted & (labels >= 0) & (labels < v), labels,
                           torch.zeros_like(labels))
        row_weight = torch.where(counted, class_weights[safe], 0.0)
    nll = torch.where(counted, row_weight * (lse - label_logit), 0.0)
    rows = nll
    if smooth:
        total = float(v) if class_weights is None else class_weights.sum()
        smoothed = torch.where(counted, total * lse - stats[2], 0.0)
        rows = (1.0 - label_smoothing) * nll + (label_smoothing / v) * smoothed
    if reduction == "none":
        loss = rows.view(lead)
    elif reduction == "sum":
        loss = rows.sum()
    else:
        loss = rows.sum() / row_weight.sum()
    if return_lse:
        return loss, lse.view(lead)
    return loss


def _probability_targets(input: Tensor, linear_weight: Tensor, target: Tensor,
                         linear_bias: Optional[Tensor], weight: Optional[Tensor],
                         ignore_index: int, reduction: str, label_smoothing: float,
                         return_lse: bool, logit_scale: float, softcap: float):
    """Class-probability targets t [..., V], PyTorch's semantics: per row
    −Σ_j w_j t'_j log p_j with t' = (1 − ε)·t + ε/V, 'mean' over the rows.
    That is lse·Σ_j w_j t'_j − Σ_j w_j t'_j z_j: the kernel gives lse,
    Σ_j w_j t_j z_j (target_logit_sum, reading t in place) and, with
    smoothing, Σ_j w_j z_j; Σ_j w_j t_j is a matrix-vector product in torch."""
    if ignore_index >= 0:
        raise ValueError(f"lossjit: ignore_index is not supported with class-probability "
                         f"targets (got {ignore_index}), as in PyTorch")
    if reduction not in _ops.REDUCTIONS:
        raise ValueError(f"lossjit: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if target.requires_grad and torch.is_grad_enabled():
        raise RuntimeError("lossjit: gradients with respect to class-probability targets are "
                           "not computed; pass target.detach() (or use F.cross_entropy)")
    # (The shape, dtype and device checks of the index form, on an index
    # tensor of the right shape: nothing is read from it.)
    rows_like = input.new_empty(input.shape[:-1], dtype=torch.long)
    _ops.check_inputs(input, linear_weight, rows_like, linear_bias, -100, reduction,
                      _ops.PUBLIC_NAMES)
    _ops.check_logit_transforms(logit_scale, softcap)
    if target.device != input.device:
        raise RuntimeError(f"lossjit: expected all tensors on one device, but input is on "
                           f"{input.device} and target is on {target.device}")
    v = linear_weight.shape[0]
    lead = input.shape[:-1]
    hidden = input.reshape(-1, input.shape[-1])
    probs = target.reshape(-1, v)
    hidden, linear_weight, linear_bias = _autocast(hidden, linear_weight, linear_bias)
    compute = _kernels.compute_dtype(hidden.dtype)
    if probs.dtype not in (compute, hidden.dtype):
        probs = probs.to(compute)
    class_weights = None if weight is None else weight.detach().to(compute)
    smooth = label_smoothing > 0
    statistics = ("lse", "target_logit_sum") + (("logit_sum",) if smooth else ())
    stats = _reduce.vocab_reduce(hidden, linear_weight, statistics, bias=linear_bias,
                                 class_weights=class_weights, logit_scale=logit_scale,
                                 softcap=softcap, targets=probs)
    lse, weighted_sum = stats[0], stats[1]
    mass = probs.to(compute) @ class_weights if class_weights is not None \
        else probs.to(compute).sum(-1)
    rows = lse * mass - weighted_sum
    if smooth:
        total = float(v) if class_weights is None else class_weights.sum()
        rows = (1.0 - label_smoothing) * rows + (label_smoothing / v) * (total * lse - stats[2])
    if reduction == "none":
        loss = rows.view(lead)
    elif reduction == "sum":
        loss = rows.sum()
    else:
        loss = rows.sum() / rows.numel() if rows.numel() else rows.sum() * float("nan")
    if return_lse:
        return loss, lse.view(lead)
    return loss


def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor,
                         linear_bias: Optional[Tensor] = None, *,
                         weight: Optional[Tensor] = None, reduction: str = "mean",
                         ignore_index: Optional[int] = -100, label_smoothing: float = 0.0,
                         bias: Optional[Tensor] = None, return_lse: bool = False,
                         logit_scale: float = 1.0, softcap: Optional[float] = None,
                         fused_backward: bool = False, filter_ignored: bool = False,
                         options=None):
    """Cross-entropy of the linear layer ``input @ linear_weight.T + linear_bias``
    at `target`, without materializing the [tokens, vocabulary] logits: a
    drop-in for ``torch.nn.functional.linear_cross_entropy``.

    Same result as ``F.cross_entropy(F.linear(input, linear_weight,
    linear_bias).float(), target, weight=weight, ignore_index=ignore_index,
    reduction=reduction, label_smoothing=label_smoothing)`` (with the logit
    transforms below applied to those logits) computed in float32 from the
    stored (float16, bfloat16 or float32) inputs — in float64 from float64
    inputs (gradcheck and torch's OpInfo samples run against it) — and
    bitwise deterministic: reductions run in a fixed order, never with
    atomics.

    Args:
        input: [..., D] float16, bfloat16, float32 or float64 (CPU or CUDA).
        linear_weight: [V, D], same dtype and device.
        target: [...] (input's leading dims) int64 or int32 class indices, or
            class probabilities [..., V] (floating point, as in PyTorch: no
            ignore_index, 'mean' over the rows; no gradient flows to them).
        linear_bias: optional [V], same dtype. ``bias=`` and a positional
            fourth argument are accepted for it too (the names of lossjit
            0.1).
        weight: optional [V] class weights (PyTorch's meaning): a counted
            row's loss is multiplied by the weight of its target class, and
            'mean' divides by the sum of those weights.
        ignore_index: rows with this target contribute 0 and are not counted
            (None means -100, as in PyTorch).
        reduction: 'mean' (over counted rows, weighted by the class weights;
            NaN when none count), 'sum' or 'none' (a loss per row, shaped
            like target; float32, or float64 for float64 input).
        label_smoothing: ε in [0, 1]: the target mixes with the uniform
            distribution over the V classes, exactly as in PyTorch (with class
            weights, each class's term is weighted by its own weight, and the
            'mean' normalizer is the same as the unsmoothed loss's).
        logit_scale: multiply the logits by this number (a temperature
            ``1 / T``, a muP output multiplier), exactly: in float32 inside the
            kernel, never folded into ``input``.
        softcap: tanh soft-capping (Gemma 2 style) of the (scaled) logits,
            ``softcap * tanh(logits / softcap)``; a positive number, or None
            for none. The scale applies first.
        return_lse: also return the float32 log-sum-exp of each row's logits,
            shaped like target. It is differentiable (∂lse/∂logits = softmax),
            so a z-loss ``1e-4 * lse.square().mean()`` is plain torch on it;
            the backward kernel takes its gradient in the same pass. With
            fused_backward=True (gradients formed in the forward)
            differentiating through it raises an error instead.
        fused_backward: opt-in. With reduction 'mean' or 'sum', grad mode on,
            some input requiring grad and neither class weights nor label
            smoothing, compute the loss and the gradients (of grad_loss = 1)
            in one pass over the logits in the forward (6·N·D·V flops in all
            instead of 2 + 6) and keep them until the backward, which only
            scales them by the incoming grad_output. Otherwise the default
            path runs.
        filter_ignored: opt-in. Drop the rows whose target is ignore_index
            before any kernel runs, so that the products of the forward and
            the backward (or the fused op's) run over the counted rows only:
            with half the tokens masked (padding, prompts in fine-tuning)
            the loss and its gradients cost about half. The loss is the same
            sum over fewer terms (its last bits may differ from the
            unfiltered call's, deterministically), 'none' puts zeros back in
            the dropped rows, and the dropped rows' input gradient is zero,
            as without the filter. Index targets only (class-probability
            targets ignore no row); not with return_lse (the dropped rows
            have no lse). On CUDA it waits for the targets once (a host
            sync, as ``labels[labels != ignore_index]`` does); inside a
            CUDA graph capture, which forbids that, every row runs (the
            unfiltered call's result).
        options: accepted for drop-in compatibility with torch's op: None
            or a ``torch.nn.LinearCrossEntropyOptions``. Its fields tune
            torch's own chunked path (chunk sizes, which intermediates stay
            in the input dtype); lossjit never materializes the logits and
            always computes in float32 (float64), so none of them changes
            its result.

    Out-of-range targets raise IndexError before any kernel runs on CPU; on
    CUDA (no host sync) such a row's loss is NaN (and so are the gradients it
    reaches); the kernels compare labels with column indices and never read
    outside the inputs. What PyTorch accepts and lossjit does not yet
    (K-dimensional losses) is an error saying so.

    Returns:
        loss (float32; float64 for float64 input), or (loss, lse) with
        return_lse=True.
    """
    # First statement, before touching any attribute of the inputs: a tensor
    # subclass or mode overriding this function gets it exactly once.
    if has_torch_function_variadic(input, linear_weight, target, linear_bias, weight, bias):
        kwargs = dict(linear_bias=linear_bias, weight=weight, reduction=reduction,
                      ignore_index=ignore_index, label_smoothing=label_smoothing,
                      return_lse=return_lse, logit_scale=logit_scale, softcap=softcap)
        if bias is not None:
            kwargs["bias"] = bias
        if fused_backward:
            kwargs["fused_backward"] = True
        if filter_ignored:
            kwargs["filter_ignored"] = True
        if options is not None:
            kwargs["options"] = options
        return handle_torch_function(
            linear_cross_entropy, (input, linear_weight, target, linear_bias, weight, bias),
            input, linear_weight, target, **kwargs)
    if bias is not None:
        if linear_bias is not None:
            raise TypeError("lossjit: linear_bias given twice (as linear_bias and as its "
                            "alias bias); pass one")
        linear_bias = bias
    if ignore_index is None:
        ignore_index = -100
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(
            softcap, (int, float, torch.SymInt, torch.SymFloat)) or not softcap > 0):
        raise ValueError(f"lossjit: softcap must be a positive number or None, got {softcap!r}")
    if not isinstance(fused_backward, bool):
        raise TypeError(f"lossjit: fused_backward must be a bool, got "
                        f"{type(fused_backward).__name__}")
    _check_filter(filter_ignored, return_lse)
    _check_options(options)
    _check_label_smoothing(label_smoothing)
    if isinstance(linear_weight, Tensor):
        _check_class_weights(weight, input, linear_weight.shape[0] if linear_weight.dim() else 0)
    cap = 0.0 if softcap is None else softcap
    if isinstance(target, Tensor) and target.is_floating_point() \
            and isinstance(input, Tensor) and isinstance(linear_weight, Tensor) \
            and linear_weight.dim() >= 1 and tuple(target.shape) == tuple(
                input.shape[:-1]) + tuple(linear_weight.shape[:1]):
        return _probability_targets(input, linear_weight, target, linear_bias, weight,
                                    ignore_index, reduction, float(label_smoothing),
                                    return_lse, logit_scale, cap)

    def call(rows: Tensor, labels: Tensor):
        if weight is not None or label_smoothing > 0:
            return _weighted_smoothed(rows, linear_weight, labels, linear_bias, weight,
                                      ignore_index, reduction, float(label_smoothing),
                                      return_lse, logit_scale, cap)
        return _fused(rows, linear_weight, labels, linear_bias, ignore_index, reduction,
                      return_lse, "", logit_scale, cap, fused_backward, _ops.PUBLIC_NAMES)

    if not filter_ignored:
        return call(input, target)
    # The checks first, on the arguments as given: filtering reshapes them.
    _ops.check_inputs(input, linear_weight, target, linear_bias, ignore_index, reduction,
                      _ops.PUBLIC_NAMES)
    return _without_ignored(call, target, ignore_index, reduction, input)


def linear_log_prob(hidden: Tensor, weight: Tensor, tokens: Tensor, *,
                    temperature: float = 1.0, return_entropy: bool = False):
    """Per-token log-probabilities of `tokens` under the linear layer
    ``hidden @ weight.T`` at a sampling temperature, without materializing
    the [tokens, vocabulary] logits (RL: GRPO/PPO token log-probs).

    ``log_softmax(F.linear(hidden, weight).float() / temperature, -1)
    .gather(-1, tokens[..., None])[..., 0]``, and with return_entropy=True
    also the entropy ``-(p * log p).sum(-1)`` of that distribution, both
    float32, shaped like tokens and differentiable (their backward is one
    pass over recomputed logit tiles, formed from the statistics' adjoints).

    Args:
        hidden: [..., D] float16, bfloat16 or float32.
        weight: [V, D], same dtype and device.
        tokens: [...] (hidden's leading dims) int64 or int32 indices in [0, V).
        temperature: positive and finite; the logits are divided by it.
        return_entropy: also return the entropy per token.

    Returns:
        logp, or (logp, entropy).
    """
    if has_torch_function_variadic(hidden, weight, tokens):
        return handle_torch_function(linear_log_prob, (hidden, weight, tokens), hidden, weight,
                                     tokens, temperature=temperature,
                                     return_entropy=return_entropy)
    if isinstance(temperature, bool) or not isinstance(
            temperature, (int, float, torch.SymInt, torch.SymFloat)):
        raise TypeError(f"lossjit: temperature must be a number, got "
                        f"{type(temperature).__name__}")
    if not 0 < temperature < math.inf:
        raise ValueError(f"lossjit: temperature must be positive and finite, got "
                         f"{temperature!r}")
    if not isinstance(return_entropy, bool):
        raise TypeError(f"lossjit: return_entropy must be a bool, got "
                        f"{type(return_entropy).__name__}")
    # The row rule's ignore_index is set to a value no token can take, so
    # every token is a class index (checked on CPU before the kernel runs).
    _ops.check_inputs(hidden, weight, tokens, None, _NO_TOKEN, "none",
                      ("hidden", "weight", "tokens", "bias"))
    # (Not on fake tensors or while compiling: the kernel checks every label
    # before it runs in any case.)
    # (is_compiling first: dynamo cannot trace is_fake, and fullgraph would
    # fail on it.)
    if not torch.compiler.is_compiling() and tokens.device.type == "cpu" and tokens.numel() \
            and not is_fake(tokens):
        v = weight.shape[0]
        bad = (tokens < 0) | (tokens >= v)
        if bool(bad.any()):
            raise IndexError(f"lossjit: tokens must be in [0, V) = [0, {v}); "
                             f"{int(bad.sum())} are not (e.g. {int(tokens[bad][0])})")
    lead = hidden.shape[:-1]
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_hidden, weight, _ = _autocast(flat_hidden, weight, None)
    statistics = ("lse", "label_logit") + (("entropy",) if return_entropy else ())
    stats = _reduce.vocab_reduce(flat_hidden, weight, statistics, target=tokens.reshape(-1),
                                 ignore_index=_NO_TOKEN, logit_scale=1.0 / temperature)
    logp = (stats[1] - stats[0]).view(lead)
    if return_entropy:
        return logp, stats[2].view(lead)
    return logp


#: An ignore_index no class index equals (tokens are never ignored).
_NO_TOKEN = -(1 << 63)


def linear_topk_distill(hidden: Tensor, weight: Tensor, teacher_indices: Tensor,
                        teacher_logprobs: Tensor, *, temperature: float = 1.0,
                        ignore_index: int = -100, reduction: str = "mean"):
    """Distillation from a teacher's stored top-K log-probabilities: the KL
    divergence of the student's distribution from the teacher's over the
    teacher's support, without the [tokens, vocabulary] logits (the teacher
    never enters memory, only (indices, log-probs) per token).

    Per row, with q_k = exp(teacher_logprobs[k]) and the student's
    ``log p = log_softmax(hidden @ weight.T / temperature)``:
    ``Σ_k q_k (log q_k − log p[teacher_indices[k]])`` over the entries whose
    index is not ignore_index (the teacher's mass outside its top-K is not
    renormalized: Σ_k q_k may be below 1). A row whose entries are all
    ignored contributes 0 and is not counted.

    Args:
        hidden: [..., D] float16, bfloat16 or float32.
        weight: [V, D], same dtype and device.
        teacher_indices: [..., K] int64 or int32 class indices (ignore_index
            for padding entries).
        teacher_logprobs: [..., K] float, the teacher's log-probabilities at
            those indices (no gradient flows to them).
        temperature: the student's logits are divided by it.
        reduction: 'mean' over counted rows, 'sum', or 'none' (per row,
            shaped like hidden's leading dims).

    Returns:
        the loss (float32). Its gradient is formed from the statistics'
        adjoints: (Σ_k q_k)·p_j − Σ_k q_k [j = index_k] per logit, in one
        pass over recomputed logit tiles.
    """
    if has_torch_function_variadic(hidden, weight, teacher_indices, teacher_logprobs):
        return handle_torch_function(
            linear_topk_distill, (hidden, weight, teacher_indices, teacher_logprobs), hidden,
            weight, teacher_indices, teacher_logprobs, temperature=temperature,
            ignore_index=ignore_index, reduction=reduction)
    if isinstance(temperature, bool) or not isinstance(
            temperature, (int, float, torch.SymInt, torch.SymFloat)) or \
            not 0 < temperature < math.inf:
        raise ValueError(f"lossjit: temperature must be positive and finite, got "
                         f"{temperature!r}")
    for name, value in (("teacher_indices", teacher_indices),
                        ("teacher_logprobs", teacher_logprobs)):
        if not isinstance(value, Tensor):
            raise TypeError(f"lossjit: {name} must be a Tensor, got {type(value).__name__}")
    if not isinstance(hidden, Tensor) or hidden.dim() < 2:
        raise ValueError("lossjit: hidden must be a tensor [..., D] with at least one "
                         "leading dim")
    lead = tuple(hidden.shape[:-1])
    if teacher_indices.dim() != len(lead) + 1 or tuple(teacher_indices.shape[:-1]) != lead \
            or teacher_indices.shape[-1] < 1:
        raise ValueError(f"lossjit: teacher_indices must have shape {list(lead)} + [K], got "
                         f"{list(teacher_indices.shape)}")
    if tuple(teacher_logprobs.shape) != tuple(teacher_indices.shape):
        raise ValueError(f"lossjit: teacher_logprobs must have the shape of teacher_indices "
                         f"{list(teacher_indices.shape)}, got {list(teacher_logprobs.shape)}")
    if not teacher_logprobs.is_floating_point():
        raise TypeError("lossjit: teacher_logprobs must be floating point")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"lossjit: reduction must be 'none', 'mean' or 'sum', got "
                         f"{reduction!r}")
    k = teacher_indices.shape[-1]
    flat_ids = teacher_indices.reshape(-1, k)
    _ops.check_inputs(hidden, weight, flat_ids[:, 0].reshape(lead), None, ignore_index, "none",
                      ("hidden", "weight", "teacher_indices", "bias"))
    if not torch.compiler.is_compiling() and flat_ids.device.type == "cpu" \
            and flat_ids.numel() and not is_fake(flat_ids):
        v = weight.shape[0]
        bad = ((flat_ids < 0) | (flat_ids >= v)) & (flat_ids != ignore_index)
        if bool(bad.any()):
            raise IndexError(f"lossjit: teacher_indices must be in [0, V) = [0, {v}) or "
                             f"ignore_index={ignore_index}; {int(bad.sum())} are not")
    flat_hidden, weight, _ = _autocast(hidden.reshape(-1, hidden.shape[-1]), weight, None)
    lse, picked = _reduce.vocab_reduce(flat_hidden, weight, ("lse", "label_logit"),
                                       target=flat_ids, ignore_index=ignore_index,
                                       logit_scale=1.0 / temperature)
    kept = flat_ids != ignore_index
    q_log = teacher_logprobs.reshape(-1, k).detach().to(torch.float32)
    q = torch.where(kept, q_log.exp(), 0.0)
    student = picked - lse[:, None]
    rows = (q * torch.where(kept, q_log - student, 0.0)).sum(-1)
    if reduction == "none":
        return rows.view(lead)
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / kept.any(-1).sum()


def linear_kl_div(student_hidden: Tensor, student_weight: Tensor, teacher_hidden: Tensor,
                  teacher_weight: Tensor, *, reverse: bool = False, temperature: float = 1.0,
                  target: Optional[Tensor] = None, ignore_index: int = -100,
                  reduction: str = "mean", student_bias: Optional[Tensor] = None,
                  teacher_bias: Optional[Tensor] = None, filter_ignored: bool = False):
    """The KL divergence between a teacher head's and the student head's
    token distributions, without the [tokens, vocabulary] logits of either.

    p = softmax(student_hidden @ student_weight.T / temperature) and
    q = softmax(teacher_hidden @ teacher_weight.T / temperature) per row
    (both heads at the same temperature, the Liger/TRL convention); the
    teacher may have its own hidden size. ``reverse=False`` is the forward
    KL(q‖p) = Σ q log(q/p) (distillation, Liger/TRL ``beta=0``),
    ``reverse=True`` the reverse KL(p‖q) (``beta=1``). Each is a difference
    of two row statistics of one sweep over both heads' logit tiles
    (cross-entropy and entropy); the teacher is never differentiated (its
    tensors must not require grad).

    Args:
        student_hidden: [..., D] float16, bfloat16 or float32.
        student_weight: [V, D], same dtype and device.
        teacher_hidden: [..., T], hidden's leading dims, same dtype.
        teacher_weight: [V, T], same dtype.
        target: optional [...] labels: rows equal to ignore_index are not
            counted (their divergence is 0).
        reduction: 'mean' over counted rows (the per-token mean), 'sum', or
            'none' (per row, shaped like the leading dims).
        filter_ignored: opt-in: both heads' products run on the counted
            rows only (see :func:`linear_cross_entropy`); nothing to drop
            without a target.

    Returns:
        the divergence (float32).
    """
    tensors = (student_hidden, student_weight, teacher_hidden, teacher_weight, target,
               student_bias, teacher_bias)
    if has_torch_function_variadic(*tensors):
        return handle_torch_function(
            linear_kl_div, tensors, student_hidden, student_weight, teacher_hidden,
            teacher_weight, reverse=reverse, temperature=temperature, target=target,
            ignore_index=ignore_index, reduction=reduction, student_bias=student_bias,
            teacher_bias=teacher_bias, **({"filter_ignored": True} if filter_ignored else {}))
    if not isinstance(reverse, bool):
        raise TypeError(f"lossjit: reverse must be a bool, got {type(reverse).__name__}")
    return _teacher_divergence(student_hidden, student_weight, teacher_hidden, teacher_weight,
                               1.0 if reverse else 0.0, temperature, target, ignore_index,
                               reduction, student_bias, teacher_bias, filter_ignored)


def linear_jsd(student_hidden: Tensor, student_weight: Tensor, teacher_hidden: Tensor,
               teacher_weight: Tensor, *, beta: float = 0.5, temperature: float = 1.0,
               target: Optional[Tensor] = None, ignore_index: int = -100,
               reduction: str = "mean", student_bias: Optional[Tensor] = None,
               teacher_bias: Optional[Tensor] = None, filter_ignored: bool = False):
    """The generalized Jensen-Shannon divergence between a teacher head's and
    the student head's token distributions (TRL's GKD and Liger's fused
    linear JSD convention), without the [tokens, vocabulary] logits of
    either.

    With p the student's and q the teacher's softmax at ``temperature`` and
    the mixture M = beta·q + (1 − beta)·p, the row divergence is
    beta·KL(q‖M) + (1 − beta)·KL(p‖M), summed over the vocabulary.
    ``beta=0`` is the forward KL(q‖p) and ``beta=1`` the reverse KL(p‖q)
    (as in TRL and Liger, and as :func:`linear_kl_div`); in between the
    kernel sweeps both heads twice: once for their log-sum-exps, once for
    the sums over M, which need the finished ones. The gradient is derived
    from the statistics (one sweep, as for every loss); the teacher is never
    differentiated (its tensors must not require grad).

    Args:
        student_hidden: [..., D] float16, bfloat16 or float32.
        student_weight: [V, D], same dtype and device.
        teacher_hidden: [..., T], hidden's leading dims, same dtype.
        teacher_weight: [V, T], same dtype.
        beta: the mixture weight in [0, 1].
        target: optional [...] labels: rows equal to ignore_index are not
            counted (their divergence is 0).
        reduction: 'mean' over counted rows (the per-token mean), 'sum', or
            'none' (per row, shaped like the leading dims).
        filter_ignored: opt-in: both heads' products run on the counted
            rows only (see :func:`linear_cross_entropy`); nothing to drop
            without a target.

    Returns:
        the divergence (float32).
    """
    tensors = (student_hidden, student_weight, teacher_hidden, teacher_weight, target,
               student_bias, teacher_bias)
    if has_torch_function_variadic(*tensors):
        return handle_torch_function(
            linear_jsd, tensors, student_hidden, student_weight, teacher_hidden,
            teacher_weight, beta=beta, temperature=temperature, target=target,
            ignore_index=ignore_index, reduction=reduction, student_bias=student_bias,
            teacher_bias=teacher_bias, **({"filter_ignored": True} if filter_ignored else {}))
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta <= 1.0:
        raise ValueError(f"lossjit: beta must be a number in [0, 1], got {beta!r}")
    return _teacher_divergence(student_hidden, student_weight, teacher_hidden, teacher_weight,
                               float(beta), temperature, target, ignore_index, reduction,
                               student_bias, teacher_bias, filter_ignored)


def _teacher_divergence(student_hidden: Tensor, student_weight: Tensor, teacher_hidden: Tensor,
                        teacher_weight: Tensor, beta: float, temperature: float,
                        target: Optional[Tensor], ignore_index: int, reduction: str,
                        student_bias: Optional[Tensor], teacher_bias: Optional[Tensor],
                        filter_ignored: bool = False):
    """β = 0: KL(q‖p) = cross_entropy − teacher_entropy; β = 1: KL(p‖q) =
    reverse_cross_entropy − entropy; else the jsd statistic. Then the row
    mask and the reduction; with `filter_ignored` all of it on the counted
    rows only."""
    _check_filter(filter_ignored)
    if isinstance(temperature, bool) or not isinstance(
            temperature, (int, float, torch.SymInt, torch.SymFloat)) or \
            not 0 < temperature < math.inf:
        raise ValueError(f"lossjit: temperature must be positive and finite, got "
                         f"{temperature!r}")
    if reduction not in _ops.REDUCTIONS:
        raise ValueError(f"lossjit: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    for name, value in (("student_hidden", student_hidden), ("student_weight", student_weight),
                        ("teacher_hidden", teacher_hidden), ("teacher_weight", teacher_weight)):
        if not isinstance(value, Tensor):
            raise TypeError(f"lossjit: {name} must be a Tensor, got {type(value).__name__}")
    for name, value in (("teacher_hidden", teacher_hidden), ("teacher_weight", teacher_weight),
                        ("teacher_bias", teacher_bias)):
        if isinstance(value, Tensor) and value.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(f"lossjit: {name} requires grad, but the teacher is not "
                               "differentiated; pass it detached (.detach())")
    lead = student_hidden.shape[:-1]
    if tuple(teacher_hidden.shape[:-1]) != tuple(lead):
        raise ValueError(f"lossjit: teacher_hidden must have the leading dims of "
                         f"student_hidden {list(lead)}, got {list(teacher_hidden.shape)}")
    rows_like = target if target is not None else \
        student_hidden.new_empty(lead, dtype=torch.long)
    _ops.check_inputs(student_hidden, student_weight, rows_like, student_bias, ignore_index,
                      reduction, ("student_hidden", "student_weight", "target",
                                  "student_bias"))
    if filter_ignored and target is not None:
        return _without_ignored(
            lambda student, teacher, labels: _divergence_rows(
                student, student_weight, teacher, teacher_weight, beta, temperature, labels,
                ignore_index, reduction, student_bias, teacher_bias),
            target, ignore_index, reduction, student_hidden, teacher_hidden)
    return _divergence_rows(student_hidden, student_weight, teacher_hidden, teacher_weight, beta,
                            temperature, target, ignore_index, reduction, student_bias,
                            teacher_bias)


def _divergence_rows(student_hidden: Tensor, student_weight: Tensor, teacher_hidden: Tensor,
                     teacher_weight: Tensor, beta: float, temperature: float,
                     target: Optional[Tensor], ignore_index: int, reduction: str,
                     student_bias: Optional[Tensor], teacher_bias: Optional[Tensor]):
    """_teacher_divergence on checked arguments."""
    lead = student_hidden.shape[:-1]
    hidden = student_hidden.reshape(-1, student_hidden.shape[-1])
    teacher = teacher_hidden.reshape(-1, teacher_hidden.shape[-1])
    hidden, student_weight, student_bias = _autocast(hidden, student_weight, student_bias)
    teacher, teacher_weight, teacher_bias = _autocast(teacher, teacher_weight, teacher_bias)
    if beta == 0.0:
        statistics = ("lse", "teacher_lse", "teacher_entropy", "cross_entropy")
    elif beta == 1.0:
        statistics = ("lse", "teacher_lse", "entropy", "reverse_cross_entropy")
    else:
        # (jsd's gradient reads mixture_kl, whose own reads mixture_p2.)
        statistics = ("lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd")
    stats = dict(zip(statistics, _reduce.vocab_reduce(
        hidden, student_weight, statistics, bias=student_bias, logit_scale=1.0 / temperature,
        teacher_input=teacher, teacher_weight=teacher_weight, teacher_bias=teacher_bias,
        teacher_scale=1.0 / temperature, jsd_beta=beta if 0.0 < beta < 1.0 else 0.5)))
    if beta == 0.0:
        rows = stats["cross_entropy"] - stats["teacher_entropy"]
    elif beta == 1.0:
        rows = stats["reverse_cross_entropy"] - stats["entropy"]
    else:
        rows = stats["jsd"]
    counted = None
    if target is not None:
        counted = target.reshape(-1) != ignore_index
        rows = torch.where(counted, rows, 0.0)
    if reduction == "none":
        return rows.view(lead)
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / (counted.sum() if counted is not None else rows.numel())
