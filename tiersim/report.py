"""Turning results into the JSON report (DESIGN.md §2) and terminal tables.

Reporting reads result objects only; it never reaches into the engine's internals.
"""

from __future__ import annotations

import json
from typing import Any

from tiersim import __version__
from tiersim.inventory import Inventory, model_summary
from tiersim.model import build_model
from tiersim.schema import STATE_CLASSES, Scenario
from tiersim.table import render
from tiersim.units import fmt_bytes, fmt_count


def inventory_section(inv: Inventory) -> dict[str, Any]:
    return {
        "dense": inv.dense.as_dict(),
        "per_gpu": inv.per_gpu.as_dict(),
        "pipeline_stage": inv.stage,
        "stage_parameters_per_gpu": inv.stage_parameters,
        "inflight_microbatches": inv.inflight_microbatches,
        "sharded": inv.sharded,
    }


def tiers_section(inv: Inventory) -> dict[str, Any]:
    return {
        name: {
            "capacity_bytes": use.capacity_bytes,
            "resident_bytes": use.resident_bytes,
            "fits": use.fits,
            "classes": use.classes,
        }
        for name, use in inv.tiers.items()
    }


def inventory_report(s: Scenario, inv: Inventory) -> dict[str, Any]:
    return {
        "scenario": s.name,
        "tiersim_version": __version__,
        "model": model_summary(build_model(s.model)),
        "inventory": inventory_section(inv),
        "tiers": tiers_section(inv),
    }


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, allow_nan=False, default=_json_default)


def _json_default(value: object) -> object:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def inventory_tables(s: Scenario, inv: Inventory) -> str:
    homes = {c: getattr(s.placement, c) for c in STATE_CLASSES if c != "workspace"}
    homes["workspace"] = s.hardware.gpu.memory
    rows = [
        [
            cls,
            fmt_bytes(getattr(inv.dense, cls)),
            fmt_bytes(getattr(inv.per_gpu, cls)),
            "yes" if inv.sharded.get(cls) else "no",
            homes[cls],
        ]
        for cls in STATE_CLASSES
    ]
    rows.append(["total", fmt_bytes(inv.dense.total), fmt_bytes(inv.per_gpu.total), "", ""])
    par = s.parallel
    head = (
        f"{s.name}: {fmt_count(inv.parameters)} parameters ({inv.parameters:,}); "
        f"per GPU = stage {inv.stage} of pipeline {par.pipeline}, tensor {par.tensor}, "
        f"data {par.data}, ZeRO {par.zero_stage}; {inv.inflight_microbatches:g} micro-batches "
        "in flight"
    )
    classes = render(["class", "dense", "per GPU", "sharded", "home"], rows, head)
    tier_rows = [
        [
            name,
            fmt_bytes(u.resident_bytes),
            fmt_bytes(u.capacity_bytes),
            f"{100 * u.resident_bytes / u.capacity_bytes:.1f} %",
            "yes" if u.fits else "NO",
        ]
        for name, u in inv.tiers.items()
    ]
    tiers = render(["tier", "resident", "capacity", "used", "fits"], tier_rows)
    return f"{classes}\n\n{tiers}"
