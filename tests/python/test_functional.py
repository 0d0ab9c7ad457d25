"""lossjit.linear_cross_entropy and LinearCrossEntropyLoss: numerics against a
float64 reference, gradients, shapes, autocast and the input errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lossjit
from conftest import (CUDA, REDUCTIONS, STORAGE, make_inputs, needs_cpu_backend, reference,
                      reference_grads, tolerance)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignore_index", [-100, 5])
def test_forward_matches_fp64(device, dtype, bias, reduction, ignore_index):
    h, w, y, b = make_inputs(device, dtype, bias=bias, ignore_index=ignore_index)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, b, ignore_index=ignore_index,
                                             reduction=reduction, return_lse=True)
    ref, ref_lse = reference(h, w, y, b, ignore_index, reduction)
    assert loss.dtype == torch.float32 and loss.device.type == device
    assert loss.shape == ref.shape and lse.shape == y.shape
    torch.testing.assert_close(loss.double().cpu(), ref, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(lse.double().cpu(), ref_lse, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_backward_matches_fp64(device, dtype, bias, reduction):
    h, w, y, b = make_inputs(device, dtype, bias=bias, requires_grad=True)
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction)
    grad_out = torch.rand_like(loss) + 0.5
    inputs = [h, w] + ([b] if bias else [])
    grads = torch.autograd.grad(loss, inputs, grad_out)
    refs = reference_grads(h, w, y, b, grad_out, reduction=reduction)
    rtol, atol = tolerance(dtype)
    for got, ref, t in zip(grads, refs, inputs):
        assert got.dtype == t.dtype and got.shape == t.shape
        torch.testing.assert_close(got.double().cpu(), ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("label_dtype", [torch.int32, torch.int64], ids=str)
def test_int32_labels_and_leading_dims(device, label_dtype):
    h, w, y, b = make_inputs(device, lead=(3, 5), bias=True, label_dtype=label_dtype,
                             requires_grad=True)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, b, reduction="none", return_lse=True)
    ref, ref_lse = reference(h, w, y, b, reduction="none")
    assert loss.shape == (3, 5) and lse.shape == (3, 5)
    torch.testing.assert_close(loss.double().cpu(), ref, rtol=2e-5, atol=2e-5)
    loss.sum().backward()
    assert h.grad.shape == h.shape


@pytest.mark.parametrize("only", ["hidden", "weight", "bias"])
def test_partial_gradients(device, only):
    h, w, y, b = make_inputs(device, bias=True)
    t = {"hidden": h, "weight": w, "bias": b}[only].requires_grad_()
    loss = lossjit.linear_cross_entropy(h, w, y, b)
    (g,) = torch.autograd.grad(loss, [t])
    refs = reference_grads(h, w, y, b, torch.ones(()))
    ref = refs[["hidden", "weight", "bias"].index(only)]
    torch.testing.assert_close(g.double().cpu(), ref, rtol=1e-5, atol=1e-6)


def test_noncontiguous_inputs(device):
    h, w, y, b = make_inputs(device, bias=True)
    wt = w.t().contiguous().t()  # same values, transposed strides
    hs = torch.cat([h, h], 1)[:, ::2]
    assert not wt.is_contiguous() and not hs.is_contiguous()
    got = lossjit.linear_cross_entropy(hs, wt, y, b)
    torch.testing.assert_close(got.double().cpu(), reference(hs, wt, y, b)[0],
                               rtol=2e-5, atol=2e-5)


def test_all_rows_ignored_and_empty(device):
    h, w, y, _ = make_inputs(device, n=4, ignored=(0, 1, 2, 3))
    assert math.isnan(lossjit.linear_cross_entropy(h, w, y).item())  # like PyTorch
    assert lossjit.linear_cross_entropy(h, w, y, reduction="sum").item() == 0.0
    empty_h, empty_y = h[:0], y[:0]
    assert math.isnan(lossjit.linear_cross_entropy(empty_h, w, empty_y).item())
    assert lossjit.linear_cross_entropy(empty_h, w, empty_y, reduction="none").shape == (0,)


def test_module_matches_function(device):
    h, w, y, b = make_inputs(device, bias=True, ignore_index=5)
    module = lossjit.LinearCrossEntropyLoss(ignore_index=5, reduction="sum")
    assert "reduction='sum'" in repr(module)
    assert torch.equal(module(h, w, y, b),
                       lossjit.linear_cross_entropy(h, w, y, b, ignore_index=5,
                                                    reduction="sum"))
    with pytest.raises(ValueError, match="reduction"):
        lossjit.LinearCrossEntropyLoss(reduction="avg")


@needs_cpu_backend
def test_results_do_not_depend_on_threads():
    h, w, y, b = make_inputs("cpu", n=300, v=129, d=40, bias=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = lossjit.linear_cross_entropy(h, w, y, b, return_lse=True)
        torch.set_num_threads(max(2, before))
        many = lossjit.linear_cross_entropy(h, w, y, b, return_lse=True)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


@pytest.mark.parametrize("amp_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_matches_eager_autocast(device, amp_dtype):
    h, w, y, b = make_inputs(device, torch.float32, bias=True, requires_grad=True)
    with torch.autocast(device, dtype=amp_dtype):
        got = lossjit.linear_cross_entropy(h, w, y, b)
        eager = F.cross_entropy(F.linear(h, w, b).float(), y)
    assert got.dtype == eager.dtype == torch.float32
    # Eager rounds the logits to amp_dtype, lossjit keeps them in float32:
    # both are within the rounding of amp_dtype from the float64 loss of the
    # autocast-rounded inputs.
    ref, _ = reference(h.to(amp_dtype), w.to(amp_dtype), y, b.to(amp_dtype))
    assert abs(got.item() - ref.item()) < 1e-5 * max(1.0, abs(ref.item()))
    assert abs(eager.item() - got.item()) < (2e-2 if amp_dtype == torch.bfloat16 else 3e-3)
    g_got = torch.autograd.grad(got, [h, w, b])
    g_eager = torch.autograd.grad(eager, [h, w, b])
    for a, e in zip(g_got, g_eager):
        assert a.dtype == e.dtype == torch.float32
        torch.testing.assert_close(a, e, rtol=5e-2, atol=5e-3)


def _zloss_reference(h, w, y, b, reduction, ignore_index, coeff, logit_scale=1.0,
                     softcap=None):
    """Loss + coeff · mean(lse²) over all rows in float64, and its gradients."""
    leaves = [t.detach().double().requires_grad_(True) if t is not None else None
              for t in (h, w, b)]
    hd, wd, bd = leaves
    z = F.linear(hd, wd, bd) * logit_scale
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    loss = F.cross_entropy(z, y, ignore_index=ignore_index, reduction=reduction)
    lse = torch.logsumexp(z, dim=-1)
    total = (loss if reduction != "none" else loss.sum()) + coeff * lse.square().mean()
    grads = torch.autograd.grad(total, [t for t in leaves if t is not None])
    return total, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_lse_is_differentiable_z_loss(device, dtype, reduction):
    # A z-loss (PaLM: 1e-4 · lse²) is plain torch on the returned lse; its
    # gradient reaches the backward kernel as grad_lse (ignored rows
    # included: the z-loss here averages over every row).
    h, w, y, b = make_inputs(device, dtype, bias=True, requires_grad=True, scale=2.0)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction, return_lse=True)
    total = (loss if reduction != "none" else loss.sum()) + 0.1 * lse.square().mean()
    total.backward()
    _, want = _zloss_reference(h, w, y, b, reduction, -100, 0.1)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-3)
    for got, ref in zip((h.grad, w.grad, b.grad), want):
        torch.testing.assert_close(got.double().cpu(), ref.cpu(), **tol)


def test_lse_alone_has_a_gradient(device):
    # Only lse used: the loss's gradient is None, the kernel still runs.
    h, w, y, _ = make_inputs(device, requires_grad=True)
    _, lse = lossjit.linear_cross_entropy(h, w, y, return_lse=True)
    lse.sum().backward()
    hd = h.detach().double().requires_grad_(True)
    wd = w.detach().double().requires_grad_(True)
    torch.logsumexp(hd @ wd.T, dim=-1).sum().backward()
    torch.testing.assert_close(h.grad.double().cpu(), hd.grad.cpu(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad.double().cpu(), wd.grad.cpu(), rtol=1e-4, atol=1e-5)


def test_lse_gradient_with_logit_transforms(device):
    h, w, y, b = make_inputs(device, bias=True, requires_grad=True)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, b, return_lse=True, logit_scale=0.5,
                                             softcap=3.0)
    (loss + 0.2 * lse.square().mean()).backward()
    _, want = _zloss_reference(h, w, y, b, "mean", -100, 0.2, logit_scale=0.5, softcap=3.0)
    for got, ref in zip((h.grad, w.grad, b.grad), want):
        torch.testing.assert_close(got.double().cpu(), ref.cpu(), rtol=1e-4, atol=1e-5)


def test_constant_lse_changes_nothing(device):
    h, w, y, _ = make_inputs(device, requires_grad=True)
    loss, lse = lossjit.linear_cross_entropy(h, w, y, return_lse=True)
    (loss + lse.detach().sum()).backward()  # a constant lse is fine
    grads = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    lossjit.linear_cross_entropy(h, w, y).backward()
    assert torch.equal(grads[0], h.grad) and torch.equal(grads[1], w.grad)


def test_grad_lse_shape_is_checked():
    h, w, y, _ = make_inputs("cpu")
    lse = torch.zeros(h.shape[0])
    with pytest.raises(ValueError, match=r"grad_lse must have shape \[19\]"):
        torch.ops.lossjit.linear_cross_entropy_backward(
            h, w, y, None, lse, torch.tensor(1.0), -100, "mean", True, True, 1.0, 0.0,
            torch.zeros(3))


# --- errors ---------------------------------------------------------------


def test_error_dtype_mismatch(device):
    h, w, y, b = make_inputs(device, bias=True)
    with pytest.raises(TypeError, match="linear_weight has dtype float16 but input has float32"):
        lossjit.linear_cross_entropy(h, w.half(), y)
    with pytest.raises(TypeError, match="bias has dtype bfloat16"):
        lossjit.linear_cross_entropy(h, w, y, b.bfloat16())


def test_error_non_integer_target(device):
    h, w, y, _ = make_inputs(device)
    with pytest.raises(TypeError, match="class indices.*float32"):
        lossjit.linear_cross_entropy(h, w, y.float())
    with pytest.raises(TypeError, match="class indices"):
        lossjit.linear_cross_entropy(h, w, y.to(torch.int16))


def test_error_shapes(device):
    h, w, y, b = make_inputs(device, bias=True)
    with pytest.raises(ValueError, match="D=24"):
        lossjit.linear_cross_entropy(h, w[:, :5], y)
    with pytest.raises(ValueError, match="target must have shape"):
        lossjit.linear_cross_entropy(h, w, y[:-1])
    with pytest.raises(ValueError, match="bias must have shape"):
        lossjit.linear_cross_entropy(h, w, y, b[:-1])
    with pytest.raises(ValueError, match=r"weight must have shape \[V, D\]"):
        lossjit.linear_cross_entropy(h, w[0], y)
    with pytest.raises(ValueError, match="V must be >= 1"):
        lossjit.linear_cross_entropy(h, w[:0], y)
    with pytest.raises(ValueError, match="reduction"):
        lossjit.linear_cross_entropy(h, w, y, reduction="avg")
    with pytest.raises(TypeError, match="ignore_index"):
        lossjit.linear_cross_entropy(h, w, y, ignore_index=1.5)


def test_error_devices(device):
    h, w, y, _ = make_inputs(device)
    with pytest.raises(RuntimeError, match="one device"):
        lossjit.linear_cross_entropy(h, w.to("meta"), y)
    with pytest.raises(RuntimeError, match="one device"):
        lossjit.linear_cross_entropy(h, w, y.to("meta"))


@needs_cpu_backend
@pytest.mark.parametrize("bad", [37, -1, 10**6])
@pytest.mark.parametrize("label_dtype", [torch.int32, torch.int64], ids=str)
def test_error_out_of_range_target_cpu(bad, label_dtype):
    h, w, y, _ = make_inputs("cpu", label_dtype=label_dtype, requires_grad=True)
    y[7] = bad
    with pytest.raises(IndexError, match=f"target {bad} is out of bounds for 37 classes"):
        lossjit.linear_cross_entropy(h, w, y)
    with pytest.raises(IndexError, match="out of bounds"):  # the backward checks too
        torch.ops.lossjit.linear_cross_entropy_backward(
            h.detach(), w.detach(), y, None, torch.zeros(19), torch.ones(()), -100, "mean",
            True, True)
    y[7] = -100  # the ignore_index is never out of range
    lossjit.linear_cross_entropy(h, w, y).backward()


@pytest.mark.skipif(not CUDA, reason="no CUDA device: torch.cuda.is_available() is False")
def test_out_of_range_target_cuda_gives_nan():
    """Documented: on CUDA (no host sync) an out-of-range label makes its row
    NaN; the kernel compares labels with column indices and never reads
    outside the inputs."""
    h, w, y, _ = make_inputs("cuda")
    y[7] = 37
    rows = lossjit.linear_cross_entropy(h, w, y, reduction="none")
    assert torch.isnan(rows[7]) and not torch.isnan(rows[:7]).any()


@pytest.mark.skipif(lossjit.has_compiler, reason="this build has the compiler")
def test_runtime_only_build_says_what_is_missing():
    h, w, y, _ = make_inputs("cpu")
    with pytest.raises(RuntimeError, match="no compiler.*LOSSJIT_ENABLE_COMPILER=OFF"):
        lossjit.linear_cross_entropy(h, w, y)


def test_build_description():
    info = lossjit.describe_build()
    assert info["version"] == lossjit.__version__
    assert isinstance(info["compiler"], bool) and "cuda" in info
