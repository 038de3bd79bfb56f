"""The one place the engine reaches into SimPy's private state: its event queue and clock.

The engine puts its timers and wake-ups straight onto SimPy's event queue as `Timeout` puts
itself there, an entry (time, NORMAL, next event id, event), without Timeout's constructor and
`schedule` call (about 0.25 us of a bare timeout's 0.6: the engine makes one per timer and per
wake-up, see flows.Due), and reads the present time from `_now` without the `now` property's
call (`env._now`, read in place where a flow or timer starts: a property call there costs
about 0.1 us an op). Both are SimPy 4's private layout, so simpy is pinned below 5
(pyproject.toml) and this module refuses another major version at import rather than
scheduling events out of order. A push through `scheduler`'s function costs one Python call
more than the entry pushed in place (about 20 ns of a 0.4 us push, measured with timeit).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT

if not simpy.__version__.startswith("4."):  # pragma: no cover - the pin keeps it so
    raise ImportError(
        f"tiersim's engine needs SimPy 4 (its event queue's layout), found {simpy.__version__}"
    )

Schedule = Callable[[float, object], None]


def scheduler(env: simpy.Environment) -> Schedule:
    """`schedule(at, event)`: put `event` on `env`'s queue to run at time `at`, after every
    event already due at `at` (its id is the next), as `env.schedule` would a Timeout."""
    queue, eid = env._queue, env._eid

    def schedule(at: float, event: object) -> None:
        heappush(queue, (at, NORMAL, next(eid), event))

    return schedule


def urgent(env: simpy.Environment, event: object) -> None:
    """Put `event` on `env`'s queue to run now, before anything else due now (SimPy's URGENT):
    it runs once the event being processed is done, before the next one."""
    heappush(env._queue, (env._now, URGENT, next(env._eid), event))
