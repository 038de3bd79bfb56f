"""Ctrl-C and SIGTERM around a worker pool: the first one stops the run, none cuts its pool's
closing short.

Ctrl-C signals the terminal's whole process group, `timeout` and batch schedulers signal the
process and then its group: the sweep process often gets two signals within a millisecond, and a
user may press Ctrl-C again. Their handlers (KeyboardInterrupt, or the CLI's Terminated) raise
wherever the main thread is. A second one raised inside `ProcessPoolExecutor.shutdown` leaves
the pool to be shut down at interpreter exit, and there (CPython 3.11) it hangs: an interrupted
`Thread.join` marks the pool's manager thread as stopped though it runs on (threading.py,
bpo-45274), so the exit does not wait for it, multiprocessing's exit handler closes the task
queue, and the manager's stop messages to the workers are never sent; the workers wait for a
task, and the exit handler and the manager thread wait for the workers, forever.

So while a pool runs, `Gate` passes the first signal on to the handler it replaced (which
raises) and only notes any later one; while the pool opens and closes it holds every signal,
and passes the first on once the pool is closed. While the pool runs, `deferred` holds one for
a moment (finished points being taken or committed) and passes it on at its end.

The processes the pool starts get the signals too (Ctrl-C goes to the terminal's process group)
and may not be ready for them: `blocked` keeps them from a process while it is started.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
MASKS = hasattr(signal, "pthread_sigmask")  # not on Windows


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread while in here, and so in a process it starts
    (a child inherits the mask, and keeps it across exec): they wait, not lost, for a thread
    of this process that takes them (Python runs their handlers in the main thread)."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS) if MASKS else set()
    try:
        yield
    finally:
        if MASKS:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def unblock() -> None:
    """Let SIGINT and SIGTERM reach this thread (where `blocked` was inherited)."""
    if MASKS:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


class Gate:
    """SIGINT and SIGTERM handled by this gate from now until `restore`; held at first."""

    def __init__(self) -> None:
        self.passing = False  # whether the next signal goes on to its own handler
        self.held: list[int] = []  # signals noted while holding, first first
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():  # only it may set them
            return
        try:
            for sig in SIGNALS:
                self.previous[sig] = signal.signal(sig, self._on_signal)
        except BaseException:  # SIGTERM raised between the two: no half-installed gate left
            self.restore(deliver=False)
            raise

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.previous.get(signum) == signal.SIG_IGN:
            # ignored before the gate (SIGINT of a background job, `nohup`): still ignored,
            # neither held nor taking the pass the next signal (a SIGTERM) must stop the run by
            return
        if not self.passing:
            self.held.append(signum)
            return
        self.passing = False  # what this one stops is not to be cut short by the next
        self._pass_on(signum, frame)

    def _pass_on(self, signum: int, frame: FrameType | None) -> None:
        handler = self.previous.get(signum)
        if callable(handler):
            handler(signum, frame)  # e.g. raises KeyboardInterrupt
        elif handler != signal.SIG_IGN:  # the default (or one not set from Python): ends us
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def hold(self) -> None:
        """Note signals from now on, act on none."""
        self.passing = False

    def allow(self) -> None:
        """Let the next signal act (raise); one held until now acts here."""
        if self.held:
            self._pass_on(self.held.pop(0), None)
        else:
            self.passing = True

    def restore(self, deliver: bool) -> None:
        """Put the replaced handlers back; with `deliver`, a signal held until now acts here."""
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if deliver and self.held:
            self._pass_on(self.held[0], None)


def gate_in_place() -> Gate | None:
    """The gate that is SIGINT's handler now, if one is (only the main thread has one)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    gate = getattr(handler, "__self__", None)  # a gate's handler is its bound method
    return gate if isinstance(gate, Gate) else None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While in here, a signal that the gate in place would pass on now is held, and acts
    (raises) as this ends: what is done in here (finished points taken from the pool, or
    committed) is never cut off halfway. Where no gate passes signals on (none in place, or
    one holding), it changes nothing.

    Left on an exception (the run is stopping, or its generator is closed) the gate stays
    holding: a signal raised here would replace that exception, or, in a generator closed
    when collected, be printed with a traceback and lost; `run_on_pool` delivers a held
    signal once the pool is closed."""
    gate = gate_in_place()
    if gate is None or not gate.passing:
        yield
        return
    gate.hold()
    yield  # not in a `finally`: see above
    gate.allow()
