"""Time bounds inside a test: a regression that hangs fails the test instead of hanging CI."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LIMIT_S = 20.0  # generous: what is bounded takes well under a second; a hang takes forever


class Hung(AssertionError):
    pass


def waited_for_a_core_s() -> float:
    """Seconds this thread has spent runnable but waiting for a core (Linux's schedstat: its
    second field, the run-queue delay in ns); 0 where the kernel does not keep it."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


@contextlib.contextmanager
def within(seconds: float = LIMIT_S) -> Iterator[None]:
    """Fail (raise Hung) if the block takes longer than `seconds`, not counting the time it
    waited for a core: a loaded machine starves a block, it does not hang it (under two
    pytest-xdist workers and other processes, a 0.7 s validate once took over 20 s of wall
    time). SIGALRM interrupts even a blocking open of a FIFO or a read of /dev/zero; a block
    blocked (not runnable) counts every second. Time its child processes or threads wait for
    a core is not discounted."""
    start, waited = time.monotonic(), waited_for_a_core_s()

    def alarm(signum: int, frame: object) -> None:
        starved = waited_for_a_core_s() - waited
        spent = time.monotonic() - start - starved
        if spent < seconds:  # starved, not hung: look again once the rest is spent
            signal.setitimer(signal.ITIMER_REAL, seconds - spent)
            return
        raise Hung(f"did not finish within {seconds} s ({starved:.1f} s more waiting for a core)")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def tiersim(*args: object, limit_s: float = 60.0, memory_bytes: int = 2 * 2**30):
    """Run the CLI in its own process, with a time limit and an address-space limit (a
    regression that expands 10^9 points fails fast instead of swapping the machine)."""

    def limit_memory() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    try:
        return subprocess.run(
            [sys.executable, "-m", "tiersim.cli", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=limit_s,
            preexec_fn=limit_memory,
        )
    except subprocess.TimeoutExpired:
        raise Hung(f"tiersim {' '.join(map(str, args))[:80]} ran past {limit_s} s") from None
