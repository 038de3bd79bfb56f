"""DeepSpeed's parameter swap-in from NVMe, issued a use ahead of the all-gather.

With `offload_param: {device: nvme}`, ZeRO-3's fetch of a submodule is two steps on two
queues. The partition is first read from the drive into one of the parameter swapper's pinned
host buffers (swap_tensor/partitioned_param_swapper.py `swap_in`, on its own aio read handle);
only then does `all_gather_coalesced` copy it to the GPU and gather the rest.
PartitionedParameterCoordinator.fetch_sub_module (zero/partitioned_param_coordinator.py) does,
once the current submodule's parameters are gathered and the trace is complete:
- the all-gather prefetch walks the parameter queue up to `min(max_live - live,
  prefetch_bucket_size)` elements, but stops at the first parameter whose partition is still
  on NVMe ("nvme prefetch is handled elsewhere"): so the gather is issued `depth` uses ahead
  as for any fetch (workload/fetch.py `fetch_depth`), 0 where max_live_parameters binds;
- then `__prefetch_nvme_param_partitions` (prefetch_nvme: on whenever offload_param's
  device is nvme, zero/parameter_offload.py) swaps in, asynchronously, the partitions of the
  parameters next in the queue beyond those, at least one, up to twice the elements in flight
  and the free swap buffers (offload_param buffer_count 5): whatever max_live_parameters says.
So the drive read of use k+1 overlaps use k's compute; its copy to the GPU and its gather wait
for their own prefetch gate. Here: the read from the drive to host memory is a move of its
own, issued after the use `depth + 1` back has ended and after the previous fetch has landed
(DeepSpeed submits it after waiting for the current submodule's gather); the rest of the
fetch starts from host memory at the usual gate. The bytes are those of the one move it
replaces, over the same links; the pinned buffers it lands in are counted once, in
workload/pinned.py, so the read allocates nothing.
"""

from __future__ import annotations

from tiersim.config.framework import OffloadPlan
from tiersim.config.hardware_schema import Hardware
from tiersim.engine.oplist import OpList
from tiersim.engine.phases import Context


def swaps_ahead(c: Context, u: int) -> bool:
    """Unit u's weights come through DeepSpeed's parameter swapper: fetched per submodule
    from a drive behind host memory."""
    return swapped_in(c.plan, c.res.machine, c.home_of(u)["weights"])


def swapped_in(plan: OffloadPlan, machine: Hardware, home: str) -> bool:
    """Weights homed on `home` come through DeepSpeed's parameter swapper (`swaps_ahead`):
    each fetch a move from `home` to host memory, then from there to the GPU."""
    host = machine.cpu.memory
    if plan.framework != "deepspeed" or plan.fetch != "submodule" or home == host:
        return False
    if not machine.tiers[home].behaviour.swapped_in_blocks:
        return False
    return any(set(link.between) == {home, host} for link in machine.links.values())


class ParamSwapIn:
    """The swap-ins of a schedule's training passes; remembers the last fetch issued."""

    def __init__(self, c: Context):
        self.c = c
        self.ahead = [swaps_ahead(c, u) for u in range(len(c.wl.units))]
        self.last_fetch: int | None = None  # the op the previous fetch of weights ends with

    def fork(self) -> ParamSwapIn:
        twin = ParamSwapIn.__new__(ParamSwapIn)
        twin.c, twin.ahead, twin.last_fetch = self.c, self.ahead, self.last_fetch
        return twin

    def source(
        self, ops: OpList, u: int, step: int, what: tuple, nbytes: int, ready, uses: list[int]
    ) -> tuple[str, list]:
        """Where the rest of unit u's fetch starts and what it awaits besides its gate: the
        home tier and nothing, or host memory after the swap-in issued here. `what`: (tag,
        micro-batch) for the label; `ready`: the op the unit's weights at home await."""
        home = self.c.home_of(u)["weights"]
        if not self.ahead[u]:
            return home, []
        back = self.c.depth + 2  # one use further back than the gather's gate
        early = uses[-back] if len(uses) >= back else None
        host = self.c.res.machine.cpu.memory
        label = ("swap in weights {} {} mb{}", self.c.wl.units[u].name, *what)
        deps = [ready, early, self.last_fetch]
        op = ops.move("weights", label, step, home, host, nbytes, deps, alloc_dst=False)
        return host, [op]

    def fetched(self, op: int | None) -> None:
        if op is not None:
            self.last_fetch = op
