"""What each kind of tier is and how it behaves: one table, read wherever a kind matters (no
code asks for a kind by its name). `hardware.tiers.<tier>.kind` takes its names from here.

- `cpu_computes_there`: host memory, which a CPU optimizer reads and writes in place (its
  update runs there; DeepSpeed's CPU-Adam, ZeRO-Offload).
- `swapped_in_blocks`: a block device that state reaches through pinned host buffers, as
  DeepSpeed's swapper moves optimizer state and fp32 gradients to NVMe (ZeRO-Infinity): such a
  tier needs swap buffers, and a CPU optimizer's gradients may go through it.
- `wears`: writes consume program/erase cycles (NAND flash), so it may carry `endurance` and a
  write budget.
"""

from __future__ import annotations

from tiersim.core.records import record


@record
class TierKind:
    name: str
    cpu_computes_there: bool
    swapped_in_blocks: bool
    wears: bool


TIER_KINDS: tuple[TierKind, ...] = (
    TierKind("hbm", cpu_computes_there=False, swapped_in_blocks=False, wears=False),
    TierKind("dram", cpu_computes_there=True, swapped_in_blocks=False, wears=False),
    TierKind("flash", cpu_computes_there=False, swapped_in_blocks=True, wears=True),
    # another host's memory over the network: no CPU of ours computes there, nothing wears
    TierKind("remote", cpu_computes_there=False, swapped_in_blocks=False, wears=False),
)
TIER_KIND_NAMES = tuple(k.name for k in TIER_KINDS)
TIER_KIND_BY_NAME: dict[str, TierKind] = {k.name: k for k in TIER_KINDS}
