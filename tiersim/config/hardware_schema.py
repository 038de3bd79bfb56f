"""The scenario format's `hardware` section: tiers, links, GPU, CPU and network (DESIGN.md §2).
Field names are the public YAML format: extend, never rename."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tiersim.config.fields import (
    Bandwidth,
    Duration,
    FlopRate,
    Fraction,
    Latency,
    ParamRate,
    PositiveInt,
    PrecisionName,
    Size,
    Strict,
)
from tiersim.config.presets import is_preset_file, preset_names
from tiersim.config.tier_kinds import TIER_KIND_BY_NAME, TIER_KIND_NAMES, TierKind
from tiersim.core.units import fmt_bytes


class Endurance(Strict):
    """A flash tier's wear limits (tiersim/analysis/wear.py)."""

    pe_cycles: Annotated[float, Field(gt=0)]  # program/erase cycles a block withstands (rated)
    # NAND bytes written per host byte; None: 1 for sequential writes, derived from spare_area
    # for random ones (greedy garbage collection, Hu et al. 2009)
    write_amplification: Annotated[float, Field(ge=1)] | None = None
    # over-provisioning: (physical - user) / user capacity, e.g. 0.07; None: 0
    spare_area: Annotated[float, Field(gt=0, lt=1)] | None = None
    write_pattern: Literal["sequential", "random"] = "sequential"  # how the host writes
    # the drive's rated drive writes per day over its warranty (a second lifetime limit)
    rated_drive_writes_per_day: Annotated[float, Field(gt=0)] | None = None
    warranty: Duration | None = None  # the period the DWPD rating covers (e.g. 5 years)
    # endurance against retention (tiersim.analysis.flash): the P/E cycles a block withstands
    # rise as the retention its data needs falls. `retention`: what the data held needs (e.g.
    # 1 min for optimizer state rewritten every step and checkpointed elsewhere); None: the
    # rating's own
    retention: Duration | None = None
    # what `pe_cycles` is rated for (None: 1 year, JEDEC JESD218's client class)
    rated_retention: Duration | None = None
    # {retention: P/E cycles} from a datasheet or a measurement, in place of the default curve
    # (Cai et al. 2012's refresh figure)
    retention_curve: dict[Duration, Annotated[float, Field(gt=0)]] | None = None

    @model_validator(mode="after")
    def _curve(self) -> Endurance:
        """A curve is read by interpolation: two points at least, fewer cycles for longer
        retention (a longer retention never lets a block take more cycles)."""
        curve = self.retention_curve
        if curve is None:
            return self
        points = sorted(curve.items())
        if len(points) < 2:
            raise ValueError(
                "retention_curve needs two entries at least (expected e.g. "
                "{1 year: 3000, 3 days: 138000})"
            )
        if any(b[1] > a[1] for a, b in itertools.pairwise(points)):
            raise ValueError(
                "retention_curve must give fewer (or as many) P/E cycles for a longer retention"
            )
        return self


class Tier(Strict):
    """One memory or storage tier (a name under hardware.tiers, used by placement)."""

    # what the tier is (config/tier_kinds.py): GPU memory, host memory, flash or remote
    kind: Literal[TIER_KIND_NAMES]  # type: ignore[valid-type]
    capacity: Size  # bytes one GPU can use in it (e.g. 141 GB)
    bandwidth: Bandwidth | None = None  # read and write, per GPU (e.g. 4.8 TB/s)
    read_bandwidth: Bandwidth | None = None  # in place of bandwidth for reads
    write_bandwidth: Bandwidth | None = None  # in place of bandwidth for writes
    latency: Latency = 0.0  # seconds added to each transfer (e.g. 10 us)
    endurance: Endurance | None = None  # flash wear limits; None: the tier does not wear
    # the bytes of the device that absorb its writes (wear levelling's reach): None, the whole
    # device; a size where wear levelling reaches only part of it (DESIGN.md third round)
    wear_span: Size | None = None
    # reads slowed while the same dies program (tiersim.analysis.flash): none (the read and
    # write ports are independent); suspend (reads preempt programs, the writes lose the
    # dies' read time); wait (reads wait for the program on their die)
    program_interference: Literal["none", "suspend", "wait"] = "none"
    # capital cost per decimal GB of this tier (any currency, the one price_per_gpu_hour is
    # in): tiersim.analysis.cost prices it over hardware.amortization, flash replaced as it
    # wears out; no part of a simulation, so left out of model_dump (a sweep point's key)
    price_per_gb: Annotated[float, Field(ge=0)] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _has_bandwidth(self) -> Tier:
        if self.read_bw is None or self.write_bw is None:
            raise ValueError("needs 'bandwidth' or both 'read_bandwidth' and 'write_bandwidth'")
        if self.wear_span is not None and self.wear_span > self.capacity:
            raise ValueError(
                f"wear_span ({fmt_bytes(self.wear_span)}) is larger than capacity "
                f"({fmt_bytes(self.capacity)}) (expected at most the device's capacity, or null "
                "for the whole device)"
            )
        return self

    @property
    def behaviour(self) -> TierKind:
        """What this tier's kind does (config/tier_kinds.py)."""
        return TIER_KIND_BY_NAME[self.kind]

    @property
    def read_bw(self) -> float:
        return self.read_bandwidth if self.read_bandwidth is not None else self.bandwidth

    @property
    def write_bw(self) -> float:
        return self.write_bandwidth if self.write_bandwidth is not None else self.bandwidth


class Link(Strict):
    """A link between two tiers that is not the default path (e.g. GPU-direct storage)."""

    between: tuple[str, str]  # the two tiers' names
    bandwidth: Bandwidth  # per direction
    latency: Latency = 0.0  # seconds added to each transfer over it


class Gpu(Strict):
    """One GPU: its peak rates, efficiencies and the tier that is its memory."""

    name: str = "gpu"  # a label for reports
    memory: str = "hbm"  # the tier (under hardware.tiers) that is this GPU's own memory
    # dense peak per precision, e.g. {bf16: 989 TFLOP/s, fp8: 1979 TFLOP/s}
    peak_flops: dict[PrecisionName, FlopRate]
    efficiency: Fraction = 0.5  # share of peak a full wave of GEMM tiles reaches
    optimizer_efficiency: Fraction = 0.8  # share of HBM bandwidth a fused optimizer reaches
    # streaming multiprocessors, for GEMM wave quantization (none: no quantization)
    sm_count: PositiveInt | None = None
    # measured L2 read bandwidth: lets the GEMM model pick among cuBLAS's smaller tiles, each
    # at the rate L2 can feed it (tiersim.hardware.gemm); none: the two largest tiles only
    l2_bandwidth: Bandwidth | None = None
    memory_efficiency: Fraction = 1.0  # share of HBM bandwidth memory-bound kernels reach
    # compute slowdown while a collective runs beside it (NCCL's kernels take SMs)
    collective_sm_share: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # the GPU's measured kernel rates: a shipped kernel table's name (tiersim/presets/kernels,
    # docs/kernels.md); given, GEMMs and fused attention are timed from it, not from
    # `efficiency`; null: peak x efficiency x wave quantization (tiersim.hardware.gemm)
    kernels: str | None = None

    @field_validator("kernels")
    @classmethod
    def _known_table(cls, name: str | None) -> str | None:
        names = preset_names("kernels")
        if name is None or name in names or (is_preset_file(name) and Path(name).is_file()):
            return name
        why = "unknown kernel table"
        if is_preset_file(name):  # a folder or a FIFO named x.yaml exists: not "no such file"
            why = "not a regular file:" if Path(name).exists() else "no such file"
        raise ValueError(
            f"{why} {name!r} (available: {', '.join(names)}, or a kernel table's YAML file "
            "as tiersim calibrate --kernels-out writes it)"
        )


class Cpu(Strict):
    """The host CPU: its memory tier and CPU-optimizer rates."""

    name: str = "cpu"  # a label for reports
    memory: str = "dram"  # the tier (under hardware.tiers) that is host memory
    # DESIGN.md §4's 1.4 Gparam/s is a whole host's CPU-Adam rate: a GPU's share of 8 is 1/8
    optimizer_rate: ParamRate = 0.175e9
    # the CPU-Adam kernel alone (ZeRO-Offload Table 4's measurement), used with a framework
    # whose CPU path is modelled in parts (workload/cpu_optimizer.py); default: optimizer_rate
    adam_kernel_rate: ParamRate | None = None
    # the rest of that path no part modelled explains, as a rate (null: none)
    path_overhead_rate: ParamRate | None = None
    # ... and per parameter tensor of a rank's partition (DeepSpeed's per-parameter work at
    # the accumulation boundary; fitted, seconds a tensor; null: none)
    path_overhead_per_tensor: Latency | None = None
    memory_bandwidth: Bandwidth | None = None  # default: the host tier's read bandwidth


class Network(Strict):
    """The GPU interconnect the collectives run over (tiersim.hardware.nccl)."""

    gpus_per_node: PositiveInt = 8  # GPUs sharing the intra-node fabric (NVLink)
    intra_node_bandwidth: Bandwidth = 450e9  # per GPU per direction (default 450 GB/s)
    inter_node_bandwidth: Bandwidth = 50e9  # per GPU per direction (default 50 GB/s)
    intra_node_latency: Latency = 2e-6  # seconds a collective step costs (default 2 us)
    inter_node_latency: Latency = 5e-6  # seconds a collective step costs (default 5 us)
    # busbw / link rate NCCL reaches: one fraction, or {buffer size: fraction} measured
    # (tiersim.hardware.nccl)
    intra_node_efficiency: Fraction | dict[Size, Fraction] = 1.0
    inter_node_efficiency: Fraction | dict[Size, Fraction] = 1.0  # as intra_node_efficiency


class Hardware(Strict):
    """The machine, per GPU: its GPU, CPU, memory tiers, links and network."""

    # a shipped machine (tiersim/presets/hardware) or a YAML file; the keys given override it
    preset: str | None = None
    gpu: Gpu
    cpu: Cpu = Cpu()
    tiers: dict[str, Tier]  # the memory tiers by name (hbm, dram, nvme, ...)
    links: dict[str, Link] = Field(default_factory=dict)  # extra tier-to-tier links by name
    network: Network = Network()
    # what one GPU of this machine costs per hour, its share of the host included (any
    # currency): `tiersim plan --objective cost` ranks by it; no part of a simulation, so left
    # out of model_dump (a sweep point's key)
    price_per_gpu_hour: Annotated[float, Field(gt=0)] | None = Field(default=None, exclude=True)
    # the period tier capital (tiers.<tier>.price_per_gb) is written off over; flash that
    # wears out sooner is bought again (tiersim.analysis.cost). None: 5 years (assumed)
    amortization: Duration | None = Field(default=None, exclude=True)
