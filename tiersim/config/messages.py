"""pydantic's validation errors said in the user's words: the key path as written in the file
(union-branch tags dropped) and a message that says what is expected."""

from __future__ import annotations

import datetime
import decimal
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from tiersim.config.choice_messages import alternatives, closest
from tiersim.config.fields import COUNT_BOUND
from tiersim.config.schema import Scenario
from tiersim.config.shape_messages import PRESET_AT, not_a_list, not_a_mapping, preset_as_section
from tiersim.core.errors import Problem, shown_yaml


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


# what to write for the keys every scenario needs
_MISSING = {
    ("name",): " (expected the run's name, e.g. name: my-run; it names results/<name>/)",
    ("model",): (
        " (expected model: {preset: NAME}, {hf_config: PATH} or the model's dimensions; "
        "`tiersim presets` lists the presets)"
    ),
}


def _missing_hint(err: dict[str, Any], parent: type[BaseModel] | None) -> str:
    """What to write for a missing key: said for the keys every scenario needs, else the
    choices of a key that takes one of a few words (a tier's kind)."""
    loc = tuple(map(str, err["loc"]))
    if loc in _MISSING:
        return _MISSING[loc]
    field = parent.model_fields.get(loc[-1]) if parent and loc else None
    tp = _unwrap(field.annotation) if field else None
    if typing.get_origin(tp) is typing.Literal:
        return f" (expected one of: {', '.join(map(str, typing.get_args(tp)))})"
    return _section_hint(tp, _EXAMPLES.get(loc, ""))


# a missing section's example, where one says more than its keys (a machine of your own)
_EXAMPLES = {
    ("hardware", "gpu"): "e.g. gpu: {name: H100, peak_flops: {bf16: 989 TFLOP/s}}",
    ("hardware", "tiers"): (
        "e.g. tiers: {hbm: {kind: hbm, capacity: 80 GB, bandwidth: 3.35 TB/s}, dram: {kind: "
        "dram, capacity: 2 TB, bandwidth: 200 GB/s}}; hardware.preset names a whole machine"
    ),
}


def _section_hint(tp: Any, example: str = "") -> str:
    """What goes inside a missing section: its required keys and the others (a mapping of
    names to sections, such as hardware.tiers, by what each name's section holds)."""
    section = _model_class(tp)
    named = typing.get_origin(tp) is dict and _model_class(typing.get_args(tp)[1])
    model = section or named
    if not model:
        return ""
    required = [k for k, f in model.model_fields.items() if f.is_required()]
    optional = [k for k, f in model.model_fields.items() if not f.is_required()]
    keys = f"{', '.join(required) or 'no key'} required"
    keys += f"; optional: {', '.join(optional)}" if optional else ""
    keys += f"; {example}" if example else ""
    if named:
        return f" (expected a mapping of names, each to a mapping of its keys: {keys})"
    return f" (expected a mapping of its keys: {keys})"


def _may_leave_out(err: dict[str, Any], parent: type[BaseModel] | None) -> bool:
    """Whether the key of a null section may be left out (it is no required key)."""
    field = parent.model_fields.get(str(err["loc"][-1])) if parent and err["loc"] else None
    return not (field is not None and field.is_required())


def null_sections_left_out(exc: ValidationError) -> set[str]:
    """The key paths (as the user writes them) of sections given null that may be left out:
    what `--set KEY=null` takes as leaving KEY out (tiersim.config.set_null)."""
    out = set()
    for err in exc.errors():
        if err["type"] in ("dict_type", "model_type") and err.get("input", 0) is None:
            path, parent = _walk(tuple(err["loc"]))
            if _may_leave_out(err, parent):
                out.add(".".join(path))
    return out


def _null_section(err: dict[str, Any], parent: type[BaseModel] | None) -> str:
    """A section written with nothing under it (null in YAML), and the remedy where one is."""
    if _may_leave_out(err, parent):  # `--set KEY=null` leaves it out (tiersim.config.set_null)
        keep, hint = "; leave the key out to keep the default", ""
    else:  # no leaving it out, in the file or by --set: what to give instead
        keep, hint = "; the key is required", _missing_hint(err, parent)
    return (
        "expected a mapping of settings under this key (got null: a key with nothing after "
        f"it is null in YAML{keep}){hint}"
    )


def _section_keys(err: dict[str, Any], parent: type[BaseModel] | None) -> str:
    """The keys a section takes, for a value given where the section goes (`endurance: 3000`
    for `endurance: {pe_cycles: 3000}`), required ones first."""
    loc = err["loc"]
    field = parent.model_fields.get(str(loc[-1])) if parent and loc else None
    model = _model_class(field.annotation) if field else _entry_model(loc, parent)
    if model is None:
        return ""
    fields = model.model_fields
    need = [k for k, f in fields.items() if f.is_required()]
    rest = [k for k, f in fields.items() if not f.is_required()]
    more = ", ..." if len(rest) > SECTION_KEYS else ""
    rest_said = ", ".join(rest[:SECTION_KEYS]) + more
    return f"{', '.join(need)}, required; {rest_said}" if need else rest_said


def _entry_model(loc: tuple[Any, ...], parent: type[BaseModel] | None) -> type[BaseModel] | None:
    """The section an entry of a mapping of names holds (`hardware.tiers.hbm`: a tier)."""
    field = parent.model_fields.get(str(loc[-2])) if parent and len(loc) > 1 else None
    tp = _unwrap(field.annotation) if field else None
    return _model_class(typing.get_args(tp)[1]) if typing.get_origin(tp) is dict else None


# keys whose name carries their unit: a count of it, as the framework reads them, not a
# quantity with a unit (apex's `bucket_cap_mb: 100` is 100 MiB; `100 MB` is refused)
COUNT_OF = {"bucket_cap_mb": ("MiB", "100")}


def _not_a_number(err: dict[str, Any]) -> str:
    """A number's key given something else; a key counting in its name's unit says so."""
    if err["loc"] and err["loc"][-1] in COUNT_OF:
        unit, example = COUNT_OF[err["loc"][-1]]
        return (
            f"a count of {unit}, not a quantity with a unit (expected a number, e.g. "
            f"{example}; got {shown_yaml(err.get('input'))})"
        )
    return f"expected a number (got {shown_yaml(err.get('input'))})"


def _kind_of(value: Any) -> str:
    """What YAML read a plain value as, in its words: 'null', 'true or false', 'a number'."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "a date" if isinstance(value, (datetime.date, datetime.time)) else "not text"


SECTION_KEYS = 10  # keys named where a section was expected; docs/scenario-reference.md has all


def _key_message(err: dict[str, Any], parent: type[BaseModel] | None) -> str:
    """An unknown key, with the closest the section has; or a key that is not text (`5: 3`,
    `~: 3`: YAML's keys need not be text, tiersim's are)."""
    import difflib  # a name refused: a valid file never needs it

    fields = list(parent.model_fields) if parent else []
    if err["type"] == "invalid_key":
        names = f", e.g. {', '.join(fields[:3])}" if fields else ""
        kind_of = _kind_of(err.get("input"))
        return f"a key that is {kind_of}, not a name (expected a key written as text{names})"
    key = str(err["loc"][-1])
    close = (
        difflib.get_close_matches(key, fields, n=1)
        or [f for f in fields if f.startswith(key) or key.startswith(f)][:1]
    )
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key '{key}' ({hint}expected one of: {', '.join(fields)})"


def _message(err: dict[str, Any], parent: type[BaseModel] | None) -> str:
    kind, msg = err["type"], err["msg"]
    if kind in ("extra_forbidden", "invalid_key"):
        return _key_message(err, parent)
    if kind == "missing":
        return "required key is missing" + _missing_hint(err, parent)
    if kind == "bool_parsing":
        return f"expected true or false (got {shown_yaml(err.get('input'))})"
    if kind in ("float_parsing", "int_parsing"):
        return _not_a_number(err)
    if kind == "finite_number":
        return f"expected a finite number (got {shown_yaml(err.get('input'))})"
    if kind == "string_too_long" and tuple(err["loc"]) == ("name",):
        size = len(err.get("input") or "")
        limit = err.get("ctx", {}).get("max_length")
        return (
            f"a name of {size} characters (expected at most {limit}: it names the results folder)"
        )
    if kind == "string_pattern_mismatch" and tuple(err["loc"]) == ("name",):
        return (
            "expected ASCII letters, digits, '_', '-' and '.' only: it names the results "
            f"folder (got {shown_yaml(err.get('input'))})"
        )
    if kind == "less_than_equal" and err.get("ctx", {}).get("le") == COUNT_BOUND:
        return (
            f"input should be at most {COUNT_BOUND:,} (2^40, the bound on every count; "
            f"got {shown_yaml(err.get('input'))})"
        )
    if kind in ("dict_type", "model_type") and err.get("input", 0) is None:
        return _null_section(err, parent)
    if kind == "model_type" and isinstance(err.get("input"), str) and err["loc"] in PRESET_AT:
        return preset_as_section(str(err["loc"][0]), err["input"])
    if kind == "model_type" and (section := _section_keys(err, parent)):
        return f"expected a mapping (keys: {section}) (got {shown_yaml(err.get('input'))})"
    if kind in ("tuple_type", "list_type"):  # Python's words: a YAML user writes a list
        return not_a_list(err.get("input"))
    if kind == "dict_type":  # pydantic's "a valid dictionary": a mapping of names, as which
        return not_a_mapping(err)
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    msg = re.sub(r" or instance of \w+", "", msg)  # pydantic's class names mean nothing here
    if kind.endswith("_type") or kind.startswith(("literal", "greater", "less", "string")):
        return f"{msg[0].lower()}{msg[1:]} (got {shown_yaml(err.get('input'))})"
    return msg


def _whole_number_as_text(err: dict[str, Any]) -> str:
    """The hint for `1e3` (or a quoted `"4096"`) where a whole number is expected: YAML 1.1
    (PyYAML) reads a number with an exponent as a float only with a dot and a signed exponent
    (1.0e+3), else as a string, which an integer field refuses (a float field parses it)."""
    value = err.get("input")
    short = re.fullmatch(SHORTHAND, value) if isinstance(value, str) else None
    if short:  # `seq_len: 8k`: 8,192 to some, 8,000 to others; tiersim guesses neither
        n, scale = float(short[1]), short[2].lower()
        ways = {"k": (1024, 1000), "m": (2**20, 10**6), "b": (10**9,)}[scale]
        return f"; {value.strip()} is not read as a count: write it out, e.g. " + " or ".join(
            str(int(n * w)) for w in ways
        )
    if isinstance(value, str) and value.strip().isascii() and value.strip().lstrip("+-").isdigit():
        # "4096" in quotes: the digits are right, the quotes make it text
        return f"; in quotes YAML reads {value.strip()} as text: write it without them"
    if not isinstance(value, str) or "e" not in value.lower():
        return ""
    try:
        exact = decimal.Decimal(value.strip())  # 1e30 exactly, not a float's digits
    except decimal.InvalidOperation:
        return ""
    # bounded first: 1e999999999 is past what the context's arithmetic takes
    if not exact.is_finite() or not 0 <= exact.adjusted() <= 100:
        return ""
    if exact != exact.to_integral_value():
        return ""
    return f"; YAML reads {value} as text: write {int(exact)}"


def _code(err: dict[str, Any]) -> str:
    """The problem code of one pydantic error (tiersim.core.problem_codes), by its kind."""
    kind = err["type"]
    if kind in ("extra_forbidden", "missing"):
        return {"extra_forbidden": "E-KEY-UNKNOWN", "missing": "E-KEY-MISSING"}[kind]
    if tuple(err["loc"]) == ("name",) and kind.startswith("string_"):
        return "E-NAME"
    if kind in ("dict_type", "model_type") and err.get("input", 0) is None:
        return "E-NULL"
    if kind.startswith(("literal", "enum")):
        return "E-CHOICE"
    if kind.startswith(("greater", "less", "too_", "string_too", "multiple_of")):
        return "E-RANGE"
    if kind.endswith(("_type", "_parsing")) or kind == "finite_number":
        return "E-TYPE"
    coded = getattr(err.get("ctx", {}).get("error"), "code", None)  # a validator's CodedError
    return coded if isinstance(coded, str) else "E-VALUE"


# key paths listed for one file, the rest counted: a file of 76,000 unknown keys (1 MiB of
# another program's settings) took 18 s of CPU and printed 76,000 lines; its author fixes the
# first few and validates again (as tiersim.sweep.check lists a sweep's problems)
MAX_LISTED = 30
SHORTHAND = r"\s*(\d+(?:\.\d+)?)\s*([kKmMbB])\s*"  # 8k, 1.5M, 7B: a count abbreviated
SCALAR = r"valid (string|integer|number)\b"  # a type error where one value is expected


def validation_problems(exc: ValidationError) -> list[Problem]:
    by_path: dict[str, list[str]] = {}
    codes: dict[str, str] = {}  # each path's first error's code (a union's branches agree)
    given: dict[str, Any] = {}  # each path's value, for a choice's "did you mean"
    unlisted: dict[str, str] = {}  # key paths past MAX_LISTED -> their first code
    for err in exc.errors():
        path, parent = _walk(tuple(err["loc"]))
        if err["type"] == "invalid_key" and path:  # YAML's null key is `null`, not `None`
            path[-1] = shown_yaml(err.get("input"))
        key = ".".join(path)
        if key not in by_path and len(by_path) >= MAX_LISTED:
            unlisted.setdefault(key, _code(err))
            continue
        codes.setdefault(key, _code(err))
        given.setdefault(key, err.get("input"))
        text = _message(err, parent).replace("--set ...", f"--set {key}.")  # the full path
        text = text.replace("--set KEY=", f"--set {key}=")
        if "valid integer" in text:
            text += _whole_number_as_text(err)
        if "valid string" in text and isinstance(err.get("input"), (datetime.date, datetime.time)):
            # `name: 2026-12-07` is a date to YAML 1.1, not the text it looks like
            text += "; unquoted, YAML reads it as a date: put it in quotes"
        if isinstance(err.get("input"), list) and re.search(SCALAR, text):
            # a value listed as the choices it may take: that is a plan: section's value
            text += "; one value here: to search several, list them in a plan: section (plan: "
            text += f"{{{key}: [...]}}) or a sweep file's grid"
        if text not in by_path.setdefault(key, []):
            by_path[key].append(text)
    listed = [
        Problem(path, alternatives(msgs) + closest(codes[path], msgs, given[path]), codes[path])
        for path, msgs in by_path.items()
    ]
    return listed + _unlisted(unlisted)


def _unlisted(unlisted: dict[str, str]) -> list[Problem]:
    """One line for the key paths past MAX_LISTED: how many, the first, and its code."""
    if not unlisted:
        return []
    first = next(iter(unlisted))
    what = (
        f"... and {len(unlisted):,} more key paths with problems, from {first} on (the first "
        f"{MAX_LISTED} are listed: expected them fixed first, then validate again)"
    )
    return [Problem("", what, unlisted[first])]
