"""The engine's events go onto SimPy's queue as Timeout's do (engine/clock.py): pushed through
the clock's scheduler, they run at their time, after every event already due then, in the
order they were scheduled, interleaved with real Timeouts exactly as Timeouts would be."""

from __future__ import annotations

import simpy

from tiersim.engine.clock import scheduler
from tiersim.engine.flowtypes import Due


def test_scheduled_events_interleave_with_timeouts_in_scheduling_order():
    env = simpy.Environment()
    schedule = scheduler(env)
    ran: list[tuple[float, str]] = []

    def due(name: str) -> Due:
        event = Due()
        event.callbacks = (lambda _e: ran.append((env.now, name)),)
        return event

    # by hand: at t = 1 three events, scheduled timeout a, due b, timeout c (in that order);
    # at t = 0.5 one due d scheduled last; at t = 2 a due e scheduled before a timeout f
    env.timeout(1.0).callbacks.append(lambda _e: ran.append((env.now, "a")))
    schedule(1.0, due("b"))
    env.timeout(1.0).callbacks.append(lambda _e: ran.append((env.now, "c")))
    schedule(2.0, due("e"))
    env.timeout(2.0).callbacks.append(lambda _e: ran.append((env.now, "f")))
    schedule(0.5, due("d"))
    env.run()
    assert ran == [(0.5, "d"), (1.0, "a"), (1.0, "b"), (1.0, "c"), (2.0, "e"), (2.0, "f")]
