"""Issue 36's seventh round: the wear floor counts the updated weights written home, and the
period's upper bound the gradients as the generic engine moves them. A space where those
decide plans without simulating them gives the exhaustive search's answer."""

from __future__ import annotations

import pytest
from conftest import SCENARIOS
from plan_runs import plan_json
from test_plan_search import exhaustively

from tiersim.config.load import load_scenario
from tiersim.config.overrides import apply_overrides
from tiersim.config.yamlfile import read_yaml
from tiersim.plan import chunks
from tiersim.plan import run as run_module
from tiersim.plan.prune import prune
from tiersim.plan.space import candidates
from tiersim.rulebook import check_plan_section
from tiersim.runner import report_for

# The default scenario cut to 4 layers (no durable checkpoint: whole runs are quick), its
# master weights on HBM at ZeRO 1, with a 6-month HBF budget:
# optimizer state on HBF alone sets a wear floor of about 1.41 s a step at ZeRO 1
# (tests/test_plan_screening.py), between these plans' steps (about 1.1-2.1 s); the bf16
# weights on HBF too add their updated copy written home each step (ZeRO 1 on 8 GPUs: the
# updated shard and the gathered rest, all of them: twice the optimizer state's shard of fp32
# moments, so about three times the floor), over every such plan's period. 2^4 = 16 plans.
SETS = (
    "--set", "model.layers=4", "--set", "budget.hbf.lifetime=0.5 years",
    "--set", "placement.master=hbm", "--set", "parallel.zero_stage=1",
    "--set", "checkpoint.every_steps=null",
)  # fmt: skip
PLAN = """plan:
  placement.optimizer: [hbm, hbf]
  placement.weights: [hbm, hbf]
  placement.gradients: [hbm, dram]
  placement.activations: [hbm, dram]
"""


def _plan(path) -> dict:
    return plan_json(path, *SETS)


@pytest.fixture(scope="module")
def searched_and_exhaustive(tmp_path_factory):
    path = tmp_path_factory.mktemp("tighter") / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    with pytest.MonkeyPatch.context() as mp:  # searched as a large space is: screened
        mp.setattr(run_module, "LARGE", 0)
        mp.setattr(chunks, "CHUNK", 8)
        searched = _plan(path)
    with pytest.MonkeyPatch.context() as mp:  # every candidate simulated in full
        exhaustively(mp)
        exhaustive = _plan(path)
    return searched, exhaustive


def test_the_search_gives_the_exhaustive_search_s_answer(searched_and_exhaustive):
    searched, exhaustive = searched_and_exhaustive
    assert searched["plans"] == exhaustive["plans"]
    assert searched["hbf_optimizer"] == exhaustive["hbf_optimizer"]
    assert searched["hbf_optimizer"]["with"] is not None  # an HBF plan holds its budget
    by_bound = searched["candidates"]["pruned_by_bound"]
    assert by_bound.get("hbf wear budget", 0) > 0, by_bound
    simulated = exhaustive["candidates"]["simulated"]
    assert simulated == 16
    assert searched["candidates"]["simulated"] + sum(by_bound.values()) == simulated


def test_weights_on_hbf_raise_the_wear_floor_and_rule_plans_out(tmp_path):
    # per GPU at ZeRO 1 on 8 GPUs, a step writes into HBF: with optimizer state there, its
    # shard of the fp32 moments, 8 B/param / 8 = 1 B/param; with the bf16 weights there, the
    # updated weights written home, all of them (the updated shard and the gathered rest),
    # 2 B/param. So the wear floor (proportional to those bytes) with the weights on HBF is
    # 2x the optimizer state's alone, and 3x with both there; it was 0 and 1x before the
    # weights were counted, under every such plan's upper bound: none was ruled out
    path = tmp_path / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    sets = [*SETS[1::2]]
    raw = apply_overrides(read_yaml(path, str(path)), sets, str(path))
    space = check_plan_section(load_scenario(path, sets), path, raw, always=True)
    kept = prune(raw, path.parent, str(path), candidates(space, 0, space.size)).kept
    floors = {(c.values["placement.optimizer"], c.values["placement.weights"]) for c in kept}
    assert len(floors) == 4
    floor = {}
    for c in kept:
        floor.setdefault((c.values["placement.optimizer"], c.values["placement.weights"]), set())
        floor[c.values["placement.optimizer"], c.values["placement.weights"]].add(c.wear_floor_s)
    alone = floor["hbf", "hbm"].pop()
    assert floor["hbm", "hbm"] == {0.0}
    assert floor["hbm", "hbf"].pop() == pytest.approx(2 * alone, rel=1e-2)
    assert floor["hbf", "hbf"].pop() == pytest.approx(3 * alone, rel=1e-2)
    # half the plans with their weights on HBF now cannot step as slowly as their budget needs
    ruled_out = [c for c in kept if c.wear_floor_s > c.upper_s]
    assert sum(c.values["placement.weights"] == "hbf" for c in ruled_out) >= 4, [
        (c.values, c.wear_floor_s, c.upper_s) for c in kept
    ]
    # and a whole run of one such plan does wear HBF past its budget
    one = load_scenario(path, [*sets, "placement.weights=hbf", "placement.optimizer=hbm"])
    assert report_for(one)["wear"]["hbf"]["within_budget"] is False
