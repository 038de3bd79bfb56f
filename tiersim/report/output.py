"""Writing results to disk, atomically: a reader never sees a half-written file."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiersim import __version__
from tiersim.config.document import provenance, scenario_document
from tiersim.config.schema import Scenario
from tiersim.config.yamlfile import dump_yaml
from tiersim.workload.kernel_effect import written_kernel


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write to a temporary file beside `path`, fsync it, then rename over `path`."""
    data = text.encode() if isinstance(text, str) else text
    tmp = _written_beside(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class FolderBusy(Exception):
    """Another tiersim process holds the folder's lock: a run or a sweep is writing there."""


def lock_folder(folder: Path) -> int:
    """An exclusive lock on the folder (which must exist), held until the returned descriptor
    is closed: one writer at a time, whether a `run --out` or a sweep. Raises FolderBusy."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise FolderBusy(str(folder)) from None
    return fd


@contextlib.contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """`folder`, made if need be, locked for the duration (see lock_folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = lock_folder(folder)
    try:
        yield
    finally:
        os.close(fd)


def write_run(folder: Path, scenario: Scenario, source: str, report_json: str) -> None:
    """The scenario as simulated (every value, defaults included) and its report, as
    `tiersim run` leaves them: both written whole (and fsync'd) before either replaces the
    files there, so a disk that fails mid-write leaves the earlier run's pair, never a new
    scenario beside an old report."""
    files = [
        (folder / "scenario.yaml", scenario_yaml(scenario, source)),
        (folder / "report.json", report_json + "\n"),
    ]
    written: list[tuple[str, Path]] = []
    try:
        for path, text in files:
            written.append((_written_beside(path, text.encode()), path))
        for tmp, path in written:
            os.replace(tmp, path)
    finally:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)


def _written_beside(path: Path, data: bytes) -> str:
    """A temporary file beside `path` holding `data`, fsync'd: its name (write_atomic's
    first half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


SCENARIO_HEADER = "# The scenario as tiersim "  # how a scenario.yaml tiersim wrote begins


def scenario_yaml(scenario: Scenario, source: str) -> str:
    header = [
        f"{SCENARIO_HEADER}{__version__} simulated it, from {_one_line(source)}: every",
        "# value, defaults and presets included, so this file reruns the same simulation.",
        *(f"# {_one_line(line)}" for line in provenance(scenario)),
    ]
    doc = scenario_document(scenario)
    doc["training"]["attention_kernel"] = written_kernel(scenario)  # the kernel the run counted
    body = dump_yaml(doc)
    return "\n".join(header) + "\n" + body


def recorded_source(path: Path) -> str | None:
    """The scenario file a scenario.yaml that tiersim wrote was simulated from (as its header
    names it), or None: no such file, or not one tiersim wrote."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            first = f.readline(4096)
    except OSError:
        return None
    head = SCENARIO_HEADER
    if not first.startswith(head) or " simulated it, from " not in first:
        return None
    source = first.split(" simulated it, from ", 1)[1].rstrip("\n")
    return source.removesuffix(": every") if source.endswith(": every") else None


def _one_line(text: str) -> str:
    """A path inside a YAML comment: a line break in it would end the comment."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(trace))
