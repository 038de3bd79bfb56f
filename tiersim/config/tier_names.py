"""A tier named where the machine has none by that name: what to say, and which tier was
likely meant (another case, swapped letters, a word for a kind of memory, the nearest)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tiersim.core.errors import shown


def no_such_tier(tier: str, tiers: Mapping[str, Any]) -> str:
    """`tier 'hbff' does not exist (did you mean 'hbf'? tiers: hbm, dram, nvme, hbf)`;
    `tiers`: each tier's name and its section (a mapping or the schema's Tier)."""
    import difflib  # a name refused: a valid file never needs it

    names = [str(t) for t in tiers]
    # another case (HBF: hbf), or the same letters swapped (hfb: hbf), before difflib's
    # nearest, which may tie (hbm)
    close = [n for n in names if sorted(n.lower()) == sorted(str(tier).lower())]
    # a word for a kind of memory (DeepSpeed's offload device 'cpu'): the tier of that kind
    kind = KIND_WORDS.get(str(tier).lower())
    close = close or [n for n in names if kind and _kind(tiers[n]) == kind[0]][:1]
    elsewhere = [] if close else _presets_with_tier(str(tier))
    if elsewhere:  # a tier this machine lacks, not a misspelling: no neighbour (hbf: hbm)
        having = " or ".join(elsewhere)
        return (
            f"tier {shown(tier)} does not exist on this machine (tiers: {', '.join(names)}; "
            f"hardware.preset {having} has one, or give hardware.tiers.{tier})"
        )
    close = close or difflib.get_close_matches(str(tier), names, n=1)
    said = f" ({kind[1]})" if kind and close and _kind(tiers[close[0]]) == kind[0] else ""
    hint = f"did you mean '{close[0]}'{said}? " if close else ""
    return f"tier {shown(tier)} does not exist ({hint}tiers: {', '.join(names)})"


# words users write for a kind of memory where a tier's name is needed
KIND_WORDS = {
    "cpu": ("dram", "host memory"),
    "host": ("dram", "host memory"),
    "ram": ("dram", "host memory"),
    "gpu": ("hbm", "the GPU's memory"),
    "cuda": ("hbm", "the GPU's memory"),
}


def _presets_with_tier(tier: str) -> list[str]:
    """The shipped machines with a tier of this very name: `placement.optimizer: hbf` on
    dgx-h100 was told "did you mean 'hbm'?", the GPU's memory, the opposite of an offload."""
    from tiersim.config.presets import preset_names, read_preset

    machines = preset_names("hardware")
    return [m for m in machines if tier in (read_preset("hardware", m).get("tiers") or {})]


def _kind(section: Any) -> Any:
    return section.get("kind") if isinstance(section, dict) else getattr(section, "kind", None)


def defaulted_tier(path: str, tier: str, tiers: Iterable[str]) -> str:
    """A default tier the machine lacks, at a key the user never wrote: said as such, so that
    the key is not taken for one they mistyped."""
    names = ", ".join(str(t) for t in tiers)
    return (
        f"the scenario does not set it, and its default tier {shown(tier)} does not exist "
        f"(tiers: {names}; expected a tier named {shown(tier)} in hardware.tiers, or {path} "
        "set to one of the machine's)"
    )
