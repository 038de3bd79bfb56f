"""Which candidates could still change the plan's answer, as results come in: the rest are
never simulated.

A candidate's score cannot exceed what its step-time bound allows (tiersim.plan.bound: the
tokens of a step over the least time it can take; goodput is at most that, and a cost at
least the price of those tokens), and, as a plan that holds every wear budget, what its
wear floor allows (a step no shorter than its flash writes over the budget's allowance a
day). The answer is the best K plans that hold, and, for "can HBF hold optimizer state?",
the best plan with optimizer state on HBF and the best without (and, while none on HBF
holds, the best on HBF that fits). So a candidate is pruned when, as a plan that holds, its
bound is below the K-th best score found and below the best found in its own group
(optimizer state on HBF or not), and, with optimizer state on HBF while none there holds,
its bound is below the best on HBF that fits but wears. Strictly below: a tie could change
the order. While its group has no plan that holds, it is simulated unless its wear floor
rules out that it holds (it might be the first). The answer from the simulated candidates
is then the answer an exhaustive simulation gives (tests/test_plan_search.py).

A plan whose step, simulated without its checkpoint, is found to hold every wear budget
(tiersim.plan.screening) only claims its group's least best (`claim`): whether its whole run
fits at its peak is known only from that run (the engine's peaks with the checkpoint's, the
GPU's and host's memory timelines). A candidate ruled out only by a claim is parked, not
pruned (`parks`), and judged again once claims no longer count (`confirm`), against the
results alone: a claim whose plan overflows then prunes nothing.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from typing import Any

from tiersim.plan.prune import Candidate
from tiersim.plan.rank import feasible, score, simulated
from tiersim.sweep.worker import PointResult


def score_bound(candidate: Candidate, objective: str, holding: bool = False) -> float:
    """The highest score the candidate could reach (`rank.score`'s scale: higher is better);
    `holding`: as a plan that holds every wear budget (no faster than its wear floor)."""
    if candidate.bound is None:
        return math.inf
    least_s = candidate.bound.time_s
    if holding and candidate.wear_floor_s > candidate.upper_s:
        return -math.inf  # its step cannot be as long as its budget needs: it cannot hold
    if holding:
        least_s = max(least_s, candidate.wear_floor_s)
    if math.isinf(least_s):
        return -math.inf
    tokens_per_s = candidate.tokens_per_step / least_s if least_s > 0 else math.inf
    if objective in ("tokens_per_s", "goodput"):
        return tokens_per_s
    price = candidate.price_per_gpu_hour
    if price is None:
        return -math.inf
    return -(price * candidate.gpus / 3600 / tokens_per_s * 1e6) if tokens_per_s > 0 else -math.inf


class Contenders:
    """The scores found so far, and whether a candidate could still matter."""

    def __init__(self, objective: str, top: int):
        self.objective, self.top = objective, top
        self.best: list[float] = []  # the top scores that hold (a min-heap of at most `top`)
        self.group_best: dict[bool, float] = {}  # HBF optimizer or not -> best that holds
        # HBF optimizer or not -> the least its best that holds scores, by screens (`claim`)
        self.claimed: dict[bool, float] = {}
        self.pruned: Counter = Counter()  # the bound's binding term -> candidates pruned
        self.worn_best = -math.inf  # the best score on HBF of a plan that fits but wears

    def add(self, candidate: Candidate, result: PointResult) -> None:
        sim = simulated(candidate, result)
        if sim.report is None:
            return
        value = score(sim, self.objective)
        if not feasible(sim):
            if candidate.hbf_optimizer and sim.report["fits"]:
                self.worn_best = max(self.worn_best, value)
            return
        heapq.heappush(self.best, value)
        if len(self.best) > self.top:
            heapq.heappop(self.best)
        group = candidate.hbf_optimizer
        self.group_best[group] = max(self.group_best.get(group, -math.inf), value)

    def matters(self, candidate: Candidate) -> bool:
        """Whether the candidate could still enter the answer (`could_matter`); if not,
        counted as pruned, by the bound that rules it out."""
        if self.could_matter(candidate):
            return True
        kth = self.best[0] if len(self.best) >= self.top else -math.inf
        own = self.group_best.get(candidate.hbf_optimizer, -math.inf)
        self.pruned[self._why(candidate, kth, own)] += 1
        return False

    def could_matter(self, candidate: Candidate, claims: bool = True) -> bool:
        """Whether the candidate could still enter the answer (module docstring): among the
        best K or first in its group as a plan that holds, or, with optimizer state on HBF
        while none such holds, as the best that fits. Results added later only lower it.
        `claims`: the screens' claims (`claim`) count as results."""
        if candidate.bound is None:
            return True
        holding = score_bound(candidate, self.objective, holding=True)
        kth = self.best[0] if len(self.best) >= self.top else -math.inf
        own = self._own(candidate.hbf_optimizer, claims)
        if holding > -math.inf and (holding >= kth or holding >= own):
            return True
        return self._could_be_worn_best(candidate, claims)

    def parks(self, candidate: Candidate) -> bool:
        """Whether the candidate is ruled out only by a claim (`claim`): not counted as
        pruned, judged again once the claims are confirmed or not (`confirm`)."""
        return not self.could_matter(candidate) and self.could_matter(candidate, claims=False)

    def confirm(self) -> None:
        """Claims count no more: only the results do (the plans that claimed have run in
        full, where they still mattered); parked candidates are judged again against them."""
        self.claimed = {}

    def _own(self, group: bool, claims: bool) -> float:
        own = self.group_best.get(group, -math.inf)
        return max(own, self.claimed.get(group, -math.inf)) if claims else own

    def _could_be_worn_best(self, candidate: Candidate, claims: bool) -> bool:
        """With optimizer state on HBF while none there holds (nor claims to): it could be
        the best there that fits."""
        holds = True in self.group_best or (claims and True in self.claimed)
        worn = candidate.hbf_optimizer and not holds
        return worn and score_bound(candidate, self.objective) >= self.worn_best

    def decided(self, candidate: Candidate, wears: bool) -> bool | None:
        """Whether a candidate whose step was simulated without its checkpoint is settled
        (tiersim.plan.screening): it cannot hold its wear budget (`wears`) and cannot be
        the best on HBF that fits either (counted as pruned by its budget, its step
        simulated); else it is simulated in full once it still matters. None: settled only
        by a claim (`parks`), not counted."""
        if not wears or self._could_be_worn_best(candidate, claims=True):
            return False
        if self._could_be_worn_best(candidate, claims=False):
            return None
        self.pruned[f"{candidate.wear_tier} wear budget, by its simulated step"] += 1
        return True

    def claim(self, candidate: Candidate, step_s: float) -> bool:
        """A candidate found to hold every wear budget with a step of at most `step_s`
        (tiersim.plan.screening): its group's best that holds scores at least what that
        step gives, for tokens/s (a step's tokens over it), if its whole run fits at its
        peak; claimed until then (`parks`, `confirm`). False for other objectives (its
        score needs the whole run)."""
        if self.objective != "tokens_per_s" or step_s <= 0:
            return False
        least = candidate.tokens_per_step / step_s
        group = candidate.hbf_optimizer
        self.claimed[group] = max(self.claimed.get(group, -math.inf), least)
        return True

    def _why(self, candidate: Candidate, kth: float, own: float) -> str:
        """The bound that ruled the candidate out: its step time's binding term, or the wear
        budget of a tier where the step time alone would not have."""
        reach = score_bound(candidate, self.objective)
        if reach < kth and reach < own:
            return candidate.bound.binding
        return f"{candidate.wear_tier} wear budget"

    def order(self, candidates: list[Any]) -> list[int]:
        """Positions of `candidates` best bound first (ties in the search's order)."""
        return sorted(
            range(len(candidates)), key=lambda i: -score_bound(candidates[i], self.objective)
        )
