"""A value of another shape where a section, a mapping of names or a list goes, said in the
user's words (pydantic's "a valid dictionary" and "a valid list"; config/messages.py reads
them): what to write there, with an example."""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import shown_yaml

PRESET_AT = (("model",), ("hardware",))  # the sections a preset is named in
_MAPPINGS = {  # a key that maps names the user chooses, as one is written
    "tiers": "{hbm: {kind: hbm, capacity: 80 GB, bandwidth: 3.35 TB/s}}",
    "links": "{pcie: {between: [hbm, dram], bandwidth: 50 GB/s}}",
    "peak_flops": "{bf16: 989 TFLOP/s}",
    "retention_curve": "{1 year: 3000, 3 years: 1000}",
    "plan": "{training.micro_batch_size: [1, 2]}",
}


def not_a_mapping(err: dict[str, Any]) -> str:
    said = "".join(f", e.g. {_MAPPINGS[k]}" for k in map(str, err["loc"][-1:]) if k in _MAPPINGS)
    return f"expected a mapping of names to values{said} (got {shown_yaml(err.get('input'))})"


def preset_as_section(section: str, value: str) -> str:
    """`model: gpt2` or `hardware: dgx-h100` for `{preset: ...}`: a preset's name where its
    section goes (the keys a section takes said nothing of presets, hardware's "gpu, tiers,
    required" least of all, which a preset gives)."""
    return (
        f"expected a mapping; a preset is named inside it: {section}: {{preset: {value}}} "
        f"(got {shown_yaml(value)})"
    )


def not_a_list(value: Any) -> str:
    """A list's key given something else; a mapping of item numbers is what `--set KEY.0=1`
    makes of a key that holds no list yet (the path's number names an item of none)."""
    text = f"expected a list, e.g. [1, 2] (got {shown_yaml(value)})"
    if isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
        text += (
            "; a number in a --set path sets an item of a list already there: give the whole "
            "list, e.g. --set KEY=[1]"
        )
    return text
