"""What lossjit builds and loads for a CUDA device, and the chunk budgets.

On compute capability 9.0 the JIT compiles for sm_90a (Hopper's wgmma
kernels) and a build without the compiler prefers sm_90a bundles there;
LOSSJIT_CUDA_ARCH overrides both (sm_90 keeps a Hopper on mma.sync) once its
kernels can run on the device. The chunked backward's workspace budget is
64 MiB on the host and 256 MiB on CUDA unless a caller names one. None of this
needs a GPU: the device's compute capability is faked where it is read.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from lossjit import _kernels as K
from lossjit._ext import C

from conftest import aot_binary, needs_cpu_backend


@pytest.mark.parametrize("cc,arch", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 9), "sm_89"),
                                     ((10, 0), "sm_100"), ((12, 0), "sm_120")])
def test_jit_arch_is_sm90a_on_hopper_only(cc, arch):
    assert C.select_jit_arch(*cc) == arch


@pytest.mark.parametrize("requested,cc,message", [
    ("sm_90a", (8, 0), "LOSSJIT_CUDA_ARCH='sm_90a': its kernels need a newer GPU than this "
                       "sm_80 device"),
    ("sm_90a", (10, 0), "LOSSJIT_CUDA_ARCH='sm_90a': its kernels load on compute capability "
                        "9.x alone, this device is sm_100"),
    ("hopper", (9, 0), "LOSSJIT_CUDA_ARCH='hopper': expected an sm_<major><minor>[a] arch"),
    ("compute_90", (9, 0), "LOSSJIT_CUDA_ARCH='compute_90': expected an sm_<major><minor>[a]"),
])
def test_a_requested_arch_that_cannot_run_is_refused_by_name(requested, cc, message):
    with pytest.raises(ValueError) as e:
        C.select_jit_arch(*cc, requested)
    assert message in str(e.value)


class _FakeDevice:
    """C with the device query answered by a fixed compute capability."""

    def __init__(self, cc):
        self.cc = cc

    def cuda_compute_capability(self, index):
        return self.cc

    def __getattr__(self, name):
        return getattr(C, name)


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(K, "C", _FakeDevice((9, 0)))
    monkeypatch.setattr(K, "_cuda_arch", {})
    monkeypatch.setattr(K, "_cuda_capability", {})
    monkeypatch.delenv(K.ARCH_ENV, raising=False)


def test_the_package_builds_sm90a_on_hopper_and_honors_the_override(hopper, monkeypatch):
    assert K.cuda_capability(0) == (9, 0)
    assert K.cuda_arch(0) == "sm_90a"
    monkeypatch.setattr(K, "_cuda_arch", {})
    monkeypatch.setenv(K.ARCH_ENV, " sm_90 ")
    assert K.cuda_arch(0) == "sm_90"
    monkeypatch.setattr(K, "_cuda_arch", {})
    monkeypatch.setenv(K.ARCH_ENV, "sm_100a")
    with pytest.raises(ValueError, match="LOSSJIT_CUDA_ARCH='sm_100a': its kernels need a "
                                         "newer GPU than this sm_90 device"):
        K.cuda_arch(0)


def test_workspace_budget_follows_the_device():
    flags = K.BackwardFlags(True, True)
    assert K._with_workspace(flags, torch.device("cpu")).workspace_bytes == 64 << 20
    assert K._with_workspace(flags, torch.device("cuda", 0)).workspace_bytes == 256 << 20
    named = flags._replace(workspace_bytes=1 << 20)
    assert K._with_workspace(named, torch.device("cuda", 0)) == named


@needs_cpu_backend
def test_host_backward_keeps_its_64_mib_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("LOSSJIT_CACHE_DIR", str(tmp_path))
    kernel = K.backward_kernel(torch.bfloat16, torch.int64, False, -100, "mean",
                               K.BackwardFlags(True, True), torch.device("cpu"))
    assert kernel.options["workspace_bytes"] == str(64 << 20)


_LOOKUP = """
import sys
from lossjit._ext import C
for major, minor, arch in ((9, 0, ""), (9, 0, "sm_90"), (10, 0, ""), (8, 0, "")):
    try:
        op = C.find_gpu_bundle("linear_cross_entropy", {"pass": "forward", "dtype": "bf16"},
                               major, minor, arch)
        print(major, minor, arch or "-", op.arch, op.options["pass"])
    except RuntimeError as e:
        print(major, minor, arch or "-", "refused:", str(e).splitlines()[0])
"""


@pytest.mark.skipif(aot_binary() is None, reason="needs lossjit-aot (a compiler build)")
def test_prebuilt_lookup_prefers_sm90a_on_hopper(tmp_path):
    # sm_90 and sm_90a bundles of one forward: 9.0 takes the arch-specific
    # (wgmma) one, LOSSJIT_CUDA_ARCH=sm_90 the portable one, 10.0 the only
    # one it can load, 8.0 neither.
    out = tmp_path / "bundles"
    subprocess.run([aot_binary(), "--preset", "linear-cross-entropy", "--dtype", "bf16",
                    "--no-gradients", "--arch", "sm_90,sm_90a", "--no-c-api", "--quiet",
                    "-o", str(out)], check=True, timeout=300)
    env = dict(os.environ, LOSSJIT_KERNEL_PATH=str(out), LOSSJIT_CACHE_DIR=str(tmp_path / "c"))
    done = subprocess.run([sys.executable, "-c", _LOOKUP], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "9 0 - sm_90a forward",
        "9 0 sm_90 sm_90 forward",
        "10 0 - sm_90 forward",
        "8 0 - refused: no prebuilt kernel for linear_cross_entropy {dtype=bf16, pass=forward} "
        f"on sm_80 in LOSSJIT_KERNEL_PATH='{out}' (2 CUDA bundles there); bundles of this op:",
    ], done.stdout
