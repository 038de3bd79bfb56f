"""Pruning with the exact inventory: a candidate that is not a valid scenario, has no route for
a movement its placement implies, or whose resident state does not fit a tier is never
simulated. Equal scenarios (written differently) are simulated once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiersim.analysis.cost import tier_prices
from tiersim.config.load import build
from tiersim.config.mesh import Mesh
from tiersim.config.overrides import apply_overrides
from tiersim.core.errors import InfeasibleError, InputError
from tiersim.plan.bound import StepBound, step_bound, wear_floor
from tiersim.plan.space import override_text
from tiersim.runner import check_runnable
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.sweep.estimate import layer_passes
from tiersim.sweep.worker import PointTask, scenario_key
from tiersim.workload.work import build_workload

HBF = "hbf"  # the tier of "can HBF hold optimizer state?" (plan.rank.HBF)


@dataclass(frozen=True)
class Candidate:
    overrides: tuple[str, ...]  # `path=value`, as `tiersim run --set` takes them
    values: dict[str, Any]  # path -> value
    task: PointTask  # the scenario mapping with the overrides applied, for a worker
    gpus: int  # data x tensor x pipeline: the job's GPUs
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


@dataclass
class Pruned:
    kept: list[Candidate] = field(default_factory=list)
    checked: int = 0
    invalid: Counter = field(default_factory=Counter)  # reason -> candidates
    unfit: Counter = field(default_factory=Counter)  # tier -> candidates it cannot hold
    unfit_candidates: int = 0  # candidates some tier cannot hold
    duplicates: int = 0


def prune(
    raw: dict[str, Any],
    base_dir: Path,
    source: str,
    combos: Iterable[tuple[tuple[str, Any], ...]],
    progress: Callable[[int], None] = lambda n: None,
) -> Pruned:
    out = Pruned()
    seen: set[str] = set()
    for combo in combos:
        out.checked += 1
        overrides = tuple(override_text(p, v) for p, v in combo)
        candidate = _candidate(raw, base_dir, source, combo, overrides, out, seen)
        if candidate is not None:
            out.kept.append(candidate)
        if out.checked % 100 == 0:
            progress(out.checked)
    return out


def _candidate(raw, base_dir, source, combo, overrides, out: Pruned, seen: set[str]):
    # built from the mapping with the choices written in, not as --set overrides: its
    # problems are the plan's choices, not a --set the user never typed
    mapping = apply_overrides(raw, list(overrides), source)  # a copy
    try:
        loaded = build(mapping, base_dir, source)
        check_runnable(loaded)
    except InputError as exc:
        out.invalid[_reason(exc)] += 1
        return None
    res = resolve(loaded.scenario)
    inv = build_inventory(res)
    over = [name for name, use in inv.tiers.items() if not use.fits]
    if over:
        out.unfit.update(over)
        out.unfit_candidates += 1
        return None
    key = scenario_key(loaded.scenario.model_dump())
    if key in seen:
        out.duplicates += 1
        return None
    seen.add(key)
    task = PointTask(  # the remedies simulated only for the plan that shows them (plan.run)
        mapping,
        str(base_dir.resolve()),
        f"{source} --set {' --set '.join(overrides)}",
        remedies=False,
    )
    s = loaded.scenario
    gpus = Mesh.of(s.parallel).world
    price = s.hardware.price_per_gpu_hour
    bound, tokens = _bound(res, inv)
    on_hbf = inv.tiers[HBF].classes.get("optimizer", 0) > 0 if HBF in inv.tiers else False
    floor, tier = wear_floor(s, bound.written) if bound is not None else (0.0, None)
    return Candidate(
        overrides,
        dict(combo),
        task,
        gpus,
        price,
        layer_passes(s),
        bound=bound,
        tokens_per_step=tokens,
        hbf_optimizer=on_hbf,
        wear_floor_s=floor,
        wear_tier=tier,
        tier_prices=tier_prices(s),
        amortization_s=s.hardware.amortization,
    )


def _bound(res, inv) -> tuple[StepBound | None, int]:
    """The candidate's step-time bound and tokens per step (tiersim.plan.bound); None where its
    workload cannot be built (a candidate the simulation will refuse: it is simulated, and
    says why)."""
    try:
        wl = build_workload(res, inv)
    except (InputError, InfeasibleError, ValueError, ZeroDivisionError):
        return None, 0
    return step_bound(res, wl), wl.tokens_per_step


def _reason(exc: InputError) -> str:
    """The first problem, with its key path: which choice it is about."""
    if not exc.problems:
        return "invalid"
    first = exc.problems[0]
    return f"{first.path}: {first.message}" if first.path else first.message
