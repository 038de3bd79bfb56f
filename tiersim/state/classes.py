"""The classes of training state: one table that every layer loops over.

A state class is a kind of bytes a GPU keeps for training: what it is, whether the scenario
places it (`placement.<name>`), which precision key sizes it (`training.precision.<key>`),
from which ZeRO stage data parallelism shards it, how often a step writes it (what wears a
flash tier) and whether a durable checkpoint copies it. Inventory, workload, schedule,
checkpoint, wear and reports read this table instead of spelling the names out.

Adding a class: a row here, its keys in config/schema.py (placement, precision, shard) and
its bytes in state/inventory.py (`_raw_bytes`). This module imports nothing of tiersim but the
optimizer registry (which imports nothing), so the scenario format (config/schema.py) can take
its names from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tiersim.state import optimizers as _optimizers


class Cadence(Enum):
    """How often a training step writes a class."""

    PER_MICRO_BATCH = "per micro-batch"
    PER_OPTIMIZER_STEP = "per optimizer step"
    NEVER = "never"


@dataclass(frozen=True)
class StateClass:
    name: str
    what: str  # in words, as reports say it
    placed: bool  # has a home tier of its own (`placement.<name>`); else GPU memory
    precision: str | None  # the `training.precision` key of its values, if per parameter
    zero_stage: int | None  # the lowest ZeRO stage that shards it; None: never sharded
    written: Cadence  # when a step writes it
    checkpointed: bool  # copied by a durable checkpoint
    compute: bool  # forward and backward read or write it in GPU memory

    @property
    def shardable(self) -> bool:
        return self.zero_stage is not None

    def sharded_at(self, zero_stage: int) -> bool:
        return self.zero_stage is not None and zero_stage >= self.zero_stage


WEIGHTS = StateClass(
    "weights", "weights", True, "weights", 3, Cadence.PER_OPTIMIZER_STEP, True, True
)
GRADIENTS = StateClass(
    "gradients", "gradients", True, "gradients", 2, Cadence.PER_MICRO_BATCH, False, True
)
MASTER = StateClass(
    "master", "master weights", True, "master", 1, Cadence.PER_OPTIMIZER_STEP, True, False
)
OPTIMIZER = StateClass(
    "optimizer", "optimizer state", True, "optimizer", 1, Cadence.PER_OPTIMIZER_STEP, True, False
)
ACTIVATIONS = StateClass(
    "activations", "activations", True, None, None, Cadence.PER_MICRO_BATCH, False, True
)
WORKSPACE = StateClass("workspace", "workspace", False, None, None, Cadence.NEVER, False, True)

STATE_CLASSES: tuple[StateClass, ...] = (
    WEIGHTS,
    GRADIENTS,
    MASTER,
    OPTIMIZER,
    ACTIVATIONS,
    WORKSPACE,
)
BY_NAME: dict[str, StateClass] = {c.name: c for c in STATE_CLASSES}

NAMES = tuple(c.name for c in STATE_CLASSES)
PLACED = tuple(c.name for c in STATE_CLASSES if c.placed)
SHARDABLE = tuple(c.name for c in STATE_CLASSES if c.shardable)
PER_PARAMETER = tuple(c.name for c in STATE_CLASSES if c.precision is not None)
CHECKPOINTED = tuple(c.name for c in STATE_CLASSES if c.checkpointed)
PER_MICRO_BATCH = tuple(c.name for c in STATE_CLASSES if c.written is Cadence.PER_MICRO_BATCH)
# what the optimizer reads and rewrites each step beside the weights (master copy, its state)
OPTIMIZER_KEPT = tuple(
    c.name
    for c in STATE_CLASSES
    if c.precision and c.written is Cadence.PER_OPTIMIZER_STEP and c is not WEIGHTS
)

# Written to a tier beside the classes: a durable checkpoint's copies (not a class of state,
# but reported with the classes' bytes per tier, as what wears it).
CHECKPOINT_WRITES = "checkpoint"


# The optimizers, one registry (state/optimizers.py, which imports only its own leaves):
# Adam/AdamW keep two moments, SGD with momentum and Lion one, plain SGD none, Adafactor row
# and column statistics per matrix, adamw8bit 8-bit moments with per-block absmax, Muon a
# momentum on the layers' matrices and AdamW's two moments elsewhere.
OPTIMIZERS = _optimizers.OPTIMIZERS
OPTIMIZER_NAMES = _optimizers.NAMES
OPTIMIZER_DEFAULT = _optimizers.DEFAULT


def state_class(name: str) -> StateClass:
    """The class called `name`; a name that is not one is our bug, never silently nothing."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"no state class {name!r} (expected one of {', '.join(NAMES)})") from None


def zero_sharded(zero_stage: int) -> tuple[str, ...]:
    """The classes a ZeRO stage shards over the data-parallel group (Rajbhandari et al. 2020:
    1 optimizer state and master weights, 2 adds gradients, 3 adds weights)."""
    return tuple(c.name for c in STATE_CLASSES if c.sharded_at(zero_stage))
