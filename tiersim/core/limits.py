"""Bounds on what tiersim reads, so a mistaken or hostile input is refused at once (exit 2)
instead of hanging, filling memory or overflowing Python's stack.

Each bound is far above anything a real scenario, preset or sweep file needs. The file and
YAML bounds can be raised for a session through an environment variable; the number of sweep
points through `--max-points N` or the sweep file's `max_points:` key (tiersim.sweep.spec).
"""

from __future__ import annotations

import os

from tiersim.core.errors import InputError, Problem
from tiersim.core.records import record


@record
class Limit:
    """One bound: its default, the environment variable that raises it, and its hard ceiling
    (beyond which reading would overflow the interpreter's own stack, say)."""

    default: int
    env: str
    ceiling: int
    what: str  # "bytes", "nodes", ...

    def value(self) -> int:
        text = os.environ.get(self.env)
        if text is None:
            return self.default
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            value = 0
        if not 1 <= value <= self.ceiling:
            why = f"expected a whole number of {self.what} from 1 to {self.ceiling:,}"
            raise InputError(self.env, [Problem("", f"is {text[:40]!r} ({why})", "E-LIMIT")])
        return value


# a scenario, preset or sweep file: a few kB; pure-Python YAML parses ~0.1-1 MB/s
YAML_BYTES = Limit(2**20, "TIERSIM_MAX_YAML_BYTES", 2**30, "bytes")
# a Hugging Face config.json: a few kB (json is parsed in C: a larger bound costs little)
JSON_BYTES = Limit(16 * 2**20, "TIERSIM_MAX_JSON_BYTES", 2**30, "bytes")
# values after YAML aliases are expanded: 9 levels of 9 aliases ("billion laughs") are 9^9
YAML_NODES = Limit(1_000_000, "TIERSIM_MAX_YAML_NODES", 10**9, "nodes")
# a scenario is 4-5 levels deep; every reader of it recurses, and Python's stack is ~1,000
NESTING = Limit(64, "TIERSIM_MAX_NESTING", 200, "levels")
# digits of one integer literal: sizes stop at 2^40 (13 digits); Python refuses 4,300+
INT_DIGITS = 100
# worker processes a sweep or plan starts on this machine, at most, per core: a point is one
# single-threaded simulation, so more only share the cores, and each holds its own imports
# (~35 MB): a 10,000-point sweep with --workers 10000 started 10,000 processes
PROCESSES_PER_CORE = 4
# points one sweep may expand to (each is a scenario mapping in memory, then a simulation)
SWEEP_POINTS = 10_000
