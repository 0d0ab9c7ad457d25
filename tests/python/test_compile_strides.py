"""torch.compile with a transposed weight (the ``x @ W`` form, W [D, V]).

The real gradient kernels write contiguous gradients whatever the inputs'
strides; inductor checks every op's outputs against its fake kernel's
strides, so a fake that kept a transposed weight's strides failed the
backward with "incorrect fake kernel". Each gradient op — the backward, the
fused forward+backward and the vocabulary reductions' backward — runs here
under inductor against eager, bit for bit.
"""

import pytest
import torch

import lossjit


def _cross_entropy(h, wt, y):
    return lossjit.linear_cross_entropy(h, wt.t(), y)


def _fused(h, wt, y):
    return lossjit.linear_cross_entropy(h, wt.t(), y, fused_backward=True)


def _log_prob(h, wt, y):
    return lossjit.linear_log_prob(h, wt.t(), y)


@pytest.mark.parametrize("hidden_grad", [True, False], ids=["grad_x", "no_grad_x"])
@pytest.mark.parametrize("loss", [_cross_entropy, _fused, _log_prob], ids=lambda f: f.__name__)
def test_transposed_operands_under_inductor(loss, hidden_grad):
    torch.manual_seed(0)
    n, d, v = 6, 8, 11
    h = torch.randn(d, n).t().requires_grad_(hidden_grad)  # not contiguous either
    wt = torch.randn(d, v, requires_grad=True)  # the weight is wt.t()
    y = torch.randint(0, v, (n,))
    leaves = [h, wt] if hidden_grad else [wt]
    torch._dynamo.reset()
    # Inductor's on-disk caches key a graph without the fake kernels' code:
    # a graph compiled under an older fake would pass or fail for it.
    with torch._inductor.config.patch(force_disable_caches=True):
        compiled = torch.compile(loss, backend="inductor", fullgraph=True)
        got, expected = compiled(h, wt, y), loss(h, wt, y)
        assert torch.equal(got, expected)
        seed = torch.ones_like(got)
        for a, b in zip(torch.autograd.grad(got, leaves, seed),
                        torch.autograd.grad(expected, leaves, seed)):
            assert torch.equal(a, b)


def test_fake_gradients_are_contiguous_like_the_real_ones():
    # The fakes' strides, op by op, against the real kernels' (a transposed
    # hidden and weight).
    from torch._subclasses.fake_tensor import FakeTensorMode
    torch.manual_seed(1)
    n, d, v = 5, 8, 11
    h = torch.randn(d, n).t()
    w = torch.randn(d, v).t()
    y = torch.randint(0, v, (n,))
    lse, g = torch.randn(n), torch.tensor(1.0)
    calls = {
        "backward": (torch.ops.lossjit.linear_cross_entropy_backward,
                     lambda hh, ww, yy, ll, gg: (hh, ww, yy, None, ll, gg, -100, "mean", True,
                                                 True)),
        "with_grad": (torch.ops.lossjit.linear_cross_entropy_with_grad,
                      lambda hh, ww, yy, ll, gg: (hh, ww, yy, None, -100, "mean", True, True)),
    }
    for name, (op, args) in calls.items():
        real = op(*args(h, w, y, lse, g))
        with FakeTensorMode() as mode:
            fake = op(*args(*(mode.from_tensor(t) for t in (h, w, y, lse, g))))
        assert [t.stride() for t in fake] == [t.stride() for t in real], name
        assert all(t.is_contiguous() for t in real), name
