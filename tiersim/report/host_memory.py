"""The host's memory timeline of the step in the report (`host_memory_timeline`) and in words:
one GPU's share of host DRAM at its peak, the moment and the parts live then, the node's total
(its GPUs share the host), and whether it fits; where it runs out, at which moment.
(tiersim/engine/host_memory.py builds the timeline; docs/memory.md, "Host memory", says what
it counts.) The section is absent where the step puts nothing in host memory."""

from __future__ import annotations

from typing import Any

from tiersim.core.units import fmt_bytes
from tiersim.report.memory import out_of_memory, timeline_into_tier
from tiersim.report.table import render
from tiersim.state.host_timeline import HostTimeline

SECTION = "host_memory_timeline"


def host_section(h: HostTimeline) -> dict[str, Any]:
    t = h.timeline
    peak, oom = t.peak_event, t.oom_event
    return {
        "tier": t.tier,
        "capacity_bytes": int(t.capacity_bytes),  # one GPU's share of the node's
        "peak_bytes": t.peak_allocated_bytes,
        "peak_moment": peak.moment if peak else None,
        "peak_phase": peak.phase if peak else None,
        "peak_parts": t.peak_parts,
        "fits": t.fits,
        "out_of_memory_at": oom.moment if oom else None,
        "out_of_memory_allocating": oom.part if oom else None,
        "events": len(t.events),
        "node": {
            "gpus": h.node_gpus,  # the run's GPUs on one node (capacity_bytes: theirs)
            "gpus_per_node": h.gpus_per_node,  # the machine's: more where the run is smaller
            "pipeline_stages": h.node_stages,
            "capacity_bytes": int(h.node_capacity_bytes),
            "peak_bytes": h.node_peak_bytes,
        },
    }


def with_host_fit(report: dict[str, Any], host: HostTimeline | None) -> None:
    """Add the host's section, where there is one; the host tier fits only where its timeline
    does, and its peak is the larger of the engine's occupancy (kept as `engine_peak_bytes`,
    where the report has one) and the timeline's. The report's `fits` follows."""
    if host is None:
        return
    section = report[SECTION] = host_section(host)
    tier = report["tiers"].get(section["tier"])
    if tier is not None:
        timeline_into_tier(tier, section["fits"], section["peak_bytes"])
    report["fits"] = all(t["fits"] for t in report["tiers"].values())


def host_warning(report: dict[str, Any]) -> str:
    """'<tier> runs out of memory at <moment> ...', or '' where the host's timeline fits."""
    hm = report.get(SECTION)
    if hm is None or hm["fits"]:
        return ""
    node = hm["node"]
    return (
        f"{hm['tier']} runs {out_of_memory(hm)}: {fmt_bytes(hm['peak_bytes'])} of "
        f"{fmt_bytes(hm['capacity_bytes'])} a GPU ({fmt_bytes(node['peak_bytes'])} of "
        f"{fmt_bytes(node['capacity_bytes'])} {_node_words(node)})"
    )


def _part_of_node(node: dict[str, Any]) -> bool:
    """The run has fewer GPUs than a node (a report without `gpus_per_node`: a whole node)."""
    return node["gpus"] < node.get("gpus_per_node", node["gpus"])


def _node_words(node: dict[str, Any]) -> str:
    """Whose the node's figures are: 'a node', or the run's GPUs where it fills part of one
    (their shares, not the node's whole)."""
    if not _part_of_node(node):
        return "a node"
    return f"for the run's {_gpus(node['gpus'])}"


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' * (n != 1)}"


def part_of_node_note(tier: str, capacity: float, node: dict[str, Any]) -> str:
    """What a run smaller than a node is held to: one GPU's share of host memory each (the
    presets divide the node's by its GPUs), where alone on the node it could use more."""
    n, per_node = node["gpus"], node["gpus_per_node"]
    return (
        f"the run uses {n} of the node's {per_node} GPUs: each is held to one GPU's share of "
        f"host memory, {fmt_bytes(capacity)} (hardware.tiers.{tier}.capacity, the node's "
        f"{fmt_bytes(capacity * per_node)} / {per_node}); alone on the node it could use up to "
        f"{fmt_bytes(capacity * per_node / n)} a GPU: set that capacity to say so"
    )


def host_text(hm: dict[str, Any], engine_peak: int | None = None) -> str:
    """The host's peak, its moment and parts, one GPU's and the node's; `engine_peak`: the
    simulated step's occupancy of the tier, said where it differs."""
    total = hm["peak_bytes"] or 1
    rows = [[p, fmt_bytes(b), f"{100 * b / total:.1f} %"] for p, b in hm["peak_parts"].items()]
    rows.append(["one GPU's share at the peak", fmt_bytes(hm["peak_bytes"]), "100.0 %"])
    node = hm["node"]
    part = _part_of_node(node)
    label = f"the run's {_gpus(node['gpus'])}" if part else f"the node ({_gpus(node['gpus'])})"
    rows.append([label, fmt_bytes(node["peak_bytes"]), ""])
    verdict = "fits" if hm["fits"] else f"DOES NOT FIT: {out_of_memory(hm)}"
    head = (
        f"host memory ({hm['tier']}) over the step: peak at {hm['peak_moment']}, "
        f"{fmt_bytes(hm['peak_bytes'])} of {fmt_bytes(hm['capacity_bytes'])} a GPU, "
        f"{fmt_bytes(node['peak_bytes'])} of {fmt_bytes(node['capacity_bytes'])} "
        f"{_node_words(node)} ({verdict})"
    )
    table = render(["part live at the peak", "bytes", "of the peak"], rows, head)
    notes = [part_of_node_note(hm["tier"], hm["capacity_bytes"], node)] if part else []
    if node["pipeline_stages"] > 1:
        notes.append(
            f"a node holds {node['pipeline_stages']} pipeline stages: each GPU is counted as "
            "the simulated stage's"
        )
    if engine_peak is not None and engine_peak != hm["peak_bytes"]:
        notes.append(engine_note(engine_peak, hm["peak_bytes"]))
    return table + "".join(f"\n{n}" for n in notes)


def engine_note(engine_peak: int, timeline_peak: int) -> str:
    """Why the simulated step's occupancy of the host tier differs from this timeline's peak,
    said for the side that is larger (the tier table shows the larger): the engine counts the
    staging chunks of multi-hop moves in flight, which the ordered timeline has no timing for;
    the timeline counts a CPU optimizer's step temporaries, which the engine does not move."""
    if engine_peak > timeline_peak:
        return (
            f"the simulated step's occupancy peaks higher, at {fmt_bytes(engine_peak)}: it "
            "counts the staging chunks of multi-hop moves in flight, which this timeline "
            "leaves out (the tier table's peak)"
        )
    return (
        f"the simulated step's occupancy peaks lower, at {fmt_bytes(engine_peak)}: it leaves "
        "out what this timeline adds beside the moves, such as a CPU optimizer's step "
        "temporaries (the tier table's peak is this timeline's)"
    )
