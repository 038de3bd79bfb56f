"""How a local pool worker hands a point's outcome back: never in a message a kill can tear.

`concurrent.futures` sends each outcome through one pipe shared by every worker, as a 4-byte
length and a pickle, and its manager thread, once a message has begun, reads until it has all
of it. A worker killed part-way through a message (the pipe full, a result larger than its 64
kB) would leave that thread waiting forever for the rest: the sweep would hang. Linux writes a
pipe message of at most PIPE_BUF (4096) bytes whole or not at all (pipe(7)), and
`multiprocessing.connection.Connection._send_bytes` (CPython 3.11) writes length and payload
with one `os.write` below 16 kB. So every outcome is pickled here, in the worker; one of at
most INLINE_BYTES is sent as those bytes, a larger one is written to a file in `folder` and
only the file's name is sent. Either message is far below PIPE_BUF (tests/test_handoff.py
pickles the pool's own envelope around the largest). A worker killed while writing the file
leaves a temporary file (named as the sweep's other temporaries, removed on `--resume`), never
part of a message. The parent reads the outcome back (`receive`) and removes the file.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

INLINE_BYTES = 3072  # + the pool's envelope (about 100 bytes) + 4: well below PIPE_BUF
NOTE_CHARS = 500  # of an error about the handoff itself
Handoff = bytes | str  # the pickled outcome, or the name of the file holding it


def call(folder: str, fn: Callable[[Any], Any], arg: Any) -> Handoff:
    """In the worker: `fn(arg)`'s result or exception, pickled, handed back bounded."""
    try:
        outcome: tuple[bool, Any] = (True, fn(arg))
    except BaseException as exc:  # returned, as the pool itself would, but bounded
        outcome = (False, exc)
    data = _pickled(outcome)
    if len(data) <= INLINE_BYTES:
        return data
    name = f".{uuid.uuid4().hex}.outcome.{os.getpid()}.tmp"  # store.TEMPORARY's pattern
    try:
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(data)  # read by the parent only after this call returns: no rename
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
        return _pickled((False, OSError(exc.errno, _note(f"{exc} (handing a result back)"))))
    return name


def receive(folder: str, handoff: Handoff) -> Any:
    """In the parent: the result `call` handed back (its file removed), or raise its error."""
    if isinstance(handoff, str):
        path = Path(folder) / Path(handoff).name  # a bare name: never outside the folder
        try:
            data = path.read_bytes()
        finally:
            path.unlink(missing_ok=True)
    else:
        data = handoff
    ok, value = ForkingPickler.loads(data)
    if not ok:
        raise value
    return value


def _pickled(outcome: tuple[bool, Any]) -> bytes:
    try:
        return bytes(ForkingPickler.dumps(outcome))
    except Exception as exc:  # an unpicklable result or exception: say so, bounded
        what = "result" if outcome[0] else f"{type(outcome[1]).__name__} raised"
        note = _note(f"cannot hand the {what} back: {type(exc).__name__}: {exc}")
        return bytes(ForkingPickler.dumps((False, RuntimeError(note))))


def _note(text: str) -> str:
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 3] + "..."
