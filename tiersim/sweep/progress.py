"""A sweep's or plan's progress: points done, rate and time left, as one line redrawn on a
terminal, else a line now and then."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from tiersim.core.open_lines import note_open


class Progress:
    """Points done, rate and time left: one line redrawn on a terminal, else a line now and then."""

    def __init__(
        self, total: int, stream: TextIO | None = None, label: str = "points", done: int = 0
    ):
        self.total, self.label = total, label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.start = self.last = time.monotonic()
        self.done = self.before = done  # `before`: done when the bar started, not in its rate
        self.ended = False  # the line saying every point is done was written

    def begin(self) -> None:
        """The line as it stands now (nothing done yet), written at once: a long first step
        is not silent until the first update."""
        end = "" if self.tty else "\n"
        self.stream.write(("\r" if self.tty else "") + self.line(time.monotonic()) + end)
        self.stream.flush()
        note_open(self.stream, open_line=not end)

    def update(self, done: int) -> None:
        if done == self.total and self.done == done and self.ended:
            return  # the last line once: a plan's bar is updated again as its pool ends
        self.done = done
        self.ended = self.ended or done == self.total
        now = time.monotonic()
        if now - self.last >= (0.1 if self.tty else 10.0) or done == self.total:
            self.last = now
            end = "\n" if not self.tty or done == self.total else ""
            self.stream.write(("\r" if self.tty else "") + self.line(now) + end)
            self.stream.flush()
            note_open(self.stream, open_line=not end)

    def line(self, now: float) -> str:
        elapsed = now - self.start
        rate = (self.done - self.before) / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else math.inf
        width = 24
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (width - filled)
        return (
            f"[{bar}] {self.done}/{self.total} {self.label}  {rate:.1f}/s  "
            f"elapsed {clock_text(elapsed)}  left {clock_text(left)}"
        )


def clock_text(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--"
    whole = max(0, round(seconds))  # never a negative time, whatever a clock did
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
