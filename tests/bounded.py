"""Time bounds inside a test: a regression that hangs fails the test instead of hanging CI."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator

LIMIT_S = 20.0  # generous: what is bounded takes well under a second; a hang takes forever


class Hung(AssertionError):
    pass


@contextlib.contextmanager
def within(seconds: float = LIMIT_S) -> Iterator[None]:
    """Fail (raise Hung) if the block takes longer than `seconds`: SIGALRM interrupts even a
    blocking open of a FIFO or a read of /dev/zero."""

    def alarm(signum: int, frame: object) -> None:
        raise Hung(f"did not finish within {seconds} s")

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
