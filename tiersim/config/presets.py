"""Shipped presets (package data, parsed once) and the resolution of a scenario's `preset:`,
`hf_config:` and preset-file values into one mapping. Reads only the files it is given."""

from __future__ import annotations

import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Any

from tiersim.config.yamlfile import parse_shipped_yaml, read_yaml
from tiersim.core.errors import InputError, Problem, shown, shown_yaml

DEFAULT_HARDWARE = "h200-hbf"


@functools.cache
def _preset_data(kind: str, name: str) -> Any:
    """Shipped presets are package data and never change while running: parse each once."""
    text = (resources.files("tiersim") / "presets" / kind / f"{name}.yaml").read_text()
    return parse_shipped_yaml(text)


@functools.cache
def _preset_names(kind: str) -> tuple[str, ...]:
    folder = resources.files("tiersim") / "presets" / kind
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


def preset_names(kind: str) -> list[str]:
    return list(_preset_names(kind))


def load_preset(kind: str, name: str) -> dict[str, Any]:
    """A shipped preset as a mapping (the caller's own copy); raises KeyError for an unknown
    name."""
    return plain_copy(_shipped(kind, name))


def read_preset(kind: str, name: str) -> dict[str, Any]:
    """A shipped preset as a mapping to read, shared: never change it (`load_preset` gives a
    copy to change); raises KeyError for an unknown name."""
    return _shipped(kind, name)


def _shipped(kind: str, name: str) -> dict[str, Any]:
    """The parsed preset itself, shared: to be copied (deep_merge copies), never changed."""
    if not isinstance(name, str) or name not in _preset_names(kind):
        raise KeyError(name)
    return _preset_data(kind, name)


def plain_copy(value: Any) -> Any:
    """A deep copy of YAML-shaped data: mappings and lists copied, scalars shared (immutable),
    anything else by copy.deepcopy. About 10x cheaper than copy.deepcopy on a preset, which
    every point of a sweep merges; unlike it, a value reached twice (a YAML alias) is copied
    twice, which only a mutation could tell apart."""
    if isinstance(value, dict):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_copy(item) for item in value]
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    return copy.deepcopy(value)


def closest_preset(name: str, names: list[str]) -> str | None:
    """The preset a mistyped name most likely means: one holding the name whole as a part
    (h100 -> dgx-h100, not gh200, which difflib ranks closer), else one sharing a part with a
    digit and a letter in it, a chip or a size (dgx-h200 -> h200-hbf: difflib offered
    dgx-h100, another GPU, and hgx-h200 gh200), the closest of those, else difflib's closest."""
    import difflib  # a name refused: a valid file never needs it

    given = name.lower()
    holding = sorted((n for n in names if given in n.lower().split("-")), key=len)
    if holding:
        return holding[0]
    numbered = {p for p in given.split("-") if any(c.isdigit() for c in p) and not p.isdigit()}
    sharing = [n for n in names if numbered & set(n.lower().split("-"))]
    if sharing:

        def likeness(n: str) -> tuple[int, float]:
            shared = len(numbered & set(n.lower().split("-")))
            return shared, difflib.SequenceMatcher(None, given, n.lower()).ratio()

        return max(sharing, key=likeness)
    close = difflib.get_close_matches(name, names, n=1)
    return close[0] if close else None


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
    close = closest_preset(str(name), names)
    hint = f"did you mean '{close}'? " if close else ""
    return f"unknown preset {shown(name)} ({hint}available: {', '.join(names)})"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` wins key by key; nested mappings merge rather than replace. A new mapping,
    sharing nothing mutable with either (base's keys first, in order, then over's new ones)."""
    out = {}
    for key, value in base.items():
        if key not in over:
            out[key] = plain_copy(value)
        elif isinstance(over[key], dict) and isinstance(value, dict):
            out[key] = deep_merge(value, over[key])
        else:
            out[key] = plain_copy(over[key])
    for key, value in over.items():
        if key not in base:
            out[key] = plain_copy(value)
    return out


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


_MODEL_SOURCES = ("preset", "hf_config")


def _resolve_model(model: Any, base_dir: Path, problems: list[Problem]) -> Any:
    if not isinstance(model, dict):
        return model
    # null is "not given": `--set model.preset=null` takes a file's preset out, key by key
    model = {k: v for k, v in model.items() if not (k in _MODEL_SOURCES and v is None)}
    if "preset" in model and "hf_config" in model:  # which one's dimensions would be meant?
        problems.append(Problem("model", _both_sources(model), "E-PRESET"))
        return model
    merged = _model_source(model, base_dir, problems)
    if "parameters" in model and merged and "parameters" not in merged:
        problems.append(Problem("model.parameters", _parameters_beside(model), "E-PRESET"))
        return model
    return deep_merge(merged, model)


def _model_source(model: dict[str, Any], base_dir: Path, problems: list[Problem]) -> dict[str, Any]:
    """The keys `model.preset` or `model.hf_config` give ({} for neither, or one unreadable)."""
    merged: dict[str, Any] = {}
    name = model.get("preset")
    if is_preset_file(name):
        merged = _preset_file(name, base_dir, problems, "model.preset") or {}
    elif "preset" in model:
        try:
            merged = _shipped("models", model["preset"])  # deep_merge copies it
        except (KeyError, TypeError):
            what = _unknown_preset("models", model["preset"], base_dir)
            problems.append(Problem("model.preset", what, "E-PRESET"))
    if "hf_config" in model:
        # here: only a scenario naming a Hugging Face config needs its reader
        from tiersim.config.hfconfig import HfConfigError, hf_config_path, read_hf_config

        try:
            path = hf_config_path(model["hf_config"], base_dir)
            merged = deep_merge(merged, read_hf_config(path))
        except HfConfigError as exc:
            problems.append(Problem("model.hf_config", str(exc), exc.code))
    return merged


def _parameters_beside(model: dict[str, Any]) -> str:
    """`parameters` would turn the source's transformer into a generic model, dropping every
    shape it gives (activations 0 B, FLOPs 2 per parameter): refused, not done silently."""
    key = "preset" if "preset" in model else "hf_config"
    return (
        f"{shown_yaml(model['parameters'])} beside {key} {shown(model[key])} (expected one of the "
        f"two: model.{key} gives a transformer's dimensions, from which its parameters, "
        "activations and FLOPs are counted; model.parameters is a generic model of that many "
        "parameters with no shapes, its activations 0 B unless model.activation_bytes_per_layer "
        f"is given; to resize the {key}'s model override its dimensions, e.g. model.layers, or "
        f"for a generic model drop model.{key})"
    )


def _both_sources(model: dict[str, Any]) -> str:
    given = f"preset {shown(model['preset'])} and hf_config {shown(model['hf_config'])}"
    return (
        f"{given} are both given (expected one of preset, hf_config or the dimensions; "
        "dimension keys beside a preset or an hf_config override it key by key; null takes "
        "one out, e.g. --set model.preset=null)"
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
        problems += [Problem(key, p.said(str(path)), p.code) for p in exc.problems]
        return None
    if not isinstance(data, dict):
        problems.append(Problem(key, f"{path} is not a YAML mapping", "E-YAML"))
        return None
    if other := _other_kind(key, data):  # one line, not an unknown key a line of the other's
        problems.append(Problem(key, f"{path} is {other}", "E-PRESET"))
        return None
    return data


# keys only one kind of preset has: a model's dimensions, a machine's parts
_SIGNS = {
    "model.preset": ("model", {"layers", "hidden", "heads", "vocab", "parameters"}),
    "hardware.preset": ("hardware", {"gpu", "tiers", "links", "network"}),
}


def _other_kind(key: str, data: dict[str, Any]) -> str:
    """'a model preset (layers, hidden, ...), not a hardware preset (...)' where a preset file
    given under `key` is the other kind's (gpt2.yaml as hardware.preset gave 18 lines)."""
    if key not in _SIGNS:
        return ""
    (kind, own), (other, theirs) = _SIGNS[key], next(v for k, v in _SIGNS.items() if k != key)
    if set(data) & own or not set(data) & theirs:
        return ""
    shown = ", ".join(sorted(map(str, set(data) & theirs)))
    expected = ", ".join(sorted(own))
    return (
        f"a {other} preset ({shown}), not a {kind} preset (expected a {kind} preset's keys, "
        f"e.g. {expected}; this file goes under {other}.preset)"
    )


def preset_named(hardware: Any) -> bool:
    """Whether a scenario's `hardware` (as written, overrides applied) names its machine: a
    preset (or `none`), or no mapping at all to merge onto one (a value refused elsewhere);
    else it runs on DEFAULT_HARDWARE."""
    return not isinstance(hardware, dict | None) or "preset" in (hardware or {})


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
            base = _shipped("hardware", name)  # deep_merge below copies it
        except (KeyError, TypeError):
            problems.append(
                Problem("hardware.preset", _unknown_preset("hardware", name, base_dir), "E-PRESET")
            )
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
