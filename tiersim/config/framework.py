"""What `training.framework` implies for how state moves: each `training.offload` key left out
takes its framework's default here, once, into a resolved, frozen plan.

Defaults and where they come from:
- deepspeed (ZeRO-3 / ZeRO-Offload / ZeRO-Infinity; deepspeed/runtime/zero/config.py and
  offload_config.py): parameters gathered per submodule (stage3/partition_parameters.py
  registers a fetch hook on every module with parameters of its own), prefetched up to
  stage3_prefetch_bucket_size = 5e7 parameters, at most stage3_max_live_parameters = 1e9
  live; the CPU optimizer reads fp32 gradients (stage_1_and_2.py
  async_inplace_copy_grad_to_fp32_buffer_from_gpu: `.float()` on the GPU, then the copy),
  swapped through NVMe with the optimizer state when that is on NVMe
  (swap_tensor/partitioned_optimizer_swapper.py swaps the fp32 gradients in and out with each
  sub-group); the optimizer runs sub_group_size = 1e9 parameters at a time through
  buffer_count = 4 pinned swap buffers, pipeline_read and pipeline_write off, pin_memory off;
  memory-centric tiling (ZeRO-Infinity's TiledLinear) where an operator does not fit;
  overlap_comm on with ZeRO-3 and off with ZeRO-1/2 (zero/config.py overlap_comm_valid), and
  off, ZeRO-1/2's CPU-offload gradient copies run on the compute stream (stage_1_and_2.py
  reduce_ipg_grads: `elif self.cpu_offload: stream = current_stream()`).
- fsdp (FSDP2, torch.distributed.fsdp.fully_shard): one fetch per fully_shard unit (a
  transformer block), gradients reduce-scattered in the compute precision and offloaded as
  the shard's dtype, accumulated on the host (engine/schedule_offload.py),
  CPUOffloadPolicy(pin_memory=True): every sharded parameter and gradient on the host is its
  own pinned tensor; no tiling, no swapping; one all-gather ahead (simulation.prefetch_depth
  1: forward's implicit and backward's default explicit prefetch).
- megatron and no framework: tiersim's generic engine (a layer at a time, gradients as stored,
  the update within `simulation.prefetch_depth` units); nothing pinned counted. Megatron with
  any offload is refused (config/consistency.py): its own CPU offload is not modelled.
"""

from __future__ import annotations

from tiersim.config.deepspeed import (
    MAX_LIVE_PARAMETERS,
    MAX_REUSE_DISTANCE,
    PARAM_PERSISTENCE_THRESHOLD,
    PREFETCH_BUCKET_SIZE,
    deepspeed_settings,
    zero3_fetch_notes,
)
from tiersim.config.fields import plain_fields
from tiersim.config.schema import Scenario
from tiersim.config.zeropp import zeropp_notes
from tiersim.core.errors import Problem
from tiersim.core.records import record


@record
class OffloadPlan:
    framework: str  # "deepspeed" | "fsdp" | "megatron" | "generic"
    fetch: str  # "layer" | "submodule"
    prefetch_bucket_size: int | None  # parameters
    max_live_parameters: int | None
    tiling: bool
    boundary_gradients: str  # "fp32" | "stored"
    swap_gradients: bool
    sub_group_size: int | None
    pipeline_read: bool
    pipeline_write: bool
    buffer_count: int
    pin_memory: bool
    pinned_per_tensor: bool  # FSDP2 pins each sharded tensor; DeepSpeed one flat buffer
    overlap_comm: bool  # gradient copies beside backward, else on its stream (DeepSpeed)
    reduce_bucket_size: int | None = None  # elements; None: the whole-buffer division not charged
    # DeepSpeed ZeRO-3's stage3_max_reuse_distance and stage3_param_persistence_threshold
    # (elements; training.deepspeed, state/zero3_prefetch.py); None: not DeepSpeed's fetch
    max_reuse_distance: int | None = None
    param_persistence_threshold: int | None = None

    @property
    def cpu_path_in_parts(self) -> bool:
        """The CPU optimizer's time as DeepSpeed's path in parts (kernel + host passes)."""
        return self.framework == "deepspeed"


# DeepSpeed's parameter swapper (offload_param): buffer_count 5 x buffer_size 1e8 elements
DEEPSPEED_PARAM_BUFFERS = 5
DEEPSPEED_PARAM_BUFFER_ELEMENTS = 100_000_000

_DEFAULTS = {
    "generic": dict(
        fetch="layer",
        prefetch_bucket_size=None,
        max_live_parameters=None,
        tiling=False,
        boundary_gradients="stored",
        swap_gradients=False,
        sub_group_size=None,
        pipeline_read=True,
        pipeline_write=True,
        buffer_count=0,
        pin_memory=False,
        max_reuse_distance=None,
        param_persistence_threshold=None,
    ),
    "deepspeed": dict(
        fetch="submodule",
        prefetch_bucket_size=PREFETCH_BUCKET_SIZE,
        max_live_parameters=MAX_LIVE_PARAMETERS,
        max_reuse_distance=MAX_REUSE_DISTANCE,
        param_persistence_threshold=PARAM_PERSISTENCE_THRESHOLD,
        tiling=True,
        boundary_gradients="fp32",
        swap_gradients=True,
        sub_group_size=1_000_000_000,
        pipeline_read=False,
        pipeline_write=False,
        buffer_count=4,
        pin_memory=False,
    ),
}
_DEFAULTS["megatron"] = _DEFAULTS["generic"]
# FSDP offloads as the generic path does, from pinned host memory (CPUOffload pins its tensors)
_DEFAULTS["fsdp"] = {**_DEFAULTS["generic"], "pin_memory": True}


# FSDP2 (torch distributed/fsdp/_fully_shard): one all-gather ahead of the module in use: in
# forward its implicit prefetch (the next module's all-gather issued while this one computes,
# FSDPParamGroup.unshard waiting on the previous all-gather's result before issuing another),
# in backward its default explicit prefetch of the next module. tiersim's generic engine
# (and DeepSpeed's per-submodule fetch, bounded by its own bucket): 2.
PREFETCH_DEPTH = {"fsdp": 1}
GENERIC_PREFETCH_DEPTH = 2


def default_prefetch_depth(framework: str | None) -> int:
    """Uses ahead a fetch is issued where `simulation.prefetch_depth` is left out."""
    return PREFETCH_DEPTH.get(framework or "generic", GENERIC_PREFETCH_DEPTH)


def resolved_prefetch_depth(s: Scenario) -> int:
    """`simulation.prefetch_depth`, or its framework's default where left out."""
    given = s.simulation.prefetch_depth
    return given if given is not None else default_prefetch_depth(s.training.framework)


def _deepspeed_given(s: Scenario) -> dict:
    """training.deepspeed's four settings (either spelling) under the plan's names."""
    ds = deepspeed_settings(s.training)
    return {
        "prefetch_bucket_size": ds["stage3_prefetch_bucket_size"],
        "max_live_parameters": ds["stage3_max_live_parameters"],
        "max_reuse_distance": ds["stage3_max_reuse_distance"],
        "param_persistence_threshold": ds["stage3_param_persistence_threshold"],
    }


def whole_model_unit(s: Scenario) -> bool:
    """`training.offload.fetch: model` in force: FSDP2's one unit over the whole model
    (fully_shard on the root alone, Accelerate's NO_WRAP; state/fsdp2_memory.py), under
    `framework: fsdp` on one pipeline stage."""
    fsdp = s.training.framework == "fsdp" and s.parallel.pipeline == 1
    return fsdp and s.training.offload.fetch == "model"


WHOLE_MODEL_ONLY = (
    "model has no effect: FSDP2's one unit over the whole model is modelled under "
    "training.framework: fsdp on one pipeline stage; parameters are fetched a layer at a time"
)


def offload_plan(s: Scenario) -> OffloadPlan:
    """The scenario's offload behaviour: its keys where given, its framework's defaults else."""
    framework = s.training.framework or "generic"
    given = plain_fields(s.training.offload) | _deepspeed_given(s)  # a flat section
    chosen = {k: (given[k] if given[k] is not None else v) for k, v in _DEFAULTS[framework].items()}
    if chosen["fetch"] == "model" and not whole_model_unit(s):  # FSDP2's alone: WHOLE_MODEL_ONLY
        chosen["fetch"] = "layer"
    overlap = given["overlap_comm"]
    if overlap is None:  # DeepSpeed's rule (zero/config.py overlap_comm_valid): on at stage 3
        overlap = framework != "deepspeed" or s.parallel.zero_stage == 3
    return OffloadPlan(
        framework=framework,
        pinned_per_tensor=framework == "fsdp",
        overlap_comm=overlap,
        reduce_bucket_size=given["reduce_bucket_size"],
        **chosen,
    )


# training.offload keys only DeepSpeed's engine reads (engine/schedule_optimizer.py,
# engine/schedule_offload.py, workload/pinned.py, state/buffers.py check the framework), with
# what each sets there. No key is FSDP2's alone: the others apply under either engine.
DEEPSPEED_ONLY = {
    "sub_group_size": "the CPU optimizer's ZeRO-3 sub-groups",
    "buffer_count": "the pinned swap buffers of optimizer state on NVMe",
    "overlap_comm": "whether ZeRO-1/2's gradient copies run on the compute stream",
    "reduce_bucket_size": "ZeRO's gradient reduce bucket: its buffer and its division",
}
# read only where parameters are fetched per submodule (workload/fetch.py)
SUBMODULE_FETCH = {
    "prefetch_bucket_size": "how many parameters a submodule prefetch gathers",
    "max_live_parameters": "how many fetched parameters may be live at once",
}
_ENGINES = {"fsdp": "fsdp (FSDP2's engine)", "generic": "not set (tiersim's generic engine)"}
_LAYER_DEFAULT = {"fsdp": "FSDP2's default", "generic": "the generic engine's default"}


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:,}" if isinstance(value, int) else str(value)


# ZeRO-3 with overlap_comm off: DeepSpeed's stage3.py puts its reduce-and-partition work on the
# default stream (`reduce_and_partition_stream = ... Stream() if overlap_comm else
# default_stream()`), so backward waits for every bucket's reduce-scatter and, with the
# optimizer offloaded, each gradient partition's copy to the host (partition_grads, inside
# that stream). tiersim runs ZeRO-3's copies beside backward whatever the key says.
ZERO3_OVERLAP_OFF = (
    "false has no effect at ZeRO-3: tiersim runs ZeRO-3's gradient reduce-scatters (and "
    "any copies to the host) beside backward, as DeepSpeed does with it on (off, DeepSpeed's "
    "stage3.py runs them on the compute stream, which is not modelled; "
    "parallel.overlap_gradient_reduce: false makes backward wait for each reduce-scatter, "
    "not for the copies)"
)


def overlap_comm_in_force(s: Scenario) -> bool | None:
    """DeepSpeed's overlap_comm as the run applied it; None where nothing reads it: another
    framework, or off at ZeRO-3 (ZERO3_OVERLAP_OFF)."""
    plan = offload_plan(s)
    if plan.framework != "deepspeed" or (s.parallel.zero_stage == 3 and not plan.overlap_comm):
        return None
    return plan.overlap_comm


def offload_notes(s: Scenario) -> list[Problem]:
    """The `training.offload` keys the scenario gives that its framework does not read, and
    DeepSpeed's overlap_comm off at ZeRO-3, which tiersim does not model (a valid scenario:
    notes, not problems; megatron refuses every key instead)."""
    plan, given = offload_plan(s), s.training.offload.model_dump()
    notes = []
    for key, value in given.items():
        if value is None:
            continue
        if key in DEEPSPEED_ONLY and plan.framework != "deepspeed":
            why = (
                f"{_shown(value)} has no effect: a DeepSpeed setting ({DEEPSPEED_ONLY[key]}), "
                f"and training.framework is {_ENGINES.get(plan.framework, plan.framework)}"
            )
            notes.append(Problem(f"training.offload.{key}", why, "W-NO-EFFECT"))
        elif key in SUBMODULE_FETCH and plan.fetch != "submodule":
            default = _LAYER_DEFAULT.get(plan.framework, "its default")
            fetch = plan.fetch if given["fetch"] else f"layer, {default}"
            unit = "the whole model at once" if plan.fetch == "model" else "a layer at a time"
            why = (
                f"{_shown(value)} has no effect: a submodule fetch's setting "
                f"({SUBMODULE_FETCH[key]}), and parameters are fetched {unit} "
                f"(training.offload.fetch: {fetch})"
            )
            notes.append(Problem(f"training.offload.{key}", why, "W-NO-EFFECT"))
        elif key == "fetch" and value == "model" and not whole_model_unit(s):
            notes.append(Problem(f"training.offload.{key}", WHOLE_MODEL_ONLY, "W-NO-EFFECT"))
        elif key == "overlap_comm" and overlap_comm_in_force(s) is None:  # off at ZeRO-3
            notes.append(Problem(f"training.offload.{key}", ZERO3_OVERLAP_OFF, "W-NO-EFFECT"))
    return notes + zero3_fetch_notes(s) + zeropp_notes(s)
