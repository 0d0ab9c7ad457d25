"""The loss families on the vocabulary-reduction IR (issue 14): class weights
and label smoothing with PyTorch's exact semantics, per-token log-probs and
entropy, each against a float64 torch reference (forward and gradients), the
drop-in signature of torch's F.linear_cross_entropy, bitwise repeats, and
the ops under opcheck, FakeTensor and torch.compile.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lossjit
from conftest import (REDUCTIONS, STORAGE, make_inputs, transform_logits,
                      trl_generalized_jsd_terms)

#: Tolerances against float64 by storage type: the inputs are rounded to the
#: storage type once (the reference sees the same values), so only float32
#: compute separates the two.
TOL = {torch.float32: 2e-5, torch.float16: 2e-5, torch.bfloat16: 2e-5}


def reference_logits(h, w, b=None, logit_scale=1.0, softcap=None):
    z = F.linear(h.double(), w.double(), None if b is None else b.double())
    return transform_logits(z, logit_scale, softcap)


def class_weights_for(v, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(v, generator=g) * 2 + 0.1


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) if t is not None else None
            for t in tensors]


def grads_of(loss, inputs):
    wanted = [t for t in inputs if t is not None]
    return torch.autograd.grad(loss, wanted)


def assert_close(got, want, rtol, atol=None):
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol,
                               atol=rtol if atol is None else atol, equal_nan=True)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_weights_and_smoothing_match_torch(device, dtype, reduction, smoothing, weighted):
    h, w, y, b = make_inputs(device, dtype, bias=True)
    cw = class_weights_for(w.shape[0]).to(device) if weighted else None
    if smoothing == 0.0 and not weighted:
        pytest.skip("plain cross-entropy: the existing op's tests cover it")
    h, w, b = leaves(h, w, b)
    loss = lossjit.linear_cross_entropy(h, w, y, linear_bias=b, weight=cw,
                                        label_smoothing=smoothing, reduction=reduction)
    hr, wr, br = leaves(h, w, b)
    ref = F.cross_entropy(reference_logits(hr, wr, br), y,
                          weight=None if cw is None else cw.double(),
                          label_smoothing=smoothing, reduction=reduction)
    assert loss.dtype == torch.float32 and loss.shape == ref.shape
    assert_close(loss, ref, TOL[dtype])
    upstream = torch.linspace(0.5, 1.5, loss.numel(), dtype=torch.float64,
                              device=device).view(loss.shape)
    got = grads_of((loss.double() * upstream).sum(), [h, w, b])
    want = grads_of((ref * upstream).sum(), [hr, wr, br])
    # Gradients are rounded to the storage type once.
    tol = {torch.float32: 5e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for g, r in zip(got, want):
        assert g.dtype == dtype
        assert_close(g, r.to(dtype), tol, atol=tol * max(1.0, float(r.abs().max())))


@pytest.mark.parametrize("smoothing", [0.0, 0.25])
def test_weights_smoothing_with_logit_transforms_and_3d_input(device, smoothing):
    h, w, y, _ = make_inputs(device, torch.bfloat16, lead=(3, 7), ignored=(2, 9, 20))
    cw = class_weights_for(w.shape[0], seed=5).to(device)
    h, w = leaves(h, w)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, weight=cw, label_smoothing=smoothing,
                                             logit_scale=0.75, softcap=9.0, return_lse=True)
    hr, wr = leaves(h, w)
    z = reference_logits(hr, wr, logit_scale=0.75, softcap=9.0)
    ref = F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1), weight=cw.double(),
                          label_smoothing=smoothing)
    assert lse.shape == y.shape
    assert_close(lse, torch.logsumexp(z, -1), 2e-5)
    assert_close(loss, ref, 2e-5)
    got = grads_of(loss, [h, w])
    want = grads_of(ref, [hr, wr])
    for g, r in zip(got, want):
        assert_close(g, r.to(g.dtype), 1.6e-2, atol=2e-3)


def test_z_loss_through_the_differentiable_lse_of_the_smoothed_loss(device):
    h, w, y, _ = make_inputs(device, torch.float32)
    h, w = leaves(h, w)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, label_smoothing=0.1, return_lse=True)
    total = loss + 1e-2 * lse.square().mean()
    hr, wr = leaves(h, w)
    z = reference_logits(hr, wr)
    ref = F.cross_entropy(z, y, label_smoothing=0.1) + 1e-2 * torch.logsumexp(z, -1).square().mean()
    assert_close(total, ref, 2e-6)
    for g, r in zip(grads_of(total, [h, w]), grads_of(ref, [hr, wr])):
        assert_close(g, r.float(), 2e-5)


def test_every_row_ignored_gives_torch_nan_and_zero_gradients(device):
    h, w, y, _ = make_inputs(device, torch.float32, ignored=range(19))
    h, w = leaves(h, w)
    cw = class_weights_for(w.shape[0]).to(device)
    loss = lossjit.linear_cross_entropy(h, w, y, weight=cw, label_smoothing=0.2)
    ref = F.cross_entropy(reference_logits(h, w), y, weight=cw.double(), label_smoothing=0.2)
    assert torch.isnan(loss) and torch.isnan(ref)
    summed = lossjit.linear_cross_entropy(h, w, y, weight=cw, label_smoothing=0.2,
                                          reduction="sum")
    assert float(summed.detach()) == 0.0
    gh, gw = torch.autograd.grad(summed, [h, w])
    assert not gh.any() and not gw.any()


def test_class_weight_zero_for_the_target_class(device):
    h, w, y, _ = make_inputs(device, torch.float32, ignored=())
    cw = torch.ones(w.shape[0], device=device)
    cw[y[0]] = 0.0
    loss = lossjit.linear_cross_entropy(h, w, y, weight=cw, reduction="none")
    ref = F.cross_entropy(reference_logits(h, w), y, weight=cw.double(), reduction="none")
    assert float(loss[0]) == 0.0
    assert_close(loss, ref, 2e-6)


def test_a_target_out_of_range_never_indexes_the_class_weights(monkeypatch):
    # On CUDA the kernel gives a row whose target is outside [0, V) a NaN
    # (on CPU it raises before any kernel): the class-weight lookup must not
    # index with that target, which on CUDA is a device-side assert that
    # poisons the context and for -V..-1 another class's weight. A stand-in
    # for the CUDA kernel's statistics (NaN rows, no label check).
    from lossjit import _reduce
    n, v, d = 5, 7, 4
    h, w = torch.randn(n, d), torch.randn(v, d)
    y = torch.tensor([1, v, -3, 2, -100])
    cw = torch.rand(v) + 0.5

    def cuda_like(hidden, weight, statistics, **kw):
        bad = (y < 0) | (y >= v)
        stats = [torch.where(bad, float("nan"), torch.ones(n)) for _ in statistics]
        return tuple(stats)

    monkeypatch.setattr(_reduce, "vocab_reduce", cuda_like)
    rows = lossjit.linear_cross_entropy(h, w, y, weight=cw, reduction="none")
    assert torch.isnan(rows[1]) and torch.isnan(rows[2])
    assert rows[0] == 0 and rows[3] == 0 and rows[4] == 0  # lse - z_y = 0 in the stand-in


# --- The drop-in signature --------------------------------------------------------

def test_same_call_as_torch_linear_cross_entropy(device):
    h, w, y, b = make_inputs(device, torch.float32, bias=True)
    cw = class_weights_for(w.shape[0]).to(device)
    kwargs = dict(linear_bias=b, weight=cw, reduction="sum", ignore_index=-100,
                  label_smoothing=0.05)
    ours = lossjit.linear_cross_entropy(input=h, linear_weight=w, target=y, **kwargs)
    theirs = F.linear_cross_entropy(h.double(), w.double(), y, linear_bias=b.double(),
                                    weight=cw.double(), reduction="sum", ignore_index=-100,
                                    label_smoothing=0.05)
    assert_close(ours, theirs, 2e-6)
    # ignore_index=None means -100, as in torch.
    none_ii = lossjit.linear_cross_entropy(h, w, y, linear_bias=b, weight=cw, reduction="sum",
                                           ignore_index=None, label_smoothing=0.05)
    assert torch.equal(none_ii, ours)


def test_bias_aliases(device):
    h, w, y, b = make_inputs(device, torch.float32, bias=True)
    by_name = lossjit.linear_cross_entropy(h, w, y, linear_bias=b)
    assert torch.equal(lossjit.linear_cross_entropy(h, w, y, b), by_name)
    assert torch.equal(lossjit.linear_cross_entropy(h, w, y, bias=b), by_name)
    with pytest.raises(TypeError, match="linear_bias given twice"):
        lossjit.linear_cross_entropy(h, w, y, b, bias=b)


@pytest.mark.parametrize("what,kwargs,error,message", [
    ("class weights of the wrong length", dict(weight=torch.ones(5)), ValueError,
     r"weight \(the class weights\) must have shape \[V\] = \[37\], got \[5\]"),
    ("the old keyword for the linear weight", dict(weight=torch.ones(37, 24)), ValueError,
     "the linear layer's weight is linear_weight"),
    ("integer class weights", dict(weight=torch.ones(37, dtype=torch.long)), TypeError,
     "must be floating point"),
    ("smoothing above 1", dict(label_smoothing=1.5), ValueError,
     r"label_smoothing must be in \[0, 1\]"),
    ("negative smoothing", dict(label_smoothing=-0.1), ValueError, "label_smoothing"),
    ("smoothing not a number", dict(label_smoothing="0.1"), TypeError,
     "label_smoothing must be a number"),
])
def test_bad_family_arguments_name_the_argument(what, kwargs, error, message):
    h, w, y, _ = make_inputs("cpu", torch.float32)
    with pytest.raises(error, match=message):
        lossjit.linear_cross_entropy(h, w, y, **kwargs)


def test_k_dimensional_weights_are_a_clear_error():
    h, w, y, _ = make_inputs("cpu", torch.float32)
    with pytest.raises(ValueError, match="K-dimensional losses"):
        lossjit.linear_cross_entropy(h, w.view(37, 1, 24), y)


def test_errors_name_the_public_arguments():
    h, w, y, _ = make_inputs("cpu", torch.float32)
    with pytest.raises(TypeError, match="linear_weight has dtype float16 but input has float32"):
        lossjit.linear_cross_entropy(h, w.half(), y)
    with pytest.raises(ValueError, match=r"linear_bias must have shape \[V\]"):
        lossjit.linear_cross_entropy(h, w, y, torch.zeros(3))


def test_module_takes_class_weights_and_smoothing(device):
    h, w, y, b = make_inputs(device, torch.float32, bias=True)
    cw = class_weights_for(w.shape[0]).to(device)
    module = lossjit.LinearCrossEntropyLoss(weight=cw, label_smoothing=0.1, reduction="sum")
    assert "label_smoothing=0.1" in repr(module)
    got = module(h, w, y, b)
    want = lossjit.linear_cross_entropy(h, w, y, b, weight=cw, label_smoothing=0.1,
                                        reduction="sum")
    assert torch.equal(got, want)
    assert torch.equal(module.state_dict()["weight"], cw)


# --- Per-token log-probs and entropy --------------------------------------------------

@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_prob_and_entropy_match_torch(device, dtype, temperature):
    h, w, y, _ = make_inputs(device, dtype, lead=(2, 9), ignored=())
    h, w = leaves(h, w)
    logp, ent = lossjit.linear_log_prob(h, w, y, temperature=temperature, return_entropy=True)
    hr, wr = leaves(h, w)
    logits = F.linear(hr.double(), wr.double()) / temperature
    ref_all = torch.log_softmax(logits, -1)
    ref_logp = ref_all.gather(-1, y[..., None])[..., 0]
    ref_ent = -(ref_all.exp() * ref_all).sum(-1)
    assert logp.shape == y.shape and ent.shape == y.shape
    assert_close(logp, ref_logp, 2e-5)
    assert_close(ent, ref_ent, 2e-5)
    # A GRPO-style objective with an entropy bonus: both adjoints in one backward.
    adv = torch.linspace(-1, 1, y.numel(), device=device).view(y.shape)
    objective = -(logp * adv).mean() - 0.01 * ent.mean()
    ref_objective = -(ref_logp * adv.double()).mean() - 0.01 * ref_ent.mean()
    tol = {torch.float32: 5e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for g, r in zip(grads_of(objective, [h, w]), grads_of(ref_objective, [hr, wr])):
        assert_close(g, r.to(dtype), tol, atol=tol * max(1.0, float(r.abs().max())))


def test_log_prob_alone_and_entropy_alone_have_gradients(device):
    h, w, y, _ = make_inputs(device, torch.float32, ignored=())
    h, w = leaves(h, w)
    logp, ent = lossjit.linear_log_prob(h, w, y, return_entropy=True)
    hr, wr = leaves(h, w)

    def ref_log_softmax():
        return torch.log_softmax(F.linear(hr.double(), wr.double()), -1)

    ref_all = ref_log_softmax()
    ref_ent = -(ref_all.exp() * ref_all).sum(-1)
    for g, r in zip(grads_of(ent.sum(), [h, w]), grads_of(ref_ent.sum(), [hr, wr])):
        assert_close(g, r.float(), 5e-5)
    only = lossjit.linear_log_prob(h, w, y)
    ref_logp = ref_log_softmax().gather(-1, y[:, None])[:, 0]
    for g, r in zip(grads_of(only.sum(), [h, w]), grads_of(ref_logp.sum(), [hr, wr])):
        assert_close(g, r.float(), 5e-5)


def test_entropy_of_large_logits_keeps_its_accuracy():
    # Logits near 60 with an entropy near 0.1: lse − E_p[z] would cancel most
    # digits; the kernel carries Σ p (z − max) instead.
    h = torch.zeros(4, 2)
    h[:, 0] = 1.0
    w = torch.zeros(50, 2)
    w[:, 0] = 60.0
    w[0, 0] = 66.0
    y = torch.zeros(4, dtype=torch.long)
    logp, ent = lossjit.linear_log_prob(h, w, y, return_entropy=True)
    ref_all = torch.log_softmax(F.linear(h.double(), w.double()), -1)
    ref_ent = -(ref_all.exp() * ref_all).sum(-1)
    assert_close(ent, ref_ent, 1e-5, atol=1e-7)


def test_entropy_with_minus_infinite_logits_in_every_lane_position():
    # V = 37 on the CPU: groups of 16 lanes, the last one 5 wide; −inf
    # logits inside groups and in the tail add nothing (and no NaN).
    g = torch.Generator().manual_seed(5)
    h = torch.randn(4, 2, generator=g)
    h[:, 0] = torch.tensor([1.0, 2.0, 0.5, 1.5])
    w = torch.randn(37, 2, generator=g)
    masked = [3, 20, 36]
    w[masked, 0] = -math.inf
    w[masked, 1] = 0.0
    y = torch.tensor([0, 5, 17, 30])
    logp, ent = lossjit.linear_log_prob(h, w, y, return_entropy=True)
    keep = [j for j in range(37) if j not in masked]
    ref_all = torch.log_softmax(F.linear(h.double(), w[keep].double()), -1)
    ref_ent = -(ref_all.exp() * ref_all).sum(-1)
    ref_logp = ref_all.gather(-1, torch.tensor([keep.index(int(t)) for t in y])[:, None])[:, 0]
    assert torch.isfinite(ent).all() and torch.isfinite(logp).all()
    assert_close(ent, ref_ent, 1e-5, atol=1e-6)
    assert_close(logp, ref_logp, 1e-5, atol=1e-6)


def test_log_prob_rejects_tokens_outside_the_vocabulary():
    h, w, y, _ = make_inputs("cpu", torch.float32, ignored=())
    y[3] = -100
    with pytest.raises(IndexError, match=r"tokens must be in \[0, V\) = \[0, 37\)"):
        lossjit.linear_log_prob(h, w, y)
    with pytest.raises(ValueError, match="temperature must be positive and finite"):
        lossjit.linear_log_prob(h, w, y.clamp(min=0), temperature=0.0)


# --- Determinism, ops, compile ---------------------------------------------------

def test_bitwise_repeats(device):
    h, w, y, b = make_inputs(device, torch.bfloat16, bias=True)
    cw = class_weights_for(w.shape[0]).to(device)
    runs = []
    for _ in range(3):
        hh, ww, bb = leaves(h, w, b)
        loss = lossjit.linear_cross_entropy(hh, ww, y, bb, weight=cw, label_smoothing=0.1)
        logp, ent = lossjit.linear_log_prob(hh, ww, y.clamp(min=0), return_entropy=True)
        total = loss + logp.sum() + ent.sum()
        runs.append((total.detach(),) + tuple(torch.autograd.grad(total, [hh, ww, bb])))
    for run in runs[1:]:
        for a, b_ in zip(runs[0], run):
            assert torch.equal(a, b_)


def test_vocab_reduce_ops_pass_opcheck():
    h, w, y, b = make_inputs("cpu", torch.float32, bias=True)
    cw = class_weights_for(w.shape[0])
    h.requires_grad_(True)
    w.requires_grad_(True)
    args = (h, w, y, b, cw, "lse,label_logit,logit_sum", -100, 1.0, 0.0)
    torch.library.opcheck(torch.ops.lossjit.vocab_reduce.default, args)
    args = (h, w, None, None, None, "lse,entropy", -100, 0.5, 0.0)
    torch.library.opcheck(torch.ops.lossjit.vocab_reduce.default, args)


def test_compiled_smoothed_loss_equals_eager():
    h, w, y, _ = make_inputs("cpu", torch.float32)
    cw = class_weights_for(w.shape[0])

    def loss_fn(h, w, y):
        return lossjit.linear_cross_entropy(h, w, y, weight=cw, label_smoothing=0.1)

    h1, w1 = leaves(h, w)
    eager = loss_fn(h1, w1, y)
    ge = torch.autograd.grad(eager, [h1, w1])
    h2, w2 = leaves(h, w)
    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")(h2, w2, y)
    gc = torch.autograd.grad(compiled, [h2, w2])
    assert torch.equal(eager, compiled)
    for a, b in zip(ge, gc):
        assert torch.equal(a, b)


def test_fake_tensors_give_shapes_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        h = torch.empty(6, 8)
        w = torch.empty(11, 8)
        y = torch.zeros(6, dtype=torch.long)
        logp, ent = lossjit.linear_log_prob(h, w, y, return_entropy=True)
        loss = lossjit.linear_cross_entropy(h, w, y, label_smoothing=0.1, reduction="none")
    assert logp.shape == (6,) and ent.shape == (6,) and loss.shape == (6,)


def test_redispatch_reaches_the_new_functions_once():
    from torch.overrides import TorchFunctionMode

    seen = []
    functions = (lossjit.linear_log_prob, lossjit.linear_cross_entropy, lossjit.linear_jsd,
                 lossjit.linear_kl_div)

    class Log(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in functions:
                seen.append(func)
            return func(*args, **(kwargs or {}))

    h, w, y, _ = make_inputs("cpu", torch.float32, ignored=())
    th, tw = h[:, :13].clone(), w[:, :13].clone()
    calls = (lambda: lossjit.linear_log_prob(h, w, y),
             lambda: lossjit.linear_cross_entropy(h, w, y, label_smoothing=0.1),
             lambda: lossjit.linear_jsd(h, w, th, tw, beta=0.3, target=y),
             lambda: lossjit.linear_kl_div(h, w, th, tw, target=y))
    plain = [call() for call in calls]
    with Log():
        logged = [call() for call in calls]
    assert seen == list(functions)
    assert all(torch.equal(a, b) for a, b in zip(plain, logged))


# --- Top-K distillation from stored teacher log-probs ---------------------------------

def _topk_inputs(device, dtype, k=6, seed=3):
    h, w, _, _ = make_inputs(device, dtype, lead=(2, 7), ignored=(), seed=seed)
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(2, 7, w.shape[0], generator=g).log_softmax(-1)
    logprobs, indices = teacher.topk(k, dim=-1)
    indices = indices.clone()
    indices[0, 3, 2:] = -100  # padding entries
    indices[1, 5, :] = -100   # a row with none: not counted
    return h, w, indices.to(device), logprobs.to(device)


def _topk_reference(h, w, indices, logprobs, temperature, reduction):
    logp = torch.log_softmax(F.linear(h.double(), w.double()) / temperature, -1)
    kept = indices != -100
    student = logp.gather(-1, indices.clamp(min=0))
    q = torch.where(kept, logprobs.double().exp(), 0.0)
    rows = (q * torch.where(kept, logprobs.double() - student, 0.0)).sum(-1)
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / kept.any(-1).sum()


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_topk_distillation_matches_torch(device, dtype, reduction):
    h, w, indices, logprobs = _topk_inputs(device, dtype)
    h, w = leaves(h, w)
    loss = lossjit.linear_topk_distill(h, w, indices, logprobs, temperature=2.0,
                                       reduction=reduction)
    hr, wr = leaves(h, w)
    ref = _topk_reference(hr, wr, indices, logprobs, 2.0, reduction)
    assert loss.shape == ref.shape
    assert_close(loss, ref, 2e-5)
    upstream = torch.linspace(0.5, 1.5, loss.numel(), dtype=torch.float64,
                              device=device).view(loss.shape)
    tol = {torch.float32: 5e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for g, r in zip(grads_of((loss.double() * upstream).sum(), [h, w]),
                    grads_of((ref * upstream).sum(), [hr, wr])):
        assert_close(g, r.to(dtype), tol, atol=tol * max(1.0, float(r.abs().max())))


def test_topk_distillation_bad_arguments():
    h, w, indices, logprobs = _topk_inputs("cpu", torch.float32)
    with pytest.raises(ValueError, match="teacher_logprobs must have the shape"):
        lossjit.linear_topk_distill(h, w, indices, logprobs[..., :2])
    bad = indices.clone()
    bad[0, 0, 0] = 1000
    with pytest.raises(IndexError, match=r"teacher_indices must be in \[0, V\)"):
        lossjit.linear_topk_distill(h, w, bad, logprobs)
    with pytest.raises(ValueError, match="teacher_indices must have shape"):
        lossjit.linear_topk_distill(h, w, indices[0], logprobs[0])


def test_autocast_casts_the_projection_like_f_linear():
    h, w, y, b = make_inputs("cpu", torch.float32, bias=True)
    cw = class_weights_for(w.shape[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = lossjit.linear_cross_entropy(h, w, y, b, weight=cw, label_smoothing=0.1)
        logp, ent = lossjit.linear_log_prob(h, w, y.clamp(min=0), return_entropy=True)
    assert loss.dtype == torch.float32 and logp.dtype == torch.float32
    bf = [t.bfloat16() for t in (h, w, b)]
    assert torch.equal(loss, lossjit.linear_cross_entropy(*bf[:2], y, bf[2], weight=cw,
                                                          label_smoothing=0.1))
    want_logp, want_ent = lossjit.linear_log_prob(bf[0], bf[1], y.clamp(min=0),
                                                  return_entropy=True)
    assert torch.equal(logp, want_logp) and torch.equal(ent, want_ent)
    stats = torch.ops.lossjit.vocab_reduce
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = stats(h, w, None, None, None, "lse", -100, 1.0, 0.0)
    assert torch.equal(under[0], stats(bf[0], bf[1], None, None, None, "lse", -100, 1.0,
                                       0.0)[0])


# --- Class-probability (soft) targets -----------------------------------------------

def _probabilities(n, v, dtype, device, seed=4):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n, v, generator=g) * 2, -1).to(dtype).to(device)


def _assert_gradients_match(loss, ref, leaves_, ref_leaves, dtype, device):
    """The gradients of Σ upstream·loss (a non-uniform upstream) against
    the fp64 reference's, at the storage type's tolerance."""
    upstream = torch.linspace(0.5, 1.5, loss.numel(), dtype=torch.float64,
                              device=device).view(loss.shape)
    tol = {torch.float32: 5e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for g, r in zip(grads_of((loss.double() * upstream).sum(), leaves_),
                    grads_of((ref * upstream).sum(), ref_leaves)):
        assert_close(g, r.to(dtype), tol, atol=tol * max(1.0, float(r.abs().max())))


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing,weighted", [(0.0, False), (0.0, True), (0.2, False),
                                                (0.2, True)])
def test_probability_targets_match_torch(device, dtype, reduction, smoothing, weighted):
    h, w, _, b = make_inputs(device, dtype, bias=True, ignored=())
    probs = _probabilities(h.shape[0], w.shape[0], dtype, device)
    cw = class_weights_for(w.shape[0]).to(device) if weighted else None
    h, w, b = leaves(h, w, b)
    loss = lossjit.linear_cross_entropy(h, w, probs, b, weight=cw, label_smoothing=smoothing,
                                        reduction=reduction)
    hr, wr, br = leaves(h, w, b)
    ref = F.cross_entropy(reference_logits(hr, wr, br), probs.double(),
                          weight=None if cw is None else cw.double(),
                          label_smoothing=smoothing, reduction=reduction)
    assert loss.shape == ref.shape
    assert_close(loss, ref, 2e-5)
    _assert_gradients_match(loss, ref, [h, w, b], [hr, wr, br], dtype, device)


def test_probability_targets_in_float32_with_16_bit_inputs_and_3d(device):
    h, w, _, _ = make_inputs(device, torch.bfloat16, lead=(2, 5), ignored=())
    probs = _probabilities(10, w.shape[0], torch.float32, device).view(2, 5, -1)
    loss = lossjit.linear_cross_entropy(h, w, probs, reduction="none")
    ref = F.cross_entropy(reference_logits(h, w).reshape(10, -1), probs.reshape(10, -1).double(),
                          reduction="none").view(2, 5)
    assert_close(loss, ref, 2e-5)


def test_probability_targets_rules():
    h, w, _, _ = make_inputs("cpu", torch.float32, ignored=())
    probs = _probabilities(h.shape[0], w.shape[0], torch.float32, "cpu")
    with pytest.raises(ValueError, match="ignore_index is not supported with class-probability"):
        lossjit.linear_cross_entropy(h, w, probs, ignore_index=3)
    with pytest.raises(RuntimeError, match="gradients with respect to class-probability targets"):
        lossjit.linear_cross_entropy(h, w, probs.clone().requires_grad_(True))
    empty = lossjit.linear_cross_entropy(h[:0], w, probs[:0])
    assert torch.isnan(empty)


# --- A teacher head: KL divergences -------------------------------------------------

def _teacher_inputs(device, dtype, t=13, seed=6):
    h, w, y, b = make_inputs(device, dtype, lead=(3, 6), ignored=(2, 11), bias=True,
                             seed=seed)
    g = torch.Generator().manual_seed(seed + 10)
    th = (torch.randn(3, 6, t, generator=g)).to(dtype).to(device)
    tw = (torch.randn(w.shape[0], t, generator=g) * 2 / t ** 0.5).to(dtype).to(device)
    tb = (torch.randn(w.shape[0], generator=g) * 0.3).to(dtype).to(device)
    return h, w, y, b, th, tw, tb


def _kl_reference(h, w, b, th, tw, tb, y, reverse, temperature, reduction):
    logp = torch.log_softmax(F.linear(h.double(), w.double(), b.double()) / temperature, -1)
    logq = torch.log_softmax(F.linear(th.double(), tw.double(), tb.double()) / temperature, -1)
    rows = (logp.exp() * (logp - logq)).sum(-1) if reverse else \
        (logq.exp() * (logq - logp)).sum(-1)
    return _counted_rows_reduced(rows, y, reduction)


def _counted_rows_reduced(rows, y, reduction):
    """Rows labelled ignore_index zeroed; 'mean' over the counted rows."""
    counted = y != -100
    rows = torch.where(counted, rows, 0.0)
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / counted.sum()


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_kl_divergence_to_a_teacher_head_matches_torch(device, dtype, reverse, reduction):
    _check_teacher_family(
        device, dtype,
        lambda *a: lossjit.linear_kl_div(*a[:4], reverse=reverse, temperature=1.5, target=a[7],
                                         reduction=reduction, student_bias=a[4],
                                         teacher_bias=a[5]),
        lambda *a: _kl_reference(*a, reverse, 1.5, reduction))


def _check_teacher_family(device, dtype, fused, reference):
    """fused(h, w, th, tw, b, tb, _, y) against reference(h, w, b, th, tw,
    tb, y) in fp64: values and gradients."""
    h, w, y, b, th, tw, tb = _teacher_inputs(device, dtype)
    h, w, b = leaves(h, w, b)
    loss = fused(h, w, th, tw, b, tb, None, y)
    hr, wr, br = leaves(h, w, b)
    ref = reference(hr, wr, br, th, tw, tb, y)
    assert loss.shape == ref.shape
    assert_close(loss, ref, 2e-5)
    _assert_gradients_match(loss, ref, [h, w, b], [hr, wr, br], dtype, device)


def test_kl_divergence_rules():
    h, w, y, b, th, tw, tb = _teacher_inputs("cpu", torch.float32)
    with pytest.raises(RuntimeError, match="teacher_weight requires grad"):
        lossjit.linear_kl_div(h, w, th, tw.clone().requires_grad_(True))
    with pytest.raises(ValueError, match="teacher_weight must have shape"):
        lossjit.linear_kl_div(h, w, th, tw[:, :-1])
    with pytest.raises(ValueError, match="teacher_hidden must have the leading dims"):
        lossjit.linear_kl_div(h, w, th[:2], tw)
    with pytest.raises(ValueError, match="temperature must be positive"):
        lossjit.linear_kl_div(h, w, th, tw, temperature=-1.0)


def test_kl_divergence_with_a_teacher_too_wide_to_pack():
    # T = 2100: 64 vocabulary columns of w' exceed the host's teacher pack
    # (128 Ki floats), so its logits take the unpacked tile product.
    h, w, y, b, th, tw, tb = _teacher_inputs("cpu", torch.float32, t=2100)
    h, w, b = leaves(h, w, b)
    loss = lossjit.linear_kl_div(h, w, th, tw, target=y, student_bias=b, teacher_bias=tb)
    hr, wr, br = leaves(h, w, b)
    ref = _kl_reference(hr, wr, br, th, tw, tb, y, False, 1.0, "mean")
    assert_close(loss, ref, 2e-5)
    _assert_gradients_match(loss, ref, [h, w, b], [hr, wr, br], torch.float32, "cpu")


# --- A teacher head: the generalized Jensen-Shannon divergence --------------------

def _jsd_reference(h, w, b, th, tw, tb, y, beta, temperature, reduction):
    student = F.linear(h.double(), w.double(), b.double()) / temperature
    teacher = F.linear(th.double(), tw.double(), tb.double()) / temperature
    rows = trl_generalized_jsd_terms(student, teacher, beta).sum(-1)
    return _counted_rows_reduced(rows, y, reduction)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("beta", [0.5, 0.1, 0.9])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_generalized_jsd_matches_trl(device, dtype, beta, reduction):
    _check_teacher_family(
        device, dtype,
        lambda *a: lossjit.linear_jsd(*a[:4], beta=beta, temperature=1.5, target=a[7],
                                      reduction=reduction, student_bias=a[4],
                                      teacher_bias=a[5]),
        lambda *a: _jsd_reference(*a, beta, 1.5, reduction))


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_jsd_at_the_ends_is_the_kl_divergence(device, beta):
    # β = 0 is KL(teacher‖student), β = 1 KL(student‖teacher), as in TRL.
    h, w, y, b, th, tw, tb = _teacher_inputs(device, torch.float32)
    loss = lossjit.linear_jsd(h, w, th, tw, beta=beta, target=y, student_bias=b,
                              teacher_bias=tb)
    kl = lossjit.linear_kl_div(h, w, th, tw, reverse=beta == 1.0, target=y, student_bias=b,
                               teacher_bias=tb)
    assert torch.equal(loss, kl)
    ref = _jsd_reference(h, w, b, th, tw, tb, y, beta, 1.0, "mean")
    assert_close(loss, ref, 2e-5)


def test_jsd_of_identical_heads_is_zero_and_its_gradient_too():
    h, w, y, b, _, _, _ = _teacher_inputs("cpu", torch.float32)
    hh, ww = leaves(h, w)
    loss = lossjit.linear_jsd(hh, ww, h, w, beta=0.3, reduction="sum")
    gh, gw = torch.autograd.grad(loss, [hh, ww])
    assert abs(float(loss.detach())) < 1e-5
    assert float(gh.abs().max()) < 1e-5 and float(gw.abs().max()) < 1e-5


def test_jsd_with_a_long_vocabulary_and_teacher_of_its_own_size():
    # V = 1500 spans several host vocabulary tiles in both sweeps.
    h, w, y, _ = make_inputs("cpu", torch.bfloat16, n=9, v=1500, d=16, seed=8)
    g = torch.Generator().manual_seed(9)
    th = torch.randn(9, 40, generator=g).to(torch.bfloat16)
    tw = (torch.randn(1500, 40, generator=g) * 0.3).to(torch.bfloat16)
    h, w = leaves(h, w)
    loss = lossjit.linear_jsd(h, w, th, tw, beta=0.25, temperature=0.7, reduction="none")
    hr, wr = leaves(h, w)
    ref = trl_generalized_jsd_terms(F.linear(hr.double(), wr.double()) / 0.7,
                                    F.linear(th.double(), tw.double()) / 0.7, 0.25).sum(-1)
    assert_close(loss, ref, 2e-5)
    _assert_gradients_match(loss, ref, [h, w], [hr, wr], torch.bfloat16, "cpu")


def test_jsd_bitwise_repeats(device):
    h, w, y, b, th, tw, tb = _teacher_inputs(device, torch.bfloat16)
    runs = []
    for _ in range(3):
        hh, ww = leaves(h, w)
        loss = lossjit.linear_jsd(hh, ww, th, tw, beta=0.4, target=y)
        runs.append((loss.detach(),) + tuple(torch.autograd.grad(loss, [hh, ww])))
    for run in runs[1:]:
        for a, b_ in zip(runs[0], run):
            assert torch.equal(a, b_)


def test_jsd_rules():
    h, w, y, b, th, tw, tb = _teacher_inputs("cpu", torch.float32)
    for beta in (-0.1, 1.5, float("nan"), True, "half"):
        with pytest.raises(ValueError, match="beta must be a number in"):
            lossjit.linear_jsd(h, w, th, tw, beta=beta)
    with pytest.raises(RuntimeError, match="teacher_hidden requires grad"):
        lossjit.linear_jsd(h, w, th.clone().requires_grad_(True), tw)
    with pytest.raises(ValueError, match="temperature must be positive"):
        lossjit.linear_jsd(h, w, th, tw, temperature=0.0)
    # The statistics: jsd_beta is checked where it is read, and mixture_p2
    # (mixture_kl's saved row value) refuses a gradient instead of dropping it.
    flat_h, flat_th = h.reshape(-1, h.shape[-1]), th.reshape(-1, th.shape[-1])
    with pytest.raises(ValueError, match=r"jsd_beta must be in \(0, 1\)"):
        lossjit._reduce.vocab_reduce(flat_h, w, ("jsd",), teacher_input=flat_th,
                                     teacher_weight=tw, jsd_beta=1.0)
    with pytest.raises(ValueError, match="jsd_beta is read by jsd, mixture_kl and mixture_p2 only"):
        lossjit._reduce.vocab_reduce(flat_h, w, ("lse",), jsd_beta=0.3)
    hh = flat_h.clone().requires_grad_(True)
    lse, tlse, kl, p2, jsd = lossjit._reduce.vocab_reduce(
        hh, w, ("lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd"), teacher_input=flat_th,
        teacher_weight=tw)
    with pytest.raises(RuntimeError, match="mixture_p2 is not differentiable"):
        (jsd + p2).sum().backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mixture_statistics_and_their_gradients_match_torch(device, dtype):
    # KL(p‖M) and Σ p²/M as the op returns them, and the gradient of
    # a·KL(p‖M) + b·jsd (mixture_kl's adjoint reads the saved Σ p²/M).
    h, w, y, b, th, tw, tb = _teacher_inputs(device, dtype)
    h, w, th = h.reshape(-1, h.shape[-1]), w, th.reshape(-1, th.shape[-1])
    beta = 0.35
    hh, ww = leaves(h, w)
    names = ("lse", "teacher_lse", "mixture_kl", "mixture_p2", "jsd")
    stats = dict(zip(names, lossjit._reduce.vocab_reduce(
        hh, ww, names, teacher_input=th, teacher_weight=tw, jsd_beta=beta)))
    hr, wr = leaves(h, w)
    logp = torch.log_softmax(F.linear(hr.double(), wr.double()), -1)
    logq = torch.log_softmax(F.linear(th.double(), tw.double()), -1)
    p, q = logp.exp(), logq.exp()
    m = beta * q + (1 - beta) * p
    ref = {"mixture_kl": (p * (logp - m.log())).sum(-1), "mixture_p2": (p * p / m).sum(-1),
           "jsd": trl_generalized_jsd_terms(logp, logq, beta).sum(-1)}
    for name, want in ref.items():
        assert_close(stats[name], want, 2e-5)
    a = torch.linspace(0.5, 1.5, h.shape[0], dtype=torch.float64, device=device)
    loss = (a * stats["mixture_kl"].double()).sum() - 0.7 * stats["jsd"].double().sum()
    want = (a * ref["mixture_kl"]).sum() - 0.7 * ref["jsd"].sum()
    tol = {torch.float32: 5e-5, torch.bfloat16: 1.6e-2}[dtype]
    for g, r in zip(grads_of(loss, [hh, ww]), grads_of(want, [hr, wr])):
        assert_close(g, r.to(dtype), tol, atol=tol * max(1.0, float(r.abs().max())))


def test_jsd_ops_pass_opcheck():
    h, w, y, b, th, tw, tb = _teacher_inputs("cpu", torch.float32)
    # (opcheck's autograd test would send a random gradient to mixture_p2,
    # which refuses one: the forward op is checked without grad, the
    # backward op with mixture_p2's adjoint 0.)
    flat_h, flat_th = h.reshape(-1, h.shape[-1]), th.reshape(-1, th.shape[-1])
    names = "lse,teacher_lse,mixture_kl,mixture_p2,jsd"
    args = (flat_h, w, None, None, None, names, -100, 1.0, 0.0, None, flat_th, tw, None, 1.0,
            0.3)
    torch.library.opcheck(torch.ops.lossjit.vocab_reduce.default, args)
    saved = list(torch.ops.lossjit.vocab_reduce(*args))
    grads = [torch.rand_like(s) for s in saved]
    grads[3] = torch.zeros_like(saved[3])
    args = (flat_h, w, None, None, None, saved, grads, names, -100, True, True, 1.0, 0.0, None,
            flat_th, tw, None, 1.0, 0.3)
    torch.library.opcheck(torch.ops.lossjit.vocab_reduce_backward.default, args)
