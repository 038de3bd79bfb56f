"""`tiersim plan` collapses candidates that differ only in a knob their run does not read
(tiersim.plan.pruned): the prefetch depth of a run that fetches nothing (every class homed in
GPU memory, no weights gathered, the optimizer on the GPU: tiersim.engine.depth_reads).
Review (l): under megatron #1-#3 were one plan at prefetch depths 1, 2 and 4."""

from __future__ import annotations

import copy
import itertools
import json

import pytest
import yaml
from conftest import SCENARIOS
from plan_runs import plan_json
from test_plan_search import exhaustively

from tiersim.config.load import load_scenario
from tiersim.engine.depth_reads import reads_prefetch_depth
from tiersim.plan import prune as prune_module
from tiersim.plan.check import checked_space
from tiersim.plan.prune import prune
from tiersim.plan.pruned import Candidate, Pruned
from tiersim.plan.report import plan_report, plan_text
from tiersim.plan.run import PlanOutcome
from tiersim.plan.space import Space, candidates
from tiersim.runner import report_for
from tiersim.state.resolved import resolve

DEPTH = "simulation.prefetch_depth"
TINY = {
    "name": "tiny",
    "model": {
        "layers": 2,
        "hidden": 256,
        "heads": 4,
        "ffn_hidden": 1024,
        "vocab": 1000,
        "position": "rope",
        "norm": "rmsnorm",
    },
    "training": {"micro_batch_size": 1, "grad_accumulation": 8, "seq_len": 256},
    "parallel": {"data": 2},
    "hardware": {"preset": "dgx-h100"},  # three tiers: hbm, dram, nvme
}
MEGATRON = {**TINY, "training": {**TINY["training"], "framework": "megatron"}}


def _write(tmp_path, scenario, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(scenario))
    return path


def _with(scenario: dict, choices: dict) -> dict:
    out = copy.deepcopy(scenario)
    for path, value in choices.items():
        *parents, last = path.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return out


def _report(tmp_path, scenario: dict) -> dict:
    return json.loads(json.dumps(report_for(load_scenario(_write(tmp_path, scenario), []))))


def _but_the_depth(report: dict) -> dict:
    """The report less the depth it says back (`sim.prefetch_depth`, and the configured one
    where the run cut it)."""
    out = copy.deepcopy(report)
    out["sim"].pop("prefetch_depth")
    out["sim"].pop("prefetch_depth_configured", None)
    return out


# the generic engine (no framework): the classes' homes and the optimizer's site searched
MIXED = {
    "parallel.zero_stage": [1, 3],
    "placement.optimizer_compute": ["gpu", "cpu"],
    "placement.activations": ["hbm", "dram"],
    DEPTH: [1, 4],
}


def test_two_collapsed_candidates_give_the_same_report_and_two_kept_need_not(tmp_path):
    """The property: for each class of the space (its choices but the depth), the checker's
    verdict, then both depths simulated. Those collapsed give the same report but for the
    depth said back; of those kept, some give different reports (the comparison can fail)."""
    path = _write(tmp_path, {**TINY, "plan": MIXED})
    raw = yaml.safe_load(path.read_text())
    space = [dict(zip(MIXED, combo, strict=True)) for combo in itertools.product(*MIXED.values())]
    pruned = prune(raw, tmp_path, str(path), (tuple(c.items()) for c in space))
    kept = {tuple(sorted(c.values.items())) for c in pruned.kept}
    # 2 x 2 x 2 classes; only ZeRO 1, the optimizer on the GPU and the activations in HBM
    # fetch nothing: its depth 4 collapsed into its depth 1, the other 7 classes kept twice
    assert pruned.checked == 16 and len(pruned.kept) == 1 + 7 * 2
    assert dict(pruned.collapsed) == {DEPTH: 1} and pruned.duplicates == 0
    differ = 0
    for combo in space[::2]:  # depth 1 of each class
        deeper = {**combo, DEPTH: 4}
        collapsed = tuple(sorted(deeper.items())) not in kept
        one = _report(tmp_path, _with(TINY, combo))
        four = _report(tmp_path, _with(TINY, deeper))
        assert one["sim"]["prefetch_depth"] == 1 and four["sim"]["prefetch_depth"] == 4
        if collapsed:
            assert _but_the_depth(one) == _but_the_depth(four), combo
        differ += _but_the_depth(one) != _but_the_depth(four)
    assert differ >= 2  # ZeRO-3's gathers and the CPU optimizer's fetches move with the depth


@pytest.mark.parametrize(
    "choices, reads",
    [
        ({"parallel.zero_stage": 0}, False),
        ({"parallel.zero_stage": 1}, False),
        ({"parallel.zero_stage": 2}, False),  # gradients reduce-scattered: nothing fetched
        ({"parallel.zero_stage": 3}, True),  # weights gathered before each use
        ({"placement.optimizer_compute": "cpu"}, True),  # the update's fetches
        ({"placement.weights": "dram"}, True),
        ({"placement.gradients": "dram"}, True),  # read back to accumulate into
        ({"training.optimizer": "sgd", "placement.optimizer": "dram"}, False),  # none to move
    ],
)
def test_what_reads_the_depth_is_a_property_of_the_resolved_run(tmp_path, choices, reads):
    scenario = _with(TINY, choices)
    s = load_scenario(_write(tmp_path, scenario), []).scenario
    empty = ("optimizer",) if choices.get("training.optimizer") == "sgd" else ()
    assert reads_prefetch_depth(resolve(s), empty) is reads


def test_a_megatron_plan_without_offload_ranks_no_two_plans_that_differ_only_in_depth(
    tmp_path,
):
    """Review (l)'s case, small: ZeRO 1 or 2 (neither gathers) x recompute x depth 1/2/4
    under megatron (nothing offloaded). Each depth-only class is simulated once, and the
    ranking is the one an exhaustive simulation of every candidate gives with the depth-only
    twins (the same figures) taken out."""
    space = {
        "parallel.zero_stage": [1, 2],
        "training.recompute": ["none", "selective", "full"],
        DEPTH: [1, 2, 4],
    }
    path = _write(tmp_path, {**MEGATRON, "plan": space})
    report = plan_json(path, top=5)
    c = report["candidates"]
    # by hand: 2 x 3 x 3 = 18 candidates; 2 x 3 = 6 classes alike but for the depth, each
    # simulated at its first depth (1), its depths 2 and 4 collapsed: 6 x 2 = 12
    assert c["checked"] == 18 and c["collapsed"] == {DEPTH: 12} and c["duplicates"] == 0
    assert c["simulated"] + sum(c["pruned_by_bound"].values()) == 6
    plans = report["plans"]
    assert len(plans) == 5
    but_depth = [tuple(o for o in p["overrides"] if not o.startswith(DEPTH)) for p in plans]
    assert len(set(but_depth)) == len(but_depth)  # no two alike but for the depth
    assert all(f"{DEPTH}=1" in p["overrides"] for p in plans)
    assert all(p["collapsed"] == {DEPTH: [2, 4]} for p in plans)  # each said with its twins
    text = plan_text(report).splitlines()
    assert (
        "0 duplicates, 12 collapsed (differing only in a knob their run does not read: "
        "simulation.prefetch_depth 12)"
    ) in text[1]
    alike = "    alike:  simulation.prefetch_depth 2, 4 (not read by this run: the same plan)"
    assert text.count(alike) == 5
    with pytest.MonkeyPatch.context() as mp:  # every candidate simulated, none collapsed
        exhaustively(mp)
        mp.setattr(prune_module, "reads_prefetch_depth", lambda res, empty=(): True)
        every = plan_json(path, top=18)
    assert every["candidates"]["collapsed"] == {} and every["candidates"]["simulated"] == 18
    assert not any("collapsed" in p for p in every["plans"])
    first = {}  # each class's plan at its first depth, in the exhaustive ranking's order
    for p in every["plans"]:
        alike = tuple(o for o in p["overrides"] if not o.startswith(DEPTH))
        first.setdefault(alike, []).append(p)
    for twins in first.values():  # the twins' figures are the same
        assert all(_figures(t) == _figures(twins[0]) for t in twins) and len(twins) == 3
    assert but_depth == list(first)[:5]
    for plan, alike in zip(plans, but_depth, strict=True):
        assert _figures(plan) == _figures(first[alike][0])


def _figures(plan: dict) -> dict:
    """A ranked plan's entry but its rank and the choices (and the command) that make it."""
    return {k: v for k, v in plan.items() if k not in ("rank", "overrides", "rerun", "collapsed")}


@pytest.mark.parametrize(
    "name",
    [
        "published/korthikanti2022-22b-selective-sp.yaml",  # megatron, TP x PP, resident
        "published/nemo2407-llama3-8b-8gpus.yaml",  # review (l)'s: apex's ZeRO 1
        "gpt3-175b-tp-pp.yaml",
        "deepseek-v3-pp16-vp2.yaml",  # MoE, interleaved: the routed experts' homes too
    ],
)
def test_shipped_scenarios_that_fetch_nothing_give_the_same_report_at_any_depth(name):
    """Four of the 33 shipped scenarios whose run reads no depth (all 33 compared once:
    docs/plan-scale.md), each simulated at depths 1 and 4."""
    path = SCENARIOS / name
    s = load_scenario(path, []).scenario
    assert not reads_prefetch_depth(resolve(s))
    one, four = (
        json.loads(json.dumps(report_for(load_scenario(path, [f"{DEPTH}={d}"])))) for d in (1, 4)
    )
    assert (one["sim"]["prefetch_depth"], four["sim"]["prefetch_depth"]) == (1, 4)
    assert _but_the_depth(one) == _but_the_depth(four)


MEGATRON_SPACE = {
    "parallel.zero_stage": [0, 1, 2, 3],
    "training.recompute": ["none", "full"],
    DEPTH: [1, 2, 4],
}


def _megatron_pruned(tmp_path, chunk: int | None = None) -> Pruned:
    """The megatron space checked in one go, or `chunk` positions at a time merged in order
    (as a large space's workers check it: tiersim.plan.chunks)."""
    path = _write(tmp_path, {**MEGATRON, "plan": MEGATRON_SPACE}, "m.yaml")
    raw = yaml.safe_load(path.read_text())
    space = checked_space(load_scenario(path, []), raw, path)
    if chunk is None:
        return prune(raw, tmp_path, str(path), candidates(space))
    out = Pruned()
    for start in range(0, space.size, chunk):
        out.merge(prune(raw, tmp_path, str(path), candidates(space, start, start + chunk)))
    return out


def test_the_counts_by_hand_and_merged_from_chunks(tmp_path):
    whole = _megatron_pruned(tmp_path)
    # 4 ZeRO stages x 2 recompute modes x 3 depths = 24; ZeRO 0, 1, 2 gather nothing: 3 x 2
    # = 6 classes, each kept once and collapsed twice (12); ZeRO 3 gathers: 2 x 3 = 6 kept
    assert whole.checked == 24 and sum(whole.invalid.values()) == 0
    assert len(whole.kept) == 6 + 6 and whole.collapsed == {DEPTH: 12}
    assert whole.duplicates == 0
    depths = sorted(c.values[DEPTH] for c in whole.kept if c.values["parallel.zero_stage"] < 3)
    assert depths == [1] * 6  # the first checked of each class kept
    assert sorted(whole.twins.values()) == [[2, 4]] * 6
    for chunk in (5, 7):  # chunk edges inside a class: the same counts and the same kept
        merged = _megatron_pruned(tmp_path, chunk)
        assert merged.keys == whole.keys and merged.collapsed == whole.collapsed
        assert merged.twins == whole.twins  # each kept one's depths 2 and 4
        assert (merged.checked, merged.duplicates) == (whole.checked, whole.duplicates)


def _candidate(home: str, depth: int) -> Candidate:
    values = {"placement.optimizer": home, DEPTH: depth}
    overrides = tuple(f"{k}={v}" for k, v in values.items())
    return Candidate(overrides, values, None, 2, None, 16)


def test_a_duplicate_and_a_collapsed_candidate_are_counted_apart():
    """sgd keeps no optimizer state: its homes on HBM and DRAM are duplicates (review (b)),
    and neither reads the depth; so at depths 1 and 4: one kept, one duplicate at depth 1,
    the others collapsed or duplicates as they are met (plan.pruned.Pruned.set_aside)."""
    out = Pruned()
    key = "digest|~{}|optimizer"
    first = _candidate("hbm", 1)
    out.take(key.format(1), first)  # kept
    out.take(key.format(1), _candidate("dram", 1))  # the same key: a duplicate
    out.take(key.format(4), _candidate("hbm", 4))  # alike but for the depth: collapsed
    out.take(key.format(4), _candidate("dram", 4))  # the same key as the one before: a duplicate
    assert out.kept == [first]
    assert out.duplicates == 2 and dict(out.empty_homes) == {"optimizer": 2}
    assert dict(out.collapsed) == {DEPTH: 1}
    assert out.collapsed_into([first]) == [{DEPTH: [4]}]
    read = Pruned()  # a depth the run reads is never collapsed
    one, four = _candidate("hbm", 1), _candidate("hbm", 4)
    read.take("digest|1", one)
    read.take("digest|4", four)
    assert read.kept == [one, four] and read.collapsed == {}
    assert read.collapsed_into([one, four]) == [{}, {}]


def test_the_report_says_nothing_of_collapsing_where_none_was():
    pruned = Pruned(checked=2, duplicates=1)
    outcome = PlanOutcome("s.yaml", _empty_space(), pruned, [], None)
    report = plan_report(outcome, "tokens_per_s", 3)
    assert report["candidates"]["collapsed"] == {}
    assert "collapsed" not in plan_text(report)
    assert pruned.not_counting() == ", not counting 1 duplicate"
    pruned.collapsed[DEPTH] = 12
    assert pruned.not_counting() == ", not counting 1 duplicate and 12 collapsed"


def _empty_space() -> Space:
    return Space(("simulation.prefetch_depth",), ((1, 2),), 8, True, ())
