"""The one run an interleaved point is extrapolated from, sized by the pairs it keeps clear of
its two measured periods (tiersim.engine.margins, issue 36): where nothing is fetched, the
first micro-batch's backward visits before them and one pair after, not 2·v pairs before and
a whole period after. The shorter run gives every figure the longer one gave, to round-off
(1e-12 of each figure, or of the step for a figure near zero), and what the full simulation of
every micro-batch gives (1e-9, as tests/test_steady.py holds every extrapolation), on the
shipped interleaved scenarios and on random interleaved shapes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.engine import steady
from tiersim.engine.margins import fetches, margins
from tiersim.runner import report_for
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "scenarios" / "published"
# every shipped interleaved scenario whose stage fetches nothing (all resident)
RESIDENT_INTERLEAVED = [
    PUBLISHED / f"{name}.yaml"
    for name in (
        "korthikanti2022-175b-selective-sp",
        "korthikanti2022-175b-full-recompute",
        "korthikanti2022-530b-selective-sp",
        "korthikanti2022-530b-full-recompute",
        "narayanan2021-76.1b",
        "narayanan2021-145.6b",
        "narayanan2021-310.1b",
        "narayanan2021-529.6b",
        "nemo2407-gpt3-175b-128gpus",
        "nemo2407-gpt3-175b-512gpus",
        "nemo2407-llama2-13b-16gpus",
        "nemo2407-llama2-70b-64gpus",
        "nemo2407-llama3-70b-64gpus",
    )
] + [ROOT / "scenarios" / "deepseek-v3-pp16-vp2.yaml"]
ROUND_OFF = 1e-12  # of a figure (or of the step, for a figure near zero)
FULL = 1e-9  # tests/test_steady.py's REL: extrapolated against all micro-batches simulated


def kept_before_this_round(res: Any) -> tuple[int, int]:
    """The pairs every run kept before issue 36's fourteenth round: two micro-batches
    before the periods and one after without interleaving; interleaved, 2·v visits' pairs
    before and a whole period, p·v pairs, after."""
    par = res.execution.parallel
    v = par.virtual_pipeline
    return (2, 1) if v == 1 else (2 * v, par.pipeline * v)


def apart(a: Any, b: Any, rel: float, step_s: float, path: str = "") -> list[str]:
    """Every figure of report `b` further from `a`'s than `rel` of it (or of the step),
    the simulator's own (`sim`: what was simulated, its events) left out."""
    if isinstance(a, dict):
        keys = (a.keys() | b.keys()) - {"sim"}
        return [d for k in sorted(keys) for d in apart(a.get(k), b.get(k), rel, step_s, k)]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for x, y in zip(a, b, strict=True) for d in apart(x, y, rel, step_s, path)]
    if isinstance(a, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return [] if a == b else [f"{path}: {a!r} -> {b!r}"]
    close = math.isclose(a, b, rel_tol=rel, abs_tol=rel * step_s)
    return [] if close else [f"{path}: {a!r} -> {b!r}"]


def three_ways(path: Path, overrides: list[str], monkeypatch) -> tuple[dict, dict, dict]:
    """The report from the run sized by `margins`, by the margins kept before, and with every
    micro-batch simulated."""
    scenario = load_scenario(path, overrides)
    now = report_for(scenario)
    with monkeypatch.context() as patch:
        patch.setattr(steady, "margins", kept_before_this_round)
        before = report_for(scenario)
    full = report_for(load_scenario(path, [*overrides, "simulation.steady_state=full"]))
    return now, before, full


def test_the_pairs_kept_by_hand():
    # 530B stage 0: p = 35, v = 3, nothing fetched. The first micro-batch's backward visits
    # are pairs 0, 35 and 70: 71 pairs before, one after. Its warm-up is 2·(35 - 1) +
    # (3 - 1)·35 = 138 visits, so n·3 >= 138 + 2·35·3 + 71 + 1 = 420: n = 140 (a multiple of
    # the period, 35, as 280 is), where 2·3 pairs before and 105 after needed n·3 >= 138 +
    # 210 + 6 + 105 = 459: n = 175.
    res = resolve(load_scenario(PUBLISHED / "korthikanti2022-530b-selective-sp.yaml").scenario)
    assert not fetches(res)
    assert margins(res) == (71, 1)
    assert steady.samples(res, 0) == (70, 105, 140)
    # 175B: p = 8, v = 3; warm-up 2·7 + 2·8 = 30 visits; n·3 >= 30 + 48 + 17 + 1 = 96: 32
    res = resolve(load_scenario(PUBLISHED / "korthikanti2022-175b-selective-sp.yaml").scenario)
    assert margins(res) == (17, 1)
    assert steady.samples(res, 0) == (16, 24, 32)
    # 1F1B (1T): two micro-batches before, one after, as before
    res = resolve(load_scenario(PUBLISHED / "korthikanti2022-1t-selective-sp.yaml").scenario)
    assert margins(res) == (2, 1)
    # weights homed in DRAM are fetched `depth` uses ahead: 2·v before, a period after
    fetched = ["parallel.virtual_pipeline=3", "model.layers=24", "placement.weights=dram"]
    res = resolve(load_scenario(ROOT / "scenarios" / "gpt3-175b-tp-pp.yaml", fetched).scenario)
    assert fetches(res)
    assert margins(res) == (6, 24)


@pytest.mark.parametrize("path", RESIDENT_INTERLEAVED, ids=lambda p: p.stem)
def test_a_shipped_interleaved_point_is_the_longer_runs_to_round_off(path, monkeypatch):
    now, before, full = three_ways(path, [], monkeypatch)
    assert now["sim"]["steady_state"] == before["sim"]["steady_state"] == "extrapolated"
    shorter, longer = (
        now["sim"]["micro_batches_simulated"],
        before["sim"]["micro_batches_simulated"],
    )
    assert shorter[0] < longer[0]
    step_s = full["step"]["time_s"]
    assert apart(before, now, ROUND_OFF, step_s) == []
    assert apart(full, now, FULL, step_s) == []


BASE = PUBLISHED / "korthikanti2022-175b-selective-sp.yaml"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(2, 6),
    st.integers(2, 4),
    st.integers(1, 2),
    st.sampled_from(["selective", "full"]),
    st.booleans(),
    st.data(),
)
def test_random_interleaved_shapes_are_the_longer_runs_and_the_full_simulation(
    p, v, per_chunk, recompute, sequence, data
):
    # Korthikanti's 175B layer (resident, Megatron) on p stages of v chunks, `per_chunk`
    # layers a chunk, with enough micro-batches for the run before this round (n·v >= the
    # warm-up + (3·p + 2)·v) to be shorter than the step
    warmup = 2 * (p - 1) + (v - 1) * p
    least = -(-(warmup + (3 * p + 2) * v) // v)  # ceil
    m = p * data.draw(st.integers(-(-least // p) + 1, -(-least // p) + 3))
    overrides = [
        f"parallel.pipeline={p}",
        f"parallel.virtual_pipeline={v}",
        f"model.layers={p * v * per_chunk}",
        f"training.grad_accumulation={m}",
        f"training.recompute={recompute}",
        f"parallel.sequence={str(sequence).lower()}",
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        now, before, full = three_ways(BASE, overrides, monkeypatch)
    assert now["sim"]["steady_state"] == before["sim"]["steady_state"] == "extrapolated"
    step_s = full["step"]["time_s"]
    assert apart(before, now, ROUND_OFF, step_s) == []
    assert apart(full, now, FULL, step_s) == []
