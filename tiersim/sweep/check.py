"""`tiersim validate SWEEP.yaml`: build every point before anything runs, report every problem.

A problem at a swept key path is reported against that path and value in the sweep file; any
other problem against the scenario key path it names. Each distinct problem is listed once,
with how many points have it and the first of them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tiersim.config.load import build
from tiersim.config.overrides import set_path
from tiersim.core.errors import InputError, Problem, shown_yaml
from tiersim.sweep.spec import Axis, Point, SweepSpec, describe, expand

MAX_LISTED = 30


def _valued(value: object, message: str) -> str:
    """`message` about `value`, the value said first once (`true has no effect` is not
    prefixed `value true:` again)."""
    said = shown_yaml(value)
    return message if message.startswith(f"{said} ") else f"value {said}: {message}"


def _under(problem: Problem, path: str, value: object) -> str:
    """The message of `problem` about the value swept (or set) at `path`, naming the key
    under it where the problem is deeper (a swept mapping's missing key): the sweep file
    writes no such key, so the place is `path`'s, and the key is said."""
    under = problem.path[len(path) + 1 :]
    return _valued(value, f"{under}: {problem.message}" if under else problem.message)


def _where(point: Point, spec: SweepSpec, problem: Problem) -> Problem:
    """One problem of one point, at its place in the sweep file (its code kept)."""
    for axis in spec.axes:
        if problem.path == axis.path or problem.path.startswith(axis.path + "."):
            value = point.values[axis.path]
            return problem.reworded(_under(problem, axis.path, value), f"{axis.group}.{axis.path}")
    for path, value in spec.fixed:  # a `set:` entry of the sweep file, not the base's value
        if problem.path == path or problem.path.startswith(path + "."):
            return problem.reworded(_under(problem, path, value), f"set.{path}")
    if spec.base_path.resolve() != Path(spec.source).resolve():  # the value is the base's
        return problem.reworded(f"{problem.message} (base scenario {spec.base_path})")
    return problem


def point_problems(spec: SweepSpec, points: list[Point]) -> list[Problem]:
    return point_check(spec, points)[0]


def file_refusal(spec: SweepSpec | None, problems: list[Problem]) -> list[Problem]:
    """Every problem of a faulty sweep file (`read_sweep_partly`'s): its own, then those of
    the points its sound axes make, so that `sweep` and `validate` list the same ones."""
    return problems + (point_problems(spec, expand(spec)) if spec is not None else [])


def point_check(spec: SweepSpec, points: list[Point]) -> tuple[list[Problem], int]:
    """Every distinct problem of the points (listed once, with how many points have it and
    the first of them), and how many points have any."""
    failures = _failures(spec, points)
    return _gathered(spec, failures, len(points)), len(failures)


def every_point_invalid(spec: SweepSpec) -> list[Problem]:
    """Where no point builds (a base scenario wrong whatever is swept), every problem as
    `point_check` lists them, for `tiersim sweep` to refuse before any point runs; [] once a
    point builds (a sound sweep builds one point for this)."""
    points = expand(spec)
    failures = _failures(spec, points, stop_at_valid=True)
    return _gathered(spec, failures, len(points)) if len(failures) == len(points) else []


def _failures(
    spec: SweepSpec, points: list[Point], stop_at_valid: bool = False
) -> list[tuple[Point, InputError]]:
    """Each point that does not build, with why; with `stop_at_valid`, up to the first that
    does."""
    out = []
    for point in points:
        try:
            build(point.raw, spec.base_path.parent, f"{spec.source} point {point.index}")
        except InputError as exc:
            out.append((point, exc))
            continue
        if stop_at_valid:
            break
    return out


def _gathered(spec: SweepSpec, failures: list[tuple[Point, InputError]], total: int) -> list:
    """Every distinct problem of the failures, listed once with how many points have it."""
    found: dict[Problem, list[Point]] = {}
    for point, exc in failures:
        for problem in exc.problems:
            found.setdefault(_where(point, spec, problem), []).append(point)
    problems = [_listed(problem, failing, total) for problem, failing in found.items()]
    if len(problems) > MAX_LISTED:
        more = len(problems) - MAX_LISTED
        problems = [
            *problems[:MAX_LISTED],
            Problem("", f"... and {more} more problems", "E-SWEEP-POINT"),
        ]
    return problems


# what the notes read (tiersim.runner.scenario_notes: the model, its attention kernel and
# recompute, sequence parallelism against the tensor split, the offload keys against the
# framework and the ZeRO stage; the machine left unnamed)
NOTE_KEYS = (
    "model",
    "training.attention_kernel",
    "training.recompute",
    "training.framework",
    "training.offload",
    "parallel.zero_stage",
    "parallel.sequence",
    "parallel.tensor",
    "hardware.preset",
)


def _touches_notes(path: str) -> bool:
    """Whether an axis at `path` may change what a note reads (a key under one, or above)."""
    return any(f"{path}.".startswith(f"{k}.") or f"{k}.".startswith(f"{path}.") for k in NOTE_KEYS)


def point_notes(spec: SweepSpec) -> list[Problem]:
    """The notes `tiersim run` would give the valid points (tiersim.runner.loaded_notes),
    each listed once as `point_check` lists problems. Where no axis touches a key a note
    reads, every point has the first valid one's notes: only it is built."""
    from tiersim.runner import loaded_notes  # the engine's side: only when needed

    points = expand(spec)
    varying = any(_touches_notes(a.path) for a in spec.axes)
    found: dict[Problem, list[Point]] = {}
    for point in points:
        try:
            loaded = build(point.raw, spec.base_path.parent, spec.source)
        except InputError:
            continue  # an invalid point is a problem, listed apart
        for note in loaded_notes(loaded):
            found.setdefault(_where(point, spec, note), []).append(point)
        if not varying:  # the same notes at every point
            found = {key: list(points) for key in found}
            break
    return [_listed(problem, failing, len(points)) for problem, failing in found.items()]


def _listed(problem: Problem, points: list[Point], total: int) -> Problem:
    first = points[0]
    text = f"point {first.index}" + (f" ({describe(first.values)})" if first.values else "")
    return problem.reworded(f"{problem.message} [{len(points)} of {total} points; first: {text}]")


def check_points(spec: SweepSpec) -> tuple[int, list[Problem]]:
    """(points, the problems of points invalid only in combination: they run as invalid rows)
    once the sweep can run; InputError with every problem where a swept value is wrong on its
    own or every point is invalid (as `tiersim sweep` refuses them)."""
    points = expand(spec)
    problems, invalid = point_check(spec, points)
    if problems and (invalid == len(points) or lone_value_problems(spec)):
        raise InputError(spec.source, problems)
    return len(points), problems


def lone_value_problems(spec: SweepSpec) -> list[Problem]:
    """Swept values that are wrong whatever the other axes hold (a size where a bandwidth is
    needed, a negative length): each grid value (each zip row) is built into the base alone,
    and where that fails at the value's own key path, again beside the first value of every
    other axis that is right alone; failing there the same way, the value is the problem. A
    point invalid only in combination is left to run (an invalid result)."""
    base_dir = spec.base_path.parent
    settings = _lone_settings(spec)
    alone = [
        _own_problems(_with(spec.base, dict(zip(paths, values, strict=True))), base_dir, spec, axes)
        for axes, paths, values in settings
    ]
    good: dict[str, object] = {}  # an axis's first value that is right alone
    for (_axes, paths, values), own in zip(settings, alone, strict=True):
        if not own:
            for path, value in zip(paths, values, strict=True):
                good.setdefault(path, value)
    out: list[Problem] = []
    for (axes, paths, values), own in zip(settings, alone, strict=True):
        if not own:
            continue
        beside = good | dict(zip(paths, values, strict=True))
        if own == _own_problems(_with(spec.base, beside), base_dir, spec, axes):
            for axis, problem in own:
                value = values[axes.index(axis)]
                where = f"{axis.group}.{axis.path}"
                out.append(problem.reworded(_under(problem, axis.path, value), where))
    return out + _fixed_problems(spec, good)


def _fixed_problems(spec: SweepSpec, good: dict[str, object]) -> list[Problem]:
    """`set:` values wrong beside a value of every axis that is right alone (one on each
    point, as far as these tell)."""
    if not spec.fixed:
        return []
    try:
        build(_with(spec.base, good), spec.base_path.parent, spec.source)
    except InputError as exc:
        return [
            Problem(f"set.{path}", _under(p, path, value), p.code)
            for p in exc.problems
            for path, value in spec.fixed
            if p.path == path or p.path.startswith(path + ".")
        ]
    return []


def _with(base: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(base)
    for path, value in values.items():
        set_path(raw, path.split("."), copy.deepcopy(value))
    return raw


def _lone_settings(spec: SweepSpec) -> list[tuple[tuple[Axis, ...], tuple[str, ...], tuple]]:
    """(axes, their paths, values) to try alone: each grid value, each zip row whole."""
    settings = [((a,), (a.path,), (v,)) for a in spec.grid for v in a.values]
    if spec.zip:
        paths = tuple(a.path for a in spec.zip)
        rows = zip(*(a.values for a in spec.zip), strict=True)
        settings += [(spec.zip, paths, tuple(row)) for row in rows]
    return settings


def _own_problems(
    raw, base_dir, spec: SweepSpec, axes: tuple[Axis, ...]
) -> list[tuple[Axis, Problem]]:
    try:
        build(raw, base_dir, spec.source)
    except InputError as exc:
        return [
            (axis, p)
            for p in exc.problems
            for axis in axes
            if p.path == axis.path or p.path.startswith(axis.path + ".")
        ]
    return []
