"""The shipped scenarios set by hand nothing their `training.framework` implies (issue #39,
"frameworks as they ship"): each framework-resolved key a scenario gives is dropped in turn,
and what the framework then resolves to must differ from what the scenario said, else the key
only restated the framework's default. Resolution: config/framework_parallel.py (overlap
keys), config/framework_attention.py (the fused attention kernel), config/framework.py (the
offload plan and FSDP2's prefetch depth)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import SCENARIOS

from tiersim.config.framework import offload_plan, resolved_prefetch_depth
from tiersim.config.framework_attention import resolved_flash_kernel
from tiersim.config.framework_parallel import parallel_defaults, resolved_parallel
from tiersim.config.load import build
from tiersim.config.yamlfile import read_yaml

SHIPPED = sorted(p for p in SCENARIOS.rglob("*.yaml") if "sweeps" not in p.parts)
SHIPPED = [p for p in SHIPPED if p.name != "references.yaml"]


def _resolved(path: Path, raw: dict) -> dict:
    """What the framework-resolved keys come to for `raw` (a scenario file's mapping)."""
    s = build(copy.deepcopy(raw), path.parent, str(path)).scenario
    return {
        "parallel": resolved_parallel(s).model_dump(),
        "flash_kernel": resolved_flash_kernel(s),
        "prefetch_depth": resolved_prefetch_depth(s),
        "offload": offload_plan(s),
    }


def _given(raw: dict) -> list[tuple[str, str]]:
    """(section, key) of each framework-resolved key `raw` sets by hand."""
    framework = (raw.get("training") or {}).get("framework")
    parallel = raw.get("parallel") or {}
    training = raw.get("training") or {}
    keys = [("parallel", k) for k in parallel_defaults(framework) if k in parallel]
    keys += [("training", "flash_kernel")] if "flash_kernel" in training else []
    keys += [("training.offload", k) for k in training.get("offload") or {}]
    if "prefetch_depth" in (raw.get("simulation") or {}):
        keys.append(("simulation", "prefetch_depth"))
    return keys


def _without(raw: dict, section: str, key: str) -> dict:
    out = copy.deepcopy(raw)
    node = out
    for part in section.split("."):
        node = node[part]
    del node[key]
    return out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(SCENARIOS)))
def test_no_shipped_scenario_restates_its_frameworks_default(path):
    raw = dict(read_yaml(path, str(path)))
    given = _given(raw)
    if not given:
        return
    said = _resolved(path, raw)
    restated = [
        f"{section}.{key}"
        for section, key in given
        if _resolved(path, _without(raw, section, key)) == said
    ]
    assert restated == [], f"{path.name} sets what its framework implies: {restated}"
