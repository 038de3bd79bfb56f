"""Pruning with the exact inventory: a candidate that is not a valid scenario, has no route for
a movement its placement implies, or whose resident state does not fit a tier is never
simulated. Equal scenarios (written differently) are simulated once, and so are candidates
that differ only in a prefetch depth their run does not read (tiersim.plan.pruned)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tiersim.analysis.cost import tier_prices
from tiersim.analysis.flash import interfering
from tiersim.config.consistency import consistency_problems
from tiersim.config.load import Loaded, build, build_resolved
from tiersim.config.mesh import Mesh
from tiersim.config.overrides import set_path
from tiersim.config.presets import resolve as resolve_presets
from tiersim.config.schema import ExpertPlacement, Placement, Scenario
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.core.records import record
from tiersim.engine import margins
from tiersim.engine.depth_reads import reads_prefetch_depth
from tiersim.hardware.topology import Topology
from tiersim.plan.bound import StepBound, step_bound, wear_floor
from tiersim.plan.nearest import Over, bytes_over, missed, overflowing
from tiersim.plan.pruned import UNREAD, Candidate, Pruned
from tiersim.plan.space import override_text
from tiersim.plan.upper import alike_runs, checkpoint_share_s, margin, serial_step_s
from tiersim.runner import check_runnable
from tiersim.state.classes import STATE_CLASSES
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import Resolved, resolve
from tiersim.sweep.estimate import layer_passes
from tiersim.workload.work import build_workload

PRESET_SECTIONS = ("model.", "hardware.", "model", "hardware")  # what presets fill
HBF = "hbf"  # the tier of "can HBF hold optimizer state?" (plan.rank.HBF)
PREFETCH = "simulation.prefetch_depth"
PLACED = "placement."  # the choices `Checker._placed` sets in a scenario built before
NO_DEPTH = {"simulation": {"prefetch_depth"}}  # a key's scenario but the depth (`_key`)
RECENT = 64  # valid scenarios kept to set another prefetch depth in (a space's last keys')
# the classes a placement homes (placement.<class>, and placement.experts.<class> where it has it)
PLACED_CLASSES = tuple(c.name for c in STATE_CLASSES if c.name in Placement.model_fields)
# the choices a workload's shared parts never read (workload.work.build_workload)
HOME_CHOICES = frozenset(
    {f"placement.{c.name}" for c in STATE_CLASSES} | {"placement.optimizer_compute"}
)


def prune(
    raw: dict[str, Any],
    base_dir: Path,
    source: str,
    combos: Iterable[tuple[tuple[str, Any], ...]],
    progress: Callable[[int], None] = lambda n: None,
) -> Pruned:
    out = Pruned(base=(raw, str(base_dir.resolve()), source))
    check = Checker(raw, base_dir, source)
    for combo in combos:
        out.checked += 1
        candidate, key = check(combo, out)
        if candidate is not None:
            out.take(key, candidate)
        if out.checked % 100 == 0:
            progress(out.checked)
    return out


@record(slots=True)
class Assessed:
    """What a candidate's inventory, bounds and wear floor say: the same for candidates that
    differ only in `simulation.*` (the inventory and the workload never read that section)."""

    over: Over  # (tier, resident bytes, capacity) of each its resident state does not fit
    empty: tuple[str, ...] = ()  # placed classes that hold no byte in the whole model
    bound: StepBound | None = None
    tokens: int = 0
    hbf_optimizer: bool = False
    floor: tuple[float, str | None] = (0.0, None)
    upper_s: float = math.inf
    checkpoint_upper_s: float = math.inf  # the part of `upper_s` a checkpoint's stall adds
    one_period: bool | None = None  # its run measures one period (margins.one_period)
    costs: tuple = ()  # (GPUs, price per GPU-hour, tier prices, amortization): `costs`
    reads_depth: bool = True  # its run reads its prefetch depth (engine.depth_reads)


class Checker:
    """Checks candidates of one scenario one by one: valid, runnable, fitting the exact
    inventory; bounded. Each `path=value` text is written once, and what a candidate's
    `simulation.*` choices do not change is worked out once (`Assessed`)."""

    def __init__(self, raw: dict[str, Any], base_dir: Path, source: str):
        self.raw, self.base_dir, self.source = raw, base_dir, source
        self.texts: dict[tuple[str, Any], str] = {}
        self.assessed: dict[tuple, Assessed] = {}
        # what of a workload its classes' homes do not change, by the other choices
        # (workload.work.build_workload's `shared`)
        self.workloads: dict[tuple, dict] = {}
        # the valid scenarios built last, by their choices but the prefetch depth (`_scenario`)
        self.recent: dict[tuple, Scenario] = {}
        self.passes: dict[tuple, int] = {}  # their layer passes (`_passes`)
        self.dumps: dict[tuple, str] = {}  # their keys but the prefetch depth's (`_key`)
        # valid scenarios built from the resolved mapping, by their choices but placement.*
        # (`_placed`)
        self.placed: dict[tuple, Loaded] = {}
        problems: list = []  # the scenario's presets merged in once (`_built`)
        self.resolved = resolve_presets(copy.deepcopy(raw), base_dir, problems)
        self.resolved = None if problems else self.resolved

    def _built(self, combo) -> tuple[Loaded, bool]:
        """The candidate's scenario: where its choices are outside the sections presets and
        config.json fill (model:, hardware:), from the scenario resolved once with them
        written in; else, or where that has a problem, built as written (`build`, which
        raises the problems as a run would); and whether it was the former."""
        if self.resolved is not None and not any(p.startswith(PRESET_SECTIONS) for p, _ in combo):
            mapping = dict(self.resolved)
            for section in {p.split(".")[0] for p, _ in combo} | {"training"}:
                mapping[section] = copy.deepcopy(self.resolved.get(section, {}))
            for path, value in combo:
                set_path(mapping, path.split("."), copy.deepcopy(value))
            loaded = build_resolved(mapping, self.source)
            if loaded is not None:
                return loaded, True
        # built from the mapping with the choices written in, not as --set overrides: its
        # problems are the plan's choices, not a --set the user never typed
        mapping = copy.deepcopy(self.raw)
        for path, value in combo:
            set_path(mapping, path.split("."), copy.deepcopy(value))
        return build(mapping, self.base_dir, self.source), False

    def text(self, path: str, value: Any) -> str:
        key = (path, type(value), value)
        if key not in self.texts:
            self.texts[key] = override_text(path, value)
        return self.texts[key]

    def _scenario(self, combo, rest: tuple) -> Scenario:
        """The candidate's scenario, valid and runnable (else InputError); `rest`: its
        choices but the prefetch depth. One that differs from a valid candidate built just
        before only in its prefetch depth, a whole number of at least 1, is that one's with
        the depth set: no check reads the depth beside other keys (config.consistency, the
        routes, the wear and checkpoint inputs), and its field (PositiveInt) keeps such a
        number as given (tests/test_plan_shared.py)."""
        depth = dict(combo).get(PREFETCH)
        base = self.recent.get(rest)
        if base is not None and type(depth) is int and depth >= 1:
            sim = base.simulation.model_copy(update={"prefetch_depth": depth})
            return base.model_copy(update={"simulation": sim})
        others = tuple((p, type(v), v) for p, v in combo if not p.startswith(PLACED))
        loaded = self._placed(combo, others)
        if loaded is None:
            loaded, from_resolved = self._built(combo)
            if from_resolved:
                if len(self.placed) >= RECENT:
                    self.placed.clear()
                self.placed[others] = loaded  # valid: placements are set in it next
        check_runnable(loaded)
        if len(self.recent) >= RECENT:
            self.recent.clear()
            self.passes.clear()
        self.recent[rest] = loaded.scenario
        return loaded.scenario

    def _placed(self, combo, others: tuple) -> Loaded | None:
        """The candidate's scenario from a valid one built from the resolved mapping whose
        choices differ only in placement.* (`others`: its choices but those): that one with
        its placement section, as the resolved mapping has it with the choices written in,
        validated alone and set in, where that is valid and consistent; else None (it is
        built in full, so a problem is said as before). Exact: pydantic validates a
        scenario's sections each on its own (no validator reads another section), the
        placement is read beside other sections only by config.consistency, checked here as
        `build_resolved` checks it, and the rest of the mapping is the one built
        (tests/test_plan_shared.py)."""
        base = self.placed.get(others)
        if base is None:
            return None
        section = copy.deepcopy(self.resolved.get("placement", {}))
        for path, value in combo:
            if path.startswith(PLACED):
                set_path(section, path.split(".")[1:], copy.deepcopy(value))
        try:
            placement = Placement.model_validate(section)
        except ValidationError:
            return None
        scenario = base.scenario.model_copy(update={"placement": placement})
        if consistency_problems(scenario):
            return None
        # its mapping is not written out: nothing here reads it (check_runnable reads the
        # scenario, and its problems carry no lines: the resolved path has no text)
        return dataclasses.replace(base, scenario=scenario, resolved={})

    def _passes(self, rest: tuple, s: Scenario, res: Resolved | None, one: bool | None) -> int:
        """The layer passes its run simulates (sweep.estimate.work: it reads no prefetch
        depth); `res`, `one`: `s` resolved and its run's one period, where known."""
        if rest not in self.passes:
            self.passes[rest] = layer_passes(s, res, one)
        return self.passes[rest]

    def __call__(self, combo, out: Pruned) -> tuple[Candidate | None, str]:
        try:
            rest = tuple((p, type(v), v) for p, v in combo if p != PREFETCH)
            s = self._scenario(combo, rest)
        except InputError as exc:
            out.invalid[_reason(exc)] += 1
            return None, ""
        shared = tuple((p, type(v), v) for p, v in combo if not p.startswith("simulation."))
        res = None  # resolved once for both its assessment and its layer passes
        if shared not in self.assessed:
            alike = tuple(c for c in shared if c[0] not in HOME_CHOICES)
            res = resolve(s)
            self.assessed[shared] = assess(s, self.workloads.setdefault(alike, {}), res)
        a = self.assessed[shared]
        if a.over:
            out.unfit.update(tier for tier, _, _ in a.over)
            out.unfit_candidates += 1
            if out.nearest is None or bytes_over(a.over) < out.nearest.over_bytes:
                out.nearest = missed(tuple(self.text(p, v) for p, v in combo), a.over)
            return None, ""
        overrides = tuple(self.text(p, v) for p, v in combo)
        gpus, price, prices, amortization = a.costs
        candidate = Candidate(
            overrides,
            dict(combo),
            None,
            gpus,
            price,
            self._passes(rest, s, res, a.one_period),
            bound=a.bound,
            tokens_per_step=a.tokens,
            hbf_optimizer=a.hbf_optimizer,
            wear_floor_s=a.floor[0],
            wear_tier=a.floor[1],
            tier_prices=prices,
            amortization_s=amortization,
            upper_s=a.upper_s,
            checkpoint_upper_s=a.checkpoint_upper_s,
        )
        return candidate, self._key(rest, s, a.empty, a.reads_depth)

    def _key(
        self, rest: tuple, s: Scenario, empty: tuple[str, ...] = (), reads_depth: bool = True
    ) -> str:
        """Its scenario's key: equal for equal scenarios, however written (`Pruned.seen`).
        The scenario but its prefetch depth, hashed once for the candidates that differ only
        in that (`rest`: the same choices), then the depth. The home of a class that holds
        no byte (`empty`: sgd's optimizer state) is left out, and the class named after: a
        candidate that differs only there holds the same bytes in the same tiers and moves
        the same (its run differs by round-off: docs/review-2026-12-07-b.md). A depth its run
        does not read (`reads_depth` false) is marked UNREAD (plan.pruned.alike)."""
        if rest not in self.dumps:
            if len(self.dumps) >= RECENT:
                self.dumps.clear()
            experts = {c: True for c in empty if c in ExpertPlacement.model_fields}
            exclude = NO_DEPTH | {"placement": dict.fromkeys(empty, True) | {"experts": experts}}
            dump = s.model_dump_json(exclude=exclude).encode()
            self.dumps[rest] = hashlib.sha256(dump).hexdigest()[:16]
        depth = repr(s.simulation.prefetch_depth)
        return "|".join((self.dumps[rest], depth if reads_depth else UNREAD + depth, *empty))


def assess(s: Scenario, shared: dict | None = None, res: Resolved | None = None) -> Assessed:
    """The scenario's fit by the exact inventory, and where it fits, its bounds (its step's
    least time, its period's most, tiersim.plan.bound and plan.upper) and wear floor; no
    bound where its workload cannot be built (a candidate the simulation will refuse: it is
    simulated, and says why). `shared`: build_inventory's and build_workload's, kept for the
    scenarios that differ from this one at most in HOME_CHOICES and `simulation.*`; `res`:
    `s` resolved, where the caller has it."""
    res = resolve(s) if res is None else res
    inv = build_inventory(res, shared)
    over = overflowing(inv.tiers)
    if over:
        return Assessed(over)
    costs = costs_of(s)
    empty = tuple(c for c in PLACED_CLASSES if inv.dense[c] == inv.per_gpu[c] == 0)
    on_hbf = inv.tiers[HBF].classes.get("optimizer", 0) > 0 if HBF in inv.tiers else False
    try:
        wl = build_workload(res, inv, shared)
    except (InputError, InfeasibleError, ValueError, ZeroDivisionError):
        return Assessed((), empty, hbf_optimizer=on_hbf, costs=costs)
    runs = alike_runs(wl.units)  # read by the bound's port terms and both sums
    bound = step_bound(res, wl, runs)
    # a flash tier whose reads and programs share its dies runs at ports a first simulation
    # sets (runner.as_dies_allow): its step is not bounded above before that
    upper = share = math.inf
    factor = margin(res)  # the sum itself in the generic engine (plan.upper.margin)
    if not interfering(s):
        topo = Topology(res.machine)
        step = serial_step_s(res, wl, topo, runs)
        share = checkpoint_share_s(res, wl, topo, step, runs)
        upper = factor * (step + share)  # plan.upper.period_upper_s, with its margin
    floor = wear_floor(s, bound.written)
    tokens = wl.tokens_per_step
    one = margins.one_period(res, wl.units)
    reads = reads_prefetch_depth(res, empty)
    fit = (bound, tokens, on_hbf, floor, upper, factor * share, one, costs, reads)
    return Assessed((), empty, *fit)


def costs_of(s: Scenario) -> tuple[int, float | None, dict[str, float], float | None]:
    """What a plan's cost is priced by: the job's GPUs (the mesh's world), their price
    an hour, tier capital per GB and the period it is written off over (analysis.cost)."""
    hardware = s.hardware
    return (
        Mesh.of(s.parallel).world,
        hardware.price_per_gpu_hour,
        tier_prices(s),
        hardware.amortization,
    )


def _reason(exc: InputError) -> str:
    """The first problem, with its key path: which choice it is about."""
    if not exc.problems:
        return "invalid"
    first = exc.problems[0]
    return f"{first.path}: {first.message}" if first.path else first.message
