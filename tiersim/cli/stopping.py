"""How the program stops on Ctrl-C (SIGINT) and SIGTERM: the same way, whenever one comes.

Light on purpose (the standard library only, and `tiersim.core.stops`, itself so):
`tiersim.cli` imports it before the commands, so that a signal while they are imported (a few
hundred milliseconds) already stops the program with its exit code and a line, not a
traceback.

Each handler notes its stop (`tiersim.core.stops`) before it raises: where the exception is
dropped (raised in a `__del__` or a collector's callback: "Exception ignored in ..."), the
command's next `stops.check` raises it again, so no stop is lost.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from tiersim.core import stops

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command Ctrl-C stopped
EXIT_TERMINATED = 143  # 128 + SIGTERM, as shells report a command SIGTERM ended
STOPS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler ending the job, `kill PID`), raised in the main thread where
    Ctrl-C raises KeyboardInterrupt, so that a command stops as it does on Ctrl-C: a sweep
    commits the points it has finished, shuts its pool down and says how to resume."""


_PROGRAM = [False]  # the program itself runs (not a caller's in-process `main([...])`)


def _raise_terminated(signum: int, frame: object) -> None:
    stops.ask(Terminated)  # first: the exception may be dropped where it is raised
    raise Terminated()


def _raise_interrupted(signum: int, frame: object) -> None:
    """Ctrl-C, as Python's own handler (KeyboardInterrupt), noted first as SIGTERM is."""
    stops.ask(KeyboardInterrupt)
    raise KeyboardInterrupt()


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
    stops.taken()  # a stop noted before this command is not this command's
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    ctrl_c = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not ignored
    try:
        if ctrl_c:
            signal.signal(signal.SIGINT, _raise_interrupted)
        yield
    finally:
        if then_ignore:
            ignore_stops()
        else:  # None: a handler not set from Python, which cannot be put back from here
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            if ctrl_c:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            stops.taken()  # the caller's process goes on: nothing of this command's left


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
    collector's callback ("Exception ignored ... KeyboardInterrupt"). The stop is taken: its
    note is forgotten (`stops`)."""
    stops.taken()
    if _PROGRAM[0]:
        ignore_stops()
