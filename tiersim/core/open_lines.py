"""The lines a progress bar leaves open on a terminal (it redraws its line in place), so that
a refusal or error printed next starts on a line of its own, not after the bar's. Here, not
beside the bar (tiersim.sweep.progress), so that the CLI ends them without importing sweeps."""

from __future__ import annotations

from typing import TextIO

# The terminals a bar last wrote a line to without ending it.
_open_lines: list[TextIO] = []


def note_open(stream: TextIO, open_line: bool) -> None:
    """Remember whether `stream`'s last line, a bar's, is left open."""
    if any(s is stream for s in _open_lines) != open_line:
        if open_line:
            _open_lines.append(stream)
        else:
            _open_lines[:] = [s for s in _open_lines if s is not stream]


def end_open_lines() -> None:
    """End the line each bar left open on a terminal, so that what is printed next (a refusal,
    an error, a stopped search) starts on a line of its own, not after the bar's."""
    while _open_lines:
        stream = _open_lines.pop()
        try:
            stream.write("\n")
            stream.flush()
        except (OSError, ValueError):  # a terminal gone or closed: nothing left to end
            pass
