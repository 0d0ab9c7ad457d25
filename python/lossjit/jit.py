"""``@lossjit.jit``: fuse a loss written with torch ops.

The decorated function is traced on fake tensors (``FakeTensorMode``) while a
``TorchFunctionMode`` records every torch call at the API level (F.linear,
F.cross_entropy, ``.float()``, ``*``...). The recording is split in three:

* the fused part: the one ``F.cross_entropy`` (or ``F.log_softmax`` +
  ``F.nll_loss``) and the chain back to the ``F.linear`` / matmul that makes
  its logits (casts, scalar scaling, tanh soft-capping, bias add, flattening
  views), plus
  ``torch.logsumexp`` of those logits. It becomes a ``loss`` graph, built op by
  op through ``_lossjit.GraphBuilder``, compiled once per specialization and
  run as the ``lossjit::linear_cross_entropy`` op (so autograd, FakeTensor
  and redispatch behave as for :func:`lossjit.linear_cross_entropy`);
* the prologue and epilogue: every other torch call, on the inputs before
  or on the loss after; they are replayed with eager PyTorch on each call;
* anything that would need the [N, V] logits outside the fused part is an
  error naming the op and its source line.

That template keeps its own op (and bits). Any other loss over one linear
layer's logits — class weights, label smoothing, z-loss, entropy, focal,
per-token log-probs and what is built from them — is a composition of row
statistics: ``lossjit._jit_stats`` evaluates the ops on the vocabulary axis
symbolically into one ``lossjit::vocab_reduce`` sweep and keeps the rest
eager (see ``lossjit._algebra``).

Scaling by Python numbers and a tanh soft-cap become ``loss.scale`` and
``loss.softcap`` ops of the graph, applied in float32 to every logit inside
the kernels (nothing is folded into the hidden states). Any chain
``b * tanh(a * z)`` of scales around one ``torch.tanh`` (e.g.
``cap * torch.tanh(z / cap)``) is the same function as
``softcap(s * z)`` with ``cap = |b|`` and ``s = a * b``, which is what the
fused op computes; scale factors are multiplied out in float64.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode, handle_torch_function, has_torch_function
from torch.utils import _pytree as pytree

from . import _jit_stats
from . import _kernels as K
from ._ext import C, HAS_COMPILER
from .functional import _fused
from ._jit_ops import (_ADD, _CAST_METHODS, _CE, _DIALECT_DTYPES, _DIV, _LINEAR,  # noqa: F401
                       _LOG_SOFTMAX, _LOGSUMEXP, _MATMUL, _MUL, _NEG, _NLL, _TANH, _TO,
                       _TRANSPOSE_METHODS, _VIEW, _func_name, _is_property,
                       linear_operands)

SUPPORTED = """lossjit.jit fuses, between the inputs and the loss:
  - the logits: F.linear(x, w[, b]), x @ w.T, torch.matmul / torch.mm (+ a [V] bias add)
  - casts: .float(), .half(), .bfloat16(), .to(dtype), .type(dtype)
  - scaling the logits by a Python number: z * s, s * z, z / s, -z
  - tanh soft-capping: cap * torch.tanh(z / cap) (any Python-number scales
    around one torch.tanh; a bias must be added before them)
  - flattening views of the logits that keep the vocabulary dim last
  - F.cross_entropy(logits, target, ignore_index=..., reduction=...)
    or F.log_softmax(logits, dim=-1) followed by F.nll_loss(...)
  - torch.logsumexp(logits, dim=-1) of the same logits
  - any composition of row statistics of the logits (softmax, log_softmax,
    entropy, gathers at the labels, sums over the vocabulary, class weights,
    label smoothing): see lossjit._jit_stats
Any torch ops on the inputs before, or on [N]-shaped values after, run eagerly."""


class JitError(ValueError):
    """A function @lossjit.jit cannot fuse; the message names the op."""


_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def _user_location() -> str:
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_HERE) and not path.startswith(_TORCH) \
                and "/contextlib.py" not in path:
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


@dataclass
class _Call:
    index: int
    func: Any
    args: tuple
    kwargs: dict
    out: Any
    loc: str
    grad_enabled: bool = True  # torch.is_grad_enabled() when the call ran

    @property
    def name(self) -> str:
        return _func_name(self.func)

    def where(self) -> str:
        return f"{self.name} at {self.loc}"

    def tensors_in(self) -> List[Tensor]:
        return [t for t in pytree.tree_leaves((self.args, self.kwargs))
                if isinstance(t, Tensor)]

    def tensors_out(self) -> List[Tensor]:
        return [t for t in pytree.tree_leaves(self.out) if isinstance(t, Tensor)]


class _Recorder(TorchFunctionMode):
    """Records the torch calls that produce tensors (metadata queries such as
    .shape or .size() return no tensor and are not recorded)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[_Call] = []
        self.producer: Dict[int, _Call] = {}
        self.keep: List[Any] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, Tensor)]
        ins = {id(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, Tensor)}
        # A call that returns its own input (.float() on a float32 tensor) is
        # a no-op here and on replay alike: not recorded.
        if outs and not all(id(t) in ins for t in outs):
            call = _Call(len(self.calls), func, args, kwargs, out, _user_location(),
                         torch.is_grad_enabled())
            name = getattr(func, "__name__", "")
            if name.endswith("_") and not name.endswith("__"):
                raise JitError(f"lossjit.jit: in-place op {call.where()} is not supported "
                               "in a fused loss")
            self.calls.append(call)
            self.keep.append((args, kwargs, out))
            for t in outs:
                self.producer.setdefault(id(t), call)
        return out


@dataclass
class _Fused:
    """The fused part found in a trace."""

    loss_call: _Call
    x: Tensor
    w: Tensor
    labels: Tensor
    bias: Optional[Tensor]
    logit_scale: float  # z = softcap(logit_scale * (x @ w.T + b))
    softcap: float  # 0.0: none
    casts: List[torch.dtype]  # between linear and softmax, in order
    log_softmax_casts: Optional[List[torch.dtype]]  # None for F.cross_entropy
    ignore_index: int
    reduction: str
    linear_call: Optional[_Call] = None
    region: set = field(default_factory=set)  # call indices inside
    lse_calls: List[_Call] = field(default_factory=list)
    flatten_rows: bool = False

    # The part protocol JittedLoss._program reads (shared with the
    # vocabulary reductions of lossjit._jit_stats).
    @property
    def w_value(self) -> Tensor:
        return self.w.m if isinstance(self.w, _Transposed) else self.w

    @property
    def inputs(self) -> List[Tensor]:
        """What the step reads."""
        return [self.x, self.w_value, self.labels] + (
            [self.bias] if isinstance(self.bias, Tensor) else [])

    @property
    def exposed(self) -> List[Tensor]:
        """What the step writes: the loss and the lse values."""
        return [self.loss_call.out] + [u.out for u in self.lse_calls]

    @property
    def anchor(self) -> _Call:
        return self.linear_call or self.loss_call

    def make_step(self, jitted: "JittedLoss", ref, new_slot) -> "_FusedStep":
        return jitted._fused_step(self, ref, new_slot)


def _bind(func: Callable, call: _Call) -> Dict[str, Any]:
    try:
        sig = inspect.signature(func)
        bound = sig.bind(*call.args, **call.kwargs)
    except (TypeError, ValueError) as error:
        raise JitError(f"lossjit.jit: cannot read the arguments of {call.where()}: {error}")
    bound.apply_defaults()
    return dict(bound.arguments)


def _scalar(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class _Analysis:
    def __init__(self, rec: _Recorder, inputs: Dict[int, int], outputs: List[Any]):
        self.rec = rec
        self.inputs = inputs  # id(fake input) -> leaf index
        self.users: Dict[int, List[_Call]] = {}
        for call in rec.calls:
            for t in call.tensors_in():
                self.users.setdefault(id(t), []).append(call)
        self.output_ids = {id(t) for t in outputs if isinstance(t, Tensor)}

    def producer(self, t: Tensor) -> Optional[_Call]:
        return self.rec.producer.get(id(t))

    def unsupported(self, call: _Call, what: str) -> JitError:
        hint = ""
        if call.func in _TANH:
            hint = (" (tanh soft-capping is fused when the logits go through one "
                    "torch.tanh with Python-number scales around it, e.g. "
                    "cap * torch.tanh(z / cap), and nothing else uses them)")
        return JitError(f"lossjit.jit: {call.where()} {what}{hint}.\n{SUPPORTED}")

    def single_use(self, t: Tensor, by: _Call, allow: Callable[[_Call], bool]) -> None:
        if id(t) in self.output_ids:
            raise JitError(
                f"lossjit.jit: the function returns a [N, V] intermediate of the fused "
                f"loss (made by {self.producer(t).where()}); lossjit never materializes "
                f"the logits.\n{SUPPORTED}")
        for user in self.users.get(id(t), []):
            if user is not by and not allow(user):
                raise self.unsupported(
                    user, "uses the [N, V] logits outside the fused loss, so they would have "
                    "to be materialized")

    def find(self) -> _Fused:
        losses = [c for c in self.rec.calls if c.func in _CE or c.func in _NLL]
        if not losses:
            raise JitError("lossjit.jit: the function calls neither F.cross_entropy nor "
                           f"F.nll_loss, so there is no loss to fuse.\n{SUPPORTED}")
        if len(losses) > 1:
            raise JitError(
                "lossjit.jit: one fused loss per function; found "
                + ", ".join(c.where() for c in losses))
        call = losses[0]
        is_ce = call.func in _CE
        a = _bind(F.cross_entropy if is_ce else F.nll_loss, call)
        if a.get("weight") is not None:
            raise JitError(f"lossjit.jit: {call.where()}: class weights are not supported yet")
        if a.get("size_average") is not None or a.get("reduce") is not None:
            raise JitError(f"lossjit.jit: {call.where()}: use reduction=, not the deprecated "
                           "size_average/reduce")
        if is_ce and a.get("label_smoothing", 0.0) != 0.0:
            raise JitError(f"lossjit.jit: {call.where()}: label_smoothing is not supported yet")
        logits_in, target = a["input"], a["target"]
        if not isinstance(target, Tensor) or target.dtype not in K.LABEL_DTYPES:
            raise JitError(f"lossjit.jit: {call.where()}: the target must be an int64 or int32 "
                           "tensor of class indices")
        region = {call.index}
        lse_calls: List[_Call] = []
        log_softmax_casts: Optional[List[torch.dtype]] = None
        v = logits_in
        if v.dim() != 2:
            raise JitError(
                f"lossjit.jit: {call.where()} gets {v.dim()}-d input; flatten the logits to "
                "[N, V] (and the target to [N]) so the vocabulary is the class dim")
        consumer = call
        if not is_ce:
            log_softmax_casts = []
            while True:
                p = self.producer(v)
                if p is None:
                    raise JitError(f"lossjit.jit: the log-probabilities of {call.where()} "
                                   "do not come from F.log_softmax inside the function")
                self.single_use(v, consumer, lambda u: False)
                region.add(p.index)
                cast = self._cast_of(p)
                if cast is not None:
                    log_softmax_casts.insert(0, cast[1])
                    consumer, v = p, cast[0]
                    continue
                if p.func in _LOG_SOFTMAX:
                    self._check_last_dim(p, "dim")
                    dtype = p.kwargs.get("dtype")
                    if dtype is not None:
                        log_softmax_casts.insert(0, dtype)
                    consumer, v = p, p.args[0]
                    break
                raise self.unsupported(p, "sits between the logits and F.nll_loss")
        # The logits chain, walked from the loss back to the linear layer.
        chain: List[Tuple[str, Any]] = []
        values: List[Tensor] = []
        while True:
            p = self.producer(v)
            if p is None:
                raise JitError(
                    f"lossjit.jit: the logits reaching {call.where()} are not computed by "
                    "F.linear or a matmul inside the function (an input cannot be the "
                    f"logits: they are never materialized).\n{SUPPORTED}")
            values.append(v)
            self.single_use(v, consumer, lambda u: u.func in _LOGSUMEXP)
            for u in self.users.get(id(v), []):
                if u.func in _LOGSUMEXP:
                    lse_calls.append(u)
                    chain.append(("lse", u))
            region.add(p.index)
            cast = self._cast_of(p)
            if cast is not None:
                chain.append(("cast", cast[1]))
                consumer, v = p, cast[0]
                continue
            step = self._scale_or_bias(p)
            if step is not None:
                chain.append(step[:2])
                consumer, v = p, step[2]
                continue
            if p.func in _TANH:
                if len(p.args) != 1 or p.kwargs or not isinstance(p.args[0], Tensor):
                    raise self.unsupported(p, "is not a plain tanh of the logits")
                chain.append(("tanh", p))
                consumer, v = p, p.args[0]
                continue
            if p.func in _VIEW:
                src = p.args[0]
                out = p.out
                if out.dim() != 2 or src.shape[-1] != out.shape[-1]:
                    raise self.unsupported(p, "reshapes the logits other than flattening "
                                              "their leading dims")
                consumer, v = p, src
                continue
            if p.func in _LINEAR:
                # A builtin without an inspectable signature: (input, weight, bias=None).
                names = ("input", "weight", "bias")
                b = dict(zip(names, p.args))
                b.update(p.kwargs)
                x, w, bias = b["input"], b["weight"], b.get("bias")
                break
            if p.func in _MATMUL:
                x, m = p.args[0], p.args[1]
                w = self._untranspose(m)
                bias = None
                if w is None:
                    raise self.unsupported(p, "multiplies by something other than a 2-d "
                                              "[D, V] weight")
                break
            raise self.unsupported(p, "sits between the linear layer and the loss")
        region.add(p.index)
        if x.dim() < 2:
            raise JitError(f"lossjit.jit: {p.where()}: hidden must be [..., D] with at least "
                           "one leading dim")
        chain.reverse()  # now from the linear layer to the loss
        casts: List[torch.dtype] = []
        # Scales before and after the tanh as exact products: (numerator,
        # denominator) of Python numbers, divided once at the end.
        inner, outer = [1.0, 1.0], [1.0, 1.0]
        tanh_call: Optional[_Call] = None
        transformed_by: Optional[str] = None
        for kind, arg in chain:
            if kind == "cast":
                casts.append(arg)
            elif kind == "scale":
                side = outer if tanh_call is not None else inner
                side[0] *= arg[0]
                side[1] *= arg[1]
                transformed_by = transformed_by or "scaled"
            elif kind == "tanh":
                if tanh_call is not None:
                    raise self.unsupported(arg, "is a second tanh on the logits; the fused "
                                                "loss soft-caps once")
                tanh_call = arg
                transformed_by = "soft-capped"
            elif kind == "bias":
                if bias is not None:
                    raise JitError("lossjit.jit: the logits get two bias adds")
                if transformed_by is not None:
                    raise JitError(
                        f"lossjit.jit: a bias is added to logits already {transformed_by}; "
                        "the fused loss applies its scale and softcap to x @ w.T + b, so "
                        "add the bias first (F.linear(x, w, b) * s), or scale the bias "
                        f"yourself (F.linear(x, w, b / s) * s).\n{SUPPORTED}")
                bias = arg
        # b * tanh(a * z) = softcap(s * z) with cap = |b| and s = a * b.
        if tanh_call is not None:
            logit_scale = (inner[0] * outer[0]) / (inner[1] * outer[1])
            softcap = abs(outer[0] / outer[1])
        else:
            logit_scale, softcap = inner[0] / inner[1], 0.0
        if not (math.isfinite(logit_scale) and logit_scale != 0.0 and math.isfinite(softcap)):
            raise JitError(f"lossjit.jit: the scale factors on the logits of {call.where()} "
                           f"multiply to {logit_scale!r} (cap {softcap!r}); lossjit needs a "
                           "finite nonzero scale")
        # logsumexp must see the final logits (nothing transformed after it).
        seen_lse = False
        for kind, arg in chain:
            if kind == "lse":
                seen_lse = True
            elif kind in ("scale", "bias", "tanh") and seen_lse:
                raise JitError(
                    f"lossjit.jit: torch.logsumexp at {lse_calls[0].loc} takes the logits "
                    "before a later scale, tanh or bias; only the final logits' lse is "
                    "computed")
        for u in lse_calls:
            self._check_last_dim(u, "dim")
            region.add(u.index)
        if isinstance(bias, Tensor) and (bias.dim() != 1 or bias.shape[0] != w.shape[0]):
            raise JitError(f"lossjit.jit: the bias must be [V] = [{w.shape[0]}], got "
                           f"{list(bias.shape)}")
        for name, t in (("hidden", x), ("weight", w), ("bias", bias)):
            if isinstance(t, Tensor) and self.producer(t) is not None \
                    and self.producer(t).index in region:
                raise JitError(f"lossjit.jit: the {name} of the linear layer is computed "
                               "from the logits")
        ignore_index = a.get("ignore_index", -100)
        reduction = a.get("reduction", "mean")
        return _Fused(call, x, w, target, bias, logit_scale, softcap, casts, log_softmax_casts,
                      int(ignore_index), str(reduction), p, region, lse_calls,
                      flatten_rows=x.dim() > 2)

    def _check_last_dim(self, call: _Call, key: str) -> None:
        x = call.args[0]
        dim = call.kwargs.get(key, call.args[1] if len(call.args) > 1 else None)
        if dim is None and call.func in _LOG_SOFTMAX:
            dim = 0 if x.dim() in (0, 1, 3) else 1  # F.log_softmax's implicit dim
        if isinstance(dim, (list, tuple)) and len(dim) == 1:
            dim = dim[0]
        if not isinstance(dim, int) or x.dim() == 0 or dim % x.dim() != x.dim() - 1:
            raise JitError(f"lossjit.jit: {call.where()} must work over the last (vocabulary) "
                           f"dim, got dim={dim}")
        keepdim = call.kwargs.get("keepdim", call.args[2] if len(call.args) > 2 else False)
        if call.func in _LOGSUMEXP and keepdim:
            raise JitError(f"lossjit.jit: {call.where()}: keepdim=True is not supported")

    def _cast_of(self, p: _Call) -> Optional[Tuple[Tensor, torch.dtype]]:
        if p.func in _CAST_METHODS:
            if len(p.args) != 1 or p.kwargs:
                return None
            dtype = _CAST_METHODS[p.func]
        elif p.func in _TO:
            rest = list(p.args[1:]) + [v for k, v in p.kwargs.items() if k == "dtype"]
            other = [k for k in p.kwargs if k not in ("dtype", "copy", "non_blocking")]
            if len(rest) != 1 or not isinstance(rest[0], torch.dtype) or other:
                raise self.unsupported(p, "changes more than the dtype of the logits")
            dtype = rest[0]
        else:
            return None
        if dtype not in _DIALECT_DTYPES:
            raise self.unsupported(p, f"casts the logits to {dtype}; lossjit computes in "
                                      "float32 and stores float16, bfloat16 or float32")
        return p.args[0], dtype

    def _scale_or_bias(self, p: _Call):
        if p.func in _NEG:
            return ("scale", (-1.0, 1.0), p.args[0])
        if p.func in _MUL or p.func in _DIV:
            extra = {k: v for k, v in p.kwargs.items() if not (k == "rounding_mode"
                                                             and v is None)}
            if len(p.args) != 2 or extra:
                raise self.unsupported(p, "is not a plain scaling of the logits")
            a0, a1 = p.args
            tensor, number = (a0, _scalar(a1)) if isinstance(a0, Tensor) else (a1, _scalar(a0))
            if number is None or not isinstance(tensor, Tensor):
                raise self.unsupported(p, "scales the logits by something other than a "
                                          "Python number")
            if p.func in _DIV:
                if tensor is not a0:
                    raise self.unsupported(p, "divides a number by the logits")
                if number == 0.0:
                    raise self.unsupported(p, "divides the logits by zero")
                return ("scale", (1.0, number), tensor)
            return ("scale", (number, 1.0), tensor)
        if p.func in _ADD:
            if p.kwargs.get("alpha", 1) != 1 or len(p.args) != 2:
                raise self.unsupported(p, "is not a plain bias add")
            a0, a1 = p.args
            if not (isinstance(a0, Tensor) and isinstance(a1, Tensor)):
                raise self.unsupported(p, "adds a number to the logits (a constant shift "
                                          "does not change the loss: drop it)")
            logits, bias = (a0, a1) if a0.dim() == 2 else (a1, a0)
            if bias.dim() != 1:
                raise self.unsupported(p, "adds something other than a [V] bias")
            return ("bias", bias, logits)
        return None

    def _untranspose(self, m: Tensor) -> Optional[Tensor]:
        """The [V, D] weight `m` is the transpose of, or None."""
        if m.dim() != 2:
            return None
        p = self.producer(m)
        if p is not None:
            src = p.args[0] if p.args else None
            is_t = _is_property(p.func, "T") or _is_property(p.func, "mT") or \
                _is_property(p.func, "mH") or _is_property(p.func, "H")
            if p.func in _TRANSPOSE_METHODS and isinstance(src, Tensor) and src.dim() == 2:
                is_t = True
            if is_t and isinstance(src, Tensor) and tuple(src.shape) == tuple(m.shape)[::-1] \
                    and src.dim() == 2:
                return src
        return _Transposed(m)


class _Transposed:
    """A [D, V] weight used as x @ w: the kernel takes w.t() ([V, D])."""

    def __init__(self, m: Tensor) -> None:
        self.m = m
        self.shape = tuple(m.shape)[::-1]
        self.dtype = m.dtype

    def dim(self) -> int:
        return 2


@dataclass
class _Program:
    """What one specialization runs: eager steps around one fused call."""

    steps: List[Tuple[str, Any]]
    out_spec: Any
    out_leaves: List[Tuple[str, Any]]
    graph_id: str
    n_slots: int
    captured: List["_Captured"] = field(default_factory=list)

    def still_valid(self, fn: Callable, leaves: List[Any]) -> bool:
        """Whether every captured tensor is still the one the function reaches,
        with the traced dtype, device and shape (else: trace again)."""
        return all(c.holds(fn, leaves) for c in self.captured)

    def __call__(self, leaves: List[Any]) -> Any:
        slots: List[Any] = [None] * self.n_slots
        for kind, step in self.steps:
            if kind == "input":
                slot, leaf = step
                slots[slot] = leaves[leaf]
            elif kind == "captured":
                slots[step.slot] = step.tensor
            elif kind == "eager":
                slot_map, func, args, kwargs, flat_args = step
                if flat_args:  # the common case: no containers, no pytree walk
                    real_args = [slots[a.slot] if type(a) is _Ref else a for a in args]
                    real_kwargs = {k: slots[a.slot] if type(a) is _Ref else a
                                   for k, a in kwargs.items()} if kwargs else {}
                else:
                    real_args, real_kwargs = pytree.tree_map(
                        lambda a: slots[a.slot] if isinstance(a, _Ref) else a, (args, kwargs))
                out = func(*real_args, **real_kwargs)
                if isinstance(out, Tensor):
                    slots[slot_map[0][1]] = out
                else:
                    flat = pytree.tree_leaves(out)
                    for i, slot in slot_map:
                        slots[slot] = flat[i]
            else:
                step.run(slots)
        outs = [slots[v.slot] if kind == "ref" else v for kind, v in self.out_leaves]
        return pytree.tree_unflatten(outs, self.out_spec)


@dataclass
class _Ref:
    slot: int


_MISSING = object()


@dataclass
class _Captured:
    """A tensor the function reads from outside its arguments (a module's
    parameter or buffer, a closure or global tensor), found at trace time
    by where the function reaches it: a root (a closure cell, a global name
    the code uses, or an argument) and the attribute path from there (a
    module's parameter name). The program holds the tensor itself, so
    in-place updates (optimizer steps) are seen; a rebinding (a new
    Parameter object, .to() of the module to another dtype) fails the guard
    and the function is traced again."""

    slot: int
    tensor: Tensor
    root: Tuple[str, Any]
    path: Tuple[str, ...]
    meta: Tuple[Any, ...]

    @staticmethod
    def meta_of(t: Tensor) -> Tuple[Any, ...]:
        return (t.dtype, t.device, tuple(t.shape))

    def holds(self, fn: Callable, leaves: List[Any]) -> bool:
        obj = _resolve_root(fn, leaves, self.root)
        for name in self.path:
            obj = getattr(obj, name, _MISSING)
        return obj is self.tensor and _Captured.meta_of(obj) == self.meta


def _resolve_root(fn: Callable, leaves: List[Any], root: Tuple[str, Any]) -> Any:
    kind, where = root
    if kind == "arg":
        return leaves[where]
    if kind == "closure":
        cells = getattr(fn, "__closure__", None) or ()
        try:
            return cells[where].cell_contents
        except (IndexError, ValueError):
            return _MISSING
    return getattr(fn, "__globals__", {}).get(where, _MISSING)


def _roots(fn: Callable, leaves: List[Any]) -> List[Tuple[Tuple[str, Any], Any]]:
    """Where the function can reach tensors from besides its tensor
    arguments: its non-tensor arguments (a module passed in), its closure
    cells and the globals its code names."""
    roots: List[Tuple[Tuple[str, Any], Any]] = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, Tensor):
            roots.append((("arg", i), leaf))
    code = getattr(fn, "__code__", None)
    for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
        try:
            roots.append((("closure", i), cell.cell_contents))
        except ValueError:  # an empty cell
            pass
    names = code.co_names if code is not None else ()
    module_globals = getattr(fn, "__globals__", {})
    for name in names:
        if name in module_globals:
            roots.append((("global", name), module_globals[name]))
    return roots


def _find_captured(fn: Callable, leaves: List[Any], t: Tensor,
                   ) -> Optional[Tuple[Tuple[str, Any], Tuple[str, ...]]]:
    """(root, path) of a tensor the function reads from outside, or None."""
    for root, obj in _roots(fn, leaves):
        if obj is t:
            return root, ()
        if isinstance(obj, torch.nn.Module):
            named = list(obj.named_parameters(remove_duplicate=False)) + \
                list(obj.named_buffers(remove_duplicate=False))
            for name, value in named:
                if value is t:
                    return root, tuple(name.split("."))
    return None


@dataclass
class _FusedStep:
    x: int
    w: int
    w_transposed: bool
    labels: int
    bias: Optional[int]
    logit_scale: float
    softcap: float
    ignore_index: int
    reduction: str
    graph_id: str
    flatten_rows: bool
    loss_slot: int
    loss_dtype: torch.dtype
    lse_slots: List[Tuple[int, torch.dtype]]
    storage: torch.dtype  # what the graph was built for

    def run(self, slots: List[Any]) -> None:
        x, w, bias = linear_operands(slots, self.x, self.w, self.bias, self.storage,
                                     self.w_transposed)
        labels = slots[self.labels]
        if self.flatten_rows:
            x = x.reshape(-1, x.shape[-1])
            labels = labels.reshape(-1)
        want_lse = bool(self.lse_slots)
        out = _fused(x, w, labels, bias, self.ignore_index, self.reduction, want_lse,
                     self.graph_id, self.logit_scale, self.softcap)
        loss, lse = out if want_lse else (out, None)
        slots[self.loss_slot] = loss if loss.dtype == self.loss_dtype \
            else loss.to(self.loss_dtype)
        for slot, dtype in self.lse_slots:
            slots[slot] = lse if lse.dtype == dtype else lse.to(dtype)


def _build_graph(name: str, fused: _Fused, x_dtype: torch.dtype, label_dtype: torch.dtype,
                 loc: str):
    """The fused part as a `loss` graph, op by op through the C++ builder."""
    b = C.GraphBuilder(name)
    storage = _DIALECT_DTYPES[x_dtype]
    x = b.argument(storage, 2, loc="hidden")
    w = b.argument(storage, 2, loc="weight")
    labels = b.argument(K.LABEL_DTYPES[label_dtype], 1, loc="target")
    bias = b.argument(storage, 1, loc="bias") if fused.bias is not None else None
    z = b.linear(x, w, bias, loc=loc)
    current = x_dtype
    for dtype in fused.casts:
        if dtype != current:
            z = b.cast(z, _DIALECT_DTYPES[dtype], loc=loc)
            current = dtype
    # The logit transforms in the fused op's order: scale, then soft-cap.
    if fused.logit_scale != 1.0:
        z = b.scale(z, fused.logit_scale, loc=loc)
    if fused.softcap != 0.0:
        z = b.softcap(z, fused.softcap, loc=loc)
    if fused.log_softmax_casts is None:
        out = b.cross_entropy(z, labels, fused.ignore_index, fused.reduction,
                              loc=fused.loss_call.where())
    else:
        logp = b.log_softmax(z, loc=loc)
        for dtype in fused.log_softmax_casts:
            if dtype != current:
                logp = b.cast(logp, _DIALECT_DTYPES[dtype], loc=loc)
                current = dtype
        out = b.nll(logp, labels, fused.ignore_index, fused.reduction,
                    loc=fused.loss_call.where())
    return b.finish([out])


def _graph_name(fn: Callable) -> str:
    raw = getattr(fn, "__name__", "loss") or "loss"
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in raw)
    return name if name and not name[0].isdigit() else "loss_" + name


class JittedLoss:
    """The callable @lossjit.jit returns. Redispatch-safe: tensor subclasses
    and modes that override it see one call to this object."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self._programs: Dict[Any, _Program] = {}
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if kwargs or any(isinstance(a, (list, tuple, dict)) for a in args):
            leaves, spec = pytree.tree_flatten((args, kwargs))
        else:  # flat positional arguments: no pytree walk on the hot path
            leaves, spec = args, len(args)
        # Any argument with __torch_function__ (a tensor subclass or a
        # tensor-like object) or an active mode gets the call, exactly as for
        # lossjit.linear_cross_entropy.
        if has_torch_function(leaves):
            relevant = tuple(a for a in leaves if isinstance(a, Tensor)
                             or hasattr(type(a), "__torch_function__"))
            return handle_torch_function(self, relevant, *args, **kwargs)
        key = self._key(leaves, spec)
        program = self._programs.get(key)
        if program is None:
            program = self._trace(leaves, spec)
            self._programs[key] = program
        elif program.captured and not program.still_valid(self.fn, leaves):
            program = self._trace(leaves, spec)
            self._programs[key] = program
        return program(leaves)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    @property
    def specializations(self) -> int:
        return len(self._programs)

    def _key(self, leaves: List[Any], spec: Any) -> Any:
        parts: List[Any] = [spec]
        device_types = set()
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                parts.append((leaf.dtype, leaf.device, leaf.shape))
                device_types.add(leaf.device.type)
            else:
                try:
                    hash(leaf)
                except TypeError:
                    raise TypeError(
                        f"lossjit.jit: argument of type {type(leaf).__name__} is not "
                        "hashable; pass tensors and plain Python values") from None
                parts.append((type(leaf), leaf))
        for dt in sorted(device_types):
            if torch.is_autocast_enabled(dt):
                parts.append(("autocast", dt, torch.get_autocast_dtype(dt)))
        return tuple(parts)

    # Tracing runs FakeTensorMode, which torch.compile cannot trace through: a
    # first call (new specialization) inside a compiled region is a graph
    # break; cached specializations compile into the graph (fullgraph too).
    @torch.compiler.disable
    def _trace(self, leaves: List[Any], spec: Any) -> _Program:
        from torch._subclasses.fake_tensor import FakeTensorMode

        # Real tensors the function reads from outside (module parameters)
        # are allowed; the program captures them (see _Captured).
        # A shape environment lets boolean-mask indexing (lse[mask]) trace: its
        # sizes become unbacked symbols, which only the eager part sees.
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
        # (Static input shapes: V, N and D are plain ints in the analysis.)
        fake_leaves = [mode.from_tensor(t, static_shapes=True) if isinstance(t, Tensor) else t
                       for t in leaves]
        if isinstance(spec, int):
            args, kwargs = tuple(fake_leaves), {}
        else:
            args, kwargs = pytree.tree_unflatten(fake_leaves, spec)
        rec = _Recorder()
        try:
            # Traced with grad enabled whatever the caller's mode: what the
            # trace records as cut (torch.no_grad() or .detach() inside the
            # function) is then the function's own doing, so a first call
            # under torch.no_grad() (a validation pass) does not make the
            # program drop the gradients of later training calls.
            with torch.enable_grad(), mode, rec:
                out = self.fn(*args, **kwargs)
        except JitError:
            raise
        except Exception as error:  # the function itself failed on fake tensors
            raise JitError(f"lossjit.jit: tracing {self.__name__} on fake tensors failed: "
                           f"{type(error).__name__}: {error}") from error
        inputs = {id(t): i for i, t in enumerate(fake_leaves) if isinstance(t, Tensor)}
        out_leaves, out_spec = pytree.tree_flatten(out)
        analysis = _Analysis(rec, inputs, out_leaves)
        # The cross-entropy template (loss.linear_cross_entropy, its own
        # kernels); anything else over the logits is a composition of row
        # statistics (loss.vocab_reduce and an eager epilogue).
        try:
            part = analysis.find()
        except JitError as template_error:
            part = _jit_stats._Tracer(analysis, JitError).find()
            if part is None:
                raise template_error
        return self._program(analysis, part, leaves, fake_leaves, out_leaves, out_spec)

    def _program(self, analysis: _Analysis, part: Any, leaves: List[Any],
                 fake_leaves: List[Any], out_leaves: List[Any], out_spec: Any) -> _Program:
        """The eager calls around one fused `part` (a _Fused cross-entropy or
        a _jit_stats.ReducePart): its `region` of call indices, the
        `inputs` its step reads, the tensors it writes (`exposed`) and
        make_step(jitted, ref, new_slot)."""
        rec = analysis.rec
        slot_of: Dict[int, int] = {}
        counter = [0]

        def new_slot(t: Any) -> int:
            slot_of[id(t)] = counter[0]
            counter[0] += 1
            return slot_of[id(t)]

        for t in fake_leaves:
            if isinstance(t, Tensor):
                new_slot(t)
        region_outputs = set()
        for call in rec.calls:
            if call.index in part.region:
                for t in call.tensors_out():
                    region_outputs.add(id(t))
        exposed = {id(t) for t in part.exposed}
        part_inputs = part.inputs

        # Liveness: which eager calls feed the outputs or the fused inputs.
        needed = {id(t) for t in out_leaves if isinstance(t, Tensor)}
        needed |= {id(t) for t in part_inputs}
        live: List[_Call] = []
        for call in reversed(rec.calls):
            if call.index in part.region:
                continue
            outs = call.tensors_out()
            if not any(id(t) in needed for t in outs):
                continue
            for t in call.tensors_in():
                if id(t) in region_outputs and id(t) not in exposed:
                    raise analysis.unsupported(
                        call, "uses an [N, V] intermediate of the fused loss, so it would "
                        "have to be materialized")
                needed.add(id(t))
            live.append(call)
        live.reverse()

        steps: List[Tuple[str, Any]] = []
        for i, t in enumerate(fake_leaves):
            if isinstance(t, Tensor):
                steps.append(("input", (slot_of[id(t)], i)))

        # Tensors read from outside the arguments: real (not fake) inputs of
        # the calls that run.
        captured: List[_Captured] = []
        used = [(call, t) for call in live for t in call.tensors_in()] + \
            [(part.anchor, t) for t in part_inputs]
        for call, t in used:
            if id(t) in slot_of or isinstance(t, FakeTensor):
                continue
            found = _find_captured(self.fn, leaves, t)
            if found is None:
                raise JitError(
                    f"lossjit.jit: {call.where()} uses a tensor that is neither an argument, "
                    "nor computed in the function, nor a parameter or buffer of a module "
                    "the function reaches through its closure, its globals or its "
                    "arguments; pass it as an argument")
            entry = _Captured(new_slot(t), t, found[0], found[1], _Captured.meta_of(t))
            captured.append(entry)
            steps.append(("captured", entry))

        def ref(a: Any) -> Any:
            if isinstance(a, Tensor):
                if id(a) not in slot_of:
                    raise JitError(
                        "lossjit.jit: a tensor that is neither an argument nor computed in "
                        "the function is used; pass it as an argument")
                return _Ref(slot_of[id(a)])
            return a

        # Eager calls are pure, so any order that respects the data flow is
        # right: emit each call (and the fused step) once its inputs exist.
        ready = {id(t) for t in fake_leaves if isinstance(t, Tensor)}
        ready |= {id(c.tensor) for c in captured}
        fused_step = None
        pending = list(live)
        while pending or fused_step is None:
            progressed = False
            if fused_step is None and all(id(t) in ready for t in part_inputs):
                fused_step = part.make_step(self, ref, new_slot)
                steps.append(("fused", fused_step))
                ready |= exposed
                progressed = True
            for call in list(pending):
                if all(id(t) in ready for t in call.tensors_in()):
                    args, kwargs = pytree.tree_map(ref, (call.args, call.kwargs))
                    flat = pytree.tree_leaves(call.out)
                    slot_map = [(i, new_slot(t)) for i, t in enumerate(flat)
                                if isinstance(t, Tensor)]
                    flat_args = not any(isinstance(a, (list, tuple, dict))
                                        for a in list(args) + list(kwargs.values()))
                    steps.append(("eager", (slot_map, call.func, args, kwargs, flat_args)))
                    ready |= {id(t) for t in flat if isinstance(t, Tensor)}
                    pending.remove(call)
                    progressed = True
            if not progressed:
                raise JitError("lossjit.jit: a value the fused part reads (a weight of the "
                               "logits, the labels) is computed from its own results; "
                               "compute it from the inputs instead")

        leaves_out: List[Tuple[str, Any]] = []
        for t in out_leaves:
            if isinstance(t, Tensor):
                if id(t) not in slot_of:
                    raise JitError("lossjit.jit: the function returns a tensor lossjit "
                                   "cannot compute outside the fused loss")
                leaves_out.append(("ref", _Ref(slot_of[id(t)])))
            else:
                leaves_out.append(("const", t))
        return _Program(steps, out_spec, leaves_out, getattr(fused_step, "graph_id", ""),
                        counter[0], captured)

    def _fused_step(self, fused: _Fused, ref, new_slot) -> _FusedStep:
        x, labels = fused.x, fused.labels
        w_is_t = isinstance(fused.w, _Transposed)
        w_value = fused.w.m if w_is_t else fused.w
        x_dtype = x.dtype
        if x_dtype not in _DIALECT_DTYPES:
            raise JitError(f"lossjit.jit: the hidden states are {x_dtype}; lossjit stores "
                           "float16, bfloat16 or float32")
        if w_value.dtype != x_dtype or (isinstance(fused.bias, Tensor)
                                        and fused.bias.dtype != x_dtype):
            raise JitError("lossjit.jit: hidden, weight and bias of the linear layer must "
                           "have one dtype")
        device = x.device
        # Under autocast F.linear runs in the autocast dtype, and the op's
        # autocast kernel hands the kernels hidden, weight and bias in it: the
        # graph is built for that storage (the trace is specialized on the
        # autocast state, see _key).
        if device.type in ("cpu", "cuda") and torch.is_autocast_enabled(device.type):
            x_dtype = torch.get_autocast_dtype(device.type)
        graph_id = ""
        if HAS_COMPILER:
            loc = fused.linear_call.where() if fused.linear_call else self.__name__
            graph = _build_graph(_graph_name(self.fn), fused, x_dtype, labels.dtype, loc)
            graph_id = K.register_graph(graph)
            spec = K.Spec(_DIALECT_DTYPES[x_dtype], K.LABEL_DTYPES[labels.dtype],
                          fused.bias is not None, fused.ignore_index, fused.reduction,
                          fused.logit_scale, fused.softcap)
            # Compile now so an unfusable graph fails at the first call, naming why
            # (and check that the kernels apply the transforms the backward will).
            kernel = K.forward_kernel(x_dtype, labels.dtype, fused.bias is not None,
                                      fused.ignore_index, fused.reduction, graph_id, device,
                                      fused.logit_scale, fused.softcap)
            got = kernel.options
            want = {**spec.options(), "pass": "forward"}
            if any(got.get(k) != v for k, v in want.items()) or \
                    any(k in got and k not in want for k in ("logit_scale", "softcap")):
                raise RuntimeError(f"lossjit.jit: internal error: compiled options {got} "
                                   f"differ from the traced {want}")
        bias_slot = ref(fused.bias).slot if isinstance(fused.bias, Tensor) else None
        loss_t = fused.loss_call.out
        loss_dtype = loss_t.dtype
        loss_slot = new_slot(loss_t)
        lse_slots = [(new_slot(u.out), u.out.dtype) for u in fused.lse_calls]
        return _FusedStep(ref(x).slot, ref(w_value).slot, w_is_t, ref(labels).slot,
                          bias_slot, fused.logit_scale, fused.softcap, fused.ignore_index,
                          fused.reduction, graph_id, fused.flatten_rows, loss_slot,
                          loss_dtype, lse_slots, x_dtype)


def jit(fn: Optional[Callable] = None):
    """Decorator: fuse a loss function written with torch ops.

    Example::

        @lossjit.jit
        def loss_fn(hidden, weight, target):
            logits = F.linear(hidden, weight).float() / 0.7
            return F.cross_entropy(logits, target, ignore_index=-1)

    The first call with new dtypes, devices or shapes traces the function on
    fake tensors and compiles the fused part (kernels are shape-generic and
    cached by graph, so a new shape only re-traces); later calls run the
    cached program. Unsupported ops raise :class:`lossjit.JitError` naming the
    op and its line.
    """
    if fn is None:
        return jit
    if not callable(fn):
        raise TypeError(f"lossjit.jit: expected a function to decorate, got "
                        f"{type(fn).__name__}")
    return JittedLoss(fn)
