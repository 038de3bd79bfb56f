"""The candidates a plan keeps to simulate, and the counts of those it does not: invalid, not
fitting, or set aside as another's. A candidate is set aside where one kept before has its
key (`prune.Checker._key`): a duplicate where the key is the same (equal scenarios, however
written, or differing only in the home of a class none holds a byte of), collapsed where it
differs only in a knob the candidate's run does not read (`UNREAD`: the prefetch depth of a
run that fetches nothing, tiersim.engine.depth_reads): simulated, it would give the same
report but for the knob said back.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tiersim.config.overrides import set_path
from tiersim.core.records import record
from tiersim.engine.depth_reads import PREFETCH_DEPTH
from tiersim.plan.bound import StepBound
from tiersim.plan.nearest import Miss, nearer
from tiersim.sweep.worker import PointTask

# a key's mark on the prefetch depth its run does not read: the key of the candidates alike
# but for it has the mark alone in its place (`alike`)
UNREAD = "~"


@record(slots=True)
class Candidate:
    overrides: tuple[str, ...]  # `path=value`, as `tiersim run --set` takes them
    values: dict[str, Any]  # path -> value
    task: PointTask | None  # built when it is simulated (`Pruned.task`); None until then
    gpus: int  # the job's GPUs: the mesh's world (data x tensor x pipeline x context)
    price_per_gpu_hour: float | None
    passes: int  # layer passes it simulates, to estimate its time by
    bound: StepBound | None = None  # its step can take no less (None: not bounded)
    tokens_per_step: int = 0
    hbf_optimizer: bool = False  # optimizer state homed (in part) on HBF (plan.rank.HBF)
    # a plan holding every wear budget takes at least this long a step (plan.bound.wear_floor)
    wear_floor_s: float = 0.0
    wear_tier: str | None = None  # the tier whose budget sets it
    # tier capital per GB and the period it is written off over (tiersim.analysis.cost)
    tier_prices: dict[str, float] = field(default_factory=dict)
    amortization_s: float | None = None
    # its step's period can take no more (plan.upper, with its margin): where that is under
    # the wear floor, no run of it holds the budget
    upper_s: float = math.inf
    # of which a durable checkpoint's stall share (with the margin): its period is at most its
    # step as simulated plus this (tiersim.plan.screening)
    checkpoint_upper_s: float = math.inf


@dataclass
class Pruned:
    kept: list[Candidate] = field(default_factory=list)
    checked: int = 0
    invalid: Counter = field(default_factory=Counter)  # reason -> candidates
    unfit: Counter = field(default_factory=Counter)  # tier -> candidates it cannot hold
    unfit_candidates: int = 0  # candidates some tier cannot hold
    duplicates: int = 0
    # of those, the ones that differ at most in the home of a class none holds a byte of (an
    # optimizer without state: sgd), by the classes ("optimizer", `Checker._key`)
    empty_homes: Counter = field(default_factory=Counter)
    # set aside as differing from one kept only in a knob their run does not read, by the
    # knob ("simulation.prefetch_depth"): not counted among the duplicates
    collapsed: Counter = field(default_factory=Counter)
    keys: list[str] = field(default_factory=list)  # each kept candidate's scenario key
    seen: set[str] = field(default_factory=set)  # the keys kept, `alike`: to set one aside by
    exact: set[str] = field(default_factory=set)  # every key met: a duplicate's, or collapsed
    # the keys set aside, in order, each with its knob's value (`merge`)
    aside: list[tuple[str, Any]] = field(default_factory=list)
    # the knob's values collapsed into each one kept, by its key `alike` (`collapsed_into`)
    twins: dict[str, list[Any]] = field(default_factory=dict)
    base: tuple[dict[str, Any], str, str] | None = None  # (mapping, folder, source)
    nearest: Miss | None = None  # the unfit candidate nearest to fitting (plan.nearest)

    def task(self, candidate: Candidate) -> PointTask:
        """The candidate's point as a worker runs it: the scenario's mapping with its
        choices written in (the search's own runs price the wear remedies: plan.run)."""
        if candidate.task is not None:
            return candidate.task
        assert self.base is not None  # set by `prune`
        raw, folder, source = self.base
        mapping = copy.deepcopy(raw)
        for path, value in candidate.values.items():
            set_path(mapping, path.split("."), copy.deepcopy(value))
        sets = " --set ".join(candidate.overrides)
        return PointTask(mapping, folder, f"{source} --set {sets}", remedies=False)

    def take(self, key: str, candidate: Candidate) -> None:
        """A candidate that fits, with its scenario's key: kept, or set aside where one kept
        before is alike (`alike`)."""
        same = alike(key)
        if same in self.seen:
            self.set_aside(key, candidate.values.get(PREFETCH_DEPTH))
            return
        self.seen.add(same)
        self.exact.add(key)
        self.keys.append(key)
        self.kept.append(candidate)

    def set_aside(self, key: str, value: Any = None) -> None:
        """A duplicate where a candidate met before had the same key; else collapsed into
        the one kept, by the knob its run does not read (at `value`)."""
        self.aside.append((key, value))
        if key in self.exact:
            self.duplicates += 1
            empty = key.split("|")[2:]
            if empty:
                self.empty_homes[" and ".join(empty)] += 1
            return
        self.exact.add(key)
        self.collapsed[PREFETCH_DEPTH] += 1  # the one knob a key marks (`UNREAD`)
        self.twins.setdefault(alike(key), []).append(value)

    def collapsed_into(self, candidates: list[Candidate]) -> list[dict[str, list[Any]]]:
        """For each of `candidates` (kept ones), the knob's values collapsed into it: {}
        where none were, else {"simulation.prefetch_depth": [2, 4]}."""
        where = {id(c): i for i, c in enumerate(self.kept)}
        out = []
        for c in candidates:
            i = where.get(id(c))
            values = [] if i is None else self.twins.get(alike(self.keys[i]), [])
            out.append({PREFETCH_DEPTH: values} if values else {})
        return out

    def not_counting(self) -> str:
        """', not counting 3 duplicates and 12 collapsed': those set aside as another's."""
        n, collapsed = self.duplicates, sum(self.collapsed.values())
        said = [f"{n:,} duplicate{'s' * (n != 1)}"] if n else []
        said += [f"{collapsed:,} collapsed"] if collapsed else []
        return f", not counting {' and '.join(said)}" if said else ""

    def merge(self, part: Pruned) -> None:
        """`part`'s candidates (checked after this one's) added: its kept ones, then those it
        set aside, each taken again here (one set aside is counted as it would be among all
        the candidates: a candidate kept in `part` after it is never alike it)."""
        self.checked += part.checked
        self.invalid.update(part.invalid)
        self.unfit.update(part.unfit)
        self.unfit_candidates += part.unfit_candidates
        self.nearest = nearer(self.nearest, part.nearest)
        for key, candidate in zip(part.keys, part.kept, strict=True):
            self.take(key, candidate)
        for key, value in part.aside:
            self.set_aside(key, value)


def alike(key: str) -> str:
    """The key of the candidates that differ from this one at most in a knob its run does not
    read: the mark alone where the key's depth is marked unread."""
    digest, depth, *empty = key.split("|")
    if not depth.startswith(UNREAD):
        return key
    return "|".join((digest, UNREAD, *empty))
