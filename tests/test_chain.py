"""A schedule that is one chain, walked without the event loop (tiersim/engine/chain.py),
against the event loop's run of it: the same step to the bit, every figure, on shipped
Table 5 configurations and random small shapes; and what it leaves to the event loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.engine import chain, margins, schedule_shared
from tiersim.engine.core import run_engine
from tiersim.engine.ops import Op, OpKind, Role
from tiersim.engine.periods import Occupancies
from tiersim.engine.schedule import ScheduleBuilder
from tiersim.engine.simulate import prepare, simulate
from tiersim.hardware.resources import NetChannel, Network
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "scenarios" / "published" / "narayanan2021-1.7b.yaml"


def both_ways(scenario, monkeypatch) -> tuple[dict, dict, int]:
    """The step simulated with chains walked and on the event loop alone (wall time out),
    and how many runs were walked."""
    walked = []
    walk = chain.run_chain
    monkeypatch.setattr(chain, "run_chain", lambda engine: walked.append(1) or walk(engine))
    # two periods compared either way: one alone is measured only where a walked chain's ops
    # are shared records (the event loop reads its own; tests/test_one_period.py)
    monkeypatch.setattr(margins, "one_period", lambda *args: False)
    out = []
    for enabled in (True, False):
        monkeypatch.setattr(chain, "ENABLED", enabled)
        result = dataclasses.asdict(simulate(scenario))
        result.pop("wall_s")
        out.append(result)
    return out[0], out[1], len(walked)


@pytest.mark.parametrize(
    "name", ["korthikanti2022-22b-selective-sp", "korthikanti2022-175b-selective-sp"]
)
def test_a_table5_stage_walked_is_the_event_loops_run(name, monkeypatch):
    scenario = load_scenario(ROOT / "scenarios" / "published" / f"{name}.yaml").scenario
    walked, simulated, runs = both_ways(scenario, monkeypatch)
    assert runs >= 1  # the chain was walked, not left to the event loop
    assert walked == simulated  # every figure, events included, to the bit


@settings(max_examples=30, deadline=None)
@given(
    pipeline=st.sampled_from([1, 2, 4]),
    tensor=st.sampled_from([1, 2]),
    micro_batches=st.integers(1, 9),
    recompute=st.sampled_from(["full", "selective", "none"]),
)
def test_random_small_shapes_walked_are_the_event_loops_runs(
    pipeline, tensor, micro_batches, recompute
):
    overrides = [
        "model.layers=8",
        f"parallel.pipeline={pipeline}",
        f"parallel.tensor={tensor}",
        "parallel.data=1",
        f"training.grad_accumulation={micro_batches}",
        f"training.recompute={recompute}",
    ]
    scenario = load_scenario(SMALL, overrides).scenario
    with pytest.MonkeyPatch.context() as monkeypatch:
        walked, simulated, runs = both_ways(scenario, monkeypatch)
    assert runs >= 1
    assert walked == simulated


def engine_of(ops: list[Op], sharing: str = "fair", capacity: float = 1e9) -> SimpleNamespace:
    """What `chain.refusal` reads of an engine: the sharing policy, the network channels'
    capacities, the schedule's ops."""
    simulation = SimpleNamespace(link_sharing=sharing)
    res = SimpleNamespace(execution=SimpleNamespace(simulation=simulation))
    net = SimpleNamespace(capacity={NVLINK: capacity})
    return SimpleNamespace(res=res, net=net, schedule=SimpleNamespace(ops=ops, chain_length=0))


NVLINK = Network(NetChannel.NVLINK)


def gpu(deps: tuple[int, ...]) -> Op:
    return Op(OpKind.GPU, Role.FORWARD, "forward", 0, deps, duration=1.0)


def test_what_is_left_to_the_event_loop_says_why():
    sync = Op(OpKind.SYNC, Role.COLLECTIVE, "tp", 0, (0,), nbytes=8, resource=NVLINK)
    assert chain.refusal(engine_of([gpu(()), sync, gpu((1,))])) is None
    # op 2 waits for op 0 only: it may run beside op 1
    assert "op 2 (forward) does not wait" in chain.refusal(engine_of([gpu(()), sync, gpu((0,))]))
    move = Op(OpKind.MOVE, Role.STATE, "fetch", 0, (0,), nbytes=8, src="dram", dst="hbm")
    assert "moves bytes between tiers" in chain.refusal(engine_of([gpu(()), move]))
    assert "not max-min" in chain.refusal(engine_of([gpu(())], sharing="ordered"))
    assert "no bandwidth" in chain.refusal(engine_of([gpu(()), sync], capacity=0.0))


class Told:
    """A recorder that keeps every call it is told, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def op(self, op: Op, start: float, end: float) -> None:
        self.calls.append((op.label, start, end))

    def memory(self, tier: str, now: float, occupied: float) -> None:
        self.calls.append((tier, now, occupied))


def test_a_trace_of_a_chain_walked_is_told_what_the_event_loop_tells(monkeypatch):
    path = ROOT / "scenarios" / "published" / "korthikanti2022-22b-selective-sp.yaml"
    scenario = load_scenario(path).scenario
    told = []
    for enabled in (True, False):
        monkeypatch.setattr(chain, "ENABLED", enabled)
        recorder = Told()
        simulate(scenario, recorder=recorder)
        told.append(recorder.calls)
    assert len(told[0]) > 100  # every op and occupancy change of the run shown
    assert told[0] == told[1]


BUILT = {  # chains (Table 5, a small pipeline), moves between tiers, a CPU optimizer's stream
    "published/korthikanti2022-22b-selective-sp.yaml": [],
    "published/korthikanti2022-175b-selective-sp.yaml": ["training.grad_accumulation=16"],
    "published/narayanan2021-1.7b.yaml": ["parallel.pipeline=2", "model.layers=8"],
    "default.yaml": ["model.layers=4", "training.grad_accumulation=2"],
    "llama2-70b-zero3-nvme.yaml": ["model.layers=4", "training.grad_accumulation=2"],
    "zero-offload-10b-dgx2.yaml": ["model.layers=4", "training.grad_accumulation=2"],
}


@pytest.mark.parametrize("name", sorted(BUILT))
def test_a_chain_as_built_is_the_chain_the_check_finds(name, monkeypatch):
    """The schedule builder counts the first ops that are one chain as it adds them
    (`Schedule.chain_length`), and `refusal` takes a schedule that is all chain without
    checking it again: the same answer as checking every op, on every run of chains and of
    schedules that are not, and the ops it counts are a chain by that check."""
    check = chain.refusal
    seen = []

    def both(engine):
        built = engine.schedule
        unbuilt = SimpleNamespace(
            **{**vars(engine), "schedule": dataclasses.replace(built, chain_length=0)}
        )
        head = SimpleNamespace(ops=built.ops[: built.chain_length], chain_length=0)
        assert check(SimpleNamespace(**{**vars(engine), "schedule": head})) is None
        answer = check(engine)
        assert answer == check(unbuilt)
        seen.append((answer is None, built.chain_length == len(built.ops)))
        return answer

    monkeypatch.setattr(chain, "refusal", both)
    # each op its own record, deps included (shared records' deps are no op's:
    # tests/test_schedule_shared.py holds them to these)
    monkeypatch.setattr(schedule_shared, "ENABLED", False)
    simulate(load_scenario(ROOT / "scenarios" / name, BUILT[name]).scenario)
    assert seen
    walked = name.startswith("published/")
    assert all(chained == walked and whole == walked for chained, whole in seen)


def runs_both_ways(overrides: list[str], steps: int, recorder) -> list:
    """The 175B stage's run of `steps` steps (each op its own record, so the event loop may
    run it too), walked and on the event loop, each with a recorder `recorder()` makes:
    (engine, log, recorder) each."""
    path = ROOT / "scenarios" / "published" / "korthikanti2022-175b-selective-sp.yaml"
    res = resolve(load_scenario(path, overrides).scenario)
    setup = prepare(res, build_inventory(res))
    schedule = ScheduleBuilder(res, setup.wl, setup.depth, True).build(steps)
    out = []
    for enabled in (True, False):
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setattr(chain, "ENABLED", enabled)
            told = recorder()
            engine, log, _ = run_engine(res, setup.topo, schedule, setup.baseline, told)
            assert chain.walks(engine) is enabled  # walked, then on the event loop
            out.append((engine, log, told))
    return out


def test_occupancy_a_walk_keeps_is_what_its_calls_keep():
    """A walk appends each occupancy change to a recorder's lists where it only keeps them
    (periods.Occupancies with nothing passed on: `kept`), not a call a change: the same
    times and values, tier by tier, as the event loop tells the same recorder by calls,
    and as the walk tells it by calls where it passes each change on (to a trace)."""
    shape = ["training.grad_accumulation=16"]
    kept = [told for _, _, told in runs_both_ways(shape, 1, Occupancies)]
    passed = runs_both_ways(shape, 1, lambda: Occupancies(Told()))
    assert kept[0].kept() is not None and passed[0][2].kept() is None  # the two ways taken
    for told in (kept[1], passed[0][2]):
        assert (kept[0].times, kept[0].values) == (told.times, told.values)
    assert len(kept[0].times["hbm"]) > 100  # each forward's and backward's change


def test_each_step_of_a_walk_ends_at_its_last_op():
    """A walk ends each step at its last op (`chain._step_ends`: where its count of ops left
    would reach none), not by counting down op by op: the same step ends, the same tiers'
    integrals then and every count at none, as the event loop's, over three steps."""
    (_, w_log, _), (_, l_log, _) = runs_both_ways(["training.grad_accumulation=8"], 3, lambda: None)
    assert len(w_log.step_end) == 3 and all(end > 0 for end in w_log.step_end)
    assert w_log.step_end == l_log.step_end
    assert w_log.snapshots == l_log.snapshots
    assert w_log.step_left == l_log.step_left == [0, 0, 0]
    assert w_log.end == l_log.end
    assert w_log.start == l_log.start  # each op's start, copied from the end before it


def test_a_walk_takes_its_ops_a_step_at_a_time():
    """`chain._step_ends`: the stretches a walk takes, each ending one past its step's last
    op (the step's count of ops left reaching none there), in order, the ops after the last
    one (none where the last op ends a step) a stretch of no step (-1); every count at none."""
    ops = [SimpleNamespace(step=s) for s in (0, 0, 1, 0, 1, 1, 2)]  # step 0's last op is op 3
    left = [3, 3, 1]
    assert chain._step_ends(ops, left) == [(4, 0), (6, 1), (7, 2)]
    assert left == [0, 0, 0]
    assert chain._step_ends(ops[:6], [3, 3, 0]) == [(4, 0), (6, 1)]  # no op of step 2
    assert chain._step_ends(ops[:3], [2, 0]) == [(2, 0), (3, -1)]  # step 1's op not counted
    assert chain._step_ends(ops[:2], [2]) == [(2, 0)]  # one step: every op
    assert chain._step_ends([], [0]) == [(0, -1)]  # nothing to walk
