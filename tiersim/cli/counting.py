"""A long command's simulations counted on standard error: `--break-even` runs about 30 (half
a minute on a loaded 2-core machine, silent until then). Its total is not known ahead (the
write bandwidth is bisected), so a count and the time elapsed, not a bar: redrawn in place
on a terminal, else a line now and then."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tiersim.core.open_lines import note_open
from tiersim.sweep.progress import clock_text


class Counted:
    """`simulate`, counting its calls on `stream` as `label: N simulations (about A), elapsed T`."""

    def __init__(
        self,
        simulate: Callable[..., Any] | None,
        label: str,
        about: int,
        stream: TextIO | None = None,
    ):
        self.simulate, self.label, self.about = simulate, label, about
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.start = self.last = time.monotonic()
        self.count = 0
        self.open = False  # a line redrawn in place is left open on the terminal

    def wrap(self, simulate: Callable[..., Any]) -> Counted:
        """This counter around `simulate` (for a function that takes a wrapper)."""
        self.simulate = simulate
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        assert self.simulate is not None, "Counted(None, ...) is called once wrapped"
        result = self.simulate(*args, **kwargs)
        self.count += 1
        now = time.monotonic()
        if now - self.last >= (0.1 if self.tty else 10.0):
            self.last = now
            self._write(now, end="" if self.tty else "\n")
        return result

    def line(self, now: float) -> str:
        simulations = f"{self.count} simulation{'' if self.count == 1 else 's'}"
        elapsed = clock_text(now - self.start)
        return f"{self.label}: {simulations} (about {self.about}), elapsed {elapsed}"

    def close(self) -> None:
        """End the line left open on a terminal (its last count), so the answer starts clean."""
        if self.open:
            self._write(time.monotonic(), end="\n")

    def _write(self, now: float, end: str) -> None:
        self.stream.write(("\r" if self.tty else "") + self.line(now) + end)
        self.stream.flush()
        self.open = not end
        note_open(self.stream, open_line=self.open)


class Stages:
    """A long command's stage named on a terminal as it is reached (`calibrate: storage on .,
    elapsed 0:31`), over the previous one, the line ended by `close`. Where standard error is
    a log: nothing (the command's output says it all at its end), or with `log` a plain line
    as each stage starts and finishes (`measure`: minutes in PyTorch, silent in CI else)."""

    def __init__(self, label: str, stream: TextIO | None = None, log: bool = False):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.log = log and not self.tty
        self.start = time.monotonic()
        self.width = 0  # the line drawn last, to blank what a shorter one leaves of it
        self.stage: tuple[str, float] | None = None  # a log's stage under way, since when

    def __call__(self, stage: str) -> None:
        if self.log:
            self.finish()
            self.stage = (stage, self._said(f"{stage}: started"))
        if not self.tty:
            return
        text = f"{self.label}: {stage}, elapsed {clock_text(time.monotonic() - self.start)}"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)
        note_open(self.stream, open_line=True)

    def finish(self) -> None:
        """A log's line for the stage under way, finished (none where it was cut short: the
        command's error follows instead)."""
        if self.stage is not None:
            stage, began = self.stage
            self.stage = None
            self._said(f"{stage}: finished in {time.monotonic() - began:.1f} s")

    def _said(self, text: str) -> float:
        """`text` as a log's line with the time elapsed; the time it was said at."""
        now = time.monotonic()
        elapsed = clock_text(now - self.start)
        self.stream.write(f"{self.label}: {text}, elapsed {elapsed}\n")
        self.stream.flush()
        return now

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")  # the answer prints in its place
            self.stream.flush()
            self.width = 0
            note_open(self.stream, open_line=False)
