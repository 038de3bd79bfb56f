"""Result records the engine returns: plain frozen data, no behaviour beyond derived figures."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiersim.engine.offload_results import OffloadFacts
from tiersim.state.classes import CHECKPOINT_WRITES, state_class

# every step checkpointing: steps simulated at most for the step to settle (engine.durable);
# a result's `CheckpointRun.steady` is False where it did not within them
MAX_STEADY_STEPS = 64


@dataclass(frozen=True)
class LinkStats:
    """One link (both directions together, and each direction) over the measured step."""

    bytes: int
    busy_s: float  # time at least one transfer was on the link (either direction)
    utilization: float  # busy_s / step time
    bytes_by_direction: dict[str, int] = field(default_factory=dict)  # "a->b": bytes
    # time at least one transfer on the link had begun and not landed: busy_s plus what
    # latency (and a route's pipeline fill) adds, as the step picture's rows count it
    in_flight_s: float = 0.0
    in_flight_utilization: float = 0.0  # in_flight_s over the time utilization divides busy_s by


@dataclass(frozen=True)
class TierStats:
    capacity_bytes: float
    resident_bytes: int  # classes homed here, per GPU (the inventory)
    peak_bytes: int  # resident + transient (staging, prefetched layers, live activations)
    mean_bytes: float  # time-averaged occupancy over the measured step
    low_bytes: int  # lowest occupancy seen (a check: never below zero)
    bytes_read: int  # per step, all classes
    bytes_written: int  # per step, all classes
    written_by_class: dict[str, int] = field(default_factory=dict)  # state classes only
    read_by_class: dict[str, int] = field(default_factory=dict)
    checkpoint_bytes: int = 0  # the last durable checkpoint, held here (the target)
    checkpoint_written: int = 0  # per step, a durable checkpoint's copies (interval-averaged)
    checkpoint_read: int = 0

    def __post_init__(self) -> None:
        for name in (*self.written_by_class, *self.read_by_class):
            state_class(name)  # a name that is no class is an error, not a silent figure

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def written_by_source(self) -> dict[str, int]:
        """Bytes written per step by each class, and by checkpoints where any (what wears)."""
        return _with_checkpoint(self.written_by_class, self.checkpoint_written)

    @property
    def read_by_source(self) -> dict[str, int]:
        return _with_checkpoint(self.read_by_class, self.checkpoint_read)


def _with_checkpoint(by_class: dict[str, int], checkpoint: int) -> dict[str, int]:
    return {**by_class, CHECKPOINT_WRITES: checkpoint} if checkpoint else dict(by_class)


@dataclass(frozen=True)
class CheckpointRun:
    """One durable checkpoint per GPU, as the engine measured it."""

    interval_steps: int | None  # resolved ('auto' -> Daly's optimum), None if not configured
    bytes: int  # weights + master + optimizer homed on this GPU
    write_s: float  # first checkpoint move to the last byte on the target
    stall_s: float  # how much later training ends because of it
    read_back_s: float  # reading it back to each class's home on restart
    restart_s: float
    mtbf_s: float | None
    written_by_tier: dict[str, int]  # bytes one checkpoint writes into each tier
    read_by_tier: dict[str, int] = field(default_factory=dict)
    link_bytes: dict[str, dict[str, int]] = field(default_factory=dict)  # per direction
    peak_by_tier: dict[str, int] = field(default_factory=dict)  # occupancy with the checkpoint
    link_busy_s: dict[str, float] = field(default_factory=dict)  # busy time one checkpoint adds
    link_in_flight_s: dict[str, float] = field(default_factory=dict)  # in-flight time it adds
    interval_basis: str | None = None  # "given" | "daly" | "wear budget" (see durable)
    interval_budget_tier: str | None = None  # the tier whose wear budget set it ("wear budget")
    # every step checkpointing: the step reported was seen to repeat (False: the last one
    # simulated, within MAX_STEADY_STEPS)
    steady: bool = True
    # the most its seconds (a difference of its run's and a baseline's) can err by from
    # floating-point arithmetic (tiersim.engine.steady.round_off): not reported
    round_off_s: float = 0.0


@dataclass(frozen=True)
class StepResult:
    """One steady training step of one representative GPU."""

    time_s: float
    compute_s: float  # GPU forward + backward arithmetic, recompute included
    recompute_s: float
    optimizer_s: float
    exposed_transfer_s: float  # step time the GPU waits on movement between tiers
    overlap: float | None  # share of link-busy time (any link) coinciding with GPU compute;
    # None when nothing moved
    tokens_per_step: int
    micro_batches: int
    links: dict[str, LinkStats]
    tiers: dict[str, TierStats]
    events: int
    wall_s: float
    exposed_cpu_s: float = 0.0  # step time the GPU waits on the CPU optimizer
    # step time the GPU waits on collectives (blocking tensor-parallel ones, an overlapped
    # reduction's tail): not tier movement (tiersim.engine.metrics._exposed_collective)
    exposed_collective_s: float = 0.0
    pipeline_bubble_s: float = 0.0  # step time the GPU waits on other pipeline stages
    prefetch_depth: int = 0  # uses ahead that fetches are issued (after the HBM budget)
    checkpoint: CheckpointRun | None = None
    trace: dict | None = None  # Trace Event Format, only when asked for
    steps_simulated: int = 0
    # "full", "extrapolated" or "full (no repetition found)" (tiersim.engine.steady)
    steady_state: str = "full"
    steady_state_why: str | None = None  # with "full (no repetition found)": what broke it
    micro_batches_simulated: tuple[int, ...] = ()  # per run, where extrapolated
    breakdown: dict[str, float] | None = None  # the model's prices (workload.breakdown)
    # what a framework's offload engine (DeepSpeed, FSDP2) did with state; None otherwise
    offload: OffloadFacts | None = None

    @property
    def period_s(self) -> float:
        """The step with its share of a checkpoint's stall (stall over the interval): the
        wall time each step takes in the run, so what every per-step rate divides by (a
        tier's port, a link's bandwidth, the steps a day that wear is counted at)."""
        ck = self.checkpoint
        if ck is None or not ck.interval_steps:
            return self.time_s
        return self.time_s + ck.stall_s / ck.interval_steps

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.time_s if self.time_s > 0 else float("inf")
