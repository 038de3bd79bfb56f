"""`tiersim plan` on what a user can get wrong: more --workers than candidates (never more
processes than candidates, and an estimate over the parallelism that really happens)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiersim.sweep.worker import PointResult

ROOT = Path(__file__).resolve().parent.parent
# A 1B model on the default machine: every placement below fits, each candidate runs quickly
GENERIC = """name: g
model: {parameters: 1000000000, layers: 24, hidden: 2048, activation_bytes_per_layer: 200 MB}
"""
RECOMPUTE = "  training.recompute: [none, selective, full]\n"


def _write(tmp: Path, body: str) -> Path:
    path = tmp / "p.yaml"
    path.write_text(body)
    return path


def test_workers_far_over_the_candidates_start_one_per_candidate(tmp_path):
    # 2 x 3 = 6 candidates; 5 time the search, 1 is left: one worker, not 100,000 (which hung)
    bound = "simulation: {max_layer_passes: 10}\n"  # each candidate infeasible: quick
    plan = "plan:\n  placement.optimizer: [hbm, dram]\n" + RECOMPUTE
    path = _write(tmp_path, GENERIC + bound + plan)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "tiersim", "plan", str(path), "--workers", "100000"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "plan: 6 of 6 candidates fit and are simulated: 5 spread over them took " in done.stderr
    want = "the other 1 on 1 worker (of 100,000 asked: no more than the candidates left), about "
    assert want in done.stderr
    assert "1/1 plans simulated" in done.stderr


@pytest.fixture
def ten_s_each(monkeypatch):
    """Every sampled candidate takes 10 s (injected: nothing is simulated), on a 4-core
    machine."""

    def run_point(task):
        return PointResult("k", "ok", None, {}, None, 10.0)

    monkeypatch.setattr("tiersim.plan.run.run_point", run_point)
    monkeypatch.setattr("tiersim.plan.run.cores", lambda: 4)


TWELVE = "plan:\n  placement.optimizer: [hbm, dram]\n  placement.master: [hbm, dram]\n" + RECOMPUTE


@pytest.mark.parametrize(
    "workers, seconds, where",
    [
        # 2 x 2 x 3 = 12 candidates of the same layer passes; 5 sampled at 10 s each, 7 left:
        # 7 x 10 s = 70 s of work, on min(100,000, 7) = 7 workers of which 4 run at once
        # (4 cores): 70 / 4 = 17.5 s
        (
            100_000,
            "17.500 s",
            "7 workers (of 100,000 asked: no more than the candidates left), 4 at a time on "
            "this machine's 4 cores",
        ),
        (2, "35.000 s", "2 workers"),  # 70 / 2
        (4, "17.500 s", "4 workers"),  # 70 / 4
        (6, "17.500 s", "6 workers, 4 at a time on this machine's 4 cores"),  # 70 / min(6, 4)
    ],
)
def test_estimate_is_over_the_workers_that_run_at_once(
    tmp_path, cli, ten_s_each, workers, seconds, where
):
    path = _write(tmp_path, GENERIC + TWELVE)
    code, _, err = cli("plan", path, "--workers", workers, "--time-limit", "1 s")
    assert code == 2, err
    assert (
        f"12 candidates fit; from 5 spread over them (50.000 s in all) they take about "
        f"{seconds} on {where}, over --time-limit 1.000 s"
    ) in err
