"""Issue 36's eighth round: in the generic engine the planner uses the period's upper bound
without `MARGIN` (tiersim.plan.upper.margin). A space where that alone rules plans out without
simulating them gives the exhaustive search's answer, and each plan it rules out wears."""

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
from tiersim.plan.upper import MARGIN
from tiersim.rulebook import check_plan_section
from tiersim.runner import report_for

# The default scenario cut to 4 layers (no durable checkpoint: whole runs are quick), master
# weights on HBM, optimizer state on HBF updated on the GPU at ZeRO 1, with a 3.9-year HBF
# budget: a wear floor of about 11.0 s a step (7.8x the 1.41 s of tests/test_plan_screening.py's
# 6-month budget: the floor is the budget's lifetime times the bytes a step writes over the
# tier's endurance). Measured (2026-12-07): gradients or activations on NVMe give periods of
# 6.3-8.5 s (they wear), both on NVMe 12.7-12.8 s (they hold), the others 0.9-1.3 s; the
# period's sum without the margin is 10.0 s for gradients on NVMe with weights on HBM (and for
# activations on NVMe with weights on HBM 9.9 s), under the floor, where the sum and a quarter
# (12.5 s, 12.4 s) was over it. 2^3 = 8 plans.
SETS = (
    "--set", "model.layers=4", "--set", "budget.hbf.lifetime=3.9 years",
    "--set", "placement.master=hbm", "--set", "parallel.zero_stage=1",
    "--set", "placement.optimizer=hbf", "--set", "placement.optimizer_compute=gpu",
    "--set", "checkpoint.every_steps=null",
)  # fmt: skip
PLAN = """plan:
  placement.activations: [hbm, nvme]
  placement.gradients: [hbm, nvme]
  placement.weights: [hbm, dram]
"""


def _plan(path) -> dict:
    return plan_json(path, *SETS)


@pytest.fixture(scope="module")
def space_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("margin") / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    return path


def test_the_search_gives_the_exhaustive_search_s_answer(space_file):
    with pytest.MonkeyPatch.context() as mp:  # searched as a large space is: screened
        mp.setattr(run_module, "LARGE", 0)
        mp.setattr(chunks, "CHUNK", 4)
        searched = _plan(space_file)
    with pytest.MonkeyPatch.context() as mp:  # every candidate simulated in full
        exhaustively(mp)
        exhaustive = _plan(space_file)
    assert searched["plans"] == exhaustive["plans"]
    assert searched["hbf_optimizer"] == exhaustive["hbf_optimizer"]
    assert searched["hbf_optimizer"]["with"] is not None  # an HBF plan holds its budget
    by_bound = searched["candidates"]["pruned_by_bound"]
    assert by_bound.get("hbf wear budget", 0) >= 1, by_bound  # (others by their step bound)
    assert exhaustive["candidates"]["simulated"] == 8
    assert searched["candidates"]["simulated"] + sum(by_bound.values()) == 8


def test_the_sum_alone_rules_out_plans_that_wear(space_file):
    sets = [*SETS[1::2]]
    raw = apply_overrides(read_yaml(space_file, str(space_file)), sets, str(space_file))
    space = check_plan_section(load_scenario(space_file, sets), space_file, raw, always=True)
    kept = prune(raw, space_file.parent, str(space_file), candidates(space, 0, space.size)).kept
    assert len(kept) == 8
    # ruled out by the sum itself, where the sum and a quarter would have left them to a
    # simulation: gradients on NVMe, and activations on NVMe, each with weights on HBM
    newly = [c for c in kept if c.upper_s < c.wear_floor_s <= MARGIN * c.upper_s]
    homes = {(c.values["placement.activations"], c.values["placement.gradients"]): c for c in newly}
    assert {("hbm", "nvme"), ("nvme", "hbm")} <= set(homes), [
        (c.values, c.upper_s, c.wear_floor_s) for c in kept
    ]
    for c in newly:  # and a whole run of each does wear HBF past its budget
        one = load_scenario(space_file, [*sets, *c.overrides])
        assert report_for(one)["wear"]["hbf"]["within_budget"] is False, c.overrides
