"""Shared fixtures of the Python suite.

Every test that takes `device` runs on CPU (the LLVM-JIT backend) and on CUDA
(the PTX kernels through the runtime); CUDA is skipped with its reason where
torch.cuda.is_available() is false, the CPU where this build has no compiler.

The suite finds the package through PYTHONPATH (scripts/test.sh sets it to
python/ and <build>/python); run from a checkout it also looks there itself.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn.functional as F

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import lossjit  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(_ROOT, "python"))
    build = os.environ.get("LOSSJIT_BUILD", os.path.join(_ROOT, "build"))
    sys.path.insert(0, os.path.join(build, "python"))
    import lossjit  # noqa: F401,E402

CUDA = torch.cuda.is_available()
NO_CUDA = "no CUDA device: torch.cuda.is_available() is False"
NO_COMPILER = "this lossjit build has no compiler (LOSSJIT_ENABLE_COMPILER=OFF): no CPU backend"

DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(not lossjit.has_compiler, reason=NO_COMPILER)),
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason=NO_CUDA)),
]

#: For tests that use CPU tensors without the `device` fixture.
needs_cpu_backend = pytest.mark.skipif(not lossjit.has_compiler, reason=NO_COMPILER)


def aot_binary():
    """The build's lossjit-aot, or None (a build without the compiler)."""
    build = os.environ.get("LOSSJIT_BUILD", os.path.join(_ROOT, "build"))
    path = os.path.join(build, "bin", "lossjit-aot")
    return path if os.access(path, os.X_OK) else None

STORAGE = [torch.float32, torch.float16, torch.bfloat16]
REDUCTIONS = ["mean", "sum", "none"]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def load_bench(relative):
    """A bench/ script (relative to the repository) as a module: its models
    are plain Python, testable without a GPU."""
    import importlib.util
    path = os.path.join(_ROOT, relative)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs(device, dtype=torch.float32, n=19, v=37, d=24, bias=False, lead=None,
                ignore_index=-100, ignored=(3, 11), label_dtype=torch.int64, seed=0,
                requires_grad=False, scale=1.0):
    """hidden [*lead or n, d], weight [v, d], target, bias: values rounded to
    `dtype` once, so the fp64 reference sees exactly what the kernel sees."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(lead) if lead is not None else (n,)
    hidden = (torch.randn(*shape, d, generator=g) * scale).to(dtype)
    weight = (torch.randn(v, d, generator=g) / d ** 0.5).to(dtype)
    target = torch.randint(0, v, shape, generator=g)
    flat = target.view(-1)
    for i in ignored:
        if i < flat.numel():
            flat[i] = ignore_index
    target = target.to(label_dtype)
    b = (torch.randn(v, generator=g) * 0.5).to(dtype) if bias else None
    out = [hidden.to(device), weight.to(device), target.to(device),
           None if b is None else b.to(device)]
    if requires_grad:
        for t in out:
            if t is not None and t.is_floating_point():
                t.requires_grad_(True)
    return out


def transform_logits(z, logit_scale=1.0, softcap=None):
    """What lossjit's logit_scale and softcap do to the logits."""
    z = z * logit_scale
    return z if softcap is None else softcap * torch.tanh(z / softcap)


def reference(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
              logit_scale=1.0, softcap=None):
    """F.cross_entropy(F.linear(...)) in float64 from the same rounded inputs."""
    h = hidden.detach().double().cpu()
    w = weight.detach().double().cpu()
    b = None if bias is None else bias.detach().double().cpu()
    logits = transform_logits(F.linear(h.reshape(-1, h.shape[-1]), w, b), logit_scale,
                              softcap)
    loss = F.cross_entropy(logits, target.cpu().reshape(-1).long(), ignore_index=ignore_index,
                           reduction=reduction)
    if reduction == "none":
        loss = loss.view(target.shape)
    return loss, torch.logsumexp(logits, -1).view(target.shape)


def reference_grads(hidden, weight, target, bias, grad_loss, ignore_index=-100,
                    reduction="mean", logit_scale=1.0, softcap=None):
    h = hidden.detach().double().cpu().requires_grad_()
    w = weight.detach().double().cpu().requires_grad_()
    b = None if bias is None else bias.detach().double().cpu().requires_grad_()
    logits = transform_logits(F.linear(h.reshape(-1, h.shape[-1]), w, b), logit_scale,
                              softcap)
    loss = F.cross_entropy(logits,
                           target.cpu().reshape(-1).long(), ignore_index=ignore_index,
                           reduction=reduction)
    if reduction == "none":
        loss = loss.view(target.shape)
    inputs = [h, w] + ([b] if b is not None else [])
    return torch.autograd.grad(loss, inputs, grad_loss.detach().double().cpu())


def tolerance(dtype):
    """(rtol, atol) for float32-computed values vs float64, and for gradients
    that are rounded once to the storage dtype; float64 storage computes in
    float64 (within the rounding of a few hundred float64 operations)."""
    return {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5),
            torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]


def trl_generalized_jsd_terms(student_logits, teacher_logits, beta):
    """The [..., V] terms of TRL's GKDTrainer.generalized_jsd_loss, written as
    TRL writes it (a tensor beta in the logits' dtype, the mixture's log by
    logsumexp over a stack): the oracle of the JSD tests, and a loss the
    decorator must fuse unedited."""
    import torch.nn.functional as F

    student_log_probs = F.log_softmax(student_logits, dim=-1)
    teacher_log_probs = F.log_softmax(teacher_logits, dim=-1)
    if beta == 0:
        return F.kl_div(student_log_probs, teacher_log_probs, reduction="none",
                        log_target=True)
    if beta == 1:
        return F.kl_div(teacher_log_probs, student_log_probs, reduction="none",
                        log_target=True)
    beta = torch.tensor(beta, dtype=student_log_probs.dtype)
    mixture_log_probs = torch.logsumexp(
        torch.stack([student_log_probs + torch.log(1 - beta),
                     teacher_log_probs + torch.log(beta)]), dim=0)
    kl_teacher = F.kl_div(mixture_log_probs, teacher_log_probs, reduction="none",
                          log_target=True)
    kl_student = F.kl_div(mixture_log_probs, student_log_probs, reduction="none",
                          log_target=True)
    return beta * kl_teacher + (1 - beta) * kl_student
