"""Where each class of state lives between uses: one home tier per class, and for a
mixture-of-experts model the routed experts' own home of each per-parameter class
(`placement.experts.<class>`) where it differs from the dense state's (attention, routers,
norms, shared experts, embeddings and head)."""

from __future__ import annotations

from tiersim.config.fields import plain_fields
from tiersim.config.schema import Hardware, Placement
from tiersim.state.classes import STATE_CLASSES


def homes(placement: Placement, machine: Hardware) -> dict[str, str]:
    """The tier each state class lives in: its placement, or GPU memory for one not placed."""
    placed = plain_fields(placement)
    gpu = machine.gpu.memory
    return {c.name: placed[c.name] if c.placed else gpu for c in STATE_CLASSES}


def expert_homes(placement: Placement, machine: Hardware) -> dict[str, str]:
    """The tier the routed experts' part of each class lives in: `placement.experts.<class>`
    where set, else the class's home."""
    own = plain_fields(placement.experts)
    return {c: own.get(c) or home for c, home in homes(placement, machine).items()}


def experts_placed_apart(placement: Placement, machine: Hardware) -> bool:
    """Some class of the routed experts' state has a home of its own."""
    return expert_homes(placement, machine) != homes(placement, machine)
