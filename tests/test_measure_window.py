"""A window's figures read only the ops that reach into it (`metrics.overlapping`): measured
over many windows of runs with moves, collectives, a pipeline bubble and an optimizer, they
equal what reading every op of the run gives, to the bit."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import metrics
from tiersim.engine.core import run_engine
from tiersim.engine.schedule_sharing import Schedules
from tiersim.engine.simulate import prepare
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
RUNS = {  # offload moves (NVMe, HBF, DRAM), ZeRO-3 gathers, tensor and pipeline collectives
    "llama2-70b-zero3-nvme.yaml": ["model.layers=4", "training.grad_accumulation=6"],
    "default.yaml": ["model.layers=4", "training.grad_accumulation=3"],
    "zero-offload-10b-dgx2.yaml": ["model.layers=4", "training.grad_accumulation=3"],
    "gpt3-175b-tp-pp.yaml": ["training.grad_accumulation=16"],
    # one chain (tiersim.engine.chain): its window found by bisection
    "published/korthikanti2022-175b-selective-sp.yaml": ["training.grad_accumulation=16"],
}


CHAIN = "published/korthikanti2022-175b-selective-sp.yaml"


@pytest.fixture(scope="module", params=sorted(RUNS))
def engine(request):
    return run_of(request.param)


def run_of(name: str):
    res = resolve(load_scenario(ROOT / name, RUNS[name]).scenario)
    setup = prepare(res, build_inventory(res))
    schedule = Schedules(res, setup.wl, setup.depth).get(1)
    return run_engine(res, setup.topo, schedule, setup.baseline)[0]


def windows(engine, count: int, seed: int) -> list[tuple[float, float]]:
    """Random windows over the run, some starting or ending exactly at an op's start or end."""
    rng = random.Random(seed)
    times = sorted(set(engine.log.start) | set(engine.log.end))
    end = times[-1]
    out = []
    for _ in range(count):
        a, b = (rng.choice(times) if rng.random() < 0.5 else rng.uniform(0, end) for _ in "ab")
        lo, hi = min(a, b), max(a, b)
        if hi > lo:
            out.append((lo, hi))
    return [*out, (0.0, end)]


def test_a_window_reads_only_the_ops_that_reach_into_it(engine, monkeypatch):
    every_op = (engine.schedule.ops, engine.log.start, engine.log.end)
    cut = windows(engine, 25, seed=len(every_op[0]))
    got = [metrics.measure(engine, 0, 0, 0, 0.0, window=w) for w in cut]
    kept = [len(metrics.overlapping(engine, w)[0]) for w in cut]
    monkeypatch.setattr(metrics, "overlapping", lambda engine, window: every_op)
    want = [metrics.measure(engine, 0, 0, 0, 0.0, window=w) for w in cut]
    assert got == want
    assert min(kept) < len(every_op[0])  # some window did leave ops out


def test_a_chain_finds_a_window_by_bisection_as_the_scan_does(monkeypatch):
    """A run walked as a chain (its log `rising`: tiersim.engine.chain) finds a window's ops
    by bisection: the same ops, starts and ends as the scan over every op finds."""
    engine = run_of(CHAIN)
    assert engine.log.rising
    cut = windows(engine, 40, seed=7)
    times = sorted(set(engine.log.start) | set(engine.log.end))
    cut += list(itertools.pairwise(times))[::50]  # between neighbouring edges, exactly
    cut += [(-1.0, 0.0), (times[-1], times[-1] + 1.0), (times[5], times[5])]  # none, empty
    got = [metrics.overlapping(engine, w) for w in cut]
    monkeypatch.setattr(engine.log, "rising", False)
    want = [metrics.overlapping(engine, w) for w in cut]
    assert got == want
    assert any(len(rows[0]) == 0 for rows in want) and max(len(r[0]) for r in want) > 100
