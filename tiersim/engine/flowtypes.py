"""What the flow network (tiersim.engine.flows) keeps per flow and per resource set, and the
SimPy event it schedules its wake-ups and the engine its timers with."""

from __future__ import annotations

from collections.abc import Callable


class Due:
    """A SimPy event as `Environment.step` reads it (`callbacks`, run with the event, and
    `_ok`), put on the environment's queue as `Timeout` puts itself there: the entry (its
    time, NORMAL, the next event id, the event), so events pop in the same order at the
    same times. Made without Timeout's constructor and `schedule` call (two Python calls,
    about 0.25 us of a bare timeout's 0.6): the engine makes one per timer and wake-up.
    `callbacks` is a tuple shared by every event of one kind (`step` only iterates it)."""

    __slots__ = ("callbacks", "value")
    _ok = True


UNTAGGED = object()  # a flow whose owner is told with no argument


class Flow:
    """Bytes on their way across `resources`, from `begin` (seconds) at `rate` (bytes/s).
    `latent`: not moving yet and left out of the present rates (a wake-up at `begin`).
    `tag`: what `on_done` is called with, and the time (nothing when untagged)."""

    __slots__ = (
        "begin",
        "bytes",
        "latent",
        "on_done",
        "priority",
        "rate",
        "remaining",
        "resources",
        "shares",
        "tag",
    )

    def __init__(
        self,
        nbytes: float,
        resources: tuple,
        on_done: Callable[..., None],
        priority: float = 0,
        begin: float = 0.0,
        tag: object = UNTAGGED,
    ):
        self.tag = tag
        self.priority = priority
        self.bytes = nbytes
        self.remaining = float(nbytes)
        self.resources = resources
        self.on_done = on_done
        self.rate = 0.0
        self.begin = begin
        self.latent = False
        self.shares: Shares | None = None  # its resource set's figures, once in a network


class Shares:
    """What the network derives from one resource set, looked up once per flow (hashing a
    tuple of resources costs more than the lookup): an index naming the set, its resources
    of finite capacity, the rate of a flow alone on it, the channels it is logged on and
    (`spans`, from its first busy span on) those channels' span lists (BusyLog.lists)."""

    __slots__ = ("alone", "channels", "finite", "index", "resources", "spans")

    def __init__(self, resources: tuple, index: int, finite: tuple, alone: float, channels: tuple):
        self.resources, self.index, self.finite = resources, index, finite
        self.alone, self.channels = alone, channels
        self.spans: tuple[list[tuple[float, float]], ...] | None = None
