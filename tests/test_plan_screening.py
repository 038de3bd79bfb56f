"""A large space's contenders whose wear their bounds leave open have their step simulated
without the durable checkpoint first (tiersim.plan.screening): one whose step is too short
for its wear floor is settled there, and the answer is still the exhaustive search's."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
import json
import math

import pytest
from conftest import SCENARIOS
from test_plan_search import exhaustively, plan_candidate

from tiersim.cli import main
from tiersim.config.overrides import apply_overrides
from tiersim.config.yamlfile import read_yaml
from tiersim.plan import chunks, screening, simulating
from tiersim.plan import run as run_module
from tiersim.plan.contenders import Contenders
from tiersim.plan.prune import Candidate, Pruned
from tiersim.plan.screening import (
    SIMULATED,
    Screened,
    plain_step,
    screenable,
    tightened,
    wears,
    worth_screening,
)
from tiersim.sweep.worker import PointTask, run_point

# The default scenario (its checkpoint kept: every 1,000 steps, async to NVMe) cut to 4 layers
# so each run is quick, with a 6-month HBF budget: its wear floor, 1.41 s a step at ZeRO 1
# and 3, lies between the steps of these plans (1.07-2.07 s), so some HBF plans hold and some
# wear, and every HBF plan's bounds leave its wear open (its step bound about 1.05-1.09 s,
# its period's upper bound 2.5-8 s): 2 x 2 x 2 x 2 x 2 = 32 candidates, 16 on HBF
SETS = ("--set", "model.layers=4", "--set", "budget.hbf.lifetime=0.5 years")
PLAN = """plan:
  placement.optimizer: [hbm, hbf]
  placement.gradients: [hbm, dram]
  placement.master: [hbm, dram]
  placement.activations: [hbm, dram]
  parallel.zero_stage: [1, 3]
"""
SCREENED = "hbf wear budget, by its simulated step"


def _plan(path, *sets: str, top: int = 3, said: list | None = None) -> dict:
    out, err = io.StringIO(), io.StringIO()
    args = ["plan", str(path), "--format", "json", "--workers", "2", "--top", str(top)]
    args += [*SETS, *sets]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    assert code == 0, err.getvalue()
    if said is not None:
        said.append(err.getvalue())
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def screened_and_exhaustive(tmp_path_factory):
    path = tmp_path_factory.mktemp("screening") / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    with pytest.MonkeyPatch.context() as mp:  # searched as a large space is: screened
        mp.setattr(run_module, "LARGE", 0)
        mp.setattr(chunks, "CHUNK", 16)
        screened = _plan(path, said=LARGE_SAID)
    with pytest.MonkeyPatch.context() as mp:  # every candidate simulated in full
        exhaustively(mp)
        exhaustive = _plan(path)
    return screened, exhaustive, path


LARGE_SAID: list[str] = []  # what the search as a large space wrote to stderr


def test_a_large_space_says_what_it_does_before_its_check(screened_and_exhaustive):
    # its first line at once, then the check's bar at 0 before any chunk is back (a large
    # space's check takes minutes: the default space's printed nothing for 12-25 s)
    lines = LARGE_SAID[0].splitlines()
    assert lines[0] == (
        "plan: checking the 32 candidates of its plan: section against the inventory on 2 "
        "workers; then the best bounds are sampled and the contenders simulated"
    )
    assert lines[1].startswith("[------------------------] 0/32 candidates checked against")


@pytest.fixture(scope="module")
def small_screened(screened_and_exhaustive):
    """The same space searched as a small space is (checked here, a sample spread over it),
    each candidate the search screens recorded: (optimizer on HBF, its wear floor, its step
    bound before its screen and after)."""
    path = screened_and_exhaustive[2]
    seen: list[tuple[bool, float, float, float]] = []

    def recorded(c: Candidate, outcome: Screened) -> Candidate:
        after = tightened(c, outcome)
        seen.append((c.hbf_optimizer, c.wear_floor_s, c.bound.time_s, after.bound.time_s))
        return after

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulating, "tightened", recorded)
        return _plan(path), seen


def test_a_screened_search_gives_the_exhaustive_search_s_answer(screened_and_exhaustive):
    screened, exhaustive, _ = screened_and_exhaustive
    assert screened["plans"] == exhaustive["plans"]
    assert screened["hbf_optimizer"] == exhaustive["hbf_optimizer"]
    assert screened["hbf_optimizer"]["with"] is not None  # an HBF plan holds: the case screened
    by_bound = screened["candidates"]["pruned_by_bound"]
    assert by_bound.get(SCREENED, 0) > 0, by_bound  # found to wear by the screen
    # found to hold by the screen, and then below the best HBF plan that holds
    assert by_bound.get(SIMULATED, 0) > 0, by_bound
    assert exhaustive["candidates"]["pruned_by_bound"] == {}
    # every candidate either simulated in full or counted as pruned, by what ruled it out
    simulated = exhaustive["candidates"]["simulated"]
    assert simulated == 32
    assert screened["candidates"]["simulated"] + sum(by_bound.values()) == simulated


def test_a_small_space_s_contenders_are_screened_too_and_the_answer_is_the_same(
    screened_and_exhaustive, small_screened
):
    # every contender with a durable checkpoint (here all of them, every 1,000 steps) has its
    # step simulated first, wear or not: those off HBF (no wear floor) have their step bound
    # raised to it, and only those still among the best are run in full; the answer is still
    # the exhaustive search's, and every candidate is simulated or counted
    _, exhaustive, _ = screened_and_exhaustive
    small, seen = small_screened
    assert small["plans"] == exhaustive["plans"]
    assert small["hbf_optimizer"] == exhaustive["hbf_optimizer"]
    off_hbf = [(before, after) for hbf, floor, before, after in seen if not hbf and floor == 0]
    assert off_hbf, seen  # screened without a wear floor to judge
    assert all(after >= before for before, after in off_hbf)
    assert any(after > before for before, after in off_hbf)  # its step over its bound
    by_bound = small["candidates"]["pruned_by_bound"]
    assert by_bound.get(SIMULATED, 0) > 0, by_bound
    simulated = exhaustive["candidates"]["simulated"]
    assert small["candidates"]["simulated"] + sum(by_bound.values()) == simulated
    assert small["candidates"]["simulated"] < simulated


def test_screened_wear_or_not_where_a_checkpoint_s_runs_are_saved():
    # a bound, a period bounded above, a checkpoint's share of it in (0, inf): screened
    assert worth_screening(_candidate(0.0, 0.05))  # no wear floor: its step bound raised
    assert not worth_screening(_candidate(0.0, 0.0))  # no checkpoint: nothing to save
    assert not worth_screening(_candidate(0.0, math.inf))  # interval chosen by the run
    # a flash tier whose dies reads and programs share: its period is not bounded above
    # (its whole run sets the ports from a first simulation, so its step is not the plain one)
    assert not worth_screening(plan_candidate(1.0, checkpoint_upper_s=0.05))
    unbounded = plan_candidate(1.0, upper_s=4.0, checkpoint_upper_s=0.05, bound=None)
    assert not worth_screening(unbounded)  # no bound to raise


def test_a_screen_without_a_wear_floor_raises_the_bound_only():
    # a candidate off HBF (no wear floor) bounded at 1 s, simulated at 1.5 s: its bound is
    # 1.5 x (1 - 1e-9) s and it waits to run in full (it is not settled: its whole run is
    # what ranks it), whatever the screen says of wear
    c = _candidate(0.0, 0.05, hbf=False)
    rest = simulating.Rest(Pruned(kept=[c]), Contenders("tokens_per_s", 2), None, [], [])
    rest.screened(0, Screened(1.5, 0.01, worn=True, holds=True))
    assert rest.later == [0] and rest.deferred == []
    assert rest.pruned.kept[0].bound.time_s == pytest.approx(1.5 * (1 - 1e-9), rel=1e-15)
    assert rest.pruned.kept[0].bound.binding == SIMULATED
    assert not rest.contenders.pruned and not rest.contenders.group_best


def _task(path, *sets: str) -> PointTask:
    """One plan of the space as the search sends it: the scenario with its choices set."""
    mapping = apply_overrides(read_yaml(path, str(path)), [*SETS[1::2], *sets], str(path))
    mapping.pop("plan")
    return PointTask(mapping, str(path.parent), str(path), remedies=False)


def test_the_step_without_the_checkpoint_is_the_whole_run_s_off_hbf(screened_and_exhaustive):
    # the same for a plan with no wear floor (everything on HBM, ZeRO 3), which the search
    # now screens too: its simulated step is the one its whole run reports, to round-off
    path = screened_and_exhaustive[2]
    homes = ("placement.optimizer=hbm", "placement.master=hbm", "placement.gradients=hbm")
    task = _task(path, *homes, "parallel.zero_stage=3", "placement.activations=hbm")
    report = json.loads(run_point(task).report_json)
    assert report["checkpoint"] is not None
    screened = plain_step(task, report["checkpoint"]["stall_s"] / 1000)
    assert screened.step_s == pytest.approx(report["step"]["time_s"], rel=1e-12)


@pytest.mark.parametrize("activations", ["hbm", "dram"])
def test_the_step_without_the_checkpoint_is_the_whole_run_s(screened_and_exhaustive, activations):
    # the step the screen simulates is the one the whole run reports (its checkpoint is
    # measured in runs of its own), up to round-off (the two extrapolate it from runs of their
    # own lengths), far inside screening.ROUND_OFF (1e-9): at ZeRO 1 with optimizer state on
    # HBF, master weights and gradients on HBM, activations on HBM (a step of about 1.07 s,
    # under the 1.41 s floor: it wears) and on DRAM (about 1.93 s: it holds)
    path = screened_and_exhaustive[2]
    homes = ("placement.optimizer=hbf", "placement.master=hbm", "placement.gradients=hbm")
    task = _task(path, *homes, "parallel.zero_stage=1", f"placement.activations={activations}")
    report = json.loads(run_point(task).report_json)
    assert report["checkpoint"] is not None  # the checkpoint is simulated in the whole run
    # judged at the whole run's period (its step and its checkpoint's stall over its 1,000
    # steps), the plain run's writes give the whole run's verdict on the HBF budget
    share = report["checkpoint"]["stall_s"] / 1000
    screened = plain_step(task, share)
    assert screened.step_s == pytest.approx(report["step"]["time_s"], rel=1e-12)
    assert screened.worn == (not report["wear"]["hbf"]["within_budget"])
    assert screened.worn == (activations == "hbm")


def _candidate(floor_s: float, checkpoint_s: float, hbf: bool = True) -> Candidate:
    tier = "hbf" if floor_s else None
    return plan_candidate(1.0, hbf, floor_s, 4.0, wear_tier=tier, checkpoint_upper_s=checkpoint_s)


def test_a_step_too_short_for_its_floor_with_its_checkpoint_s_share_wears():
    # floor 2.0 s; a step of 1.9 s plus a checkpoint share of at most 0.05 s: 1.95 s < 2.0 s,
    # wears; with a share of 0.1 s, 2.0 s: could hold (not under the floor)
    assert wears(_candidate(2.0, 0.05), Screened(1.9, 0.0))
    assert not wears(_candidate(2.0, 0.1), Screened(1.9, 0.0))
    assert not wears(_candidate(2.0, 0.05), Screened(None, 0.0))  # not simulated: undecided
    # screened where it has a wear budget to hold (a floor) and its period is bounded
    assert screenable(_candidate(2.0, 0.05))
    assert screenable(_candidate(0.5, 0.05))  # its bound over its floor: it may still wear
    assert not screenable(_candidate(0.0, 0.05))  # no wear budget binds
    assert not screenable(_candidate(2.0, math.inf))  # its checkpoint's share is not bounded
    # worn by its writes at its longest period, whatever its floor says
    assert wears(_candidate(2.0, 0.1), Screened(1.9, 0.0, worn=True))


def test_a_plan_found_to_wear_is_settled_once_it_cannot_be_the_best_that_fits():
    contenders = Contenders("tokens_per_s", 2)
    c = _candidate(2.0, 0.05)
    # none on HBF holds yet and it could be the best there that fits (80,000 / 1 s a step at
    # most, over the 70,000 found): simulated in full
    contenders.worn_best = 70_000.0
    assert not contenders.decided(c, wears=True)
    # one on HBF holds: a plan that wears cannot enter the answer
    contenders.group_best = {True: 30_000.0}
    assert contenders.decided(c, wears=True)
    assert not contenders.decided(c, wears=False)  # it might hold: simulated in full
    assert dict(contenders.pruned) == {SCREENED: 1}


def test_a_plan_found_to_hold_claims_the_least_its_group_s_best_scores():
    # 80,000 tokens a step, found to hold with a step of at most 2 s: the best HBF plan that
    # holds scores at least 80,000 / 2 = 40,000 tokens/s; a later 1.6 s one lifts it to 50,000;
    # claimed, not a result: whether its whole run fits is known only from that run
    contenders = Contenders("tokens_per_s", 2)
    assert contenders.claim(_candidate(2.0, 0.05), 2.0)
    assert contenders.claimed == {True: 40_000.0} and contenders.group_best == {}
    contenders.claim(_candidate(2.0, 0.05), 1.6)
    assert contenders.claimed == {True: 50_000.0}
    # an objective whose score needs the whole run (goodput, cost): nothing set
    assert not Contenders("goodput", 2).claim(_candidate(2.0, 0.05), 2.0)


@pytest.mark.parametrize("large", [False, True])
def test_a_plan_found_to_hold_sets_its_group_s_least_best_only_in_a_large_space(large):
    # on HBF, floor 2 s, a checkpoint's share of at most 0.05 s, simulated at 2.5 s and found
    # to hold: a large space takes 80,000 / (2.5 x (1 + 1e-9)) tokens/s as its group's least
    # best and runs it in full last; a small space runs it in full next and sets nothing
    c = _candidate(2.0, 0.05)
    rest = simulating.Rest(Pruned(kept=[c]), Contenders("tokens_per_s", 2), None, [], [])
    rest.wear_screens = large
    rest.screened(0, Screened(2.5, 0.01, holds=True))
    if large:
        assert rest.deferred == [0] and rest.later == []
        assert rest.contenders.claimed[True] == pytest.approx(80_000 / 2.5, rel=1e-8)
    else:
        assert rest.later == [0] and rest.deferred == []
        assert rest.contenders.claimed == {}
    assert rest.contenders.group_best == {}  # a claim is no result


def test_a_candidate_ruled_out_only_by_a_claim_is_parked_then_judged_again():
    # top 1, the best off HBF 100,000 tokens/s; a screen claims HBF plans that hold score at
    # least 40,000 (80,000 tokens over 2 s). An HBF candidate bounded at 2.5 s (80,000 / 2.5 =
    # 32,000 tokens/s at most) is ruled out by that claim alone: parked, not counted as pruned;
    # once claims no longer count (its claimer's whole run did not fit), it matters again
    contenders = Contenders("tokens_per_s", 1)
    contenders.best, contenders.group_best = [100_000.0], {False: 100_000.0}
    contenders.claim(_candidate(2.0, 0.05), 2.0)
    c = plan_candidate(2.5, hbf=True, wear_floor_s=2.0, upper_s=4.0)
    assert contenders.parks(c) and not contenders.could_matter(c)
    contenders.confirm()
    assert not contenders.parks(c) and contenders.matters(c)
    assert not contenders.pruned
    # found to wear, where none on HBF holds but a claim: settled only by it (None)
    contenders.worn_best = 30_000.0
    contenders.claim(_candidate(2.0, 0.05), 2.0)
    assert contenders.decided(c, wears=True) is None and not contenders.pruned


@pytest.fixture(scope="module")
def overflowing_claim(tmp_path_factory):
    """The 32-candidate space on an HBM of 8.4 GB, best 1, searched as a large space with no
    sample (so the search alone decides: a sample that runs the HBF plans first hides the
    case) and exhaustively. The best HBF plan that holds by its screen (ZeRO 1, gradients
    and master on HBM, activations on DRAM: 282,959 tokens/s) peaks at 8.7 GB on HBM: its
    whole run does not fit; the next (master on DRAM, 282,586 tokens/s) peaks at 8.1 GB."""
    path = tmp_path_factory.mktemp("claim") / "default.yaml"
    path.write_text((SCENARIOS / "default.yaml").read_text() + "\n" + PLAN)
    sets = ("--set", "hardware.tiers.hbm.capacity=8.4 GB")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_module, "LARGE", 0)
        mp.setattr(chunks, "CHUNK", 16)
        mp.setattr(run_module, "_sample_best", lambda *args: ({}, 0.0))
        screened = _plan(path, *sets, top=1)
    with pytest.MonkeyPatch.context() as mp:  # the screen blind to the claimer's overflow
        mp.setattr(run_module, "LARGE", 0)
        mp.setattr(chunks, "CHUNK", 16)
        mp.setattr(run_module, "_sample_best", lambda *args: ({}, 0.0))
        mp.setattr(simulating, "run_on_pool", lambda *args: args[-1](_Inline()))
        mp.setattr(screening, "plain_step", _blind(screening.plain_step))
        blind = _plan(path, *sets, top=1)
    with pytest.MonkeyPatch.context() as mp:
        exhaustively(mp)
        exhaustive = _plan(path, *sets, top=1)
    return screened, blind, exhaustive, path


class _Inline:
    """A pool of two slots that runs each call here as it is submitted (so the screen can be
    replaced), its results taken one at a time."""

    slots, same_files = 2, True

    def submit(self, fn, arg):
        future = concurrent.futures.Future()
        future.set_result(fn(arg))
        return future

    def wait(self, pending):
        return {next(iter(pending))}


def _blind(plain_step):
    """The screen as it would be where the claimer's overflow showed only in its whole run
    (a durable checkpoint's peak): found to hold where its writes hold its budget."""

    def screened(task: PointTask, share: float = 0.0) -> Screened:
        out = plain_step(task, share)
        homes = task.raw["placement"]
        claimer = (
            (homes["optimizer"], homes["master"], homes["activations"])
            == (
                "hbf",
                "hbm",
                "dram",
            )
            and homes["gradients"] == "hbm"
            and task.raw["parallel"]["zero_stage"] == 1
        )
        return dataclasses.replace(out, holds=True) if claimer and not out.worn else out

    return screened


def test_a_claim_whose_whole_run_overflows_prunes_nothing(overflowing_claim):
    screened, blind, exhaustive, path = overflowing_claim
    # the screen sees the claimer's plain run overflow HBM (8.7 GB at its peak): no claim;
    # blind to it, it claims, and what only that ruled out is judged again: the same answer
    for search in (screened, blind):
        assert search["hbf_optimizer"] == exhaustive["hbf_optimizer"]
        assert search["plans"] == exhaustive["plans"]
        by_bound = search["candidates"]["pruned_by_bound"]
        assert search["candidates"]["simulated"] + sum(by_bound.values()) == 30
    homes = ("placement.optimizer=hbf", "placement.gradients=hbm")
    rest = ("placement.activations=dram", "parallel.zero_stage=1")  # in the space's order
    on_hbm, on_dram = (
        (*homes, "placement.master=hbm", *rest),
        (*homes, "placement.master=dram", *rest),
    )
    # checked by their own runs, as `tiersim run` reports them: the claimer overflows at its
    # peak though it holds its budget; the answer is the next, which fits and holds
    hbm = "hardware.tiers.hbm.capacity=8.4 GB"
    claimer = json.loads(run_point(_task(path, hbm, *on_hbm)).report_json)
    assert not claimer["fits"] and claimer["wear"]["hbf"]["within_budget"]
    answer = json.loads(run_point(_task(path, hbm, *on_dram)).report_json)
    assert answer["fits"] and answer["wear"]["hbf"]["within_budget"]
    found = screened["hbf_optimizer"]["with"]
    assert found is not None and tuple(found["overrides"]) == on_dram
    assert found["score"] == answer["step"]["tokens_per_s"]
