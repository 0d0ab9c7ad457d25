"""The CPU backend's JIT target is chosen (LOSSJIT_CPU_TARGET), and the
choice never changes a bit of the results.

Each target runs in its own interpreter (the variable is read when a kernel
compiles), on the same saved inputs; x86-64-v2 has no FMA units and no
16-bit float conversions, x86-64-v3 no AVX512_BF16 — the host CI once ran on
hid exactly that difference (a JIT libcall other hosts lack). float64 runs
its own exp2/log2 expansions and, without FMA units, the exactly rounded
fma routine lossjit provides.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import make_inputs, needs_cpu_backend, reference_grads, tolerance

_RUN = r"""
import sys, torch, lossjit
inputs = torch.load(sys.argv[1])
out = {}
for dtype, (h, w, y, b) in inputs.items():
    for fused in (False, True):
        h1, w1, b1 = (t.clone().requires_grad_() for t in (h, w, b))
        loss = lossjit.linear_cross_entropy(h1, w1, y, b1, softcap=15.0,
                                            fused_backward=fused)
        loss.backward()
        out[(dtype, fused)] = [loss.detach(), h1.grad, w1.grad, b1.grad]
torch.save(out, sys.argv[2])
"""


def _run_for(target: str | None, inputs_path, out_path):
    env = dict(os.environ)
    env.pop("LOSSJIT_CPU_TARGET", None)
    if target is not None:
        env["LOSSJIT_CPU_TARGET"] = target
    done = subprocess.run([sys.executable, "-c", _RUN, str(inputs_path), str(out_path)],
                          env=env, capture_output=True, text=True, timeout=600)
    return done


@needs_cpu_backend
def test_every_target_gives_the_same_bits(tmp_path):
    inputs = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        h, w, y, b = make_inputs("cpu", dtype, n=21, v=45, d=19, bias=True, scale=3.0)
        inputs[str(dtype)] = (h, w, y, b)
    torch.save(inputs, tmp_path / "inputs.pt")
    results = {}
    for target in (None, "x86-64-v2", "x86-64-v3"):
        out = tmp_path / f"out-{target}.pt"
        done = _run_for(target, tmp_path / "inputs.pt", out)
        assert done.returncode == 0, done.stderr[-3000:]
        results[target] = torch.load(out)
    native = results[None]
    for key, tensors in native.items():
        dtype = key[0]
        h, w, y, b = inputs[dtype]
        # Correct, not only equal: the gradients against fp64.
        want = reference_grads(h, w, y, b, torch.tensor(1.0), softcap=15.0)
        rtol, atol = tolerance(h.dtype)
        for got, ref in zip(tensors[1:], want):
            torch.testing.assert_close(got.double(), ref, rtol=rtol, atol=atol)
        for target in ("x86-64-v2", "x86-64-v3"):
            for a, c in zip(tensors, results[target][key]):
                bits = lambda t: t.reshape(-1).view(torch.uint8)  # noqa: E731
                assert torch.equal(bits(a), bits(c)), f"{key}: {target} differs from native"


@needs_cpu_backend
def test_an_unknown_target_is_a_clear_error(tmp_path):
    h, w, y, b = make_inputs("cpu", torch.float32, n=3, v=5, d=4, bias=True)
    torch.save({"f32": (h, w, y, b)}, tmp_path / "inputs.pt")
    done = _run_for("pentium-9000", tmp_path / "inputs.pt", tmp_path / "out.pt")
    assert done.returncode != 0
    assert "LOSSJIT_CPU_TARGET 'pentium-9000' is not a CPU LLVM" in done.stderr
    assert "expected native, x86-64-v2, x86-64-v3, x86-64-v4" in done.stderr
