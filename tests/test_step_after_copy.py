"""The step after a blocking checkpoint's copy taken from the plain step
(tiersim.engine.step_after_copy, issue 36) gives the figures the checkpoint run simulated in
full gives: every figure of the step and of its checkpoint, field by field.

The full simulation is run here, not copied: the same point with `NextStep.of` answering
None, so the checkpoint run (the copy and the whole next step) is simulated as before
(resumed from the plain run mid-step: tiersim.engine.resume). Write time, bytes, peaks and
in-flight time are the head run's own, so equal to the bit; the stall and each link's busy
time added are sums in another order (the plain step's rest added as one span where the
engine adds each event's delay), so they agree within the round-off the checkpoint run's own
arithmetic can produce (`CheckpointRun.round_off_s`, tiersim.engine.steady.round_off: a run
of E events whose clock reaches T seconds errs by at most E x machine epsilon x T).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.engine import core, step_after_copy
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.simulate import simulate

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
DEFAULT, NVME_70B = SCENARIOS / "default.yaml", SCENARIOS / "llama2-70b-zero3-nvme.yaml"
BLOCKING = ["checkpoint.mode=blocking"]
CASES = {
    # the shipped scenario with a blocking checkpoint, as its golden report runs it
    "70B ZeRO-3 NVMe, as shipped": (NVME_70B, []),
    "70B ZeRO-3 NVMe, 512 micro-batches, to DRAM": (
        NVME_70B,
        ["training.grad_accumulation=512", "checkpoint.target=dram"],
    ),
    "default, blocking to NVMe": (DEFAULT, BLOCKING),
    "default, blocking to HBF": (DEFAULT, [*BLOCKING, "checkpoint.target=hbf"]),
    "GPT-3 175B, a pipeline stage, blocking": (SCENARIOS / "gpt3-175b-tp-pp.yaml", BLOCKING),
    "HBF optimizer state, 4 layers, blocking": (
        SCENARIOS / "hbf-optimizer-state.yaml",
        [*BLOCKING, "model.layers=4", "training.grad_accumulation=64"],
    ),
    # the next step's first fetches cross PCIe beside the copy, as its optimizer state does:
    # the busy time they add before the plain step's cut is not the checkpoint's
    "FSDP2 CPU offload, optimizer state on the GPU, blocking to DRAM": (
        SCENARIOS / "fsdp2-cpu-offload-llama2-7b.yaml",
        [
            *BLOCKING,
            "checkpoint.every_steps=100",
            "placement.optimizer=hbm",
            "checkpoint.target=dram",
        ],
    ),
}
# where the run does not bear the plain step out, the checkpoint run is simulated as before
REFUSED = {
    # an op beside the copy (a parameter fetch from NVMe) still going when the plain step's
    # GPU stream begins: no cut in the plain run
    "ZeRO-Infinity 1T, 4 layers, blocking": (
        SCENARIOS / "zero-infinity-1t-dgx2.yaml",
        [*BLOCKING, "checkpoint.every_steps=100", "model.layers=4"],
    ),
}
EXACT = ("bytes", "write_s", "peak_by_tier", "link_in_flight_s", "link_bytes", "written_by_tier")


def _both(path: Path, extra: list[str], monkeypatch) -> tuple:
    """(taken from the plain step, simulated in full, whether the first took its path,
    the ops of each engine run the first made)."""
    scenario = load_scenario(path, extra).scenario
    taken, engines = [], []
    measure, init = step_after_copy.NextStep.measure, core.Engine.__init__

    def measured(self, *args):
        out = measure(self, *args)
        taken.append(out is not None)
        return out

    def counted(self, res, topo, schedule, *args, **kwargs):
        engines.append(len(schedule.ops))
        init(self, res, topo, schedule, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(step_after_copy.NextStep, "measure", measured)
        m.setattr(core.Engine, "__init__", counted)
        fast = simulate(scenario)
    with monkeypatch.context() as m:
        m.setattr(step_after_copy.NextStep, "of", classmethod(lambda cls, *schedules: None))
        full = simulate(scenario)
    return fast, full, taken, engines


def _same_figures(fast, full) -> None:
    """Every field of the engine's step equal (its wall time aside: the checkpoint's share of
    each step, which the links' figures take, is added above the engine), and of its
    checkpoint: equal, or the stall and the busy time added within the checkpoint run's
    round-off."""
    mine, theirs = dataclasses.asdict(fast), dataclasses.asdict(full)
    mine.pop("wall_s"), theirs.pop("wall_s")
    ck, their_ck = mine.pop("checkpoint"), theirs.pop("checkpoint")
    assert mine == theirs
    if their_ck is None:
        assert ck is None
        return
    noise = their_ck["round_off_s"]
    assert noise > 0
    for key in EXACT:
        assert ck[key] == their_ck[key], key
    assert abs(ck["stall_s"] - their_ck["stall_s"]) <= noise
    assert ck["link_busy_s"].keys() == their_ck["link_busy_s"].keys()
    for link, busy in their_ck["link_busy_s"].items():
        assert abs(ck["link_busy_s"][link] - busy) <= noise, link
    for key in set(ck) - {*EXACT, "stall_s", "link_busy_s", "round_off_s"}:
        assert ck[key] == their_ck[key], key


@pytest.mark.parametrize("name", list(CASES))
def test_the_next_step_from_the_plain_one_is_the_simulated_one(name, monkeypatch):
    fast, full, taken, engines = _both(*CASES[name], monkeypatch)
    assert taken == [True]
    # two engine runs: the plain step, and the head run (the plain step done as one op, the
    # copy and what of the next step runs beside it), not the next step's thousands of ops
    assert len(engines) == 2 and engines[1] < engines[0] / 2
    _same_figures(fast, full)


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_next_step_not_the_plain_one_is_simulated(name, monkeypatch):
    fast, full, taken, _ = _both(*REFUSED[name], monkeypatch)
    assert taken == [False]
    _same_figures(fast, full)


@settings(max_examples=10, deadline=None)
@given(
    mode=st.sampled_from(["blocking", "async"]),
    every=st.sampled_from([1, 2, 7, 1000]),
    target=st.sampled_from(["nvme", "dram", "hbf"]),
)
def test_random_checkpoint_settings_give_the_simulated_figures(mode, every, target):
    # a blocking checkpoint less often than every step takes the plain step's rest; one every
    # step, or an async one, is simulated as before (nothing taken): equal all the same
    extra = [
        f"checkpoint.mode={mode}",
        f"checkpoint.every_steps={every}",
        f"checkpoint.target={target}",
        "model.layers=4",
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, full, taken, _ = _both(DEFAULT, extra, monkeypatch)
    assert taken == ([True] if mode == "blocking" and every != 1 else [])
    _same_figures(fast, full)


def _op(kind: OpKind, deps: tuple[int, ...], step: int = 0, role: Role = Role.FORWARD) -> Op:
    return Op(kind, role, "op", step, deps, duration=1.0)


def test_which_next_step_ops_wait_for_the_copy():
    """By hand, a plain step of four ops: 0 a prefetch (no deps), 1 the GPU's first op
    (waits for 0), 2 an offload after it (waits for 1), 3 a fetch waiting for the prefetch
    alone. In the checkpoint run, after the plain ops 0-3, op 4 is the copy's barrier on the
    GPU stream; the next step's ops are 5-8: 5 waits for the plain step's 3 (before its
    step), 6 for 5 and the barrier 4 (its stream), 7 for 6, 8 for 5. Gated: 6 (the barrier),
    7 (through 6); beside the copy: 5 and 8 (plain indices 0 and 3)."""
    gpu, move = OpKind.GPU, OpKind.MOVE
    mine = [_op(move, ()), _op(gpu, (0,)), _op(move, (1,)), _op(move, (0,))]
    barrier = _op(OpKind.IDLE, (1,), role=Role.CHECKPOINT)
    nxt = [_op(move, (3,), 1), _op(gpu, (5, 4), 1), _op(move, (6,), 1), _op(move, (5,), 1)]
    gated = step_after_copy._gated(mine, [*mine, barrier, *nxt], 5)
    assert list(gated) == [0, 1, 1, 0]
    # an op waiting for another op of its step than its twin does: not the plain step
    other = [*nxt[:3], _op(move, (6,), 1)]
    assert step_after_copy._gated(mine, [*mine, barrier, *other], 5) is None


def test_which_next_step_ops_wait_for_the_copy_two_deps_each():
    """By hand, each op's deps in each order: a plain step of four ops, 0 and 1 with no
    deps, 2 waiting for 0 and 1, 3 for 1. The checkpoint run's ops 0-3 the plain ones, 4
    the copy's barrier, the next step 5-8: 5 waits for the plain 2 then nothing of its
    step, 6 for the barrier before 5 (its twin 1 has no deps: a longer tuple of one),
    7 for 5 and 6 (its twin's 0 and 1), 8 for 6 then the plain 3. Gated: 6 (the barrier),
    7 and 8 (through 6); 5 alone beside the copy."""
    gpu, move = OpKind.GPU, OpKind.MOVE
    mine = [_op(move, ()), _op(gpu, ()), _op(move, (0, 1)), _op(move, (1,))]
    barrier = _op(OpKind.IDLE, (1,), role=Role.CHECKPOINT)
    nxt = [_op(move, (2,), 1), _op(gpu, (4,), 1), _op(move, (5, 6), 1), _op(move, (6, 3), 1)]
    run = [*mine, barrier, *nxt]
    assert list(step_after_copy._gated(mine, run, 5)) == [0, 1, 1, 1]
    # 8 waiting for the barrier second, its step's op first: gated all the same
    assert list(step_after_copy._gated(mine, [*run[:8], _op(move, (6, 4), 1)], 5)) == [0, 1, 1, 1]
    # 8 waiting for the plain 3 beside its twin's 1 (5 + 1 = 6 expected, 7 given), for two
    # ops before its step, for two of its step, or 7 for 6 then 5 (its twin 0 then 1): refused
    for wrong in [(7, 3), (3, 2), (6, 7)]:
        assert step_after_copy._gated(mine, [*run[:8], _op(move, wrong, 1)], 5) is None
    assert step_after_copy._gated(mine, [*run[:7], _op(move, (6, 5), 1), run[8]], 5) is None


def test_a_next_step_op_unlike_its_twin_is_not_taken():
    """The shipped 70B scenario's schedules are taken (`NextStep.of`), and refused where one
    next-step op lasts longer than its plain twin or waits for a further op of its step."""
    from tiersim.engine.schedule_sharing import Schedules
    from tiersim.engine.simulate import prepare
    from tiersim.state.inventory import build_inventory
    from tiersim.state.resolved import resolve

    res = resolve(load_scenario(NVME_70B, ["training.grad_accumulation=3"]).scenario)
    setup = prepare(res, build_inventory(res))
    schedules = Schedules(res, setup.wl, setup.depth, 0)
    plain, longer = schedules.get(1), schedules.get(2, frozenset({0}))
    assert step_after_copy.NextStep.of(plain, longer) is not None
    last = len(longer.ops) - 1  # the next step's last op (its update done)
    op = longer.ops[last]
    for changed in (
        dataclasses.replace(op, duration=op.duration + 1e-3),
        dataclasses.replace(op, deps=(*op.deps, last - 1)),
    ):
        ops = [*longer.ops[:last], changed]
        assert step_after_copy.NextStep.of(plain, dataclasses.replace(longer, ops=ops)) is None


def test_the_plain_runs_cut():
    """By hand: ops beside the copy 0 and 2, the GPU's first op 1. The cut is op 1's start
    (2.0 s) where ops 0 and 2 have ended by then (1.5 and 2.0 s) and op 3 starts no earlier
    (2.5 s); none where op 2 ends after it, or op 3 starts before it."""

    def cut(starts, ends):
        prior = SimpleNamespace(log=SimpleNamespace(start=starts, end=ends))
        return step_after_copy._cut(prior, (0, 2), 1)

    assert cut([0.0, 2.0, 0.5, 2.5], [1.5, 3.0, 2.0, 4.0]) == 2.0
    assert cut([0.0, 2.0, 0.5, 2.5], [1.5, 3.0, 2.1, 4.0]) is None
    assert cut([0.0, 2.0, 0.5, 1.9], [1.5, 3.0, 2.0, 4.0]) is None


def test_the_plain_steps_last_op_ended_last():
    """By hand, four ops: 0 waited for by none (a gradient reduction, say), 1, 2 waiting for
    1, and 3 a zero-time barrier on 2. Op 3 ended last where every op but its ancestors
    ended before it (3.0 s): its dep 2 may end with it (the barrier), and so may op 1 (an
    ancestor: the walk over them); not where op 0 ends with it or after it."""

    def ended_last(ends):
        ops = [_op(OpKind.MOVE, deps) for deps in [(), (), (1,), (2,)]]
        prior = SimpleNamespace(log=SimpleNamespace(end=ends), schedule=SimpleNamespace(ops=ops))
        return step_after_copy._ended_last(prior, 3)

    assert ended_last([1.0, 2.0, 2.5, 3.0])
    assert ended_last([1.0, 2.0, 3.0, 3.0])  # its dep ends with it
    assert ended_last([1.0, 3.0, 3.0, 3.0])  # an ancestor, not a dep: found by the walk
    assert not ended_last([3.0, 2.0, 2.5, 3.0])  # op 0 ends with it
    assert not ended_last([3.5, 2.0, 2.5, 3.0])  # op 0 ends after it


def test_a_blocking_copy_is_the_move_ops_move_builds():
    """The checkpoint phase builds each blocking copy's op itself (a copy to the target,
    waiting for the barrier, allocating nothing there): each is the op OpList.move builds
    from the same arguments, field for field."""
    from tiersim.engine.oplist import OpList
    from tiersim.engine.schedule import build_schedule
    from tiersim.engine.simulate import prepare
    from tiersim.state.inventory import build_inventory
    from tiersim.state.resolved import resolve

    res = resolve(load_scenario(NVME_70B, ["training.grad_accumulation=1"]).scenario)
    setup = prepare(res, build_inventory(res))
    ops = build_schedule(res, setup.wl, 1, setup.depth, frozenset({0})).ops
    copies = [op for op in ops if op.role is Role.CHECKPOINT and op.kind is OpKind.MOVE]
    assert len(copies) == 81 * 3  # 80 layers and the rest: weights, master, optimizer
    for op in copies:
        built = OpList()
        at = built.move(
            op.subject, op.what, 0, op.src, op.dst, op.nbytes, [], False, True, Role.CHECKPOINT
        )
        assert dataclasses.replace(built.ops[at], step=op.step, deps=op.deps) == op


def test_the_read_back_with_one_home_is_the_unit_by_unit_sum():
    """read_back_s takes each class's bytes at once where no unit is homed apart: the same
    seconds as unit by unit, each unit given the scenario's homes as its own (the loop)."""
    from tiersim.engine.durable import read_back_s
    from tiersim.engine.schedule_checkpoint import shares
    from tiersim.engine.simulate import prepare
    from tiersim.state.inventory import build_inventory
    from tiersim.state.placement import homes
    from tiersim.state.resolved import resolve

    res = resolve(load_scenario(NVME_70B, ["training.grad_accumulation=1"]).scenario)
    setup = prepare(res, build_inventory(res))
    home = homes(res.execution.placement, res.machine)
    units = [dataclasses.replace(u, home=dict(home)) for u in setup.wl.units]
    apart = dataclasses.replace(setup, wl=dataclasses.replace(setup.wl, units=units))
    per_class = shares(res, setup.wl.units)
    assert read_back_s(res, setup, per_class) == read_back_s(res, apart, per_class) > 0
