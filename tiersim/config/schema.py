"""The scenario format: typed, frozen models that reject unknown keys.

Field names here are the public YAML format (DESIGN.md §2): extend, never rename.
Quantities are read from unit strings once, here, and held as floats in base units.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tiersim.config.variants import check_layer_variants
from tiersim.core.units import UNLIMITED, Kind, fmt_bytes, fmt_rate, fmt_time, parse
from tiersim.state.classes import OPTIMIZER_NAMES

PRECISION_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def _shown(kind: Kind | None) -> Callable[[float], str]:
    """How a rejected value is shown back: in the unit the user wrote it in, not base units."""
    return {Kind.SIZE: fmt_bytes, Kind.BANDWIDTH: fmt_rate, Kind.TIME: fmt_time}.get(
        kind, lambda v: f"{v:g}"
    )


def _positive(kind: Kind | None = None) -> AfterValidator:
    def check(value: float) -> float:
        if not value > 0:
            raise ValueError(f"must be > 0 (got {_shown(kind)(value)})")
        return value

    return AfterValidator(check)


def _at_least_one(kind: Kind) -> AfterValidator:
    """Bandwidths and rates below one unit per second are typos, and make times overflow."""

    def check(value: float) -> float:
        if not value >= 1:
            raise ValueError(f"must be at least 1 {kind.base_unit} (got {_shown(kind)(value)})")
        return value

    return AfterValidator(check)


def _non_negative(kind: Kind) -> AfterValidator:
    def check(value: float) -> float:
        if value < 0:
            raise ValueError(f"must be >= 0 (got {_shown(kind)(value)})")
        return value

    return AfterValidator(check)


def _unit(kind: Kind, allow_unlimited: bool = False):
    def convert(value: object) -> float:
        if allow_unlimited and isinstance(value, str) and value.strip() in UNLIMITED:
            return math.inf
        return parse(value, kind)

    convert.kind = kind  # type: ignore[attr-defined]  # what unit_kind() reads
    return BeforeValidator(convert)


def unit_kind(annotation: Any, metadata: list[Any] = ()) -> Kind | None:
    """The unit kind a field parses with: from its `_unit` validator, on the field or inside
    an Optional / Union of annotated types."""
    if get_origin(annotation) is Annotated:
        metadata = [*metadata, *get_args(annotation)[1:]]
    for item in metadata:
        if isinstance(item, BeforeValidator) and hasattr(item.func, "kind"):
            return item.func.kind
    for arg in get_args(annotation) if annotation is not None else ():
        if get_origin(arg) is Annotated:
            found = unit_kind(None, list(get_args(arg)[1:]))
            if found is not None:
                return found
    return None


Size = Annotated[float, _unit(Kind.SIZE), _positive(Kind.SIZE)]
SizeOrZero = Annotated[float, _unit(Kind.SIZE), _non_negative(Kind.SIZE)]
Bandwidth = Annotated[
    float,
    Field(allow_inf_nan=True),  # `unlimited`
    _unit(Kind.BANDWIDTH, True),
    _at_least_one(Kind.BANDWIDTH),
]
Duration = Annotated[float, _unit(Kind.TIME), _positive(Kind.TIME)]
Latency = Annotated[float, _unit(Kind.TIME), _non_negative(Kind.TIME)]
FlopRate = Annotated[float, _unit(Kind.FLOP_RATE), _at_least_one(Kind.FLOP_RATE)]
ParamRate = Annotated[float, _unit(Kind.PARAM_RATE), _at_least_one(Kind.PARAM_RATE)]
PositiveInt = Annotated[int, Field(gt=0, le=2**40, strict=True)]
NonNegativeInt = Annotated[int, Field(ge=0, le=2**40, strict=True)]


def _integral(value: object) -> object:
    """Accept 7.5e9 or '7.5e9' for a count (YAML reads the latter as a string)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, BeforeValidator(_integral), Field(gt=0, le=10**16, strict=True)]
Fraction = Annotated[float, Field(ge=1e-3, le=1)]
PrecisionName = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in get_args(annotation))


class Strict(BaseModel):
    # no infinity or NaN from YAML (.inf, .nan): only `unlimited` bandwidths are infinite
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_only_for_switches(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's true/yes/on are booleans, which pydantic would read as 1 where a number is
        expected (zero_stage: true as ZeRO 1, efficiency: yes as 1.0), and 1 or 0 as a
        boolean: a boolean field takes true or false, and only a boolean field does."""
        field = cls.model_fields[info.field_name]
        switch = _takes_bool(field.annotation)
        if isinstance(value, bool) and not switch:
            kind = unit_kind(field.annotation, field.metadata)
            what = f"{kind.label} with a unit, such as '{kind.example}'" if kind else None
            raise ValueError(f"expected {what or _expected(field.annotation)}, not true or false")
        optional = type(None) in get_args(field.annotation)
        if switch and not isinstance(value, bool) and not (value is None and optional):
            got = "null" if value is None else repr(value)
            raise ValueError(f"expected true or false (got {got})")
        return value


def _expected(annotation: Any) -> str:
    """What a field takes, in words: 'a number', "one of 'a', 'b'", or both."""
    origin = get_origin(annotation)
    if origin is Literal:
        names = [repr(a) for a in get_args(annotation)]
        return names[0] if len(names) == 1 else "one of " + ", ".join(names)
    if origin is Annotated:
        return _expected(get_args(annotation)[0])
    if annotation in (int, float):
        return "a number"
    options = [a for a in get_args(annotation) if a is not type(None)]
    return " or ".join(dict.fromkeys(_expected(a) for a in options)) if options else "a value"


# --- model -------------------------------------------------------------------------------------


class ModelSpec(Strict):
    """A transformer by its dimensions, or a generic model by its parameter count.

    `preset` and `hf_config` are resolved by the loader into the dimension keys below;
    they stay here as a record of where the dimensions came from.
    """

    preset: str | None = None
    hf_config: str | None = None
    family: str | None = None
    layers: PositiveInt | None = None
    hidden: PositiveInt | None = None
    heads: PositiveInt | None = None
    kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    ffn_hidden: PositiveInt | None = None
    vocab: PositiveInt | None = None
    max_positions: PositiveInt | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = False
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position: Literal["learned", "rope", "none"] = "learned"
    # layers not all alike (tiersim.state.layers): attention variants and mixture-of-experts
    qk_norm: bool = False  # RMSNorm over each head's queries and keys (Qwen3, Gemma 3)
    post_norms: bool = False  # a norm after attention and after the MLP too (Gemma 2, Gemma 3)
    q_lora_rank: PositiveInt | None = None  # multi-head latent attention (DeepSeek V2/V3) ...
    kv_lora_rank: PositiveInt | None = None  # ... is on when kv_lora_rank is given
    qk_rope_head_dim: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    sliding_window: PositiveInt | None = None  # recorded: changes no parameter
    sliding_window_layers: tuple[NonNegativeInt, ...] | None = None  # None: every layer
    experts: PositiveInt | None = None  # routed experts per MoE layer; None: a dense model
    experts_per_token: PositiveInt | None = None
    expert_ffn_hidden: PositiveInt | None = None  # default: ffn_hidden
    shared_experts: NonNegativeInt = 0
    shared_expert_ffn_hidden: PositiveInt | None = None  # each; default: expert_ffn_hidden
    shared_expert_gate: bool = False  # a sigmoid gate on the shared experts (Qwen2-MoE)
    first_dense_layers: NonNegativeInt = 0  # DeepSeek's first_k_dense_replace
    moe_every: PositiveInt = 1  # layer i is MoE when (i + 1) % moe_every == 0 (Qwen's step)
    dense_layers: tuple[NonNegativeInt, ...] = ()  # dense whatever the rules above say
    capacity_factor: Annotated[float, Field(ge=1, le=1000)] | None = None  # None: dropless
    # generic model: `parameters` and `layers`, optionally per-layer figures at the scenario's shape
    parameters: Count | None = None
    activation_bytes_per_layer: SizeOrZero | None = None  # 0 B: none kept (e.g. all recomputed)
    forward_flops_per_token_per_layer: Annotated[float, Field(gt=0)] | None = None
    # dropout probabilities (None: the implementation's default, tiersim/state/activations.py);
    # from config.json where it has them (GPT-2 attn_pdrop / resid_pdrop, Llama attention_dropout)
    attention_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    hidden_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    # measured / predicted activations, from calibration (tiersim measure --calibrate)
    activation_factor: Annotated[float, Field(gt=0, le=1000)] = 1.0

    @model_validator(mode="after")
    def _complete(self) -> ModelSpec:
        if self.parameters is not None:
            if self.layers is None:
                raise ValueError("a generic model with 'parameters' also needs 'layers'")
            return self
        needed = ("layers", "hidden", "heads", "ffn_hidden", "vocab")
        missing = [k for k in needed if getattr(self, k) is None]
        if missing:
            raise ValueError(
                "missing " + ", ".join(missing) + " (give a 'preset', an 'hf_config', the "
                "transformer dimensions layers/hidden/heads/ffn_hidden/vocab, or 'parameters' "
                "and 'layers' for a generic model)"
            )
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); "
                "give head_dim explicitly"
            )
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({kv})")
        if self.position == "learned" and self.max_positions is None:
            raise ValueError("learned position embeddings need 'max_positions'")
        check_layer_variants(self)
        return self


# --- training ----------------------------------------------------------------------------------


class Precision(Strict):
    weights: PrecisionName = "bf16"
    gradients: PrecisionName = "bf16"
    master: PrecisionName | Literal["none"] = "fp32"
    optimizer: PrecisionName = "fp32"
    # the copy the layers compute with (all-gathered, kept while a unit runs; activations are
    # in it); None: the weights' precision. FSDP2 mixed precision: weights fp32 (the sharded
    # master), master none, compute bf16. DeepSpeed: weights bf16 + master fp32.
    compute: PrecisionName | None = None

    @property
    def compute_precision(self) -> str:
        return self.compute or self.weights


FRAMEWORKS = ("deepspeed", "fsdp", "megatron")


class Offload(Strict):
    """How the framework's offload engine moves state (`training.offload`). Every key left out
    (null) takes the default of `training.framework` (tiersim/config/framework.py); without a
    framework, tiersim's generic engine (a whole layer at a time, nothing of the below)."""

    # fetch unit of sharded or offloaded weights: a whole layer (FSDP2's fully_shard per block,
    # Megatron) or each submodule (DeepSpeed ZeRO-3), bucketed by the two DeepSpeed keys below
    fetch: Literal["layer", "submodule"] | None = None
    prefetch_bucket_size: Count | None = None  # parameters (stage3_prefetch_bucket_size)
    max_live_parameters: Count | None = None  # parameters (stage3_max_live_parameters)
    # an operator too large for GPU memory runs as sequential tiles (ZeRO-Infinity)
    tiling: bool | None = None
    # precision gradients cross to a CPU optimizer at the accumulation boundary
    boundary_gradients: Literal["fp32", "stored"] | None = None
    # with the optimizer state on flash, the fp32 gradients are swapped through it too
    swap_gradients: bool | None = None
    sub_group_size: Count | None = None  # parameters per optimizer tile (sub_group_size)
    pipeline_read: bool | None = None  # the next tile's swap-in overlaps this tile's update
    pipeline_write: bool | None = None  # this tile's swap-out overlaps the next tile's update
    buffer_count: PositiveInt | None = None  # pinned swap buffers of one tile each
    # pinned host buffers as PyTorch's caching host allocator holds them (rounded up to a
    # power of two), counted as allocated in the host tier's peak
    pin_memory: bool | None = None


class Training(Strict):
    micro_batch_size: PositiveInt = 1
    grad_accumulation: PositiveInt = 1
    seq_len: PositiveInt | None = None  # default: the model's max_positions, else 2048
    optimizer: Literal[OPTIMIZER_NAMES] = "adamw"  # type: ignore[valid-type]
    precision: Precision = Precision()
    recompute: Literal["none", "selective", "full"] = "none"
    workspace: SizeOrZero = Field(default=2**30, description="temporary buffers, buckets, slack")
    # synchronous: the update waits for every gradient and the next step for the whole update
    # (DeepSpeed, FSDP, Megatron); pipelined: unit by unit, into the next step's forward
    # delayed: ZeRO-Offload's delayed parameter update (DPU): step k's CPU update overlaps step
    # k+1's forward and backward, which use the weights of step k-1 (one step stale)
    optimizer_step: Literal["synchronous", "pipelined", "delayed"] = "synchronous"
    # the parallel/offload engine: how it moves state (DESIGN.md Extensions); null: generic
    framework: Literal["deepspeed", "fsdp", "megatron"] | None = None
    offload: Offload = Offload()
    # the modelling code, which decides what each op keeps for backward (state/activations.py)
    implementation: Literal["megatron", "huggingface"] = "megatron"
    # None: the implementation's default (megatron: eager, Korthikanti et al.'s stored scores;
    # huggingface: sdpa, transformers' default attn_implementation)
    attention_kernel: Literal["eager", "sdpa", "flash"] | None = None


class Shard(Strict):
    """Per-class data-parallel sharding; None means 'as the ZeRO stage says'."""

    weights: bool | None = None
    gradients: bool | None = None
    master: bool | None = None
    optimizer: bool | None = None


class Parallel(Strict):
    data: PositiveInt = 1
    tensor: PositiveInt = 1
    pipeline: PositiveInt = 1
    virtual_pipeline: PositiveInt = 1
    sequence: bool = False
    zero_stage: Literal[0, 1, 2, 3] = 0
    shard: Shard = Shard()
    # False: gradients are reduced after backward, the GPU waiting (Megatron-LM before its
    # --overlap-grad-reduce, DeepSpeed with overlap_comm off); True: as each bucket is ready.
    overlap_gradient_reduce: bool = True
    # expert parallelism: a mixture-of-experts model's routed experts split over `expert` ranks
    # of the data-parallel group, their state ZeRO-sharded over the data / expert others; the
    # busiest rank receives `expert_imbalance` x the mean of the dispatched tokens (1: uniform)
    expert: PositiveInt = 1
    expert_imbalance: Annotated[float, Field(ge=1, le=1000)] = 1.0
    # True: backward's tensor-parallel collectives run beside the weight-gradient GEMMs
    # (Megatron-LM since late 2021, --async-tensor-model-parallel-allreduce); False: they
    # block the GPU stream (Megatron-LM of 2021, Narayanan et al.; DeepSpeed's MT-NLG runs).
    overlap_tensor_backward: bool = False
    # Extra share of compute time a framework's pipeline engine adds beyond the kernels (a
    # fitted per-framework figure; 0 for Megatron-LM): compute times x (1 + this)
    pipeline_engine_overhead: Annotated[float, Field(ge=0, le=10)] = 0.0


class ExpertPlacement(Strict):
    """A mixture-of-experts model's routed experts' own home tier of each per-parameter class
    (their weights, gradients, master copy, optimizer state); unset: the dense state's."""

    weights: str | None = None
    gradients: str | None = None
    master: str | None = None
    optimizer: str | None = None


class Placement(Strict):
    weights: str = "hbm"
    gradients: str = "hbm"
    master: str = "hbm"
    optimizer: str = "hbm"
    activations: str = "hbm"
    optimizer_compute: Literal["gpu", "cpu"] = "gpu"
    experts: ExpertPlacement = ExpertPlacement()


# --- hardware ----------------------------------------------------------------------------------


class Endurance(Strict):
    pe_cycles: Annotated[float, Field(gt=0)]
    write_amplification: Annotated[float, Field(ge=1)] | None = None
    spare_area: Annotated[float, Field(gt=0, lt=1)] | None = None
    write_pattern: Literal["sequential", "random"] = "sequential"
    rated_drive_writes_per_day: Annotated[float, Field(gt=0)] | None = None
    warranty: Duration | None = None


class Tier(Strict):
    kind: Literal["hbm", "dram", "flash", "remote"]
    capacity: Size
    bandwidth: Bandwidth | None = None
    read_bandwidth: Bandwidth | None = None
    write_bandwidth: Bandwidth | None = None
    latency: Latency = 0.0
    endurance: Endurance | None = None

    @model_validator(mode="after")
    def _has_bandwidth(self) -> Tier:
        if self.read_bw is None or self.write_bw is None:
            raise ValueError("needs 'bandwidth' or both 'read_bandwidth' and 'write_bandwidth'")
        return self

    @property
    def read_bw(self) -> float:
        return self.read_bandwidth if self.read_bandwidth is not None else self.bandwidth

    @property
    def write_bw(self) -> float:
        return self.write_bandwidth if self.write_bandwidth is not None else self.bandwidth


class Link(Strict):
    between: tuple[str, str]
    bandwidth: Bandwidth  # per direction
    latency: Latency = 0.0


class Gpu(Strict):
    name: str = "gpu"
    memory: str = "hbm"
    peak_flops: dict[PrecisionName, FlopRate]
    efficiency: Fraction = 0.5  # share of peak a full wave of GEMM tiles reaches
    optimizer_efficiency: Fraction = 0.8  # share of HBM bandwidth a fused optimizer reaches
    # streaming multiprocessors, for GEMM wave quantization (none: no quantization)
    sm_count: PositiveInt | None = None
    memory_efficiency: Fraction = 1.0  # share of HBM bandwidth memory-bound kernels reach
    # compute slowdown while a collective runs beside it (NCCL's kernels take SMs)
    collective_sm_share: Annotated[float, Field(ge=0, lt=1)] = 0.0


class Cpu(Strict):
    name: str = "cpu"
    memory: str = "dram"
    # DESIGN.md §4's 1.4 Gparam/s is a whole host's CPU-Adam rate: a GPU's share of 8 is 1/8
    optimizer_rate: ParamRate = 0.175e9
    # the CPU-Adam kernel alone (ZeRO-Offload Table 4's measurement), used with a framework
    # whose CPU path is modelled in parts (workload/cpu_optimizer.py); default: optimizer_rate
    adam_kernel_rate: ParamRate | None = None
    # the rest of that path no part modelled explains, as a rate (fitted; null: none)
    path_overhead_rate: ParamRate | None = None
    memory_bandwidth: Bandwidth | None = None  # default: the host tier's read bandwidth


class Network(Strict):
    gpus_per_node: PositiveInt = 8
    intra_node_bandwidth: Bandwidth = 450e9
    inter_node_bandwidth: Bandwidth = 50e9
    intra_node_latency: Latency = 2e-6
    inter_node_latency: Latency = 5e-6
    # busbw / link rate NCCL reaches: one fraction, or {buffer size: fraction} measured
    # (tiersim.hardware.nccl)
    intra_node_efficiency: Fraction | dict[Size, Fraction] = 1.0
    inter_node_efficiency: Fraction | dict[Size, Fraction] = 1.0


class Hardware(Strict):
    preset: str | None = None
    gpu: Gpu
    cpu: Cpu = Cpu()
    tiers: dict[str, Tier]
    links: dict[str, Link] = {}
    network: Network = Network()
    # what one GPU of this machine costs per hour, its share of the host included (any
    # currency): `tiersim plan --objective cost` ranks by it; no part of a simulation, so left
    # out of model_dump (a sweep point's key)
    price_per_gpu_hour: Annotated[float, Field(gt=0)] | None = Field(default=None, exclude=True)


# --- simulation, checkpoint, failures, budget --------------------------------------------------


class Simulation(Strict):
    chunk_size: Size = 64 * 2**20
    prefetch_depth: PositiveInt = 2
    staging_chunks: PositiveInt = 4
    warmup_steps: Annotated[int, Field(ge=1, le=100)] = 1  # the measured step needs one before it
    # How concurrent transfers share a link or port: max-min fair; in issue order (a queue per
    # resource, work-conserving: later transfers use what earlier ones leave); or ordered (one
    # transfer at a time per link direction, in issue order, at full speed: not work-conserving,
    # but a step never gets slower with more bandwidth).
    link_sharing: Literal["fair", "issue_order", "ordered"] = "fair"
    # steps x micro-batches x units (layers + 1) a run may simulate: each is ~4-25 engine events
    # and ~1 kB; a guard against runs of hours and gigabytes (raise it if that is intended)
    max_layer_passes: PositiveInt = 1_000_000
    # extrapolate: simulate a few micro-batches, verify that the step repeats micro-batch to
    # micro-batch (or over a pipeline's period) and extrapolate the rest; full: simulate all
    steady_state: Literal["extrapolate", "full"] = "extrapolate"


class Checkpoint(Strict):
    every_steps: PositiveInt | Literal["auto"] | None = None
    target: str = "nvme"
    mode: Literal["blocking", "async"] = "blocking"
    restart: Latency = 300.0
    staging: str = "dram"


class Failures(Strict):
    mtbf: Duration | None = None
    gpu_mtbf: Duration | None = None
    gpus: PositiveInt | None = None


class TierBudget(Strict):
    lifetime: Duration | None = None
    drive_writes_per_day: Annotated[float, Field(gt=0)] | None = None
    total_bytes_written: Size | None = None

    @model_validator(mode="after")
    def _one(self) -> TierBudget:
        kinds = ("lifetime", "drive_writes_per_day", "total_bytes_written")
        given = [k for k in kinds if getattr(self, k) is not None]
        if len(given) != 1:
            got = " and ".join(given) if given else "none"
            hint = f"; set all but one to null, e.g. --set ...{given[0]}=null" if given else ""
            raise ValueError(f"give exactly one of {', '.join(kinds)} (got {got}{hint})")
        return self


class Budget(Strict):
    """`steps_per_day`, plus one entry per flash tier: `budget.hbf: {lifetime: 5 years}`."""

    steps_per_day: Annotated[float, Field(gt=0, le=1e9)] | None = None  # 1e9: one per 86 us
    tiers: dict[str, TierBudget] = {}

    @model_validator(mode="before")
    @classmethod
    def _gather_tiers(cls, data: Any) -> Any:
        """Tier entries beside `steps_per_day` (the documented form) go under `tiers`, merged
        key by key into any `tiers` given too (a `--set budget.hbf.x` onto a written file)."""
        if not isinstance(data, dict) or not isinstance(data.get("tiers", {}), dict):
            return data
        tiers = dict(data.get("tiers", {}))
        for name, entry in data.items():
            if name in ("steps_per_day", "tiers"):
                continue
            known = tiers.get(name)
            both = isinstance(known, dict) and isinstance(entry, dict)
            tiers[name] = {**known, **entry} if both else entry
        rest = {k: v for k, v in data.items() if k == "steps_per_day"}
        return {**rest, "tiers": tiers}


def _folder_name(name: str) -> str:
    if name in (".", ".."):
        raise ValueError(f"'{name}' is not a usable folder name under results/")
    return name


class Scenario(Strict):
    # a folder name under results/: letters, digits, '_', '-', '.', never '.' or '..' alone
    name: Annotated[
        str,
        Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_.\-]+$"),  # 255: NAME_MAX
        AfterValidator(_folder_name),
    ]
    model: ModelSpec
    training: Training = Training()
    parallel: Parallel = Parallel()
    placement: Placement = Placement()
    hardware: Hardware
    simulation: Simulation = Simulation()
    checkpoint: Checkpoint = Checkpoint()
    failures: Failures = Failures()
    budget: Budget = Budget()
    # `tiersim plan`'s search space: key path -> the values to consider. It describes a search,
    # not a simulation: left out of model_dump (a sweep point's key)
    # (its paths and lists are checked by tiersim.plan.space, which knows the scenario)
    plan: dict[str, Any] | None = Field(default=None, exclude=True)

    @property
    def checkpoint_simulated(self) -> bool:
        """A durable checkpoint is simulated when an interval or a failure rate is given."""
        f = self.failures
        return (
            self.checkpoint.every_steps is not None or f.mtbf is not None or f.gpu_mtbf is not None
        )

    @property
    def seq_len(self) -> int:
        if self.training.seq_len is not None:
            return self.training.seq_len
        return self.model.max_positions or 2048
