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
  (the GPU stream waits for the copy). A persistent parameter (`ds_persist`: at most
  `stage3_param_persistence_threshold` values) is released by no use: `step`'s
  `_partition_all_parameters` (stage3.py at 007cca6a; the coordinator's
  `release_and_reset_all` calls `param.partition()` on every parameter) partitions it once a
  step, after the last backward and before the update, so a use's release writes the rest of
  the unit's secondary (`Unit.hpz_secondary` less `hpz_persistent`) and the persistent part
  is written once, at the end of the step's passes (`SecondaryWrites.persistent_writes`).

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
        hpz = [unit.dp_weights_secondary is not None for unit in c.wl.units]
        # a use's release: the secondary of what it releases, never the persistent parameters'
        # (a backward's), nor at a forward those kept for the backward (`Unit.hpz_kept`)
        self.nbytes = [
            unit.hpz_secondary - unit.hpz_persistent if on else 0
            for unit, on in zip(c.wl.units, hpz, strict=True)
        ]
        self.forward_bytes = [
            max(0, unit.hpz_secondary - max(unit.hpz_kept, unit.hpz_persistent)) if on else 0
            for unit, on in zip(c.wl.units, hpz, strict=True)
        ]
        # the persistent parameters', written once a step (`persistent_writes`) where homed off
        self.persistent = [
            unit.hpz_persistent if on and h != self.gpu else 0
            for unit, on, h in zip(c.wl.units, hpz, self.homes, strict=True)
        ]
        self.names = [unit.name for unit in c.wl.units]
        # the units whose releases are written (a fact: TrainingPasses skips every call if none)
        self.writes = [
            h != self.gpu and n > 0 for h, n in zip(self.homes, self.nbytes, strict=True)
        ]
        self.pending: tuple[int, int, int, int, int] | None = None  # (unit, mb, step, use, B)

    def fork(self) -> SecondaryWrites:
        twin = object.__new__(SecondaryWrites)
        twin.__dict__.update(self.__dict__)  # the lists shared, never changed
        return twin

    def released(self, u: int, mb: int, step: int, use: int, release: bool, fwd: bool) -> None:
        """Unit u's use `use` added (`release`: its weights released after it; `fwd`: a
        forward): pending."""
        nbytes = self.forward_bytes[u] if fwd else self.nbytes[u]
        if release and self.writes[u] and nbytes:
            self.pending = (u, mb, step, use, nbytes)

    def kept(self, u: int) -> None:
        """Unit u's next use found its weights still held: the pending release was none."""
        if self.pending is not None and self.pending[0] == u:
            self.pending = None

    def flush(self, ops: OpList) -> None:
        """The pending release's slice copied home, the stream waiting for it."""
        if self.pending is None:
            return
        u, mb, step, use, nbytes = self.pending
        self.pending = None
        home, name = self.homes[u], self.names[u]
        label = ("write hpz secondary {} mb{}", name, mb)
        moved = ops.move("weights", label, step, self.gpu, home, nbytes, [use], alloc_dst=False)
        ops.barrier(("hpz secondary written {} mb{}", name, mb), step, [moved], Role.STATE)

    def persistent_writes(self, ops: OpList, step: int) -> None:
        """`step`'s `_partition_all_parameters`, after the step's last backward (its release
        flushed first): each unit's persistent parameters' secondary copied home, the stream
        waiting for each (`_partition_param_sec`'s synchronize), before the update."""
        for u, nbytes in enumerate(self.persistent):
            if not nbytes:
                continue
            name, after = self.names[u], [ops.last("gpu")]
            label = ("write hpz persistent secondary {}", name)
            moved = ops.move("weights", label, step, self.gpu, self.homes[u], nbytes, after, False)
            ops.barrier(("hpz persistent secondary written {}", name), step, [moved], Role.STATE)
