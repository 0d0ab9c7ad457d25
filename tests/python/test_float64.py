"""float64 inputs compute in float64: torch's own OpInfo samples of
F.linear_cross_entropy run against lossjit.linear_cross_entropy, every loss
family passes gradcheck (on the CPU, and on CUDA where there is one), the
decorator fuses float64 losses, and what is not supported (K-dimensional
losses) is a clear error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

import lossjit
from conftest import needs_cpu_backend


def _opinfo_samples(dtype):
    """Every sample of torch's OpInfo entries for F.linear_cross_entropy
    (the plain, chunked and chunked-none variants) on the CPU."""
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "nn.functional.linear_cross_entropy"]
    assert ops, "this torch has no OpInfo for nn.functional.linear_cross_entropy"
    for op in ops:
        for sample in op.sample_inputs("cpu", dtype, requires_grad=True):
            yield op, sample


def _differentiable(sample):
    inputs = [sample.input, sample.args[0], sample.kwargs.get("linear_bias")]
    return [t for t in inputs if t is not None and t.requires_grad]


def _as_float64(op, sample, target):
    """torch's op on float64 leaf copies of the sample: the reference value
    and the copies of the differentiable inputs, in _differentiable order."""
    copies = {id(t): t.detach().double().requires_grad_() for t in _differentiable(sample)}
    wide = lambda t: None if t is None else copies.get(id(t), t.double())  # noqa: E731
    kwargs = dict(sample.kwargs)
    for name in ("linear_bias", "weight"):
        if kwargs.get(name) is not None:
            kwargs[name] = wide(kwargs[name])
    target = target.double() if target.is_floating_point() else target
    value = op(wide(sample.input), wide(sample.args[0]), target, **kwargs)
    return value, [copies[id(t)] for t in _differentiable(sample)]


@needs_cpu_backend
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_opinfo_samples_match_torch(dtype):
    """Values, dtypes and gradients of every sample torch tests its own op
    with, against torch's op in float64; the K-dimensional ones are refused
    by name. The bound follows the conditioning: a logit is a dot product
    whose rounding is relative to Σ_k |x_k·w_k| + |b| (up to ≈ 650 in these
    samples, whose entries reach 9), e^z = 2^(z·log2 e) is off by about
    |z|·eps relative, p = exp(z − lse) inherits both, and a gradient sums
    such terms weighted by |x| or |w|. (Measured: float64 within 27 ulp of
    a loss value, float32 gradients within 5e-5 where |z| reaches 220.)"""
    eps = torch.finfo(dtype).eps
    compared = refused = 0
    for op, sample in _opinfo_samples(dtype):
        weight, target = sample.args[0], sample.args[1]
        if target.is_floating_point():  # lossjit computes no gradient for targets
            target = target.detach()
        args = (sample.input, weight, target)
        if weight.dim() > 2:
            with pytest.raises(ValueError, match="K-dimensional losses"):
                lossjit.linear_cross_entropy(*args, **sample.kwargs)
            refused += 1
            continue
        got = lossjit.linear_cross_entropy(*args, **sample.kwargs)
        want, wide = _as_float64(op, sample, target)
        assert got.dtype == dtype and got.shape == want.shape, sample
        bias = sample.kwargs.get("linear_bias")
        terms = torch.nn.functional.linear(
            sample.input.detach().double().abs(), weight.detach().double().abs(),
            None if bias is None else bias.detach().double().abs())
        scale = 1.0 + float(terms.max()) if terms.numel() else 1.0
        magnitude = 1.0 + max(float(sample.input.detach().abs().max()),
                              float(weight.detach().abs().max()))
        torch.testing.assert_close(got.double(), want, rtol=32 * eps, atol=16 * eps * scale)
        seed = torch.randn(want.shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(1))
        grads_got = torch.autograd.grad((got * seed.to(dtype)).sum(), _differentiable(sample))
        grads_want = torch.autograd.grad((want * seed).sum(), wide)
        for g, w in zip(grads_got, grads_want):
            torch.testing.assert_close(g.double(), w, rtol=32 * eps,
                                       atol=16 * eps * scale * magnitude)
        compared += 1
    assert compared >= 100 and refused >= 20, (compared, refused)


@needs_cpu_backend
def test_opinfo_samples_pass_gradcheck():
    """gradcheck (finite differences in float64) on the OpInfo samples with
    class-index targets and a 2-d weight."""
    checked = 0
    for op, sample in _opinfo_samples(torch.float64):
        weight, target = sample.args[0], sample.args[1]
        if weight.dim() > 2 or target.is_floating_point() or not _differentiable(sample):
            continue
        params = _differentiable(sample)
        kwargs = {k: v for k, v in sample.kwargs.items() if k != "linear_bias"}
        bias = sample.kwargs.get("linear_bias")

        def f(*ps):
            values = dict(zip([id(p) for p in params], ps))
            h, w = values.get(id(sample.input), sample.input), values.get(id(weight), weight)
            b = None if bias is None else values.get(id(bias), bias)
            return lossjit.linear_cross_entropy(h, w, target, linear_bias=b, **kwargs)

        assert gradcheck(f, tuple(params))
        checked += 1
    assert checked >= 30, checked


def _family_inputs(device="cpu"):
    g = torch.Generator().manual_seed(0)
    n, d, v, t = 6, 11, 23, 9
    x = torch.randn(n, d, dtype=torch.float64, generator=g).requires_grad_()
    w = torch.randn(v, d, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.randn(v, dtype=torch.float64, generator=g).requires_grad_()
    y = torch.randint(0, v, (n,), generator=g)
    y[1] = -100
    extra = dict(
        y=y, class_weights=torch.rand(v, dtype=torch.float64, generator=g) + 0.5,
        probs=torch.softmax(torch.randn(n, v, dtype=torch.float64, generator=g), -1),
        tx=torch.randn(n, t, dtype=torch.float64, generator=g),
        tw=torch.randn(v, t, dtype=torch.float64, generator=g),
        topk=torch.stack([torch.randperm(v, generator=g)[:4] for _ in range(n)]),
        topk_lp=torch.log_softmax(torch.randn(n, 4, dtype=torch.float64, generator=g), -1))
    move = lambda t: t.detach().to(device).requires_grad_(t.requires_grad)  # noqa: E731
    return tuple(move(t) for t in (x, w, b)), {k: move(v) for k, v in extra.items()}


FAMILIES = {
    "ce": lambda x, w, b, e: lossjit.linear_cross_entropy(x, w, e["y"], b),
    "ce fused_backward": lambda x, w, b, e: lossjit.linear_cross_entropy(
        x, w, e["y"], b, fused_backward=True),
    "ce none scale softcap": lambda x, w, b, e: lossjit.linear_cross_entropy(
        x, w, e["y"], b, reduction="none", logit_scale=0.7, softcap=3.0),
    "ce weights smoothing": lambda x, w, b, e: lossjit.linear_cross_entropy(
        x, w, e["y"], b, weight=e["class_weights"], label_smoothing=0.1),
    "ce probability targets": lambda x, w, b, e: lossjit.linear_cross_entropy(
        x, w, e["probs"], b, label_smoothing=0.05),
    "ce + z-loss": lambda x, w, b, e: (lambda r: r[0] + 1e-2 * r[1].square().mean())(
        lossjit.linear_cross_entropy(x, w, e["y"], b, return_lse=True)),
    "log-prob + entropy": lambda x, w, b, e: (lambda r: r[0].sum() + r[1].sum())(
        lossjit.linear_log_prob(x, w, e["y"].clamp(min=0), temperature=0.8,
                                return_entropy=True)),
    "forward KL": lambda x, w, b, e: lossjit.linear_kl_div(x, w, e["tx"], e["tw"],
                                                           temperature=1.3),
    "reverse KL": lambda x, w, b, e: lossjit.linear_kl_div(x, w, e["tx"], e["tw"],
                                                           reverse=True),
    "JSD": lambda x, w, b, e: lossjit.linear_jsd(x, w, e["tx"], e["tw"], beta=0.3),
    "top-K distillation": lambda x, w, b, e: lossjit.linear_topk_distill(
        x, w, e["topk"], e["topk_lp"]),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_passes_gradcheck(device, family):
    (x, w, b), extra = _family_inputs(device)
    loss = FAMILIES[family](x, w, b, extra)
    assert loss.dtype == torch.float64
    assert gradcheck(lambda *p: FAMILIES[family](*p, extra), (x, w, b))


@needs_cpu_backend
def test_float64_matches_torch_to_float64_rounding_and_repeats_bitwise():
    (x, w, b), extra = _family_inputs()
    y, cw = extra["y"], extra["class_weights"]
    got = lossjit.linear_cross_entropy(x, w, y, b, weight=cw, label_smoothing=0.2)
    want = F.cross_entropy(F.linear(x, w, b), y, weight=cw, label_smoothing=0.2)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    g1 = torch.autograd.grad(got, (x, w, b))
    again = lossjit.linear_cross_entropy(x, w, y, b, weight=cw, label_smoothing=0.2)
    g2 = torch.autograd.grad(again, (x, w, b))
    assert torch.equal(got, again)
    assert all(torch.equal(p, q) for p, q in zip(g1, g2))
    # The logit maps too: softcap's tanh keeps float64 accuracy (its small-
    # argument branch is a float64 rational, not float32's polynomial).
    for cap in (0.3, 2.0, 40.0):
        got = lossjit.linear_cross_entropy(x, w, y, b, reduction="none", logit_scale=0.8,
                                           softcap=cap)
        z = cap * torch.tanh(0.8 * F.linear(x, w, b) / cap)
        want = F.cross_entropy(z, y, reduction="none")
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
        seed = torch.randn(got.shape, dtype=torch.float64)
        for g, r in zip(torch.autograd.grad((got * seed).sum(), (x, w, b)),
                        torch.autograd.grad((want * seed).sum(), (x, w, b))):
            torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


@needs_cpu_backend
def test_the_decorator_fuses_a_float64_loss():
    (x, w, _), extra = _family_inputs()
    y, cw = extra["y"], extra["class_weights"]

    def loss(x, w, y):
        logits = F.linear(x, w)
        z = torch.logsumexp(logits, -1)
        return F.cross_entropy(logits, y, weight=cw, label_smoothing=0.1) \
            + 1e-2 * (z ** 2).mean()

    fused = lossjit.jit(loss)
    torch.testing.assert_close(fused(x, w, y), loss(x, w, y), rtol=1e-13, atol=1e-13)
    assert gradcheck(lambda a, c: fused(a, c, y), (x, w))


def test_options_are_accepted_for_drop_in_calls():
    (x, w, b), extra = _family_inputs()
    options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)
    with_options = lossjit.linear_cross_entropy(x, w, extra["y"], b, options=options)
    assert torch.equal(with_options, lossjit.linear_cross_entropy(x, w, extra["y"], b))
    with pytest.raises(TypeError, match="options must be None or a "
                                        "torch.nn.LinearCrossEntropyOptions, got dict"):
        lossjit.linear_cross_entropy(x, w, extra["y"], b, options={"batch_chunk_size": 2})


def test_meta_and_fake_tensors_give_float64_row_values():
    """The fake (torch.compile) and meta registrations give the dtypes the
    kernels write: float64 losses, lse and statistics for float64 inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    h = torch.empty(5, 8, dtype=torch.float64, device="meta", requires_grad=True)
    w = torch.empty(16, 8, dtype=torch.float64, device="meta", requires_grad=True)
    y = torch.empty(5, dtype=torch.long, device="meta")
    loss, lse = lossjit.linear_cross_entropy(h, w, y, reduction="none", return_lse=True)
    assert (loss.dtype, lse.dtype, loss.shape) == (torch.float64, torch.float64, (5,))
    gh, gw = torch.autograd.grad(loss.sum(), [h, w])
    assert gh.dtype == gw.dtype == torch.float64
    with FakeTensorMode() as mode:
        h = mode.from_tensor(torch.randn(5, 8, dtype=torch.float64))
        w = mode.from_tensor(torch.randn(16, 8, dtype=torch.float64))
        y = mode.from_tensor(torch.randint(0, 16, (5,)))
        logp, entropy = lossjit.linear_log_prob(h, w, y, return_entropy=True)
        assert logp.dtype == entropy.dtype == torch.float64
        assert type(logp).__name__ == "FakeTensor"
