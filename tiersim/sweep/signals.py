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
and passes the first on once the pool is closed.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Gate:
    """SIGINT and SIGTERM handled by this gate from now until `restore`; held at first."""

    def __init__(self) -> None:
        self.passing = False  # whether the next signal goes on to its own handler
        self.held: list[int] = []  # signals noted while holding, first first
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # only it may set them
            for sig in SIGNALS:
                self.previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
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
