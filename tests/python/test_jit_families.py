"""@lossjit.jit over compositions of row statistics (issue 14): losses written
in plain torch, unedited, fused into one vocabulary sweep (loss.vocab_reduce)
plus an eager [N]-shaped epilogue, against the same function run eagerly in
float64 — forward and gradients — and bitwise across repeats.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lossjit
from lossjit import _kernels
from conftest import make_inputs

# --- The losses, as users write them -------------------------------------------------


def ce_smoothing_weights(hidden, weight, target, class_weights):
    return F.cross_entropy(F.linear(hidden, weight), target, weight=class_weights,
                           label_smoothing=0.1)


def ce_with_z_loss(hidden, weight, target, class_weights):
    logits = F.linear(hidden, weight)
    lse = torch.logsumexp(logits, dim=-1)
    return F.cross_entropy(logits, target) + 1e-2 * lse.square().mean()


def focal(hidden, weight, target, class_weights, gamma=2.0):
    logp = F.log_softmax(F.linear(hidden, weight), dim=-1)
    logpt = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    pt = logpt.exp()
    counted = target != -100
    return (-((1 - pt) ** gamma) * logpt)[counted].mean()


def entropy_regularized_ce(hidden, weight, target, class_weights):
    logits = F.linear(hidden, weight).float()
    logp = F.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return F.nll_loss(logp, target) - 0.05 * entropy.mean()


def grpo_token_objective(hidden, weight, target, class_weights):
    # Per-token log-prob at a sampling temperature, a clipped importance
    # ratio against the old policy and an advantage per token.
    tokens = target.clamp(min=0)
    logp = torch.log_softmax(F.linear(hidden, weight) / 0.7, dim=-1)
    token_logp = logp.gather(-1, tokens[:, None])[:, 0]
    old = token_logp.detach() - 0.05
    advantages = torch.linspace(-1.0, 1.0, tokens.numel(), dtype=token_logp.dtype)
    ratio = torch.exp(token_logp - old)
    objective = torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    mask = (target != -100).to(objective.dtype)
    return -(objective * mask).sum() / mask.sum()


def dpo(hidden, weight, target, class_weights, beta=0.1):
    # Rows are [chosen sequences; rejected sequences] of 3 sequences each:
    # per-sequence log-prob sums, then the DPO logistic loss (no reference
    # model: its log-probs are 0 here).
    logp = F.log_softmax(F.linear(hidden, weight), dim=-1)
    tokens = target.clamp(min=0)
    token_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    mask = (target != -100).to(token_logp.dtype)
    seq = (token_logp * mask).view(2, 3, -1).sum(-1)
    return -F.logsigmoid(beta * (seq[0] - seq[1])).mean()


def ce_zloss_entropy_metric(hidden, weight, target, class_weights):
    # Several losses over the same logits: one sweep.
    logits = F.linear(hidden, weight)
    ce = F.cross_entropy(logits, target, reduction="sum")
    z = torch.logsumexp(logits, -1)
    probs = F.softmax(logits, dim=-1)
    entropy = -(probs * F.log_softmax(logits, dim=-1)).sum(-1)
    return ce + 1e-3 * (z ** 2).sum(), entropy.detach().mean()


def masked_lse_penalty(hidden, weight, target, class_weights):
    # Boolean-mask indexing on an [N] statistic.
    logits = F.linear(hidden, weight)
    lse = torch.logsumexp(logits, dim=-1)
    mask = target != -100
    return F.cross_entropy(logits, target) + 1e-2 * lse[mask].pow(2).mean()


def weighted_logit_sum(hidden, weight, target, class_weights):
    # Σ_j c_j log p_j per row (a smoothing term written by hand).
    logp = F.log_softmax(F.linear(hidden, weight), dim=-1)
    return -(logp * class_weights).sum(-1).mean()


def softcapped_log_prob_and_entropy(hidden, weight, target, class_weights):
    logits = 30.0 * torch.tanh(F.linear(hidden, weight) / 30.0)
    logp = logits.log_softmax(-1)
    tokens = target.clamp(min=0)
    return logp.gather(-1, tokens[:, None]).sum(), (-(logp.exp() * logp).sum(-1)).sum()


def topk_kd(hidden, weight, target, class_weights, k=4):
    # Top-K distillation from stored teacher log-probs (here made from a
    # fixed pseudo-teacher over the rows' labels), written in plain torch.
    n, v = target.shape[0], weight.shape[0]
    indices = (target.clamp(min=0)[:, None] + torch.arange(k)[None, :] * 7) % v
    teacher = torch.log_softmax(torch.linspace(2.0, -1.0, k, dtype=torch.float32), -1)
    logp = F.log_softmax(F.linear(hidden, weight) / 2.0, dim=-1)
    student = logp.gather(-1, indices)
    q = teacher.exp().to(student.dtype)
    return (q * (teacher.to(student.dtype) - student)).sum(-1).mean()


def _soft_targets(target, v):
    # Class probabilities made eagerly (a smoothed one-hot of the labels).
    return F.one_hot(target.clamp(min=0), v).to(torch.float32) * 0.8 + 0.2 / v


def soft_target_ce(hidden, weight, target, class_weights):
    # Probability targets with class weights and label smoothing on top, as
    # F.cross_entropy defines them.
    probs = _soft_targets(target, weight.shape[0])
    return F.cross_entropy(F.linear(hidden, weight), probs, weight=class_weights,
                           label_smoothing=0.1, reduction="sum")


def soft_target_by_hand(hidden, weight, target, class_weights):
    # The same family written by hand, next to an lse penalty in one sweep.
    probs = _soft_targets(target, weight.shape[0])
    logits = F.linear(hidden, weight)
    ce = -(probs * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    return ce + 1e-3 * torch.logsumexp(logits, -1).square().mean()


LOSSES = [topk_kd, soft_target_ce, soft_target_by_hand, ce_smoothing_weights, ce_with_z_loss, focal, entropy_regularized_ce,
          grpo_token_objective, dpo, ce_zloss_entropy_metric, masked_lse_penalty,
          weighted_logit_sum, softcapped_log_prob_and_entropy]


def _inputs(device, dtype, seed=0):
    h, w, y, _ = make_inputs(device, dtype, n=18, v=41, d=20, ignored=(2, 9), seed=seed,
                             scale=2.0)
    g = torch.Generator().manual_seed(seed + 1)
    cw = (torch.rand(w.shape[0], generator=g) + 0.5).to(device)
    return h, w, y, cw


def _outputs(value):
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=[f.__name__ for f in LOSSES])
def test_plain_torch_losses_fuse_and_match_eager(device, loss_fn):
    _check_against_float64(device, loss_fn, torch.float32)


def entropy_bonus_bf16(hidden, weight, target, class_weights):
    logits = F.linear(hidden, weight).float()
    logp = F.log_softmax(logits, dim=-1)
    token = logp.gather(-1, target.clamp(min=0)[:, None])[:, 0]
    entropy = -(logp.exp() * logp).sum(-1)
    return -(token.mean() + 0.01 * entropy.mean()), torch.logsumexp(logits, -1).mean()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_storage_keeps_float32_statistics(device, dtype):
    """16-bit hidden states and weight, logits cast to float32 as LLM code
    does: the fused statistics are float32 from the rounded inputs, so the
    result is as close to float64 as the float32 path."""
    _check_against_float64(device, entropy_bonus_bf16, dtype)


def test_outputs_keep_the_eager_dtype():
    """Without a cast, torch's own bf16 path returns bf16 values; so does the
    fused one (its statistics are float32, rounded once at the end)."""
    h, w, y, cw = _inputs("cpu", torch.bfloat16)
    got = lossjit.jit(ce_with_z_loss)(h, w, y, cw)
    want = ce_with_z_loss(h, w, y, cw)
    assert got.dtype == want.dtype == torch.bfloat16
    exact = ce_with_z_loss(h.double(), w.double(), y, cw.double())
    assert abs(float(got) - float(exact)) <= abs(float(want) - float(exact)) + 1e-2


def _check_against_float64(device, loss_fn, dtype):
    h, w, y, cw = _inputs(device, dtype)
    fused = lossjit.jit(loss_fn)
    hf, wf = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    got = _outputs(fused(hf, wf, y, cw))
    h64, w64 = h.double().requires_grad_(True), w.double().requires_grad_(True)
    want = _outputs(loss_fn(h64, w64, y, cw.double()))
    assert len(got) == len(want)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.double(), r.double(), rtol=2e-5, atol=2e-5)
    grads = torch.autograd.grad(got[0], [hf, wf])
    ref = torch.autograd.grad(want[0], [h64, w64])
    tol = 5e-5 if dtype == torch.float32 else 1.6e-2
    for g, r in zip(grads, ref):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), r.to(dtype).double(), rtol=tol,
                                   atol=tol * float(r.abs().max()))


#: Losses that build [N, V] class probabilities themselves (eagerly, as the
#: user wrote them): only the logits must never be formed.
MAKES_ITS_OWN_TARGETS = {soft_target_ce, soft_target_by_hand}


@pytest.mark.parametrize("loss_fn", LOSSES, ids=[f.__name__ for f in LOSSES])
def test_fused_losses_never_form_the_logits_and_share_one_sweep(loss_fn):
    """At run time no aten op produces an [N, V] value (a dispatch-level
    mode sees every op, the replayed eager ones included): no linear layer
    forms the logits, and the loss needs no second sweep."""
    from torch.utils._python_dispatch import TorchDispatchMode

    formed = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == 41 \
                        and t.numel() > 41:
                    formed.append(str(func))
            return out

    h, w, y, cw = _inputs("cpu", torch.float32)
    fused = lossjit.jit(loss_fn)
    fused(h, w, y, cw)  # trace and compile
    before = _kernels.cache_info()["vocab_reduce"]
    with Watch():
        fused(h, w, y, cw)
    products = [f for f in formed if any(m in f for m in ("mm", "matmul", "linear"))]
    assert products == [], f"the logits were formed by {products}"
    if loss_fn not in MAKES_ITS_OWN_TARGETS:
        assert formed == [], f"[N, V] values were formed by {formed}"
    assert _kernels.cache_info()["vocab_reduce"] == before


def test_the_watch_sees_a_materialized_linear():
    """The check above can fail: the same mode catches eager logits."""
    from torch.utils._python_dispatch import TorchDispatchMode

    formed = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[-1] == 41:
                formed.append(str(func))
            return out

    h, w, y, cw = _inputs("cpu", torch.float32)
    with Watch():
        ce_with_z_loss(h, w, y, cw)
    assert any("mm" in f for f in formed)


def test_bitwise_repeats_and_specialization_cache():
    h, w, y, cw = _inputs("cpu", torch.bfloat16)
    fused = lossjit.jit(grpo_token_objective)
    runs = []
    for _ in range(3):
        hf, wf = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        loss = fused(hf, wf, y, cw)
        runs.append((loss.detach(),) + torch.autograd.grad(loss, [hf, wf]))
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            assert torch.equal(a, b)
    assert fused.specializations == 1


def test_plain_cross_entropy_still_uses_its_own_op():
    """The template path (loss.linear_cross_entropy) keeps its bits: a plain
    F.cross_entropy is not routed through the statistics."""
    h, w, y, _ = _inputs("cpu", torch.float32)

    @lossjit.jit
    def plain(h, w, y):
        return F.cross_entropy(F.linear(h, w), y)

    assert torch.equal(plain(h, w, y), lossjit.linear_cross_entropy(h, w, y))


@pytest.mark.parametrize("body,op", [
    (lambda h, w, y: F.log_softmax(F.linear(h, w), -1).max(-1).values.mean(), "max"),
    (lambda h, w, y: F.log_softmax(F.linear(h, w), -1)[:, :5].sum(), "__getitem__"),
    (lambda h, w, y: (F.softmax(F.linear(h, w), -1) ** 2).sum(-1).mean(), "Tensor.pow"),
    (lambda h, w, y: (F.softmax(F.linear(h, w), -1) * F.softmax(F.linear(h, w), -1))
     .sum(-1).mean(), "one logit stream"),
    (lambda h, w, y: F.log_softmax(F.linear(h, w), -1).sum(), "not only the vocabulary"),
    (lambda h, w, y: F.softmax(F.linear(h, w), -1).sum(-1).mean()
     + torch.logsumexp(F.linear(h, w * 2), -1).mean(), "one logit stream"),
])
def test_unexpressible_ops_name_the_op(body, op):
    h, w, y, _ = make_inputs("cpu")
    with pytest.raises(lossjit.JitError, match=op):
        lossjit.jit(body)(h, w, y)


def test_returning_vocabulary_values_is_an_error():
    h, w, y, _ = make_inputs("cpu")

    def leaky(h, w, y):
        logp = F.log_softmax(F.linear(h, w), -1)
        return F.nll_loss(logp, y), logp

    with pytest.raises(lossjit.JitError, match="never materializes the logits"):
        lossjit.jit(leaky)(h, w, y)


def test_squared_softmax_is_an_algebra_error_naming_the_product():
    h, w, y, _ = make_inputs("cpu")

    def sq(h, w, y):
        p = F.softmax(F.linear(h, w), -1)
        return (p * p).sum(-1).mean()

    with pytest.raises(lossjit.JitError, match="multiplies the softmax by the softmax"):
        lossjit.jit(sq)(h, w, y)
