"""The GPU's memory timeline of the step in the report (`memory_timeline`) and in words: its
peak, the moment it peaks and the parts live then, the allocator's view beside it and what
lies outside the allocator; where the step would run out of memory, which moment.
(tiersim/state/step_memory.py builds the timeline; docs/memory.md says what it counts.)"""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes
from tiersim.report.table import render
from tiersim.state.inventory import Inventory
from tiersim.state.resolved import Resolved
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.timeline import Timeline


def timeline_section(r: Resolved, inv: Inventory) -> dict[str, Any]:
    return section_of(gpu_timeline(r, inv))


def section_of(t: Timeline) -> dict[str, Any]:
    peak, oom = t.peak_event, t.oom_event
    return {
        "tier": t.tier,
        "capacity_bytes": int(t.capacity_bytes),
        "peak_allocated_bytes": t.peak_allocated_bytes,
        "peak_reserved_bytes": t.peak_reserved_bytes,
        "outside_allocator_bytes": {o.name: o.nbytes for o in t.outside},
        "peak_total_bytes": t.peak_total_bytes,
        "peak_moment": peak.moment if peak else None,
        "peak_phase": peak.phase if peak else None,
        "peak_parts": t.peak_parts,
        "peak_total_moment": t.device_peak_event.moment if t.device_peak_event else None,
        "fits": t.fits,
        "out_of_memory_at": oom.moment if oom else None,
        "out_of_memory_allocating": oom.part if oom else None,
        "events": len(t.events),
    }


def with_timeline_fit(report: dict[str, Any]) -> None:
    """The GPU tier fits only where its timeline does; a run's GPU peak is the larger of the
    engine's occupancy (what it moves: staging, prefetched units) and the timeline's device
    peak (the step's transients, the allocator's reserve, context and NCCL), the engine's kept
    as `engine_peak_bytes`; the report's `fits` follows."""
    mt = report.get("memory_timeline")
    if mt is not None:
        timeline_into_tier(report["tiers"][mt["tier"]], mt["fits"], mt["peak_total_bytes"])
    report["fits"] = all(t["fits"] for t in report["tiers"].values())


def timeline_into_tier(tier: dict[str, Any], fits: bool, peak_bytes: int) -> None:
    """A memory timeline's verdict on its tier's row (the GPU's, or the host's:
    report/host_memory.py): the tier fits only where the timeline does, and where the row has
    the engine's occupancy peak, its peak is the larger of that (kept as `engine_peak_bytes`)
    and the timeline's."""
    tier["fits"] = tier["fits"] and fits
    if "peak_bytes" in tier:
        tier["engine_peak_bytes"] = tier["peak_bytes"]
        tier["peak_bytes"] = max(tier["peak_bytes"], peak_bytes)


def timeline_warning(report: dict[str, Any]) -> str:
    """'<tier> runs out of memory at <moment> ...', or '' where the timeline fits."""
    mt = report.get("memory_timeline")
    if mt is None or mt["fits"]:
        return ""
    return (
        f"{mt['tier']} runs {out_of_memory(mt)}: the step needs "
        f"{fmt_bytes(mt['peak_total_bytes'])} of {fmt_bytes(mt['capacity_bytes'])} with the "
        "allocator's reserve"
    )


def timeline_text(mt: dict[str, Any], engine_peak: int | None = None) -> str:
    """The peak's moment and its parts, as a table with the allocator's and outside terms;
    `engine_peak`: the simulated step's occupancy of the tier, said where it is the larger
    (the tier table's peak is the larger of the two)."""
    total = mt["peak_allocated_bytes"] or 1
    rows = [[p, fmt_bytes(b), f"{100 * b / total:.1f} %"] for p, b in mt["peak_parts"].items()]
    rows.append(["allocated at the peak", fmt_bytes(mt["peak_allocated_bytes"]), "100.0 %"])
    rows.append(["reserved by the allocator (its most)", fmt_bytes(mt["peak_reserved_bytes"]), ""])
    for name, nbytes in mt["outside_allocator_bytes"].items():
        rows.append([f"{name} (outside the allocator)", fmt_bytes(nbytes), ""])
    rows.append(["device memory at most", fmt_bytes(mt["peak_total_bytes"]), ""])
    verdict = "fits" if mt["fits"] else f"DOES NOT FIT: {out_of_memory(mt)}"
    head = f"{mt['tier']} over the step: {peak_words(mt)} ({verdict})"
    table = render(["part live at the peak", "bytes", "of allocated"], rows, head)
    if engine_peak is not None and engine_peak > mt["peak_total_bytes"]:
        table += (
            f"\nthe simulated step's occupancy peaks higher, at {fmt_bytes(engine_peak)} (what "
            "it moves and holds: staged copies, prefetched units; the CUDA context and NCCL "
            "buffers not included): the tier table's peak"
        )
    return table


def out_of_memory(mt: dict[str, Any]) -> str:
    """'out of memory at <moment> (allocating <part>)': the first request the device refused."""
    return (
        f"out of memory at {mt['out_of_memory_at']} (allocating {mt['out_of_memory_allocating']})"
    )


def peak_words(mt: dict[str, Any]) -> str:
    """'peak at <moment>, <device bytes> of <capacity>'; where the device holds most at another
    moment than allocation peaks (the allocator reserving more with less allocated), both."""
    total, cap = fmt_bytes(mt["peak_total_bytes"]), fmt_bytes(mt["capacity_bytes"])
    most = mt.get("peak_total_moment")
    if most is None or most == mt["peak_moment"]:
        return f"peak at {mt['peak_moment']}, {total} of {cap}"
    return (
        f"allocation peaks at {mt['peak_moment']} ({fmt_bytes(mt['peak_allocated_bytes'])}, "
        f"its parts below); the device holds most at {most}, {total} of {cap}"
    )
