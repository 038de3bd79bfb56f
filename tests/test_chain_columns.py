"""A walked chain's measures from its columns (tiersim/engine/chain_columns.py) against the
same measures read from the ops in each window (tiersim.engine.metrics): every figure of
the step and of the two periods the extrapolation compares, to the bit (`repr`: 0 and 0.0,
and -0.0, told apart), on Korthikanti et al.'s Table 5, shipped chains, and random small
shapes; and which runs the columns are read for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.engine import chain, chain_columns, metrics, periods
from tiersim.engine import simulate as simulate_module
from tiersim.engine.core import run_engine
from tiersim.engine.flows import FlowNetwork
from tiersim.engine.schedule import ScheduleBuilder
from tiersim.engine.simulate import prepare, simulate
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "scenarios" / "published"
SMALL = PUBLISHED / "narayanan2021-1.7b.yaml"
ANY = FlowNetwork.ANY
MEASURE = metrics.measure
TABLE5 = [
    f"korthikanti2022-{m}-{r}"
    for m in ("22b", "175b", "530b", "1t")
    for r in ("selective-sp", "full-recompute")
]


def both_ways(scenario, monkeypatch) -> tuple[list[str], list[str], int]:
    """Every measure taken in a simulation (the step's and the periods'), with the columns
    and without, each as `repr` (wall time out), then the result; and how many measures
    were taken from columns."""
    out, from_columns = [], []
    for enabled in (True, False):
        monkeypatch.setattr(chain_columns, "ENABLED", enabled)
        seen: list[str] = []
        kept = _kept(seen, from_columns)
        for module in (metrics, periods, simulate_module):  # each caller's name for it
            monkeypatch.setattr(module, "measure", kept)
        result = dataclasses.replace(simulate(scenario), wall_s=0.0)
        out.append([*seen, repr(result)])
    return out[0], out[1], len(from_columns)


def _kept(seen: list[str], from_columns: list[int]):
    """`metrics.measure`, each result kept (as `repr`, wall time out), each taken from
    columns counted."""

    def kept(engine, *args, **kwargs):
        result = MEASURE(engine, *args, **kwargs)
        if chain_columns.of(engine) is not None:
            from_columns.append(1)
        seen.append(repr(dataclasses.replace(result, wall_s=0.0)))
        return result

    return kept


@pytest.mark.parametrize("name", TABLE5)
def test_table5_measured_from_columns_is_measured_from_ops(name, monkeypatch):
    scenario = load_scenario(PUBLISHED / f"{name}.yaml").scenario
    columns, ops, taken = both_ways(scenario, monkeypatch)
    assert taken >= 1  # measured from the columns, not the ops
    assert columns == ops  # every figure of every measure, to the bit


@settings(max_examples=25, deadline=None)
@given(
    pipeline=st.sampled_from([1, 2, 4]),
    virtual=st.sampled_from([1, 2]),
    tensor=st.sampled_from([1, 2]),
    data=st.sampled_from([1, 2]),
    micro_batches=st.integers(1, 16),
    recompute=st.sampled_from(["full", "selective", "none"]),
)
def test_random_small_chains_measured_from_columns_are_measured_from_ops(
    pipeline, virtual, tensor, data, micro_batches, recompute
):
    virtual = virtual if pipeline > 1 else 1  # interleaving needs a pipeline
    if virtual > 1:  # Megatron's interleaving needs m = kp
        micro_batches = pipeline * max(1, micro_batches // pipeline)
    overrides = [
        "model.layers=8",
        f"parallel.pipeline={pipeline}",
        f"parallel.virtual_pipeline={virtual}",
        f"parallel.tensor={tensor}",
        f"parallel.data={data}",
        "parallel.overlap_gradient_reduce=false",
        f"training.grad_accumulation={micro_batches}",
        f"training.recompute={recompute}",
    ]
    scenario = load_scenario(SMALL, overrides).scenario
    with pytest.MonkeyPatch.context() as monkeypatch:
        columns, ops, taken = both_ways(scenario, monkeypatch)
    assert taken >= 1  # a chain of one step, blocking collectives only
    assert columns == ops


def test_a_run_that_is_no_chain_is_measured_from_its_ops(monkeypatch):
    overrides = ["model.layers=4", "training.grad_accumulation=2"]
    path = ROOT / "scenarios" / "llama2-70b-zero3-nvme.yaml"  # weights streamed from NVMe
    columns, ops, taken = both_ways(load_scenario(path, overrides).scenario, monkeypatch)
    assert taken == 0
    assert columns == ops


@pytest.mark.parametrize(
    "overrides, channels",
    [
        (["parallel.tensor=2", "parallel.data=2"], ["nvlink", ANY]),  # NVLink alone
        (
            ["parallel.tensor=8", "parallel.data=4", "parallel.pipeline=2"],
            ["nvlink", ANY, "network"],
        ),
    ],
)
def test_a_chain_walked_is_the_event_loops_run_on_one_channel_or_two(
    overrides, channels, monkeypatch
):
    """The walk's busy spans (ANY's filled once the walk is over, each channel's kept as
    they come) against the event loop's: every channel's, ANY's, in the same order."""
    base = ["model.layers=8", "parallel.overlap_gradient_reduce=false"]
    scenario = load_scenario(SMALL, [*base, "training.grad_accumulation=4", *overrides]).scenario
    res = resolve(scenario)
    setup = prepare(res, build_inventory(res))
    schedule = ScheduleBuilder(res, setup.wl, setup.depth).build(1)
    out = []
    for enabled in (True, False):
        monkeypatch.setattr(chain, "ENABLED", enabled)
        engine, log, _ = run_engine(res, setup.topo, schedule, setup.baseline)
        out.append((list(engine.net.busy.intervals.items()), log.start, log.end))
    assert [name for name, _ in out[0][0]] == channels  # ANY's made with the first one's
    assert out[0] == out[1]
