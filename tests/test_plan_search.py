"""`tiersim plan` prunes candidates whose bound cannot reach its answer (tiersim.plan.contenders)
and answers as an exhaustive simulation of the same space does: the same best plans, the same
answer on HBF, with the pruned ones counted by the bound that ruled them out."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
from pathlib import Path

import pytest
from conftest import SCENARIOS

from tiersim.cli import main
from tiersim.plan import chunks, simulating
from tiersim.plan import run as run_module
from tiersim.plan.bound import StepBound
from tiersim.plan.contenders import Contenders, score_bound
from tiersim.plan.prune import Candidate

# a subspace of the default scenario's default space (each class's home, recompute, the
# micro-batch size): 3 x 2 x 2 x 3 x 2 = 72 combinations; its checkpoint left out so each
# candidate is quick (the search is what is tested, not the checkpoint)
PLAN = """plan:
  placement.optimizer: [hbm, dram, hbf]
  placement.master: [hbm, hbf]
  placement.weights: [hbm, dram]
  training.recompute: [none, selective, full]
  training.micro_batch_size: [1, 2]
"""


def _cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


# At 141e9 B of HBM (the datasheet's figure, not CUDA's 139.80 GiB) the best bounds of this
# space hold no HBF plan: the case the large space's HBF sample is for
SMALL_HBM = ("--set", "hardware.tiers.hbm.capacity=141 GB")
# with Megatron-LM's 0.1 dropouts, the activations this space was laid out for (the Llama 2
# preset carries none since; without them more plans fit in HBM and the case above is gone)
MEGATRON_DROPOUT = ("--set", "model.attention_dropout=0.1", "--set", "model.hidden_dropout=0.1")


def _plan(path: Path, *extra: str) -> dict:
    return _plan_said(path, *extra)[0]


@pytest.fixture(scope="module")
def pruned_and_exhaustive(tmp_path_factory):
    path = tmp_path_factory.mktemp("search") / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    pruned = _plan(path)
    with pytest.MonkeyPatch.context() as mp:  # every candidate simulated
        exhaustively(mp)
        exhaustive = _plan(path)
    with pytest.MonkeyPatch.context() as mp:  # searched as a large space is (tiersim.plan.chunks)
        mp.setattr(run_module, "LARGE", 0)
        mp.setattr(chunks, "CHUNK", 16)  # 72 positions: 5 chunks, merged in order
        large, err = _plan_said(path)
        large["sample"] = _sample_said(err)
        mp.setattr(run_module, "_sample_hbf", lambda *args: None)  # sampled as it was before
        large["sample without hbf"] = _sample_said(_plan_said(path)[1])
    return pruned, exhaustive, large


def exhaustively(mp: pytest.MonkeyPatch) -> None:
    """A search that simulates every candidate in full: none pruned by a bound, none settled
    by its step simulated first (tiersim.plan.screening)."""
    mp.setattr(Contenders, "matters", lambda self, candidate: True)
    mp.setattr(simulating, "screenable", lambda candidate: False)
    mp.setattr(simulating, "worth_screening", lambda candidate: False)


def _plan_said(path: Path, *extra: str) -> tuple[dict, str]:
    """The plan's JSON report and what it wrote to stderr."""
    code, out, err = _cli(
        "plan", path, "--format", "json", "--workers", "2", "--top", "3",
        "--set", "checkpoint.every_steps=null", *SMALL_HBM, *MEGATRON_DROPOUT, *extra,
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out), err


def _sample_said(err: str) -> tuple[int, int]:
    """(candidates sampled, candidates they leave that could still rank), from the line a
    large space's search writes about its sample."""
    line = next(x for x in err.replace("\r", "\n").splitlines() if "of the best bounds" in x)
    sampled = int(line.split("; the ")[1].split(" of the best")[0])
    said = line.split(" and leave ")[1].split(" that could")[0]
    left = 0 if said == "none" else int(said.replace(",", ""))
    return sampled, left


def test_a_pruned_search_gives_the_exhaustive_search_s_answer(pruned_and_exhaustive):
    pruned, exhaustive, _ = pruned_and_exhaustive
    assert pruned["plans"] == exhaustive["plans"]
    assert pruned["hbf_optimizer"] == exhaustive["hbf_optimizer"]
    by_bound = pruned["candidates"]["pruned_by_bound"]
    assert sum(by_bound.values()) > 0, "the search should have pruned some candidates"
    assert exhaustive["candidates"]["pruned_by_bound"] == {}
    # every candidate kept by the inventory is either simulated or pruned by a bound
    simulated = exhaustive["candidates"]["simulated"]
    assert pruned["candidates"]["simulated"] + sum(by_bound.values()) == simulated


def test_a_large_space_s_search_gives_the_exhaustive_search_s_answer(pruned_and_exhaustive):
    # checked on the workers a chunk at a time, sampled by its best bounds: the same answer,
    # the same candidates checked, kept and pruned by the inventory
    _, exhaustive, large = pruned_and_exhaustive
    assert large["plans"] == exhaustive["plans"]
    assert large["hbf_optimizer"] == exhaustive["hbf_optimizer"]
    for key in ("checked", "invalid", "do_not_fit", "duplicates"):
        assert large["candidates"][key] == exhaustive["candidates"][key]
    by_bound = large["candidates"]["pruned_by_bound"]
    simulated = exhaustive["candidates"]["simulated"]
    assert large["candidates"]["simulated"] + sum(by_bound.values()) == simulated


def test_a_large_space_s_sample_takes_an_hbf_plan_and_leaves_fewer_to_estimate(
    pruned_and_exhaustive,
):
    _, _, large = pruned_and_exhaustive
    (sampled, left), (sampled_before, left_before) = large["sample"], large["sample without hbf"]
    # until an HBF plan that fits is simulated, every HBF plan that fits could be the best
    # there: the sample takes one, and fewer are left to estimate
    assert sampled > sampled_before and left < left_before
    # the estimate is from above: the search simulates no more than the sample leaves
    assert large["candidates"]["simulated"] - sampled <= left


def plan_candidate(
    bound_s: float,
    hbf: bool = False,
    wear_floor_s: float = 0.0,
    upper_s: float = math.inf,
    **more,
) -> Candidate:
    """A hand-made candidate of 8 GPUs and 80,000 tokens a step (`more`: other fields)."""
    fields = {
        "overrides": (),
        "values": {},
        "task": None,
        "gpus": 8,
        "price_per_gpu_hour": None,
        "passes": 1,
        "bound": StepBound(bound_s, "compute", {"compute": bound_s}),
        "tokens_per_step": 80_000,
        "hbf_optimizer": hbf,
        "wear_floor_s": wear_floor_s,
        "wear_tier": "hbf" if wear_floor_s else None,
        "upper_s": upper_s,
    }
    return Candidate(**{**fields, **more})


def test_a_candidate_is_pruned_only_below_the_kth_best_and_its_group_s_best():
    # top 2; two plans that hold found, off HBF: 10,000 and 8,000 tokens/s. A candidate of
    # 80,000 tokens a step bounded at 10 s can reach 8,000 tokens/s: a tie with the 2nd best,
    # so it is kept (a tie could change the order); at 10.1 s (7,921 tokens/s) it is pruned
    contenders = Contenders("tokens_per_s", 2)
    contenders.best = [8_000.0, 10_000.0]
    contenders.group_best = {False: 10_000.0}
    assert contenders.matters(plan_candidate(10.0))
    assert not contenders.matters(plan_candidate(10.1))
    # on HBF, with no plan on HBF found yet: kept (it might be the first that holds)...
    assert contenders.matters(plan_candidate(10.1, hbf=True))
    # ...unless its wear floor says it cannot hold (inf) and a plan on HBF that fits but
    # wears already scores more than it could
    contenders.worn_best = 9_000.0
    assert not contenders.matters(plan_candidate(10.1, hbf=True, wear_floor_s=math.inf))
    assert dict(contenders.pruned) == {"compute": 1, "hbf wear budget": 1}


def test_the_wear_floor_lowers_the_score_a_plan_that_holds_can_reach():
    # 80,000 tokens a step, a bound of 5 s, a wear floor of 20 s: 16,000 tokens/s at most,
    # but 4,000 as a plan that holds its wear budget
    c = plan_candidate(5.0, wear_floor_s=20.0)
    assert score_bound(c, "tokens_per_s") == pytest.approx(16_000.0)
    assert score_bound(c, "tokens_per_s", holding=True) == pytest.approx(4_000.0)
    # a candidate without a bound (its workload could not be built) is always simulated
    assert score_bound(dataclasses.replace(c, bound=None), "tokens_per_s") == math.inf


def test_a_plan_whose_step_cannot_reach_its_wear_floor_cannot_hold():
    # on HBF, bounded between 5 s and 8 s a step, its budget needing steps of 20 s or more:
    # no run of it holds, so as a plan that holds it reaches nothing (-inf)...
    c = plan_candidate(5.0, hbf=True, wear_floor_s=20.0, upper_s=8.0)
    assert score_bound(c, "tokens_per_s", holding=True) == -math.inf
    # ...and, none on HBF holding yet, it is simulated only while it could still be the best
    # on HBF that fits: 80,000 / 5 = 16,000 tokens/s at most
    contenders = Contenders("tokens_per_s", 2)
    contenders.worn_best = 15_000.0
    assert contenders.matters(c)
    contenders.worn_best = 17_000.0
    assert not contenders.matters(c)
    assert dict(contenders.pruned) == {"hbf wear budget": 1}
    # where its step could be 20 s long (upper bound 25 s), it might hold: simulated
    assert contenders.matters(plan_candidate(5.0, hbf=True, wear_floor_s=20.0, upper_s=25.0))
