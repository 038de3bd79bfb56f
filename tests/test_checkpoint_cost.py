"""A durable checkpoint measured at less cost (issue 36, docs/speed.md "Sixth round") gives the
figures the earlier path gave, to the bit: every figure of the simulated step and of its
checkpoint, on async and blocking checkpoints to DRAM, NVMe and HBF, one every step included.

The earlier path is run here, not copied: the same simulation with what this round changed
put back as it was (`put_back`):
- the async checkpoint measured apart ran its step from time 0 (now resumed from the plain
  run where its first checkpoint op may start: `simulate._ahead`);
- the checkpoint's ops were found by a pass over every op in Python (`metrics.of_role`), a
  window's ops likewise (`metrics.overlapping`);
- the next step's first uses were read from every op of the plain step, not only from those
  starting before the last late drain ends (`checkpoint_apart._first_uses`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import checkpoint_apart, durable, metrics, resume
from tiersim.engine import simulate as engine_simulate
from tiersim.engine.graph import dependency_graph
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


def _of_role_loop(ops, log, role):
    """`metrics.of_role` as a pass over every op in Python."""
    keep = [i for i, op in enumerate(ops) if op.role is role]
    return [ops[i] for i in keep], [log.start[i] for i in keep], [log.end[i] for i in keep]


def put_back(monkeypatch) -> None:
    """What this round changed put back as it was (module docstring), while `monkeypatch`
    (or its context) holds."""
    ahead, overlapping = engine_simulate._ahead, metrics.overlapping
    first_uses = checkpoint_apart._first_uses

    def overlapping_loop(engine, window):
        log, ops = engine.log, engine.schedule.ops
        if window is None or log.rising:  # (unchanged: the whole run, or by bisection)
            return overlapping(engine, window)
        lo, hi = window
        keep = [
            i for i, (s, e) in enumerate(zip(log.start, log.end, strict=True)) if s < hi and e >= lo
        ]
        return [ops[i] for i in keep], [log.start[i] for i in keep], [log.end[i] for i in keep]

    def all_first_uses(topo, run, wanted, crossed, limit):
        return first_uses(topo, run, wanted, crossed, math.inf)

    monkeypatch.setattr(
        engine_simulate, "_ahead", lambda res, steps, apart: ahead(res, steps, False)
    )
    monkeypatch.setattr(metrics, "overlapping", overlapping_loop)
    monkeypatch.setattr(metrics, "of_role", _of_role_loop)
    monkeypatch.setattr(durable, "of_role", _of_role_loop)
    monkeypatch.setattr(checkpoint_apart, "_first_uses", all_first_uses)


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
    `graph.dependency_graph` builds from its whole schedule."""
    compared: list[bool] = []
    taken_over = resume._graph

    def checked(a, b, watch):
        waiting = list(taken_over(a, b, watch))
        built = dependency_graph(b.schedule.ops, b.topo, b.ordered)
        compared.append((waiting, b.dependents) == built)
        return b.waiting

    monkeypatch.setattr(resume, "_graph", checked)
    simulate(load_scenario(*CASES[name]).scenario)
    assert compared == [True]
