"""--time-limit bounds the whole of `tiersim plan`, a large space's check against the inventory
included (tiersim.plan.checking): a check that alone would take over the limit is refused as
its first chunks time it, before minutes of checking and before any candidate is simulated,
and the check's time counts against the limit at the simulation's estimate. No clock is read:
the check's time and each candidate's are injected."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plan_input import GENERIC, TWELVE

from tiersim.plan import checking, chunks
from tiersim.plan import run as run_module
from tiersim.plan.checking import checking_estimate_s
from tiersim.sweep.worker import PointResult


def test_the_check_s_time_is_scaled_from_the_positions_back():
    # the default space, 294,912 positions, 3,072 a chunk on 2 workers (a first round of
    # 6,144): the first chunk back after 10 s prices the round, 10 s x 294,912 / 6,144 = 480 s
    assert checking_estimate_s(10.0, 3_072, 294_912, 6_144) == pytest.approx(480.0)
    # later, the positions back: 30,720 after 60 s -> 60 s x 294,912 / 30,720 = 576 s
    assert checking_estimate_s(60.0, 30_720, 294_912, 6_144) == pytest.approx(576.0)
    # a space smaller than a round: its own size, 12 back after 2 s -> 2 s
    assert checking_estimate_s(2.0, 12, 12, 6_144) == pytest.approx(2.0)


def _write(tmp: Path) -> Path:
    path = tmp / "p.yaml"
    path.write_text(GENERIC + TWELVE)
    return path


@pytest.fixture
def ten_s_each(monkeypatch):
    """Every candidate simulated takes 10 s (injected: nothing is simulated, no report), on a
    4-core machine; the list holds one entry per candidate."""
    timed: list[object] = []

    def run_point(task):
        timed.append(task)
        return PointResult("k", "ok", None, {}, None, 10.0)

    monkeypatch.setattr(run_module, "run_point", run_point)
    monkeypatch.setattr(run_module, "cores", lambda: 4)
    return timed


@pytest.fixture
def large(monkeypatch, ten_s_each):
    """TWELVE (2 x 2 x 3 = 12 candidates) searched as a large space is: checked on the
    workers, 6 positions a chunk (2 chunks, one each on --workers 2: a first round of all 12,
    so the estimate is the time injected for the first batch back, whatever comes in it);
    each candidate simulated takes 10 s (`ten_s_each`, injected: nothing is simulated)."""
    monkeypatch.setattr(run_module, "LARGE", 0)
    monkeypatch.setattr(chunks, "CHUNK", 6)
    monkeypatch.setattr(run_module, "CHUNK", 6)

    def check_takes(seconds: float) -> None:
        calls: list[float] = []

        def now() -> float:  # the check starts at 0 s; every later reading is `seconds`
            calls.append(seconds)
            return 0.0 if len(calls) == 1 else seconds

        monkeypatch.setattr(checking, "now", now)

    return check_takes


def test_a_check_over_the_limit_is_refused_before_any_candidate_is_simulated(
    tmp_path, cli, large, ten_s_each
):
    large(1000.0)  # 1000 s for all 12 (a first round): 1000 s x 12 / 12 = 1000 s = 16.7 min
    path = _write(tmp_path)
    code, _, err = cli("plan", path, "--workers", "2", "--time-limit", "5 min")
    assert code == 2, err
    assert len(ten_s_each) == 0  # nothing simulated
    assert (
        "search space too large: checking its 12 candidates against the inventory would take "
        "about 16.7 min on its own"
    ) in err
    assert "before any is simulated, over --time-limit 5.0 min" in err
    # the limit checks 12 x 300 s / 1000 s = 3.6 -> 3 candidates: the suggested section cuts
    # the widest key first (recompute 3 -> 2: 8), then optimizer 2 -> 1 (dropped: 4), then
    # master (dropped: 2), leaving recompute's first two
    assert (
        "this one has 2 candidates: plan: {training.recompute: [none, selective]}; or raise "
        "--time-limit to well over 16.7 min"
    ) in err
    assert "of the best bounds" not in err  # refused before the sample


def test_the_check_s_time_counts_against_the_limit_at_the_simulation_s_estimate(
    tmp_path, cli, large, ten_s_each
):
    # the check takes 10 s (under the limit); no result holds (injected: no report), so every
    # one of the 12 is sampled: 12 x 10 s = 120 s of simulation, 0 left. 120 s alone is under
    # the limit of 125 s; after the 10 s check, 130 s (2.2 min) is over it
    large(10.0)
    path = _write(tmp_path)
    code, _, err = cli("plan", path, "--workers", "2", "--time-limit", "125 s")
    assert code == 2, err
    assert len(ten_s_each) == 12
    assert (
        "12 candidates fit and their bounds leave 0 that could rank, about 2.0 min of "
        "simulation after 10.000 s of checking, over --time-limit 2.1 min"
    ) in err
    assert "or raise --time-limit to about 2.2 min" in err
