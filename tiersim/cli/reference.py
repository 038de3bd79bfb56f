"""The reference pages made from the code itself, so that none can go stale:
docs/cli-reference.md from the command-line parsers (every command's `--help`),
docs/scenario-reference.md from the scenario schema (every key, its type as the schema
spells it, its default, and the schema's own comment beside it) and docs/problem-codes.md
from the table of problem codes (tiersim.core.problem_codes).

    python -m tiersim.cli.reference          # rewrite the pages
    python -m tiersim.cli.reference --check  # exit 1 where a page differs from the code

tests/test_docs_reference.py fails when a committed page differs from what this makes.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tokenize
import types
import typing
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from tiersim.core.problem_codes import reference_page

# help text is wrapped to the terminal's width: fixed here so the page is the same everywhere
WIDTH = "100"
PAGES = {
    "cli-reference.md": "cli",
    "scenario-reference.md": "scenario",
    "problem-codes.md": "codes",
}


# --- the command line ----------------------------------------------------------------------------


def cli_reference() -> str:
    """Every command's `--help`, as `tiersim COMMAND --help` prints it at 100 columns."""
    from tiersim.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        parts = [_cli_header(), _help_block("tiersim", parser)]
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for name, command in sub.choices.items():
            parts.append(_help_block(f"tiersim {name}", command))
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(parts)


def _cli_header() -> str:
    return (
        "# Command-line reference\n\n"
        "Made from the parsers by `python -m tiersim.cli.reference` (do not edit by hand: "
        "tests/test_docs_reference.py fails when this page and `--help` differ). What the "
        "commands are for, with examples: [commands.md](commands.md).\n"
    )


def _help_block(title: str, parser: argparse.ArgumentParser) -> str:
    # a default under the checkout (check-published's folder) is said from the checkout, so
    # the page is the same in every clone
    root = str(Path(__file__).resolve().parents[2])
    for action in parser._actions:  # before wrapping: a long path would be cut across lines
        if isinstance(action.default, str | Path) and str(action.default).startswith(root):
            action.default = "<checkout>" + str(action.default)[len(root) :]
        if action.help and root in action.help:
            action.help = action.help.replace(root, "<checkout>")
    text = parser.format_help()
    return f"## `{title}`\n\n```\n{text.rstrip()}\n```\n"


# --- the scenario file ---------------------------------------------------------------------------


def scenario_reference() -> str:
    """Every key of a scenario file by its path, with the schema's type, default and comment."""
    from tiersim.config.schema import Scenario

    rows: list[str] = []
    _walk(Scenario, "", rows)
    return (
        "# Scenario reference\n\n"
        "Every key of a scenario file, made from the schema (`tiersim/config/schema.py`, "
        "`hardware_schema.py`) by `python -m tiersim.cli.reference` (do not edit by hand: "
        "tests/test_docs_reference.py fails when this page and the schema differ). The type is "
        "the schema's own spelling (`Size`, `Bandwidth`, `Duration`: a quantity with a unit, "
        "such as `141 GB`, `1.6 TB/s`, `3 h`; `| None`: null allowed); a default of a base "
        "unit is in bytes, bytes/s or seconds. What each key changes, with an example file: "
        "[scenarios.md](scenarios.md).\n\n"
        "| key | type | default | the schema's note |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n"
    )


def _resolved_defaults() -> dict[str, str]:
    """Defaults the file's resolution gives before the schema sees it (config/presets.py):
    the schema alone would say `hardware` is required and its preset null, where a file
    without them runs on the default preset."""
    from tiersim.config.presets import DEFAULT_HARDWARE

    return {
        "hardware": f"(section; the `{DEFAULT_HARDWARE}` preset where left out)",
        "hardware.preset": f"`'{DEFAULT_HARDWARE}'` (config/presets.py DEFAULT_HARDWARE)",
    }


def _walk(model: type[BaseModel], prefix: str, rows: list[str]) -> None:
    notes = _field_comments(model)
    spelled = _annotations(model)
    resolved = _resolved_defaults()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        nested = _nested_model(field.annotation)
        default = resolved.get(path) or _default(field)
        note = notes.get(name) or (field.description or "")
        kind = _type_text(field.annotation, spelled.get(name, ""))
        entry = _entry_model(field.annotation)
        if nested is not None:
            rows.append(_row(path, kind, default, note or (nested.__doc__ or "").split("\n")[0]))
            _walk(nested, f"{path}.", rows)
        elif entry is not None:  # a mapping of named entries (tiers, links): one's keys
            rows.append(_row(path, kind, default, note))
            _walk(entry, f"{path}.<name>.", rows)
        else:
            rows.append(_row(path, kind, default, note))


def _row(path: str, kind: str, default: str, note: str) -> str:
    kind = kind if kind.startswith("one of") or not kind else f"`{kind}`"
    cells = [f"`{path}`", kind, default, note]
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _type_text(annotation: Any, spelled: str) -> str:
    """A field's type for a reader: a choice's values where the source names a constant, the
    base type and its bounds where the source wraps it in Annotated."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    choice = annotation if typing.get_origin(annotation) is typing.Literal else None
    if choice is None and len(args) == 1 and typing.get_origin(args[0]) is typing.Literal:
        choice = args[0]
    if choice is not None:
        values = ", ".join(repr(v) for v in typing.get_args(choice))
        optional = type(None) in typing.get_args(annotation)
        return f"one of {values}" + (" or null" if optional else "")
    return _unwrap(spelled)


def _unwrap(spelled: str) -> str:
    """`Annotated[float, Field(ge=1, le=1000)] | None` -> `float (ge=1, le=1000) | None`."""
    out = spelled
    while "Annotated[" in out:
        start = out.index("Annotated[")
        depth, end = 0, start
        for end in range(start, len(out)):
            depth += {"[": 1, "]": -1}.get(out[end], 0)
            if depth == 0 and out[end] == "]":
                break
        inner = out[start + len("Annotated[") : end]
        base, _, rest = inner.partition(", ")
        bounds = rest.split("Field(", 1)[1].split(")", 1)[0] if "Field(" in rest else ""
        if "pattern=" in bounds or "length" in bounds:
            bounds = ""
        out = out[:start] + base + (f" ({bounds})" if bounds else "") + out[end + 1 :]
    return out


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The section a field holds (a model, or a model or null), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if _nested_model(a) is not None]
        return models[0] if len(models) == 1 else None
    return None


def _entry_model(annotation: Any) -> type[BaseModel] | None:
    """The model of each entry of a `dict[str, Model]` field (or of one that may be null)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is dict:
            return _nested_model(typing.get_args(candidate)[1])
    return None


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _annotations(model: type[BaseModel]) -> dict[str, str]:
    """Each field's type as the source spells it (the modules use postponed annotations)."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        for name, spelled in getattr(cls, "__annotations__", {}).items():
            out[name] = " ".join(str(spelled).split())
    return out


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment on a field's line, else the comment lines just above it, by field name."""
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(StringIO(source).readline):
        text = token.string.lstrip("#").strip()
        if token.type == tokenize.COMMENT and not text.startswith(("type:", "noqa", "---")):
            comments[token.start[0]] = text
    lines = source.splitlines()
    out: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        name = line.strip().split(":", 1)[0]
        if not line.startswith("    ") or name not in model.model_fields or ":" not in line:
            continue
        above: list[str] = []
        row = number - 1
        while row in comments and lines[row - 1].strip().startswith("#"):
            above.insert(0, comments[row])
            row -= 1
        text = comments.get(number) if number in comments else None
        out.setdefault(name, " ".join(above) if above else (text or ""))
    return out


# --- the pages -----------------------------------------------------------------------------------

MAKERS = {"cli": cli_reference, "scenario": scenario_reference, "codes": reference_page}


def pages() -> dict[str, str]:
    """Each reference page's file name under docs/ and its text."""
    return {name: MAKERS[kind]() for name, kind in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tiersim.cli.reference",
        description="Write the reference pages under docs/ from the code.",
    )
    parser.add_argument("--docs", default="docs", help="the docs folder (default: docs)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 where a page differs"
    )
    args = parser.parse_args(argv)
    stale = []
    for name, text in pages().items():
        path = Path(args.docs) / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    for path in stale:
        print(f"{path}: differs from the code (run python -m tiersim.cli.reference)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
