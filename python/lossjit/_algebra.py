"""The row-statistics algebra behind ``@lossjit.jit`` (issue 14).

A value over the vocabulary axis of the logits z (never materialized) is
held symbolically as ``Σ_b coef_b · basis_b(j)`` over a small set of column
functions, with [N]-shaped coefficients:

  ``1``   1            ``z``  z_j             ``p``   softmax(z)_j
  ``pz``  p_j z_j      ``c``  c_j (a [V] tensor, e.g. class weights)
  ``cz``  c_j z_j      ``t``  t_j (a dense [N, V] tensor: class probabilities)
  ``tz``  t_j z_j

and, with a teacher head (logits u, never differentiated, q = softmax(u)):

  ``u``   u_j            ``q``  q_j              ``qz``  q_j z_j
  ``qu``  q_j u_j        ``pu`` p_j u_j

so ``log_softmax(z) = z − lse·1``, ``softmax(z)·log_softmax(z) = pz − lse·p``,
``log_softmax(u) = u − Lt·1`` (Lt = teacher_lse) and the forward KL
``q·(log q − log p) = qu − Lt·q − qz + lse·q``.
A reduction over the vocabulary maps each basis to row statistics of one
kernel sweep (``loss.vocab_reduce``):

  ===========  ================  =========================
  basis        Σ_j               at the label y (gather)
  ===========  ================  =========================
  1            V                 1
  z            logit_sum         label_logit
  p            1                 exp(label_logit − lse)
  pz           lse − entropy     exp(label_logit − lse)·label_logit
  c            Σ c               c_y
  cz           logit_sum (c)     c_y · label_logit
  t            Σ t               t_y
  tz           target_logit_sum  t_y · label_logit
  u            (none: an error)  (none: an error)
  q            1                 (none: an error)
  qz           lse − cross_entropy            (none)
  qu           teacher_lse − teacher_entropy  (none)
  pu           teacher_lse − reverse_cross_entropy  (none)
  ===========  ================  =========================

(cross_entropy X = −Σ q log p, teacher_entropy Ht = −Σ q log q,
reverse_cross_entropy R = −Σ p log q, all from the one sweep over both
heads' logit tiles; the forward KL Σ q log(q/p) reduces to X − Ht and the
reverse KL Σ p log(p/q) to R − entropy, exactly.) Any other product of
teacher and student columns (p·q, q·q, u·z, a [V] or [N, V] tensor times a
teacher column) has no statistic and is an AlgebraError naming both. The
log of the mixture M = β q + (1 − β) p is one more column, ``m:β``, whose
products ``pm:β`` and ``qm:β`` sum to −entropy − mixture_kl and
(−β·teacher_entropy + (1 − β)·mixture_kl − jsd)/β (the dependent sums of a
second sweep).

Coefficients and reductions are polynomials (:class:`Poly`) over atoms —
the statistics, [N]-shaped tensors the function computes eagerly, and a few
derived values — with float coefficients, combined symbolically before
anything is evaluated (``Σ (pz − lse·p) = −entropy`` exactly, never
``(lse − H) − lse`` rounded). Evaluation is torch on the statistics, so
autograd hands the kernel's derived backward one adjoint per statistic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor

#: Atom kinds: ("stat", name), ("row", tensor id), ("rowinv", tensor id),
#: ("p_label",), ("csum",), ("c_label",).
Atom = Tuple[Any, ...]
Monomial = Tuple[Atom, ...]


#: The statistics that read the teacher stream (see lossjit._reduce).
TEACHER_STATISTICS = ("teacher_lse", "teacher_entropy", "cross_entropy",
                      "reverse_cross_entropy", "mixture_kl", "mixture_p2", "jsd")

#: How close the two coefficients of a mixture's sums must be to β : 1 − β
#: (relatively) to be the generalized JSD: float32 rounding of the weights.
_MIXTURE_RTOL = 1e-6
#: How close a mixture's two weights must sum to 1: weights computed in
#: float32 (TRL's tensor beta) are off by its rounding.
MIXTURE_SUM_TOLERANCE = 1e-6


class AlgebraError(ValueError):
    """An operation the algebra cannot express (the caller names the op)."""


@dataclass
class Poly:
    """Σ coeff · Π atoms, with float coefficients (monomials sorted)."""

    terms: Dict[Monomial, float] = field(default_factory=dict)

    @staticmethod
    def const(value: float) -> "Poly":
        return Poly({(): float(value)} if value != 0 else {})

    @staticmethod
    def atom(atom: Atom) -> "Poly":
        return Poly({(atom,): 1.0})

    def is_zero(self) -> bool:
        return not self.terms

    def constant(self) -> Optional[float]:
        """The value when the polynomial is a plain number, else None."""
        if not self.terms:
            return 0.0
        if set(self.terms) == {()}:
            return self.terms[()]
        return None

    def __add__(self, other: "Poly") -> "Poly":
        out = dict(self.terms)
        for mono, coeff in other.terms.items():
            value = out.get(mono, 0.0) + coeff
            if value == 0.0:
                out.pop(mono, None)
            else:
                out[mono] = value
        return Poly(out)

    def scale(self, factor: float) -> "Poly":
        if factor == 0.0:
            return Poly()
        return Poly({m: c * factor for m, c in self.terms.items()})

    def __neg__(self) -> "Poly":
        return self.scale(-1.0)

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        out = Poly()
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                out = out + Poly({tuple(sorted(m1 + m2, key=repr)): c1 * c2})
        return out

    def atoms(self) -> Iterable[Atom]:
        for mono in self.terms:
            yield from mono

    def evaluate(self, env: Callable[[Atom], Tensor], like: Tensor) -> Tensor:
        """The value as a tensor (atoms from `env`, shaped like `like`),
        the monomials summed in a fixed order."""
        total: Optional[Tensor] = None
        for mono in sorted(self.terms, key=repr):
            coeff = self.terms[mono]
            value: Optional[Tensor] = None
            for atom in mono:
                factor = env(atom)
                value = factor if value is None else value * factor
            if value is None:
                value = torch.full_like(like, coeff)
            elif coeff != 1.0:
                value = value * coeff
            total = value if total is None else total + value
        if total is None:
            return torch.zeros_like(like)
        return total


BASES = ("1", "z", "p", "pz", "c", "cz", "t", "tz", "u", "q", "qz", "qu", "pu")
#: basis × basis for the products the algebra can reduce (absent: cannot).
_PRODUCT = {
    ("1", "1"): "1", ("1", "z"): "z", ("1", "p"): "p", ("1", "pz"): "pz",
    ("1", "c"): "c", ("1", "cz"): "cz", ("z", "p"): "pz", ("z", "c"): "cz",
    ("1", "t"): "t", ("1", "tz"): "tz", ("z", "t"): "tz",
    # The teacher stream: u its logits, q = softmax(u).
    ("1", "u"): "u", ("1", "q"): "q", ("1", "qz"): "qz", ("1", "qu"): "qu",
    ("1", "pu"): "pu", ("z", "q"): "qz", ("u", "q"): "qu", ("u", "p"): "pu",
}
_PRODUCT.update({(b, a): c for (a, b), c in list(_PRODUCT.items())})


def mixture_basis(beta: float) -> str:
    """The column function log M_j of the mixture M = β q + (1 − β) p: a
    basis of its own per β (its products with p and q are "pm:β", "qm:β")."""
    return f"m:{beta!r}"


def mixture_beta(basis: str) -> Optional[float]:
    """β of a mixture basis ("m:β", "pm:β", "qm:β"), else None."""
    head, _, beta = basis.partition(":")
    return float(beta) if beta and head in ("m", "pm", "qm") else None


def _product(b1: str, b2: str) -> Optional[str]:
    known = _PRODUCT.get((b1, b2))
    if known is not None:
        return known
    for a, b in ((b1, b2), (b2, b1)):
        beta = mixture_beta(b)
        if beta is None:
            continue
        head = b.partition(":")[0]
        if a == "1":
            return b
        if head == "m" and a in ("p", "q"):
            return f"{a}m:{beta!r}"
    return None


def describe(basis: str) -> str:
    beta = mixture_beta(basis)
    if beta is None:
        return _DESCRIBE[basis]
    head = basis.partition(":")[0]
    what = f"log of the mixture {beta!r}·q + {1 - beta!r}·p"
    return {"m": f"the {what}", "pm": f"the softmax times the {what}",
            "qm": f"the teacher softmax times the {what}"}[head]


@dataclass
class Sym:
    """A symbolic [..., V] value: Σ_b coef_b · basis_b."""

    parts: Dict[str, Poly] = field(default_factory=dict)

    @staticmethod
    def logits() -> "Sym":
        return Sym({"z": Poly.const(1.0)})

    @staticmethod
    def basis(name: str, coef: Optional[Poly] = None) -> "Sym":
        return Sym({name: Poly.const(1.0) if coef is None else coef})

    def clean(self) -> "Sym":
        return Sym({b: c for b, c in self.parts.items() if not c.is_zero()})

    def __add__(self, other: "Sym") -> "Sym":
        out = dict(self.parts)
        for b, c in other.parts.items():
            out[b] = out[b] + c if b in out else c
        return Sym(out).clean()

    def __neg__(self) -> "Sym":
        return Sym({b: -c for b, c in self.parts.items()})

    def __sub__(self, other: "Sym") -> "Sym":
        return self + (-other)

    def times(self, coef: Poly) -> "Sym":
        return Sym({b: c * coef for b, c in self.parts.items()}).clean()

    def __mul__(self, other: "Sym") -> "Sym":
        out = Sym()
        for b1, c1 in self.parts.items():
            for b2, c2 in other.parts.items():
                b = _product(b1, b2)
                if b is None:
                    raise AlgebraError(
                        f"multiplies {describe(b1)} by {describe(b2)} over the vocabulary "
                        "(no statistic of one sweep gives their sum)")
                out = out + Sym({b: c1 * c2})
        return out

    def _is(self, want: Dict[str, Poly]) -> bool:
        return set(self.parts) == set(want) and all(
            self.parts[b].terms == want[b].terms for b in want)

    def is_log_softmax(self) -> bool:
        """Whether this is z − lse (so exp() of it is p)."""
        return self._is({"z": Poly.const(1.0), "1": -Poly.atom(("stat", "lse"))})

    def is_teacher_log_softmax(self) -> bool:
        """Whether this is u − Lt (so exp() of it is q)."""
        return self._is({"u": Poly.const(1.0), "1": -Poly.atom(("stat", "teacher_lse"))})

    def is_logits(self) -> bool:
        return self._is({"z": Poly.const(1.0)})

    def is_teacher_logits(self) -> bool:
        return self._is({"u": Poly.const(1.0)})

    def is_basis(self, name: str) -> bool:
        """Whether this is exactly one column function (e.g. "p": softmax)."""
        return self._is({name: Poly.const(1.0)})

    def mixture_weight(self, tolerance: float = MIXTURE_SUM_TOLERANCE) -> Optional[float]:
        """β when this is the mixture β·q + (1 − β)·p of the two softmaxes
        (numbers, 0 < β < 1, the weights summing to 1 within `tolerance`),
        else None."""
        if set(self.parts) != {"p", "q"}:
            return None
        beta, rest = self.parts["q"].constant(), self.parts["p"].constant()
        if beta is None or rest is None or not (0.0 < beta < 1.0 and 0.0 < rest < 1.0):
            return None
        if abs(beta + rest - 1.0) > tolerance:
            return None
        return beta / (beta + rest)

    def shifted_log_softmax(self) -> Optional[Tuple[bool, float]]:
        """(teacher, c) when this is a log-softmax plus a number c."""
        for teacher in (False, True):
            base = log_softmax_of(teacher)
            rest = self - base
            if set(rest.parts) <= {"1"}:
                c = rest.parts["1"].constant() if rest.parts else 0.0
                if c is not None:
                    return teacher, c
        return None


def log_softmax_of(teacher: bool) -> Sym:
    """log_softmax of the student (z − lse) or the teacher (u − Lt) logits."""
    if teacher:
        return Sym({"u": Poly.const(1.0), "1": -Poly.atom(("stat", "teacher_lse"))})
    return Sym({"z": Poly.const(1.0), "1": -Poly.atom(("stat", "lse"))})


_DESCRIBE = {"1": "a constant", "z": "the logits", "p": "the softmax",
             "pz": "softmax·logits", "c": "a [V] tensor", "cz": "[V] tensor·logits",
             "t": "an [N, V] tensor", "tz": "[N, V] tensor·logits",
             "u": "the teacher logits", "q": "the teacher softmax",
             "qz": "teacher softmax·logits", "qu": "teacher softmax·teacher logits",
             "pu": "softmax·teacher logits"}


def _apply(sym: Sym, rules: Dict[str, Poly], unsupported: str) -> Poly:
    """Σ_b coef_b · rules[b]; a basis without a rule is an AlgebraError
    (`unsupported` with the basis described at {})."""
    out = Poly()
    for b, coef in sym.parts.items():
        if b not in rules:
            raise AlgebraError(unsupported.format(describe(b)))
        out = out + coef * rules[b]
    return out


def _close(a: Poly, b: Poly, rtol: float) -> bool:
    if set(a.terms) != set(b.terms):
        return False
    return all(abs(a.terms[m] - b.terms[m]) <= rtol * max(abs(a.terms[m]), abs(b.terms[m]))
               for m in a.terms)


def _reduce_mixture(sym: Sym, rtol: float) -> Tuple[Sym, Poly]:
    """The mixture's part of Σ_j, from the statistics of the dependent
    sweep: Σ p log M = −entropy − mixture_kl and Σ q log M =
    (−β·teacher_entropy + (1 − β)·mixture_kl − jsd) / β (mixture_kl =
    KL(p‖M), jsd = β KL(q‖M) + (1 − β) KL(p‖M)). The β-mixture of the two,
    c·(β Σ q log M + (1 − β) Σ p log M), is c·(−jsd − β·teacher_entropy −
    (1 − β)·entropy) exactly (mixture_kl cancels: it is not formed from
    rounded coefficients). Returns the rest of `sym` and the mixture's
    polynomial."""
    rest = Sym({b: c for b, c in sym.parts.items() if mixture_beta(b) is None})
    mixture = {b: c for b, c in sym.parts.items() if mixture_beta(b) is not None}
    if not mixture:
        return rest, Poly()
    betas = {mixture_beta(b) for b in mixture}
    if len(betas) != 1:
        raise AlgebraError("sums over mixtures of two different weights (one sweep has one "
                           "jsd_beta)")
    beta = betas.pop()
    if set(mixture) - {f"qm:{beta!r}", f"pm:{beta!r}"}:
        raise AlgebraError(f"sums the log of the mixture M = {beta!r}·q + {1 - beta!r}·p by "
                           "itself (no statistic of the sweeps gives Σ log M)")
    qm, pm = mixture.get(f"qm:{beta!r}", Poly()), mixture.get(f"pm:{beta!r}", Poly())
    stat = lambda name: Poly.atom(("stat", name))  # noqa: E731
    if not qm.is_zero() and not pm.is_zero() and \
            _close(qm.scale((1.0 - beta) / beta), pm, rtol):
        # c·(β·qm + (1 − β)·pm): c = the two coefficients' sum.
        jsd = -stat("jsd") - stat("teacher_entropy").scale(beta) - \
            stat("entropy").scale(1.0 - beta)
        return rest, (qm + pm) * jsd
    p_log_m = -stat("entropy") - stat("mixture_kl")
    q_log_m = (stat("mixture_kl").scale(1.0 - beta) - stat("teacher_entropy").scale(beta) -
               stat("jsd")).scale(1.0 / beta)
    return rest, qm * q_log_m + pm * p_log_m


def reduce_sum(sym: Sym, vocab: int, mixture_rtol: float = _MIXTURE_RTOL) -> Poly:
    """Σ_j over the vocabulary (`mixture_rtol`: how close a mixture's two
    coefficients must be to β : 1 − β)."""
    sym, mixture = _reduce_mixture(sym, mixture_rtol)
    rules = {
        "1": Poly.const(float(vocab)),
        "z": Poly.atom(("stat", "logit_sum")),
        "p": Poly.const(1.0),
        "pz": Poly.atom(("stat", "lse")) - Poly.atom(("stat", "entropy")),
        "c": Poly.atom(("csum",)),
        "cz": Poly.atom(("stat", "logit_sum_c")),
        "t": Poly.atom(("tsum",)),
        "tz": Poly.atom(("stat", "target_logit_sum")),
        "q": Poly.const(1.0),
        "qz": Poly.atom(("stat", "lse")) - Poly.atom(("stat", "cross_entropy")),
        "qu": Poly.atom(("stat", "teacher_lse")) - Poly.atom(("stat", "teacher_entropy")),
        "pu": Poly.atom(("stat", "teacher_lse")) - Poly.atom(("stat",
                                                              "reverse_cross_entropy")),
    }
    return mixture + _apply(sym, rules, "sums {} over the vocabulary (no statistic of one "
                                        "sweep gives that sum)")


def reduce_gather(sym: Sym) -> Poly:
    """The value at each row's label."""
    zy = Poly.atom(("stat", "label_logit"))
    py = Poly.atom(("p_label",))
    ty = Poly.atom(("t_label",))
    rules = {"1": Poly.const(1.0), "z": zy, "p": py, "pz": py * zy,
             "c": Poly.atom(("c_label",)), "cz": Poly.atom(("c_label",)) * zy,
             "t": ty, "tz": ty * zy}
    return _apply(sym, rules, "gathers {} at the labels (the sweep reads the teacher only "
                              "through its statistics over the vocabulary)")


def statistics_of(polys: Iterable[Poly]) -> Tuple[List[str], bool]:
    """The kernel statistics the polynomials read, in the kernel's order, and
    whether the sums are weighted by the [V] tensor (the kernel weights every
    sum, or none). Entropy brings lse (its gradient reads it); p_label reads
    both lse and label_logit."""
    names = set()
    weighted = unweighted = False
    for poly in polys:
        for atom in poly.atoms():
            if atom[0] == "stat":
                name = atom[1]
                if name in ("logit_sum_c", "target_logit_sum_c"):
                    weighted = True
                    name = name[:-2]
                elif name in ("logit_sum", "target_logit_sum"):
                    unweighted = True
                names.add(name)
            elif atom[0] == "p_label":
                names |= {"lse", "label_logit"}
            elif atom[0] == "c_label":
                pass
    if weighted and unweighted:
        raise AlgebraError("sums the logits over the vocabulary both with and without the "
                           "weights of a [V] tensor; one sweep carries one of them")
    if "entropy" in names:
        names.add("lse")
    if names & set(TEACHER_STATISTICS):
        # The cross-entropies' gradients read both lse values; lse keeps a
        # student statistic in every sweep.
        names.add("lse")
        if names & {"cross_entropy", "reverse_cross_entropy", "jsd"}:
            names.add("teacher_lse")
        if "jsd" in names:
            names.add("mixture_kl")  # jsd's gradient reads it
        if "mixture_kl" in names:
            names |= {"teacher_lse", "mixture_p2"}  # mixture_kl's reads them
    order = ["lse", "label_logit", "logit_sum", "entropy", "target_logit_sum"] + \
        list(TEACHER_STATISTICS)
    return [n for n in order if n in names], weighted
