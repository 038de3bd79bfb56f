"""What `tiersim plan` works out once for many candidates (issue 36): the parts of a workload
that the state classes' homes, the optimizer's device and `simulation.*` never change, the
upper bound's moves counted a run of alike layers at a time, and each quantity's text read
once. Each must give exactly what working it out afresh gives."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from pathlib import Path

import pytest

from tiersim.config.load import build, load_scenario
from tiersim.config.overrides import set_path
from tiersim.config.yamlfile import read_yaml
from tiersim.core.units import Kind, UnitError, parse
from tiersim.plan.prune import HOME_CHOICES, Checker, Pruned
from tiersim.plan.upper import alike_runs
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.sweep.estimate import layer_passes
from tiersim.workload.work import build_workload

DEFAULT = Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"

# homes, the optimizer's device and the prefetch depth, each a candidate of the default space
# that fits (sharing only with the ones before it)
HOMES = [
    [],
    ["placement.weights=dram", "placement.gradients=dram", "placement.activations=nvme"],
    ["placement.optimizer=dram", "placement.master=nvme", "placement.optimizer_compute=cpu"],
    ["placement.weights=hbf", "simulation.prefetch_depth=4", "placement.activations=dram"],
]


def _resolved(sets: list[str]):
    return resolve(load_scenario(DEFAULT, sets).scenario)


@pytest.mark.parametrize("others", [["parallel.zero_stage=0"], ["parallel.zero_stage=3"]])
def test_a_workload_built_with_shared_parts_is_the_one_built_alone(others):
    shared: dict = {}
    for homes in HOMES:
        res = _resolved([*others, *homes])
        inv = build_inventory(res)
        alone = build_workload(res, inv)
        assert build_workload(res, inv, shared) == alone
    assert shared  # something was kept, and read again by the later candidates


def test_an_inventory_built_with_shared_parts_is_the_one_built_alone():
    # the third updates on the CPU, the fourth on the GPU again: DeepSpeed's ZeRO-2
    # keeps a gradient buffer in GPU memory for a CPU update only (state/buffers.py), so each
    # device's bytes are kept apart
    shared: dict = {}
    workspace = []
    offload = ["placement.optimizer=dram", "placement.master=dram", "placement.gradients=dram"]
    homes_here = [[], offload, [*offload, "placement.optimizer_compute=cpu"], []]
    for homes in homes_here:
        res = _resolved(["training.framework=deepspeed", "parallel.zero_stage=2", *homes])
        inv = build_inventory(res, shared)
        assert inv == build_inventory(res)
        workspace.append(inv.per_gpu["workspace"])
    assert workspace[2] > workspace[3] == workspace[0]
    assert {k for k in shared if k[0] == "inventory"} == {
        ("inventory", "gpu"),
        ("inventory", "cpu"),
    }


def test_the_choices_shared_across_are_the_classes_homes_and_the_optimizers_device():
    assert "placement.optimizer_compute" in HOME_CHOICES
    assert {"placement.weights", "placement.optimizer", "placement.activations"} <= HOME_CHOICES
    assert not any(c.startswith(("parallel.", "training.", "simulation.")) for c in HOME_CHOICES)


def test_alike_runs_cover_every_unit_once_and_each_is_its_first_renamed():
    res = _resolved(["placement.weights=dram"])
    units = build_workload(res, build_inventory(res)).units
    runs = alike_runs(units)
    assert sum(n for _, n in runs) == len(units)
    # Llama 2 7B: 32 alike layers, then the rest (embedding, head): two runs
    assert [n for _, n in runs] == [32, 1]
    at = 0
    for first, n in runs:
        for u in units[at : at + n]:
            assert dataclasses.replace(u, name=first.name) == first
        at += n


def test_a_text_read_twice_reads_the_same_and_a_wrong_kind_is_still_refused():
    assert parse("4.8 TB/s", Kind.BANDWIDTH) == 4.8e12
    assert parse("4.8 TB/s", Kind.BANDWIDTH) == 4.8e12  # the kept value
    assert parse("141 GB", Kind.SIZE) == 141e9
    with pytest.raises(UnitError, match="needed here"):  # a size's text kept, not a bandwidth's
        parse("141 GB", Kind.BANDWIDTH)
    for _ in range(2):  # a problem is never kept: it is found again each time
        with pytest.raises(UnitError, match="unknown unit"):
            parse("3 parsecs", Kind.SIZE)


def _key(alone) -> str:
    """The key of a scenario built as written: its JSON but the prefetch depth, hashed, then
    the depth (equal keys for equal scenarios: the depth is the one field left out)."""
    dump = alone.model_dump_json(exclude={"simulation": {"prefetch_depth"}})
    digest = hashlib.sha256(dump.encode()).hexdigest()[:16]
    return f"{digest}|{alone.simulation.prefetch_depth!r}"


def _combo(sets: dict) -> tuple:
    mbs = sets.get("training.micro_batch_size", 1)
    return tuple({**sets, "training.grad_accumulation": 16 // mbs}.items())


@pytest.mark.parametrize(
    "choices",
    [
        {"placement.weights": "dram", "parallel.zero_stage": 3},
        {"placement.activations": "nvme", "placement.optimizer_compute": "cpu"},
        {"training.recompute": "full", "training.micro_batch_size": 2},
    ],
)
def test_a_candidate_with_another_prefetch_depth_is_the_scenario_built_as_written(choices):
    raw = read_yaml(DEFAULT, str(DEFAULT))
    check = Checker(raw, DEFAULT.parent, str(DEFAULT))
    out = Pruned()
    for depth in (1, 2, 4):  # the first built in full, the others from it
        combo = _combo({**choices, "simulation.prefetch_depth": depth})
        candidate, key = check(combo, out)
        mapping = copy.deepcopy(raw)
        for path, value in combo:
            set_path(mapping, path.split("."), value)
        alone = build(mapping, DEFAULT.parent, str(DEFAULT)).scenario
        assert key == _key(alone)
        assert candidate.passes == layer_passes(alone)
    assert len(check.recent) == 1  # one built in full: the depths set in it


def test_a_prefetch_depth_off_a_whole_number_is_built_as_written():
    raw = read_yaml(DEFAULT, str(DEFAULT))
    check = Checker(raw, DEFAULT.parent, str(DEFAULT))
    out = Pruned()
    check(_combo({"simulation.prefetch_depth": 1}), out)
    candidate, _ = check(_combo({"simulation.prefetch_depth": 0}), out)  # not >= 1: refused
    assert candidate is None and sum(out.invalid.values()) == 1
    assert "simulation.prefetch_depth" in next(iter(out.invalid))


def _as_written(raw: dict, combo: tuple):
    """The candidate's scenario built afresh from the mapping with its choices written in."""
    mapping = copy.deepcopy(raw)
    for path, value in combo:
        set_path(mapping, path.split("."), value)
    return build(mapping, DEFAULT.parent, str(DEFAULT)).scenario


def test_a_candidate_with_another_placement_is_the_scenario_built_as_written():
    # the first built in full; the others differ from it only in placement.* (homes and the
    # optimizer's device), so each is that one with its placement validated alone and set in
    raw = read_yaml(DEFAULT, str(DEFAULT))
    check = Checker(raw, DEFAULT.parent, str(DEFAULT))
    out = Pruned()
    others = {"parallel.zero_stage": 2, "training.recompute": "selective"}
    built = []
    for homes in HOMES[:3]:
        choices = dict(sorted(dict(h.split("=") for h in homes).items()))
        combo = _combo({**choices, **others})
        candidate, key = check(combo, out)
        alone = _as_written(raw, combo)
        assert check.recent[tuple((p, type(v), v) for p, v in combo)] == alone
        assert key == _key(alone)
        assert candidate.passes == layer_passes(alone)
        built.append(alone.placement)
    assert len(check.placed) == 1  # one built in full: the placements set in it
    assert len({p.model_dump_json() for p in built}) == 3  # three placements, each its own


def test_a_placement_that_is_not_consistent_is_refused_as_built_afresh():
    # a home on a tier the machine lacks validates as a name, but config.consistency refuses
    # it: the candidate is built in full and counted invalid for the same reason as a checker
    # that never built another candidate before it says
    raw = read_yaml(DEFAULT, str(DEFAULT))
    check, out = Checker(raw, DEFAULT.parent, str(DEFAULT)), Pruned()
    check(_combo({"placement.weights": "hbm"}), out)  # valid: the one set in next
    wrong = _combo({"placement.weights": "tape"})
    assert check(wrong, out) == (None, "")
    fresh, alone = Checker(raw, DEFAULT.parent, str(DEFAULT)), Pruned()
    fresh(wrong, alone)
    assert out.invalid == alone.invalid and sum(out.invalid.values()) == 1
    assert next(iter(out.invalid)).startswith("placement.weights")
