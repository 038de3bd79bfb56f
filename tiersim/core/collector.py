"""The cyclic garbage collector paused while a simulation runs.

A run allocates its schedule's op records by the thousand and keeps them to its end: each
young collection traces those live objects again (and a run's records outlive a middle one,
so the full collections that walk the whole process come every few runs), for nothing, as
the engine breaks its own cycles when it ends and a finished run is freed by reference
counting (tests/test_engine_freed.py). Pausing it saves that tracing; what a run leaves in
cycles is collected once it is back on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off inside, back on after (also on an exception) where it was on; left
    off where the caller had turned it off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
