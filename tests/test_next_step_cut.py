"""The step after a blocking checkpoint's copy built only to the plain step's `reach`
(tiersim.engine.step_after_copy, `Schedules.cut`; issue 36, docs/speed.md's thirty-sixth
round): the ops built are the ones the whole build makes, op for op; the rest, taken from
the plain step, is the whole build's next step op for op (what each op does, what it waits
for in its step; beyond it only ops before the step), each op of it waiting for the step's
first GPU-stream op through its step's ops; and `NextStep.of` answers the same from the cut
as from the whole schedule. The whole build and the cut come from separate builders.

The figures of a point taken this way against the checkpoint run simulated in full are
tests/test_step_after_copy.py's (whose runs now take the cut).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine.schedule_sharing import Schedules
from tiersim.engine.simulate import prepare
from tiersim.engine.step_after_copy import NextStep, reach
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
BLOCKING = ["checkpoint.mode=blocking", "checkpoint.every_steps=100"]
CASES = {
    # the point of the target, at fewer micro-batches (its ZeRO-3 gathers, each
    # waiting for the update before the step, the first ones beside the copy)
    "70B ZeRO-3 NVMe": ("llama2-70b-zero3-nvme.yaml", ["training.grad_accumulation=3"]),
    "default, blocking": ("default.yaml", [*BLOCKING, "model.layers=4"]),
    # the optimizer state on another tier (the GPU's): the next step's first fetches cross
    # PCIe beside the copy, and host accumulation waits on the step before
    "FSDP2 CPU offload, optimizer on the GPU": (
        "fsdp2-cpu-offload-llama2-7b.yaml",
        [*BLOCKING, "placement.optimizer=hbm", "checkpoint.target=dram", "model.layers=4"],
    ),
}
AHEAD = (2, frozenset({0}))  # the checkpoint run: the step with its checkpoint, the next one
# what makes an op run as it does: every field but its step, deps, role and label
RUNS_AS = ("kind", "duration", "nbytes", "src", "dst", "alloc", "free", "resource", "latency")


@functools.cache  # built once a case for the tests below (none changes them)
def _schedules(name: str) -> tuple:
    """(the plain step, the checkpoint run cut at the plain step's reach, the checkpoint
    run built whole), the cut and the whole from separate builders."""
    path, extra = CASES[name]
    res = resolve(load_scenario(SCENARIOS / path, extra).scenario)
    setup = prepare(res, build_inventory(res))
    cutting = Schedules(res, setup.wl, setup.depth)
    plain = cutting.get(1)
    cut = cutting.cut(*AHEAD, reach(plain.ops))
    whole_builder = Schedules(res, setup.wl, setup.depth)
    whole_builder.get(1)
    return plain, cut, whole_builder.get(*AHEAD)


def _waits_for_first_gpu_op(ops: list, first: int) -> set[int]:
    """The next-step ops (from `first`) that wait for the step's first GPU-stream op,
    itself or through ops of the step: a walk over each op's deps."""
    gpu = next(i for i in range(first, len(ops)) if ops[i].kind.stream == "gpu")
    found = {gpu}
    for i in range(gpu + 1, len(ops)):
        if any(d in found for d in ops[i].deps):
            found.add(i)
    return found


@pytest.mark.parametrize("name", list(CASES))
def test_the_cut_next_step_is_the_whole_one(name):
    plain, cut, whole = _schedules(name)
    n = len(plain.ops)
    first = next(i for i, op in enumerate(whole.ops) if op.step == 1)
    assert len(whole.ops) == first + n  # the next step as long as the plain one
    built = len(cut.ops) - first
    assert 0 < built < n / 10  # a few ops of the next step built, not its thousands
    # the ops built: the whole build's, field for field (deps, labels and frees too)
    assert cut.ops == whole.ops[: first + built]
    # the next step: the plain step's ops, each waiting for its twin's ops of the step
    # moved to the next, and beyond them only for ops before the step
    for j, op in enumerate(whole.ops[first:]):
        twin = plain.ops[j]
        assert [getattr(op, f) for f in RUNS_AS] == [getattr(twin, f) for f in RUNS_AS], j
        assert tuple(d - first for d in op.deps if d >= first) == twin.deps, j
    # every op past the cut waits for the next step's first GPU-stream op through its step
    waiting = _waits_for_first_gpu_op(whole.ops, first)
    assert set(range(first + built, len(whole.ops))) <= waiting
    # and the cut's last op built is that op or one that does not wait for it: the cut is
    # no longer than it must be
    assert first + built - 1 == min(waiting) or first + built - 1 not in waiting


@pytest.mark.parametrize("name", list(CASES))
def test_the_next_step_from_the_cut_is_the_one_from_the_whole(name):
    plain, cut, whole = _schedules(name)
    from_cut, from_whole = NextStep.of(plain, cut), NextStep.of(plain, whole)
    assert from_whole is not None and from_cut is not None
    assert from_cut.beside == from_whole.beside and from_cut.gpu == from_whole.gpu
    assert from_cut.plain == from_whole.plain == len(plain.ops)
    assert from_cut.head.ops == from_whole.head.ops  # the head run's ops, field for field


def test_a_cut_unlike_the_plain_step_is_not_taken():
    """A next-step op built unlike its twin (longer, or waiting for a further op of its
    step), or a cut one op short of the plain step's reach: refused."""
    plain, cut, _ = _schedules("70B ZeRO-3 NVMe")
    assert NextStep.of(plain, cut) is not None
    last = len(cut.ops) - 1
    op = cut.ops[last]
    for changed in (
        dataclasses.replace(op, duration=op.duration + 1e-3),
        dataclasses.replace(op, deps=(*op.deps, last - 1)),
    ):
        ops = [*cut.ops[:last], changed]
        assert NextStep.of(plain, dataclasses.replace(cut, ops=ops)) is None
    assert NextStep.of(plain, dataclasses.replace(cut, ops=cut.ops[:last])) is None
