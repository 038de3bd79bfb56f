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
        size = os.fstat(fd).st_size
        if size > max_bytes:  # refused unread
            raise _too_large(max_bytes, expected)
        data = _read_bounded(fd, size, max_bytes)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while read
        raise _too_large(max_bytes, expected)
    return data


CHUNK_BYTES = 2**20  # what is read at a time past the size the file had when opened


def _read_bounded(fd: int, size: int, max_bytes: int) -> bytes:
    """What the file holds, to at most `max_bytes` + 1 bytes (one more says it is over).

    Never asks for more than the file holds (its `size` when opened, plus a byte, then a MiB
    at a time should it grow): a buffer of `max_bytes` reserved at once (4 GiB for a sweep's
    log) is refused with MemoryError under the address-space limit (`ulimit -v`) a batch
    scheduler sets, however small the file.
    """
    parts = []
    want = min(size, max_bytes) + 1
    got = 0
    with open(fd, "rb", closefd=False) as file:
        while got <= max_bytes:
            part = file.read(min(want, max_bytes + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
            want = CHUNK_BYTES
    return b"".join(parts)


def _too_large(max_bytes: int, expected: str) -> FileProblem:
    bound = fmt_exact(max_bytes, Kind.SIZE)
    return FileProblem(f"is larger than {bound} (expected {expected}; a real one is a few kB)")
