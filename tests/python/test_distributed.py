"""lossjit.distributed on torch.distributed's gloo backend (CPU), 4 processes.

One spawn of 4 ranks runs every scenario of distributed_worker.py (2-rank
and 1-rank cases on subgroups of the same processes, to pay the process
start-up once); each test here asserts one scenario's result on every rank.
The whole module is bounded: the ranks are killed after TIMEOUT seconds.
NCCL (several GPUs) is not exercised here.
"""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
import torch.distributed as dist

from conftest import needs_cpu_backend

import distributed_worker

WORLD = 4
TIMEOUT = 240  # seconds for all ranks together; a hang fails instead of blocking CI

pytestmark = [
    needs_cpu_backend,
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Runs every scenario on 4 spawned ranks; {rank: {scenario: "ok" | error}}."""
    out = tmp_path_factory.mktemp("distributed")
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=distributed_worker.main,
                             args=(rank, WORLD, str(out / "rendezvous"), str(out)))
             for rank in range(WORLD)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(TIMEOUT)
    hung = [r for r, p in enumerate(ranks) if p.is_alive()]
    for p in ranks:
        if p.is_alive():
            p.kill()
            p.join()
    if hung:
        pytest.fail(f"ranks {hung} did not finish within {TIMEOUT} s")
    result = {}
    for rank, p in enumerate(ranks):
        path = out / f"rank{rank}.json"
        if not path.exists():
            pytest.fail(f"rank {rank} exited with code {p.exitcode} and no report")
        result[rank] = json.loads(path.read_text())
    print("seconds per scenario (rank 0):", result[0].pop("seconds", None))
    for report in result.values():
        report.pop("seconds", None)
    return result


@pytest.mark.parametrize("scenario", distributed_worker.SCENARIOS)
def test_scenario(reports, scenario):
    failures = {rank: report.get(scenario, "not run") for rank, report in reports.items()
                if report.get(scenario) != "ok"}
    assert not failures, "\n".join(f"--- rank {r}:\n{text}" for r, text in failures.items())


# The single-device kernel rules lossjit.distributed relies on, pinned here
# in-process so that a kernel change that breaks them fails by name.

@pytest.mark.parametrize("softcap", [None, 3.0])
def test_kernel_rules_the_shards_rely_on(softcap):
    """(1) An ignored row still gets its lse, and a row loss of exactly 0.
    (2) With one extra weight row of zeros and bias −inf taken as the label,
    the backward gives dZ = g·softmax (no one-hot) on the real columns, so
    dX = dZ·W and dW = dZᵀ·X over them; float64 reference."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    n, v, d = 9, 13, 8
    x = torch.randn(n, d, generator=g)
    w = torch.randn(v, d, generator=g)
    labels = torch.full((n,), -100)
    cap = 0.0 if softcap is None else softcap
    transforms = () if softcap is None else (1.0, cap)
    loss, lse = torch.ops.lossjit.linear_cross_entropy(x, w, labels, None, -100, "none", "",
                                                       *transforms)
    z = F.linear(x.double(), w.double())
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    assert torch.equal(loss, torch.zeros(n))
    torch.testing.assert_close(lse.double(), torch.logsumexp(z, 1), rtol=2e-6, atol=0)

    wx = torch.cat([w, torch.zeros(1, d)])
    bx = torch.cat([torch.zeros(v), torch.tensor([-float("inf")])])
    grow = torch.rand(n, generator=g)
    gx, gw, _gb = torch.ops.lossjit.linear_cross_entropy_backward(
        x, wx, torch.full((n,), v), bx, lse, grow, -100, "none", True, True, 1.0, cap)
    p = torch.softmax(z, 1) * grow.double()[:, None]
    if softcap:  # dz/draw = 1 − tanh²
        p = p * (1 - (z / softcap) ** 2)
    torch.testing.assert_close(gx.double(), p @ w.double(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gw[:v].double(), p.T @ x.double(), rtol=1e-5, atol=1e-6)
