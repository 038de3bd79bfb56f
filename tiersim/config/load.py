"""Loading scenario files: YAML (safe loader only), presets, `--set` overrides, validation.

Nothing here has side effects beyond reading the files it is given. Every problem found in
a file is collected and raised together as one `InputError`.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
import types
import typing
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from tiersim.config.consistency import consistency_problems
from tiersim.config.hfconfig import HfConfigError, hf_config_path, read_hf_config
from tiersim.config.schema import Scenario
from tiersim.config.yamlfile import YamlLimitError, parse_yaml, read_yaml
from tiersim.core import limits
from tiersim.core.errors import InputError, Problem, shown

DEFAULT_HARDWARE = "h200-hbf"


@dataclass(frozen=True)
class Loaded:
    """A validated scenario with the fully resolved mapping it was built from."""

    scenario: Scenario
    resolved: dict[str, Any]
    source: str


# --- files and presets -------------------------------------------------------------------------


@functools.cache
def _preset_data(kind: str, name: str) -> Any:
    """Shipped presets are package data and never change while running: parse each once."""
    text = (resources.files("tiersim") / "presets" / kind / f"{name}.yaml").read_text()
    return parse_yaml(text)


@functools.cache
def _preset_names(kind: str) -> tuple[str, ...]:
    folder = resources.files("tiersim") / "presets" / kind
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


def preset_names(kind: str) -> list[str]:
    return list(_preset_names(kind))


def load_preset(kind: str, name: str) -> dict[str, Any]:
    """A shipped preset as a mapping; raises KeyError for an unknown name."""
    if not isinstance(name, str) or name not in _preset_names(kind):
        raise KeyError(name)
    return copy.deepcopy(_preset_data(kind, name))


def _unknown_preset(kind: str, name: Any, base_dir: Path) -> str:
    kind_of = _path_kind(_as_path(name, base_dir))
    if kind_of == "folder":
        return (
            f"{shown(name)} is a folder (expected a shipped preset's name, or a {_SUFFIXES} file)"
        )
    if kind_of == "file":
        path = Path(name)
        return (
            f"{shown(name)} is a file without a {_SUFFIXES} suffix (a preset file is known by its "
            f"suffix: expected e.g. {path.stem}.yaml)"
        )
    names = preset_names(kind)
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown preset {shown(name)} ({hint}available: {', '.join(names)})"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` wins key by key; nested mappings merge rather than replace."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --- overrides -----------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b.c=VALUE' -> (['a', 'b', 'c'], value); the value is read as a YAML scalar."""
    if "=" not in text:
        raise ValueError("expected PATH=VALUE, e.g. model.layers=160")
    path, _, value = text.partition("=")
    keys = [k.strip() for k in path.strip().split(".")]
    if not all(keys):
        raise ValueError(f"empty key in path {shown(path)} (expected keys joined by '.')")
    if len(keys) > limits.NESTING.value():
        raise ValueError(f"a key path of {len(keys):,} keys (a scenario is 5 deep)")
    try:
        parsed = parse_yaml(value) if value.strip() else ""
    except YamlLimitError as exc:  # too deep, too many values, too many digits
        raise ValueError(f"in the value: {exc.problem}") from None
    except yaml.constructor.ConstructorError as exc:  # e.g. a key given twice
        raise ValueError(f"{exc.problem} in {shown(value.strip())}") from None
    except yaml.YAMLError:
        parsed = value
    except RecursionError:  # a nesting bound raised past what the interpreter's stack takes
        raise ValueError("the value is nested too deeply to read") from None
    return keys, parsed


def set_path(raw: dict[str, Any], keys: list[str], value: Any) -> None:
    node = raw
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


def apply_overrides(raw: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    problems = []
    for text in overrides:
        try:
            keys, value = parse_override(text)
        except ValueError as exc:
            problems.append(Problem(f"--set {_clipped(text)}", str(exc)))
            continue
        set_path(out, keys, value)
    if problems:
        raise InputError(source, problems)
    return out


# --- preset resolution -------------------------------------------------------------------------


PRESET_FILE_SUFFIXES = (".yaml", ".yml")
_SUFFIXES = " or ".join(PRESET_FILE_SUFFIXES)


def _path_kind(path: Path | None) -> str | None:
    """'folder', 'file' (anything else that exists) or None."""
    try:
        if path is None or not path.exists():
            return None
        return "folder" if path.is_dir() else "file"
    except (OSError, ValueError):  # a name too long for a path, say
        return None


def _as_path(name: Any, base_dir: Path) -> Path | None:
    """A `preset:` value that is not a shipped name, as the path it may mean (None if it
    cannot be one)."""
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        return None
    return Path(name) if Path(name).is_absolute() else base_dir / name


def is_preset_file(name: Any) -> bool:
    """Whether a `preset:` value names a YAML file (else a shipped preset): by its suffix."""
    return isinstance(name, str) and name.endswith(PRESET_FILE_SUFFIXES)


def _resolve_model(model: Any, base_dir: Path, problems: list[Problem]) -> Any:
    if not isinstance(model, dict):
        return model
    if "preset" in model and "hf_config" in model:  # which one's dimensions would be meant?
        problems.append(Problem("model", _both_sources(model)))
        return model
    merged: dict[str, Any] = {}
    name = model.get("preset")
    if is_preset_file(name):
        merged = _preset_file(name, base_dir, problems, "model.preset") or {}
    elif "preset" in model:
        try:
            merged = load_preset("models", model["preset"])
        except (KeyError, TypeError):
            what = _unknown_preset("models", model["preset"], base_dir)
            problems.append(Problem("model.preset", what))
    if "hf_config" in model:
        try:
            path = hf_config_path(model["hf_config"], base_dir)
            merged = deep_merge(merged, read_hf_config(path))
        except HfConfigError as exc:
            problems.append(Problem("model.hf_config", str(exc)))
    return deep_merge(merged, model)


def _both_sources(model: dict[str, Any]) -> str:
    given = f"preset {shown(model['preset'])} and hf_config {shown(model['hf_config'])}"
    return (
        f"{given} are both given (expected one of preset, hf_config or the dimensions; "
        "dimension keys beside a preset or an hf_config override it key by key)"
    )


def _preset_file(
    name: str, base_dir: Path, problems: list[Problem], key: str = "hardware.preset"
) -> dict[str, Any] | None:
    """A preset given as a YAML file path relative to the scenario (e.g. written by
    `tiersim calibrate` for hardware or `tiersim measure --calibrate` for a model)."""
    path = Path(name) if Path(name).is_absolute() else base_dir / name
    try:
        data = read_yaml(path, str(path))
    except InputError as exc:
        problems += [Problem(key, p.render(str(path))) for p in exc.problems]
        return None
    if not isinstance(data, dict):
        problems.append(Problem(key, f"{path} is not a YAML mapping"))
        return None
    return data


def _resolve_hardware(hardware: Any, base_dir: Path, problems: list[Problem]) -> Any:
    """Merge inline hardware keys onto a preset: a shipped name, a YAML path, or `none`."""
    if hardware is None:
        hardware = {}
    if not isinstance(hardware, dict):
        return hardware
    name = hardware.get("preset", DEFAULT_HARDWARE)
    if name in (None, "none"):
        return {k: v for k, v in hardware.items() if k != "preset"}
    if is_preset_file(name):
        base = _preset_file(name, base_dir, problems)
    else:
        try:
            base = load_preset("hardware", name)
        except (KeyError, TypeError):
            problems.append(Problem("hardware.preset", _unknown_preset("hardware", name, base_dir)))
            base = None
    if base is None:
        return hardware
    return deep_merge(base, {**hardware, "preset": name})


def resolve(raw: dict[str, Any], base_dir: Path, problems: list[Problem]) -> dict[str, Any]:
    """Presets and config.json merged in; what cannot be resolved is added to `problems`."""
    out = dict(raw)
    if "model" in out:
        out["model"] = _resolve_model(out["model"], base_dir, problems)
    out["hardware"] = _resolve_hardware(out.get("hardware"), base_dir, problems)
    return out


# --- validation messages -----------------------------------------------------------------------


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _model_class(tp: Any) -> type[BaseModel] | None:
    """The single model class inside `tp` (through Optional), if there is one."""
    tp = _unwrap(tp)
    if _is_union(tp):
        models = [
            a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        return models[0] if len(models) == 1 else None
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _walk(loc: tuple[Any, ...]) -> tuple[list[str], type[BaseModel] | None]:
    """Turn pydantic's loc into the user's key path, dropping union-branch tags.

    Also returns the model that holds the last key (for 'did you mean' suggestions).
    """
    path: list[str] = []
    cur: Any = Scenario
    parent: type[BaseModel] | None = None
    for part in loc:
        model = _model_class(cur)
        if model is not None:
            parent = model
            path.append(str(part))
            field = model.model_fields.get(str(part))
            cur = field.annotation if field else None
            continue
        tp = _unwrap(cur)
        origin = typing.get_origin(tp)
        if origin is dict:
            path.append(str(part))
            cur = typing.get_args(tp)[1]
        elif origin in (tuple, list):
            path.append(str(part))
            cur = typing.get_args(tp)[0]
        elif _is_union(tp) or cur is None:
            cur = None  # a union-branch tag such as 'int' or "literal['auto']"
        else:
            path.append(str(part))
    if path[:2] == ["budget", "tiers"]:
        path = ["budget", *path[2:]]
    return path, parent


def _message(err: dict[str, Any], parent: type[BaseModel] | None) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        key = str(err["loc"][-1])
        fields = list(parent.model_fields) if parent else []
        close = (
            difflib.get_close_matches(key, fields, n=1)
            or [f for f in fields if f.startswith(key) or key.startswith(f)][:1]
        )
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown key '{key}' ({hint}expected one of: {', '.join(fields)})"
    if kind == "missing":
        return "required key is missing"
    if kind == "bool_parsing":
        return f"expected true or false (got {shown(err.get('input'))})"
    if kind in ("float_parsing", "int_parsing"):
        return f"expected a number (got {shown(err.get('input'))})"
    if kind == "finite_number":
        return f"expected a finite number (got {shown(err.get('input'))})"
    if kind == "string_too_long" and tuple(err["loc"]) == ("name",):
        size = len(err.get("input") or "")
        limit = err.get("ctx", {}).get("max_length")
        return (
            f"a name of {size} characters (expected at most {limit}: it names the results folder)"
        )
    if kind == "string_pattern_mismatch" and tuple(err["loc"]) == ("name",):
        return (
            "expected ASCII letters, digits, '_', '-' and '.' only: it names the results "
            f"folder (got {shown(err.get('input'))})"
        )
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    msg = re.sub(r" or instance of \w+", "", msg)  # pydantic's class names mean nothing here
    if kind.endswith("_type") or kind.startswith(("literal", "greater", "less", "string")):
        return f"{msg[0].lower()}{msg[1:]} (got {shown(err.get('input'))})"
    return msg


def validation_problems(exc: ValidationError) -> list[Problem]:
    by_path: dict[str, list[str]] = {}
    for err in exc.errors():
        path, parent = _walk(tuple(err["loc"]))
        key = ".".join(path)
        text = _message(err, parent).replace("--set ...", f"--set {key}.")  # the full path
        if text not in by_path.setdefault(key, []):
            by_path[key].append(text)
    return [Problem(path, "; or ".join(msgs)) for path, msgs in by_path.items()]


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
        )
    if not isinstance(raw, dict):
        got = _TYPE_NAMES.get(type(raw).__name__, type(raw).__name__)
        return Problem(
            "", f"top level is {got} (expected a mapping of sections: name, model, training, ...)"
        )
    if raw and not set(map(str, raw)) & set(Scenario.model_fields):
        keys = ", ".join(str(k) for k in list(raw)[:3]) + (", ..." if len(raw) > 3 else "")
        sections = ", ".join(Scenario.model_fields)
        sweep = any(k in raw for k in ("base", "grid", "zip"))
        hint = "; it looks like a sweep: run it with `tiersim sweep`" if sweep else ""
        return Problem(
            "", f"not a scenario: no section among its keys ({keys}); expected {sections}{hint}"
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
        Problem(f"placement.{cls}", f"tier '{tier}' does not exist (tiers: {', '.join(tiers)})")
        for cls, tier in placement.items()
        if cls != "optimizer_compute" and isinstance(tier, str) and tier not in tiers
    ]


# mappings whose keys are names the user chooses: the schema cannot call a new one unknown
_NAMED_MAPPINGS = {("hardware", "tiers"), ("hardware", "links"), ("budget",)}


def _override_hints(raw: dict[str, Any], overrides: list[str], base_dir: Path) -> list[Problem]:
    """A `--set` whose path names a key the scenario (presets resolved) lacks, where one close
    to it exists: most likely a typo that created a new, incomplete entry."""
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
                if close and tuple(keys[:depth]) in _NAMED_MAPPINGS:
                    where = ".".join(keys[:depth])
                    what = f"'{key}' is not in {where}; did you mean '{close[0]}'?"
                    hints.append(Problem(f"--set {'.'.join(keys)}", what))
                break
            node = node[key]
    return hints


def build(raw: Any, base_dir: Path, source: str, overrides: list[str] = ()) -> Loaded:
    """Validate an already-parsed scenario mapping (presets, overrides, checks).

    Every problem found is raised together: preset and config.json problems, schema
    problems (except under a section whose preset could not be read) and tier names.
    """
    top = _top_level_problem(raw)
    if top:
        raise InputError(source, [top])
    raw_in, raw = raw, apply_overrides(raw, list(overrides), source)
    problems: list[Problem] = []
    resolved = resolve(raw, base_dir, problems)
    try:
        scenario = Scenario.model_validate(resolved)
    except ValidationError as exc:
        failed = {p.path.split(".")[0] for p in problems}
        problems += [p for p in validation_problems(exc) if p.path.split(".")[0] not in failed]
        seen = {p.path for p in problems}
        problems += [p for p in _raw_tier_names(resolved) if p.path not in seen]
        problems = _override_hints(raw_in, list(overrides), base_dir) + problems
        raise InputError(source, _from_overrides(problems, overrides, raw_in, base_dir)) from None
    problems += consistency_problems(scenario)
    if problems:
        raise InputError(source, _from_overrides(problems, overrides, raw_in, base_dir))
    return Loaded(scenario, resolved, source)


def _from_overrides(
    problems: list[Problem], overrides: list[str], raw: Any, base_dir: Path
) -> list[Problem]:
    """Say which --set a problem comes from, where the file without the overrides does not have
    it: the file named in the message may not contain that key at all."""
    if not overrides:
        return problems
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
    return [p if (p.path, p.message) in own else _blamed(p, paths) for p in problems]


def _blamed(p: Problem, paths: dict[str, str]) -> Problem:
    if p.path.startswith("--set") or not p.path:
        return p
    related = [
        text
        for path, text in paths.items()
        if p.path == path or p.path.startswith(path + ".") or path.startswith(p.path + ".")
    ]
    if not related:
        return Problem(p.path, f"{p.message} (after the --set values)")
    given = ", --set ".join(_clipped(text) for text in related)
    return Problem(p.path, f"{p.message} (from --set {given})")


def _clipped(text: str, chars: int = 80) -> str:
    """A --set as the user gave it, cut short: a message never grows with the input."""
    return text if len(text) <= chars else f"{text[: chars - 3]}..."


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Loaded:
    path = Path(path)
    raw = read_yaml(path, str(path))
    return build(raw, path.parent, str(path), overrides)
