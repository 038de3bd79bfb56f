"""The checks of a search space before any candidate is (`tiersim plan`'s and `validate`'s):
a plan: section's key paths, the space's size, and each value on its own. A value wrong on its
own (a tier that does not exist, a length of 0, a bandwidth without a unit) is refused against
its item in the file, as `validate` refuses a sweep's, and so is a micro-batch size or
accumulation that does not divide the batch per GPU the plan holds fixed; one invalid only
beside other choices (a tier too small for what else is put there, a micro-batch size and an
accumulation whose product is not that batch) is left to the search, which counts it."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from tiersim.config.load import Loaded, build
from tiersim.config.overrides import set_path
from tiersim.config.schema import Training
from tiersim.config.yamllines import key_lines, lines_from
from tiersim.core.errors import InputError, Problem
from tiersim.plan.space import GA, MBS, Space, build_space

# checking one against the inventory and bounding it takes about 1 ms of CPU (a large space is
# checked on the workers, tiersim.plan.chunks): half a million is minutes on a few cores
MAX_CANDIDATES = 500_000
SUGGESTED = ("placement.optimizer", "placement.master", "training.recompute", MBS)


def checked_space(loaded: Loaded, raw: dict[str, Any], path: Path) -> Space:
    """The scenario's space, refused (each problem with its line) for a plan: section's
    unknown path or repeated value, a size over MAX_CANDIDATES, or a value wrong on its own
    (checked last: a build per value, bounded by the size). `raw`: the file's mapping with
    any --set applied, as the candidates are built from."""
    source = str(path)
    with lines_from(loaded.text):
        space, problems = build_space(loaded.scenario, loaded.resolved)
        if problems:
            raise InputError(source, problems)
        if space.size > MAX_CANDIDATES:
            what = (
                f"{space.size:,} candidates, over the {MAX_CANDIDATES:,} that tiersim plan checks"
            )
            raise too_large(source, space, what)
    if space.from_file:  # the default space's values are the scenario's own tiers and choices
        problems = value_problems(raw, path.parent, space, loaded.text)  # lines given
        problems += batch_problems(space, loaded.scenario.training, loaded.text)
        if problems:
            raise InputError(source, problems)
    return space


def value_problems(raw: dict[str, Any], base_dir: Path, space: Space, text: str) -> list[Problem]:
    """`plan.PATH[i]: why (line N)` for each value of the space wrong on its own: built into
    the scenario (`raw`, the file with any --set applied) alone, it fails at its own key path,
    and fails there the same way beside the first value of every other key that is right
    alone (so a value is not blamed for what the base scenario's other settings cause, where
    the plan changes those too). `text`: the file's, for the lines of the items."""
    settings = [
        (k, i, v) for k, vs in zip(space.keys, space.values, strict=True) for i, v in enumerate(vs)
    ]
    alone = [_own(raw, base_dir, space.batch, {k: v}, k) for k, _, v in settings]
    good: dict[str, Any] = {}  # each key's first value that is right alone
    for (key, _, value), own in zip(settings, alone, strict=True):
        if not own:
            good.setdefault(key, value)
    lines = key_lines(text)
    out = []
    for (key, i, value), own in zip(settings, alone, strict=True):
        if own and own == _own(raw, base_dir, space.batch, good | {key: value}, key):
            out += [_problem(key, i, why, lines) for why in own]
    return out


MAX_DIVISORS_SHOWN = 12


def smallest_divisors(n: int, count: int) -> list[int]:
    """The `count` smallest divisors of n >= 1 (trial division to the square root: a batch
    per GPU may be large)."""
    low, high, d = [], [], 1
    while d * d <= n:
        if n % d == 0:
            low.append(d)
            if d * d != n:
                high.append(n // d)
        d += 1
    return (low + high[::-1])[:count]


def batch_problems(space: Space, training: Training, text: str) -> list[Problem]:
    """`plan.KEY[i]: why (line N)` for each micro-batch size or accumulation that does not
    divide the batch per GPU the plan holds fixed: no whole value of the other makes that
    batch with it, so it could never be a candidate (refused, not counted as not tried).
    `training`: the scenario's, for the batch's two factors."""
    batch, lines, out = space.batch, key_lines(text), []
    mbs, ga = training.micro_batch_size, training.grad_accumulation
    shown = ""
    for key, values in zip(space.keys, space.values, strict=True):
        if key not in (MBS, GA):
            continue
        for i, value in enumerate(values):
            whole = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            if whole and batch % value:  # a value wrong on its own is value_problems' to say
                shown = shown or _divisors_shown(batch)
                why = (
                    f"{value} does not divide the batch per GPU, {batch:,} (micro_batch_size "
                    f"{mbs} x grad_accumulation {ga}, which the plan holds fixed), so no "
                    f"candidate can have it (expected a divisor of {batch:,}: {shown})"
                )
                out.append(_problem(key, i, why, lines))
    return out


def _divisors_shown(batch: int) -> str:
    divisors = smallest_divisors(batch, MAX_DIVISORS_SHOWN + 1)
    more = len(divisors) > MAX_DIVISORS_SHOWN
    return ", ".join(f"{d:,}" for d in divisors[:MAX_DIVISORS_SHOWN]) + (", ..." if more else "")


def _own(raw: dict[str, Any], base_dir: Path, batch: int, chosen: dict[str, Any], key: str):
    """The problems at `key` (or under it) of the scenario with `chosen` set."""
    mapping = copy.deepcopy(raw)
    for path, value in _paired(chosen, batch).items():
        set_path(mapping, path.split("."), copy.deepcopy(value))
    try:
        build(mapping, base_dir, "")
    except InputError as exc:
        return [p.message for p in exc.problems if p.path == key or p.path.startswith(key + ".")]
    return []


def _paired(chosen: dict[str, Any], batch: int) -> dict[str, Any]:
    """A micro-batch size with the accumulation that keeps the batch per GPU (and the other
    way round), as its candidates have it; a value off that batch, or not a whole number,
    as it is (so that its own problem, if any, is found)."""
    out = dict(chosen)
    for key, other in ((MBS, GA), (GA, MBS)):
        value = chosen.get(key)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if other not in chosen and whole and value >= 1 and batch % value == 0:
            out[other] = batch // value
    return out


def _problem(key: str, i: int, why: str, lines: dict[str, int]) -> Problem:
    line = lines.get(f"plan.{key}.{i}") or lines.get(f"plan.{key}") or lines.get("plan")
    return Problem(f"plan.{key}[{i}]", why + (f" (line {line})" if line else ""), "E-PLAN")


def too_large(
    source: str,
    space: Space,
    what: str,
    fit: int = MAX_CANDIDATES,
    more: str = "",
    plainly: str | None = None,
) -> InputError:
    """The search space cannot be finished in the time given: say so and how to narrow it,
    with a plan: section to start from of at most `fit` candidates and fewer than the space
    has (the optimizer's state and its master copy, recompute and the micro-batch size, each
    with the values the space had, cut down where that is still too many); `plainly`: what
    to do instead, where no section of two candidates or more would do."""
    where = "the plan: section" if space.from_file else "the default space (no plan: section)"
    head = f"search space too large: {what}. It is {where}: {space.shape()}"
    keep = None if plainly else smaller_section(space, min(fit, space.size - 1))
    if keep is None:
        why = plainly or "no smaller plan: section of two candidates or more would do"
        return InputError(source, [Problem("plan", f"{head}; {why}", "E-PLAN")])
    size = math.prod(len(v) for v in keep.values())
    section = ", ".join(f"{k}: [{', '.join(str(v) for v in vs)}]" for k, vs in keep.items())
    advice = (  # one line, as every problem is: the section in YAML's flow style
        f"{head}. Narrow it with a plan: section listing only the keys and values to consider "
        "(fixing the keys with the most values divides it most); this one has "
        f"{size:,} candidates: plan: {{{section}}}{more}"
    )
    return InputError(source, [Problem("plan", advice, "E-PLAN")])


def smaller_section(space: Space, fit: int) -> dict[str, list[Any]] | None:
    """SUGGESTED's keys with the space's values (or its first two keys), cut to at most `fit`
    candidates: one value at a time off the end of the key with the most, a key left with
    one value dropped (the scenario's own value stands); None where `fit` is under 2."""
    if fit < 2:
        return None
    options = {k: list(v) for k, v in zip(space.keys, space.values, strict=True)}
    keep = {k: options[k] for k in SUGGESTED if k in options} or dict(list(options.items())[:2])
    while math.prod(len(v) for v in keep.values()) > fit:
        widest = max(keep, key=lambda k: len(keep[k]))
        keep[widest] = keep[widest][:-1]
        if len(keep[widest]) == 1 and len(keep) > 1:
            del keep[widest]
    return keep
