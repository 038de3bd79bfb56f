"""Writing results to disk, atomically: a reader never sees a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, fsync it, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_run(folder: Path, resolved: dict[str, Any], report_json: str) -> None:
    """The resolved scenario and its report, as `tiersim run` leaves them."""
    write_atomic(folder / "scenario.yaml", yaml.safe_dump(resolved, sort_keys=False))
    write_atomic(folder / "report.json", report_json + "\n")


def write_trace(path: Path, trace: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(trace))
