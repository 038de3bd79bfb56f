"""Errors a user can cause, kept apart from our own bugs (which stay exceptions with tracebacks)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file, at a dotted key path."""

    path: str
    message: str

    def render(self, source: str) -> str:
        where = f"{source}: {self.path}" if self.path else source
        return f"{where}: {self.message}"


class InputError(Exception):
    """Invalid input (CLI exit code 2). Holds every problem found, not just the first."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(p.render(self.source) for p in self.problems)


class InfeasibleError(Exception):
    """A scenario that is valid but cannot run at all (CLI exit code 3); the message says why."""
