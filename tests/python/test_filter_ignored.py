"""linear_cross_entropy(..., filter_ignored=True): the kernels run on the
counted rows only, and the loss and gradients are those of every row
(against float64, against the unfiltered call, bitwise against the call on
the gathered rows), with the dropped rows' gradients and 'none' losses zero."""

from __future__ import annotations

import pytest
import torch

import lossjit
from lossjit import functional
from conftest import (make_inputs, needs_cpu_backend, reference, reference_grads,
                      tolerance)

#: Every other row and a run of six: whole row blocks and single rows drop.
IGNORED = tuple(range(0, 19, 2)) + (13, 15, 17)


def _grads(loss, inputs, grad_out):
    return torch.autograd.grad(loss, inputs, grad_out)


#: (storage, reduction, fused_backward): every storage type, reduction and
#: path once (test_functional.py covers their kernels' full product).
CASES = [(torch.float32, "mean", False), (torch.bfloat16, "sum", False),
         (torch.float16, "none", False), (torch.bfloat16, "mean", True),
         (torch.float32, "sum", True)]


@pytest.mark.parametrize("dtype,reduction,fused", CASES, ids=str)
def test_matches_fp64_and_zeroes_dropped_rows(device, dtype, reduction, fused):
    h, w, y, b = make_inputs(device, dtype, bias=True, ignored=IGNORED, requires_grad=True)
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction, fused_backward=fused,
                                        filter_ignored=True)
    ref, _ = reference(h, w, y, b, reduction=reduction)
    assert loss.shape == ref.shape and loss.dtype == torch.float32
    torch.testing.assert_close(loss.double().cpu(), ref, rtol=2e-5, atol=2e-5)
    grad_out = torch.rand_like(loss) + 0.5
    grads = _grads(loss, [h, w, b], grad_out)
    refs = reference_grads(h, w, y, b, grad_out, reduction=reduction)
    rtol, atol = tolerance(dtype)
    for got, want, t in zip(grads, refs, [h, w, b]):
        assert got.dtype == t.dtype and got.shape == t.shape
        torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol)
    dropped = torch.tensor(IGNORED)
    assert torch.count_nonzero(grads[0].cpu()[dropped]) == 0
    if reduction == "none":
        assert torch.count_nonzero(loss.cpu()[dropped]) == 0


@pytest.mark.parametrize("dtype,reduction,fused",
                         [(torch.float16, "none", False), (torch.bfloat16, "mean", True)],
                         ids=str)
def test_is_the_call_on_the_counted_rows(device, dtype, reduction, fused):
    """Bitwise: the filter is the gather and the scatter, nothing else."""
    h, w, y, b = make_inputs(device, dtype, lead=(3, 7), ignored=IGNORED, bias=True,
                             requires_grad=True)
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction, fused_backward=fused,
                                        filter_ignored=True)
    grad_out = torch.rand_like(loss) + 0.5
    gh, gw = _grads(loss, [h, w], grad_out)

    kept = (y.reshape(-1) != -100).nonzero().squeeze(1)
    rows = h.detach().reshape(-1, h.shape[-1])[kept].requires_grad_()
    w2 = w.detach().clone().requires_grad_()
    manual = lossjit.linear_cross_entropy(rows, w2, y.reshape(-1)[kept], b.detach(),
                                          reduction=reduction, fused_backward=fused)
    manual_out = grad_out.reshape(-1)[kept] if reduction == "none" else grad_out
    mh, mw = _grads(manual, [rows, w2], manual_out)
    if reduction == "none":
        assert torch.equal(loss.reshape(-1)[kept], manual)
    else:
        assert torch.equal(loss, manual)
    assert torch.equal(gw, mw)
    assert torch.equal(gh.reshape(-1, h.shape[-1])[kept], mh)


@needs_cpu_backend
def test_kernels_see_only_the_counted_rows(monkeypatch):
    """The filter reaches the kernels (not a gather after the fact)."""
    seen = []
    inner = functional._fused

    def spy(hidden, *args, **kwargs):
        seen.append(hidden.shape[0])
        return inner(hidden, *args, **kwargs)

    monkeypatch.setattr(functional, "_fused", spy)
    h, w, y, _ = make_inputs("cpu", ignored=IGNORED)
    lossjit.linear_cross_entropy(h, w, y, filter_ignored=True)
    lossjit.linear_cross_entropy(h, w, y)
    assert seen == [19 - len(IGNORED), 19]


def test_a_graph_capture_runs_every_row(monkeypatch):
    """Inside a CUDA graph capture the rows cannot be counted (a host sync):
    the call is the unfiltered one, bit for bit, and waits for nothing."""
    seen = []
    inner = functional._fused

    def spy(hidden, *args, **kwargs):
        seen.append(hidden.shape[0])
        return inner(hidden, *args, **kwargs)

    def no_sync(*args, **kwargs):
        raise AssertionError("counted the rows (a host sync) inside a capture")

    h, w, y, b = make_inputs("cpu", torch.bfloat16, bias=True, ignored=IGNORED,
                             requires_grad=True)
    plain = lossjit.linear_cross_entropy(h, w, y, b, reduction="none")
    monkeypatch.setattr(functional, "_fused", spy)
    monkeypatch.setattr(functional, "_capturing", lambda t: True)
    monkeypatch.setattr(torch.Tensor, "nonzero", no_sync)
    captured = lossjit.linear_cross_entropy(h, w, y, b, reduction="none", filter_ignored=True)
    assert seen == [19]
    assert torch.equal(captured, plain)
    grad_out = torch.rand_like(plain) + 0.5
    for p, q in zip(_grads(plain, [h, w, b], grad_out), _grads(captured, [h, w, b], grad_out)):
        assert torch.equal(p, q)


def test_capturing_only_on_a_capturing_cuda_stream():
    h = torch.zeros(2, 3)
    assert not functional._capturing(h)


def test_same_bits_every_run_and_unchanged_when_nothing_is_ignored(device):
    h, w, y, b = make_inputs(device, torch.bfloat16, bias=True, ignored=IGNORED,
                             requires_grad=True)
    runs = []
    for _ in range(2):
        loss = lossjit.linear_cross_entropy(h, w, y, b, reduction="sum", filter_ignored=True)
        runs.append((loss,) + _grads(loss, [h, w, b], torch.ones_like(loss)))
    assert all(torch.equal(p, q) for p, q in zip(*runs))

    h, w, y, b = make_inputs(device, torch.bfloat16, bias=True, ignored=(), requires_grad=True)
    plain = lossjit.linear_cross_entropy(h, w, y, b, reduction="sum")
    filtered = lossjit.linear_cross_entropy(h, w, y, b, reduction="sum", filter_ignored=True)
    assert torch.equal(plain, filtered)
    for p, q in zip(_grads(plain, [h, w, b], torch.ones_like(plain)),
                    _grads(filtered, [h, w, b], torch.ones_like(filtered))):
        assert torch.equal(p, q)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_every_row_ignored(device, reduction):
    h, w, y, b = make_inputs(device, ignored=range(19), bias=True, requires_grad=True)
    loss = lossjit.linear_cross_entropy(h, w, y, b, reduction=reduction, filter_ignored=True)
    ref, _ = reference(h, w, y, b, reduction=reduction)
    torch.testing.assert_close(loss.double().cpu(), ref, equal_nan=True)
    if reduction == "mean":
        assert torch.isnan(loss)
        return
    gh, gw = _grads(loss, [h, w], torch.ones_like(loss))
    assert torch.count_nonzero(gh) == 0 and torch.count_nonzero(gw) == 0
    assert gh.shape == h.shape


def test_class_weights_and_label_smoothing(device):
    h, w, y, b = make_inputs(device, ignored=IGNORED, requires_grad=True)
    weights = torch.rand(w.shape[0], generator=torch.Generator().manual_seed(3)).to(device)
    kwargs = dict(weight=weights, label_smoothing=0.1)
    plain = lossjit.linear_cross_entropy(h, w, y, **kwargs)
    filtered = lossjit.linear_cross_entropy(h, w, y, filter_ignored=True, **kwargs)
    torch.testing.assert_close(filtered, plain, rtol=1e-6, atol=1e-6)
    for p, q in zip(_grads(plain, [h, w], torch.ones_like(plain)),
                    _grads(filtered, [h, w], torch.ones_like(filtered))):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_module_passes_it_on(device):
    h, w, y, b = make_inputs(device, ignored=IGNORED, bias=True, requires_grad=True)
    module = lossjit.LinearCrossEntropyLoss(filter_ignored=True)
    assert "filter_ignored=True" in repr(module)
    ref, _ = reference(h, w, y, b)
    torch.testing.assert_close(module(h, w, y, b).double().cpu(), ref, rtol=2e-5, atol=2e-5)


def test_meta_tensors_keep_their_shapes():
    h, w, y, _ = make_inputs("meta", ignored=IGNORED, lead=(2, 5))
    loss = lossjit.linear_cross_entropy(h, w, y, reduction="none", filter_ignored=True)
    assert loss.shape == (2, 5) and loss.device.type == "meta"


def test_bad_arguments_are_named():
    h, w, y, _ = make_inputs("cpu", ignored=IGNORED)
    with pytest.raises(ValueError, match="filter_ignored=True drops the ignored rows"):
        lossjit.linear_cross_entropy(h, w, y, filter_ignored=True, return_lse=True)
    with pytest.raises(TypeError, match="filter_ignored must be a bool, got int"):
        lossjit.linear_cross_entropy(h, w, y, filter_ignored=1)
    # The shape checks see the arguments as given, before any reshaping.
    with pytest.raises(ValueError, match=r"target must have shape \[19\]"):
        lossjit.linear_cross_entropy(h, w, y[:-1], filter_ignored=True)


@pytest.mark.parametrize("family,reduction", [("kl", "mean"), ("jsd", "none")])
def test_teacher_families(device, family, reduction):
    """Both heads' rows drop together: bitwise the call on the gathered
    rows, close to the unfiltered call, zero gradients on dropped rows."""
    h, w, y, b = make_inputs(device, torch.float32, lead=(3, 7), ignored=IGNORED, bias=True,
                             requires_grad=True)
    g = torch.Generator().manual_seed(5)
    th = torch.randn(3, 7, 11, generator=g).to(device)
    tw = (torch.randn(w.shape[0], 11, generator=g) / 11 ** 0.5).to(device)

    def loss_of(student, teacher, labels, **kwargs):
        if family == "kl":
            return lossjit.linear_kl_div(student, w, teacher, tw, target=labels,
                                         reduction=reduction, student_bias=b, **kwargs)
        return lossjit.linear_jsd(student, w, teacher, tw, beta=0.3, target=labels,
                                  reduction=reduction, student_bias=b, **kwargs)

    loss = loss_of(h, th, y, filter_ignored=True)
    grad_out = torch.rand_like(loss) + 0.5
    gh, gw = _grads(loss, [h, w], grad_out)
    plain = loss_of(h, th, y)
    ph, pw = _grads(plain, [h, w], grad_out)
    torch.testing.assert_close(loss, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gw, pw, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gh, ph, rtol=1e-5, atol=1e-6)

    kept = (y.reshape(-1) != -100).nonzero().squeeze(1)
    rows = h.detach().reshape(-1, h.shape[-1])[kept].requires_grad_()
    manual = loss_of(rows, th.reshape(-1, th.shape[-1])[kept], y.reshape(-1)[kept])
    manual_out = grad_out.reshape(-1)[kept] if reduction == "none" else grad_out
    (mh,) = _grads(manual, [rows], manual_out)
    assert torch.equal(loss.reshape(-1)[kept] if reduction == "none" else loss, manual)
    assert torch.equal(gh.reshape(-1, h.shape[-1])[kept], mh)
    assert torch.count_nonzero(gh.reshape(-1, h.shape[-1])[torch.tensor(IGNORED)]) == 0
    with pytest.raises(TypeError, match="filter_ignored must be a bool"):
        loss_of(h, th, y, filter_ignored="yes")


def test_token_parallel_checks_it_before_any_collective():
    """(The filtered token-parallel loss itself runs on 2 and 4 ranks in
    distributed_worker.py's scenario_token_parallel.)"""
    from lossjit import distributed as LD
    h, w, y, _ = make_inputs("cpu", ignored=IGNORED)
    with pytest.raises(TypeError, match="lossjit.distributed: filter_ignored must be a bool"):
        LD.token_parallel_linear_cross_entropy(h, w, y, filter_ignored=1)
    with pytest.raises(ValueError, match="lossjit.distributed: filter_ignored=True drops"):
        LD.token_parallel_linear_cross_entropy(h, w, y, filter_ignored=True, return_lse=True)
    with pytest.raises(TypeError, match="filter_ignored must be a bool"):
        LD.TokenParallelLinearCrossEntropy(4, 8, filter_ignored="no")


@needs_cpu_backend
@pytest.mark.parametrize("ignored", [IGNORED, ()], ids=["some", "none"])
def test_torch_compile_fullgraph(ignored):
    """The count is a data-dependent size in the graph: same bits and
    gradients as eager, with rows to drop and without."""
    def loss_of(h, w, y):
        return lossjit.linear_cross_entropy(h, w, y, filter_ignored=True)

    h, w, y, _ = make_inputs("cpu", ignored=ignored, requires_grad=True)
    torch._dynamo.reset()
    got, expected = torch.compile(loss_of, fullgraph=True)(h, w, y), loss_of(h, w, y)
    assert torch.equal(got, expected)
    for a, c in zip(_grads(got, [h, w], torch.ones_like(got)),
                    _grads(expected, [h, w], torch.ones_like(expected))):
        assert torch.equal(a, c)
