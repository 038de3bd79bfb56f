"""An async checkpoint measured apart (tiersim.engine.checkpoint_apart): one run of the plain
step and one of the step with its checkpoint, instead of warm-up, measured and trailing steps
on each of three samples; the same figures as those multi-step runs.

The multi-step path is what `steady.checkpoint_apart` False gives (every async checkpoint
before issue 36). Its figures and the one-run path's are the same arithmetic up to the
checkpoint's first move, then differ by round-off: the goldens' 1e-12 relative, a stall that
is 0 there exactly 0 here, every byte and peak equal.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_properties import build_raw, random_raw
from test_golden import differences

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart, durable, steady
from tiersim.engine.core import Engine
from tiersim.report.sim_text import checkpoint_run_apart
from tiersim.runner import report_for, simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
# an HBF budget the step holds: no wear remedy simulated (each at thousands of micro-batches,
# both ways), nothing compared here depends on it
DAY = ["budget.hbf.lifetime=1 day"]
# the shipped scenarios with an async checkpoint, and shipped blocking ones made async; at 64
# micro-batches where as shipped the samples would cost more than the step (all simulated)
CASES = {
    "default": (SCENARIOS / "default.yaml", []),
    "llama2-7b-hbf-optimizer": (SCENARIOS / "llama2-7b-hbf-optimizer.yaml", []),
    "gpt3-175b-tp-pp": (SCENARIOS / "gpt3-175b-tp-pp.yaml", []),
    "hbf-optimizer-state, 4 layers, 64 micro-batches": (
        SCENARIOS / "hbf-optimizer-state.yaml",
        ["model.layers=4", "training.grad_accumulation=64"],
    ),
    "llama2-70b-zero3-nvme async, 64 micro-batches (a stall)": (
        SCENARIOS / "llama2-70b-zero3-nvme.yaml",
        ["checkpoint.mode=async", "training.grad_accumulation=64"],
    ),
    # the drain (23.6 s at 0.5 GB/s) longer than two steps (8.8 s each): its excess stalls
    "default every 2 steps, a slow drive": (
        SCENARIOS / "default.yaml",
        ["checkpoint.every_steps=2", "hardware.tiers.nvme.write_bandwidth=0.5 GB/s", *DAY],
    ),
    "default, master weights on DRAM": (
        SCENARIOS / "default.yaml",
        ["placement.master=dram", *DAY],
    ),
}
FALLS_BACK = {"default, master weights on DRAM"}


def within(want: Any, got: Any, noise_s: float, step_s: float, path: str = "") -> list[str]:
    """Where `got` differs from `want`: seconds by more than `noise_s`, shares of the step by
    more than `noise_s` / `step_s`, other numbers by 1e-12 relative, anything else at all."""
    if isinstance(want, dict):
        if want.keys() != got.keys():
            return [f"{path}: keys {sorted(want.keys() ^ got.keys())}"]
        return [d for k in want for d in within(want[k], got[k], noise_s, step_s, f"{path}.{k}")]
    if isinstance(want, list):
        if len(want) != len(got):
            return [f"{path}: {len(got)} items (expected {len(want)})"]
        pairs = zip(want, got, strict=True)
        return [d for i, (w, g) in enumerate(pairs) for d in within(w, g, noise_s, step_s, path)]
    if isinstance(want, bool) or not isinstance(want, int | float):
        return [] if want == got else [f"{path}: {got!r} (expected {want!r})"]
    if isinstance(want, int) and isinstance(got, int):  # bytes, counts: exactly
        return [] if want == got else [f"{path}: {got!r} (expected {want!r})"]
    floor = noise_s if path.endswith("_s") else noise_s / step_s
    if not math.isclose(want, got, rel_tol=1e-12, abs_tol=floor):
        return [f"{path}: {got!r} (expected {want!r})"]
    return []


@pytest.fixture
def engines(monkeypatch) -> collections.Counter:
    """engines["runs"]: the engine runs since the test began (each run, from step 0 or going
    on from another, makes one Engine)."""
    counts: collections.Counter = collections.Counter()
    made = Engine.__init__

    def counted(self, *args, **kwargs):
        counts["runs"] += 1
        made(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "__init__", counted)
    return counts


def test_a_durable_checkpoint_point_is_two_engine_runs(engines, monkeypatch):
    path = SCENARIOS / "default.yaml"
    without = simulate(load_scenario(path, ["checkpoint.every_steps=null"]).scenario)
    assert engines["runs"] == 1  # the plain step's one run of 5 micro-batches
    engines.clear()
    point = simulate(load_scenario(path).scenario)
    # the same run alone: the step with the checkpoint's moves worked out beside it in closed
    # form (tiersim.engine.closed_copy); with that refused, a run of it simulated
    assert engines["runs"] == 1
    engines.clear()
    closed = checkpoint_apart.closed_copy
    monkeypatch.setattr(checkpoint_apart, "closed_copy", lambda *args: "refused")
    assert simulate(load_scenario(path).scenario).checkpoint.write_s == pytest.approx(
        point.checkpoint.write_s, rel=1e-12
    )
    assert engines["runs"] == 2
    monkeypatch.setattr(checkpoint_apart, "closed_copy", closed)
    assert point.micro_batches_simulated == without.micro_batches_simulated == (5,)
    assert point.steps_simulated == 1
    assert point.time_s == without.time_s  # the plain step is the one without a checkpoint
    engines.clear()
    monkeypatch.setattr(steady, "checkpoint_apart", lambda res: False)
    simulate(load_scenario(path).scenario)
    # before: per sample (3, 4, 5 micro-batches) the warm-up step, the measured and trailing
    # steps gone on from it, the checkpoint run gone on from the warm-up, a longer baseline
    assert engines["runs"] == 3 * 4


@pytest.mark.parametrize("name", list(CASES))
def test_the_checkpoint_apart_reports_what_the_multi_step_runs_do(name, monkeypatch):
    path, overrides = CASES[name]
    apart = report_for(load_scenario(path, overrides))
    measured_apart = apart["sim"]["steps_simulated"] == 1
    monkeypatch.setattr(steady, "checkpoint_apart", lambda res: False)
    multi = report_for(load_scenario(path, overrides))
    # a class homed on the staging tier: its drain holds its next update, so the checkpoint
    # is measured over the steps after it, as before (the one-run attempt falls back)
    assert measured_apart == (name not in FALLS_BACK)
    # the run's text says the separate checkpoint run where, and only where, there was one
    assert checkpoint_run_apart(apart) == measured_apart and not checkpoint_run_apart(multi)
    # how it was simulated differs (events, samples, steps); every figure is the same
    sim_apart, sim_multi = apart.pop("sim"), multi.pop("sim")
    assert sim_apart["steady_state"] == sim_multi["steady_state"] == "extrapolated"
    if not overrides:  # a shipped scenario: to the goldens' 1e-12 relative
        assert differences(multi, apart) == []
    else:  # within the round-off of the runs (tiersim.engine.steady: E x eps x the clock)
        step_s = multi["step"]["time_s"]
        noise_s = sim_multi["events"] * sys.float_info.epsilon * step_s * 3
        assert within(multi, apart, noise_s, step_s) == []
    stall = multi["checkpoint"]["stall_s"]
    if stall == 0:
        assert apart["checkpoint"]["stall_s"] == 0  # hidden: exactly, not to round-off
    else:
        assert apart["checkpoint"]["stall_s"] > 0


def test_a_blocking_checkpoint_needs_one_step_after_it(engines, monkeypatch):
    # between independent steps the next step's GPU stream waits for the whole copy: from the
    # step after that on, steps are plain again, so its figures are those of a run with as
    # many trailing steps as the copy's length in steps (2 for the 70B's), to round-off
    path = SCENARIOS / "llama2-70b-zero3-nvme.yaml"
    overrides = ["training.grad_accumulation=64"]
    one = report_for(load_scenario(path, overrides))
    monkeypatch.setattr(durable, "checkpoint_stands_alone", lambda res: False)
    engines.clear()
    more = report_for(load_scenario(path, overrides))
    assert engines["runs"] >= 2
    sim_one, sim_more = one.pop("sim"), more.pop("sim")
    assert sim_one == sim_more  # the plain run's account: the same
    step_s = more["step"]["time_s"]
    noise_s = sim_more["events"] * sys.float_info.epsilon * step_s * 3
    assert within(more, one, noise_s, step_s) == []
    assert one["checkpoint"]["stall_s"] > 0


EXAMPLES = 20  # about 1 in 5 measured apart (the rest fall back); 300 and 150 were run once


def _fields(result) -> dict:
    """A StepResult's fields as plain data, how it was simulated (wall time, events, steps
    and micro-batches simulated, the checkpoint's round-off bound) left out."""
    out = dataclasses.asdict(result)
    how_simulated = ("wall_s", "events", "steps_simulated", "micro_batches_simulated", "trace")
    for how in (*how_simulated, "steady_state", "steady_state_why"):
        out.pop(how, None)
    if out.get("checkpoint"):  # its round-off bound, the steps its drain outlasted: not reported
        out["checkpoint"].pop("round_off_s")
        out["checkpoint"].pop("drain_steps")
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_raw, st.sampled_from([2, 10, 1000]), st.sampled_from(["fair", "issue_order", "ordered"])
)
def test_random_async_checkpoints_apart_report_the_multi_step_runs(p, every, sharing):
    raw = build_raw({**p, "step": "synchronous"})
    raw["training"]["grad_accumulation"] = 16  # samples of 3, 4 and 5: extrapolated
    raw["checkpoint"] = {"every_steps": every, "mode": "async", "target": "nvme"}
    raw["simulation"] = {"link_sharing": sharing}
    apart = simulate(scenario(raw))
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(steady, "checkpoint_apart", lambda res: False)
        multi = simulate(scenario(raw))
    # the figures, not how they were reached: the multi-step samples can fall back to the
    # full simulation (their checkpoint's bytes differing by a sample) where one run measured
    # apart extrapolates; both must give the full step's figures
    if multi.steady_state == "extrapolated":
        assert apart.steady_state == "extrapolated"
    # within the multi-step runs' round-off (tiersim.engine.steady: E x eps x the clock)
    noise_s = multi.events * sys.float_info.epsilon * multi.time_s * 3
    assert within(_fields(multi), _fields(apart), noise_s, multi.time_s) == []
    if multi.checkpoint.stall_s == 0:
        assert apart.checkpoint.stall_s == 0
