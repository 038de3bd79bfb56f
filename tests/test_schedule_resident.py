"""A stage where nothing moves between tiers, its forwards and backwards built directly
(tiersim/engine/schedule_resident.py) against the general passes' build of them: the same
ops (every field, deps included), the same marks, uses and chain count, on Korthikanti et
al.'s Table 5 stages, shipped stages with expert and context parallelism and interleaving,
random small shapes, and where something moves (then the general passes build it all)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.load import load_scenario
from tiersim.engine import schedule_resident
from tiersim.engine.schedule import ScheduleBuilder
from tiersim.engine.simulate import prepare
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "scenarios" / "published" / "narayanan2021-1.7b.yaml"


def both_ways(path: Path, overrides: list[str], monkeypatch) -> tuple[tuple, tuple, bool]:
    """Two steps built with the resident builder allowed and without it (the second step's
    units wait on the first step's update: the general passes make those ops), what each
    build leaves behind, and whether the resident builder applied."""
    res = resolve(load_scenario(path, overrides).scenario)
    setup = prepare(res, build_inventory(res))
    out, applied = [], False
    for enabled in (True, False):
        monkeypatch.setattr(schedule_resident, "ENABLED", enabled)
        builder = ScheduleBuilder(res, setup.wl, setup.depth)
        schedule = builder.build(2)
        applied = applied or schedule_resident.applies(builder.passes)
        passes, ops = builder.passes, builder.ops
        out.append((schedule, passes.uses, passes.use_units, ops.last_on, builder.ready))
    return out[0], out[1], applied


@pytest.mark.parametrize(
    "name",
    [f"korthikanti2022-{m}-{r}" for m in ("22b", "175b", "530b", "1t")
     for r in ("selective-sp", "full-recompute")]
    + ["nemo2407-gpt3-175b-128gpus", "smith2022-mtnlg-530b-280nodes"],
)  # fmt: skip
def test_table5_stages_built_directly_are_the_general_build(name, monkeypatch):
    path = ROOT / "scenarios" / "published" / f"{name}.yaml"
    direct, general, applied = both_ways(path, [], monkeypatch)
    assert applied  # built directly, not left to the general passes
    assert direct == general  # every op's every field, deps included


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("mixtral-8x7b-ep-dgx-h100.yaml", ["model.layers=4"]),  # expert-parallel collectives
        ("llama3-405b-128k-cp16.yaml", []),  # context-parallel ones
        ("deepseek-v3-pp16-vp2.yaml", []),  # interleaved, MoE
        ("default.yaml", ["model.layers=4", "training.grad_accumulation=2"]),
    ],
)
def test_shipped_stages_built_directly_are_the_general_build(name, overrides, monkeypatch):
    direct, general, applied = both_ways(ROOT / "scenarios" / name, overrides, monkeypatch)
    assert applied
    assert direct == general


def test_a_stage_that_moves_is_built_by_the_general_passes(monkeypatch):
    overrides = ["model.layers=4", "training.grad_accumulation=2"]
    path = ROOT / "scenarios" / "llama2-70b-zero3-nvme.yaml"  # weights streamed from NVMe
    direct, general, applied = both_ways(path, overrides, monkeypatch)
    assert not applied
    assert direct == general


@settings(max_examples=25, deadline=None)
@given(
    pipeline=st.sampled_from([1, 2, 4]),
    virtual=st.sampled_from([1, 2]),
    tensor=st.sampled_from([1, 2]),
    data=st.sampled_from([1, 2]),
    overlap=st.booleans(),
    micro_batches=st.integers(1, 9),
    recompute=st.sampled_from(["full", "selective", "none"]),
)
def test_random_small_stages_built_directly_are_the_general_build(
    pipeline, virtual, tensor, data, overlap, micro_batches, recompute
):
    virtual = virtual if pipeline > 1 else 1  # interleaving needs a pipeline
    if virtual > 1 and micro_batches % pipeline:  # Megatron's interleaving needs m = kp
        micro_batches = pipeline * max(1, micro_batches // pipeline)
    overrides = [
        "model.layers=8",
        f"parallel.pipeline={pipeline}",
        f"parallel.virtual_pipeline={virtual}",
        f"parallel.tensor={tensor}",
        f"parallel.data={data}",
        f"parallel.overlap_gradient_reduce={str(overlap).lower()}",
        f"training.grad_accumulation={micro_batches}",
        f"training.recompute={recompute}",
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        direct, general, applied = both_ways(SMALL, overrides, monkeypatch)
    assert applied
    assert direct == general
