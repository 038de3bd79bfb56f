"""A checkpoint run resumed from the plain run's state mid-step (tiersim.engine.resume) is the
run simulated from time 0, record for record and to the bit: every op's start and end, each
step's end and occupancy integrals, each tier's occupancy, every channel's busy spans, the
event counts. The plain run it watched is the run without a watch, to the bit too.

Cases: the shipped scenarios with a checkpoint, async (the run measured apart: one step with
its checkpoint) and blocking (two steps, the first checkpointing), collectives on their
channels and through the network (issue-order sharing), and random small scenarios."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from engine_helpers import scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_properties import build_raw, random_raw

from tiersim.config.load import load_scenario
from tiersim.engine import resume
from tiersim.engine.core import Engine, RunLog, run_engine
from tiersim.engine.periods import Occupancies
from tiersim.engine.schedule_sharing import Schedules
from tiersim.engine.simulate import prepare
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
APART, ALONE = (1, frozenset({0})), (2, frozenset({0}))  # the two checkpoint runs asked for
ASYNC, BLOCKING = ["checkpoint.mode=async"], ["checkpoint.mode=blocking"]


def records(engine: Engine, log: RunLog) -> dict:
    """Everything a finished run's figures are read from (tiersim.engine.metrics)."""
    return {
        "start": list(log.start),
        "end": list(log.end),
        "step_end": list(log.step_end),
        "step_left": list(log.step_left),
        "snapshots": log.snapshots,
        "events": log.events,
        "wakeups": engine.net.wakeups,
        "occupancy": {
            t: (o.current, o.peak, o.low, o.integral, o.last) for t, o in engine.occupancy.items()
        },
        "busy": engine.net.busy.intervals,
    }


def both_ways(s, ahead: tuple[int, frozenset[int]]) -> tuple[resume.Watch, dict, dict]:
    """The plain one-step run watched for the checkpoint run `ahead`, and that run resumed
    and from time 0 (each checked against the unwatched plain run first)."""
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    schedules = Schedules(res, setup.wl, setup.depth)
    plain = schedules.get(1)
    longer = schedules.get(*ahead)
    topo, baseline = setup.topo, setup.baseline
    watch = resume.Watch.of(plain, longer)
    assert watch is not None
    engine, log, _ = watch.run(res, topo, baseline, Occupancies())
    unwatched = run_engine(res, topo, plain, baseline, Occupancies())
    assert records(engine, log) == records(*unwatched[:2])
    fresh = records(*run_engine(res, topo, longer, baseline)[:2])
    if watch.resumed is None:
        return watch, fresh, fresh
    return watch, records(*resume.go_on(watch.resumed)[:2]), fresh


CASES = {
    "default, async": ("default.yaml", [], APART),
    "default, blocking": ("default.yaml", BLOCKING, ALONE),
    "default, async, issue-order sharing": (
        "default.yaml",
        ["simulation.link_sharing=issue_order"],
        APART,
    ),
    "70B ZeRO-3 NVMe, blocking": (
        "llama2-70b-zero3-nvme.yaml",
        ["training.grad_accumulation=4"],
        ALONE,
    ),
    "70B ZeRO-3 NVMe, async": (
        "llama2-70b-zero3-nvme.yaml",
        ["training.grad_accumulation=4", *ASYNC],
        APART,
    ),
    "HBF optimizer state, async": (
        "hbf-optimizer-state.yaml",
        ["model.layers=4", "training.grad_accumulation=4"],
        APART,
    ),
    "HBF optimizer state, blocking": (
        "hbf-optimizer-state.yaml",
        ["model.layers=4", "training.grad_accumulation=4", *BLOCKING],
        ALONE,
    ),
    "ZeRO-Offload 10B, CPU optimizer": ("zero-offload-10b-dgx2.yaml", [], ALONE),
    "GPT-3 175B, a pipeline stage's collectives": ("gpt3-175b-tp-pp.yaml", BLOCKING, ALONE),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_checkpoint_run_is_the_run_from_time_0(case):
    name, overrides, ahead = CASES[case]
    watch, resumed, fresh = both_ways(load_scenario(SCENARIOS / name, overrides).scenario, ahead)
    assert resumed == fresh
    # it went on from mid-step: the state was taken after events of the plain run
    assert watch.resumed is not None
    assert watch.resumed.env.now > 0


@pytest.mark.parametrize("case", ["default, async", "70B ZeRO-3 NVMe, blocking"])
def test_the_events_carried_over_come_in_their_order_before_every_later_one(case):
    """At one instant SimPy runs events in the order they were scheduled (their ids): the
    events carried over keep theirs among themselves, below every id the resumed run gives."""
    name, overrides, ahead = CASES[case]
    s = load_scenario(SCENARIOS / name, overrides).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    schedules = Schedules(res, setup.wl, setup.depth)
    plain, longer = schedules.get(1), schedules.get(*ahead)
    watch = resume.Watch.of(plain, longer)
    seen = []
    copy = resume._transplant

    def transplant(a, b, w):
        seen.append(sorted((at, p, eid) for at, p, eid, _ in a.env._queue))
        return copy(a, b, w)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resume, "_transplant", transplant)
        watch.run(res, setup.topo, setup.baseline, Occupancies())
    queue = watch.resumed.env._queue
    carried = sorted((at, p, eid) for at, p, eid, _ in queue)
    assert [(at, p) for at, p, _ in carried] == [(at, p) for at, p, _ in seen[0]]
    # each id moved by the same amount: the same order among them
    assert len({new[2] - old[2] for new, old in zip(carried, seen[0], strict=True)}) == 1
    assert max(e for *_, e in carried) < next(watch.resumed.env._eid)


def test_ordered_sharing_is_not_resumed():
    """Transfers that wait on closures (`ordered` link sharing) are not carried over: the
    checkpoint run is simulated from time 0."""
    s = load_scenario(SCENARIOS / "default.yaml", ["simulation.link_sharing=ordered"]).scenario
    watch, resumed, fresh = both_ways(s, APART)
    assert watch.resumed is None and resumed == fresh


def test_a_candidate_that_could_start_at_once_is_not_watched():
    """An extra op waiting only for ops that may end at once (here: none) leaves nothing of
    the plain run to go on from."""
    s = load_scenario(SCENARIOS / "default.yaml", []).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    schedules = Schedules(res, setup.wl, setup.depth)
    plain, longer = schedules.get(1), schedules.get(*APART)
    first = len(plain.ops)
    assert resume.Watch.of(plain, longer) is not None
    ops = list(longer.ops)
    ops[first] = dataclasses.replace(ops[first], deps=())
    assert resume.Watch.of(plain, dataclasses.replace(longer, ops=ops)) is None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_raw,
    st.sampled_from(["async", "blocking"]),
    st.sampled_from(["fair", "issue_order"]),
)
def test_random_checkpoint_runs_resumed_are_the_runs_from_time_0(p, mode, sharing):
    raw = build_raw({**p, "step": "synchronous"})
    raw["checkpoint"] = {"every_steps": 10, "mode": mode, "target": "nvme"}
    raw["simulation"] = {"link_sharing": sharing}
    s = scenario(raw)
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    schedules = Schedules(res, setup.wl, setup.depth)
    plain = schedules.get(1)
    longer = schedules.get(*(APART if mode == "async" else ALONE))
    watch = resume.Watch.of(plain, longer)
    fresh = records(*run_engine(res, setup.topo, longer, setup.baseline)[:2])
    if watch is None:
        return
    engine, log, _ = watch.run(res, setup.topo, setup.baseline, Occupancies())
    assert records(engine, log) == records(*run_engine(res, setup.topo, plain, setup.baseline)[:2])
    if watch.resumed is not None:
        assert records(*resume.go_on(watch.resumed)[:2]) == fresh
