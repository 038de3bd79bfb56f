"""A resident stage's ops as shared records where nobody reads a run's own
(tiersim/engine/schedule_shared.py): made each op's own again (`materialize`), they are the
records the per-op builder makes, every field, deps and labels included; a run from shared
records reports what a run from records does; and nothing that reads an op's deps or label
(the event loop, a trace) is given shared ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tiersim.config.load import load_scenario
from tiersim.engine import margins, schedule_shared
from tiersim.engine.core import Engine
from tiersim.engine.oplist import OpList
from tiersim.engine.ops import OpKind
from tiersim.engine.schedule import ScheduleBuilder, build_schedule
from tiersim.engine.schedule_shared import SharedOp
from tiersim.engine.simulate import prepare, simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "scenarios" / "published"
TABLE5 = [
    f"korthikanti2022-{m}-{r}"
    for m in ("22b", "175b", "530b", "1t")
    for r in ("selective-sp", "full-recompute")
]


def _setup(path: Path, overrides: list[str]):
    res = resolve(load_scenario(path, overrides).scenario)
    return res, prepare(res, build_inventory(res))


def _built(res, setup, steps: int, records: bool, spy: list | None = None):
    """`steps` steps built with or without records, what the build leaves behind; with
    shared records, each made the op's own at the end (`spy`: told each run of shared
    records as it is materialized, the ops before)."""
    builder = ScheduleBuilder(res, setup.wl, setup.depth, records)
    schedule = builder.build(steps)
    if spy is not None:
        spy.append((schedule.records, sum(type(op) is SharedOp for op in builder.ops.ops)))
    builder.ops.own_records()
    passes, ops = builder.passes, builder.ops
    left = (passes.uses, passes.use_units, passes.order_starts, ops.last_on, builder.ready)
    return ops.ops, ops.chain_length, left


CASES = [
    *[(PUBLISHED / f"{name}.yaml", []) for name in TABLE5],
    (PUBLISHED / "smith2022-mtnlg-530b-280nodes.yaml", []),
    (PUBLISHED / "narayanan2021-1.7b.yaml", []),
    # chains that break: overlapped gradient reductions (the last micro-batch's, after
    # shared records), expert- and context-parallel collectives beside the stream
    (PUBLISHED / "nemo2407-llama2-7b-8gpus.yaml", ["model.layers=4"]),
    (PUBLISHED / "ma2025-qwen2.5-1.5b-zero2.yaml", ["model.layers=4"]),
    (ROOT / "scenarios" / "mixtral-8x7b-ep-dgx-h100.yaml", ["model.layers=4"]),
    (ROOT / "scenarios" / "llama3-405b-128k-cp16.yaml", []),
    (ROOT / "scenarios" / "deepseek-v3-pp16-vp2.yaml", []),
    # the chain broken by the update's moves (the master and Adam state homed on HBF)
    (ROOT / "scenarios" / "default.yaml", []),
]


@pytest.mark.parametrize("path, overrides", CASES, ids=[f"{p.stem}" for p, _ in CASES])
def test_shared_records_made_their_own_are_the_records_built(path, overrides, monkeypatch):
    """One step and two (the second step's units wait on the update: the general passes
    make those ops, after the first step's shared records). Shared records are built even
    where the update moves bytes (a builder then chooses its own: the test below), so that
    those made their own at the update's first move are held equal too."""
    monkeypatch.setattr("tiersim.engine.schedule.update_moves", lambda c: False)
    res, setup = _setup(path, overrides)
    for steps in (1, 2):
        spy: list = []
        shared = _built(res, setup, steps, records=False, spy=spy)
        own = _built(res, setup, steps, records=True)
        assert all(type(op) is not SharedOp for op in shared[0])
        assert shared == own  # every op's every field (deps, labels), the chain, the rest


def test_a_table5_step_is_built_of_shared_records_to_its_end():
    """Where the chain holds to the end, the schedule handed out shares its records (and
    says so); where it breaks, every op has its own."""
    for name in TABLE5:
        res, setup = _setup(PUBLISHED / f"{name}.yaml", [])
        spy: list = []
        _built(res, setup, 1, records=False, spy=spy)
        records, shared = spy[0]
        assert records is False and shared > len(setup.wl.units)
    res, setup = _setup(PUBLISHED / "nemo2407-llama2-7b-8gpus.yaml", ["model.layers=4"])
    spy = []
    _built(res, setup, 1, records=False, spy=spy)
    assert spy == [(True, 0)]


# the `what` formats of the update's fetches of state and write-backs (schedule_optimizer)
UPDATE_MOVES = {"fetch {} {}", "write back {} {}", "updated weights {}"}


@pytest.mark.parametrize(
    "path, overrides",
    [CASES[0], CASES[-4], CASES[-1], CASES[-6]],
    ids=["22b-selective", "mixtral", "default", "nemo2407"],
)
def test_own_records_where_the_update_moves(path, overrides):
    """A builder asked for no records builds its own from the start exactly where its
    first step's update moves state between tiers (read from the ops it builds: a move no
    chain walks, after every forward and backward, so each shared record would be made its
    own again), and shared ones elsewhere; either way the same ops."""
    res, setup = _setup(path, overrides)
    builder = ScheduleBuilder(res, setup.wl, setup.depth, records=False)
    chose_own = builder.ops.shared is None
    ops = builder.build(1).ops
    moves = [op for op in ops if op.kind is OpKind.MOVE and op.what[0] in UPDATE_MOVES]
    assert chose_own == bool(moves)
    assert chose_own == (path.stem in ("default", "mixtral-8x7b-ep-dgx-h100"))
    builder.ops.own_records()  # the schedule handed out keeps its shared records
    assert builder.ops.ops == build_schedule(res, setup.wl, 1, setup.depth, records=True).ops


def test_materialized_at_the_break(monkeypatch):
    """An overlapped gradient reduction breaks the chain after shared records were
    appended: they are made their own then, once."""
    calls = []
    real = schedule_shared.materialize

    def counted(ops, entries):
        calls.append(len(entries))
        return real(ops, entries)

    monkeypatch.setattr("tiersim.engine.oplist.materialize", counted)
    res, setup = _setup(PUBLISHED / "nemo2407-llama2-7b-8gpus.yaml", ["model.layers=4"])
    build_schedule(res, setup.wl, 1, setup.depth, records=False)
    assert len(calls) == 1 and calls[0] > 0


def _report(name: str, enabled: bool, monkeypatch) -> str:
    monkeypatch.setattr(schedule_shared, "ENABLED", enabled)
    # two periods compared either way: one period alone is measured only where the ops are
    # shared records (its proof: tests/test_one_period.py holds it against two)
    monkeypatch.setattr(margins, "one_period", lambda *args: False)
    return repr(dataclasses.replace(simulate(load_scenario(name, []).scenario), wall_s=0.0))


@pytest.mark.parametrize(
    "name",
    [*TABLE5, "smith2022-mtnlg-530b-280nodes", "narayanan2021-1.7b", "nemo2407-llama2-7b-8gpus"],
)
def test_a_run_from_shared_records_reports_the_same(name, monkeypatch):
    """Every figure of the step, to the bit (`repr`: 0 and 0.0 told apart)."""
    path = PUBLISHED / f"{name}.yaml"
    assert _report(path, True, monkeypatch) == _report(path, False, monkeypatch)


def test_nothing_that_reads_an_op_is_given_shared_records():
    """A recorder told of each op (a trace) is told the ops' own records; the event loop
    refuses a schedule of shared ones (their deps are no op's)."""
    told = []

    class Told:
        def op(self, op, start, end):
            told.append(op)

        def memory(self, tier, now, occupied):
            pass

    path = PUBLISHED / "korthikanti2022-22b-selective-sp.yaml"
    simulate(load_scenario(path, []).scenario, recorder=Told())
    assert told and all(type(op) is not SharedOp for op in told)
    res, setup = _setup(path, [])
    schedule = build_schedule(res, setup.wl, 1, setup.depth, records=False)
    assert schedule.records is False
    engine = Engine(res, setup.topo, schedule, setup.baseline)
    with pytest.raises(AssertionError, match="shared op records"):
        engine.graph()


def test_an_oplist_with_no_shared_record_has_nothing_to_make_its_own():
    ops = OpList(shared=True)
    ops.own_records()
    assert ops.shared is None and ops.ops == []
