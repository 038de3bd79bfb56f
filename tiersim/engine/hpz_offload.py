"""DeepSpeed ZeRO++ hpZ's secondary partition in the step's movement (workload/zeropp.py has
its gathers, state/zeropp.py its memory). partition_parameters.py at 57073d13:

- `_partition_param_sec` allocates it with `torch.empty(secondary_partition_size,
  device=self.remote_device)`: under `offload_param` (device cpu) in host memory (pinned where
  `pin_memory`), else in GPU memory;
- `_all_gather_dtype`, once a parameter holds it (`use_secondary_tensor`), cats
  `p.ds_secondary_tensor.to(current_device)` into its piece of the h-way all-gather: from the
  host, the secondary partition's bytes (d / h times the primary's, each tensor padded to a
  multiple of d) cross PCIe to the GPU where the first forward's gather copies the primary's;
- every release of a gathered parameter (`_partition` calls `_partition_param_sec` after each
  forward and each backward) copies this rank's slice of the gathered tensor into it: from
  the GPU to the host under offload, then `get_accelerator().current_stream().synchronize()`
  (the GPU stream waits for the copy).

In GPU memory both copies stay on the GPU: nothing crosses PCIe (the copy's time not priced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiersim.engine.ops import Role

if TYPE_CHECKING:
    from tiersim.engine.oplist import OpList
    from tiersim.engine.phases import Context
    from tiersim.workload.comms import Comm
    from tiersim.workload.unit import Unit


def gather_source(unit: Unit, tag: str, mb: int) -> tuple[Comm | None, int]:
    """The all-gather of a fetch (`tag` fwd or bwd, of micro-batch `mb`) and the bytes of this
    GPU's piece it copies from the weights' home: the primary partition for a step's first
    forward (the secondary is dropped after each update) or without hpZ, else the secondary."""
    if unit.dp_weights_secondary is None or (mb == 0 and tag == "fwd"):
        return unit.dp_weights, unit.homed["weights"]
    return unit.dp_weights_secondary, unit.hpz_secondary


class SecondaryWrites:
    """The releases' copies into a secondary partition homed off the GPU (module docstring).
    A use's release is known at the next use: where that is the same unit's, still held
    (TrainingPasses.fetch_weights), nothing was released; so each release is written when
    the next use begins, or at the end of the passes (`flush`)."""

    def __init__(self, c: Context):
        self.gpu = c.gpu
        self.homes = [c.home_of(u)["weights"] for u in range(len(c.wl.units))]
        self.nbytes = [
            unit.hpz_secondary if unit.dp_weights_secondary is not None else 0
            for unit in c.wl.units
        ]
        self.names = [unit.name for unit in c.wl.units]
        # the units whose releases are written (a fact: TrainingPasses skips every call if none)
        self.writes = [
            h != self.gpu and n > 0 for h, n in zip(self.homes, self.nbytes, strict=True)
        ]
        self.pending: tuple[int, int, int, int] | None = None  # (unit, mb, step, its use)

    def fork(self) -> SecondaryWrites:
        twin = object.__new__(SecondaryWrites)
        twin.__dict__.update(self.__dict__)  # the lists shared, never changed
        return twin

    def released(self, u: int, mb: int, step: int, use: int, release: bool) -> None:
        """Unit u's use `use` added (`release`: its weights released after it): pending."""
        if release and self.writes[u]:
            self.pending = (u, mb, step, use)

    def kept(self, u: int) -> None:
        """Unit u's next use found its weights still held: the pending release was none."""
        if self.pending is not None and self.pending[0] == u:
            self.pending = None

    def flush(self, ops: OpList) -> None:
        """The pending release's slice copied home, the stream waiting for it."""
        if self.pending is None:
            return
        u, mb, step, use = self.pending
        self.pending = None
        home, nbytes, name = self.homes[u], self.nbytes[u], self.names[u]
        label = ("write hpz secondary {} mb{}", name, mb)
        moved = ops.move("weights", label, step, self.gpu, home, nbytes, [use], alloc_dst=False)
        ops.barrier(("hpz secondary written {} mb{}", name, mb), step, [moved], Role.STATE)
