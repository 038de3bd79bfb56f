"""`training.deepspeed`: DeepSpeed's own `zero_optimization` keys, named as its config names
them, read where `training.framework: deepspeed` runs ZeRO-3. Left out, DeepSpeed's defaults
(deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig, commit 1b88ac36:
`prefetch_bucket_size ... pp_int(5e7) ... alias="stage3_prefetch_bucket_size"`,
`param_persistence_threshold ... pp_int(1e5)`, `max_live_parameters ... pp_int(1e9)`,
`max_reuse_distance ... pp_int(1e9)`, each `ge=0`). What they do to the GPU's memory
timeline: state/zero3_prefetch.py and docs/zero3-prefetch.md.

`training.offload.prefetch_bucket_size` and `training.offload.max_live_parameters` are the
first two under their older tiersim names; either spelling is read, and both given with
different values is refused (`deepspeed_key_problems`)."""

from __future__ import annotations

from tiersim.config.fields import CountOrZero, Strict
from tiersim.core.errors import Problem

PREFETCH_BUCKET_SIZE = 50_000_000  # stage3_prefetch_bucket_size: 5e7 elements
MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters: 1e9
MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance: 1e9
PARAM_PERSISTENCE_THRESHOLD = 100_000  # stage3_param_persistence_threshold: 1e5


class DeepSpeed(Strict):
    """DeepSpeed ZeRO-3's parameter-fetch settings (elements; 0 is DeepSpeed's "off")."""

    # elements gathered ahead of use at each submodule's fetch, in the recorded trace's order
    # (null: DeepSpeed's 5e7; training.offload.prefetch_bucket_size is the same setting)
    stage3_prefetch_bucket_size: CountOrZero | None = None
    # the most gathered elements a prefetch may bring the GPU to (the current fetch aside;
    # null: 1e9; training.offload.max_live_parameters is the same setting)
    stage3_max_live_parameters: CountOrZero | None = None
    # a parameter used again within this many elements of the trace is not released (null: 1e9)
    stage3_max_reuse_distance: CountOrZero | None = None
    # parameters of at most this many elements stay gathered all step, norms and biases
    # (null: 1e5)
    stage3_param_persistence_threshold: CountOrZero | None = None


# training.offload's older names for the same settings
OFFLOAD_ALIASES = {
    "stage3_prefetch_bucket_size": "prefetch_bucket_size",
    "stage3_max_live_parameters": "max_live_parameters",
}


def deepspeed_settings(training) -> dict[str, int | None]:
    """The four settings as given (None: left out), either spelling of the first two."""
    given = training.deepspeed.model_dump()
    offload = training.offload.model_dump()
    for key, alias in OFFLOAD_ALIASES.items():
        if given[key] is None:
            given[key] = offload[alias]
    return given


def deepspeed_key_problems(s) -> list[Problem]:
    """A setting given under both its names with different values."""
    given, offload = s.training.deepspeed.model_dump(), s.training.offload.model_dump()
    problems = []
    for key, alias in OFFLOAD_ALIASES.items():
        if given[key] is not None and offload[alias] is not None and given[key] != offload[alias]:
            why = (
                f"is {given[key]:,}, but training.offload.{alias} (the same DeepSpeed setting "
                f"under its older name) is {offload[alias]:,}; expected one of the two, or "
                "both the same"
            )
            problems.append(Problem(f"training.deepspeed.{key}", why, "E-CONFLICT"))
    return problems


def deepspeed_notes(s) -> list[Problem]:
    """training.deepspeed keys given where no DeepSpeed ZeRO-3 fetch reads them (a note): another
    framework, or weights neither sharded (ZeRO-3) nor offloaded, so never gathered."""
    tr, par = s.training, s.parallel
    fetched = (
        par.zero_stage == 3 or par.shard.weights or s.placement.weights != s.hardware.gpu.memory
    )
    if tr.framework == "deepspeed" and fetched:
        return []
    where = (
        f"training.framework is {tr.framework or 'not set'}"
        if tr.framework != "deepspeed"
        else f"parallel.zero_stage is {par.zero_stage} with the weights in GPU memory"
    )
    return [
        Problem(
            f"training.deepspeed.{key}",
            f"{value:,} has no effect: a DeepSpeed ZeRO-3 setting (expected training.framework: "
            f"deepspeed with parallel.zero_stage: 3), and {where}",
            "W-NO-EFFECT",
        )
        for key, value in tr.deepspeed.model_dump().items()
        if value is not None
    ]
