"""An interleaved point extrapolated from one measured period, its repetition proved from how
the schedule is built (tiersim.engine.margins.one_period, issue 36's twenty-first round).

The claim: where a resident stage's forwards and backwards are the builder's shared records,
the step of n + p micro-batches is the step of n with the measured period's ops once more,
right after it (the same ops in the same order, fields and all). Held here by building both
schedules and comparing them op by op; then the reports: one period measured gives what two
periods measured and compared give (to round-off) and what every micro-batch simulated gives
(1e-9, as tests/test_steady.py holds every extrapolation), on Korthikanti's 530B and on
interleaved shapes of varied pipeline, virtual stages and micro-batches; and wherever the
run does not show the proof's two conditions (every op of the period a shared record, each
tier holding the same at its end as at its start) the two-period run is what is reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_steady_margins import FULL, ROUND_OFF, apart

from tiersim.config.load import load_scenario
from tiersim.core.frozen import replaced
from tiersim.engine import margins, steady
from tiersim.engine.periods import Occupancies
from tiersim.engine.schedule import ScheduleBuilder
from tiersim.engine.schedule_shared import SharedOp
from tiersim.engine.simulate import prepare
from tiersim.runner import report_for
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

PUBLISHED = Path(__file__).resolve().parents[1] / "scenarios" / "published"
K530 = PUBLISHED / "korthikanti2022-530b-selective-sp.yaml"
BASE = PUBLISHED / "korthikanti2022-175b-selective-sp.yaml"  # its layer, resident, Megatron


def shape(p: int, v: int, per_chunk: int, m: int, recompute: str, sequence: bool) -> list:
    """Korthikanti's 175B layer on p stages of v chunks, `per_chunk` layers a chunk."""
    return [
        f"parallel.pipeline={p}",
        f"parallel.virtual_pipeline={v}",
        f"model.layers={p * v * per_chunk}",
        f"training.grad_accumulation={m}",
        f"training.recompute={recompute}",
        f"parallel.sequence={str(sequence).lower()}",
    ]


# (p, v, layers a chunk, micro-batches, recompute, sequence parallelism): each long enough
# for the one-period run to be shorter than the step
SHAPES = [
    (2, 2, 1, 16, "selective", True),
    (3, 2, 2, 21, "full", False),
    (4, 3, 1, 32, "selective", False),
    (4, 4, 1, 40, "full", True),
    (5, 2, 1, 40, "selective", True),
    (6, 3, 1, 48, "full", True),
]


def fields(op) -> tuple:
    """What an op does, without its deps (indices: shifted by an inserted period) and its
    label (its micro-batch)."""
    return (
        op.kind, op.role, op.step, op.duration, op.nbytes, op.src, op.dst, tuple(op.alloc),
        tuple(op.free), op.resource, op.latency, op.subject,
    )  # fmt: skip


def built(res, setup, n: int):
    """One step of `n` micro-batches as a run builds it (shared records, none read)."""
    return ScheduleBuilder(res, replaced(setup.wl, micro_batches=n), setup.depth, False).build(1)


def measured_period(res, schedule, n: int) -> tuple[int, int]:
    """The op indices the measured period spans, worked out here: stage 0's warm-up of
    w = 2(p - 1) + (v - 1)p forward visits, then n·v - w pairs (an order entry each of a
    forward and a backward), the last pair kept after (margins), the period of 2·p·v
    entries before it."""
    par = res.execution.parallel
    p, v = par.pipeline, par.virtual_pipeline
    w = 2 * (p - 1) + (v - 1) * p
    third = w + 2 * (n * v - w) - 2
    marks = schedule.order_starts[0]
    return marks[third - 2 * p * v], marks[third]


@pytest.mark.parametrize("args", [None, *SHAPES], ids=lambda a: "530b" if a is None else str(a))
def test_a_period_more_is_the_measured_period_once_more(args):
    path, overrides = (K530, []) if args is None else (BASE, shape(*args))
    res = resolve(load_scenario(path, overrides).scenario)
    setup = prepare(res, build_inventory(res))
    p = res.execution.parallel.pipeline
    n = steady.samples(res, 0)[-1] - p  # the one-period run
    short, long = built(res, setup, n), built(res, setup, n + p)
    lo, hi = measured_period(res, short, n)
    period = short.ops[lo:hi]
    assert period and all(type(op) is SharedOp for op in period)
    expected = [*short.ops[:hi], *period, *short.ops[hi:]]
    assert list(map(fields, long.ops)) == list(map(fields, expected))
    # within one build the copies are the same records (a chunk's list, appended whole)
    assert all(a is b for a, b in zip(long.ops[lo:hi], long.ops[hi : 2 * hi - lo], strict=True))


def two_ways(path: Path, overrides: list[str]) -> tuple[dict, dict, dict]:
    """The report from one measured period, from two (one_period off), and with every
    micro-batch simulated."""
    scenario = load_scenario(path, overrides)
    one = report_for(scenario)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(margins, "one_period", lambda *args: False)
        two = report_for(scenario)
    full = report_for(load_scenario(path, [*overrides, "simulation.steady_state=full"]))
    return one, two, full


@pytest.mark.parametrize("args", [None, *SHAPES], ids=lambda a: "530b" if a is None else str(a))
def test_one_period_is_two_periods_and_the_full_simulation_to_round_off(args):
    path, overrides = (K530, []) if args is None else (BASE, shape(*args))
    one, two, full = two_ways(path, overrides)
    p = load_scenario(path, overrides).scenario.parallel.pipeline
    assert one["sim"]["steady_state"] == two["sim"]["steady_state"] == "extrapolated"
    assert one["sim"]["micro_batches_simulated"][0] == two["sim"]["micro_batches_simulated"][0] - p
    if args is None:  # 530B: 105·3 >= 138 + 105 + 71 + 1 (margins), not 140
        assert one["sim"]["micro_batches_simulated"] == [105]
    step_s = full["step"]["time_s"]
    assert apart(two, one, ROUND_OFF, step_s) == []
    assert apart(full, one, FULL, step_s) == []


def _without_sim(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("sim", "wall_s")}


@pytest.mark.parametrize(
    "patched",
    [
        (steady, "_all_shared", lambda ops, lo, hi: False),
        (Occupancies, "same_at", lambda self, lo, hi: False),
    ],
    ids=["an op not shared", "a tier holding more at the end"],
)
def test_a_period_not_shown_proved_falls_back_to_two(patched):
    overrides = shape(*SHAPES[2])
    scenario = load_scenario(BASE, overrides)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(margins, "one_period", lambda *args: False)
        two = report_for(scenario)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(*patched)
        fell_back = report_for(scenario)
    assert fell_back["sim"]["micro_batches_simulated"] == two["sim"]["micro_batches_simulated"]
    assert _without_sim(fell_back) == _without_sim(two)


def test_records_of_their_own_fall_back_to_two_periods():
    # ordered link sharing: run on the event loop, each op its own record, none shared
    overrides = [*shape(*SHAPES[0]), "simulation.link_sharing=ordered"]
    one, two, _ = two_ways(BASE, overrides)
    assert one["sim"]["micro_batches_simulated"] == two["sim"]["micro_batches_simulated"]
    assert _without_sim(one) == _without_sim(two)


def tried(path: Path, overrides: list[str] = ()) -> bool:
    res = resolve(load_scenario(path, list(overrides)).scenario)
    return margins.one_period(res, prepare(res, build_inventory(res)).wl.units)


def test_what_is_tried_first():
    assert tried(K530)
    assert tried(PUBLISHED / "narayanan2021-529.6b.yaml")  # data parallel, not overlapped
    # weights homed in DRAM, fetched ahead of each use: two periods compared
    fetched = ["parallel.virtual_pipeline=3", "model.layers=24", "placement.weights=dram"]
    assert not tried(PUBLISHED.parent / "gpt3-175b-tp-pp.yaml", fetched)
    assert not tried(K530, ["checkpoint.every_steps=100"])  # a checkpoint simulated
    assert not tried(PUBLISHED / "korthikanti2022-1t-selective-sp.yaml")  # 1F1B
    # a collective beside the stream breaks the chain (every record made its own): a
    # gradient reduction overlapped with the backwards, an expert ring's all-to-alls
    assert not tried(PUBLISHED / "nemo2407-gpt3-175b-128gpus.yaml")
    assert not tried(PUBLISHED.parent / "deepseek-v3-pp16-vp2.yaml")
