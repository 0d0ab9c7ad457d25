"""The CPU backend's kernels persist in the kernel cache (LOSSJIT_CACHE_DIR),
as the GPU ones do: a second process links the cached object instead of
compiling, and gets the same bits. Each case runs fresh processes, since the
cache's configuration is read once per process."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys

import pytest

from conftest import needs_cpu_backend

pytestmark = needs_cpu_backend

#: Forward and backward of a bf16 linear cross-entropy; prints the result's
#: bits (the loss and both gradients, hashed) and this process's counters.
CHILD = r"""
import hashlib, json
import torch
import lossjit
from lossjit._ext import C

torch.manual_seed(0)
h = torch.randn(37, 29).to(torch.bfloat16).requires_grad_()
w = torch.randn(301, 29).to(torch.bfloat16).requires_grad_()
y = torch.randint(0, 301, (37,))
y[::5] = -100
loss = lossjit.linear_cross_entropy(h, w, y)
loss.backward()
digest = hashlib.sha256()
for t in (loss.detach(), h.grad, w.grad):
    digest.update(t.float().numpy().tobytes())
info = lossjit.cache_info()
stats = C.kernel_cache_stats()
print(json.dumps({"bits": digest.hexdigest(), "compiled": info["compiled"],
                  "from_disk": info["from_disk"], "invalid": stats["invalid_entries"],
                  "directory": stats["directory"]}))
"""


def run_child(cache_dir, **env_overrides):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOSSJIT_CACHE_DISABLE", "LOSSJIT_KERNEL_PATH", "LOSSJIT_CPU_TARGET",
                        "LOSSJIT_CACHE_MAX_BYTES")}
    env["LOSSJIT_CACHE_DIR"] = str(cache_dir)
    env.update(env_overrides)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def entries(cache_dir):
    return sorted(p.name for p in cache_dir.iterdir() if p.is_dir() and len(p.name) == 64)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache one process filled (its counters and entries)."""
    cache_dir = tmp_path_factory.mktemp("kernel-cache")
    first, _ = run_child(cache_dir)
    return cache_dir, first, entries(cache_dir)


def test_a_second_process_links_the_cached_objects_and_gets_the_same_bits(warm_cache):
    cache_dir, first, stored = warm_cache
    assert first["compiled"] >= 2  # the forward and the backward op
    assert first["from_disk"] == 0
    assert first["directory"] == str(cache_dir)
    assert len(stored) == first["compiled"]

    second, _ = run_child(cache_dir)
    assert second["compiled"] == 0
    assert second["from_disk"] == first["compiled"]
    assert second["bits"] == first["bits"]
    assert entries(cache_dir) == stored


def test_disabling_the_cache_compiles_and_writes_nothing(warm_cache):
    cache_dir, first, stored = warm_cache
    again, _ = run_child(cache_dir, LOSSJIT_CACHE_DISABLE="1")
    assert again["compiled"] == first["compiled"]
    assert again["from_disk"] == 0
    assert again["directory"] == ""
    assert again["bits"] == first["bits"]
    assert entries(cache_dir) == stored


def test_a_damaged_entry_is_recompiled_never_linked(warm_cache, tmp_path):
    source, first, stored = warm_cache
    cache_dir = tmp_path / "damaged"
    shutil.copytree(source, cache_dir)
    damaged = 0
    for key in stored:
        for obj in (cache_dir / key).glob("*.o"):
            data = bytearray(obj.read_bytes())
            data[len(data) // 2] ^= 0xFF
            obj.write_bytes(bytes(data))
            damaged += 1
    assert damaged == first["compiled"]

    second, stderr = run_child(cache_dir)
    assert second["invalid"] == damaged
    assert stderr.count("ignoring invalid kernel bundle") == damaged, stderr
    assert second["compiled"] == first["compiled"]
    assert second["from_disk"] == 0
    assert second["bits"] == first["bits"]
    # Replaced: the next process links them again.
    third, _ = run_child(cache_dir)
    assert third["compiled"] == 0 and third["from_disk"] == first["compiled"]
    assert third["bits"] == first["bits"]


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="x86-64-v2 names an x86 CPU level")
def test_another_cpu_target_is_a_miss_with_the_same_bits(warm_cache, tmp_path):
    source, native, stored = warm_cache
    cache_dir = tmp_path / "targets"
    shutil.copytree(source, cache_dir)
    baseline, _ = run_child(cache_dir, LOSSJIT_CPU_TARGET="x86-64-v2")
    # Code built for one CPU is never linked for another.
    assert baseline["compiled"] == native["compiled"]
    assert baseline["from_disk"] == 0
    assert baseline["bits"] == native["bits"]
    assert len(entries(cache_dir)) == 2 * len(stored)
