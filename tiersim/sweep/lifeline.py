"""A pool worker's lifeline: the worker exits as soon as the sweep process that started it is gone.

A sweep killed outright (SIGKILL; SIGTERM the command handles as Ctrl-C) cannot shut its pool
down.
Its workers, children of the fork server, would then wait forever on a task pipe whose write
end they hold themselves, and the fork server and resource tracker, which end when the last
worker does, with them.
"""

from __future__ import annotations

import os
import select
import threading
import time

POLL_S = 0.5  # where a process cannot be waited on (no pidfd): how often to look
EXIT_ORPHANED = 1


def watch(sweep_pid: int) -> None:
    """Pool initializer: a daemon thread ends this worker once `sweep_pid` has exited."""
    thread = threading.Thread(
        target=_exit_after, args=(sweep_pid,), name="tiersim-lifeline", daemon=True
    )
    thread.start()


def _exit_after(pid: int) -> None:
    wait_for_exit(pid)
    os._exit(EXIT_ORPHANED)  # nothing to clean up: a worker writes no files


def wait_for_exit(pid: int) -> None:
    """Return once process `pid` has exited (at once if it already has)."""
    try:
        fd = os.pidfd_open(pid)  # Linux >= 5.3: names this process, never a reused pid
    except (AttributeError, OSError):  # no pidfd, or already gone: look now and then
        while _exists(pid):
            time.sleep(POLL_S)
        return
    try:
        select.select([fd], [], [])  # readable once it has exited, reaped or not
    finally:
        os.close(fd)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True
