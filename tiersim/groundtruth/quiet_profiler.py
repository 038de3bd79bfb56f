"""torch.profiler without its native noise: Kineto writes lines such as `USDT:... profiler_start`
and `STAGE:... Completed Stage: Warm Up` straight to the process's file descriptors when a
profile starts and stops, past Python's sys.stdout / sys.stderr, into the user's terminal
between `tiersim measure`'s figures. Here file descriptors 1 and 2 are sent to a temporary
file while the profiler runs; what it held is written back to stderr afterwards, the
profiler's own lines left out."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

# Kineto's start / stop / stage lines (libkineto's SyncActivityProfilerHandler and
# ActivityProfilerController logging): nothing the user can act on
PROFILER_NOISE = re.compile(r"^(USDT|STAGE):.*\] (profiler_(start|stop)|Completed Stage)")


def _flush_c_streams() -> None:
    """C's stdio buffers (a library's printf), flushed before the descriptors move back."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def native_output_filtered() -> Iterator[None]:
    """Descriptors 1 and 2 captured while the body runs; their lines but the profiler's are
    written to stderr afterwards (and all of them where the body raises)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile(mode="w+b") as held:
        for fd in saved:
            os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            _flush_c_streams()
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            held.seek(0)
            text = held.read().decode(errors="replace")
            kept = [ln for ln in text.splitlines(keepends=True) if not PROFILER_NOISE.match(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


@contextlib.contextmanager
def quiet_profile(**options: Any) -> Iterator[Any]:
    """`torch.profiler.profile(**options)`, its start and stop lines kept out of the output."""
    from torch.profiler import profile

    with native_output_filtered(), profile(**options) as prof:
        yield prof
