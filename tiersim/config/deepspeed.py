"""`training.deepspeed`: facts of the DeepSpeed a run uses, read only under
`training.framework: deepspeed` (set under another framework: a W-NO-EFFECT note).

`version`: the DeepSpeed release, `latest` (the default: the source tiersim read,
deepspeedai/DeepSpeed's stage_1_and_2.py at 02aa38c3, stage3.py at 007cca6a, zero/config.py
at 1b88ac36) or a release number MAJOR.MINOR.PATCH. It decides how ZeRO-1/2's gradient
reduce bucket is counted, whether `training.offload.reduce_bucket_size` is given or left out
(DeepSpeed's default 5e8 elements then):
- before 0.3.17 (DeepSpeed v0.3's stage2.py, what ZeRO-Offload ran; microsoft/DeepSpeed
  stage2.py at 00c3a254, `backward()`): `torch.empty(int(reduce_bucket_size * 4.5),
  dtype=torch.half)`, a second with overlap_comm, in the `workspace` class all step, each
  reduce dividing the whole buffer (state/buffers.py, workload/reduce_buckets.py);
- from 0.3.17 (deepspeedai/DeepSpeed PR #1042, "ZeRO stage 1 refresh", merged 2021-05-05:
  "Memory overhead bug fix ... inflating the bucket size (x4.5)"; stage2.py's checkpoint
  loader names 0.3.17 as the release ZeRO-1 changed in, microsoft/DeepSpeed 5336cd0f, whose
  `backward()` allocates `torch.empty(int(self.reduce_bucket_size), dtype=self.dtype)`):
  the bucket in the weights' dtype, a timeline part of its own from the backward's first
  gradient to its end, each reduce dividing what the bucket holds
  (state/deepspeed_buckets.py). tiersim tells releases apart at this boundary only.

`reduce_scatter`: DeepSpeed's `zero_optimization.reduce_scatter` (zero/config.py: true).
false: ZeRO-1/2's `average_tensor` and ZeRO-3's `__avg_scatter_contiguous_grads` all-reduce
each gradient bucket whole (workload/data_parallel.py), which Muon needs (DeepSpeed refuses
Muon with it true: config/optimizer_notes.py; Muon's step with it false:
state/deepspeed_muon.py).

The four `stage3_*` keys: DeepSpeed's own `zero_optimization` keys, named as its config
names them, read where `training.framework: deepspeed` runs ZeRO-3. Left out, DeepSpeed's defaults
(deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig, commit 1b88ac36:
`prefetch_bucket_size ... pp_int(5e7) ... alias="stage3_prefetch_bucket_size"`,
`param_persistence_threshold ... pp_int(1e5)`, `max_live_parameters ... pp_int(1e9)`,
`max_reuse_distance ... pp_int(1e9)`, each `ge=0`). What they do to the GPU's memory
timeline: state/zero3_prefetch.py and docs/zero3-prefetch.md.

`training.offload.prefetch_bucket_size` and `training.offload.max_live_parameters` are the
first two under their older tiersim names; either spelling is read, and both given with
different values is refused (`deepspeed_key_problems`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from tiersim.config.fields import CountOrZero, NonNegativeInt, Strict, plain_fields
from tiersim.core.errors import Problem
from tiersim.state.optimizers import optimizer

LATEST = "latest"
PREFETCH_BUCKET_SIZE = 50_000_000  # stage3_prefetch_bucket_size: 5e7 elements
MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters: 1e9
MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance: 1e9
PARAM_PERSISTENCE_THRESHOLD = 100_000  # stage3_param_persistence_threshold: 1e5
# elements: DeepSpeed's reduce_bucket_size where the key is left out, in every release
# (zero/config.py `pp_int(5e8)`, commit 1b88ac36; v0.3's stage2.py `reduce_bucket_size=500000000`)
DEFAULT_REDUCE_BUCKET = 500_000_000
# the first release whose ZeRO-1/2 reduce bucket is `reduce_bucket_size` elements of the
# weights' dtype (PR #1042), not v0.3's 4.5 x in fp16
BUCKET_RULE_CHANGED = (0, 3, 17)
EXPECTED = "a DeepSpeed release as text, MAJOR.MINOR.PATCH such as '0.3.16' or '0.16.4', or latest"


def reduce_bucket(given: int | None) -> int:
    """Elements of the reduce bucket DeepSpeed runs: `training.offload.reduce_bucket_size`,
    else its default."""
    return DEFAULT_REDUCE_BUCKET if given is None else given


def release(version: str) -> tuple[int, ...] | None:
    """(major, minor, patch) of a validated version; None for `latest`."""
    return None if version == LATEST else tuple(int(part) for part in version.split("."))


def _release_text(value: object) -> object:
    """A version as YAML gives it: text of three whole numbers, or `latest` (0.3 or 1 would
    arrive as numbers and lose their parts: refused with what to write)."""
    if not isinstance(value, str):
        raise ValueError(f"expected {EXPECTED} (got {value!r}: write it in quotes)")
    text = value.strip()
    parts = text.split(".")
    if text != LATEST and (len(parts) != 3 or not all(p.isdigit() and len(p) < 6 for p in parts)):
        raise ValueError(f"expected {EXPECTED} (got {value!r})")
    return text if text == LATEST else ".".join(str(int(p)) for p in parts)


DeepSpeedVersion = Annotated[str, BeforeValidator(_release_text)]


class DeepSpeed(Strict):
    """`training.deepspeed`: the DeepSpeed release and ZeRO settings that decide what one GPU
    holds and sends (read only under `training.framework: deepspeed`; sizes in elements, 0
    DeepSpeed's "off")."""

    # the DeepSpeed release: latest (the source tiersim read) or MAJOR.MINOR.PATCH; before
    # 0.3.17 ZeRO-1/2's reduce bucket is v0.3's 4.5 x in fp16 (module docstring)
    version: DeepSpeedVersion = LATEST
    # zero_optimization.reduce_scatter: false all-reduces each gradient bucket whole (Muon
    # runs under ZeRO only so); true: DeepSpeed's default
    reduce_scatter: bool = True
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
    # ZeRO++ (config/zeropp.py, docs/zero-plus-plus.md), DeepSpeed's zero_optimization keys,
    # read at ZeRO-3: hpZ's secondary weight partition over this many consecutive ranks
    # (1: off, DeepSpeed's default; zero/config.py `Field(1, ge=0)`, 0 also off)
    zero_hpz_partition_size: NonNegativeInt = 1
    # qwZ: the weights' all-gathers in int8 with fp32 scales (false: DeepSpeed's default)
    zero_quantized_weights: bool = False
    # qgZ: the gradients reduced by int4 all-to-alls within and across nodes (false: default)
    zero_quantized_gradients: bool = False

    @property
    def v03_bucket(self) -> bool:
        """ZeRO-1/2's reduce bucket by v0.3's rule (4.5 x in fp16, all step, whole-buffer
        divisions): a release before 0.3.17."""
        number = release(self.version)
        return number is not None and number < BUCKET_RULE_CHANGED


# training.offload's older names for the same settings
OFFLOAD_ALIASES = {
    "stage3_prefetch_bucket_size": "prefetch_bucket_size",
    "stage3_max_live_parameters": "max_live_parameters",
}


def alias_path(path: str) -> str | None:
    """The other spelling's key path of a setting with two names (None: a key with one)."""
    for key, alias in OFFLOAD_ALIASES.items():
        pair = (f"training.deepspeed.{key}", f"training.offload.{alias}")
        if path in pair:
            return pair[1 - pair.index(path)]
    return None


def deepspeed_settings(training) -> dict[str, int | None]:
    """The four stage3_* settings as given (None: left out), either spelling of the first two."""
    # read by their fields: both sections are flat (tests/test_fixed_once.py, READ_PLAIN)
    given = {k: v for k, v in plain_fields(training.deepspeed).items() if k.startswith("stage3_")}
    offload = plain_fields(training.offload)
    for key, alias in OFFLOAD_ALIASES.items():
        if given[key] is None:
            given[key] = offload[alias]
    return given


def deepspeed_key_problems(s) -> list[Problem]:
    """A setting given under both its names with different values."""
    given, offload = plain_fields(s.training.deepspeed), plain_fields(s.training.offload)
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


# DeepSpeed's own words where it refuses Muon with reduce_scatter true (module docstring)
MUON_REFUSAL = {
    1: 'stage_1_and_2.py asserts "ZeRO-1 with reduce_scatter=True is incompatible with Muon '
    'optimizer"',
    2: 'stage_1_and_2.py asserts "ZeRO-2 with reduce_scatter=True is incompatible with Muon '
    'optimizer"',
    3: 'stage3.py raises ValueError("Muon and reduce scatter cannot be used together")',
}


def muon_reduce_scatter_problems(s) -> list[Problem]:
    """Muon under DeepSpeed ZeRO with `reduce_scatter` true (DeepSpeed's default): DeepSpeed
    refuses it when the engine is built (stage_1_and_2.py `__init__`, 02aa38c3; stage3.py
    `__init__`, 007cca6a), whatever the optimizer's placement, so the run never starts;
    refused as DeepSpeed's pipeline engine's ZeRO-2/3 refusal is (config/layout_checks.py)."""
    tr, stage = s.training, s.parallel.zero_stage
    whole = optimizer(tr.optimizer).deepspeed_whole_matrices
    if tr.framework != "deepspeed" or not whole or stage == 0:
        return []
    if not tr.deepspeed.reduce_scatter:
        return []
    why = (
        f"is true (DeepSpeed's default) with training.optimizer muon under ZeRO-{stage}, which "
        f"DeepSpeed refuses ({MUON_REFUSAL[stage]}); expected training.deepspeed."
        "reduce_scatter: false (every gradient bucket all-reduced whole, as DeepSpeed runs Muon: "
        "docs/deepspeed-buckets.md), another optimizer, or parallel.zero_stage: 0"
    )
    return [Problem("training.deepspeed.reduce_scatter", why, "E-CONFLICT")]


def zero3_fetch_notes(s) -> list[Problem]:
    """The stage3_* keys given under DeepSpeed where no ZeRO-3 fetch reads them (a note): weights
    neither sharded (ZeRO-3) nor offloaded, so never gathered. Under another framework the
    whole section's note says so (config/deepspeed_notes.py)."""
    tr, par = s.training, s.parallel
    fetched = (
        par.zero_stage == 3 or par.shard.weights or s.placement.weights != s.hardware.gpu.memory
    )
    if tr.framework != "deepspeed" or fetched:
        return []
    where = f"parallel.zero_stage is {par.zero_stage} with the weights in GPU memory"
    return [
        Problem(
            f"training.deepspeed.{key}",
            f"{value:,} has no effect: a DeepSpeed ZeRO-3 setting (expected training.framework: "
            f"deepspeed with parallel.zero_stage: 3), and {where}",
            "W-NO-EFFECT",
        )
        for key, value in tr.deepspeed.model_dump().items()
        if key.startswith("stage3_") and value is not None
    ]


def stage0_offload_problems(s) -> list[Problem]:
    """The optimizer on the CPU (DeepSpeed's `offload_optimizer`) at ZeRO stage 0: DeepSpeed
    runs that offload in its ZeRO optimizers only (deepspeed/runtime/zero/config.py at
    cbf3d661: "Valid for ZeRO stage 1, 2, 3"). At stage 0 engine.py (007cca6a,
    `_configure_basic_optimizer`) still builds DeepSpeedCPUAdam, `zero_use_cpu_optimizer()`
    being true, but over the parameters where they are, on the GPU, and no ZeRO optimizer
    moves a copy to the host (`_do_optimizer_sanity_check`: no ZERO_OPTIMIZATION below stage
    1), so the first step stops at its assertion (deepspeed/ops/adam/cpu_adam.py at a9a61885,
    `step`). ZeRO-Offload is built on ZeRO-2 (Ren et al. 2021, §4)."""
    if s.training.framework != "deepspeed" or s.parallel.zero_stage != 0:
        return []
    if s.placement.optimizer_compute != "cpu":
        return []
    why = (
        "is cpu (DeepSpeed's offload_optimizer) with parallel.zero_stage 0, where DeepSpeed "
        'builds no ZeRO optimizer to run it (zero/config.py: offload_optimizer "Valid for ZeRO '
        'stage 1, 2, 3"; its CPU Adam, given the GPU\'s parameters, asserts "CPUAdam param is '
        "on cuda:0 and must be 'cpu'\" at the first step); expected parallel.zero_stage 1, 2 "
        "(ZeRO-Offload's) or 3, or placement.optimizer_compute: gpu"
    )
    return [Problem("placement.optimizer_compute", why, "E-CONFLICT")]
