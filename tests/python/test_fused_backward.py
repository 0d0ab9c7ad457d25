"""linear_cross_entropy(..., fused_backward=True): the opt-in one-pass forward
+backward (lossjit::linear_cross_entropy_with_grad) against the default path
and a float64 eager reference."""

from __future__ import annotations

import pytest
import torch

import lossjit
from conftest import make_inputs, needs_cpu_backend, reference, reference_grads, tolerance

pytestmark = needs_cpu_backend


def _leaves(hidden, weight, target, bias, requires=(True, True, True)):
    out = []
    for t, r in zip((hidden, weight, bias), requires):
        out.append(None if t is None else t.detach().clone().requires_grad_(r))
    h, w, b = out
    return h, w, target, b


def _run(h, w, y, b, grad_output=None, **kw):
    loss, lse = lossjit.linear_cross_entropy(h, w, y, b, return_lse=True, **kw)
    loss.backward(grad_output)
    grads = tuple(None if t is None or t.grad is None else t.grad for t in (h, w, b))
    return loss.detach(), lse.detach(), grads


def _close(got, want, dtype, rescaled=False):
    # Both paths compute the same float32 values (up to float32 rounding) and
    # round them once to the storage dtype. Scaled by a grad_output != 1, the
    # fused path's stored half-precision gradient is rounded a second time
    # (after the scaling), so it may land one ulp of the storage dtype away.
    assert got.dtype == want.dtype == dtype
    rtol, atol = tolerance(dtype) if rescaled and dtype != torch.float32 else (1e-4, 1e-6)
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 5])
def test_matches_default_and_reference(dtype, reduction, bias, ignore_index):
    inputs = make_inputs("cpu", dtype, bias=bias, ignore_index=ignore_index,
                         ignored=(3, 11, 12))
    target = inputs[2]
    loss, lse, grads = _run(*_leaves(*inputs), ignore_index=ignore_index,
                            reduction=reduction, fused_backward=True)
    loss0, lse0, grads0 = _run(*_leaves(*inputs), ignore_index=ignore_index,
                               reduction=reduction)
    torch.testing.assert_close(loss, loss0, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(lse, lse0, rtol=1e-4, atol=1e-6)
    for got, want in zip(grads, grads0):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.dtype == want.dtype == dtype and got.shape == want.shape
            _close(got, want, dtype)
    # Against float64 eager.
    ref_loss, ref_lse = reference(*inputs, ignore_index=ignore_index, reduction=reduction)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-5)
    ref = reference_grads(*inputs, torch.tensor(1.0), ignore_index=ignore_index,
                          reduction=reduction)
    rtol, atol = (1e-4, 1e-5) if dtype == torch.float32 else tolerance(dtype)
    for got, want in zip([g for g in grads if g is not None], ref):
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    # Ignored rows get a zero hidden gradient.
    ignored = target == ignore_index
    assert ignored.any()
    assert (grads[0][ignored] == 0).all()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grad_output_scales(reduction, dtype):
    inputs = make_inputs("cpu", dtype, bias=True)
    grad_output = torch.tensor(-2.5)
    loss, _, grads = _run(*_leaves(*inputs), grad_output, reduction=reduction,
                          fused_backward=True)
    _, _, grads0 = _run(*_leaves(*inputs), grad_output, reduction=reduction)
    ref = reference_grads(*inputs, grad_output, reduction=reduction)
    for got, want, exact in zip(grads, grads0, ref):
        _close(got, want, dtype, rescaled=True)
        rtol, atol = (1e-4, 1e-5) if dtype == torch.float32 else tolerance(dtype)
        torch.testing.assert_close(got.double(), exact, rtol=rtol, atol=atol)
    # Through a downstream op: loss * 3 + 1.
    h, w, y, b = _leaves(*inputs)
    (lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction, fused_backward=True)
     * 3 + 1).backward()
    ref = reference_grads(*inputs, torch.tensor(3.0), reduction=reduction)
    rtol, atol = (1e-4, 1e-5) if dtype == torch.float32 else tolerance(dtype)
    for got, exact in zip((h.grad, w.grad, b.grad), ref):
        torch.testing.assert_close(got.double(), exact, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rescaling_a_16bit_gradient_keeps_no_float32_copy(monkeypatch, dtype):
    # The stored 16-bit gradients are rescaled in blocks (no gradient-sized
    # float32 temporary beside them); the bits are those of the one-shot
    # float32 product rounded once. Blocks of 7 elements: several, the last
    # one partial.
    # Blocks as large as the gradient: what a GPU does in one kernel.
    from lossjit import _ops
    g = torch.Generator().manual_seed(5)
    # Magnitudes across the dtype's range (subnormals to near overflow).
    span = 30 if dtype == torch.bfloat16 else 4
    grad = (torch.randn(5, 9, generator=g)
            * torch.logspace(-span, span, 45).reshape(5, 9)).to(dtype)
    for block in (7, 1 << 40):
        monkeypatch.setattr(_ops, "_SCALE_BLOCK", block)
        for s in (-0.37, 1 / 3, 7.123456, 1e-3, 60000.0):
            scale = torch.tensor(s)
            got = _ops._scaled(grad, scale)
            want = (grad.float() * scale).to(dtype)
            assert got.dtype == dtype and got.shape == grad.shape
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (block, s)


def test_reduction_none_falls_back():
    inputs = make_inputs("cpu", torch.float32, bias=True)
    grad_output = torch.linspace(-1, 2, inputs[2].numel())
    loss, lse, grads = _run(*_leaves(*inputs), grad_output, reduction="none",
                            fused_backward=True)
    loss0, lse0, grads0 = _run(*_leaves(*inputs), grad_output, reduction="none")
    assert torch.equal(loss, loss0) and torch.equal(lse, lse0)
    for got, want in zip(grads, grads0):
        assert torch.equal(got, want)


def test_no_grad_falls_back():
    h, w, y, b = make_inputs("cpu", torch.float32, bias=True, requires_grad=True)
    with torch.no_grad():
        got = lossjit.linear_cross_entropy(h, w, y, b, fused_backward=True)
        want = lossjit.linear_cross_entropy(h, w, y, b)
    assert torch.equal(got, want)
    plain = [t.detach() for t in (h, w, b)]
    got = lossjit.linear_cross_entropy(plain[0], plain[1], y, plain[2], fused_backward=True)
    assert not got.requires_grad and torch.equal(got, want)


@pytest.mark.parametrize("requires", [(True, False, False), (False, True, True),
                                      (False, True, False), (False, False, True),
                                      (True, True, False)])
def test_only_required_gradients(requires, monkeypatch):
    inputs = make_inputs("cpu", torch.float32, bias=True)
    calls = []
    real = torch.ops.lossjit.linear_cross_entropy_with_grad

    def spy(*args):
        calls.append(args[6:8])
        return real(*args)

    monkeypatch.setattr(torch.ops.lossjit, "linear_cross_entropy_with_grad", spy)
    h, w, y, b = _leaves(*inputs, requires=requires)
    loss = lossjit.linear_cross_entropy(h, w, y, b, fused_backward=True)
    monkeypatch.undo()
    assert calls == [(requires[0], requires[1] or requires[2])]
    loss.backward()
    _, _, want = _run(*_leaves(*inputs, requires=requires))
    for t, r, ref in zip((h, w, b), requires, want):
        if r:
            torch.testing.assert_close(t.grad, ref, rtol=1e-4, atol=1e-6)
        else:
            assert t.grad is None and ref is None


def test_op_skips_unneeded_gradients():
    h, w, y, b = make_inputs("cpu", torch.float32, bias=True)
    loss, lse, gx, gw, gb = torch.ops.lossjit.linear_cross_entropy_with_grad(
        h, w, y, b, -100, "mean", False, True)
    assert gx.numel() == 0 and gw.shape == w.shape and gb.shape == b.shape
    loss, lse, gx, gw, gb = torch.ops.lossjit.linear_cross_entropy_with_grad(
        h, w, y, b, -100, "sum", True, False)
    assert gx.shape == h.shape and gw.numel() == 0 and gb.numel() == 0
    with pytest.raises(ValueError, match="mean"):
        torch.ops.lossjit.linear_cross_entropy_with_grad(h, w, y, b, -100, "none", True,
                                                         True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_deterministic(dtype):
    inputs = make_inputs("cpu", dtype, n=67, v=131, d=40, bias=True)
    first = _run(*_leaves(*inputs), fused_backward=True)
    second = _run(*_leaves(*inputs), fused_backward=True)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    for a, b in zip(first[2], second[2]):
        assert torch.equal(a, b)


def test_leading_dims_logit_transforms_and_module():
    h, w, y, b = make_inputs("cpu", torch.float32, bias=True, lead=(3, 7))
    kw = dict(logit_scale=0.5, softcap=5.0, reduction="sum")
    module = lossjit.LinearCrossEntropyLoss(fused_backward=True, **kw)
    assert "fused_backward=True" in repr(module)
    got = _run(*_leaves(h, w, y, b), fused_backward=True, **kw)
    want = _run(*_leaves(h, w, y, b), **kw)
    hl, wl, _, bl = _leaves(h, w, y, b)
    module(hl, wl, y, bl).backward()
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-6)
    assert got[1].shape == (3, 7)
    for g, m, ref in zip(got[2], (hl.grad, wl.grad, bl.grad), want[2]):
        torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-6)
        assert torch.equal(g, m)


def test_lse_gradient_still_raises():
    h, w, y, b = make_inputs("cpu", torch.float32, requires_grad=True)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, return_lse=True, fused_backward=True)
    with pytest.raises(RuntimeError, match="lse"):
        (loss + lse.sum()).backward()


def test_the_lse_gradient_check_waits_for_no_host_inside_a_capture(monkeypatch):
    # Checking that lse's gradient is zero reads it on the host, which a CUDA
    # graph capture forbids: inside one (a stand-in) the check is skipped;
    # outside it raises as ever.
    from lossjit import functional
    grad, like = torch.ones(3), torch.empty(3)
    with pytest.raises(RuntimeError, match="lse"):
        torch.ops.lossjit.lse_grad_unsupported(grad, like)
    monkeypatch.setattr(functional, "_capturing", lambda t: True)
    assert torch.equal(torch.ops.lossjit.lse_grad_unsupported(grad, like), torch.zeros(3))


def test_autocast():
    h, w, y, _ = make_inputs("cpu", torch.float32, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = lossjit.linear_cross_entropy(h, w, y, fused_backward=True)
    got.backward()
    grads = (h.grad.clone(), w.grad.clone())
    h.grad = w.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = lossjit.linear_cross_entropy(h, w, y)
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    for g, ref in zip(grads, (h.grad, w.grad)):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, ref, rtol=1.6e-2, atol=1.6e-2)


def test_opcheck():
    h, w, y, b = make_inputs("cpu", torch.float32, bias=True)
    torch.library.opcheck(torch.ops.lossjit.linear_cross_entropy_with_grad.default,
                          (h, w, y, b, -100, "mean", True, True),
                          test_utils=("test_schema", "test_faketensor"))


def test_bad_flag():
    h, w, y, _ = make_inputs("cpu", torch.float32)
    with pytest.raises(TypeError, match="fused_backward"):
        lossjit.linear_cross_entropy(h, w, y, fused_backward="yes")


@pytest.mark.parametrize("dtype,strategy", [(torch.float32, "vocab_chunked"),
                                            (torch.bfloat16, "chunked"),
                                            (torch.bfloat16, "vocab_chunked")])
def test_both_schedules_of_the_fused_op_match_fp64(dtype, strategy, tmp_path, monkeypatch):
    # The fused op's strategy reaches the compiler: row chunks (an f32 dW
    # accumulator for 16-bit storage) or the forward's statistics, then
    # vocabulary chunks; a budget of a few rows or columns makes several.
    from lossjit import _kernels as K
    monkeypatch.setenv("LOSSJIT_CACHE_DIR", str(tmp_path))
    hidden, weight, target, bias = make_inputs("cpu", dtype, n=13, v=41, d=16, bias=True)
    flags = K.BackwardFlags(True, True, strategy=strategy, workspace_bytes=4096)
    kernel = K.fused_kernel(dtype, torch.int64, True, -100, "mean", flags, torch.device("cpu"))
    assert kernel.options["strategy"] == strategy
    assert kernel.options["pass"] == "forward_backward"
    loss = torch.empty((), dtype=torch.float32)
    lse = torch.empty(13, dtype=torch.float32)
    buffers = {"x": hidden, "w": weight, "labels": target, "bias": bias, "loss": loss,
               "lse": lse, "grad_x": torch.empty_like(hidden),
               "grad_w": torch.empty_like(weight), "grad_bias": torch.empty_like(bias)}
    kernel.run(hidden.device, 13, 41, 16, buffers)
    want_loss, want_lse = reference(hidden, weight, target, bias)
    torch.testing.assert_close(loss.double(), want_loss, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-4, atol=1e-5)
    rx, rw, rb = reference_grads(hidden, weight, target, bias, torch.tensor(1.0))
    rtol, atol = tolerance(dtype)
    for got, want in zip(("grad_x", "grad_w", "grad_bias"), (rx, rw, rb)):
        torch.testing.assert_close(buffers[got].double(), want, rtol=rtol, atol=atol)


def test_the_fused_op_takes_the_backward_strategy(monkeypatch):
    # The fused op asks for the backward's schedule of the call's device,
    # dtype and shape (vocabulary chunks on CUDA for 16-bit storage and
    # N <= V); on the host, for this small head, row chunks.
    from lossjit import _kernels as K
    seen = []
    real = K.fused_kernel

    def spy(*args, **kw):
        seen.append(args[5].strategy)
        return real(*args, **kw)

    monkeypatch.setattr(K, "fused_kernel", spy)
    h, w, y, b = _leaves(*make_inputs("cpu", torch.bfloat16, bias=True))
    _run(h, w, y, b, fused_backward=True)
    assert seen == [K.backward_strategy(torch.bfloat16, torch.device("cpu"), 19, 37,
                                        fused=True, d=24)] == ["chunked"]
    monkeypatch.setattr(K, "backward_strategy", lambda *a, **k: "vocab_chunked")
    seen.clear()
    h, w, y, b = _leaves(*make_inputs("cpu", torch.bfloat16, bias=True))
    loss, _, grads = _run(h, w, y, b, fused_backward=True)
    assert seen == ["vocab_chunked"]
    h0, w0, y0, b0 = _leaves(*make_inputs("cpu", torch.bfloat16, bias=True))
    loss0, _, grads0 = _run(h0, w0, y0, b0)
    torch.testing.assert_close(loss, loss0, rtol=1e-4, atol=1e-6)
    for got, want in zip(grads, grads0):
        _close(got, want, torch.bfloat16)

