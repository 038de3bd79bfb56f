"""A durable checkpoint measured at less cost (issue 36, docs/speed.md "Seventh round" and
"Eighth round") gives the figures the earlier path gave, to the bit: every figure of the
simulated step and of its checkpoint, on async and blocking checkpoints to DRAM, NVMe and HBF,
one every step included.

The earlier path is run here, its figures not copied: the same simulation with what this
round changed put back as it was (`put_back`):
- the async checkpoint measured apart ran its step from time 0 (now resumed from the plain
  run where its first checkpoint op may start: `simulate._ahead`);
- the checkpoint's ops were found by passes over every op (`metrics.of_role` now picks them
  once, for its write window, bytes and in-flight time);
- the next step's first uses were read from every op of the plain step, not only from those
  starting before the last late drain ends (`checkpoint_apart._first_uses`);
- a resumed run's dependency graph was built from its whole schedule (`resume._graph` now
  takes the plain run's over);
- (eighth round) each flow registered planned the next wake-up over every flow in the
  network (`FlowNetwork._plan_wake` now compares only the new flow with the plan made at the
  same instant, where nothing else changed since); a wake-up brought the flows' bytes up to
  date, split the landed ones off, set the new rates and planned the next wake-up in four
  passes over the flows (now two: `flowwalks.split_landed` advances them, `rated_soonest` sets the
  rates as it plans).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart, durable, flows, metrics, resume, step_after_copy
from tiersim.engine import simulate as engine_simulate
from tiersim.engine.graph import dependency_graph
from tiersim.engine.ops import OpKind, Role
from tiersim.runner import simulate

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
DEFAULT, NVME_70B = SCENARIOS / "default.yaml", SCENARIOS / "llama2-70b-zero3-nvme.yaml"
CASES = {
    "default: async to NVMe (measured apart)": (DEFAULT, []),
    "default: async to DRAM": (DEFAULT, ["checkpoint.target=dram"]),
    "default: async to HBF": (DEFAULT, ["checkpoint.target=hbf"]),
    "default: async every step": (DEFAULT, ["checkpoint.every_steps=1"]),
    "default: blocking to NVMe": (DEFAULT, ["checkpoint.mode=blocking"]),
    "default: blocking to DRAM": (DEFAULT, ["checkpoint.mode=blocking", "checkpoint.target=dram"]),
    "default: blocking every step to HBF": (
        DEFAULT,
        ["checkpoint.mode=blocking", "checkpoint.every_steps=1", "checkpoint.target=hbf"],
    ),
    "70B ZeRO-3 NVMe: blocking (the copy resumed mid-step)": (
        NVME_70B,
        ["training.grad_accumulation=64"],
    ),
    "70B ZeRO-3 NVMe: async, a stall": (
        NVME_70B,
        ["checkpoint.mode=async", "training.grad_accumulation=64"],
    ),
    "HBF optimizer state, 4 layers: async, staged on DRAM": (
        SCENARIOS / "hbf-optimizer-state.yaml",
        ["model.layers=4", "training.grad_accumulation=64"],
    ),
}


def _every_op(ops, log, role):
    """What the passes read before `metrics.of_role` picked a role's ops: every op (each
    pass kept the role's itself)."""
    return ops, log.start, log.end


def _windows_over_every_op(rows):
    """`durable._checkpoint_windows` as it was: a pass over every op (`rows`: every op, as
    `_every_op` gives them), each checked for its role."""
    windows = {}
    for op, op_start, op_end in zip(*rows, strict=True):
        if op.role is Role.CHECKPOINT and op.kind is OpKind.MOVE:
            start, end = windows.get(op.step, (math.inf, -math.inf))
            windows[op.step] = (min(start, op_start), max(end, op_end))
    return windows


def put_back(monkeypatch) -> None:
    """What this round changed put back as it was (module docstring), while `monkeypatch`
    (or its context) holds."""
    ahead, first_uses = engine_simulate._ahead, checkpoint_apart._first_uses

    def all_first_uses(topo, run, wanted, crossed, limit):
        return first_uses(topo, run, wanted, crossed, math.inf)

    monkeypatch.setattr(
        engine_simulate, "_ahead", lambda res, steps, apart: ahead(res, steps, False)
    )
    monkeypatch.setattr(durable, "of_role", _every_op)
    monkeypatch.setattr(metrics, "of_role", _every_op)
    monkeypatch.setattr(durable, "_checkpoint_windows", _windows_over_every_op)
    monkeypatch.setattr(checkpoint_apart, "_first_uses", all_first_uses)
    monkeypatch.setattr(resume, "_graph", lambda a, b, watch: b.graph()[0])
    put_back_flow_walks(monkeypatch)


def put_back_flow_walks(monkeypatch) -> None:
    """The flow network's walks as they were before the eighth round (module docstring)."""
    monkeypatch.setattr(flows.FlowNetwork, "_plan_wake", _plan_wake_walking_every_flow)
    monkeypatch.setattr(flows, "split_landed", _split_after_a_pass_advancing)


_PLAN_WAKE, _SPLIT = flows.FlowNetwork._plan_wake, flows.split_landed


def _plan_wake_walking_every_flow(self, now, added=None, rates=None):
    """`FlowNetwork._plan_wake` as it was: the rates set in a pass of their own, then a walk
    over every flow, whatever was added."""
    if rates is not None:
        for f, rate in zip(self.flows, rates, strict=True):
            f.rate = rate
    _PLAN_WAKE(self, now)


def _split_after_a_pass_advancing(flows_, now, which, last):
    """`flows.split_landed` as it was called: every flow brought up to now in a pass of its own
    (`FlowNetwork._advance`), then split with nothing left to move."""
    for f in flows_:
        rate = f.rate
        if rate:
            since = f.begin if f.begin > last else last
            if now > since:
                f.remaining -= rate * (now - since)
    return _SPLIT(flows_, now, which, now)


def copy_resumed(monkeypatch) -> None:
    """The blocking copy's checkpoint run resumed mid-step and simulated with the whole next
    step, as before the next step was taken from the plain one (tiersim.engine.step_after_copy,
    tests/test_step_after_copy.py), and an async copy's checkpoint run resumed and simulated,
    as before it was worked out beside the plain run in closed form (tiersim.engine.
    closed_copy, tests/test_copy_queues.py): what the tests of the resumed run read."""
    monkeypatch.setattr(step_after_copy.NextStep, "of", classmethod(lambda cls, *schedules: None))
    monkeypatch.setattr(engine_simulate, "may_close", lambda *args: None)
    monkeypatch.setattr(checkpoint_apart, "closed_copy", lambda *args: "simulated, as before")


def _counted(monkeypatch) -> list:
    """The resumed runs gone on with (resume.go_on), counted."""
    seen: list = []
    go_on = resume.go_on

    def counted(engine):
        seen.append(engine)
        return go_on(engine)

    monkeypatch.setattr(resume, "go_on", counted)
    return seen


def _simulated(path: Path, extra: list[str]):
    result = simulate(load_scenario(path, extra).scenario)
    return dataclasses.replace(result, wall_s=0.0)  # the only figure that is not the model's


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_figures_as_the_earlier_path(name, monkeypatch):
    new = _simulated(*CASES[name])
    with monkeypatch.context() as m:
        put_back(m)
        old = _simulated(*CASES[name])
    assert new.checkpoint is not None
    assert new.checkpoint == old.checkpoint
    assert new == old


def test_the_async_checkpoint_measured_apart_is_resumed(monkeypatch):
    """The default scenario's checkpoint run goes on from its plain run's state (one resumed
    run); the earlier path ran it from time 0 (none)."""
    path, extra = CASES["default: async to NVMe (measured apart)"]
    copy_resumed(monkeypatch)
    seen = _counted(monkeypatch)
    simulate(load_scenario(path, extra).scenario)
    assert len(seen) == 1
    ahead = engine_simulate._ahead
    monkeypatch.setattr(
        engine_simulate, "_ahead", lambda res, steps, apart: ahead(res, steps, False)
    )
    seen.clear()
    simulate(load_scenario(path, extra).scenario)
    assert seen == []


@pytest.mark.parametrize(
    "name",
    [
        "default: async to NVMe (measured apart)",
        "70B ZeRO-3 NVMe: blocking (the copy resumed mid-step)",
    ],
)
def test_a_resumed_runs_graph_is_the_one_built_from_its_schedule(name, monkeypatch):
    """The resumed engine's dependency graph, taken over from the plain run's, is the one
    `graph.dependency_graph` builds from its whole schedule: every op's dependents, and
    how many ops each extra op waits for (the plain ops' counts are the plain run's as they
    stand at the copy, `a.waiting`, not the counts before any op ended)."""
    compared: list[bool] = []
    taken_over = resume._graph

    def checked(a, b, watch):
        n, live = len(a.schedule.ops), list(a.waiting)
        waiting = list(taken_over(a, b, watch))
        built_waiting, built_dependents = dependency_graph(b.schedule.ops, b.topo, b.ordered)
        compared.append(
            (waiting[:n], waiting[n:], b.dependents) == (live, built_waiting[n:], built_dependents)
        )
        return b.waiting

    monkeypatch.setattr(resume, "_graph", checked)
    copy_resumed(monkeypatch)
    simulate(load_scenario(*CASES[name]).scenario)
    assert compared == [True]


def test_a_flow_registered_is_planned_as_a_walk_over_every_flow_plans_it(monkeypatch):
    """The 70B blocking copy registers its 245 copies at one instant, each latent (its route's
    latency before it): each one's plan, compared with the plan made for the flow before it,
    is the soonest change and its flow that a walk over every flow finds, at every plan (the
    rates set in the walk included)."""
    plan_wake, walked = flows.FlowNetwork._plan_wake, []

    def checked(self, now, added=None, rates=None):
        planned = self._planned
        quick = (
            added is not None and planned is not None and planned[:2] == (now, len(self.flows) - 1)
        )
        plan_wake(self, now, added, rates)
        soonest, which = flows.soonest_change(self.flows, now)
        walked.append((quick, self._planned[2] == soonest and self._planned[3] is which))

    monkeypatch.setattr(flows.FlowNetwork, "_plan_wake", checked)
    copy_resumed(monkeypatch)
    simulate(
        load_scenario(*CASES["70B ZeRO-3 NVMe: blocking (the copy resumed mid-step)"]).scenario
    )
    assert all(same for _, same in walked)
    assert sum(quick for quick, _ in walked) >= 244  # each copy after the first, at least


TIMED_KINDS = (OpKind.GPU, OpKind.CPU, OpKind.IDLE, OpKind.JOIN)  # on a timer (ops.py)


def _waited_for(ops, deps, memo: dict) -> frozenset:
    """Written out here, apart from tiersim.engine.resume: the ops that take time (a timer
    of positive duration, a transfer of some bytes) that an op waiting for `deps` waits for,
    directly or through ops that take none, by recursion over each dep (`memo`: by op)."""
    found: set = set()
    for d in deps:
        if d not in memo:
            op = ops[d]
            takes_time = op.duration > 0 if op.kind in TIMED_KINDS else op.nbytes > 0
            memo[d] = frozenset({d}) if takes_time else _waited_for(ops, op.deps, memo)
        found |= memo[d]
    return frozenset(found)


@pytest.mark.parametrize(
    "name",
    [
        "default: async to NVMe (measured apart)",
        "default: blocking to NVMe",
        "70B ZeRO-3 NVMe: blocking (the copy resumed mid-step)",
        "70B ZeRO-3 NVMe: async, a stall",
    ],
)
def test_a_watch_waits_for_what_each_candidate_waits_for(name, monkeypatch):
    """(Ninth round) `Watch.of` walks each dep of the candidates once a watch (the 70B
    blocking copy's candidates share the update's barrier, 325 ops deep) instead of once a
    candidate: what it waits for is, for each extra op waiting only for plain ops, the ops
    that take time it waits for, as the recursion above finds them; and the run is resumed."""
    of, watches = resume.Watch.of, []

    def kept(plain, longer):
        watch = of(plain, longer)
        watches.append((plain, longer, watch))
        return watch

    monkeypatch.setattr(resume.Watch, "of", kept)
    copy_resumed(monkeypatch)
    simulate(load_scenario(*CASES[name]).scenario)
    assert [watch is not None for _, _, watch in watches] == [True]
    plain, longer, watch = watches[0]
    n, ops, memo = len(plain.ops), longer.ops, {}
    candidates = [j for j in range(n, len(ops)) if max(ops[j].deps) < n]
    assert candidates
    assert set(watch._needs) == {_waited_for(plain.ops, ops[j].deps, memo) for j in candidates}
