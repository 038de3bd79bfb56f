"""Schedules shared between a scenario's runs are the ones built from scratch, op for op."""

import pytest
from conftest import SCENARIOS

from tiersim.config.load import load_scenario
from tiersim.engine.schedule import ScheduleBuilder, build_schedule
from tiersim.engine.schedule_sharing import Schedules
from tiersim.engine.simulate import prepare
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("hbf-optimizer-state.yaml", ["training.grad_accumulation=4"]),  # async, DRAM staging
        ("llama2-70b-zero3-nvme.yaml", ["training.grad_accumulation=2"]),  # blocking, ZeRO-3
        ("gpt3-175b-tp-pp.yaml", []),  # pipeline: bubbles, syncs
    ],
)
def test_shared_schedules_match_fresh_builds(name, overrides):
    s = load_scenario(str(SCENARIOS / name), overrides).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    measured = s.simulation.warmup_steps

    def fresh(steps, marks=frozenset()):
        return build_schedule(res, setup.wl, steps, setup.depth, marks)

    # the order simulate asks in: the plain run, a longer one, then one checkpointing
    shared = Schedules(res, setup.wl, setup.depth, fork_at=measured)
    asked = [
        (measured + 2, frozenset()),
        (measured + 4, frozenset()),
        (measured + 4, frozenset({measured})),
        # every step checkpointing shares nothing; asked again, the plain run is built anew
        (measured + 2, frozenset(range(measured + 2))),
        (measured + 3, frozenset()),
        (measured + 2, frozenset()),  # shorter than the one built last: built anew
    ]
    got = []
    for steps, marks in asked:
        got.append(shared.get(steps, marks))
        assert got[-1] == fresh(steps, marks)
    # building on never changes a schedule already handed out (ops shared between runs are
    # copied before a later step moves a free out of them)
    for (steps, marks), schedule in zip(asked, got, strict=True):
        assert schedule == fresh(steps, marks)


def test_a_fork_copies_a_shared_op_before_changing_it():
    s = load_scenario(str(SCENARIOS / "hbf-optimizer-state.yaml"), []).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    builder = ScheduleBuilder(res, setup.wl, setup.depth)
    builder.extend(1)
    handed_out = builder.schedule(1)
    twin = builder.fork()
    ops, twin_ops = builder.ops, twin.ops
    i = next(k for k, op in enumerate(twin_ops.ops) if op.free)
    tier, nbytes = twin_ops.ops[i].free[0]
    before = ops.ops[i].free
    twin_ops.free_after(i, "somewhere", 7)
    twin_ops.move_free(i, i, tier, nbytes)  # removed, then added at the end
    assert twin_ops.ops[i].free == (*before[1:], ("somewhere", 7), (tier, nbytes))
    assert ops.ops[i].free == before and handed_out.ops[i].free == before
    ops.free_after(i, "elsewhere", 9)  # the original copies too: the schedule handed out
    assert handed_out.ops[i].free == before and ops.ops[i].free == (*before, ("elsewhere", 9))
    # each phase forked its own state: the twin's readiness is a copy, not the same lists
    assert twin.ready.weights == builder.ready.weights
    assert twin.ready.weights is not builder.ready.weights


@pytest.mark.parametrize(
    ("name", "overrides", "marks"),
    [
        ("llama2-70b-zero3-nvme.yaml", ["training.grad_accumulation=2"], {0}),  # blocking
        ("hbf-optimizer-state.yaml", ["training.grad_accumulation=4"], {0}),  # async
        ("hbf-optimizer-state.yaml", ["training.grad_accumulation=4"], {0, 1, 2}),  # every step
        ("gpt3-175b-tp-pp.yaml", ["checkpoint.mode=blocking"], {1}),  # a later first mark
    ],
)
def test_a_checkpoint_after_the_plain_runs_last_step_goes_on_from_its_builder(
    name, overrides, marks
):
    """A checkpoint measured on one step (steps independent): the plain run built the steps
    up to the checkpointed one, and the checkpoint run's schedule goes on from that builder
    (the checkpoint phase, then the steps after it) instead of building them again: the
    same schedule as built from scratch, op for op, and its plain steps' ops the plain run's
    own objects (shared, not built again)."""
    s = load_scenario(str(SCENARIOS / name), overrides).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    first = min(marks)
    shared = Schedules(res, setup.wl, setup.depth, fork_at=first)
    plain = shared.get(first + 1)
    steps = max(marks) + 2
    checkpointed = shared.get(steps, frozenset(marks))
    assert checkpointed == build_schedule(res, setup.wl, steps, setup.depth, frozenset(marks))
    # the plain steps before the checkpoint phase are the very ops the plain run had
    before = len(plain.ops) - 1  # the last may be copied to move a free out of it
    assert all(a is b for a, b in zip(plain.ops[:before], checkpointed.ops, strict=False))
    assert plain == build_schedule(res, setup.wl, first + 1, setup.depth)
    # asked again, nothing is kept to go on from: built anew, the same
    assert shared.get(steps, frozenset(marks)) == checkpointed


def test_a_fork_at_step_0_is_a_new_builder_not_a_fork(monkeypatch):
    """Checkpoints from step 0 on (steps independent): no builder is forked before any step
    is built (its fork would be a new builder, which the checkpoint run gets instead), and
    every schedule is still the one built from scratch."""
    s = load_scenario(
        str(SCENARIOS / "llama2-70b-zero3-nvme.yaml"), ["training.grad_accumulation=2"]
    ).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    forks = []
    real_fork = ScheduleBuilder.fork
    monkeypatch.setattr(ScheduleBuilder, "fork", lambda b: forks.append(b) or real_fork(b))
    shared = Schedules(res, setup.wl, setup.depth, fork_at=0)
    for steps, marks in [(2, frozenset()), (2, frozenset({0, 1})), (1, frozenset())]:
        assert shared.get(steps, marks) == build_schedule(res, setup.wl, steps, setup.depth, marks)
    assert forks == []  # the plain builder was never forked: two steps built, not the mark's one


def test_a_fork_of_the_passes_shares_their_facts_and_copies_their_state():
    """TrainingPasses' attributes are its FACTS (worked out from the context, shared by a
    fork) or its state (forked): a new attribute must be one or the other. The facts are not
    changed by building steps (equal to a new builder's), so sharing them is sound."""
    from tiersim.engine.schedule_passes import FACTS

    s = load_scenario(
        str(SCENARIOS / "fsdp2-cpu-offload-llama2-7b.yaml"), ["training.grad_accumulation=2"]
    ).scenario
    res = resolve(s)
    setup = prepare(res, build_inventory(resolve(s)))
    builder = ScheduleBuilder(res, setup.wl, setup.depth)
    state = {"ops", "ready", "uses", "use_units", "kept", "swap", "order_starts", "in_flight"}
    state |= {"bucket"}  # DeepSpeed's gradients waiting for their bucket (engine/bucket_flush.py)
    state |= {"hpz"}  # ZeRO++ hpZ's secondary partition writes pending (engine/hpz_offload.py)
    assert set(vars(builder.passes)) == set(FACTS.split()) | state
    builder.extend(2)
    fresh = ScheduleBuilder(res, setup.wl, setup.depth).passes
    twin = builder.fork()
    for name in FACTS.split():
        assert getattr(builder.passes, name) == getattr(fresh, name), name
        assert getattr(twin.passes, name) is getattr(builder.passes, name), name
    for name in state - {"ops", "ready"}:
        mine, theirs = getattr(twin.passes, name), getattr(builder.passes, name)
        assert mine is not theirs, name
    assert twin.passes.uses == builder.passes.uses and twin.passes.kept == builder.passes.kept
    assert twin.passes.ops is twin.ops and twin.passes.ready is twin.ready
    twin.extend(3)  # the twin builds on as a fresh builder would
    assert twin.schedule(3) == build_schedule(res, setup.wl, 3, setup.depth)
