"""How the program stops on Ctrl-C (SIGINT) and SIGTERM: the same way, whenever one comes.

Light on purpose (the standard library only): `tiersim.cli` imports it before the commands,
so that a signal while they are imported (a few hundred milliseconds) already stops the
program with its exit code and a line, not a traceback.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command Ctrl-C stopped
EXIT_TERMINATED = 143  # 128 + SIGTERM, as shells report a command SIGTERM ended
STOPS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler ending the job, `kill PID`), raised in the main thread where
    Ctrl-C raises KeyboardInterrupt, so that a command stops as it does on Ctrl-C: a sweep
    commits the points it has finished, shuts its pool down and says how to resume."""


_PROGRAM = [False]  # the program itself runs (not a caller's in-process `main([...])`)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises(then_ignore: bool = False) -> Iterator[None]:
    """SIGTERM raises Terminated while the command runs (by default it ends the process at
    once: no finished point committed, no word said). Only the main thread may set it.

    `then_ignore` (the program itself, which exits next): once the command has returned or
    raised, Ctrl-C and SIGTERM are ignored (`ignore_stops`) instead of put back, so that
    none can land between the two and cut short the line that says how it stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _PROGRAM[0] = then_ignore
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        if then_ignore:
            ignore_stops()
        else:  # None: a handler not set from Python, which cannot be put back from here
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def ignore_stops() -> None:
    """Ignore Ctrl-C and SIGTERM from now on: the command is done and the process exits. A
    second Ctrl-C (or a group's signal after the process's own) would otherwise kill it with
    another status, or raise in an exit handler, once the interpreter has put the defaults
    back while it exits.

    And clear CPython's note of an unhandled Ctrl-C. A KeyboardInterrupt that ends code run
    from a string (`exec(text)`: dataclasses and namedtuple make their methods so, while a
    module is imported) sets it even when a caller catches the exception; under `python -m`
    the interpreter then kills itself with SIGINT at exit (Modules/main.c, `Py_RunMain`)
    whatever exit code the command returned: -2 where 130 or 143 was meant. Every run of a
    string resets the note first, so one that does nothing clears it."""
    for sig in STOPS:
        signal.signal(sig, signal.SIG_IGN)
    exec("None", {})  # resets the note (see above); ignored signals cannot set it again


def stop_taken() -> None:
    """A Ctrl-C or SIGTERM is being handled (the command's work is over): in the program
    itself, ignore any further one from here on. A second signal a few milliseconds after the
    first would only cut short the line that says how it stopped, or land in a garbage
    collector's callback ("Exception ignored ... KeyboardInterrupt")."""
    if _PROGRAM[0]:
        ignore_stops()
