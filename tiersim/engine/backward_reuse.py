"""A backward's gather of what DeepSpeed ZeRO-3's coordinator did not keep since the unit's
forward (workload/zero3_reuse.py `Unit.kept_values`): the forward frees only the rest
(`forward_free`), and the backward all-gathers and allocates only the rest (`rest`), or nothing
where every value was kept (`whole`: nor is its forward's release a ZeRO++ hpZ secondary
write, engine/hpz_offload.py); the backward frees the whole as before. Between micro-batches
nothing is kept (engine/schedule_passes.py `fetch_weights`: DeepSpeed's forward gathers
again), but for the persistent parameters, gathered by the step's first forward only
(`forward_rest`, workload/zero3_reuse.py). The allocations stay the whole's at each forward
(a persistent tensor is freed with the rest at the backward's end, as before)."""

from __future__ import annotations

import dataclasses

from tiersim.workload.comms import Comm


class BackwardReuse:
    def __init__(self, units, gpu: str, frees: list) -> None:
        """`frees`: each unit's forward release (its full weights), made here less what is
        kept."""
        self.units = units
        # unit -> bytes of its full weights kept from its forward to its backward
        self.kept = {
            u: unit.weights_full * unit.kept_values // unit.params
            for u, unit in enumerate(units)
            if unit.kept_values and unit.params
        }
        self.whole = {u for u in self.kept if units[u].kept_values == units[u].params}
        # (kept unit, id of its gather) -> the rest's gather, scaled (layers share Comm objects)
        self.gathers: dict[tuple[int, int], Comm] = {}
        # (unit, id of its gather) -> a later micro-batch's forward gather, its persistent
        # parameters' taken out (gathered once a step)
        self.regathers: dict[tuple[int, int], Comm] = {}
        for u, unit in enumerate(units):
            for c in (unit.dp_weights, unit.dp_weights_secondary):
                if c is not None and 0 < unit.persistent_values < unit.params:
                    again = c.nbytes * (unit.params - unit.persistent_values) / unit.params
                    self.regathers[(u, id(c))] = dataclasses.replace(c, nbytes=again)
        for u, kept in self.kept.items():
            unit = units[u]
            rest = unit.weights_full - kept
            frees[u] = ((gpu, rest),) if rest else ()
            for c in (unit.dp_weights, unit.dp_weights_secondary):
                if c is not None:
                    left = c.nbytes * (unit.params - unit.kept_values) / unit.params
                    self.gathers[(u, id(c))] = dataclasses.replace(c, nbytes=left)

    def __eq__(self, other: object) -> bool:  # the same facts (engine/schedule_passes.py FACTS)
        if not isinstance(other, BackwardReuse):
            return False
        mine = (self.kept, list(self.gathers.values()), list(self.regathers.values()))
        return mine == (other.kept, list(other.gathers.values()), list(other.regathers.values()))

    __hash__ = None  # type: ignore[assignment]

    def rest(self, u: int, collective: Comm | None, nbytes: int) -> tuple[Comm | None, int, int]:
        """Unit u's backward gather of the rest: its collective, the bytes it reads from the
        weights' home (of `nbytes`, the whole's) and the bytes it allocates (0: all kept)."""
        unit = self.units[u]
        left = unit.params - unit.kept_values
        if collective is not None:
            collective = self.gathers[(u, id(collective))]
        return collective, nbytes * left // unit.params, unit.weights_full - self.kept[u]

    def forward_rest(self, u: int, collective: Comm | None, nbytes: int, mb: int):
        """Unit u's forward gather in micro-batch `mb`: after the step's first, without its
        persistent parameters (gathered once a step, kept to the update); its collective and
        the bytes it reads from the weights' home (of `nbytes`, the whole's)."""
        unit = self.units[u]
        key = (u, id(collective))
        if not mb or key not in self.regathers:  # (a part all persistent: as before, not seen)
            return collective, nbytes
        left = unit.params - unit.persistent_values
        return self.regathers[key], nbytes * left // unit.params
