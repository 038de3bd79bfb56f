"""`tiersim validate SWEEP.yaml`: build every point before anything runs, report every problem.

A problem at a swept key path is reported against that path and value in the sweep file; any
other problem against the scenario key path it names. Each distinct problem is listed once,
with how many points have it and the first of them.
"""

from __future__ import annotations

from pathlib import Path

from tiersim.config.load import build
from tiersim.core.errors import InputError, Problem, shown
from tiersim.sweep.spec import Point, SweepSpec, describe, expand

MAX_LISTED = 30


def _where(point: Point, spec: SweepSpec, problem: Problem) -> tuple[str, str]:
    """(where in the sweep file, what) for one problem of one point."""
    for axis in spec.axes:
        if problem.path == axis.path or problem.path.startswith(axis.path + "."):
            value = point.values[axis.path]
            return f"{axis.group}.{axis.path}", f"value {shown(value)}: {problem.message}"
    if spec.base_path.resolve() != Path(spec.source).resolve():  # the value is the base's
        return problem.path, f"{problem.message} (base scenario {spec.base_path})"
    return problem.path, problem.message


def point_problems(spec: SweepSpec, points: list[Point]) -> list[Problem]:
    base_dir = spec.base_path.parent
    found: dict[tuple[str, str], list[Point]] = {}
    for point in points:
        try:
            build(point.raw, base_dir, f"{spec.source} point {point.index}")
        except InputError as exc:
            for problem in exc.problems:
                found.setdefault(_where(point, spec, problem), []).append(point)
    problems = []
    for (where, what), failing in found.items():
        first = failing[0]
        text = f"point {first.index}" + (f" ({describe(first.values)})" if first.values else "")
        problems.append(
            Problem(where, f"{what} [{len(failing)} of {len(points)} points; first: {text}]")
        )
    if len(problems) > MAX_LISTED:
        more = len(problems) - MAX_LISTED
        problems = [*problems[:MAX_LISTED], Problem("", f"... and {more} more problems")]
    return problems


def check_points(spec: SweepSpec) -> int:
    """The number of points, once every one of them builds; else InputError with every problem."""
    points = expand(spec)
    problems = point_problems(spec, points)
    if problems:
        raise InputError(spec.source, problems)
    return len(points)
