"""tests/bounded.py's `within`, the hang guard of the hostile-input tests: a block that blocks
past its bound fails; the time a block waits for a core (a loaded machine) is not counted."""

from __future__ import annotations

import time

import bounded
import pytest


def test_a_block_that_blocks_past_its_bound_fails():
    """Asleep (blocked, not waiting for a core): every second counts."""
    with pytest.raises(bounded.Hung, match=r"did not finish within 0\.05 s"), bounded.within(0.05):
        time.sleep(30)  # interrupted by the guard; a guard that never fires hangs here


def test_the_time_a_block_waits_for_a_core_is_not_counted(monkeypatch):
    """As if starved throughout (every second of it waiting for a core): a block six times its
    bound passes, the guard looking again each time its bound comes round."""
    start = time.monotonic()
    monkeypatch.setattr(bounded, "waited_for_a_core_s", lambda: time.monotonic() - start)
    with bounded.within(0.05):
        time.sleep(0.3)
