"""Reading an input file, bounded: only a regular file, and at most a given size.

A FIFO would block the reader forever and /dev/zero never ends (a symlink to either is
followed to what it names), so anything that is not a regular file is refused before a byte
is read; the file is opened non-blocking so that even a FIFO can be opened to be refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tiersim.core.units import Kind, fmt_exact


class FileProblem(ValueError):
    """A path that is not a regular file, or a file over its size bound; the message says
    which, without the path (the caller names it)."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_regular_file(path: Path, max_bytes: int, expected: str) -> bytes:
    """The bytes of the regular file at `path`, of at most `max_bytes`.

    Raises FileProblem for anything else (`expected` says what was, e.g. 'a YAML file'), and
    OSError (FileNotFoundError, PermissionError, ...) where the file cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise FileProblem(f"is a folder (expected {expected})")
            raise FileProblem(f"is not a regular file ({_kind(mode)}; expected {expected})")
        with open(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        bound = fmt_exact(max_bytes, Kind.SIZE)
        raise FileProblem(f"is larger than {bound} (expected {expected}; a real one is a few kB)")
    return data
