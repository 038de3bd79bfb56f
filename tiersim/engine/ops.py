"""The operations a schedule is made of, and the schedule itself: data only, never timed here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from tiersim.core.records import record
from tiersim.hardware.resources import Network


class OpKind(Enum):
    """What runs an op, and the stream it runs on in program order (None: none, it starts
    once its dependencies are done)."""

    GPU = ("gpu", "gpu")  # compute on the GPU
    CPU = ("cpu", "cpu")  # compute on the CPU (its optimizer)
    MOVE = ("move", None)  # bytes of a class moved between tiers
    COMM = ("comm", None)  # a collective, a flow on a network channel
    SYNC = ("sync", "gpu")  # a collective the GPU stream waits for
    IDLE = ("idle", "gpu")  # the GPU stream waits (pipeline bubble, barrier)
    JOIN = ("join", None)  # no work, on no stream: done once its dependencies are (one op
    # others wait for instead of each waiting for all of them)

    def __init__(self, label: str, stream: str | None):
        self.label = label
        self.stream = stream
        # taken its duration on a timer (compute, idle, join): an attribute, not a set of
        # kinds, as an enum's hash is a Python call and the engine asks once per op
        self.timed = label in ("gpu", "cpu", "idle", "join")

    @property
    def network(self) -> bool:
        return self is OpKind.COMM or self is OpKind.SYNC


class Role(Enum):
    """What an op is for."""

    FORWARD = "forward"
    RECOMPUTE = "recompute"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    BUBBLE = "bubble"  # waiting for the other pipeline stages
    CHECKPOINT = "checkpoint"  # a durable checkpoint's copy of a class, or its barrier
    STATE = "state"  # a class of state moved for training
    COLLECTIVE = "collective"  # a parallel group's communication


COMPUTE_ROLES = (Role.FORWARD, Role.BACKWARD, Role.RECOMPUTE)


@dataclass(slots=True)
class Op:
    kind: OpKind
    role: Role
    # what the op is, in words: the label, or (format, *args) formatted only when read (`label`):
    # a run builds thousands of ops and only a trace reads their labels
    what: str | tuple
    step: int
    deps: Sequence[int]  # a tuple once scheduled
    duration: float = 0.0
    nbytes: int = 0
    src: str = ""
    dst: str = ""
    alloc: Sequence[tuple[str, int]] = ()  # at start: (tier, bytes)
    free: tuple[tuple[str, int], ...] = ()  # at end
    resource: Network | None = None  # a network op's channel
    latency: float = 0.0  # a network op's latency terms
    subject: str = ""  # the state class a move carries, or the group of a collective

    @property
    def label(self) -> str:
        what = self.what
        return what if isinstance(what, str) else what[0].format(*what[1:])

    @property
    def category(self) -> str:
        """In words, as traces show it: the class moved, '<group>_comm', or the role."""
        if self.role is Role.STATE:
            return self.subject
        if self.role is Role.COLLECTIVE:
            return f"{self.subject}_comm"
        return self.role.value


@record
class Schedule:
    ops: list[Op]
    steps: int
    prefetch_depth: int
    net_capacity: dict
    # op index where each (step, micro-batch, chunk) forward or backward of the stage's order
    # begins, per step (tiersim.engine.steady checks that periods repeat)
    order_starts: tuple[tuple[int, ...], ...] = ()
    # how many of the first ops are one chain as built (OpList.chain_length): each on a stream
    # and after the one before it, so tiersim.engine.chain walks them without checking again
    chain_length: int = 0
    # each op its own record (False: a resident stage's ops share one record per unit and
    # role, tiersim.engine.schedule_shared; then the schedule is a chain to its end, walked)
    records: bool = True
