"""Arguments shared by the commands that take a scenario file, and output-path checks."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from tiersim.config.presets import PRESET_FILE_SUFFIXES, is_preset_file
from tiersim.core.errors import InputError, Problem

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.config.load import Loaded


def add_format_arg(parser: argparse.ArgumentParser) -> None:
    """--format: a table for people (default) or JSON for programs."""
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="output format (default: table)",
    )


def add_check_arg(parser: argparse.ArgumentParser, exit_code: int, when: str) -> None:
    """--check: exit with `exit_code` when `when` (for batch jobs)."""
    parser.add_argument(
        "--check", action="store_true", help=f"exit with code {exit_code} when {when}"
    )


def add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    add_format_arg(parser)
    add_set_arg(parser, "one scenario value by its key path", "50 GB/s")


def add_set_arg(parser: argparse.ArgumentParser, what: str, example: str) -> None:
    """--set PATH=VALUE, repeatable, into `args.overrides`: `what` it overrides."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help=f"override {what}, e.g. "
        f"--set hardware.tiers.hbf.write_bandwidth='{example}' (repeatable; VALUE is read as "
        "YAML: 8 a number, true/false a yes or no, [a, b] a list, null none; a quantity "
        "with its unit, quoted for the shell where it has a space)",
    )


def positive_int(text: str) -> int:
    """argparse's type for a count of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    if value > 2**40:  # config/fields.py COUNT_BOUND, not imported: it brings pydantic
        why = f"must be at most 1,099,511,627,776 (2^40, the bound on every count; got {value})"
        raise argparse.ArgumentTypeError(why)
    return value


def folder_arg(text: str) -> str:
    """argparse's type for an output folder: not empty (an empty --out would fall back to the
    default folder without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder path (got an empty one)")
    if "\x00" in text:  # no system call takes one: refused here, not a ValueError later
        raise argparse.ArgumentTypeError("expected a folder path (got one with a NUL byte)")
    return text


def file_arg(text: str) -> str:
    """argparse's type for an output file (--plot, --emit-out, import's --out): not empty (an
    empty one drew or wrote nothing without a word, or was taken as the working folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file path (got an empty one)")
    if "\x00" in text:  # no system call takes one: refused here, not a ValueError later
        raise argparse.ArgumentTypeError("expected a file path (got one with a NUL byte)")
    return text


def add_executor_args(parser: argparse.ArgumentParser) -> None:
    """--workers, --executor and --scheduler: where the points of a sweep or plan run."""
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="worker processes (default: all cores); for a new local Dask cluster, its workers",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="local process pool (default) or Dask (needs tiersim[dask])",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: start a local "
        "cluster); its workers need tiersim installed and the scenario's files",
    )


def load(args: argparse.Namespace) -> Loaded:
    from tiersim.api import SET_FLAGS
    from tiersim.api import load as load_scenario

    try:
        return load_scenario(args.scenario, args.overrides, SET_FLAGS)
    except InputError as exc:
        raise _a_sweep_file(args.scenario) or exc from None


def _a_sweep_file(name: str) -> InputError | None:
    """A sweep file given where a scenario is expected: said in one line, not as a missing
    model and an unknown key per sweep section."""
    from tiersim.config.yamlfile import read_yaml
    from tiersim.sweep.spec import is_sweep

    try:
        raw = read_yaml(Path(name), name)
    except InputError:
        return None
    if not is_sweep(raw) or "model" in raw:  # with a model: a scenario with a stray key
        return None
    what = (
        "not a scenario but a sweep file (it has grid, zip or base): run it with "
        "`tiersim sweep`, or run the scenario its base: names"
    )
    return InputError(name, [Problem("", what, "E-SWEEP")])


def print_notes(loaded: Loaded, overrides: Iterable[str] = ()) -> None:
    """The scenario's notes (what it sets that the models do not use), on standard error:
    `note: FILE: key.path: why`, then `(line N)` where the file writes the key, or
    `(from --set ...)` where an override set it."""
    for line in note_lines(loaded, overrides):
        print(line, file=sys.stderr)


def note_lines(loaded: Loaded, overrides: Iterable[str] = ()) -> list[str]:
    """The lines print_notes prints (a command reading two scenarios merges its two lists)."""
    from tiersim.api import notes
    from tiersim.config.overrides import clipped, parse_override
    from tiersim.config.yamllines import key_lines

    given: dict[str, str] = {}
    times: dict[str, int] = {}
    for text in overrides:  # each is valid: the scenario loaded
        path = ".".join(parse_override(text)[0])
        given[path], times[path] = text, times.get(path, 0) + 1
    out = []
    for path, count in times.items():
        if count > 1:
            last = clipped(given[path])
            what = f"given {count} times by --set: the last, {last}, is used"
            out.append(f"note: {Problem(path, what, 'W-SET-REPEATED').render(loaded.source)}")
    out += _replaced_lines(loaded, list(overrides))
    lines = key_lines(loaded.text) if loaded.text else {}
    for note in notes(loaded):
        line = lines.get(note.path)
        origin = f" (line {line})" if line else ""
        # the --set of the key, or of a mapping above it (--set training.offload={...}), or
        # of keys under it (--set training.fp8.recipe=delayed for a note on training.fp8)
        setting = next((given[p] for p in _above(note.path) if p in given), None)
        below = [text for p, text in given.items() if p.startswith(note.path + ".")]
        # a default taken (W-DEFAULT) is a key left out: another key set under it is no cause
        # (`--set model.qkv_bias=true` did not leave model.position out of the file)
        if setting is None and below and note.code != "W-DEFAULT":
            setting = ", --set ".join(below)
        origin = f" (from --set {setting})" if setting is not None else origin
        out.append(f"note: {note.reworded(note.message + origin).render(loaded.source)}")
    return out


def _above(path: str) -> list[str]:
    """`path` and the key paths above it, nearest first: a.b.c, a.b, a."""
    parts = path.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def _replaced_lines(loaded: Loaded, overrides: list[str]) -> list[str]:
    """A note for each --set mapping that replaces one of the file's whole (W-SET-REPLACES)."""
    from tiersim.config.overrides import dropped_by_overrides, dropped_message
    from tiersim.config.yamlfile import parse_yaml

    if not loaded.text or not overrides:
        return []
    dropped = dropped_by_overrides(parse_yaml(loaded.text), overrides)
    notes = [
        Problem(p, dropped_message(p, gone, "--set"), "W-SET-REPLACES")
        for p, gone in dropped.items()
    ]
    return [f"note: {n.render(loaded.source)}" for n in notes]


def output_error(option: str, path: str | Path, why: str, command: str = "") -> InputError:
    """The exit-2 error for an output path the user gave: '--out: PATH: why', or with the
    command that names its other errors so, 'tiersim calibrate: --out: PATH: why'."""
    if command:
        return InputError(command, [Problem(option, f"{path}: {why}", "E-RESULTS")])
    return InputError(option, [Problem(str(path), why, "E-RESULTS")])


def cannot_write(
    option: str, path: str | Path, exc: OSError, expected: str, command: str = ""
) -> InputError:
    """The exit-2 error for an output path the user gave that cannot be written."""
    why = f"cannot write there: {exc.strerror or exc} (expected {expected})"
    return output_error(option, path, why, command)


def usable_folder(option: str, folder: Path) -> None:
    """Create `folder` (and its parents) now, so an unusable one is an input error before any
    work is done, not a failure after it."""
    try:
        if folder.exists() and not folder.is_dir():  # /dev/null is no file, nor a folder
            why = f"is {'a file' if folder.is_file() else 'not a folder'} (expected a folder path)"
            raise InputError(option, [Problem(str(folder), why, "E-RESULTS")])
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a name too long, a symlink loop, a read-only place, ...
        raise cannot_write(option, folder, exc, "a writable folder path") from None


def _writable_beside(option: str, path: Path, command: str = "") -> None:
    """A file can be made in `path`'s folder (a probe, removed)."""
    try:
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        expected = "a file path in a writable folder"
        raise cannot_write(option, path, exc, expected, command) from None


def usable_preset_path(
    option: str, path: Path, inputs: Iterable[Path] = (), command: str = ""
) -> None:
    """Before any work: a preset can be written at `path` and then loaded from it. Its name
    ends in .yaml or .yml (the preset loader reads no other file), and `usable_file_path`
    holds for it."""
    name = str(path)
    if not path.is_dir() and not is_preset_file(name):
        why = f"a preset is loaded only from a {' or '.join(PRESET_FILE_SUFFIXES)} file"
        raise output_error(option, name, f"{why} (expected e.g. {path.stem}.yaml)", command)
    if path.is_file() and path.resolve().parent.parent == _shipped_presets():
        why = "is one of tiersim's shipped presets, which every scenario naming it reads"
        raise output_error(option, name, f"{why} (expected another file path)", command)
    usable_file_path(option, path, inputs, command)


def _shipped_presets() -> Path:
    """The folder of the shipped presets (presets/<kind>/<name>.yaml), resolved."""
    return Path(str(resources.files("tiersim") / "presets")).resolve()


def usable_file_path(
    option: str, path: Path, inputs: Iterable[Path] = (), command: str = ""
) -> None:
    """Before any work: a file can be written at `path`. It is not a folder nor one of the
    command's own `inputs` (a scenario the command read), and its folder exists and is
    writable. A file's folder is not made, unlike a results folder (run --out): a mistyped
    one would be made silently."""
    name = str(path)
    if path.is_dir():
        raise output_error(option, name, "is a folder (expected a file path)", command)
    if path.resolve() in {Path(p).resolve() for p in inputs}:
        why = "is this command's own input (expected another file path)"
        raise output_error(option, name, why, command)
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        why = f"its folder {folder} {what} (expected a file path in an existing folder)"
        raise output_error(option, name, why, command)
    _writable_beside(option, path, command)
