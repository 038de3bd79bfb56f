"""--time-limit bounds the whole of `tiersim plan`, a large space's check against the inventory
included (tiersim.plan.checking): a check that alone would take over the limit is refused as
its first chunks time it, before minutes of checking and before any candidate is simulated,
and the check's time counts against the limit at the simulation's estimate; a simulation still
running when the limit passes is stopped (tiersim.plan.simulating), and a large space's rest
is priced from a sample spread over it. No clock is read: the check's time, the command's
and each candidate's are injected."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_plan_input import GENERIC, TWELVE

from tiersim.plan import checking, chunks, simulating
from tiersim.plan import run as run_module
from tiersim.plan.checking import checking_estimate_s
from tiersim.sweep import execute
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


@pytest.fixture
def pools(monkeypatch):
    """The worker processes and folder of every local pool as it closes (each pool's own)."""
    closed: list[tuple[list, str]] = []
    close = execute.LocalPool.close

    def recording_close(self, stop=False):
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        closed.append((processes, self.folder))
        close(self, stop)

    monkeypatch.setattr(execute.LocalPool, "close", recording_close)
    return closed


def test_a_search_past_the_limit_while_simulating_stops_and_is_refused(
    tmp_path, cli, monkeypatch, pools
):
    # TWELVE: 2 x 2 x 3 = 12 candidates, 5 sampled here (really simulated: the sample's
    # estimate is far under the default 10 min), the other 7 simulated on 2 workers. The
    # injected clock reads 0 s as the command starts and as the pool starts, then 700 s
    # (11.7 min): over the 10.0 min limit at the first batch of results back
    readings: list[float] = []

    def now() -> float:
        readings.append(0.0 if len(readings) < 2 else 700.0)
        return readings[-1]

    monkeypatch.setattr(simulating, "now", now)
    path = _write(tmp_path)
    code, out, err = cli("plan", path, "--workers", "2")
    assert code == 2, err
    assert out == ""  # no plan from a search that did not finish
    said = re.search(
        r"search space too large: stopped at --time-limit 10\.0 min after 11\.7 min, with "
        r"(\d) of the 7 candidates left after the sample settled \((\d) simulated, the "
        r"others pruned by bounds\); no plan is given from a search that did not finish",
        err,
    )
    assert said, err
    settled, simulated = int(said[1]), int(said[2])
    assert 1 <= simulated <= settled < 7  # stopped before the end
    # at the rate so far: 700 s for `settled`, so 700 + 700 x (7 - settled) / settled more;
    # the section of about the share got through: 12 x settled / 7 candidates
    whole = 700.0 + 700.0 * (7 - settled) / settled
    assert f"raise --time-limit to over about {whole / 60:.1f} min (the rate so far)" in err
    assert "Traceback" not in err
    # the pool that simulated them: its workers ended, its folder of outcomes removed
    ((processes, folder),) = pools
    assert len(processes) == 2
    assert all(not p.is_alive() for p in processes)
    assert not Path(folder).exists()


def test_a_large_space_s_rest_is_priced_from_a_sample_spread_over_it(monkeypatch):
    # 20 candidates left after the best bounds' sample, best bound first, 10 layer passes
    # each: the first 4 take 0.1 s (the cheap ones the best bounds are), the other 16 take
    # 1.0 s. Spread over them, 5 positions: round(i x 19 / 4) = 0, 5, 10, 14, 19, taking
    # 0.1 + 4 x 1.0 = 4.1 s for 50 passes: 0.082 s a pass. The other 15 (150 passes):
    # 150 x 0.082 = 12.3 s, over 2 workers at once (--workers 2 on 4 cores): 6.15 s. Their
    # own times: 3 x 0.1 + 12 x 1.0 = 12.3 s, the same; priced from the cheap 4 alone
    # (0.01 s a pass) it would be 150 x 0.01 / 2 = 0.75 s, 8.2x short.
    left = list(range(20))
    kept = [SimpleNamespace(passes=10, cost=0.1 if i < 4 else 1.0, wear_floor_s=0) for i in left]
    pruned = SimpleNamespace(kept=kept, task=lambda c: c)
    monkeypatch.setattr(
        run_module, "run_point", lambda c: PointResult("k", "ok", None, {}, None, c.cost)
    )
    monkeypatch.setattr(run_module, "cores", lambda: 4)
    sampled: dict[int, PointResult] = {}
    options = run_module.PlanOptions(workers=2)
    spread_out, rest, estimate_s = run_module.sample_left(pruned, left, sampled, options)
    assert spread_out == [0, 5, 10, 14, 19] == sorted(sampled)
    assert rest == [i for i in left if i not in (0, 5, 10, 14, 19)]
    assert estimate_s == pytest.approx(6.15)
