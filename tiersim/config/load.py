"""Loading scenario files: YAML (safe loader only), presets, `--set` overrides, validation.

Nothing here has side effects beyond reading the files it is given. Every problem found in
a file is collected and raised together as one `InputError`. Presets are resolved in
config/presets.py, overrides parsed in config/overrides.py, pydantic's errors worded in
config/messages.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tiersim.config.batch import derive_accumulation
from tiersim.config.consistency import consistency_problems
from tiersim.config.messages import validation_problems
from tiersim.config.overrides import clipped, parse_override
from tiersim.config.presets import is_preset_file, preset_named, resolve
from tiersim.config.schema import Scenario
from tiersim.config.set_null import overridden
from tiersim.config.tier_names import no_such_tier
from tiersim.config.yamlfile import read_yaml_and_text
from tiersim.config.yamllines import key_lines, line_of, with_lines
from tiersim.core.errors import InputError, Problem
from tiersim.core.frozen import replaced
from tiersim.core.records import record


@record
class Origin:
    """How a problem names the overrides that caused it: the CLI's are `--set` flags, the
    Python API's are overrides given to a function."""

    one: str  # before one override's text: "(from --set a.b=1)"
    all: str  # all of them: "(after the --set values)"


SET_FLAGS = Origin("--set", "the --set values")
API_OVERRIDES = Origin("the override", "the overrides")


@record
class Loaded:
    """A validated scenario with the fully resolved mapping it was built from."""

    scenario: Scenario
    resolved: dict[str, Any]
    source: str
    text: str = ""  # the file's text, where it was read from one (for the lines of problems)
    overrides: tuple[str, ...] = ()  # the --set values applied (for the problems they cause)
    origin: Origin = SET_FLAGS  # how problems name those overrides
    hardware_named: bool = True  # False: no hardware.preset given, the default machine taken


_TYPE_NAMES = {
    "list": "a list",
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "a boolean",
}


def _top_level_problem(raw: Any) -> Problem | None:
    if raw is None:
        return Problem(
            "",
            "file has no content (expected a YAML mapping of sections: name, model, training, ...)",
            "E-YAML",
        )
    if not isinstance(raw, dict):
        got = _TYPE_NAMES.get(type(raw).__name__, type(raw).__name__)
        return Problem(
            "",
            f"top level is {got} (expected a mapping of sections: name, model, training, ...)",
            "E-YAML",
        )
    if raw and not set(map(str, raw)) & set(Scenario.model_fields):
        keys = ", ".join(str(k) for k in list(raw)[:3]) + (", ..." if len(raw) > 3 else "")
        sections = ", ".join(Scenario.model_fields)
        sweep = any(k in raw for k in ("base", "grid", "zip"))
        hint = "; it looks like a sweep: run it with `tiersim sweep`" if sweep else ""
        if not sweep and all(
            isinstance(v, dict) and "iteration_time_s" in v for v in raw.values()
        ):  # scenario file -> published time
            hint = (
                "; it looks like check-published's references: run `tiersim check-published "
                "--folder` with its folder"
            )
        return Problem(
            "",
            f"not a scenario: no section among its keys ({keys}); expected {sections}{hint}",
            "E-YAML",
        )
    return None


def _raw_tier_names(resolved: dict[str, Any]) -> list[Problem]:
    """Placement tier names checked on the raw mapping, so they are reported alongside
    schema problems rather than only once those are fixed."""
    hardware, placement = resolved.get("hardware"), resolved.get("placement")
    if not (isinstance(hardware, dict) and isinstance(hardware.get("tiers"), dict)):
        return []
    if not isinstance(placement, dict):
        return []
    tiers = hardware["tiers"]
    return [
        Problem(f"placement.{cls}", no_such_tier(tier, tiers), "E-TIER-UNKNOWN")
        for cls, tier in placement.items()
        if cls != "optimizer_compute" and isinstance(tier, str) and tier not in tiers
    ]


# mappings whose keys are names the user chooses: the schema cannot call a new one unknown
_NAMED_MAPPINGS = {("hardware", "tiers"), ("hardware", "links"), ("budget",)}


def _override_hints(raw: dict[str, Any], overrides: list[str], base_dir: Path) -> list[Problem]:
    """A `--set` whose path names a key the scenario (presets resolved) lacks, where one close
    to it exists: most likely a typo that created a new, incomplete entry."""
    import difflib  # a name refused: a valid file never needs it

    base = resolve(copy.deepcopy(raw), base_dir, [])
    hints = []
    for text in overrides:
        keys, _ = parse_override(text)
        node = base
        for depth, key in enumerate(keys):
            if not isinstance(node, dict) or not node:
                break
            if key not in node:
                close = difflib.get_close_matches(key, [str(k) for k in node], n=1)
                where = ".".join(keys[:depth])
                what = _network_hint(key, node) if where == "hardware.links" else None
                if close and tuple(keys[:depth]) in _NAMED_MAPPINGS:
                    what = f"'{key}' is not in {where}; did you mean '{close[0]}'?"
                if what:
                    hints.append(Problem(f"--set {'.'.join(keys)}", what, "E-SET"))
                break
            node = node[key]
    return hints


# `run`'s link table names the GPUs' collective channels beside hardware.links' own
_NETWORK_ROWS = {"nvlink": "intra_node", "network": "inter_node"}


def _network_hint(key: str, links: dict[str, Any]) -> str | None:
    """A `--set hardware.links.nvlink...` (or `.network`): `run`'s row of that name is the
    network's (engine/core.py NET_CHANNELS), not a link the scenario can set."""
    if key not in _NETWORK_ROWS:
        return None
    side = _NETWORK_ROWS[key]
    return (
        f"'{key}' is not in hardware.links ({', '.join(map(str, links))}): the {key} row of "
        f"`run`'s link table is the GPUs' network (expected hardware.network.{side}_bandwidth, "
        f"{side}_latency or {side}_efficiency)"
    )


def build(
    raw: Any, base_dir: Path, source: str, overrides: list[str] = (), origin: Origin = SET_FLAGS
) -> Loaded:
    """Validate an already-parsed scenario mapping (presets, overrides, checks).

    Every problem found is raised together: preset and config.json problems, schema
    problems (except under a section whose preset could not be read) and tier names.
    """
    top = _top_level_problem(raw)
    if top:
        raise InputError(source, [top])
    raw_in, raw = raw, overridden(raw, list(overrides), source, base_dir)
    problems: list[Problem] = []
    resolved = resolve(raw, base_dir, problems)
    problems += derive_accumulation(resolved)  # training.global_batch_size given
    try:
        scenario = Scenario.model_validate(resolved)
    except ValidationError as exc:
        failed = {p.path.split(".")[0] for p in problems}
        problems += [p for p in validation_problems(exc) if p.path.split(".")[0] not in failed]
        seen = {p.path for p in problems}
        problems += [p for p in _raw_tier_names(resolved) if p.path not in seen]
        problems = _override_hints(raw_in, list(overrides), base_dir) + problems
        raise InputError(
            source, _from_overrides(problems, overrides, (raw_in, raw), base_dir, origin)
        ) from None
    problems += consistency_problems(scenario)
    if problems:
        raise InputError(
            source, _from_overrides(problems, overrides, (raw_in, raw), base_dir, origin)
        )
    named = preset_named(raw.get("hardware"))
    return Loaded(
        scenario, resolved, source, overrides=tuple(overrides), origin=origin, hardware_named=named
    )


def build_resolved(resolved: dict[str, Any], source: str) -> Loaded | None:
    """`build`'s scenario from a mapping whose presets and config.json are merged in already
    (`tiersim plan`'s candidate: the resolved scenario with choices outside model: and
    hardware: written in; `resolved` is changed as `build` changes it), or None where the
    mapping has any problem (`build` of the mapping as written says which)."""
    if derive_accumulation(resolved):
        return None
    try:
        scenario = Scenario.model_validate(resolved)
    except ValidationError:
        return None
    if consistency_problems(scenario):
        return None
    return Loaded(scenario, resolved, source)


def _from_overrides(
    problems: list[Problem],
    overrides: list[str],
    raws: tuple[Any, Any],
    base_dir: Path,
    origin: Origin,
) -> list[Problem]:
    """Say which --set a problem comes from, where the file without the overrides does not have
    it: the file named in the message may not contain that key at all. `raws`: the scenario
    as written and with the overrides (for the preset files a --set names)."""
    if not overrides:
        return problems
    raw, after = raws
    try:
        build(raw, base_dir, "", [])
        own: set[tuple[str, str]] = set()
    except InputError as exc:
        own = {(p.path, p.message) for p in exc.problems}
    paths = {}
    for text in overrides:
        try:
            paths[".".join(parse_override(text)[0])] = text
        except ValueError:
            continue  # reported as a problem of its own
    presets = _set_presets(raw, after, paths, base_dir)
    return [
        p if (p.path, p.message) in own else _blamed(p, paths, origin, presets) for p in problems
    ]


def _set_presets(
    raw: Any, after: Any, paths: dict[str, str], base_dir: Path
) -> dict[str, tuple[str, str, dict[str, int], Any]]:
    """section -> (the --set's key, the file, its key lines, the scenario's own section) for a
    preset file a --set names (`--set hardware.preset=FILE`): a problem in that file is said
    at its line there, as one in a preset file the scenario itself names is."""
    named = {s: f"{s}.preset" for s in ("model", "hardware") if f"{s}.preset" in paths}
    if not named:
        return {}
    written = raw if isinstance(raw, dict) else {}
    out = {}
    for section, (name, text) in preset_texts(after, base_dir).items():
        if section in named:  # the scenario's own keys there are its file's, not the preset's
            out[section] = (named[section], name, key_lines(text), written.get(section))
    return out


def _blamed(p: Problem, paths: dict[str, str], origin: Origin, presets: dict) -> Problem:
    if p.path.startswith("--set") or not p.path:
        return p
    related = _related(p, paths)
    if related:
        return Problem(p.path, f"{p.message} {_from(related, origin)}", p.code)
    section, _, rest = p.path.partition(".")
    if section in presets and rest and not _has_key(presets[section][3], rest):
        key, name, lines, _ = presets[section]  # the file named, not the --set's clipped text
        line = line_of(rest, lines)
        at = f"{name}, line {line}" if line is not None else name
        return Problem(p.path, f"{p.message} ({at}, from {origin.one} {key})", p.code)
    return Problem(p.path, f"{p.message} (after {origin.all})", p.code)


def _has_key(node: Any, path: str) -> bool:
    """Whether the mapping `node` has the key path `path` (a.b.c) written in it."""
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _from(related: list[str], origin: Origin) -> str:
    """`(from --set a=1, --set b=2)`: the overrides that set a problem's key."""
    given = f", {origin.one} ".join(clipped(text) for text in related)
    return f"(from {origin.one} {given})"


def _related(p: Problem, paths: dict[str, str]) -> list[str]:
    """The --set texts (by key path) that set the problem's key, one under it or above it."""
    return [
        text
        for path, text in paths.items()
        if p.path == path or p.path.startswith(path + ".") or path.startswith(p.path + ".")
    ]


def blamed_on_overrides(
    problems: list[Problem], overrides: tuple[str, ...], origin: Origin = SET_FLAGS
) -> list[Problem]:
    """Problems found after loading (a run's checks): each whose key a --set value set, or
    one under or above it, says so; the rest are left for the file's lines."""
    paths = {}
    for text in overrides:  # each parsed already: the scenario loaded
        paths[".".join(parse_override(text)[0])] = text
    out = []
    for p in problems:
        related = _related(p, paths) if p.path and not p.path.startswith("--set") else []
        out.append(
            Problem(p.path, f"{p.message} {_from(related, origin)}", p.code) if related else p
        )
    return out


def load_scenario(
    path: str | Path, overrides: list[str] = (), origin: Origin = SET_FLAGS
) -> Loaded:
    path = Path(path)
    raw, text = read_yaml_and_text(path, str(path))
    return build_file(raw, text, path, overrides, origin)


def build_file(
    raw: Any, text: str, path: Path, overrides: list[str] = (), origin: Origin = SET_FLAGS
) -> Loaded:
    """`build` of a scenario read from `path` (`raw` parsed from `text`): each problem says
    the line its key is on in the file, where it has one."""
    try:
        loaded = build(raw, path.parent, str(path), overrides, origin)
        return replaced(loaded, text=text)
    except InputError as exc:
        raise with_lines(exc, text, preset_texts(raw, path.parent)) from None


def preset_texts(raw: Any, base_dir: Path) -> dict[str, tuple[str, str]]:
    """section -> (file, text) of the preset files `raw` names (read again: only when a
    problem is reported), for the lines of keys written there."""
    out = {}
    for section in ("model", "hardware"):
        value = raw.get(section) if isinstance(raw, dict) else None
        name = value.get("preset") if isinstance(value, dict) else None
        if not is_preset_file(name):
            continue
        preset = Path(name) if Path(name).is_absolute() else base_dir / name
        try:
            out[section] = (str(preset), read_yaml_and_text(preset, str(preset))[1])
        except InputError:
            continue  # reported as a problem of its own
    return out
