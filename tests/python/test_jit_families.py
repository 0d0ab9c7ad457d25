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
from conftest import make_inputs, trl_generalized_jsd_terms

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
    (lambda h, w, y: F.log_softmax(F.linear(h, w), -1).sum(0).mean(), "not only the vocabulary"),
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


# --- A teacher head: distillation written in plain torch -----------------------------
#
# Two linear layers reach softmax-type ops: the student (its operands need
# grad) and a teacher (never differentiated) with its own hidden size. The
# KL forms reduce to the teacher statistics of the same sweep
# (cross_entropy, teacher_entropy, reverse_cross_entropy, teacher_lse).

TEACHER_DIM = 12  # the teacher's hidden size; the student's is 20


def forward_kl_div(hidden, weight, bias, t_hidden, t_weight, t_bias, target):
    s = F.linear(hidden, weight, bias)
    t = F.linear(t_hidden, t_weight, t_bias)
    return F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True,
                    reduction="batchmean")


def forward_kl_by_hand(hidden, weight, bias, t_hidden, t_weight, t_bias, target, T=2.0):
    logp = F.log_softmax(F.linear(hidden, weight, bias) / T, -1)
    q = F.softmax(F.linear(t_hidden, t_weight, t_bias) / T, -1)
    return (q * (torch.log(q) - logp)).sum(-1).mean()


def reverse_kl(hidden, weight, bias, t_hidden, t_weight, t_bias, target):
    s = F.linear(hidden, weight, bias)
    p, logp = F.softmax(s, -1), F.log_softmax(s, -1)
    logq = F.log_softmax(F.linear(t_hidden, t_weight, t_bias), -1)
    return (p * (logp - logq)).sum(-1).mean()


def ce_plus_distillation(hidden, weight, bias, t_hidden, t_weight, t_bias, target, T=2.0,
                         alpha=0.5):
    # Hinton-style: CE and the KL at temperature T (both heads / T), × T².
    s = F.linear(hidden, weight, bias) / T
    with torch.no_grad():
        t = F.linear(t_hidden, t_weight, t_bias) / T
    ce = F.cross_entropy(s, target)
    kl = F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True,
                  reduction="batchmean")
    return ce + alpha * T * T * kl


def masked_kl_matmul_teacher(hidden, weight, bias, t_hidden, t_weight, t_bias, target):
    # The teacher as x @ W.T + b, rows whose label is ignore_index dropped by
    # boolean indexing on the per-row divergence.
    logq = F.log_softmax(t_hidden @ t_weight.T + t_bias, -1)
    logp = F.log_softmax(F.linear(hidden, weight, bias), -1)
    rows = (logq.exp() * (logq - logp)).sum(-1)
    return rows[target != -100].mean()


def soft_targets_from_teacher(hidden, weight, bias, t_hidden, t_weight, t_bias, target):
    # F.cross_entropy with the teacher's probabilities as targets, smoothed,
    # next to a z-loss on the student.
    s = F.linear(hidden, weight, bias)
    q = F.softmax(F.linear(t_hidden, t_weight, t_bias).detach(), -1)
    return F.cross_entropy(s, q, label_smoothing=0.1) + \
        1e-3 * torch.logsumexp(s, -1).square().mean()


def forward_and_reverse_metrics(hidden, weight, bias, t_hidden, t_weight, t_bias, target):
    # Both divergences, the student entropy and the teacher's lse from one sweep.
    s = F.linear(hidden, weight, bias).float()
    t = F.linear(t_hidden, t_weight, t_bias).float()
    logp, logq = F.log_softmax(s, -1), F.log_softmax(t, -1)
    fwd = F.kl_div(logp, logq, log_target=True, reduction="none").sum(-1)
    rev = F.kl_div(logq, logp, log_target=True, reduction="sum")
    entropy = -(logp.exp() * logp).sum(-1)
    return fwd.mean() + 0.25 * rev / fwd.numel() - 0.01 * entropy.mean(), \
        torch.logsumexp(t, -1).mean()


def trl_generalized_jsd(hidden, weight, bias, t_hidden, t_weight, t_bias, target, beta=0.5,
                        temperature=1.0):
    # TRL's GKDTrainer.generalized_jsd_loss as TRL writes it (conftest),
    # reduction "batchmean".
    student_logits = F.linear(hidden, weight, bias) / temperature
    teacher_logits = F.linear(t_hidden, t_weight, t_bias) / temperature
    jsd = trl_generalized_jsd_terms(student_logits, teacher_logits, beta)
    return jsd.sum() / jsd.size(0)


def jsd_by_hand_with_ce(hidden, weight, bias, t_hidden, t_weight, t_bias, target, beta=0.3,
                        T=1.5):
    # The mixture written out, a temperature, ignored rows masked, and the
    # student's CE in the same sweep.
    s = F.linear(hidden, weight, bias) / T
    p, logp = F.softmax(s, -1), F.log_softmax(s, -1)
    logq = F.log_softmax(F.linear(t_hidden, t_weight, t_bias) / T, -1)
    q = logq.exp()
    log_m = torch.log(beta * q + (1 - beta) * p)
    rows = (beta * q * (logq - log_m) + (1 - beta) * p * (logp - log_m)).sum(-1)
    keep = (target != -100).float()
    return F.cross_entropy(s, target) + (rows * keep).sum() / keep.sum()


def jsd_from_two_batchmean_kls(hidden, weight, bias, t_hidden, t_weight, t_bias, target,
                               beta=0.4):
    # Each KL to the mixture reduced by F.kl_div on its own, combined as
    # [N]-free numbers; the student's KL(p‖M) also returned as a metric.
    logp = F.log_softmax(F.linear(hidden, weight, bias), -1)
    logq = F.log_softmax(F.linear(t_hidden, t_weight, t_bias), -1)
    log_m = torch.log(beta * logq.exp() + (1 - beta) * logp.exp())
    kl_t = F.kl_div(log_m, logq, reduction="batchmean", log_target=True)
    kl_s = F.kl_div(log_m, logp, reduction="batchmean", log_target=True)
    return beta * kl_t + (1 - beta) * kl_s, kl_s


def student_kl_to_the_mixture(hidden, weight, bias, t_hidden, t_weight, t_bias, target):
    # KL(p‖M) alone (a skew divergence), per row, masked.
    s = F.linear(hidden, weight, bias)
    p, logp = F.softmax(s, -1), F.log_softmax(s, -1)
    q = F.softmax(F.linear(t_hidden, t_weight, t_bias), -1)
    rows = (p * (logp - torch.log(0.7 * q + 0.3 * p))).sum(-1)
    return rows[target != -100].mean()


TEACHER_LOSSES = [forward_kl_div, forward_kl_by_hand, reverse_kl, ce_plus_distillation,
                  masked_kl_matmul_teacher, soft_targets_from_teacher,
                  forward_and_reverse_metrics, trl_generalized_jsd, jsd_by_hand_with_ce,
                  jsd_from_two_batchmean_kls, student_kl_to_the_mixture]


def _teacher_inputs(device, dtype, seed=0, bias=True):
    h, w, y, _ = _inputs(device, dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 7)
    th = (torch.randn(h.shape[0], TEACHER_DIM, generator=g) * 2.0).to(dtype).to(device)
    tw = (torch.randn(w.shape[0], TEACHER_DIM, generator=g) / TEACHER_DIM ** 0.5) \
        .to(dtype).to(device)
    b = (torch.randn(w.shape[0], generator=g) * 0.5).to(dtype).to(device) if bias else None
    tb = (torch.randn(w.shape[0], generator=g) * 0.5).to(dtype).to(device)
    return h, w, b, th, tw, tb, y


def _check_teacher_against_float64(device, loss_fn, dtype, bias=True, out_rtol=2e-5):
    h, w, b, th, tw, tb, y = _teacher_inputs(device, dtype, bias=bias)
    fused = lossjit.jit(loss_fn)
    leaves = [h.clone().requires_grad_(True), w.clone().requires_grad_(True)] + (
        [b.clone().requires_grad_(True)] if bias else [])
    got = _outputs(fused(*leaves[:2], leaves[2] if bias else None, th, tw, tb, y))
    ref_leaves = [t.double().requires_grad_(True) for t in (h, w) + ((b,) if bias else ())]
    want = _outputs(loss_fn(*ref_leaves[:2], ref_leaves[2] if bias else None, th.double(),
                            tw.double(), tb.double(), y))
    assert len(got) == len(want)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.double(), r.double(), rtol=out_rtol, atol=out_rtol)
    grads = torch.autograd.grad(got[0], leaves)
    ref = torch.autograd.grad(want[0], ref_leaves)
    tol = 5e-5 if dtype == torch.float32 else 1.6e-2
    for g, r in zip(grads, ref):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), r.to(dtype).double(), rtol=tol,
                                   atol=tol * float(r.abs().max()))


@pytest.mark.parametrize("loss_fn", TEACHER_LOSSES, ids=[f.__name__ for f in TEACHER_LOSSES])
def test_teacher_losses_fuse_and_match_eager(device, loss_fn):
    _check_teacher_against_float64(device, loss_fn, torch.float32)


def test_teacher_without_student_bias(device):
    _check_teacher_against_float64(device, reverse_kl, torch.float32, bias=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_teacher_16_bit_storage_keeps_float32_statistics(device, dtype):
    _check_teacher_against_float64(device, forward_and_reverse_metrics, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_trl_jsd_with_its_beta_in_a_16_bit_dtype(device, dtype):
    # TRL makes beta in the logits' dtype: log(0.5) in bf16 is −0.69140625,
    # so the mixture's weights sum to 1.0017; they are that dtype's β = 0.5.
    # (The loss keeps TRL's dtype: one rounding to it at the end.)
    _check_teacher_against_float64(device, trl_generalized_jsd, dtype,
                                   out_rtol=float(torch.finfo(dtype).eps))


def test_scalar_tensors_the_trace_cannot_know_stay_row_values():
    # torch.rand(()) and torch.zeros(()) have no constant in the fake trace:
    # they are values of the run (replayed), not numbers of the trace.
    def loss_fn(h, w, y):
        s = F.linear(h, w)
        noise = torch.rand(())
        return F.cross_entropy(s, y) * (1 + 0 * noise) + torch.zeros(()) * \
            torch.logsumexp(s, -1).mean()

    h, w, y, _ = _inputs("cpu", torch.float32)
    torch.manual_seed(0)
    got = lossjit.jit(loss_fn)(h, w, y)
    torch.testing.assert_close(got, loss_fn(h, w, y), rtol=2e-5, atol=2e-5)


def _count_ops(fn):
    """(aot ops named vocab_reduce / vocab_reduce_backward that ran, [N, V]
    values formed) while `fn` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops, formed = [], []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func)
            if "vocab_reduce" in name:
                ops.append(name)
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == 41 \
                        and t.numel() > 41:
                    formed.append(name)
            return out

    with Watch():
        fn()
    return ops, formed


@pytest.mark.parametrize("loss_fn", TEACHER_LOSSES, ids=[f.__name__ for f in TEACHER_LOSSES])
def test_teacher_losses_run_one_sweep_and_never_form_either_heads_logits(loss_fn):
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    hf = h.clone().requires_grad_(True)
    fused = lossjit.jit(loss_fn)

    def step():
        loss = _outputs(fused(hf, w, b, th, tw, tb, y))[0]
        torch.autograd.grad(loss, [hf])

    step()  # trace and compile the forward and backward
    before = _kernels.cache_info()["vocab_reduce"]
    ops, formed = _count_ops(step)
    assert ops == ["lossjit.vocab_reduce.default", "lossjit.vocab_reduce_backward.default"]
    assert formed == [], f"[N, V] values were formed by {formed}"
    assert _kernels.cache_info()["vocab_reduce"] == before


def test_the_op_count_sees_an_eager_kl():
    """The check above can fail: eager KL forms [N, V] values and runs no sweep."""
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    ops, formed = _count_ops(lambda: forward_kl_div(h, w, b, th, tw, tb, y))
    assert ops == [] and any("mm" in f for f in formed)


def test_teacher_losses_bitwise_repeats():
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.bfloat16)
    fused = lossjit.jit(ce_plus_distillation)
    runs = []
    for _ in range(3):
        leaves = [t.clone().requires_grad_(True) for t in (h, w, b)]
        loss = fused(*leaves, th, tw, tb, y)
        runs.append((loss.detach(),) + torch.autograd.grad(loss, leaves))
    for run in runs[1:]:
        for a, c in zip(runs[0], run):
            assert torch.equal(a, c)
    assert fused.specializations == 1


def test_teacher_under_autocast_matches_bf16_inputs():
    """Under CPU autocast both heads run in bfloat16, as F.linear would: the
    same statistics as bfloat16 inputs, with eager autocast's float32 result."""
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    fused = lossjit.jit(forward_kl_div)
    hf = h.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fused(hf, w, b, th, tw, tb, y)
        eager = forward_kl_div(h, w, b, th, tw, tb, y)
    assert got.dtype == eager.dtype == torch.float32
    (grad,) = torch.autograd.grad(got, [hf])
    bf = [t.bfloat16() for t in (h, w, b, th, tw, tb)]
    exact = forward_kl_div(*[t.double() for t in bf], y)
    torch.testing.assert_close(got.double(), exact, rtol=2e-5, atol=2e-5)
    hb = bf[0].clone().requires_grad_(True)
    want = lossjit.jit(forward_kl_div)(hb, *bf[1:], y)
    (want_grad,) = torch.autograd.grad(want, [hb])
    assert torch.equal(got.bfloat16(), want)
    assert grad.dtype == torch.float32
    assert torch.equal(grad, want_grad.float())


def test_teacher_detached_in_the_function_gets_no_gradient():
    """A teacher whose operands require grad is fused when the function
    cuts its gradient (torch.no_grad()); eager gives it no gradient either."""
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    tw = tw.clone().requires_grad_(True)
    hf = h.clone().requires_grad_(True)
    loss = lossjit.jit(ce_plus_distillation)(hf, w, b, th, tw, tb, y)
    loss.backward()
    assert hf.grad is not None and tw.grad is None
    want = ce_plus_distillation(h, w, b, th, tw, tb, y)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)


def test_teacher_cut_by_no_grad_is_known_from_the_trace():
    """torch.no_grad() inside the function is seen even when the first call's
    teacher needs no grad: a later teacher that requires grad is detached,
    as eager does, not refused."""
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    fused = lossjit.jit(ce_plus_distillation)
    first = fused(h.clone().requires_grad_(True), w, b, th, tw, tb, y)
    tw_grad = tw.clone().requires_grad_(True)
    hf = h.clone().requires_grad_(True)
    second = fused(hf, w, b, th, tw_grad, tb, y)
    second.backward()
    assert torch.equal(first, second)
    assert hf.grad is not None and tw_grad.grad is None
    assert fused.specializations == 1


def test_detached_student_logits_get_no_gradient():
    """.detach() on the (single) student's logits: no gradient reaches the
    hidden states, as in eager (the sweep runs on detached operands)."""
    h, w, y, _ = _inputs("cpu", torch.float32)

    def detached_entropy(h, w, y):
        logp = F.log_softmax(F.linear(h, w).detach(), -1)
        return F.linear(h, w).logsumexp(-1).mean(), -(logp.exp() * logp).sum(-1).mean()

    def entropy_only(h, w, y):
        logp = F.log_softmax(F.linear(h, w).detach(), -1)
        return -(logp.exp() * logp).sum(-1).mean()

    hf = h.clone().requires_grad_(True)
    got = lossjit.jit(entropy_only)(hf, w, y)
    want = entropy_only(hf, w, y)
    assert not got.requires_grad and not want.requires_grad
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
    # Two heads over the same operands, one detached: the detached one is
    # the teacher (no gradient through it).
    got = lossjit.jit(detached_entropy)(hf, w, y)
    want = detached_entropy(hf, w, y)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=2e-5, atol=2e-5)
    assert not got[1].requires_grad
    torch.testing.assert_close(torch.autograd.grad(got[0], [hf])[0],
                               torch.autograd.grad(want[0], [hf])[0], rtol=5e-5, atol=5e-6)


def test_teacher_that_requires_grad_later_is_an_error():
    """Traced with a frozen teacher, then called with one that requires grad
    (eager would differentiate it): a clear error, not a silent detach."""
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    fused = lossjit.jit(reverse_kl)
    hf = h.clone().requires_grad_(True)
    fused(hf, w, b, th, tw, tb, y)
    with pytest.raises(RuntimeError, match="teacher head's weight require grad"):
        fused(hf, w, b, th, tw.clone().requires_grad_(True), tb, y)
    with torch.no_grad():  # no gradient anywhere: fine
        fused(hf, w, b, th, tw.clone().requires_grad_(True), tb, y)


def _two_grad_heads(h, w, th, tw, y):
    return F.kl_div(F.log_softmax(F.linear(h, w), -1), F.log_softmax(F.linear(th, tw), -1),
                    log_target=True, reduction="batchmean")


def _p_times_q(h, w, th, tw, y):
    p = F.softmax(F.linear(h, w), -1)
    q = F.softmax(F.linear(th, tw), -1)
    return (p * q).sum(-1).mean()


def _teacher_softcap(h, w, th, tw, y):
    t = 30.0 * torch.tanh(F.linear(th, tw) / 30.0)
    return F.kl_div(F.log_softmax(F.linear(h, w), -1), F.log_softmax(t, -1),
                    log_target=True, reduction="batchmean")


def _teacher_logit_sum(h, w, th, tw, y):
    t = F.linear(th, tw)
    return (F.log_softmax(F.linear(h, w), -1) * F.softmax(t, -1)).sum(-1).mean() + \
        t.sum(-1).mean()


def _teacher_gather(h, w, th, tw, y):
    logq = F.log_softmax(F.linear(th, tw), -1)
    return F.log_softmax(F.linear(h, w), -1).sum(-1).mean() + \
        logq.gather(-1, y.clamp(min=0)[:, None]).mean()


def _detached_student_softmax(h, w, th, tw, y):
    # p.detach() would stop the gradient of one part of the statistics.
    logp = F.log_softmax(F.linear(h, w), -1)
    logq = F.log_softmax(F.linear(th, tw), -1).detach()  # fine: the teacher alone
    return (logp.exp().detach() * (logp - logq)).sum(-1).mean()


def _q_squared(h, w, th, tw, y):
    q = F.softmax(F.linear(th, tw), -1)
    return (q * q * F.log_softmax(F.linear(h, w), -1)).sum(-1).mean()


@pytest.mark.parametrize("body,grads,pattern", [
    (_two_grad_heads, (True, True),
     r"one logit stream.*F\.linear at test_jit_families\.py:\d+, F\.linear at "
     r"test_jit_families\.py:\d+, and both require grad"),
    (_two_grad_heads, (False, False), r"F\.linear at .*F\.linear at .*neither requires grad"),
    (_p_times_q, (True, False),
     r"Tensor\.mul at test_jit_families\.py:\d+ multiplies the softmax by the teacher "
     r"softmax"),
    (_q_squared, (True, False), r"multiplies the teacher softmax by the teacher softmax"),
    (_teacher_softcap, (True, False),
     r"torch\.tanh at test_jit_families\.py:\d+ soft-caps the teacher head's logits"),
    (_teacher_logit_sum, (True, False), r"Tensor\.sum at .* sums the teacher logits"),
    (_teacher_gather, (True, False), r"Tensor\.gather at .* gathers .*teacher"),
    (_detached_student_softmax, (True, False),
     r"Tensor\.detach at test_jit_families\.py:\d+ detaches a value computed from the "
     r"student's logits"),
], ids=["two-grad-heads", "two-teachers", "p-times-q", "q-times-q", "teacher-softcap",
        "teacher-logit-sum", "teacher-gather", "detached-student-softmax"])
def test_unsupported_teacher_forms_name_the_op(body, grads, pattern):
    h, w, _, th, tw, _, y = _teacher_inputs("cpu", torch.float32)
    if grads[0]:
        h = h.clone().requires_grad_(True)
    if grads[1]:
        th = th.clone().requires_grad_(True)
    with pytest.raises(lossjit.JitError, match=pattern):
        lossjit.jit(body)(h, w, th, tw, y)


def _log_mixture_summed_alone(h, w, th, tw, y):
    p, q = F.softmax(F.linear(h, w), -1), F.softmax(F.linear(th, tw), -1)
    return torch.log(0.5 * p + 0.5 * q).sum(-1).mean()


def _jsd_two_weights(h, w, th, tw, y):
    p, q = F.softmax(F.linear(h, w), -1), F.softmax(F.linear(th, tw), -1)
    log_m, log_m2 = torch.log(0.5 * p + 0.5 * q), torch.log(0.25 * p + 0.75 * q)
    return (p * log_m + q * log_m2).sum(-1).mean()


def _mixture_not_normalized(h, w, th, tw, y):
    p, q = F.softmax(F.linear(h, w), -1), F.softmax(F.linear(th, tw), -1)
    return (p * torch.log(0.5 * p + 0.6 * q)).sum(-1).mean()


@pytest.mark.parametrize("body,pattern", [
    (_log_mixture_summed_alone, r"sums the log of the mixture .* by itself"),
    (_jsd_two_weights, r"with weight 0.75 next to one with 0.5 \(one sweep has one jsd_beta\)"),
    (_mixture_not_normalized, "log of something other than a softmax or the mixture"),
], ids=["log_mixture_alone", "two_betas", "weights_not_summing_to_one"])
def test_unsupported_mixture_forms_name_the_op(body, pattern):
    h, w, _, th, tw, _, y = _teacher_inputs("cpu", torch.float32)
    with pytest.raises(lossjit.JitError, match=pattern):
        lossjit.jit(body)(h.clone().requires_grad_(True), w, th, tw, y)


def test_teacher_with_another_vocabulary_is_an_error():
    h, w, _, th, tw, _, y = _teacher_inputs("cpu", torch.float32)

    def two_vocabularies(h, w, th, tw, y):
        return F.log_softmax(F.linear(h, w), -1).sum(-1).mean() + \
            torch.logsumexp(F.linear(th, tw), -1).mean()

    with pytest.raises(lossjit.JitError, match=r"teacher head's logits \(of F\.linear at "
                       r"test_jit_families\.py:\d+\) have shape \[18, 40\].*share the "
                       "vocabulary"):
        lossjit.jit(two_vocabularies)(h.requires_grad_(True), w, th, tw[:-1], y)


def test_validation_call_under_no_grad_first_then_training():
    # A validation pass often runs first, under torch.no_grad(): no logits
    # require grad, so the student is the head whose own parameters do
    # (grad mode does not change them); the program then trains as well.
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    w = w.clone().requires_grad_(True)
    fused = lossjit.jit(forward_kl_div)
    with torch.no_grad():
        got = fused(h, w, b, th, tw, tb, y)
        want = forward_kl_div(h.double(), w.double(), b.double(), th.double(), tw.double(),
                              tb.double(), y)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)
    assert not got.requires_grad
    loss = fused(h, w, b, th, tw, tb, y)
    (grad,) = torch.autograd.grad(loss, [w])
    wr = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(
        forward_kl_div(h.double(), wr, b.double(), th.double(), tw.double(), tb.double(), y),
        [wr])
    torch.testing.assert_close(grad.double(), ref, rtol=5e-5, atol=5e-5 * float(ref.abs().max()))


def test_validation_with_two_frozen_heads_is_still_an_error():
    # Neither head's logits nor operands require grad: which one is the
    # student is not known, and the error says so.
    h, w, b, th, tw, tb, y = _teacher_inputs("cpu", torch.float32)
    with pytest.raises(lossjit.JitError, match="neither requires grad"):
        lossjit.jit(forward_kl_div)(h, w, b, th, tw, tb, y)


def test_first_call_under_no_grad_keeps_the_gradients_of_training_calls():
    # The trace runs with grad enabled whatever the caller's mode: a program
    # first built under torch.no_grad() (a validation pass) must not treat
    # the student's logits as cut by the function (no gradient, silently).
    def entropy_regularized(x, w, y):
        logp = F.log_softmax(F.linear(x, w), -1)
        return F.nll_loss(logp, y) + 0.1 * (logp.exp() * logp).sum(-1).mean()

    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(6, 8, generator=g), torch.randint(0, 20, (6,), generator=g)
    w = torch.randn(20, 8, generator=g).requires_grad_(True)
    fused = lossjit.jit(entropy_regularized)
    with torch.no_grad():
        assert not fused(x, w, y).requires_grad
    (grad,) = torch.autograd.grad(fused(x, w, y), [w])
    wr = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(entropy_regularized(x.double(), wr, y), [wr])
    torch.testing.assert_close(grad.double(), ref, rtol=5e-5, atol=5e-5 * float(ref.abs().max()))
