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
