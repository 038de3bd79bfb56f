"""Reading a framework's config file, bounded, and telling which framework's it is from its
content (or as `--from` names it). Malformed input is refused with the file and the key."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tiersim.config.yamlfile import YamlLimitError, parse_yaml, yaml_problem
from tiersim.core import limits
from tiersim.core.errors import InputError, Problem, shown
from tiersim.core.files import FileProblem, read_regular_file
from tiersim.core.records import record
from tiersim.frameworks import IMPORT_KINDS
from tiersim.frameworks.bridge import looks_like_recipe, read_recipe

# flags only a Megatron-LM argument list has (any one tells)
_MEGATRON_FLAGS = re.compile(
    r"--(num-layers|hidden-size|tensor-model-parallel-size|pipeline-model-parallel-size|"
    r"micro-batch-size|global-batch-size|num-attention-heads|seq-length)\b"
)
_TORCHTITAN_TABLES = {"job", "model", "training", "parallelism", "activation_checkpoint"}
_BRIDGE_KEYS = {"tensor_model_parallel_size", "pipeline_model_parallel_size", "num_layers"}


@record
class ConfigFile:
    """One framework config read: its kind, its parsed content (a mapping for DeepSpeed,
    torchtitan and Megatron-Bridge; the text for a Megatron argument list) and its path."""

    kind: str
    content: Any
    path: str
    hf_model: str | None = None  # a Megatron-Bridge recipe's AutoBridge.from_hf_pretrained id
    notes: tuple[Problem, ...] = ()  # what reading it left out (a recipe's statements)


def read_text(path: Path) -> str:
    """The file's text: a regular file of at most the JSON bound (a framework config is a few
    kB), UTF-8."""
    source = str(path)
    try:
        data = read_regular_file(path, limits.JSON_BYTES.value(), "a framework config file")
    except FileProblem as exc:
        hint = f"; {limits.JSON_BYTES.env} raises the bound" if "larger" in str(exc) else ""
        raise InputError(source, [Problem("", f"{exc}{hint}", "E-IMPORT-FILE")]) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = getattr(exc, "strerror", None) or exc
        raise InputError(source, [Problem("", f"cannot read: {reason}", "E-IMPORT-FILE")]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        why = f"is not UTF-8 text (byte {exc.start}: {exc.reason})"
        raise InputError(source, [Problem("", why, "E-IMPORT-FILE")]) from None


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{key}: given twice ({shown(out[key])}, then {shown(value)})")
        out[key] = value
    return out


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > limits.INT_DIGITS:
        raise ValueError(f"an integer of {len(text):,} digits (at most {limits.INT_DIGITS})")
    return int(text)


def parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        why = f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        raise InputError(source, [Problem("", why, "E-IMPORT-FILE")]) from None
    except RecursionError:
        raise InputError(
            source, [Problem("", "nested too deeply to read", "E-IMPORT-FILE")]
        ) from None
    except ValueError as exc:
        raise InputError(source, [Problem("", str(exc), "E-IMPORT-FILE")]) from None


def parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            source, [Problem("", f"not valid TOML ({exc})", "E-IMPORT-FILE")]
        ) from None
    except RecursionError:
        raise InputError(
            source, [Problem("", "nested too deeply to read", "E-IMPORT-FILE")]
        ) from None


def parse_bridge_yaml(text: str, source: str) -> Any:
    try:
        return parse_yaml(text)
    except YamlLimitError as exc:
        raise InputError(source, [Problem("", str(exc.problem), "E-IMPORT-FILE")]) from None
    except yaml.YAMLError as exc:  # as a scenario's is said: where, and what, on one line
        raise InputError(
            source, [Problem("", f"not valid YAML ({yaml_problem(exc, text)})", "E-IMPORT-FILE")]
        ) from None
    except RecursionError:
        raise InputError(
            source, [Problem("", "nested too deeply to read", "E-IMPORT-FILE")]
        ) from None


# what a JSON value other than an object is, in JSON's words (not Python's type names)
_JSON_KINDS = {
    "list": "an array",
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "true or false",
    "NoneType": "null",
}


def _as(kind: str, text: str, source: str, recipe: str | None = None) -> ConfigFile:
    if kind == "deepspeed":
        content = parse_json(text, source)
        if not isinstance(content, dict):
            got = _JSON_KINDS.get(type(content).__name__, type(content).__name__)
            why = f"top level is {got} (expected a JSON object of keys)"
            raise InputError(source, [Problem("", why, "E-IMPORT-FILE")])
        return ConfigFile(kind, content, source)
    if kind == "torchtitan":
        return ConfigFile(kind, parse_toml(text, source), source)
    if kind == "accelerate":
        parsed = parse_bridge_yaml(text, source)
        if not isinstance(parsed, dict):
            why = "top level is not a mapping of keys (expected an Accelerate config YAML)"
            raise InputError(source, [Problem("", why, "E-IMPORT-FILE")])
        return ConfigFile(kind, parsed, source)
    if looks_like_recipe(text) or recipe is not None:
        read = read_recipe(text, source, recipe)
        return ConfigFile(kind, read.sections, source, read.hf_model, tuple(read.notes))
    if not _MEGATRON_FLAGS.search(text):
        parsed = parse_bridge_yaml(text, source)
        if isinstance(parsed, dict):  # a Megatron-Bridge config: sections of keys
            return ConfigFile(kind, parsed, source)
    return ConfigFile(kind, text, source)


def _looks_like(text: str, source: str) -> str | None:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "deepspeed"
    try:
        toml = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        toml = None
        if source.lower().endswith(".toml"):  # read as one, to say where its syntax breaks
            return "torchtitan"
    if isinstance(toml, dict) and set(toml) & _TORCHTITAN_TABLES:
        return "torchtitan"
    if looks_like_recipe(text):
        return "megatron"  # a Megatron-Bridge Python recipe
    if _MEGATRON_FLAGS.search(text):
        return "megatron"
    try:
        parsed = parse_yaml(text)
    except (yaml.YAMLError, RecursionError):
        # a .yaml file is read as a Megatron-Bridge config, to say where its syntax breaks
        return "megatron" if source.lower().endswith((".yaml", ".yml")) else None
    if isinstance(parsed, dict) and "distributed_type" in parsed:  # `accelerate config`'s
        return "accelerate"
    if isinstance(parsed, dict) and any(
        isinstance(v, dict) and set(v) & _BRIDGE_KEYS for v in parsed.values()
    ):
        return "megatron"
    # a .json file is read as a DeepSpeed config, to say what is wrong with it (a list, a
    # syntax error) rather than that its kind is unknown
    return "deepspeed" if source.lower().endswith(".json") else None


def _text_bound(text: str, source: str) -> None:
    """A TOML, YAML or shell text is read by pure-Python parsers (~1 MB/s): held to the
    YAML bound, far above a real one's few kB (a JSON config is read in C, to its own)."""
    bound = limits.YAML_BYTES.value()
    if len(text.encode("utf-8")) > bound:
        why = (
            f"is larger than {bound:,} bytes (expected a framework config of a few kB; "
            f"{limits.YAML_BYTES.env} raises the bound)"
        )
        raise InputError(source, [Problem("", why, "E-IMPORT-FILE")])


_EXPECTED_KINDS = (
    "a DeepSpeed JSON object, a Megatron-LM argument list or script with --num-layers ..., a "
    "Megatron-Bridge YAML or Python recipe, a torchtitan TOML with [parallelism] / [training], or "
    "an Accelerate config YAML with distributed_type"
)


def read_config(path: Path, kind: str | None = None, recipe: str | None = None) -> ConfigFile:
    """The config at `path`, of `kind` (one of IMPORT_KINDS) or recognised from its content;
    `recipe`: the function of a Megatron-Bridge Python recipe file to read."""
    source = str(path)
    text = read_text(path)
    if kind != "deepspeed" and not text.lstrip().startswith("{"):
        _text_bound(text, source)
    if not text.strip():
        why = f"file is empty (expected a framework config: {_EXPECTED_KINDS})"
        raise InputError(source, [Problem("", why, "E-IMPORT-FILE")])
    found = kind or _looks_like(text, source)
    if found is None:
        why = (
            f"cannot tell which framework's config this is (expected {_EXPECTED_KINDS}; or "
            f"name it with --from {'|'.join(IMPORT_KINDS)})"
        )
        raise InputError(source, [Problem("", why, "E-IMPORT-FILE")])
    if recipe is not None and found != "megatron":
        why = (
            f"--recipe {recipe} names a Megatron-Bridge recipe function (this is a {found} config)"
        )
        raise InputError(source, [Problem("--recipe", why, "E-OPTION")])
    try:
        return _as(found, text, source, recipe)
    except InputError as exc:
        if kind is None:  # recognised from its content: the problem is the file's alone
            raise
        # the user chose how it is read: a file that is not that kind's says so
        said = f" (read as {kind}'s, as --from {kind} says)"
        problems = [
            Problem(p.path, p.message + (said if p.code == "E-IMPORT-FILE" else ""), p.code)
            for p in exc.problems
        ]
        raise InputError(exc.source, problems) from None
