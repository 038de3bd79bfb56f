"""A checkpoint run forked at the measured step reports what simulating it from step 0 does.

The forked path (tiersim.engine.fork, engine/runs.py) goes on from the plain run's warm-up
steps instead of simulating them again; the full re-simulation is the same runs with no
boundary taken as clean (every run from step 0, as before forking). Every shipped scenario
with a checkpoint, in each checkpoint mode and update, and random small ones: every reported
figure equal to 1e-9 relative (the simulator's own counters too: a fork replays no event).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from engine_helpers import scenario, tiny
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_properties import build_raw, random_raw
from test_steady import differences

from tiersim.config.load import load_scenario
from tiersim.config.schema import Scenario
from tiersim.engine import fork, runs, steady
from tiersim.engine.core import run_engine
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import Op, OpKind, Role, Schedule
from tiersim.engine.simulate import simulate
from tiersim.hardware.topology import Topology
from tiersim.runner import report_for
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted(
    p for p in (ROOT / "scenarios" / "published").glob("*.yaml") if p.name != "references.yaml"
)
MODES = {
    "as shipped": [],
    "async": ["checkpoint.mode=async"],
    "blocking": ["checkpoint.mode=blocking"],
    "async every step": ["checkpoint.mode=async", "checkpoint.every_steps=1"],
    "blocking every step": ["checkpoint.mode=blocking", "checkpoint.every_steps=1"],
    "async, pipelined update": ["checkpoint.mode=async", "training.optimizer_step=pipelined"],
}
REL = 1e-9


def _shipped_with(s: Scenario, overrides: list[str]) -> bool:
    """Every `section.key=value` of `overrides` is what `s` has already."""
    pairs = (o.split("=", 1) for o in overrides)
    return all(str(getattr(getattr(s, k.split(".")[0]), k.split(".")[1])) == v for k, v in pairs)


def _cases() -> list[tuple[Path, str]]:
    """Each shipped checkpoint in each mode; a mode that sets only what the scenario ships
    with (async, where it is shipped async) is the scenario as shipped, run once as that."""
    cases = []
    for path in SHIPPED:
        s = load_scenario(path).scenario
        if s.checkpoint_simulated:
            cases += [
                (path, m) for m, sets in MODES.items() if not sets or not _shipped_with(s, sets)
            ]
    return cases


CASES = _cases()
WITH_CHECKPOINT = list(dict.fromkeys(path for path, _ in CASES))


# Fewer layers, the same ops per layer, keep the two simulations of each case short (what is
# compared, the forked run against the run from step 0, is the same whatever the depth): the
# file took 18.6 s of CPU with only hbf-optimizer-state cut to 4 layers, 9.8 s with these at 2
# (load 20, docs/suite-time.md). Under the pipelined update too, since its samples are taken
# later where the first do not repeat (tiersim.engine.later_samples): before, 2 or 4 layers took
# 3-5 times the CPU of the whole depth there (a wear remedy's step of 3,288 micro-batches
# simulated in full, twice).
SHRUNK = ("default", "llama2-7b-hbf-optimizer", "hbf-optimizer-state", "llama2-70b-zero3-nvme")


def _shrunk(path: Path) -> list[str]:
    return ["model.layers=2"] if path.stem in SHRUNK else []


class Forks:
    """Counts the runs that went on from an earlier one."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args, **kwargs):
        self.count += 1
        return fork.go_on(*args, **kwargs)


def forked_and_full(monkeypatch, run):
    """`run()` forked (and how many runs forked), then with every run from step 0; an async
    checkpoint measured over the steps after it, as forks do (not apart from them: that is
    tests/test_checkpoint_apart.py's)."""
    monkeypatch.setattr(steady, "checkpoint_apart", lambda res: False)
    forks = Forks()
    monkeypatch.setattr(runs, "go_on", forks)
    forked = run()
    monkeypatch.setattr(runs, "fork_point", lambda shorter, longer: None)
    full = run()
    monkeypatch.undo()
    return forked, full, forks.count


def test_the_cases_cover_every_shipped_checkpoint():
    names = {p.stem for p in WITH_CHECKPOINT}
    assert {"default", "llama2-70b-zero3-nvme", "hbf-optimizer-state"} <= names


@pytest.mark.parametrize("path, mode", CASES, ids=lambda c: c if isinstance(c, str) else c.stem)
def test_every_shipped_checkpoint_forked_reports_its_full_simulation(path, mode, monkeypatch):
    loaded = lambda: load_scenario(path, [*_shrunk(path), *MODES[mode]])  # noqa: E731
    forked, full, forks = forked_and_full(monkeypatch, lambda: report_for(loaded()))
    assert differences(full, forked, full["step"]["time_s"]) == []
    assert forked["sim"] == full["sim"]  # the same events: none simulated twice or skipped
    s = loaded().scenario
    synchronous = s.training.optimizer_step == "synchronous"
    every_step = s.checkpoint.every_steps == 1
    if s.checkpoint.mode == "async" and synchronous and not every_step:
        # the plain run from its warm-up, and the checkpoint run: a fork that silently
        # stopped happening would pass the comparison above
        assert forks >= 2
    if not synchronous or every_step:
        # the next step's head overlaps the update: no clean boundary; every step
        # checkpointing: the checkpoint run's warm-up is not the plain run's
        assert forks == 0


def _same_result(full, forked) -> list[str]:
    """Every field of two StepResults, numbers to REL (the engine's wall time apart)."""
    a, b = dataclasses.asdict(full), dataclasses.asdict(forked)
    a.pop("wall_s"), b.pop("wall_s")
    return differences(a, b, full.time_s)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_raw,
    st.sampled_from(["async", "blocking"]),
    st.sampled_from([1, 2, 5]),
    st.sampled_from([1, 2]),
    st.sampled_from(["fair", "issue_order", "ordered"]),
)
def test_random_checkpoints_forked_report_their_full_simulation(p, mode, every, warmup, sharing):
    raw = build_raw(p)
    raw["checkpoint"] = {"every_steps": every, "mode": mode, "target": "nvme"}
    raw["simulation"] = {"warmup_steps": warmup, "link_sharing": sharing}
    with pytest.MonkeyPatch.context() as monkeypatch:
        forked, full, _ = forked_and_full(monkeypatch, lambda: simulate(scenario(raw)))
    assert _same_result(full, forked) == []


def test_an_async_checkpoint_forks_and_the_trace_is_the_full_runs(monkeypatch):
    raw = tiny(
        model={"layers": 2, "parameters": 2_000_000_000},
        training={"grad_accumulation": 2},
        placement={"optimizer": "dram", "weights": "dram"},
        checkpoint={"every_steps": 10, "mode": "async", "target": "nvme"},
        simulation={"warmup_steps": 2},
    )
    from tiersim import runner

    forked, full, forks = forked_and_full(
        monkeypatch, lambda: runner.simulate(scenario(raw), record=True)
    )
    assert forks == 3  # the plain run from its warm-up, a longer baseline, the checkpoint
    assert forked.trace == full.trace
    assert _same_result(full, forked) == []


# --- the boundary, on a hand-made schedule ------------------------------------------------


def _schedule(cpu_s: float) -> tuple[Schedule, Schedule]:
    """Step 0: a GPU op of 1 s, a CPU op of `cpu_s` nothing waits for, and the GPU stream's
    end mark; step 1: a GPU op of 1 s after the mark. The first step's schedule and both."""
    ops = OpList()
    ops.add(Op(OpKind.GPU, Role.FORWARD, "fwd", 0, [], duration=1.0))
    ops.add(Op(OpKind.CPU, Role.OPTIMIZER, "cpu", 0, [], duration=cpu_s))
    ops.add(Op(OpKind.IDLE, Role.OPTIMIZER, "step done", 0, []))
    ops.add(Op(OpKind.GPU, Role.FORWARD, "fwd", 1, [], duration=1.0))
    return Schedule(ops.ops[:3], 1, 0, {}), Schedule(ops.ops, 2, 0, {})


def _engine_inputs():
    res = resolve(scenario(tiny()))
    return res, Topology(res.machine), {t: 0 for t in res.machine.tiers}


def test_a_run_goes_on_from_a_clean_boundary_as_the_whole_run_does():
    res, topo, baseline = _engine_inputs()
    first, both = _schedule(cpu_s=0.5)
    assert fork.fork_point(first, both) == 2
    prior, _, _ = run_engine(res, topo, first, baseline)
    assert fork.ended_last(prior, 2)  # the CPU op ended at 0.5 s, the mark at 1 s
    _, log, _ = fork.go_on(res, topo, both, baseline, prior, 2)
    # GPU 0-1 s, CPU 0-0.5 s, the mark at 1 s, step 1's GPU op 1-2 s
    assert (log.start, log.end) == ([0.0, 0.0, 1.0, 1.0], [1.0, 0.5, 1.0, 2.0])
    assert log.step_end == [1.0, 2.0]
    _, whole, _ = run_engine(res, topo, both, baseline)
    assert (log.start, log.end, log.step_end) == (whole.start, whole.end, whole.step_end)


def test_an_op_nothing_waits_for_that_ends_last_is_no_clean_boundary():
    res, topo, baseline = _engine_inputs()
    first, both = _schedule(cpu_s=3.0)  # still running when the mark is reached
    assert fork.fork_point(first, both) == 2  # the schedules allow it ...
    prior, _, _ = run_engine(res, topo, first, baseline)
    assert not fork.ended_last(prior, 2)  # ... the run does not


def test_a_later_op_that_does_not_wait_for_the_last_is_no_clean_boundary():
    first, both = _schedule(cpu_s=0.5)
    # step 1's CPU op waits only for step 0's CPU op: it would start at 0.5 s
    cpu = Op(OpKind.CPU, Role.OPTIMIZER, "cpu", 1, (1,), duration=1.0)
    assert fork.fork_point(first, Schedule([*both.ops, cpu], 2, 0, {})) is None
    # nor does a longer schedule whose first ops differ
    changed = dataclasses.replace(both.ops[0], duration=2.0)
    assert fork.fork_point(first, Schedule([changed, *both.ops[1:]], 2, 0, {})) is None
