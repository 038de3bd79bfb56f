"""`--set KEY=null` as the file's own null for KEY: where the file may leave a section out but
not give it null (`budget.nvme`, `failures`: refused "leave the key out"), the --set leaves it
out, which a --set cannot otherwise say; elsewhere the null stays, taken or refused as the
file's would be."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tiersim.config.messages import null_sections_left_out
from tiersim.config.overrides import apply_overrides, parse_override
from tiersim.config.presets import resolve
from tiersim.config.schema import Scenario


def overridden(raw: Any, overrides: list[str], source: str, base_dir: Path) -> Any:
    """`raw` with `overrides` applied (`apply_overrides`) and each null a --set gives a
    section that may be left out, left out."""
    out = apply_overrides(raw, overrides, source)
    nulls = [keys for keys, value in map(parse_override, overrides) if value is None]
    if not nulls or not isinstance(out, dict):
        return out
    try:  # the file's own validation says which nulls it refuses for a key it may leave out
        Scenario.model_validate(resolve(copy.deepcopy(out), base_dir, []))
        return out
    except ValidationError as exc:
        absent = null_sections_left_out(exc)
    for keys in nulls:
        if ".".join(keys) in absent:
            _left_out(out, keys)
    return out


def _left_out(raw: dict[str, Any], keys: list[str]) -> None:
    node: Any = raw
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and node.get(keys[-1], 0) is None:
        del node[keys[-1]]
