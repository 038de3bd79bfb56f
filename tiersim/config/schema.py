"""The scenario format: typed, frozen models that reject unknown keys.

Field names here are the public YAML format (DESIGN.md §2): extend, never rename.
Quantities are read from unit strings once (config/fields.py), and held as floats in base units.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from tiersim.config.apex_optim import ApexOptim
from tiersim.config.budget_schema import Budget, TierBudget
from tiersim.config.deepspeed import DeepSpeed
from tiersim.config.fields import (
    PRECISION_BYTES,
    Count,
    Duration,
    NonNegativeInt,
    PositiveInt,
    PrecisionName,
    Size,
    SizeOrZero,
    Strict,
    Wait,
    unit_kind,
)
from tiersim.config.fp8 import Fp8
from tiersim.config.hardware_schema import Cpu, Endurance, Gpu, Hardware, Link, Network, Tier
from tiersim.config.parallel_schema import Parallel, Shard
from tiersim.config.variants import check_layer_variants
from tiersim.state.classes import OPTIMIZER_DEFAULT, OPTIMIZER_NAMES

# re-exported: the format's public names (the hardware section lives in hardware_schema.py)
__all__ = [
    "PRECISION_BYTES",
    "Budget",
    "Cpu",
    "Endurance",
    "Gpu",
    "Hardware",
    "Link",
    "Network",
    "Parallel",
    "Shard",
    "Tier",
    "TierBudget",
    "unit_kind",
]

# --- model -------------------------------------------------------------------------------------
_KV = " (expected kv_heads dividing heads: set model.kv_heads too where a preset gives it)"


class ModelSpec(Strict):
    """A transformer by its dimensions, or a generic model by its parameter count.

    `preset` and `hf_config` are resolved by the loader into the dimension keys below;
    they stay here as a record of where the dimensions came from.
    """

    preset: str | None = None  # a shipped model's name (tiersim/presets/models)
    hf_config: str | None = None  # a Hugging Face config.json's path, read for the dimensions
    family: str | None = None  # the model's family, as the preset or config.json names it
    layers: PositiveInt | None = None  # transformer layers
    hidden: PositiveInt | None = None  # the model (embedding) width
    heads: PositiveInt | None = None  # attention (query) heads
    kv_heads: PositiveInt | None = None  # key/value heads (grouped-query); None: heads
    head_dim: PositiveInt | None = None  # None: hidden / heads
    ffn_hidden: PositiveInt | None = None  # the MLP's inner width
    vocab: PositiveInt | None = None  # vocabulary size (embedding and output rows)
    max_positions: PositiveInt | None = None  # context length it is trained for
    gated_mlp: bool = False  # a gated MLP (SwiGLU: three matrices, not two)
    tied_embeddings: bool = False  # the output layer shares the input embedding's weights
    qkv_bias: bool = False  # biases on the query, key and value projections
    attn_out_bias: bool = False  # a bias on attention's output projection
    mlp_bias: bool = False  # biases on the MLP's matrices
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"  # rmsnorm: no bias, no mean
    position: Literal["learned", "rope", "none"] = "learned"  # learned: a position embedding
    # --- layers not all alike (tiersim.state.layers): attention variants and mixture-of-experts
    qk_norm: bool = False  # RMSNorm over each head's queries and keys (Qwen3, Gemma 3)
    post_norms: bool = False  # a norm after attention and after the MLP too (Gemma 2, Gemma 3)
    q_lora_rank: PositiveInt | None = None  # multi-head latent attention (DeepSeek V2/V3) ...
    kv_lora_rank: PositiveInt | None = None  # ... is on when kv_lora_rank is given
    qk_rope_head_dim: PositiveInt | None = None  # MLA: each head's rotary part
    qk_nope_head_dim: PositiveInt | None = None  # MLA: each head's part without rotary
    v_head_dim: PositiveInt | None = None  # MLA: each head's value width
    sliding_window: PositiveInt | None = None  # recorded: changes no parameter
    sliding_window_layers: tuple[NonNegativeInt, ...] | None = None  # None: every layer
    experts: PositiveInt | None = None  # routed experts per MoE layer; None: a dense model
    experts_per_token: PositiveInt | None = None  # routed experts each token goes to (top-k)
    expert_ffn_hidden: PositiveInt | None = None  # default: ffn_hidden
    shared_experts: NonNegativeInt = 0  # experts every token goes to besides the routed
    shared_expert_ffn_hidden: PositiveInt | None = None  # each; default: expert_ffn_hidden
    shared_expert_gate: bool = False  # a sigmoid gate on the shared experts (Qwen2-MoE)
    # DeepSeek-V3's router (sigmoid scores, top-k within the best groups): n_group, topk_group
    expert_groups: PositiveInt | None = None  # None: a softmax router (Mixtral, Qwen)
    expert_groups_per_token: PositiveInt | None = None  # default with expert_groups: 1
    first_dense_layers: NonNegativeInt = 0  # DeepSeek's first_k_dense_replace
    # DeepSeek-V3's multi-token-prediction modules (num_nextn_predict_layers), each a projection
    # of [norm(embedding); norm(hidden)] (2h -> h), a layer like the last and a norm, sharing
    # the embedding and output head; on the last pipeline stage
    mtp_layers: NonNegativeInt = 0
    moe_every: PositiveInt = 1  # layer i is MoE when (i + 1) % moe_every == 0 (Qwen's step)
    dense_layers: tuple[NonNegativeInt, ...] = ()  # dense whatever the rules above say
    capacity_factor: Annotated[float, Field(ge=1, le=1000)] | None = None  # None: dropless
    # generic model: `parameters` and `layers`, optionally per-layer figures at the scenario's shape
    parameters: Count | None = None
    activation_bytes_per_layer: SizeOrZero | None = None  # 0 B: none kept (e.g. all recomputed)
    # generic model: forward FLOP a token costs in one layer (None: 2 x parameters / layers)
    forward_flops_per_token_per_layer: Annotated[float, Field(gt=0)] | None = None
    # dropout probabilities (None: the implementation's default, tiersim/state/activations.py);
    # from config.json where it has them (GPT-2 attn_pdrop / resid_pdrop, Llama attention_dropout)
    attention_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    hidden_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None  # residual dropout
    # measured / predicted activations, from calibration (tiersim measure --calibrate)
    activation_factor: Annotated[float, Field(gt=0, le=1000)] = 1.0

    @model_validator(mode="after")
    def _complete(self) -> ModelSpec:
        if self.parameters is not None:
            if self.layers is None:
                raise ValueError("a generic model with 'parameters' also needs 'layers'")
            return self
        generic_only = ("activation_bytes_per_layer", "forward_flops_per_token_per_layer")
        given = [k for k in generic_only if getattr(self, k) is not None]
        if given:  # a transformer counts its own: these would be ignored without a word
            raise ValueError(
                f"{' and '.join(given)} given without 'parameters' (expected them only for a "
                "generic model, beside model.parameters and model.layers; a transformer's "
                "activations and FLOPs are counted from its dimensions)"
            )
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
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({kv}){_KV}")
        if self.position == "learned" and self.max_positions is None:
            raise ValueError(
                "learned position embeddings (model.position: learned, the default) need "
                "'max_positions', the rows of their table (expected model.max_positions, e.g. "
                "2048, or model.position: rope or none, which have no table)"
            )
        check_layer_variants(self)
        return self


# --- training ----------------------------------------------------------------------------------


class Precision(Strict):
    """The number format each per-parameter class is stored in (bytes per parameter)."""

    weights: PrecisionName = "bf16"  # the weights as stored (bf16: 2 bytes a parameter)
    gradients: PrecisionName = "bf16"  # as reduced (fsdp: its reduce_dtype; held as the weights)
    # the master copy of the weights (fp32: 4 B a parameter); none: updates go to the weights
    master: PrecisionName | Literal["none"] = "fp32"
    optimizer: PrecisionName = "fp32"  # each optimizer state (Adam: 2 of them a parameter)
    # the copy the layers compute with (all-gathered, kept while a unit runs; activations are
    # in it); None: the weights' precision. FSDP2 mixed precision: weights fp32 (the sharded
    # master), master none, compute bf16. DeepSpeed: weights bf16 + master fp32. Not fp8:
    # FP8 training is training.fp8 (docs/fp8.md)
    compute: PrecisionName | None = None

    @property
    def compute_precision(self) -> str:
        return self.compute or self.weights


FRAMEWORKS = ("deepspeed", "fsdp", "megatron")


class Offload(Strict):
    """How the framework's offload engine moves state (`training.offload`). Every key left out
    (null) takes the default of `training.framework` (tiersim/config/framework.py); without a
    framework, tiersim's generic engine (a whole layer at a time, nothing of the below)."""

    # fetch unit of sharded or offloaded weights: a layer (FSDP2's fully_shard per block, Megatron),
    # each submodule (DeepSpeed ZeRO-3; the 2 keys below), the model (FSDP2's root alone: NO_WRAP)
    fetch: Literal["layer", "submodule", "model"] | None = None
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
    # DeepSpeed's overlap_comm (default: on with ZeRO-3, off with ZeRO-1/2): off, ZeRO-1/2's
    # gradient copies to and from the host run on the compute stream, so backward waits
    overlap_comm: bool | None = None
    # elements per reduce bucket (DeepSpeed's; null: 5e8), its rule by training.deepspeed.version
    reduce_bucket_size: Count | None = None


RecomputeModule = Literal[
    "core_attn", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj", "layernorm"
]


class Training(Strict):
    """How one training step runs: batch, sequence, optimizer, precision, recompute, framework."""

    micro_batch_size: PositiveInt = 1  # sequences per micro-batch on each data-parallel rank
    grad_accumulation: PositiveInt = 1  # micro-batches per optimizer step on each rank
    # sequences per optimizer step over the whole job (DESIGN.md third round); given, the
    # loader derives grad_accumulation = global / (micro_batch_size x parallel.data)
    # (tiersim/config/batch.py), refusing one that does not divide or disagrees
    global_batch_size: PositiveInt | None = None
    # a training plan's targets (the report's `target` section): tokens a day, tokens in all
    tokens_per_day: Count | None = None
    total_tokens: Count | None = None  # tokens the whole run trains on (null: no target)
    seq_len: PositiveInt | None = None  # default: the model's max_positions, else 2048
    # the update rule: its states per parameter (adamw: 2) and the update's bytes per parameter
    optimizer: Literal[OPTIMIZER_NAMES] = OPTIMIZER_DEFAULT  # type: ignore[valid-type]
    precision: Precision = Precision()
    # selective_op: torchtitan's op-level selective checkpointing (state/op_recompute.py)
    recompute: Literal["none", "selective", "full", "selective_op"] = "none"
    # with recompute: selective, Megatron-Core's modules to recompute (--recompute-modules;
    # None: core_attn, the attention scores, Korthikanti et al.'s selective recompute)
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    # with recompute: full, only every N-th layer of a rank is checkpointed, the others keep
    # all they save (torchtitan's selective_ac_option N; state/layer_sac.py); None: every layer
    recompute_every: PositiveInt | None = None
    workspace: SizeOrZero | None = None  # held kernel workspaces; null: the stack's (sourced)
    # synchronous: the update waits for every gradient and the next step for the whole update
    # (DeepSpeed, FSDP, Megatron); pipelined: unit by unit, into the next step's forward
    # delayed: ZeRO-Offload's delayed parameter update (DPU): step k's CPU update overlaps step
    # k+1's forward and backward, which use the weights of step k-1 (one step stale)
    optimizer_step: Literal["synchronous", "pipelined", "delayed"] = "synchronous"
    # the parallel/offload engine: how it moves state (DESIGN.md Extensions); null: generic
    framework: Literal["deepspeed", "fsdp", "megatron"] | None = None
    # Megatron's --make-vocab-size-divisible-by: the vocabulary padded to a multiple of it x
    # parallel.tensor; null: the framework's (megatron 128, others none; config/vocab_padding.py)
    make_vocab_size_divisible_by: PositiveInt | None = None
    # under framework megatron, the ZeRO-1 optimizer sharding the state: Megatron-Core's (null,
    # megatron) or apex's DistributedFusedAdam as NeMo 1.x runs it (distributed_optimizer.py)
    distributed_optimizer: Literal["megatron", "apex"] | None = None
    apex: ApexOptim = ApexOptim()  # apex's bucket_cap_mb and contiguous_param_buffer
    deepspeed: DeepSpeed = DeepSpeed()  # DeepSpeed's release and ZeRO settings (deepspeed.py)
    offload: Offload = Offload()
    deepspeed: DeepSpeed = DeepSpeed()  # DeepSpeed's stage3_* keys (config/deepspeed.py)
    # the modelling code, which decides what each op keeps for backward (state/activations.py)
    implementation: Literal["megatron", "huggingface", "torchtitan"] = "megatron"
    # None: the implementation's default (megatron: eager, Korthikanti et al.'s stored scores;
    # huggingface: sdpa, transformers' default attn_implementation)
    attention_kernel: Literal["eager", "sdpa", "flash"] | None = None
    # true: Megatron-LM's fused elementwise kernels (bias-GeLU, bias-dropout-add, scale-mask-
    # softmax); false: the separate PyTorch ops of Megatron-LM v1's GPT-2 (DeepSpeedExamples'
    # Megatron-LM, which ZeRO-Offload ran): more bytes per element (workload/kernels.py)
    fused_kernels: bool = True
    fp8: Fp8 | None = None  # FP8 linear layers (config/fp8.py; null: none)
    # Megatron-Core's cross-entropy (--cross-entropy-loss-fusion, --cross-entropy-fusion-impl):
    # none and native keep the fp32 softmax; te keeps the logits alone (state/step_memory.py)
    loss_fusion: Literal["none", "native", "te"] = "none"
    # torchtitan's ChunkedLossWrapper: head and loss run, forward and backward, on 1/N of the
    # tokens at a time inside the forward; null: torchtitan 8 (its default), others 1
    loss_chunks: PositiveInt | None = None
    # `attention_kernel: flash` as FlashAttention-2, -3 or cuDNN's (TE's), null: -2 (kernel table)
    flash_kernel: Literal["flash2", "flash3", "cudnn"] | None = None
    # huggingface's or torchtitan's elementwise ops compiled (true) or eager (workload/eager.py)
    compile: bool | None = None


class ExpertPlacement(Strict):
    """A mixture-of-experts model's routed experts' own home tier of each per-parameter class
    (their weights, gradients, master copy, optimizer state); unset: the dense state's."""

    weights: str | None = None  # the experts' weights' home tier
    gradients: str | None = None  # the experts' gradients' home tier
    master: str | None = None  # the experts' master weights' home tier
    optimizer: str | None = None  # the experts' optimizer states' home tier


class Placement(Strict):
    """The home tier of each class of state (a name under hardware.tiers) and where the
    optimizer runs."""

    weights: str = "hbm"  # home tier of the weights (hbm: GPU memory, nothing offloaded)
    gradients: str = "hbm"  # home tier of the gradients
    master: str = "hbm"  # home tier of the fp32 master weights
    optimizer: str = "hbm"  # home tier of the optimizer states
    # home tier of the activations saved for backward (another tier: offloaded in between)
    activations: str = "hbm"
    # gpu: the update runs on the GPU (offloaded state fetched to it); cpu: on the host
    # (ZeRO-Offload), gradients sent down and updated weights sent back
    optimizer_compute: Literal["gpu", "cpu"] = "gpu"
    experts: ExpertPlacement = ExpertPlacement()


# --- simulation, checkpoint, failures, budget --------------------------------------------------


class Simulation(Strict):
    """How the simulator runs (no property of the hardware or the model)."""

    # bytes a transfer over several hops is pipelined in: the first chunk's fill of the later
    # hops is added to its time (default 64 MiB)
    chunk_size: Size = 64 * 2**20
    # uses ahead a fetch (a tier read, an all-gather) may be issued, FSDP2's gathered layers too
    # (n > 1: its explicit prefetch); None: the framework's (FSDP2: 1; else 2, config/framework.py)
    prefetch_depth: PositiveInt | None = None
    # chunks a multi-hop transfer holds in each tier it passes through (staging buffers)
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
    """Durable checkpoints of weights, master and optimizer state (analysis/checkpoint.py)."""

    # steps between checkpoints; auto: Daly's optimum for the failure rate (never shorter than
    # the drain); null: no checkpoint
    every_steps: PositiveInt | Literal["auto"] | None = None
    target: str = "nvme"  # the tier written to: any tier but GPU memory (dram: in-memory)
    # blocking: training waits for the whole write; async: only for the snapshot to staging,
    # the drain to the target overlapping the next steps
    mode: Literal["blocking", "async"] = "blocking"
    # seconds a restart after a failure costs before reading the checkpoint back (default 5 min)
    restart: Wait = 300.0
    staging: str = "dram"  # the tier an async snapshot is copied to before it drains


class Failures(Strict):
    """How often the job fails, for the checkpoint interval and goodput."""

    mtbf: Duration | None = None  # the whole job's mean time between failures (null: none)
    gpu_mtbf: Duration | None = None  # one GPU's; the job's is gpu_mtbf / gpus
    gpus: PositiveInt | None = None  # GPUs failing independently (null: the job's GPUs)


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
