"""@lossjit.jit: fused losses written with torch ops, against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import lossjit
from lossjit import _kernels
from conftest import make_inputs

# --- the losses (each also runs eagerly as .fn) ------------------------------


@lossjit.jit
def plain_ce(hidden, weight, target):
    return F.cross_entropy(F.linear(hidden, weight), target)


@lossjit.jit
def ce_ignore_index(hidden, weight, target):
    return F.cross_entropy(hidden @ weight.T, target, ignore_index=5)


@lossjit.jit
def ce_sum(hidden, weight, bias, target):
    return F.cross_entropy(F.linear(hidden, weight, bias), target, reduction="sum")


@lossjit.jit
def scaled_logits(hidden, weight, bias, target):
    # A muP-style multiplier, then a temperature: two scales of the logits.
    logits = (torch.matmul(hidden, weight.t()) + bias) * 0.5
    return F.cross_entropy(logits / 0.8, target)


@lossjit.jit
def softcapped(hidden, weight, target):
    # Gemma-2 style tanh soft-capping of the logits.
    logits = F.linear(hidden, weight).float()
    return F.cross_entropy(30.0 * torch.tanh(logits / 30.0), target)


@lossjit.jit
def scaled_softcapped(hidden, weight, bias, target):
    # A scale, then the cap written as tanh(z / cap) * cap, over a sum.
    logits = F.linear(hidden, weight, bias).float() * 0.7
    capped = torch.tanh(logits / 10.0) * 10.0
    return F.nll_loss(F.log_softmax(capped, dim=-1), target, reduction="sum")


@lossjit.jit
def float_cast(hidden, weight, target):
    logits = F.linear(hidden, weight).float()
    return F.nll_loss(F.log_softmax(logits, dim=-1), target, reduction="none")


@lossjit.jit
def llm_style(hidden, weight, target, accumulation):
    # [B, T, D] hidden states, flattened logits, an epilogue and the lse.
    logits = F.linear(hidden, weight).float()
    logits = logits.view(-1, logits.size(-1))
    loss = F.cross_entropy(logits, target.view(-1), ignore_index=-100)
    return loss / accumulation, torch.logsumexp(logits, dim=-1)


@lossjit.jit
def masked_rows(hidden, weight, target, mask):
    rows = F.cross_entropy(F.linear(hidden, weight).float(), target, reduction="none")
    return (rows * mask).sum() / mask.sum()


CASES = [
    ("plain_ce", plain_ce, torch.float32, False, dict()),
    ("ignore_index", ce_ignore_index, torch.float32, False, dict(ignore_index=5)),
    ("sum", ce_sum, torch.float32, True, dict()),
    ("scaled", scaled_logits, torch.float32, True, dict()),
    ("softcap", softcapped, torch.float32, False, dict(scale=40.0)),
    ("softcap_f16", softcapped, torch.float16, False, dict(scale=40.0)),
    ("scaled_softcap_bf16", scaled_softcapped, torch.bfloat16, True, dict(scale=20.0)),
    ("float_cast_f16", float_cast, torch.float16, False, dict()),
    ("float_cast_bf16", float_cast, torch.bfloat16, False, dict()),
]


def _call_args(fn, h, w, y, b):
    return (h, w, b, y) if fn in (ce_sum, scaled_logits, scaled_softcapped) else (h, w, y)


@pytest.mark.parametrize("name,fn,dtype,bias,kw", CASES, ids=[c[0] for c in CASES])
def test_decorated_loss_matches_eager(device, name, fn, dtype, bias, kw):
    h, w, y, b = make_inputs(device, dtype, bias=bias, requires_grad=True, **kw)
    args = _call_args(fn, h, w, y, b)
    got = fn(*args)
    # Eager in float64 from the same inputs: lossjit computes in float32, so
    # compare with what the function means, not with eager's fp16 rounding.
    args64 = [a.detach().double().requires_grad_() if a.is_floating_point() else a
              for a in args]
    ref = fn.fn(*args64)
    assert got.dtype == (torch.float32 if dtype == torch.float32
                         or fn in (float_cast, softcapped, scaled_softcapped) else dtype)
    assert got.shape == ref.shape
    torch.testing.assert_close(got.double(), ref.double(), rtol=2e-5, atol=2e-5)
    grad_out = torch.rand_like(ref)
    floats = [a for a in args if a.is_floating_point()]
    floats64 = [a for a in args64 if a.is_floating_point()]
    g_got = torch.autograd.grad(got, floats, grad_out.to(got.dtype))
    g_ref = torch.autograd.grad(ref, floats64, grad_out)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for a, r in zip(g_got, g_ref):
        torch.testing.assert_close(a.double(), r, rtol=tol, atol=tol)


def test_plain_ce_is_bitwise_the_public_op(device):
    h, w, y, _ = make_inputs(device)
    assert torch.equal(plain_ce(h, w, y), lossjit.linear_cross_entropy(h, w, y))


def test_llm_style_epilogue_and_lse(device):
    h, w, y, _ = make_inputs(device, torch.bfloat16, lead=(2, 6), requires_grad=True)
    loss, lse = llm_style(h, w, y, 4)
    h64 = h.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    ref_loss, ref_lse = llm_style.fn(h64, w64, y, 4)
    torch.testing.assert_close(loss.double(), ref_loss.double(), rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(lse.double(), ref_lse.double(), rtol=2e-5, atol=2e-5)
    assert lse.dtype == torch.float32 and lse.shape == (12,)
    loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(h.grad.double(), h64.grad, rtol=1.6e-2, atol=1.6e-2)
    # lse is differentiable (a z-loss on the decorated loss's lse).
    h.grad = w.grad = h64.grad = w64.grad = None
    loss2, lse2 = llm_style(h, w, y, 4)
    (loss2 + 0.5 * lse2.square().mean()).backward()
    ref_loss2, ref_lse2 = llm_style.fn(h64, w64, y, 4)
    (ref_loss2 + 0.5 * ref_lse2.square().mean()).backward()
    torch.testing.assert_close(h.grad.double(), h64.grad, rtol=1.6e-2, atol=1.6e-2)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1.6e-2, atol=1.6e-2)


def test_masked_epilogue(device):
    h, w, y, _ = make_inputs(device, requires_grad=True)
    mask = (torch.arange(h.shape[0], device=device) % 3 != 0).float()
    got = masked_rows(h, w, y, mask)
    ref = masked_rows.fn(h.detach().double(), w.detach().double(), y, mask.double())
    torch.testing.assert_close(got.double(), ref, rtol=2e-5, atol=2e-5)


def test_specializations_are_cached(device):
    @lossjit.jit
    def loss_fn(h, w, y):
        return F.cross_entropy(F.linear(h, w).float(), y)

    h, w, y, _ = make_inputs(device)
    loss_fn(h, w, y)
    before = _kernels.cache_info()
    for _ in range(3):
        loss_fn(h, w, y)
    assert loss_fn.specializations == 1
    assert _kernels.cache_info() == before
    # A new shape re-traces but reuses the compiled (shape-generic) kernel.
    h2, w2, y2, _ = make_inputs(device, n=5, v=11, d=8)
    loss_fn(h2, w2, y2)
    assert loss_fn.specializations == 2
    assert _kernels.cache_info()["forward"] == before["forward"]
    # A new dtype is a new kernel.
    loss_fn(h.half(), w.half(), y)
    assert _kernels.cache_info()["forward"] == before["forward"] + 1


# --- redispatch safety of the decorated callable -----------------------------


class SentinelTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is plain_ce:
            return "sentinel"
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("position", [0, 1, 2])
def test_decorated_callable_is_redispatch_safe(device, position):
    args = list(make_inputs(device)[:3])
    expected = plain_ce(*args)
    sub = list(args)
    sub[position] = sub[position].as_subclass(SentinelTensor)
    assert plain_ce(*sub) == "sentinel"

    class Log(TorchFunctionMode):
        log = []

        def __torch_function__(self, func, types, a=(), kw=None):
            self.log.append(func)
            return func(*a, **(kw or {}))

    with Log() as mode:
        got = plain_ce(*args)
    assert mode.log == [plain_ce] and torch.equal(got, expected)


# --- what it cannot fuse ---------------------------------------------------------


# --- logit scaling and tanh soft-capping ---------------------------------------


def test_softcap_and_scale_are_graph_ops(device):
    """Exact transforms: loss.scale / loss.softcap in the graph, the fused op's
    options, and the hidden states passed to the kernel untouched."""
    if not lossjit.has_compiler:
        pytest.skip("no compiler in this build")
    fn = lossjit.jit(scaled_softcapped.fn)
    h, w, y, b = make_inputs(device, bias=True, scale=20.0)
    fn(h, w, b, y)
    (program,) = fn._programs.values()
    text = _kernels.registered_graph(program.graph_id).text()
    assert "loss.scale" in text and "factor = 0.69999999999999996 : f64" in text  # 0.7
    assert "loss.softcap" in text and "cap = 1.000000e+01 : f64" in text
    kernel = _kernels.forward_kernel(torch.float32, torch.int64, True, -100, "sum",
                                     program.graph_id, torch.device(device), 0.7, 10.0)
    assert kernel.options["logit_scale"] == "0.7" and kernel.options["softcap"] == "10.0"
    # The hidden states reach the fused op as they are (no folded scale).
    fused = [step for kind, step in program.steps if kind == "fused"][0]
    assert (fused.logit_scale, fused.softcap) == (0.7, 10.0)
    assert not hasattr(fused, "x_scale")


@pytest.mark.parametrize("body,scale,cap,size", [
    (lambda z: 30.0 * torch.tanh(z / 30.0), 1.0, 30.0, 25.0),
    (lambda z: torch.tanh(z / 30.0) * 30.0, 1.0, 30.0, 25.0),
    (lambda z: z.tanh() * 1.0, 1.0, 1.0, 3.0),
    (lambda z: 5.0 * torch.tanh(z / 10.0), 0.5, 5.0, 25.0),         # = softcap_5(z / 2)
    (lambda z: torch.tanh((z * 2.0) / 15.0) * -15.0, -2.0, 15.0, 25.0),  # negative outer
    (lambda z: -z / 2.0, -0.5, 0.0, 3.0),
    (lambda z: 3.0 * z, 3.0, 0.0, 1.0),
], ids=["cap_tanh", "tanh_cap", "tanh_method", "cap_ne_divisor", "negative_outer",
        "neg_div", "rmul"])
def test_logit_transform_patterns(device, body, scale, cap, size):
    @lossjit.jit
    def loss_fn(h, w, y):
        return F.cross_entropy(body(F.linear(h, w)), y, reduction="sum")

    h, w, y, _ = make_inputs(device, requires_grad=True, scale=size)
    got = loss_fn(h, w, y)
    h64 = h.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    ref = loss_fn.fn(h64, w64, y)
    torch.testing.assert_close(got.double(), ref, rtol=2e-5, atol=2e-5)
    got.backward()
    ref.backward()
    torch.testing.assert_close(h.grad.double(), h64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-5)
    if lossjit.has_compiler:
        (program,) = loss_fn._programs.values()
        fused = [step for kind, step in program.steps if kind == "fused"][0]
        assert fused.logit_scale == pytest.approx(scale, rel=1e-15)
        assert fused.softcap == cap


def test_softcap_lse_of_the_final_logits(device):
    @lossjit.jit
    def loss_fn(h, w, y):
        z = 20.0 * torch.tanh(F.linear(h, w) / 20.0)
        return F.cross_entropy(z, y), torch.logsumexp(z, dim=-1)

    h, w, y, _ = make_inputs(device, scale=30.0)
    loss, lse = loss_fn(h, w, y)
    ref_loss, ref_lse = loss_fn.fn(h.double(), w.double(), y)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=2e-5, atol=2e-5)


def test_softcap_saturated_gradients_stay_finite(device):
    """Logits of |z| ~ 1e4 against cap 2: tanh is ±1 to f32 precision (the
    kernel's exp overflows to inf), loss and gradients finite and right."""

    @lossjit.jit
    def loss_fn(h, w, y):
        return F.cross_entropy(2.0 * torch.tanh(F.linear(h, w) / 2.0), y)

    h, w, y, _ = make_inputs(device, requires_grad=True, scale=1e4)
    got = loss_fn(h, w, y)
    h64 = h.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    ref = loss_fn.fn(h64, w64, y)
    torch.testing.assert_close(got.double(), ref, rtol=2e-5, atol=2e-5)
    got.backward()
    ref.backward()
    assert torch.isfinite(h.grad).all() and torch.isfinite(w.grad).all()
    torch.testing.assert_close(h.grad.double(), h64.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("body,message", [
    (lambda h, w, b, y: F.cross_entropy(F.linear(h, w) * 0.5 + b, y),
     "bias is added to logits already scaled"),
    (lambda h, w, b, y: F.cross_entropy(10.0 * torch.tanh(F.linear(h, w) / 10.0) + b, y),
     "bias is added to logits already soft-capped"),
    (lambda h, w, b, y: F.cross_entropy(torch.tanh(torch.tanh(F.linear(h, w))), y),
     "second tanh"),
    (lambda h, w, b, y: F.cross_entropy(torch.tanh(F.linear(h, w) / 3.0) * 0.0, y),
     "finite nonzero scale"),
])
def test_unsupported_transform_orders_raise(body, message):
    h, w, y, b = make_inputs("cpu", bias=True)
    fn = lossjit.jit(body)
    with pytest.raises(lossjit.JitError, match=message):
        fn(h, w, b, y)


def test_lse_before_the_softcap_is_an_error():
    @lossjit.jit
    def loss_fn(h, w, y):
        z = F.linear(h, w)
        return F.cross_entropy(30.0 * torch.tanh(z / 30.0), y), torch.logsumexp(z, -1)

    h, w, y, _ = make_inputs("cpu")
    with pytest.raises(lossjit.JitError, match="also used before the cap"):
        loss_fn(h, w, y)


def test_tanh_used_twice_names_the_op():
    @lossjit.jit
    def loss_fn(h, w, y):
        t = torch.tanh(F.linear(h, w).float() / 30.0)
        return F.cross_entropy(30.0 * t, y), t.mean()

    h, w, y, _ = make_inputs("cpu")
    with pytest.raises(lossjit.JitError) as info:
        loss_fn(h, w, y)
    message = str(info.value)
    assert "Tensor.mean" in message and "materialized" in message


@pytest.mark.parametrize("body,op", [
    (lambda h, w, y: F.cross_entropy(torch.sigmoid(F.linear(h, w)), y), "torch.sigmoid"),
    (lambda h, w, y: (F.linear(h, w) ** 2).mean(), "neither F.cross_entropy"),
    (lambda h, w, y: F.cross_entropy(F.linear(h, w).sort(-1).values, y), "sort"),
])
def test_unsupported_ops_raise_clear_errors(body, op):
    h, w, y, _ = make_inputs("cpu")
    fn = lossjit.jit(body)
    with pytest.raises(lossjit.JitError) as info:
        fn(h, w, y)
    assert op in str(info.value)


def test_logits_used_twice_is_an_error():
    @lossjit.jit
    def with_accuracy(h, w, y):
        logits = F.linear(h, w)
        accuracy = (logits.argmax(-1) == y).float().mean()
        return F.cross_entropy(logits, y), accuracy

    h, w, y, _ = make_inputs("cpu")
    with pytest.raises(lossjit.JitError, match="argmax.*materialized"):
        with_accuracy(h, w, y)


def test_graph_is_built_with_the_builder():
    """The decorator's graph comes from _lossjit.GraphBuilder op by op."""
    if not lossjit.has_compiler:
        pytest.skip("no compiler in this build")
    C = lossjit._C
    b = C.GraphBuilder("probe")
    x = b.argument("f16", 2)
    w = b.argument("f16", 2)
    y = b.argument("i64", 1)
    z = b.cast(b.linear(x, w), "f32")
    g = b.finish([b.cross_entropy(z, y, -100, "sum")])
    text = g.text()
    assert "loss.linear" in text and "loss.cast" in text and "loss.cross_entropy" in text
    op = C.CpuOp.compile(g)
    assert op.options["reduction"] == "sum" and op.options["dtype"] == "f16"
    bad = C.GraphBuilder("bad")
    x = bad.argument("f32", 2)
    with pytest.raises(ValueError):
        bad.log_softmax(bad.argument("i64", 1))


def test_decorated_loss_under_torch_compile(device):
    @lossjit.jit
    def loss_fn(h, w, y):
        return F.cross_entropy(F.linear(h, w).float() * 0.5, y) / 2

    h, w, y, _ = make_inputs(device, requires_grad=True)
    torch._dynamo.reset()
    # A new specialization traces on fake tensors: one graph break, same bits.
    cold = torch.compile(lambda *a: loss_fn(*a), backend="aot_eager")(h, w, y)
    expected = loss_fn(h, w, y)
    torch._dynamo.reset()
    # A cached one compiles into the graph, fullgraph included.
    warm = torch.compile(lambda *a: loss_fn(*a), backend="aot_eager", fullgraph=True)(h, w, y)
    assert torch.equal(cold, expected) and torch.equal(warm, expected)
    g_expected = torch.autograd.grad(expected, [h, w])
    g_warm = torch.autograd.grad(warm, [h, w])
    assert all(torch.equal(a, b) for a, b in zip(g_expected, g_warm))


def test_matmul_with_a_dv_weight(device):
    """x @ W with W stored [D, V]: the kernel gets W.t() (eager, autograd-aware)."""

    @lossjit.jit
    def loss_fn(h, w_dv, y):
        return F.cross_entropy(torch.matmul(h, w_dv), y, reduction="sum")

    h, w, y, _ = make_inputs(device, requires_grad=True)
    w_dv = w.detach().t().contiguous().requires_grad_()
    got = loss_fn(h, w_dv, y)
    ref = loss_fn.fn(h.detach().double(), w_dv.detach().double(), y)
    torch.testing.assert_close(got.double(), ref, rtol=2e-5, atol=2e-5)
    got.backward()
    assert w_dv.grad.shape == w_dv.shape
    w64 = w_dv.detach().double().requires_grad_()
    loss_fn.fn(h.detach().double(), w64, y).backward()
    torch.testing.assert_close(w_dv.grad.double(), w64.grad, rtol=1e-5, atol=1e-5)
