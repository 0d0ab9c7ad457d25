"""``@lossjit.jit`` for any composition of row statistics (issue 14).

The traced calls are split at the row boundary (research:
fused_loss_families §2.1): everything that touches the vocabulary axis of
the logits — log_softmax, softmax, logsumexp, exp of log-probabilities,
products with [N, 1] or [V] tensors, sums and means over the vocabulary,
gathers at the labels, F.cross_entropy (class weights, label smoothing) and
F.nll_loss — is evaluated symbolically (lossjit._algebra) into per-row
polynomials of the statistics of one ``loss.vocab_reduce`` sweep; everything
[N]-shaped around them stays eager torch, replayed on every call. Several
losses over the same logits (CE + z-loss + an entropy bonus + a log-prob
objective) share the one sweep. An op on the logits the algebra cannot
express is a JitError naming it and its line: the logits would have to be
materialized.

A second linear layer whose logits reach softmax-type ops is a teacher head
when its logits need no grad (its operands do not require grad, or the
function computes it under torch.no_grad() or .detach()es it) while the
student's do: same vocabulary and rows, its own hidden size T, a bias and
Python-number scales (its temperature: the kernel's teacher_scale; a
teacher soft-cap is an error). Its logits u, softmax q and log-softmax
u − teacher_lse are symbolic like the student's, F.kl_div and torch.log of
a softmax are understood, and the sums reduce to the teacher statistics of
the same sweep (teacher_lse, teacher_entropy, cross_entropy,
reverse_cross_entropy): forward KL Σ q (log q − log p) is exactly
cross_entropy − teacher_entropy. The teacher's operands reach the kernel
detached. Two heads that both need grad, or neither (two teachers), are
JitErrors naming both linear layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

from . import _kernels, _reduce
from ._algebra import (MIXTURE_SUM_TOLERANCE, TEACHER_STATISTICS, AlgebraError, Poly, Sym,
                       log_softmax_of, mixture_basis, reduce_gather, reduce_sum, statistics_of)
from ._jit_ops import (_ADD, _CAST_METHODS, _CE, _DETACH, _DIV, _EXP, _GATHER, _GETITEM,
                       _KL_DIV, _LINEAR, _LOG, _LOG_SOFTMAX, _LOGSUMEXP, _MATMUL, _MEAN, _MUL,
                       _NEG, _NLL, _RSUB, _SOFTMAX, _SQUEEZE, _STACK, _SUB, _SUM, _TANH, _TO,
                       _VIEW,
                       _DIALECT_DTYPES, linear_operands)

#: Ops that need the vocabulary softmax: a linear whose (mapped) output
#: reaches one of them is the logit stream.
_SOFTMAX_OPS = _LOG_SOFTMAX | _SOFTMAX | _LOGSUMEXP | _CE


@dataclass
class Exit:
    """A value leaving the vocabulary axis: a row polynomial (`rows`, and
    `smooth` for label smoothing) and how it becomes the traced tensor."""

    out: Tensor
    rows: Poly
    kind: str = "plain"  # "plain", "nll", "ce", "ce_prob" (probability targets) or
    # "rowsum" (the rows summed, over `divisor`: F.kl_div's sum, batchmean, mean)
    smooth: Optional[Poly] = None
    label_smoothing: float = 0.0
    ignore_index: int = -100
    reduction: str = "none"
    weighted: bool = False  # nll/ce: the [V] column is the class weights
    vocab: int = 0  # ce with label smoothing: ε / V
    per_label: bool = False  # a gather of K labels per row: [..., K] values
    divisor: float = 1.0  # rowsum: what the sum of the rows is divided by


@dataclass
class ReducePart:
    """The fused part: one logit stream, its statistics and the exits."""

    analysis: Any
    region: set
    x: Tensor
    w: Any  # a [V, D] tensor or jit._Transposed
    bias: Optional[Tensor]
    linear_call: Any
    logit_scale: float
    softcap: float
    vocab: int
    exits: List[Exit] = field(default_factory=list)
    labels: Optional[Tensor] = None  # the base [lead] (or [lead, K]) label tensor
    labels_per_row: int = 1
    ignore_index: Optional[int] = None
    column: Optional[Tensor] = None  # the one [V] tensor (class weights)
    targets: Optional[Tensor] = None  # the one dense [lead..., V] tensor (probabilities)
    rows: Dict[int, Tensor] = field(default_factory=dict)  # row atoms' tensors
    lead: Tuple[int, ...] = ()
    teacher: Optional["Teacher"] = None  # a second head, never differentiated
    #: The function cut the logits' gradient (torch.no_grad(), .detach()):
    #: the sweep runs on detached operands, as eager would.
    detached: bool = False
    #: β of the mixture β·q + (1 − β)·p whose log the function takes (jsd).
    jsd_beta: Optional[float] = None

    @property
    def w_value(self) -> Tensor:
        return getattr(self.w, "m", self.w)

    @property
    def inputs(self) -> List[Tensor]:
        out = [self.x, self.w_value]
        if self.teacher is not None:
            out += [self.teacher.x, self.teacher.w_value]
        for t in (self.bias, self.labels, self.column, self.targets,
                  self.teacher.bias if self.teacher is not None else None):
            if isinstance(t, Tensor):
                out.append(t)
        out.extend(self.rows.values())
        return out

    @property
    def exposed(self) -> List[Tensor]:
        return [e.out for e in self.exits]

    @property
    def anchor(self):
        return self.linear_call

    def make_step(self, jitted, ref, new_slot) -> "ReduceStep":
        stats, weighted = statistics_of(
            [p for e in self.exits for p in (e.rows, e.smooth) if p is not None])
        if not stats:  # only constants (Σ softmax = 1): the sweep still runs once
            stats = ["lse"]
        if "label_logit" in stats and self.labels is None:
            raise AlgebraError("internal: label_logit without labels")
        if weighted and self.column is None:
            raise AlgebraError("internal: a weighted logit_sum without a [V] tensor")
        reads_teacher = any(n in TEACHER_STATISTICS for n in stats)
        if reads_teacher and self.teacher is None:
            raise AlgebraError("internal: a teacher statistic without a teacher head")
        teacher = self.teacher if reads_teacher else None
        x_dtype = self.x.dtype
        device = self.x.device
        if device.type in ("cpu", "cuda") and torch.is_autocast_enabled(device.type):
            x_dtype = torch.get_autocast_dtype(device.type)
        if x_dtype not in _DIALECT_DTYPES:
            raise AlgebraError(f"the hidden states are {x_dtype}; lossjit stores float16, "
                               "bfloat16, float32 or float64")
        return ReduceStep(
            x=ref(self.x).slot, w=ref(self.w_value).slot,
            w_transposed=self.w is not self.w_value,
            bias=ref(self.bias).slot if isinstance(self.bias, Tensor) else None,
            labels=ref(self.labels).slot if isinstance(self.labels, Tensor) else None,
            labels_per_row=self.labels_per_row,
            column=ref(self.column).slot if isinstance(self.column, Tensor) else None,
            targets=ref(self.targets).slot if isinstance(self.targets, Tensor) else None,
            rows={i: ref(t).slot for i, t in self.rows.items()},
            statistics=tuple(stats), weighted=weighted,
            ignore_index=self.ignore_index if self.ignore_index is not None else _NO_LABEL,
            logit_scale=self.logit_scale, softcap=self.softcap, storage=x_dtype,
            exits=[(new_slot(e.out), e) for e in self.exits], detached=self.detached,
            teacher_x=ref(teacher.x).slot if teacher is not None else None,
            teacher_w=ref(teacher.w_value).slot if teacher is not None else None,
            teacher_w_transposed=teacher is not None and teacher.w is not teacher.w_value,
            teacher_bias=ref(teacher.bias).slot if teacher is not None
            and isinstance(teacher.bias, Tensor) else None,
            teacher_scale=teacher.scale if teacher is not None else 1.0,
            teacher_detached=teacher.detached if teacher is not None else True,
            jsd_beta=self.jsd_beta if set(stats) & {"jsd", "mixture_kl", "mixture_p2"}
            else 0.5)


@dataclass
class Teacher:
    """The teacher head: u = scale·(x @ w.T + bias), q = softmax(u)."""

    x: Tensor
    w: Any  # a [V, T] tensor or jit._Transposed
    bias: Optional[Tensor]
    scale: float
    linear_call: Any
    #: Whether the function itself cut the gradient (torch.no_grad() or
    #: .detach() while an operand required grad); if not, an operand that
    #: requires grad at run time is an error (eager would differentiate it).
    detached: bool

    @property
    def w_value(self) -> Tensor:
        return getattr(self.w, "m", self.w)


#: The kernel's ignore_index when only plain gathers read the labels.
_NO_LABEL = -(1 << 63)


@dataclass
class ReduceStep:
    """One loss.vocab_reduce call per run, then every exit from its
    statistics (torch, so autograd reaches the statistics)."""

    x: int
    w: int
    w_transposed: bool
    bias: Optional[int]
    labels: Optional[int]
    column: Optional[int]
    rows: Dict[int, int]
    statistics: Tuple[str, ...]
    weighted: bool
    ignore_index: int
    logit_scale: float
    softcap: float
    storage: torch.dtype
    exits: List[Tuple[int, Exit]]
    labels_per_row: int = 1
    targets: Optional[int] = None
    graph_id: str = ""
    teacher_x: Optional[int] = None
    teacher_w: Optional[int] = None
    teacher_w_transposed: bool = False
    teacher_bias: Optional[int] = None
    teacher_scale: float = 1.0
    teacher_detached: bool = True
    detached: bool = False
    jsd_beta: float = 0.5

    def _teacher(self, slots: List[Any]) -> Dict[str, Any]:
        """The teacher operands for the kernel (detached: never differentiated)."""
        if self.teacher_x is None:
            return {}
        tx, tw, tb = linear_operands(slots, self.teacher_x, self.teacher_w, self.teacher_bias,
                                     self.storage, self.teacher_w_transposed)
        if not self.teacher_detached and torch.is_grad_enabled():
            for name, t in (("hidden states", tx), ("weight", tw), ("bias", tb)):
                if t is not None and t.requires_grad:
                    raise RuntimeError(
                        f"lossjit.jit: the teacher head's {name} require grad, but the fused "
                        "teacher is never differentiated (the trace saw it without grad); "
                        "detach it or compute the teacher's logits under torch.no_grad()")
        return {"teacher_input": tx.detach().reshape(-1, tx.shape[-1]),
                "teacher_weight": tw.detach(),
                "teacher_bias": tb.detach() if tb is not None else None,
                "teacher_scale": self.teacher_scale, "jsd_beta": self.jsd_beta}

    def run(self, slots: List[Any]) -> None:
        x, w, bias = linear_operands(slots, self.x, self.w, self.bias, self.storage,
                                     self.w_transposed)
        if self.detached:
            x, w = x.detach(), w.detach()
            bias = bias.detach() if bias is not None else None
        x = x.reshape(-1, x.shape[-1])
        labels = None
        if self.labels is not None:
            labels = slots[self.labels].reshape(-1, self.labels_per_row) \
                if self.labels_per_row > 1 else slots[self.labels].reshape(-1)
        compute = _kernels.compute_dtype(x.dtype)
        column = slots[self.column].reshape(-1).to(compute) \
            if self.column is not None else None
        targets = None
        if self.targets is not None:
            targets = slots[self.targets]
            targets = targets.reshape(-1, targets.shape[-1])
            if targets.dtype not in (compute, x.dtype):
                targets = targets.to(compute)
        values = _reduce.vocab_reduce(
            x, w, self.statistics, target=labels if "label_logit" in self.statistics else None,
            bias=bias, class_weights=column if self.weighted else None,
            ignore_index=self.ignore_index, logit_scale=self.logit_scale, softcap=self.softcap,
            targets=targets if "target_logit_sum" in self.statistics else None,
            **self._teacher(slots))
        stats = dict(zip(self.statistics, values))
        for name in ("teacher_lse", "teacher_entropy"):  # the teacher's own: no gradient
            if name in stats:
                stats[name] = stats[name].detach()
        like = stats["lse"] if "lse" in stats else next(iter(stats.values()))
        per_label = self.labels_per_row > 1
        caches: Dict[bool, Dict[Any, Tensor]] = {False: {}, True: {}}

        def env_of(labelled: bool) -> Callable[[Any], Tensor]:
            """Atoms as [N] tensors, or shaped [N, 1] next to the [N, K]
            label values of a several-labels gather."""
            cache = caches[labelled]

            def row_value(t: Tensor) -> Tensor:
                return t.reshape(-1, 1) if labelled and t.dim() >= 1 else t

            def env(atom) -> Tensor:
                value = cache.get(atom)
                if value is not None:
                    return value
                kind = atom[0]
                if kind == "stat":
                    name = atom[1][:-2] if atom[1].endswith("_c") else atom[1]
                    value = stats[name] if name == "label_logit" else row_value(stats[name])
                elif kind == "p_label":
                    value = torch.exp(stats["label_logit"] - row_value(stats["lse"]))
                elif kind == "csum":
                    value = column.sum()
                elif kind == "c_label":
                    value = column[_safe_labels(labels, self.ignore_index)]
                elif kind == "tsum":
                    value = row_value(targets.float().sum(-1))
                elif kind == "tmass":  # Σ_j c_j t_j: the probability CE's normalizer
                    value = row_value(targets.float() @ column if atom[1]
                                      else targets.float().sum(-1))
                elif kind == "t_label":
                    safe = _safe_labels(labels, self.ignore_index)
                    value = targets.float().gather(-1, safe if safe.dim() == 2
                                                   else safe[:, None])
                    value = value if labelled else value[:, 0]
                elif kind == "row":
                    value = row_value(_row(slots[self.rows[atom[1]]]))
                elif kind == "rowinv":
                    value = 1.0 / row_value(_row(slots[self.rows[atom[1]]]))
                else:
                    raise RuntimeError(f"lossjit.jit: internal error: atom {atom!r}")
                cache[atom] = value
                return value
            return env

        for slot, exit_ in self.exits:
            env = env_of(exit_.per_label)
            shape_like = stats["label_logit"] if exit_.per_label else like
            rows = exit_.rows.evaluate(env, shape_like)
            if exit_.kind == "plain":
                # (A polynomial without a per-label atom is [N, 1]: broadcast.)
                out = rows.expand_as(shape_like).reshape(exit_.out.shape) if per_label and \
                    exit_.per_label else rows.reshape(exit_.out.shape)
            elif exit_.kind == "rowsum":
                out = rows.sum()
                if exit_.divisor != 1.0:
                    out = out / exit_.divisor
            else:
                out = self._loss(exit_, rows, env, like, labels, column)
            slots[slot] = out if out.dtype == exit_.out.dtype else out.to(exit_.out.dtype)

    def _loss(self, e: Exit, rows: Tensor, env, like: Tensor, labels: Tensor,
              column: Optional[Tensor]) -> Tensor:
        """F.nll_loss / F.cross_entropy from their per-row polynomials, with
        PyTorch's ignore, class-weight, smoothing and reduction rules."""
        if e.kind == "ce_prob":  # every row counts; 'mean' over the rows
            value = rows
            if e.smooth is not None:
                value = (1.0 - e.label_smoothing) * value + (e.label_smoothing / e.vocab) * \
                    e.smooth.evaluate(env, like)
            if e.reduction == "none":
                return value.reshape(e.out.shape)
            if e.reduction == "sum":
                return value.sum()
            return value.sum() / value.numel() if value.numel() else value.sum() * math.nan
        counted = labels != e.ignore_index
        if e.weighted:
            weight = torch.where(counted, column[_safe_labels(labels, e.ignore_index)], 0.0)
        else:
            weight = counted.to(rows.dtype)
        value = torch.where(counted, weight * rows, 0.0)
        if e.smooth is not None:
            smooth = torch.where(counted, e.smooth.evaluate(env, like), 0.0)
            value = (1.0 - e.label_smoothing) * value + (e.label_smoothing / e.vocab) * smooth
        if e.reduction == "none":
            return value.reshape(e.out.shape)
        if e.reduction == "sum":
            return value.sum()
        return value.sum() / weight.sum()


def _teacher_only(s: Sym) -> bool:
    """Whether a symbolic value depends on the teacher head alone (so
    .detach() of it changes nothing: the teacher gets no gradient)."""
    teacher_atoms = {("stat", "teacher_lse"), ("stat", "teacher_entropy")}
    return set(s.parts) <= {"1", "u", "q", "qu"} and all(
        atom in teacher_atoms for coef in s.parts.values() for atom in coef.atoms())


def _safe_labels(labels: Tensor, ignore_index: int) -> Tensor:
    """Labels with ignored rows pointed at class 0 (their values are masked)."""
    return torch.where(labels == ignore_index, torch.zeros_like(labels), labels)


def _row(t: Tensor) -> Tensor:
    """An [..., 1] (or 0-d) coefficient as a flat [N] (or 0-d) tensor."""
    if t.dim() == 0:
        return t
    return t.reshape(-1)


# --- The tracer: recorded calls → ReducePart ---------------------------------------

class _Unsupported(Exception):
    """An op that cannot run on the symbolic logits at all (it would need
    them materialized); reported before algebra errors."""

    def __init__(self, call, what: str) -> None:
        super().__init__(what)
        self.call, self.what = call, what


def _arg(call, index: int, name: str, default: Any = None) -> Any:
    if name in call.kwargs:
        return call.kwargs[name]
    return call.args[index] if len(call.args) > index else default


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _same_size(a: Tensor, b: Tensor) -> bool:
    """Whether two traced tensors have as many elements, False when that
    depends on data (a boolean-mask index)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return bool(statically_known_true(a.numel() == b.numel()))


def _is_last_dim(dim: Any, ndim: int) -> bool:
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and ndim > 0 and dim % ndim == ndim - 1


class _Tracer:
    """Symbolic evaluation of the calls on one logit stream."""

    def __init__(self, analysis, jit_error: Callable[[str], Exception]) -> None:
        self.a = analysis
        self.error = jit_error
        self.sym: Dict[int, Sym] = {}
        self.rowpoly: Dict[int, Tuple[Poly, Tuple[int, ...]]] = {}
        self.poison: set = set()
        #: torch.stack outputs of symbolic values: the values, in order.
        self.stacks: Dict[int, List[Sym]] = {}
        #: The largest machine epsilon among the constants folded so far.
        self.constant_eps = 0.0
        self.algebra_errors: List[Tuple[Any, str]] = []

    # -- the stream ------------------------------------------------------------

    def streams(self) -> List[Tuple[Any, List[Any], Tensor]]:
        """(linear call, map chain, final logits) of every linear layer whose
        mapped output reaches a softmax-type op."""
        found = []
        for call in self.a.rec.calls:
            if call.func not in _LINEAR and call.func not in _MATMUL:
                continue
            chain, logits = self._walk_maps(call)
            if any(u.func in _SOFTMAX_OPS for u in self.a.users.get(id(logits), [])) or \
                    self._reaches_softmax_through_views(logits):
                found.append((call, chain, logits))
        return found

    def _reaches_softmax_through_views(self, t: Tensor) -> bool:
        for u in self.a.users.get(id(t), []):
            if u.func in _VIEW or u.func in _CAST_METHODS or u.func in _TO:
                if any(v.func in _SOFTMAX_OPS for v in self.a.users.get(id(u.out), [])):
                    return True
        return False

    def _walk_maps(self, linear) -> Tuple[List[Any], Tensor]:
        """The single-use chain of element-wise maps after the linear layer:
        casts, scaling by Python numbers, a [V] bias add, tanh, flattening
        views (the kernel applies them to every logit)."""
        t = linear.out
        chain: List[Any] = []
        while id(t) not in self.a.output_ids:
            users = self.a.users.get(id(t), [])
            if len(users) != 1:
                break
            u = users[0]
            step = self._map_step(u, t)
            if step is None:
                break
            chain.append((step, u))
            t = u.out if isinstance(u.out, Tensor) else t
        return chain, t

    def _map_step(self, u, t: Tensor) -> Optional[Tuple[str, Any]]:
        vocab = t.shape[-1]
        if u.func in _CAST_METHODS or u.func in _TO:
            rest = list(u.args[1:]) + [v for k, v in u.kwargs.items() if k == "dtype"]
            dtype = _CAST_METHODS.get(u.func) if u.func in _CAST_METHODS else (
                rest[0] if len(rest) == 1 and isinstance(rest[0], torch.dtype) else None)
            if dtype not in _DIALECT_DTYPES or u.args[0] is not t:
                return None
            return ("cast", dtype)
        if u.func in _NEG:
            return ("scale", (-1.0, 1.0))
        if u.func in _DETACH and len(u.args) == 1 and not u.kwargs:
            return ("detach", None)
        if (u.func in _MUL or u.func in _DIV) and len(u.args) == 2 and not u.kwargs:
            a0, a1 = u.args
            other = a1 if a0 is t else a0
            number = _number(other)
            if number is None or number == 0.0:
                return None
            if u.func in _DIV:
                return ("scale", (1.0, number)) if a0 is t else None
            return ("scale", (number, 1.0))
        if u.func in _ADD and len(u.args) == 2 and u.kwargs.get("alpha", 1) == 1:
            a0, a1 = u.args
            other = a1 if a0 is t else a0
            if isinstance(other, Tensor) and other.dim() == 1 and other.shape[0] == vocab:
                return ("bias", other)
            return None
        if u.func in _TANH and len(u.args) == 1 and not u.kwargs:
            return ("tanh", u)
        if u.func in _VIEW and isinstance(u.out, Tensor) and u.out.dim() >= 1 \
                and u.out.shape[-1] == vocab:
            return ("view", None)
        return None

    def _fold(self, linear, chain) -> Tuple[Optional[Tensor], float, float]:
        """(bias, logit_scale, softcap) of the map chain: b·tanh(a·z) is
        softcap(a·b·z) with cap |b|; a bias must come before any scale."""
        bias = None
        if linear.func in _LINEAR:
            names = ("input", "weight", "bias")
            bound = dict(zip(names, linear.args))
            bound.update(linear.kwargs)
            bias = bound.get("bias")
        inner, outer = [1.0, 1.0], [1.0, 1.0]
        tanh_seen = False
        transformed: Optional[str] = None
        for (kind, arg), call in chain:
            if kind == "scale":
                side = outer if tanh_seen else inner
                side[0] *= arg[0]
                side[1] *= arg[1]
                transformed = transformed or "scaled"
            elif kind == "tanh":
                if tanh_seen:
                    raise self.error(f"lossjit.jit: {call.where()} is a second tanh on the "
                                     "logits; the fused loss soft-caps once")
                tanh_seen = True
                transformed = "soft-capped"
            elif kind == "bias":
                if bias is not None:
                    raise self.error("lossjit.jit: the logits get two bias adds")
                if transformed is not None:
                    raise self.error(
                        f"lossjit.jit: {call.where()}: a bias is added to logits already "
                        f"{transformed}; add the bias first (F.linear(x, w, b) * s)")
                bias = arg
        if tanh_seen:
            scale = (inner[0] * outer[0]) / (inner[1] * outer[1])
            cap = abs(outer[0] / outer[1])
        else:
            scale, cap = inner[0] / inner[1], 0.0
        if not (math.isfinite(scale) and scale != 0.0 and math.isfinite(cap)) or \
                (tanh_seen and cap == 0.0):
            raise self.error(f"lossjit.jit: the scale factors on the logits multiply to "
                             f"{scale!r} (cap {cap!r}); lossjit needs a finite nonzero scale")
        return bias, scale, cap

    # -- the part --------------------------------------------------------------

    def find(self) -> Optional[ReducePart]:
        found = self.streams()
        if not found:
            return None
        student, teacher_stream = self._student_and_teacher(found)
        linear, chain, logits = student
        bias, scale, cap = self._fold(linear, chain)
        x, w = self._operands(linear)
        vocab = logits.shape[-1]
        part = ReducePart(self.a, {linear.index} | {c.index for _, c in chain}, x, w, bias,
                          linear, scale, cap, vocab, lead=tuple(logits.shape[:-1]))
        self.part = part
        part.detached = self._cut(student, [x, w, bias])
        self.sym[id(logits)] = Sym.logits()
        if teacher_stream is not None:
            part.teacher = self._teacher(teacher_stream, student)
            t_linear, t_chain, t_logits = teacher_stream
            part.region |= {t_linear.index} | {c.index for _, c in t_chain}
            self.sym[id(t_logits)] = Sym.basis("u")
        unsupported: List[_Unsupported] = []
        for call in self.a.rec.calls:
            if call.index in part.region:
                continue
            ins = call.tensors_in()
            if not any(id(t) in self.sym for t in ins):
                self._track_rows(call)
                continue
            part.region.add(call.index)
            try:
                self._symbolic(call)
            except _Unsupported as error:
                unsupported.append(error)
                self._poison(call)
            except AlgebraError as error:
                self.algebra_errors.append((call, str(error)))
                self._poison(call)
        for t_id in self.a.output_ids:
            if t_id in self.sym:
                raise self.error(
                    "lossjit.jit: the function returns an [N, V] value computed from the "
                    "logits; lossjit never materializes the logits (reduce it over the "
                    "vocabulary first)")
        if unsupported:
            first = unsupported[0]
            raise self.error(
                f"lossjit.jit: {first.call.where()} {first.what}, so the logits would have to "
                f"be materialized.\n{SUPPORTED_STATS}")
        if self.algebra_errors:
            call, what = self.algebra_errors[0]
            raise self.error(f"lossjit.jit: {call.where()} {what}.\n{SUPPORTED_STATS}")
        if not part.exits:
            raise self.error("lossjit.jit: nothing reduces the logits over the vocabulary")
        for e in part.exits:
            for poly in (e.rows, e.smooth):
                if poly is None:
                    continue
                for atom in poly.atoms():
                    if atom[0] in ("row", "rowinv") and atom[1] not in part.rows:
                        raise RuntimeError("lossjit.jit: internal error: a row atom without "
                                           "its tensor")
        try:
            statistics_of([p for e in part.exits for p in (e.rows, e.smooth) if p is not None])
        except AlgebraError as error:
            raise self.error(f"lossjit.jit: the function {error}.\n{SUPPORTED_STATS}")
        return part

    def _operands(self, linear) -> Tuple[Tensor, Any]:
        """(hidden, weight [V, D] or its transposed view) of a linear layer."""
        if linear.func in _LINEAR:
            names = ("input", "weight", "bias")
            bound = dict(zip(names, linear.args))
            bound.update(linear.kwargs)
            x, w = bound["input"], bound["weight"]
        else:
            x, m = linear.args[0], linear.args[1]
            w = self.a._untranspose(m)
            if w is None:
                raise self.error(f"lossjit.jit: {linear.where()} multiplies by something "
                                 "other than a 2-d [D, V] weight")
        if x.dim() < 2:
            raise self.error(f"lossjit.jit: {linear.where()}: hidden must be [..., D] with "
                             "at least one leading dim")
        return x, w

    def _student_and_teacher(self, found):
        """The student stream and the teacher stream (or None) of the linear
        layers whose logits reach softmax-type ops: at most two, and with two,
        exactly one of them needs grad (the student); the other (its logits
        computed without grad: its operands do not require grad, or the
        function detached them) is the teacher."""
        sites = ", ".join(c.where() for c, _, _ in found)
        if len(found) == 1:
            return found[0], None
        if len(found) > 2:
            raise self.error(
                "lossjit.jit: one logit stream per function (and at most one teacher head): "
                f"softmax-type ops reach the outputs of {len(found)} linear layers, " + sites)
        grads = [stream for stream in found if stream[2].requires_grad]
        if len(grads) == 2:
            raise self.error(
                "lossjit.jit: one logit stream per function: softmax-type ops reach the "
                f"outputs of {sites}, and both require grad; a second head is fused only as "
                "a teacher, which is never differentiated (compute it under torch.no_grad() "
                "or .detach() it, or pass its weight without requires_grad)")
        if not grads:
            raise self.error(
                "lossjit.jit: one logit stream per function (and at most one teacher head): "
                f"softmax-type ops reach the outputs of {sites}, and neither requires grad, "
                "so both would be teachers; the student head's hidden states or weight must "
                "require grad when the function is first called (grad mode around the call "
                "does not matter)")
        student = grads[0]
        teacher = found[1] if student is found[0] else found[0]
        return student, teacher

    def _teacher(self, stream, student) -> "Teacher":
        linear, chain, logits = stream
        where = linear.where()
        for (kind, _), call in chain:
            if kind == "tanh":
                raise self.error(
                    f"lossjit.jit: {call.where()} soft-caps the teacher head's logits (of "
                    f"{where}); the sweep scales the teacher's logits (a temperature) but "
                    "soft-caps only the student's")
        bias, scale, cap = self._fold(linear, chain)
        x, w = self._operands(linear)
        s_logits = student[2]
        if logits.shape[-1] != s_logits.shape[-1] or \
                tuple(logits.shape[:-1]) != tuple(s_logits.shape[:-1]):
            raise self.error(
                f"lossjit.jit: the teacher head's logits (of {where}) have shape "
                f"{list(logits.shape)} but the student's (of {student[0].where()}) "
                f"{list(s_logits.shape)}; the heads share the vocabulary and the rows")
        device = x.device
        autocast = device.type in ("cpu", "cuda") and torch.is_autocast_enabled(device.type)
        s_x = self._operands(student[0])[0]
        if not autocast and x.dtype != s_x.dtype:
            raise self.error(
                f"lossjit.jit: the teacher head's hidden states (of {where}) are {x.dtype} "
                f"but the student's are {s_x.dtype}; one sweep stores both heads alike")
        return Teacher(x, w, bias, scale, linear, self._cut(stream, [x, w, bias]))

    @staticmethod
    def _cut(stream, operands) -> bool:
        """Whether the function itself cuts the gradient of a stream's logits:
        the linear layer or a map after it runs under torch.no_grad(), a
        .detach() in the map chain, or operands that require grad giving
        logits that do not."""
        linear, chain, logits = stream
        if not linear.grad_enabled or any(kind == "detach" or not call.grad_enabled
                                          for (kind, _), call in chain):
            return True
        values = [getattr(t, "m", t) for t in operands]
        return not logits.requires_grad and any(
            isinstance(t, Tensor) and t.requires_grad for t in values)

    def _poison(self, call) -> None:
        for t in call.tensors_out():
            if t.dim() >= 1 and t.shape[-1] == self.part.vocab and \
                    tuple(t.shape[:-1]) != ():
                self.sym[id(t)] = Sym()
            self.poison.add(id(t))

    def _track_rows(self, call) -> None:
        """Keeps the polynomial of an exit through the shape-only calls that
        bring it back to [..., 1] (so it can weight the logits again)."""
        src = call.args[0] if call.args else None
        if not isinstance(src, Tensor) or id(src) not in self.rowpoly:
            return
        if call.func in _SQUEEZE or call.func in _VIEW or call.func in _GETITEM:
            out = call.out
            if isinstance(out, Tensor) and _same_size(out, src):
                self.rowpoly[id(out)] = (self.rowpoly[id(src)][0], tuple(out.shape))

    # -- operands --------------------------------------------------------------

    def _operand(self, value: Any) -> Tuple[str, Any]:
        """("sym", Sym), ("coef", Poly) or ("column", Sym) of an operand."""
        if isinstance(value, Tensor) and id(value) in self.sym:
            return "sym", self.sym[id(value)]
        number = _number(value)
        if number is not None:
            return "coef", Poly.const(number)
        if not isinstance(value, Tensor):
            raise AlgebraError(f"combines the logits with {type(value).__name__}")
        lead, vocab = self.part.lead, self.part.vocab
        shape = tuple(value.shape)
        if id(value) in self.rowpoly:
            poly, _ = self.rowpoly[id(value)]
            if shape in (lead + (1,), ()) or all(s == 1 for s in shape):
                return "coef", poly
        constant = self._constant(value)
        if constant is not None:
            return "coef", Poly.const(constant)
        if value.numel() == 1:
            self.part.rows[id(value)] = value
            return "coef", Poly.atom(("row", id(value)))
        if shape == lead + (1,):
            self.part.rows[id(value)] = value
            return "coef", Poly.atom(("row", id(value)))
        if shape == lead + (vocab,) and len(lead) > 0 and math.prod(lead) > 1:
            if self.part.targets is not None and self.part.targets is not value:
                raise AlgebraError("combines the logits with a second [N, V] tensor (one per "
                                   "stream: the class probabilities)")
            self.part.targets = value
            return "column", Sym.basis("t")
        if shape[-1:] == (vocab,) and all(s == 1 for s in shape[:-1]):
            if self.part.column is not None and self.part.column is not value:
                raise AlgebraError("combines the logits with a second [V] tensor (one per "
                                   "stream: the class weights)")
            self.part.column = value
            return "column", Sym.basis("c")
        raise AlgebraError(
            f"combines the logits with a tensor of shape {list(shape)} (an [N, 1] row "
            f"value, a [V] column or a number is what one sweep can fold in)")

    def _constant(self, value: Tensor) -> Optional[float]:
        """The value of a one-element tensor the function makes from numbers
        alone (torch.tensor(beta), torch.log(1 - that), ...): a number of the
        trace, which is specialized on the Python values it was called with.
        A tensor argument, closure tensor or anything computed from one is
        not a constant (its value may change between calls), nor is what the
        fake trace cannot know (torch.rand(()), an empty tensor)."""
        if value.numel() != 1 or value.requires_grad or not value.is_floating_point():
            return None
        seen: set = set()
        stack = [value]
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            producer = self.a.producer(t)
            if producer is None or t.numel() != 1:
                return None
            stack.extend(producer.tensors_in())
        # The trace runs on fake tensors: a value is known only where the fake
        # mode propagated a constant (never for random or uninitialized ones).
        known = getattr(value, "constant", None) if isinstance(value, FakeTensor) else value
        if known is None:
            return None
        self.constant_eps = max(self.constant_eps, torch.finfo(value.dtype).eps)
        return float(known.reshape(()).item())

    def _mixture_tolerance(self) -> float:
        """How close a mixture's weights must sum to 1 (and its two sums'
        coefficients be β : 1 − β): float32 weights are off by their
        rounding, those made in a 16-bit dtype (TRL's beta tensor takes the
        logits' dtype) by its much larger one."""
        return max(MIXTURE_SUM_TOLERANCE, 4.0 * self.constant_eps)

    def _reduce_sum(self, sym: Sym) -> Poly:
        return reduce_sum(sym, self.part.vocab, self._mixture_tolerance())

    def _set_jsd_beta(self, beta: float) -> float:
        """Records the mixture weight β, the same for every mixture of the
        function (within the weights' rounding); returns the one recorded."""
        known = self.part.jsd_beta
        if known is not None:
            if abs(known - beta) > self._mixture_tolerance():
                raise AlgebraError(f"takes the log of a mixture with weight {beta!r} next to "
                                   f"one with {known!r} (one sweep has one jsd_beta)")
            return known
        self.part.jsd_beta = beta
        return beta

    def _as_sym(self, kind: str, value: Any) -> Sym:
        if kind == "sym" or kind == "column":
            return value
        return Sym.basis("1", value)

    def _labels(self, index: Tensor, call, per_row: int = 1) -> Tensor:
        """The label tensor behind a gather index [lead..., K]: [lead] (K = 1,
        through the views that add the trailing 1) or the index itself."""
        if per_row > 1:
            if tuple(index.shape[:-1]) != self.part.lead:
                raise AlgebraError(f"gathers with an index of shape {list(index.shape)}; "
                                   f"expected {list(self.part.lead)} + [K]")
            if self.part.labels is not None and self.part.labels is not index:
                raise AlgebraError("gathers at a second label tensor (one label tensor per "
                                   "stream)")
            self.part.labels, self.part.labels_per_row = index, per_row
            return index
        base = index
        while True:
            producer = self.a.producer(base)
            if producer is None or not (producer.func in _SQUEEZE or producer.func in _VIEW
                                        or producer.func in _GETITEM):
                break
            src = producer.args[0] if producer.args else None
            if not isinstance(src, Tensor) or not _same_size(src, base):
                break
            base = src
        if base.numel() != math.prod(self.part.lead):
            raise AlgebraError("gathers at labels whose shape does not match the rows")
        if self.part.labels_per_row > 1:
            raise AlgebraError("gathers one label per row next to a gather of several "
                               "(one label tensor per stream)")
        if self.part.labels is not None and self.part.labels is not base:
            raise AlgebraError("gathers at a second label tensor (one label per row per "
                               "stream is supported)")
        self.part.labels = base
        return base

    def _set_ignore(self, ignore_index: int, call) -> None:
        if self.part.ignore_index is not None and self.part.ignore_index != ignore_index:
            raise AlgebraError(f"uses ignore_index={ignore_index} next to another loss's "
                               f"ignore_index={self.part.ignore_index} on the same labels")
        self.part.ignore_index = ignore_index

    def _exit(self, call, poly: Poly, **kwargs) -> None:
        out = call.out
        self.part.exits.append(Exit(out, poly, **kwargs))
        if kwargs.get("kind", "plain") == "plain":
            self.rowpoly[id(out)] = (poly, tuple(out.shape))

    # -- the ops ---------------------------------------------------------------

    def _symbolic(self, call) -> None:
        f = call.func
        src = call.args[0] if call.args else None
        poisoned = any(id(t) in self.poison for t in call.tensors_in())
        if any(id(t) in self.stacks for t in call.tensors_in()):
            return self._stacked(call, poisoned)
        if f in _STACK:
            values = _arg(call, 0, "tensors")
            dim = _arg(call, 1, "dim", 0)
            if dim != 0 or not isinstance(values, (list, tuple)) or \
                    not all(isinstance(t, Tensor) and id(t) in self.sym for t in values):
                raise _Unsupported(call, "stacks the logits otherwise than along a new first "
                                         "dim of symbolic [N, V] values")
            if poisoned:
                return self._poison(call)
            self.stacks[id(call.out)] = [self.sym[id(t)] for t in values]
            self.sym[id(call.out)] = Sym()  # (only the stack's logsumexp reads it)
            return
        if f in _LOG_SOFTMAX or f in _SOFTMAX:
            s = self.sym[id(src)]
            dim = _arg(call, 1, "dim")
            if dim is None:  # F.log_softmax's implicit dim
                dim = 0 if src.dim() in (0, 1, 3) else 1
            if not _is_last_dim(dim, src.dim()):
                raise _Unsupported(call, f"works over dim {dim!r}, not the vocabulary (the "
                                         "last dim)")
            if poisoned:
                return self._poison(call)
            teacher = s.is_teacher_logits()
            if not s.is_logits() and not teacher:
                raise AlgebraError("takes the softmax of something other than the logits "
                                   "(scale or soft-cap the logits once, before any other "
                                   "use)")
            self.sym[id(call.out)] = (log_softmax_of(teacher) if f in _LOG_SOFTMAX
                                      else Sym.basis("q" if teacher else "p"))
            return
        if f in _LOGSUMEXP:
            dim = _arg(call, 1, "dim")
            if not _is_last_dim(dim, src.dim()):
                raise _Unsupported(call, f"works over dim {dim!r}, not the vocabulary")
            if poisoned:
                return self._poison(call)
            s = self.sym[id(src)]
            if s.is_teacher_logits():
                return self._exit(call, Poly.atom(("stat", "teacher_lse")))
            if not s.is_logits():
                raise AlgebraError("takes the logsumexp of something other than the logits")
            return self._exit(call, Poly.atom(("stat", "lse")))
        if f in _EXP:
            if poisoned:
                return self._poison(call)
            s = self.sym[id(src)]
            if s.is_teacher_log_softmax():
                self.sym[id(call.out)] = Sym.basis("q")
                return
            if not s.is_log_softmax():
                raise AlgebraError("exponentiates something other than the log-softmax of "
                                   "the logits")
            self.sym[id(call.out)] = Sym.basis("p")
            return
        if f in _LOG:
            if poisoned:
                return self._poison(call)
            s = self.sym[id(src)]
            beta = s.mixture_weight(self._mixture_tolerance())
            if beta is not None:  # log M, M = β·q + (1 − β)·p
                beta = self._set_jsd_beta(beta)
                self.sym[id(call.out)] = Sym.basis(mixture_basis(beta))
                return
            if not (s.is_basis("p") or s.is_basis("q")):
                raise AlgebraError("takes the log of something other than a softmax or the "
                                   "mixture β·softmax(teacher) + (1 − β)·softmax(student)")
            self.sym[id(call.out)] = log_softmax_of(s.is_basis("q"))
            return
        if f in _KL_DIV:
            return self._kl_div(call, poisoned)
        if f in _DETACH:
            if poisoned:
                return self._poison(call)
            s = self.sym[id(src)]
            if not _teacher_only(s):
                raise _Unsupported(call, "detaches a value computed from the student's logits "
                                         "(the sweep cannot stop the gradient of a part of "
                                         "its statistics; detach the [N] result instead)")
            self.sym[id(call.out)] = s  # the teacher is never differentiated anyway
            return
        if f in _CAST_METHODS or f in _TO:
            rest = list(call.args[1:]) + [v for k, v in call.kwargs.items() if k == "dtype"]
            other = [k for k in call.kwargs if k not in ("dtype", "copy", "non_blocking")]
            if f in _TO and (len(rest) != 1 or not isinstance(rest[0], torch.dtype) or other):
                raise _Unsupported(call, "changes more than the dtype of the logits")
            self.sym[id(call.out)] = self.sym[id(src)]
            return
        if f in _VIEW:
            out = call.out
            if out.shape[-1] != self.part.vocab:
                raise _Unsupported(call, "reshapes the vocabulary dim")
            self.sym[id(out)] = self.sym[id(src)]
            return
        if f in _NEG:
            self.sym[id(call.out)] = -self.sym[id(src)]
            return
        if f in _MUL or f in _DIV or f in _ADD or f in _SUB or f in _RSUB:
            return self._arith(call, poisoned)
        if f in _SUM or f in _MEAN:
            dim = _arg(call, 1, "dim")
            if dim is None and len(call.args) <= 1 and set(call.kwargs) <= {"dtype"}:
                # Over every element: the rows' sums over the vocabulary, summed
                # (TRL's jsd.sum() / jsd.size(0)); a mean over N·V elements.
                if poisoned:
                    return self._poison(call)
                poly = self._reduce_sum(self.sym[id(src)])
                divisor = float(src.numel()) if f in _MEAN else 1.0
                return self._exit(call, poly, kind="rowsum", divisor=divisor)
            if dim is None or not _is_last_dim(dim, src.dim()):
                raise _Unsupported(call, f"reduces over dim {dim!r}, not only the vocabulary "
                                         "(reduce over the last dim first)")
            if poisoned:
                return self._poison(call)
            poly = self._reduce_sum(self.sym[id(src)])
            if f in _MEAN:
                poly = poly.scale(1.0 / self.part.vocab)
            return self._exit(call, poly)
        if f in _GATHER:
            return self._gather(call, poisoned)
        if f in _NLL or f in _CE:
            return self._loss(call, poisoned)
        if f in _TANH:
            raise _Unsupported(call, "soft-caps logits that are also used before the cap; "
                                     "lossjit sweeps one logit stream, so apply the scales "
                                     "and the tanh before any other use of the logits")
        raise _Unsupported(call, "uses the [N, V] logits")

    def _stacked(self, call, poisoned: bool) -> None:
        """torch.logsumexp(torch.stack([log p + a, log q + b]), dim=0): the log
        of the mixture e^a·p + e^b·q when e^a + e^b = 1 (TRL's GKD writes
        the generalized JSD's mixture so)."""
        src = call.args[0] if call.args else None
        dim = _arg(call, 1, "dim")
        if call.func not in _LOGSUMEXP or id(src) not in self.stacks or \
                not (dim == 0 or dim == [0] or dim == (0,)) or _arg(call, 2, "keepdim", False):
            raise _Unsupported(call, "uses a stack of the logits otherwise than in "
                                     "torch.logsumexp over the stacked dim (dim=0)")
        if poisoned:
            return self._poison(call)
        weights = {False: 0.0, True: 0.0}
        for s in self.stacks[id(src)]:
            shifted = s.shifted_log_softmax()
            if shifted is None:
                raise AlgebraError("takes the logsumexp of a stack of something other than "
                                   "the log-softmaxes of the two heads plus numbers")
            teacher, c = shifted
            weights[teacher] += math.exp(c)
        beta, rest = weights[True], weights[False]
        # (Weights made in float32, as TRL's tensor beta is, sum to 1 within
        # its rounding: β is their normalized ratio.)
        if not (0.0 < beta < 1.0 and 0.0 < rest < 1.0 and
                abs(beta + rest - 1.0) <= self._mixture_tolerance()):
            raise AlgebraError(f"takes the log of the mixture {beta!r}·q + {rest!r}·p, whose "
                               "weights are not positive with sum 1 (within the rounding of "
                               "the dtype they were computed in)")
        beta = self._set_jsd_beta(beta / (beta + rest))
        self.sym[id(call.out)] = Sym.basis(mixture_basis(beta))

    def _arith(self, call, poisoned: bool) -> None:
        f = call.func
        if call.kwargs and set(call.kwargs) - {"alpha"}:
            raise _Unsupported(call, "is not a plain arithmetic op on the logits")
        if len(call.args) != 2:
            raise _Unsupported(call, "is not a plain arithmetic op on the logits")
        if poisoned:
            return self._poison(call)
        (ka, a), (kb, b) = self._operand(call.args[0]), self._operand(call.args[1])
        if f in _MUL:
            if ka == "sym" and kb == "sym" or "column" in (ka, kb):
                out = self._as_sym(ka, a) * self._as_sym(kb, b)
            else:
                out = a.times(b) if ka == "sym" else b.times(a)
        elif f in _DIV:
            if ka != "sym" or kb == "sym" or kb == "column":
                raise AlgebraError("divides by the logits or by a [V] tensor")
            number = b.constant()
            if number is not None:
                if number == 0.0:
                    raise AlgebraError("divides the logits by zero")
                out = a.times(Poly.const(1.0 / number))
            else:
                value = call.args[1]
                if id(value) in self.rowpoly:
                    raise AlgebraError("divides the logits by a statistic of the logits")
                self.part.rows[id(value)] = value
                out = a.times(Poly.atom(("rowinv", id(value))))
        else:
            alpha = _number(call.kwargs.get("alpha", 1))
            if alpha is None:
                raise _Unsupported(call, "has a tensor alpha")
            sa, sb = self._as_sym(ka, a), self._as_sym(kb, b)
            if f in _RSUB:
                out = sb - sa.times(Poly.const(alpha))
            elif f in _SUB:
                out = sa - sb.times(Poly.const(alpha))
            else:
                out = sa + sb.times(Poly.const(alpha))
        self.sym[id(call.out)] = out

    def _kl_div(self, call, poisoned: bool) -> None:
        """F.kl_div(input, target, reduction=, log_target=) as PyTorch defines
        it: pointwise target·(log target − input) (exp(target)·(target −
        input) with log_target), both over the vocabulary of the logits."""
        names = ("input", "target", "size_average", "reduce", "reduction", "log_target")
        bound = dict(zip(names, call.args))
        bound.update(call.kwargs)
        src, target = bound["input"], bound["target"]
        if bound.get("size_average") is not None or bound.get("reduce") is not None:
            raise _Unsupported(call, "uses the deprecated size_average/reduce (use reduction=)")
        if not (isinstance(target, Tensor) and id(target) in self.sym) or \
                not (isinstance(src, Tensor) and id(src) in self.sym):
            raise AlgebraError("takes a divergence against a tensor that is not a softmax of "
                               "the student or teacher logits")
        if poisoned:
            return self._poison(call)
        inp, tgt = self.sym[id(src)], self.sym[id(target)]
        if bound.get("log_target", False):
            if tgt.is_log_softmax() or tgt.is_teacher_log_softmax():
                prob = Sym.basis("q" if tgt.is_teacher_log_softmax() else "p")
            else:
                raise AlgebraError("takes a log-target that is not the log-softmax of the "
                                   "student or teacher logits")
            pointwise = prob * (tgt - inp)
        else:
            if not (tgt.is_basis("p") or tgt.is_basis("q")):
                raise AlgebraError("takes a target that is not the softmax of the student or "
                                   "teacher logits")
            pointwise = tgt * (log_softmax_of(tgt.is_basis("q")) - inp)
        reduction = str(bound.get("reduction", "mean"))
        if reduction == "none":
            self.sym[id(call.out)] = pointwise
            return
        rows = self._reduce_sum(pointwise)
        if reduction == "batchmean":
            divisor = float(src.shape[0]) if src.dim() > 0 else 1.0
        elif reduction == "mean":
            divisor = float(math.prod(self.part.lead) * self.part.vocab)
        elif reduction == "sum":
            divisor = 1.0
        else:
            raise _Unsupported(call, f"has reduction={reduction!r}")
        return self._exit(call, rows, kind="rowsum", divisor=divisor)

    def _gather(self, call, poisoned: bool) -> None:
        f = call.func
        src = call.args[0]
        name = getattr(f, "__name__", "")
        if name == "take_along_dim":
            index, dim = _arg(call, 1, "indices"), _arg(call, 2, "dim")
        else:
            dim, index = _arg(call, 1, "dim"), _arg(call, 2, "index")
        if not _is_last_dim(dim, src.dim()) or not isinstance(index, Tensor) or \
                index.dim() != src.dim():
            raise _Unsupported(call, "gathers other than along the vocabulary (the last dim)")
        if poisoned:
            return self._poison(call)
        per_row = int(index.shape[-1])
        self._labels(index, call, per_row)
        if self.part.ignore_index is not None and self.part.ignore_index >= 0:
            raise AlgebraError("gathers at labels another loss ignores with a class index "
                               f"(ignore_index={self.part.ignore_index})")
        return self._exit(call, reduce_gather(self.sym[id(src)]), per_label=per_row > 1)

    def _probability_loss(self, call, bound, poisoned: bool) -> None:
        """F.cross_entropy(logits, probabilities [N, V]) as PyTorch defines
        it: per row lse·Σ_j c_j t'_j − Σ_j c_j t'_j z_j, t' = (1 − ε)t + ε/V."""
        src, target = bound["input"], bound["target"]
        if call.func not in _CE:
            raise AlgebraError("takes class-probability targets in F.nll_loss")
        if src.dim() != 2 or tuple(target.shape) != tuple(src.shape):
            raise _Unsupported(call, "gets probability targets not shaped like the [N, V] "
                                     "logits")
        if poisoned:
            return self._poison(call)
        if int(bound.get("ignore_index", -100)) >= 0:
            raise AlgebraError("sets ignore_index with class-probability targets (PyTorch "
                               "refuses it too)")
        if not self.sym[id(src)].is_logits():
            raise AlgebraError("takes the cross-entropy of something other than the logits")
        weight = bound.get("weight")
        smoothing = float(bound.get("label_smoothing", 0.0) or 0.0)
        if id(target) in self.sym:  # the teacher's softmax (soft targets from a head)
            if weight is not None:
                raise AlgebraError("weights the classes of the teacher's probabilities (no "
                                   "statistic of one sweep gives Σ c q log p)")
            rows = -self._reduce_sum(self.sym[id(target)] * log_softmax_of(False))
            smooth = None
            if smoothing > 0.0:
                smooth = Poly.atom(("stat", "lse")).scale(float(self.part.vocab)) - \
                    Poly.atom(("stat", "logit_sum"))
            return self._exit(call, rows, kind="ce_prob", smooth=smooth,
                              label_smoothing=smoothing,
                              reduction=str(bound.get("reduction", "mean")),
                              vocab=self.part.vocab)
        if weight is not None and self._operand(weight)[0] != "column":
            raise AlgebraError("takes class weights that are not a [V] tensor")
        if self.part.targets is not None and self.part.targets is not target:
            raise AlgebraError("uses a second [N, V] tensor of class probabilities")
        self.part.targets = target
        suffix = "_c" if weight is not None else ""
        lse = Poly.atom(("stat", "lse"))
        rows = lse * Poly.atom(("tmass", weight is not None)) - \
            Poly.atom(("stat", "target_logit_sum" + suffix))
        smoothing = float(bound.get("label_smoothing", 0.0) or 0.0)
        smooth = None
        if smoothing > 0.0:
            total = Poly.atom(("csum",)) if weight is not None \
                else Poly.const(float(self.part.vocab))
            smooth = total * lse - Poly.atom(("stat", "logit_sum" + suffix))
        return self._exit(call, rows, kind="ce_prob", smooth=smooth,
                          label_smoothing=smoothing,
                          reduction=str(bound.get("reduction", "mean")),
                          vocab=self.part.vocab)

    def _loss(self, call, poisoned: bool) -> None:
        is_ce = call.func in _CE
        names = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                 "reduction") + (("label_smoothing",) if is_ce else ())
        bound = dict(zip(names, call.args))
        bound.update(call.kwargs)
        src, target = bound["input"], bound["target"]
        if bound.get("size_average") is not None or bound.get("reduce") is not None:
            raise _Unsupported(call, "uses the deprecated size_average/reduce (use reduction=)")
        if not isinstance(target, Tensor):
            raise AlgebraError("takes a target that is not a tensor")
        if target.is_floating_point():
            return self._probability_loss(call, bound, poisoned)
        if src.dim() != 2 or target.dim() != 1:
            raise _Unsupported(call, f"gets {src.dim()}-d input; flatten the logits to [N, V] "
                                     "(and the target to [N]) so the vocabulary is the class "
                                     "dim")
        if poisoned:
            return self._poison(call)
        s = self.sym[id(src)]
        ignore_index = int(bound.get("ignore_index", -100))
        reduction = str(bound.get("reduction", "mean"))
        weight = bound.get("weight")
        smoothing = float(bound.get("label_smoothing", 0.0) or 0.0)
        if weight is not None:
            kind, _ = self._operand(weight)
            if kind != "column":
                raise AlgebraError("takes class weights that are not a [V] tensor")
        self._labels(target, call)
        self._set_ignore(ignore_index, call)
        if not is_ce:
            return self._exit(call, -reduce_gather(s), kind="nll", ignore_index=ignore_index,
                              reduction=reduction, weighted=weight is not None)
        if not s.is_logits():
            raise AlgebraError("takes the cross-entropy of something other than the logits "
                               "(scale or soft-cap the logits once, before any other use)")
        lse = Poly.atom(("stat", "lse"))
        rows = lse - Poly.atom(("stat", "label_logit"))
        smooth = None
        if smoothing > 0.0:
            if weight is not None:
                smooth = Poly.atom(("csum",)) * lse - Poly.atom(("stat", "logit_sum_c"))
            else:
                smooth = lse.scale(float(self.part.vocab)) - Poly.atom(("stat", "logit_sum"))
        return self._exit(call, rows, kind="ce", smooth=smooth, label_smoothing=smoothing,
                          ignore_index=ignore_index, reduction=reduction,
                          weighted=weight is not None, vocab=self.part.vocab)


SUPPORTED_STATS = """lossjit.jit fuses, over the vocabulary of one linear layer's logits z
(F.linear(x, w[, b]) or x @ w.T, then casts, Python-number scales and one tanh soft-cap):
  - torch.logsumexp(z, -1), F.log_softmax(z, -1), F.softmax(z, -1), .exp() of the log-softmax
  - sums and means over the last dim of products of those with [N, 1] row values, a [V]
    tensor or numbers (e.g. -(p * logp).sum(-1), the entropy)
  - .gather(-1, y[..., None]) or .gather(-1, idx) with K indices per row (one index tensor)
  - F.cross_entropy(z, y, weight=, ignore_index=, reduction=, label_smoothing=) with
    class indices or class probabilities [N, V], and F.nll_loss(logp, y, ...)
  - products with one dense [N, V] tensor (class probabilities) summed over the
    vocabulary, e.g. -(probs * F.log_softmax(z, -1)).sum(-1)
  - a teacher head u (a second linear layer whose logits need no grad: no_grad,
    .detach() or frozen operands; own hidden size, bias and temperature, no
    soft-cap): its softmax q, log-softmax and logsumexp, forward and reverse KL by
    hand or F.kl_div(logp, logq, log_target=True), torch.log of a softmax, and
    F.cross_entropy(z, q); products q·z, q·u, p·u (not p·q, q·q or u·z)
  - the generalized JSD: the log of the mixture M = β·q + (1 − β)·p (torch.log of it,
    or torch.logsumexp(torch.stack([logp + log(1 − β), logq + log β]), 0) as TRL
    writes it) times p or q summed over the vocabulary: β·KL(q‖M) + (1 − β)·KL(p‖M),
    or either KL to the mixture alone
Any torch ops on [N]-shaped values (masks, normalizers, per-sequence sums) run eagerly,
and every loss over the same logits shares one sweep. Not supported yet:
max/argmax/sort over V."""
