"""The sweep file and its expansion into plain scenario mappings, one per point.

```yaml
name: hbf-write-vs-accumulation        # optional; default: the file's stem
base: ../seed-1b-adam.yaml             # a scenario file, relative to this file
set:                                   # optional: fixed overrides applied to every point
  placement.optimizer: hbf
grid:                                  # cartesian product of these lists
  hardware.tiers.hbf.write_bandwidth: [10 GB/s, 50 GB/s]
  training.grad_accumulation: [1, 4]
zip:                                   # parallel lists (equal lengths), one point per row
  training.micro_batch_size: [1, 2]
  training.seq_len: [4096, 2048]
```
Keys are the same paths as `--set`. Points are the grid product, each with every zip row. A
grid value or a zip row given twice, compared as values (`50 GB/s` is `50GB/s`), is an error.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import math
import re
from pathlib import Path
from typing import Any

from tiersim.config.overrides import set_path
from tiersim.config.presets import resolve
from tiersim.config.schema import Scenario
from tiersim.config.yamlfile import read_yaml, read_yaml_and_text
from tiersim.config.yamllines import lines_from
from tiersim.core import limits
from tiersim.core.errors import InputError, Problem, shown, shown_yaml
from tiersim.core.records import record
from tiersim.sweep.duplicates import grid_problems, zip_problems
from tiersim.sweep.paths import path_problem

SWEEP_KEYS = ("name", "base", "set", "grid", "zip", "max_points")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]+$")
MAX_NAME_CHARS = 255  # a file name's limit on common file systems (NAME_MAX)


@record
class Axis:
    """One swept key path and its values, in the order the file lists them."""

    path: str
    values: tuple[Any, ...]
    group: str  # "grid" or "zip"

    @property
    def keys(self) -> list[str]:
        return self.path.split(".")


@record
class SweepSpec:
    source: str
    name: str
    base_path: Path
    base: dict[str, Any]  # the base scenario mapping as read, `set:` applied
    grid: tuple[Axis, ...]
    zip: tuple[Axis, ...]
    fixed: tuple[tuple[str, Any], ...] = ()  # the `set:` entries as written, applied to base

    @property
    def axes(self) -> tuple[Axis, ...]:
        return self.grid + self.zip

    @property
    def size(self) -> int:
        n = 1
        for axis in self.grid:
            n *= len(axis.values)
        return n * (len(self.zip[0].values) if self.zip else 1)


@record
class Point:
    """One point: its swept values and the plain scenario mapping they make."""

    index: int
    values: dict[str, Any]  # swept path -> value as written in the sweep file
    raw: dict[str, Any]
    coords: tuple[int, ...]  # position on each grid axis, then the zip row (if any)


def is_sweep(raw: Any) -> bool:
    """A mapping with a grid or a zip, or a base and no model: a scenario (its model is
    required) with a stray `base:` key, an anchors' holder or a typo, is a scenario with an
    unknown key, not a sweep missing its grid."""
    if not isinstance(raw, dict):
        return False
    return "grid" in raw or "zip" in raw or ("base" in raw and "model" not in raw)


def load_sweep(path: str | Path, max_points: int | None = None) -> SweepSpec:
    """The sweep file at `path`, checked; each problem ends with the line its key is on."""
    path = Path(path)
    raw, text = read_yaml_and_text(path, str(path))
    with lines_from(text):
        return read_sweep(raw, path, max_points)


def read_sweep(raw: Any, path: Path, max_points: int | None = None) -> SweepSpec:
    """Check a parsed sweep file: keys, base scenario, lists, and every path against the schema.

    `max_points` (`--max-points`) bounds the points, over the file's `max_points:` and the
    default, limits.SWEEP_POINTS; a sweep over it is refused before any point is made."""
    spec, problems = read_sweep_partly(raw, path, max_points)
    if problems or spec is None:
        raise InputError(str(path), problems)
    return spec


def read_sweep_partly(
    raw: Any, path: Path, max_points: int | None = None
) -> tuple[SweepSpec | None, list[Problem]]:
    """The file's problems, and the sweep over the axes that have none (None without a usable
    base or axis, or over the point limit), so that `validate` can also build its points and
    report their problems."""
    try:
        return _read_sweep(raw, path, max_points), []
    except _Partial as partial:
        return partial.spec, partial.problems


class _Partial(Exception):
    def __init__(self, spec: SweepSpec | None, problems: list[Problem]):
        self.spec, self.problems = spec, problems


def _read_sweep(raw: Any, path: Path, max_points: int | None) -> SweepSpec:
    source = str(path)
    if not isinstance(raw, dict):
        kind = type(raw).__name__
        why = f"top level is a {kind} (expected a mapping with base, and grid and/or zip)"
        raise InputError(source, [Problem("", why, "E-SWEEP")])
    _refuse_a_scenario(raw, source)
    problems = _top_level_problems(raw)
    base_path, base = _read_base(raw.get("base"), path.parent, problems)
    fixed = _entries(raw, "set", problems, want_list=False)
    grid = _axes(raw, "grid", problems)
    zipped = _axes(raw, "zip", problems)
    problems += _nothing_to_sweep(raw)
    _zip_row_problems(zipped, problems)
    too_many = _count_problem(grid, zipped, _point_limit(raw, max_points, problems))
    if too_many:  # before anything is made per point: 10^9 of them would fill the memory
        raise _Partial(None, [*problems, too_many])
    all_paths = [(f"set.{p}", p) for p in fixed] + [
        (f"{a.group}.{a.path}", a.path) for a in grid + zipped
    ]
    _overlap_problems(all_paths, problems)
    if base is not None:
        for path_text, value in fixed.items():
            set_path(base, path_text.split("."), copy.deepcopy(value))
        _schema_problems(base, base_path, all_paths, problems)
    whole = SweepSpec(
        source,
        str(raw.get("name") or path.stem),
        base_path,
        base,
        tuple(grid),
        tuple(zipped),
        tuple(fixed.items()),
    )
    if not problems:
        return whole
    raise _Partial(_sound_part(whole, problems), problems)


def _refuse_a_scenario(raw: dict[str, Any], source: str) -> None:
    """A scenario file given as a sweep: said in one line, not as one unknown key a section."""
    scenario_keys = [str(k) for k in raw if k in Scenario.model_fields and k != "name"]
    if scenario_keys and not is_sweep(raw):
        what = (
            f"a scenario file, not a sweep (sections {', '.join(scenario_keys[:3])}"
            f"{', ...' if len(scenario_keys) > 3 else ''}; no grid or zip): run it with "
            "`tiersim run`, or sweep it from a sweep file whose base: names it"
        )
        raise InputError(source, [Problem("", what, "E-SWEEP")])


def _sound_part(whole: SweepSpec, problems: list[Problem]) -> SweepSpec | None:
    """The sweep without its faulty axes (a faulty zip drops the whole zip); None if the base
    or the file as a whole is faulty, or nothing is left to sweep."""
    where = {p.path for p in problems}
    if (
        whole.base is None
        or whole.base_path is None
        or where & {"", "base", "zip"}
        or any(w.startswith("set.") for w in where)
    ):
        return None
    grid = tuple(a for a in whole.grid if f"grid.{a.path}" not in where)
    zipped = () if any(f"zip.{a.path}" in where for a in whole.zip) else whole.zip
    if not grid and not zipped:
        return None
    return dataclasses.replace(whole, grid=grid, zip=zipped)


def _point_limit(raw: dict[str, Any], given: int | None, problems: list[Problem]) -> int:
    """--max-points, else the file's `max_points:`, else the default."""
    in_file = raw.get("max_points")
    usable = isinstance(in_file, int) and not isinstance(in_file, bool) and in_file >= 1
    if in_file is not None and not usable:
        what = f"expected a whole number of points >= 1 (got {shown(in_file)})"
        problems.append(Problem("max_points", what, "E-SWEEP"))
    if given is not None:
        return given
    return in_file if usable else limits.SWEEP_POINTS


def _count_problem(grid: list[Axis], zipped: list[Axis], limit: int) -> Problem | None:
    """The grid product (times the zip rows) counted, not made, against the limit."""
    count = math.prod(len(a.values) for a in grid) * max((len(a.values) for a in zipped), default=1)
    if count <= limit:
        return None
    shape = [" x ".join(str(len(a.values)) for a in grid)] if grid else []
    shape += [f"zip {max(len(a.values) for a in zipped)}"] if zipped else []
    what = (
        f"{count:,} points ({' and '.join(shape)}) are more than the {limit:,} a sweep may have "
        "(expected fewer values; to run that many, raise the bound with --max-points N or "
        "max_points: N in the sweep file)"
    )
    return Problem("grid" if grid else "zip", what, "E-SWEEP")


def _top_level_problems(raw: dict[str, Any]) -> list[Problem]:
    problems = []
    for key in raw:
        if key not in SWEEP_KEYS:
            close = difflib.get_close_matches(str(key), SWEEP_KEYS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            why = f"unknown key ({hint}expected one of: {', '.join(SWEEP_KEYS)})"
            problems.append(Problem(str(key), why, "E-KEY-UNKNOWN"))
    name = raw.get("name")
    usable = isinstance(name, str) and NAME_PATTERN.match(name) and name not in (".", "..")
    if name is not None and not usable:
        why = f"expected letters, digits, '_', '.', '-' (got {shown(name)})"
        problems.append(Problem("name", why, "E-NAME"))
    elif usable and len(name) > MAX_NAME_CHARS:
        limit = f"expected at most {MAX_NAME_CHARS}: it names the results folder"
        what = f"a name of {len(name)} characters ({limit})"
        problems.append(Problem("name", what, "E-NAME"))
    return problems


def _nothing_to_sweep(raw: dict[str, Any]) -> list[Problem]:
    """No axis section, or one left empty (`grid:` with nothing under it)."""
    problems = []
    if "grid" not in raw and "zip" not in raw:
        problems.append(Problem("", "nothing to sweep: give 'grid' and/or 'zip'", "E-SWEEP"))
    for section in ("grid", "zip"):
        if section in raw and raw[section] is None:
            what = "empty (null in YAML; expected key paths, each with a list of values)"
            problems.append(Problem(section, what, "E-SWEEP"))
    return problems


def _read_base(value: Any, folder: Path, problems: list[Problem]) -> tuple[Path, Any]:
    if value is None:
        why = "required key is missing (a scenario file, relative to the sweep file)"
        problems.append(Problem("base", why, "E-KEY-MISSING"))
        return folder, None
    if not isinstance(value, str) or not value.strip():
        problems.append(
            Problem("base", f"expected the path of a scenario file (got {shown(value)})", "E-SWEEP")
        )
        return folder, None
    base_path = Path(value) if Path(value).is_absolute() else folder / value
    try:
        base = read_yaml(base_path, str(base_path))
    except InputError as exc:
        problems += [Problem("base", p.said(str(base_path)), p.code) for p in exc.problems]
        return base_path, None
    if not isinstance(base, dict):
        why = f"{base_path} is not a scenario (expected a mapping)"
        problems.append(Problem("base", why, "E-SWEEP"))
        return base_path, None
    if is_sweep(base) and "model" not in base:  # with a model: a scenario, a stray key
        why = f"{base_path} is a sweep file (it has grid, zip or base; expected a scenario file)"
        problems.append(Problem("base", why, "E-SWEEP"))
        return base_path, None
    return base_path, base


def _entries(
    raw: dict[str, Any], section: str, problems: list[Problem], want_list: bool
) -> dict[str, Any]:
    """The `path: value` entries of one section, with malformed paths reported."""
    value = raw.get(section)
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        what = "lists of values" if want_list else "values"
        problems.append(
            Problem(
                section,
                f"expected a mapping of key paths to {what}, e.g. "
                "hardware.tiers.hbf.write_bandwidth: [10 GB/s, 50 GB/s]",
                "E-SWEEP",
            )
        )
        return {}
    out = {}
    for path_text, item in value.items():
        keys = str(path_text).split(".")
        if not isinstance(path_text, str) or not all(k.strip() == k and k for k in keys):
            problems.append(
                Problem(
                    f"{section}.{path_text}",
                    "expected a dotted key path such as training.grad_accumulation",
                    "E-SWEEP",
                )
            )
            continue
        out[path_text] = item
    return out


def _axes(raw: dict[str, Any], section: str, problems: list[Problem]) -> list[Axis]:
    axes = []
    for path_text, values in _entries(raw, section, problems, want_list=True).items():
        where = f"{section}.{path_text}"
        if not isinstance(values, list) or not values:
            what = f"expected a non-empty list of values (got {shown(values)})"
            if isinstance(values, dict) and values:  # nested, as in a scenario
                inner = next(iter(values))
                what += f"; a key is one dotted path: {path_text}.{inner}: [...]"
            problems.append(Problem(where, what, "E-SWEEP"))
            continue
        if section == "grid":  # a zip's repeats are whole rows, checked once lengths agree
            problems += grid_problems(where, values)
        axes.append(Axis(path_text, tuple(values), section))
    return axes


def _zip_row_problems(axes: list[Axis], problems: list[Problem]) -> None:
    lengths = {a.path: len(a.values) for a in axes}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{p} has {n}" for p, n in lengths.items())
        problems.append(Problem("zip", f"lists must have equal lengths ({listed})", "E-SWEEP"))
    elif axes:
        problems += zip_problems({a.path: list(a.values) for a in axes})


def _overlap_problems(paths: list[tuple[str, str]], problems: list[Problem]) -> None:
    for (where_a, a), (_, b) in itertools.combinations(paths, 2):
        if a == b or a.startswith(b + ".") or b.startswith(a + "."):
            problems.append(
                Problem(where_a, f"overlaps with '{b}' (each value must be set once)", "E-SWEEP")
            )


def _schema_problems(
    base: dict[str, Any], base_path: Path, paths: list[tuple[str, str]], problems: list[Problem]
) -> None:
    found: list[Problem] = []
    resolved = resolve(base, base_path.parent, found)
    if found:
        problems += [Problem("base", p.said(str(base_path)), p.code) for p in found]
        return
    for where, path_text in paths:
        problem = path_problem(path_text.split("."), resolved)
        if problem:
            problems.append(Problem(where, f"not a scenario key path: {problem}", "E-SWEEP"))


def expand(spec: SweepSpec) -> list[Point]:
    """Every point, grid-major then zip rows, as a plain scenario mapping."""
    grid_at = itertools.product(*(range(len(a.values)) for a in spec.grid))
    zip_at = [(row,) for row in range(len(spec.zip[0].values))] if spec.zip else [()]
    points = []
    for grid_coords in grid_at:
        for zip_coords in zip_at:
            coords = grid_coords + zip_coords
            values = {a.path: a.values[i] for a, i in zip(spec.grid, grid_coords, strict=True)}
            values |= {a.path: a.values[zip_coords[0]] for a in spec.zip}
            raw = copy.deepcopy(spec.base)
            for path_text, value in values.items():
                set_path(raw, path_text.split("."), copy.deepcopy(value))
            points.append(Point(len(points), values, raw, coords))
    return points


def describe(values: dict[str, Any]) -> str:
    """`a=1, b=50 GB/s`: a point's swept values in one line (a long one shortened)."""
    return ", ".join(f"{path}={plain_value(value)}" for path, value in values.items())


def plain_value(value: Any) -> str:
    if value is None or isinstance(value, bool):  # as YAML writes them (summary and plots)
        return shown_yaml(value)
    text = str(value) if isinstance(value, str | int | float) else shown(value)
    return text if len(text) <= 80 else shown(value)
