"""The ``torch.library`` ops of the vocabulary reductions (``loss.vocab_reduce``).

``lossjit::vocab_reduce(hidden[N,D], weight[V,D], target[N]?, bias[V]?,
class_weights[V]?, statistics, ignore_index, logit_scale=1.0, softcap=0.0)
-> [stat[N], ...]`` returns one float32 row statistic per name in
``statistics`` (a comma-separated list of ``lse``, ``label_logit``,
``logit_sum``, ``entropy``) of the logits
``z = softcap(logit_scale * (hidden @ weight.T + bias))``, never materialized:

- ``lse``: log Σ_j exp(z_j)
- ``label_logit``: z at the row's target (0 where target == ignore_index)
- ``logit_sum``: Σ_j c_j z_j with the class weights c (1 without them)
- ``entropy``: −Σ_j p_j log p_j, p = softmax(z)
- ``target_logit_sum``: Σ_j c_j t_j z_j with the row's targets t (class
  probabilities [N, V], the optional argument ``targets``)
- with a teacher (``teacher_input`` [N, T], ``teacher_weight`` [V, T],
  ``teacher_bias``, ``teacher_scale``: logits u, q = softmax(u), never
  differentiated): ``teacher_lse``, ``teacher_entropy``, ``cross_entropy``
  −Σ q log p and ``reverse_cross_entropy`` −Σ p log q; with the mixture
  M = β q + (1 − β) p (``jsd_beta`` = β, 0 < β < 1) ``jsd`` = β KL(q‖M) +
  (1 − β) KL(p‖M), ``mixture_kl`` = KL(p‖M) and ``mixture_p2`` = Σ p²/M,
  which a second sweep forms from the finished lse of both heads;
  ``mixture_p2`` is what mixture_kl's gradient reads and is not
  differentiable itself

Everything after the statistics (masks, normalizers, per-sequence sums) is
plain torch in the public functions, whose autograd hands
``lossjit::vocab_reduce_backward`` one adjoint per statistic; that op forms
dZ from the statistics' adjoint rules (the compiler's derived backward), so
no loss has a gradient kernel of its own.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import _kernels as K
from ._ops import (DOUBLE_BACKWARD_MESSAGE, check_logit_transforms, fake_gradients,
                   register_autocast)

STATISTICS = ("lse", "label_logit", "logit_sum", "entropy", "target_logit_sum", "teacher_lse",
              "teacher_entropy", "cross_entropy", "reverse_cross_entropy", "jsd", "mixture_kl",
              "mixture_p2")
#: The statistics that read a teacher stream.
TEACHER_STATISTICS = ("teacher_lse", "teacher_entropy", "cross_entropy",
                      "reverse_cross_entropy", "jsd", "mixture_kl", "mixture_p2")
#: The dependent sums over the mixture β q + (1 − β) p (they read jsd_beta).
MIXTURE_STATISTICS = ("jsd", "mixture_kl", "mixture_p2")


def check_jsd_beta(names: Sequence[str], jsd_beta: float) -> None:
    mixture = any(n in MIXTURE_STATISTICS for n in names)
    if mixture and not 0.0 < jsd_beta < 1.0:
        raise ValueError(f"lossjit: jsd_beta must be in (0, 1) (0 and 1 mean the KL "
                         f"divergences), got {jsd_beta!r}")
    if not mixture and jsd_beta != 0.5:
        raise ValueError("lossjit: jsd_beta is read by jsd, mixture_kl and mixture_p2 only")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def parse_statistics(statistics: str) -> Tuple[str, ...]:
    names = tuple(s for s in statistics.split(",") if s)
    if not names:
        raise ValueError("lossjit: statistics must name at least one of "
                         f"{', '.join(STATISTICS)}")
    for name in names:
        if name not in STATISTICS:
            raise ValueError(f"lossjit: unknown statistic {name!r} (expected one of "
                             f"{', '.join(STATISTICS)})")
    if len(set(names)) != len(names):
        raise ValueError(f"lossjit: statistics {statistics!r} names one twice")
    return names


def check_teacher(hidden: Tensor, weight: Tensor, names: Sequence[str],
                  teacher_input: Optional[Tensor], teacher_weight: Optional[Tensor],
                  teacher_bias: Optional[Tensor]) -> None:
    wants = any(n in TEACHER_STATISTICS for n in names)
    if wants != (teacher_input is not None) or (teacher_input is None) != (teacher_weight is None):
        raise ValueError("lossjit: the teacher statistics read teacher_input and "
                         "teacher_weight, and only they do: pass both exactly when one is "
                         "asked for")
    if teacher_input is None:
        if teacher_bias is not None:
            raise ValueError("lossjit: teacher_bias without a teacher")
        return
    for arg, value in (("teacher_input", teacher_input), ("teacher_weight", teacher_weight),
                       ("teacher_bias", teacher_bias)):
        if value is not None and value.dtype != hidden.dtype:
            raise TypeError(f"lossjit: {arg} has dtype {_name(value.dtype)} but hidden has "
                            f"{_name(hidden.dtype)}; the teacher is stored like the student")
        if value is not None and value.device != hidden.device:
            raise RuntimeError(f"lossjit: expected all tensors on one device, but hidden is "
                               f"on {hidden.device} and {arg} is on {value.device}")
    if teacher_input.dim() != 2 or teacher_input.shape[0] != hidden.shape[0]:
        raise ValueError(f"lossjit: teacher_input must have shape [N, T] with N = "
                         f"{hidden.shape[0]}, got {list(teacher_input.shape)}")
    if teacher_weight.dim() != 2 or tuple(teacher_weight.shape) != (
            weight.shape[0], teacher_input.shape[1]):
        raise ValueError(f"lossjit: teacher_weight must have shape [V, T] = "
                         f"[{weight.shape[0]}, {teacher_input.shape[1]}], got "
                         f"{list(teacher_weight.shape)}")
    if teacher_bias is not None and tuple(teacher_bias.shape) != (weight.shape[0],):
        raise ValueError(f"lossjit: teacher_bias must have shape [V] = [{weight.shape[0]}], "
                         f"got {list(teacher_bias.shape)}")


def check_reduce_inputs(hidden: Tensor, weight: Tensor, target: Optional[Tensor],
                        bias: Optional[Tensor], class_weights: Optional[Tensor],
                        names: Sequence[str], targets: Optional[Tensor] = None) -> None:
    """Metadata checks (valid for fake and meta tensors too)."""
    if hidden.dim() != 2:
        raise ValueError(f"lossjit::vocab_reduce takes hidden [N, D], got {list(hidden.shape)}")
    dtype = hidden.dtype
    if dtype not in K.STORAGE_DTYPES:
        raise TypeError(f"lossjit: hidden has dtype {_name(dtype)}; lossjit stores float16, "
                        "bfloat16, float32 (math in float32) or float64 (math in float64)")
    compute = K.compute_dtype(dtype)
    for arg, value in (("weight", weight), ("bias", bias)):
        if value is not None and value.dtype != dtype:
            raise TypeError(f"lossjit: {arg} has dtype {_name(value.dtype)} but hidden has "
                            f"{_name(dtype)}; they must match (as for F.linear)")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"lossjit: weight must have shape [V, D] with D = {hidden.shape[1]}, "
                         f"got {list(weight.shape)}")
    v = weight.shape[0]
    if bias is not None and tuple(bias.shape) != (v,):
        raise ValueError(f"lossjit: bias must have shape [V] = [{v}], got {list(bias.shape)}")
    if ("label_logit" in names) != (target is not None):
        raise ValueError("lossjit: label_logit reads the target, and only it does: pass a "
                         "target exactly when label_logit is asked for")
    if target is not None:
        if target.dtype not in K.LABEL_DTYPES:
            raise TypeError(f"lossjit: target must hold class indices as torch.int64 or "
                            f"torch.int32, got {_name(target.dtype)}")
        if target.dim() not in (1, 2) or target.shape[0] != hidden.shape[0] or \
                (target.dim() == 2 and target.shape[1] < 1):
            raise ValueError(f"lossjit: target must have shape [N] or [N, K] (K labels per "
                             f"row) with N = {hidden.shape[0]}, got {list(target.shape)}")
    if ("target_logit_sum" in names) != (targets is not None):
        raise ValueError("lossjit: target_logit_sum reads the targets, and only it does: pass "
                         "targets exactly when target_logit_sum is asked for")
    if targets is not None:
        if tuple(targets.shape) != (hidden.shape[0], v):
            raise ValueError(f"lossjit: targets must have shape [N, V] = [{hidden.shape[0]}, "
                             f"{v}], got {list(targets.shape)}")
        if targets.dtype not in (compute, dtype):
            raise TypeError(f"lossjit: targets must be {_name(compute)} or {_name(dtype)} "
                            f"(hidden's dtype), got {_name(targets.dtype)}")
    if class_weights is not None:
        if "logit_sum" not in names and "target_logit_sum" not in names:
            raise ValueError("lossjit: class_weights are read by logit_sum and "
                             "target_logit_sum only")
        if class_weights.dtype != compute or tuple(class_weights.shape) != (v,):
            raise ValueError(f"lossjit: class_weights must be a {_name(compute)} tensor of shape "
                             f"[V] = [{v}], got {_name(class_weights.dtype)} "
                             f"{list(class_weights.shape)}")
    for arg, value in (("weight", weight), ("target", target), ("bias", bias),
                       ("class_weights", class_weights), ("targets", targets)):
        if value is not None and value.device != hidden.device:
            raise RuntimeError(f"lossjit: expected all tensors on one device, but hidden is "
                               f"on {hidden.device} and {arg} is on {value.device}")


def _spec(hidden: Tensor, target: Optional[Tensor], bias: Optional[Tensor],
          class_weights: Optional[Tensor], names: Tuple[str, ...], ignore_index: int,
          logit_scale: float, softcap: float, targets: Optional[Tensor] = None,
          teacher_input: Optional[Tensor] = None, teacher_bias: Optional[Tensor] = None,
          teacher_scale: float = 1.0, jsd_beta: float = 0.5) -> K.ReduceSpec:
    return K.ReduceSpec(K.STORAGE_DTYPES[hidden.dtype], names,
                        K.LABEL_DTYPES[target.dtype] if target is not None else "",
                        bias is not None, class_weights is not None,
                        ignore_index if target is not None else -100,
                        float(logit_scale), float(softcap),
                        int(target.shape[1]) if target is not None and target.dim() == 2
                        else 0,
                        K.STORAGE_DTYPES[targets.dtype] if targets is not None else "",
                        "" if teacher_input is None else
                        "bias" if teacher_bias is not None else "true",
                        float(teacher_scale), float(jsd_beta))


def _shape_of(name: str, hidden: Tensor, target: Optional[Tensor]) -> Tuple[int, ...]:
    """[N], or [N, K] for label_logit of labels [N, K]."""
    if name == "label_logit" and target is not None and target.dim() == 2:
        return tuple(target.shape)
    return (hidden.shape[0],)


def _buffers(hidden, weight, target, bias, class_weights, targets=None, teacher_input=None,
             teacher_weight=None, teacher_bias=None):
    buffers = {"x": hidden.contiguous(), "w": weight.contiguous()}
    for name, value in (("labels", target), ("bias", bias), ("class_weights", class_weights),
                        ("targets", targets), ("teacher_x", teacher_input),
                        ("teacher_w", teacher_weight), ("teacher_bias", teacher_bias)):
        if value is not None:
            buffers[name] = value.contiguous()
    return buffers


@torch.library.custom_op("lossjit::vocab_reduce", mutates_args=())
def vocab_reduce_op(hidden: Tensor, weight: Tensor, target: Optional[Tensor],
                    bias: Optional[Tensor], class_weights: Optional[Tensor], statistics: str,
                    ignore_index: int, logit_scale: float = 1.0, softcap: float = 0.0,
                    targets: Optional[Tensor] = None, teacher_input: Optional[Tensor] = None,
                    teacher_weight: Optional[Tensor] = None,
                    teacher_bias: Optional[Tensor] = None,
                    teacher_scale: float = 1.0, jsd_beta: float = 0.5) -> List[Tensor]:
    """The row statistics `statistics` of hidden [N, D] and weight [V, D]."""
    names = parse_statistics(statistics)
    check_reduce_inputs(hidden, weight, target, bias, class_weights, names, targets)
    check_teacher(hidden, weight, names, teacher_input, teacher_weight, teacher_bias)
    check_jsd_beta(names, jsd_beta)
    check_logit_transforms(logit_scale, softcap)
    n, d = hidden.shape
    v = weight.shape[0]
    kernel = K.reduce_kernel(_spec(hidden, target, bias, class_weights, names, ignore_index,
                                   logit_scale, softcap, targets, teacher_input, teacher_bias,
                                   teacher_scale, jsd_beta), hidden.device)
    buffers = _buffers(hidden, weight, target, bias, class_weights, targets, teacher_input,
                       teacher_weight, teacher_bias)
    outputs = [hidden.new_empty(_shape_of(name, hidden, target),
                                dtype=K.compute_dtype(hidden.dtype)) for name in names]
    buffers.update(zip(names, outputs))
    # On CPU the labels are range-checked (IndexError) before any kernel runs.
    kernel.run(hidden.device, n, v, d, buffers, _teacher_dim(teacher_input))
    return outputs


def _teacher_dim(teacher_input: Optional[Tensor]) -> int:
    return 0 if teacher_input is None else int(teacher_input.shape[1])


@vocab_reduce_op.register_fake
def _(hidden, weight, target, bias, class_weights, statistics, ignore_index, logit_scale=1.0,
      softcap=0.0, targets=None, teacher_input=None, teacher_weight=None, teacher_bias=None,
      teacher_scale=1.0, jsd_beta=0.5):
    names = parse_statistics(statistics)
    check_reduce_inputs(hidden, weight, target, bias, class_weights, names, targets)
    check_teacher(hidden, weight, names, teacher_input, teacher_weight, teacher_bias)
    check_jsd_beta(names, jsd_beta)
    return [hidden.new_empty(_shape_of(name, hidden, target),
                             dtype=K.compute_dtype(hidden.dtype)) for name in names]


@torch.library.custom_op("lossjit::vocab_reduce_backward", mutates_args=())
def vocab_reduce_backward_op(hidden: Tensor, weight: Tensor, target: Optional[Tensor],
                             bias: Optional[Tensor], class_weights: Optional[Tensor],
                             saved: List[Tensor], grads: List[Tensor], statistics: str,
                             ignore_index: int, needs_grad_x: bool, needs_grad_w: bool,
                             logit_scale: float = 1.0, softcap: float = 0.0,
                             targets: Optional[Tensor] = None,
                             teacher_input: Optional[Tensor] = None,
                             teacher_weight: Optional[Tensor] = None,
                             teacher_bias: Optional[Tensor] = None,
                             teacher_scale: float = 1.0,
                             jsd_beta: float = 0.5) -> Tuple[Tensor, Tensor, Tensor]:
    """(grad_hidden, grad_weight, grad_bias) from `saved` (the forward's
    statistics) and `grads` (the gradient reaching each, [N] float32); a
    gradient not asked for is an empty tensor (so is grad_bias without a
    bias)."""
    names = parse_statistics(statistics)
    check_reduce_inputs(hidden, weight, target, bias, class_weights, names, targets)
    n, d = hidden.shape
    v = weight.shape[0]
    if len(saved) != len(names) or len(grads) != len(names):
        raise ValueError(f"lossjit::vocab_reduce_backward: one saved statistic and one "
                         f"gradient per statistic ({len(names)}), got {len(saved)} and "
                         f"{len(grads)}")
    check_jsd_beta(names, jsd_beta)
    flags = K.BackwardFlags(needs_grad_x, needs_grad_w)
    kernel = K.reduce_kernel(_spec(hidden, target, bias, class_weights, names, ignore_index,
                                   logit_scale, softcap, targets, teacher_input, teacher_bias,
                                   teacher_scale, jsd_beta), hidden.device, flags)
    buffers = _buffers(hidden, weight, target, bias, class_weights, targets)
    if teacher_input is not None:
        # (The teacher's lse / logits enter the cross-entropies' adjoints; a
        # plan with a teacher binds its operands even when only the
        # teacher's own statistics, whose adjoints are 0, sit next to the
        # student's.)
        buffers.update(_buffers(hidden, weight, None, None, None, None, teacher_input,
                                teacher_weight, teacher_bias))
    names_run = kernel.names
    for name, value, grad in zip(names, saved, grads):
        # The kernel reads the saved statistics its adjoint rules need (lse,
        # entropy) and one adjoint per statistic.
        if name in names_run:
            buffers[name] = value.contiguous()
        buffers["grad_" + name] = grad.to(K.compute_dtype(hidden.dtype)).contiguous()
    if "grad_x" in names_run:
        buffers["grad_x"] = torch.empty_like(buffers["x"])
    if "grad_w" in names_run:
        buffers["grad_w"] = torch.empty_like(buffers["w"])
    if "grad_bias" in names_run:
        buffers["grad_bias"] = torch.empty_like(buffers["bias"])
    # (One empty tensor per missing gradient: a custom op's returns may not
    # alias each other, which torch checks under a dispatch mode.)
    grad_x = buffers["grad_x"] if needs_grad_x else hidden.new_empty((0,))
    grad_w = buffers["grad_w"] if needs_grad_w else hidden.new_empty((0,))
    grad_b = buffers["grad_bias"] if (needs_grad_w and bias is not None) \
        else hidden.new_empty((0,))
    kernel.run(hidden.device, n, v, d, buffers, _teacher_dim(teacher_input))
    return grad_x, grad_w, grad_b


@vocab_reduce_backward_op.register_fake
def _(hidden, weight, target, bias, class_weights, saved, grads, statistics, ignore_index,
      needs_grad_x, needs_grad_w, logit_scale=1.0, softcap=0.0, targets=None,
      teacher_input=None, teacher_weight=None, teacher_bias=None, teacher_scale=1.0,
      jsd_beta=0.5):
    return fake_gradients(hidden, weight, bias, needs_grad_x, needs_grad_w)


def _setup_context(ctx, inputs, output):
    hidden, weight, target, bias, class_weights, statistics, ignore_index = inputs[:7]
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(hidden, weight, target, bias, class_weights, *output)
    ctx.statistics = statistics
    ctx.ignore_index = ignore_index
    ctx.logit_scale = inputs[7] if len(inputs) > 7 else 1.0
    ctx.softcap = inputs[8] if len(inputs) > 8 else 0.0
    ctx.extra = tuple(inputs[9:])  # targets and the teacher, as given
    ctx.num_inputs = len(inputs)


def _backward(ctx, grads):
    hidden, weight, target, bias, class_weights, *saved = ctx.saved_tensors
    needs_x, needs_w, _, needs_b = ctx.needs_input_grad[:4]
    rest = (None,) * (ctx.num_inputs - 4)
    if all(g is None for g in grads) or not (needs_x or needs_w or needs_b):
        return (None, None, None, None) + rest
    # mixture_p2 is what mixture_kl's adjoint reads, not a differentiable
    # value (its gradient would need yet another dependent sum): say so
    # rather than drop the gradient (the kernel would poison the rows).
    for name, g in zip(parse_statistics(ctx.statistics), grads):
        if name == "mixture_p2" and g is not None and bool((g != 0).any()):
            raise RuntimeError("lossjit: the statistic mixture_p2 is not differentiable (it is "
                               "saved for mixture_kl's gradient); detach it before using it "
                               "in a loss")
    # A statistic nobody used has no gradient: its adjoint is 0.
    filled = [torch.zeros_like(s) if g is None else g for g, s in zip(grads, saved)]
    grad_x, grad_w, grad_b = torch.ops.lossjit.vocab_reduce_backward(
        hidden, weight, target, bias, class_weights, saved, filled, ctx.statistics,
        ctx.ignore_index, bool(needs_x), bool(needs_w or needs_b), ctx.logit_scale,
        ctx.softcap, *ctx.extra)
    return (grad_x if needs_x else None, grad_w if needs_w else None, None,
            grad_b if (needs_b and bias is not None) else None) + rest


vocab_reduce_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)


vocab_reduce_backward_op.register_autograd(_no_double_backward)


# F.linear's rule for hidden, weight and bias; the class weights stay float32.
register_autocast("vocab_reduce")


def vocab_reduce(hidden: Tensor, weight: Tensor, statistics: Sequence[str], *,
                 target: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                 class_weights: Optional[Tensor] = None, ignore_index: int = -100,
                 logit_scale: float = 1.0, softcap: float = 0.0,
                 targets: Optional[Tensor] = None, teacher_input: Optional[Tensor] = None,
                 teacher_weight: Optional[Tensor] = None, teacher_bias: Optional[Tensor] = None,
                 teacher_scale: float = 1.0, jsd_beta: float = 0.5) -> List[Tensor]:
    """The statistics of hidden [..., D] (leading dims flattened and restored);
    target [...] or [..., K] (K labels per row: label_logit is [..., K])."""
    lead = hidden.shape[:-1]
    flat = hidden.dim() != 2
    per_row = target is not None and target.dim() == len(lead) + 1
    if flat:
        hidden = hidden.reshape(-1, hidden.shape[-1])
        if target is not None:
            target = target.reshape(-1, target.shape[-1]) if per_row else target.reshape(-1)
        if targets is not None:
            targets = targets.reshape(-1, targets.shape[-1])
        if teacher_input is not None:
            teacher_input = teacher_input.reshape(-1, teacher_input.shape[-1])
    extra: tuple = () if targets is None else (targets,)
    if teacher_input is not None or jsd_beta != 0.5:
        extra = (targets, teacher_input, teacher_weight, teacher_bias, float(teacher_scale),
                 float(jsd_beta))
    stats = torch.ops.lossjit.vocab_reduce(hidden, weight, target, bias, class_weights,
                                           ",".join(statistics), ignore_index,
                                           float(logit_scale), float(softcap), *extra)
    if not flat:
        return list(stats)
    return [s.view(lead + s.shape[1:]) for s in stats]
