"""The note of a stop asked for (Ctrl-C, SIGTERM), kept apart from the exception that says it.

A stop signal's handler raises its exception wherever the main thread is. Where that is code
CPython cannot raise out of (a `__del__`, a weakref's or the garbage collector's callback, run
by whatever allocation starts a collection: often while modules are imported), the interpreter
prints "Exception ignored in ..." and drops the exception, and the stop is lost: a sweep would
run all its points on. So the CLI's handlers note the stop here before they raise, and the
commands look at the note where a long phase starts and between points (`check`): a stop noted
and not yet taken raises there, as the signal's own exception would have.

The standard library only, and nothing of tiersim: the CLI imports it before its commands.
"""

from __future__ import annotations

import threading

# the exception of each stop asked for and not yet taken, first first
_ASKED: list[type[BaseException]] = []


def ask(exception: type[BaseException]) -> None:
    """Note a stop (its handler's exception, raised next, and perhaps lost)."""
    _ASKED.append(exception)


def asked() -> type[BaseException] | None:
    """The exception of the first stop asked for and not yet taken, if any."""
    return _ASKED[0] if _ASKED else None


def check() -> None:
    """Raise the first stop asked for and not yet taken (its exception was lost, or is about
    to be raised anyway); nothing where none is. Only in the main thread, where the handlers
    raise: another thread's caller has a main thread of its own that answers the stop."""
    if _ASKED and threading.current_thread() is threading.main_thread():
        raise _ASKED[0]()


def taken() -> None:
    """The stop is being handled (or a new command starts): forget every one noted."""
    _ASKED.clear()
