"""Result records the engine returns: plain frozen data, no behaviour beyond derived figures."""

from __future__ import annotations

from dataclasses import field

from tiersim.core.records import record
from tiersim.engine.figures import Into, Rule, figure
from tiersim.engine.offload_results import OffloadFacts
from tiersim.state.classes import CHECKPOINT_WRITES, state_class

# every step checkpointing: steps simulated at most for the step to settle (engine.durable);
# a result's `CheckpointRun.steady` is False where it did not within them
MAX_STEADY_STEPS = 64

# each field's rule (tiersim.engine.figures): how it extrapolates, takes a checkpoint's
# share, and where it is reported
PER_PERIOD, MEAN, SHARE, PEAK = Rule.PER_PERIOD, Rule.MEAN, Rule.SHARE, Rule.PEAK
CONSTANT, GIVEN, COST, EACH = Rule.CONSTANT, Rule.GIVEN, Rule.COST, Rule.EACH


@record
class LinkStats:
    """One link (both directions together, and each direction) over the measured step."""

    bytes: int = field(
        metadata=figure(PER_PERIOD, json="bytes", compared=True, total_of="bytes_by_direction")
    )
    # time at least one transfer was on the link (either direction)
    busy_s: float = field(metadata=figure(PER_PERIOD, json="busy_s", compared=True))
    utilization: float = field(
        metadata=figure(SHARE, of="busy_s", json="utilization")
    )  # busy_s / step time
    bytes_by_direction: dict[str, int] = field(
        default_factory=dict, metadata=figure(PER_PERIOD, json="bytes_by_direction", compared=True)
    )  # "a->b": bytes
    # time at least one transfer on the link had begun and not landed: busy_s plus what
    # latency (and a route's pipeline fill) adds, as the step picture's rows count it
    in_flight_s: float = field(
        default=0.0, metadata=figure(PER_PERIOD, json="in_flight_s", compared=True)
    )
    # in_flight_s over the time utilization divides busy_s by
    in_flight_utilization: float = field(
        default=0.0, metadata=figure(SHARE, of="in_flight_s", json="in_flight_utilization")
    )


@record
class TierStats:
    capacity_bytes: float = field(metadata=figure(GIVEN, json="capacity_bytes"))
    # classes homed here, per GPU (the inventory)
    resident_bytes: int = field(metadata=figure(GIVEN, json="resident_bytes"))
    # resident + transient (staging, prefetched layers, live activations)
    peak_bytes: int = field(metadata=figure(PEAK, json="peak_bytes", compared=True))
    # time-averaged occupancy over the measured step: its integral grows by a period
    mean_bytes: float = field(metadata=figure(MEAN, kind="bs", json="mean_bytes"))
    low_bytes: int = field(metadata=figure(CONSTANT))  # lowest occupancy (never below zero)
    bytes_read: int = field(metadata=figure(PER_PERIOD, json="bytes_read_per_step"))  # per step
    bytes_written: int = field(metadata=figure(PER_PERIOD, json="bytes_written_per_step"))
    # state classes only (the JSON's `written_by_class` adds the checkpoint's: written_by_source)
    written_by_class: dict[str, int] = field(
        default_factory=dict, metadata=figure(PER_PERIOD, json="written_by_class")
    )
    read_by_class: dict[str, int] = field(
        default_factory=dict, metadata=figure(PER_PERIOD, json="read_by_class")
    )
    # the last durable checkpoint, held here (the target)
    checkpoint_bytes: int = field(default=0, metadata=figure(GIVEN, json="checkpoint_bytes"))
    # per step, a durable checkpoint's copies (interval-averaged: CheckpointRun's `into`)
    checkpoint_written: int = field(default=0, metadata=figure(GIVEN))
    checkpoint_read: int = field(default=0, metadata=figure(GIVEN))

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


@record
class CheckpointRun:
    """One durable checkpoint per GPU, as the engine measured it."""

    # resolved ('auto' -> Daly's optimum), None if not configured
    interval_steps: int | None = field(metadata=figure(CONSTANT))
    bytes: int = field(metadata=figure(CONSTANT))  # weights + master + optimizer homed on this GPU
    # from the state it saves fixed (its step's update over: checkpoint_rows.states_fixed)
    # to the last byte on the target
    write_s: float = field(metadata=figure(PER_PERIOD))
    # how much later training ends because of it
    stall_s: float = field(metadata=figure(PER_PERIOD, floor=0.0))
    read_back_s: float = field(metadata=figure(CONSTANT))  # reading it back to each class's home
    restart_s: float = field(metadata=figure(CONSTANT))
    mtbf_s: float | None = field(metadata=figure(CONSTANT))
    # bytes one checkpoint writes into each tier
    written_by_tier: dict[str, int] = field(
        metadata=figure(CONSTANT, into=Into("tiers", "bytes_written", "checkpoint_written"))
    )
    read_by_tier: dict[str, int] = field(
        default_factory=dict,
        metadata=figure(CONSTANT, into=Into("tiers", "bytes_read", "checkpoint_read")),
    )
    link_bytes: dict[str, dict[str, int]] = field(  # per direction
        default_factory=dict, metadata=figure(CONSTANT, into=Into("links", "bytes_by_direction"))
    )
    peak_by_tier: dict[str, int] = field(  # occupancy with the checkpoint
        default_factory=dict, metadata=figure(CONSTANT, into=Into("tiers", "peak_bytes"))
    )
    link_busy_s: dict[str, float] = field(  # busy time one checkpoint adds
        default_factory=dict, metadata=figure(PER_PERIOD, into=Into("links", "busy_s"))
    )
    link_in_flight_s: dict[str, float] = field(  # in-flight time it adds
        default_factory=dict, metadata=figure(PER_PERIOD, into=Into("links", "in_flight_s"))
    )
    # from its first move's start to its last byte on the target (`write_s` where no copy
    # begins before its state is fixed): the next checkpoint's first snapshot, an interval
    # later, waits for what of it outlasts the interval and the stall, so no `auto` interval
    # is shorter (tiersim.analysis.checkpoint `drain_s`); not reported
    span_s: float = field(default=0.0, metadata=figure(PER_PERIOD))
    # steps after the checkpointed one that end before its drain does (an async drain
    # that outlasts them): tiersim.engine.drain_reach; not reported
    drain_steps: int = field(default=0, metadata=figure(GIVEN))
    # "given" | "daly" | "drain" | "shortest" | "wear budget" (analysis.checkpoint_interval)
    interval_basis: str | None = field(default=None, metadata=figure(CONSTANT))
    # the tier whose wear budget set it ("wear budget")
    interval_budget_tier: str | None = field(default=None, metadata=figure(CONSTANT))
    # every step checkpointing: the step reported was seen to repeat (False: the last one
    # simulated, within MAX_STEADY_STEPS)
    steady: bool = field(default=True, metadata=figure(CONSTANT))
    # the most its seconds (a difference of its run's and a baseline's) can err by from
    # floating-point arithmetic (tiersim.engine.steady.round_off): not reported
    round_off_s: float = field(default=0.0, metadata=figure(GIVEN))
    # where its run's peaks are reached beside its drain, for steady.grow_checkpoint
    # (tiersim.engine.peak_moment): why they may not hold at another micro-batch count
    # ("": none), and those reached past the next step's periods: not reported
    peak_moved: str = field(default="", metadata=figure(GIVEN))
    peak_moments: tuple = field(default=(), metadata=figure(GIVEN))


@record
class StepResult:
    """One steady training step of one representative GPU."""

    time_s: float = field(metadata=figure(PER_PERIOD, json="time_s"))
    # GPU forward + backward arithmetic, recompute included
    compute_s: float = field(metadata=figure(PER_PERIOD, json="compute_s"))
    recompute_s: float = field(metadata=figure(PER_PERIOD, json="recompute_s"))
    optimizer_s: float = field(metadata=figure(PER_PERIOD, json="optimizer_s"))
    # step time the GPU waits on movement between tiers
    exposed_transfer_s: float = field(metadata=figure(PER_PERIOD, json="exposed_transfer_s"))
    # share of link-busy time (any link) coinciding with GPU compute; None when nothing moved
    overlap: float | None = field(
        metadata=figure(MEAN, over="link_time", json="overlap", compared=True)
    )
    tokens_per_step: int = field(metadata=figure(GIVEN, json="tokens_per_step"))
    micro_batches: int = field(metadata=figure(GIVEN, json="micro_batches"))
    links: dict[str, LinkStats] = field(metadata=figure(EACH))
    tiers: dict[str, TierStats] = field(metadata=figure(EACH))
    events: int = field(metadata=figure(COST))
    wall_s: float = field(metadata=figure(COST))
    # step time the GPU waits on the CPU optimizer
    exposed_cpu_s: float = field(default=0.0, metadata=figure(PER_PERIOD, json="exposed_cpu_s"))
    # step time the GPU waits on collectives (blocking tensor-parallel ones, an overlapped
    # reduction's tail): not tier movement (tiersim.engine.metrics._exposed_collective)
    exposed_collective_s: float = field(
        default=0.0, metadata=figure(PER_PERIOD, json="exposed_collective_s")
    )
    # step time the GPU waits on other pipeline stages
    pipeline_bubble_s: float = field(
        default=0.0, metadata=figure(PER_PERIOD, json="pipeline_bubble_s")
    )
    # uses ahead that fetches are issued (after the HBM budget)
    prefetch_depth: int = field(default=0, metadata=figure(CONSTANT))
    checkpoint: CheckpointRun | None = field(default=None, metadata=figure(GIVEN))
    # Trace Event Format, only when asked for
    trace: dict | None = field(default=None, metadata=figure(GIVEN))
    steps_simulated: int = field(default=0, metadata=figure(GIVEN))
    # "full", "extrapolated" or "full (no repetition found)" (tiersim.engine.steady)
    steady_state: str = field(default="full", metadata=figure(GIVEN))
    # with "full (no repetition found)": what broke it
    steady_state_why: str | None = field(default=None, metadata=figure(GIVEN))
    # steps the step is the mean of: 2 where consecutive steps alternate (engine.alternating);
    # 1 with a why where a later step is reported, the steps settling after the measured one
    measured_steps: int = field(default=1, metadata=figure(GIVEN))
    # with 2, or a later step: which steps, and their lengths
    measured_steps_why: str | None = field(default=None, metadata=figure(GIVEN))
    # False where the runs looking for a settled step reached their bound (engine.settling)
    settled: bool = field(default=True, metadata=figure(GIVEN))
    # where a step after the measured one was compared with it: which steps the runs held
    steps_what: str | None = field(default=None, metadata=figure(GIVEN))
    # per run, where extrapolated
    micro_batches_simulated: tuple[int, ...] = field(default=(), metadata=figure(GIVEN))
    # the model's prices (workload.breakdown)
    breakdown: dict[str, float] | None = field(
        default=None, metadata=figure(GIVEN, json="breakdown", compared=True)
    )
    # what a framework's offload engine (DeepSpeed, FSDP2) did with state; None otherwise
    offload: OffloadFacts | None = field(default=None, metadata=figure(GIVEN))

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
