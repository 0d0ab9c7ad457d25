"""The Python API under hostile or unusual input: every case asserts the exact
behaviour, either torch's result or a clear error naming the argument.

Each defect class of issue 16 that lives in the Python layer or the kernels
it launches has a regression test here (the tools and the cache have theirs
in tests/lit/tools and tests/unit/runtime); the rest pin behaviour that was
already right, so it stays right.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lossjit
from lossjit import _kernels
from conftest import make_inputs, needs_cpu_backend

pytestmark = needs_cpu_backend


def eager(h, w, y, b=None, **kw):
    return F.cross_entropy(F.linear(h.double(), w.double(), None if b is None else b.double()),
                           y, **kw)


# --- Bad arguments: a clear error naming the argument --------------------------------

BAD_CALLS = [
    # (description, kwargs-maker, exception, message fragment)
    ("hidden not a tensor", lambda h, w, y: dict(hidden=[1.0]), TypeError, "input must be a Tensor"),
    ("weight not a tensor", lambda h, w, y: dict(weight=None), TypeError, "linear_weight must be a Tensor"),
    ("target not a tensor", lambda h, w, y: dict(target=3), TypeError, "target must be a Tensor"),
    ("bias not a tensor", lambda h, w, y: dict(bias=1.0), TypeError, "linear_bias must be a Tensor"),
    ("float8 hidden", lambda h, w, y: dict(hidden=h.to(torch.float8_e4m3fn),
                                           weight=w.to(torch.float8_e4m3fn)), TypeError,
     "input has dtype float8_e4m3fn"),
    ("int hidden", lambda h, w, y: dict(hidden=h.int(), weight=w.int()), TypeError,
     "input has dtype int32"),
    ("weight dtype mismatch", lambda h, w, y: dict(weight=w.half()), TypeError,
     "linear_weight has dtype float16 but input has float32"),
    ("bias dtype mismatch", lambda h, w, y: dict(bias=torch.zeros(w.shape[0]).half()),
     TypeError, "linear_bias has dtype float16"),
    ("float target", lambda h, w, y: dict(target=y.float()), TypeError,
     "target must hold class indices"),
    ("bool target", lambda h, w, y: dict(target=y > 0), TypeError, "target must hold class"),
    ("int16 target", lambda h, w, y: dict(target=y.short()), TypeError, "int16"),
    ("0-d hidden", lambda h, w, y: dict(hidden=torch.tensor(1.0)), ValueError, "0-d tensor"),
    ("1-d weight", lambda h, w, y: dict(weight=w[0]), ValueError, "linear_weight must have shape [V, D]"),
    ("3-d weight", lambda h, w, y: dict(weight=w[None]), ValueError, "weight must have shape"),
    ("D mismatch", lambda h, w, y: dict(weight=w[:, :-1]), ValueError, "D=24 features"),
    ("empty vocabulary", lambda h, w, y: dict(weight=w[:0]), ValueError, "V must be >= 1"),
    ("bias shape", lambda h, w, y: dict(bias=torch.zeros(w.shape[0] + 1)), ValueError,
     "bias must have shape [V]"),
    ("target shape", lambda h, w, y: dict(target=y[:-1]), ValueError, "target must have shape"),
    ("bad reduction", lambda h, w, y: dict(reduction="avg"), ValueError, "reduction must be"),
    ("reduction not a string", lambda h, w, y: dict(reduction=None), ValueError,
     "reduction must be"),
    ("bool ignore_index", lambda h, w, y: dict(ignore_index=True), TypeError,
     "ignore_index must be an int"),
    ("float ignore_index", lambda h, w, y: dict(ignore_index=-100.0), TypeError,
     "ignore_index must be an int"),
    ("ignore_index past int64", lambda h, w, y: dict(ignore_index=2 ** 63), ValueError,
     "ignore_index must fit in int64"),
    ("ignore_index below int64", lambda h, w, y: dict(ignore_index=-(2 ** 63) - 1), ValueError,
     "ignore_index must fit in int64"),
    ("zero logit_scale", lambda h, w, y: dict(logit_scale=0.0), ValueError, "logit_scale"),
    ("nan logit_scale", lambda h, w, y: dict(logit_scale=math.nan), ValueError, "logit_scale"),
    ("inf logit_scale", lambda h, w, y: dict(logit_scale=math.inf), ValueError, "logit_scale"),
    ("string logit_scale", lambda h, w, y: dict(logit_scale="2"), TypeError, "logit_scale"),
    ("negative softcap", lambda h, w, y: dict(softcap=-1.0), ValueError, "softcap"),
    ("zero softcap", lambda h, w, y: dict(softcap=0.0), ValueError, "softcap"),
    ("inf softcap", lambda h, w, y: dict(softcap=math.inf), ValueError, "softcap"),
    ("fused_backward not a bool", lambda h, w, y: dict(fused_backward=1), TypeError,
     "fused_backward must be a bool"),
    ("meta weight with cpu hidden", lambda h, w, y: dict(weight=w.to("meta")), RuntimeError,
     "expected all tensors on one device"),
]


@pytest.mark.parametrize("what,make,error,message", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_name_the_argument(what, make, error, message):
    h, w, y, _ = make_inputs("cpu")
    args = dict(hidden=h, weight=w, target=y, bias=None)
    args.update(make(h, w, y))
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        lossjit.linear_cross_entropy(args.pop("hidden"), args.pop("weight"), args.pop("target"),
                                     **args)


@pytest.mark.parametrize("label", [-1, 37, 2 ** 40, -(2 ** 62)])
def test_out_of_range_labels_are_index_errors(label):
    h, w, y, _ = make_inputs("cpu")
    y = y.clone()
    y[4] = label
    with pytest.raises(IndexError, match=f"target {label} is out of bounds for 37 classes"):
        lossjit.linear_cross_entropy(h, w, y)


def test_extreme_ignore_index_is_honoured():
    h, w, y, _ = make_inputs("cpu", ignore_index=2 ** 63 - 1)
    got = lossjit.linear_cross_entropy(h, w, y, ignore_index=2 ** 63 - 1)
    ref = eager(h, w, y, ignore_index=2 ** 63 - 1)
    torch.testing.assert_close(got.double(), ref, rtol=2e-6, atol=2e-6)


# --- Silent wrong answers -----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("fused", [False, True])
def test_zero_rows_give_zero_parameter_gradients(dtype, reduction, fused):
    # N = 0: torch gives a NaN mean, a 0 sum and all-zero dW and db. The
    # gradients come from empty_like, so garbage would show: the caching
    # allocator is primed with non-zero memory of the same size first.
    v, d = 40, 16
    primer = torch.full((v * d,), 7.0, dtype=dtype)
    del primer
    h = torch.randn(0, d, dtype=dtype, requires_grad=True)
    w = torch.randn(v, d, dtype=dtype, requires_grad=True)
    b = torch.randn(v, dtype=dtype, requires_grad=True)
    y = torch.zeros(0, dtype=torch.long)
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction,
                                        fused_backward=fused and reduction != "none")
    ref = F.cross_entropy(F.linear(h.float(), w.float(), b.float()), y, reduction=reduction)
    torch.testing.assert_close(loss, ref, equal_nan=True)
    loss.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w))
    assert torch.equal(b.grad, torch.zeros_like(b))
    assert h.grad.shape == (0, d)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("fused", [False, True])
def test_no_features_give_the_bias_alone(dtype, reduction, fused):
    # D = 0: the logits are the bias, dX and dW are empty, db is dZ's column
    # sums. The 16-bit CPU kernels sized their row panels by dividing by D
    # (SIGFPE); the GPU kernels' db lived in dW's column tiles, of which
    # there were none (tests/unit/interpreter covers those).
    n, v = 6, 11
    h = torch.randn(n, 0, dtype=dtype, requires_grad=True)
    w = torch.randn(v, 0, dtype=dtype, requires_grad=True)
    b = torch.randn(v, dtype=dtype, requires_grad=True)
    y = torch.tensor([0, 3, -100, 10, 3, 7])
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction,
                                        fused_backward=fused and reduction != "none")
    bd = b.detach().double().requires_grad_()
    ref = F.cross_entropy(bd.expand(n, v), y, reduction=reduction)
    tol = 1e-6 if dtype in (torch.float32, torch.float64) else 1e-2
    torch.testing.assert_close(loss.double(), ref, rtol=tol, atol=tol)
    loss.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(b.grad.double(), bd.grad, rtol=tol, atol=tol)
    assert h.grad.shape == (n, 0) and w.grad.shape == (v, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fused", [False, True])
def test_no_rows_and_no_features(dtype, fused):
    # N = 0 and D = 0 at once: a sum over nothing, zero db. The 16-bit
    # vocabulary chunks sized their chunks by (N+D), a division by zero.
    b = torch.randn(11, dtype=dtype, requires_grad=True)
    h = torch.randn(0, 0, dtype=dtype, requires_grad=True)
    w = torch.randn(11, 0, dtype=dtype, requires_grad=True)
    y = torch.zeros(0, dtype=torch.long)
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction="sum", fused_backward=fused)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(b.grad, torch.zeros_like(b))
    assert w.grad.shape == (11, 0) and h.grad.shape == (0, 0)


@pytest.mark.parametrize("fused", [False, True])
def test_double_backward_is_an_error_not_a_dropped_term(fused):
    h, w, y, _ = make_inputs("cpu", requires_grad=True)
    loss = lossjit.linear_cross_entropy(h, w, y, fused_backward=fused)
    (gh,) = torch.autograd.grad(loss, h, create_graph=True)
    assert gh.requires_grad  # never a gradient silently without a graph
    penalty = gh.pow(2).sum()
    with pytest.raises(RuntimeError, match="double backward.*is not supported"):
        penalty.backward()


@pytest.mark.parametrize("fused", [False, True])
def test_create_graph_first_order_gradients_are_right(fused):
    h, w, y, _ = make_inputs("cpu", requires_grad=True)
    loss = lossjit.linear_cross_entropy(h, w, y, fused_backward=fused)
    gh, gw = torch.autograd.grad(loss, (h, w), create_graph=True)
    hr, wr = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    rh, rw = torch.autograd.grad(eager(hr, wr, y), (hr, wr))
    torch.testing.assert_close(gh.double(), rh, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gw.double(), rw, rtol=1e-4, atol=1e-6)


def test_kernels_refuse_buffers_of_another_dtype():
    # What the @jit-under-autocast crash was: 16-bit buffers handed to
    # kernels compiled for float32. The launch itself checks every buffer.
    h, w, y, _ = make_inputs("cpu")
    kernel = _kernels.forward_kernel(torch.float32, torch.int64, False, -100, "mean", "",
                                     torch.device("cpu"))
    buffers = {"x": h.bfloat16(), "w": w.bfloat16(), "labels": y, "loss": torch.empty(()),
               "lse": torch.empty(h.shape[0])}
    with pytest.raises(TypeError, match="buffer 'x' holds bf16 but the kernels were compiled "
                                        "for f32"):
        kernel.run(torch.device("cpu"), h.shape[0], w.shape[0], h.shape[1], buffers)
    buffers.update(x=h, w=w, labels=y.int())
    with pytest.raises(TypeError, match="buffer 'labels' holds i32"):
        kernel.run(torch.device("cpu"), h.shape[0], w.shape[0], h.shape[1], buffers)


def test_kernels_refuse_buffers_of_the_wrong_size():
    h, w, y, _ = make_inputs("cpu")
    kernel = _kernels.forward_kernel(torch.float32, torch.int64, False, -100, "mean", "",
                                     torch.device("cpu"))
    buffers = {"x": h[:-1], "w": w, "labels": y, "loss": torch.empty(()),
               "lse": torch.empty(h.shape[0])}
    with pytest.raises(RuntimeError, match="buffer 'x' has"):
        kernel.run(torch.device("cpu"), h.shape[0], w.shape[0], h.shape[1], buffers)


# --- @lossjit.jit ----------------------------------------------------------------------

@lossjit.jit
def _plain_loss(h, w, y):
    return F.cross_entropy(F.linear(h, w).float(), y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("v", [37, 32000])
def test_jit_under_autocast_matches_the_functional_op(dtype, v):
    h, w, y, _ = make_inputs("cpu", v=v, n=8)
    with torch.autocast("cpu", dtype=dtype):
        got = _plain_loss(h, w, y)
        want = lossjit.linear_cross_entropy(h, w, y)
        ref = F.cross_entropy(F.linear(h, w).float(), y)
    assert torch.equal(got, want)
    assert math.isfinite(got.item())
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)


def test_jit_under_autocast_gradients():
    h, w, y, _ = make_inputs("cpu", requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _plain_loss(h, w, y).backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lossjit.linear_cross_entropy(h, w, y).backward()
    assert torch.equal(gh, h.grad) and torch.equal(gw, w.grad)
    assert gh.dtype == torch.float32  # the gradient of the float32 leaf


def test_jit_rejects_a_non_callable():
    with pytest.raises(TypeError, match="expected a function to decorate, got int"):
        lossjit.jit(5)
    with pytest.raises(TypeError, match="got str"):
        lossjit.jit("loss")


def test_jit_supports_a_captured_linear_module():
    h, w, y, b = make_inputs("cpu", bias=True)
    head = torch.nn.Linear(h.shape[1], w.shape[0])

    @lossjit.jit
    def loss_fn(hidden, target):
        return F.cross_entropy(head(hidden), target)

    got = loss_fn(h, y)
    torch.testing.assert_close(got, F.cross_entropy(head(h), y), rtol=1e-5, atol=1e-6)
    got.backward()
    assert head.weight.grad is not None and head.bias.grad is not None
    ref_w = head.weight.detach().clone().requires_grad_()
    F.cross_entropy(F.linear(h, ref_w, head.bias.detach()), y).backward()
    torch.testing.assert_close(head.weight.grad, ref_w.grad, rtol=1e-4, atol=1e-6)


def test_jit_sees_in_place_updates_and_rebinding_of_captured_parameters():
    h, w, y, _ = make_inputs("cpu")
    head = torch.nn.Linear(h.shape[1], w.shape[0], bias=False)

    @lossjit.jit
    def loss_fn(hidden, target):
        return F.cross_entropy(head(hidden), target)

    loss_fn(h, y)
    with torch.no_grad():
        head.weight.mul_(3.0)  # an optimizer step: same tensor, new values
    torch.testing.assert_close(loss_fn(h, y), F.cross_entropy(head(h), y), rtol=1e-5,
                               atol=1e-6)
    head.weight = torch.nn.Parameter(torch.randn_like(head.weight))  # a new tensor
    torch.testing.assert_close(loss_fn(h, y), F.cross_entropy(head(h), y), rtol=1e-5,
                               atol=1e-6)
    head.half()  # same Parameter objects, another dtype: traced again, like eager
    with pytest.raises(lossjit.JitError, match="must have one dtype"):
        loss_fn(h, y)


def test_jit_module_passed_as_an_argument():
    h, w, y, _ = make_inputs("cpu")
    head = torch.nn.Linear(h.shape[1], w.shape[0], bias=False)

    @lossjit.jit
    def loss_fn(module, hidden, target):
        return F.cross_entropy(module(hidden), target)

    torch.testing.assert_close(loss_fn(head, h, y), F.cross_entropy(head(h), y), rtol=1e-5,
                               atol=1e-6)
    other = torch.nn.Linear(h.shape[1], w.shape[0], bias=False)
    torch.testing.assert_close(loss_fn(other, h, y), F.cross_entropy(other(h), y), rtol=1e-5,
                               atol=1e-6)


def test_jit_untraceable_outside_tensor_is_a_clear_error():
    h, w, y, _ = make_inputs("cpu")
    holder = {"w": w}  # reached through a dict: no path lossjit can guard

    @lossjit.jit
    def loss_fn(hidden, target):
        return F.cross_entropy(F.linear(hidden, holder["w"]), target)

    with pytest.raises(lossjit.JitError, match="pass it as an argument"):
        loss_fn(h, y)


class _TensorLike:
    """A non-tensor with __torch_function__ (PyTorch's override tests' kind)."""

    calls = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(func)
        return "overridden"


def test_jit_dispatches_torch_function_on_non_tensor_arguments():
    h, w, y, _ = make_inputs("cpu")
    _TensorLike.calls.clear()
    assert _plain_loss(_TensorLike(), w, y) == "overridden"
    assert _TensorLike.calls == [_plain_loss]
    assert lossjit.linear_cross_entropy(h, _TensorLike(), y) == "overridden"


def test_jit_nan_and_inf_inputs_behave_like_torch():
    h, w, y, _ = make_inputs("cpu")
    h = h.clone()
    h[2, 3] = math.nan
    h[5, 0] = math.inf
    got = _plain_loss(h, w, y.masked_fill(torch.arange(len(y)) % 7 == 0, -100))
    assert math.isnan(got.item())
    per_row = lossjit.linear_cross_entropy(h, w, y, reduction="none")
    ref = F.cross_entropy(F.linear(h, w), y, reduction="none")
    assert torch.equal(per_row.isnan(), ref.isnan())


# --- Long sums: the error must not grow with the length of the sum --------

@needs_cpu_backend
def test_sum_of_exponentials_over_a_long_row_is_accurate():
    # 2^25 equal logits: a sequential f32 sum stalls at 2^24 (adding 1 to
    # 2^24 rounds back to 2^24) and the loss would read log 2^24.
    v = 1 << 25
    x = torch.ones(1, 1)
    w = torch.zeros(v, 1)
    y = torch.zeros(1, dtype=torch.long)
    loss = lossjit.linear_cross_entropy(x, w, y, reduction="sum")
    assert abs(loss.item() - math.log(v)) <= 1e-6 * math.log(v)


@needs_cpu_backend
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_reduction_over_many_rows_is_accurate(reduction):
    # 2^20 identical rows: the mean must equal one row's loss and the sum
    # 2^20 times it, to f32 accuracy rather than an error growing with N.
    n = 1 << 20
    gen = torch.Generator().manual_seed(3)
    x1 = torch.randn(1, 4, generator=gen)
    w = torch.randn(5, 4, generator=gen)
    y1 = torch.tensor([2])
    one = F.cross_entropy(F.linear(x1.double(), w.double()), y1).item()
    loss = lossjit.linear_cross_entropy(
        x1.expand(n, 4).contiguous(), w, y1.expand(n).contiguous(),
        reduction=reduction).item()
    expected = one if reduction == "mean" else one * n
    assert abs(loss - expected) <= 4e-7 * abs(expected)


# --- Prebuilt-bundle lookup (LOSSJIT_KERNEL_PATH) -------------------------

_FIND_BUNDLE = """
from lossjit._ext import C
try:
    C.find_gpu_bundle("linear_cross_entropy", {}, 9, 0)
except Exception as e:
    print(e)
"""


def test_bundle_lookup_reads_manifests_within_their_bound(tmp_path):
    # A FIFO named manifest.json blocked the lookup forever; a 32 MiB sparse
    # one was read whole (the 1 GiB default bound, not the manifests' 16 MiB).
    # Both are refused from fstat and named when no bundle matches.
    import os
    import subprocess
    import sys
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "manifest.json")
    (tmp_path / "sparse").mkdir()
    with open(tmp_path / "sparse" / "manifest.json", "wb") as f:
        f.truncate(32 << 20)
    (tmp_path / "no-manifest").mkdir()
    env = dict(os.environ, LOSSJIT_KERNEL_PATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _FIND_BUNDLE], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "no prebuilt kernel for linear_cross_entropy" in out, out
    assert ("unreadable: cannot read '%s': it is a FIFO, expected a regular file"
            % (tmp_path / "fifo" / "manifest.json")) in out, out
    assert ("unreadable: cannot read '%s': it holds 33554432 bytes, more than the limit of "
            "16777216 bytes" % (tmp_path / "sparse" / "manifest.json")) in out, out
    assert "no-manifest" not in out, out
