"""Turning results into the JSON report (DESIGN.md §2) and terminal tables.

Reporting reads result objects only; it never reaches into the engine's internals.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tiersim import __version__
from tiersim.checkpoint import CheckpointCost, checkpoint_section
from tiersim.comms import capacities, network_nics
from tiersim.inventory import ZERO_SHARDS, Inventory, model_summary
from tiersim.model import build_model
from tiersim.results import StepResult
from tiersim.schema import STATE_CLASSES, Scenario
from tiersim.table import render
from tiersim.units import fmt_bytes, fmt_count, fmt_rate, fmt_time
from tiersim.wear_report import wear_section


def inventory_section(inv: Inventory) -> dict[str, Any]:
    return {
        "dense": inv.dense.as_dict(),
        "per_gpu": inv.per_gpu.as_dict(),
        "pipeline_stage": inv.stage,
        "stage_parameters_per_gpu": inv.stage_parameters,
        "inflight_microbatches": inv.inflight_microbatches,
        "sharded": inv.sharded,
    }


def whole(nbytes: float) -> int | float:
    """Byte counts as integers in JSON, like every other count (a capacity is parsed as a float)."""
    return int(nbytes) if math.isfinite(nbytes) and float(nbytes).is_integer() else nbytes


def tiers_section(inv: Inventory) -> dict[str, Any]:
    return {
        name: {
            "capacity_bytes": whole(use.capacity_bytes),
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
        f"data {par.data}, {_sharding(s, inv)}; {inv.inflight_microbatches:g} "
        f"{'micro-batch' if inv.inflight_microbatches == 1 else 'micro-batches'} in flight"
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
    tiers = render(["tier", "resident", "capacity", "used", "resident fits"], tier_rows)
    notes = [
        "Resident state only: `tiersim run` adds what the step holds at its peak (prefetched "
        "weights, staging, offloaded activations, checkpoint versions) and says whether that fits."
    ]
    if s.model.parameters is not None and s.model.activation_bytes_per_layer is None:
        notes.append(
            "Activations are 0 B: a generic model ('parameters') has no dimensions to derive "
            "them from; give model.activation_bytes_per_layer."
        )
    return f"{classes}\n\n{tiers}\n\n" + "\n".join(notes)


def _sharding(s: Scenario, inv: Inventory) -> str:
    """'ZeRO 2', or with per-class overrides what is sharded in fact: 'ZeRO 0 + weights'."""
    stage = s.parallel.zero_stage
    by_stage = set(ZERO_SHARDS[stage])
    actual = {c for c, on in inv.sharded.items() if on}
    if actual == by_stage:
        return f"ZeRO {stage}"
    added, dropped = sorted(actual - by_stage), sorted(by_stage - actual)
    return f"ZeRO {stage}" + "".join(f" + {c}" for c in added) + "".join(f" - {c}" for c in dropped)


# --- the simulated step ------------------------------------------------------------------------


def step_section(r: StepResult, optimizer_on: str = "gpu") -> dict[str, Any]:
    return {
        "optimizer_on": optimizer_on,  # "cpu": optimizer_s runs beside the GPU, not in its time
        "time_s": r.time_s,
        "compute_s": r.compute_s,
        "recompute_s": r.recompute_s,
        "optimizer_s": r.optimizer_s,
        "exposed_transfer_s": r.exposed_transfer_s,
        "exposed_cpu_s": r.exposed_cpu_s,
        "pipeline_bubble_s": r.pipeline_bubble_s,
        "overlap": r.overlap,
        "tokens_per_s": r.tokens_per_s,
        "tokens_per_step": r.tokens_per_step,
        "micro_batches": r.micro_batches,
    }


def link_bandwidth(s: Scenario, name: str) -> float:
    """Bytes per second per direction: a hardware link's, or for `nvlink` / `network` what one
    GPU's collectives get (a group with k members per node drives k NICs: k x a NIC's)."""
    link = s.hardware.links.get(name)
    return link.bandwidth if link is not None else capacities(s)[("net", name)]


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def links_section(s: Scenario, r: StepResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: {
            "bytes": ls.bytes,
            "busy_s": ls.busy_s,
            "utilization": ls.utilization,
            # JSON has no infinity: an unlimited link is null
            "bandwidth_per_direction": _finite(link_bandwidth(s, name)),
            "bytes_by_direction": ls.bytes_by_direction,
        }
        for name, ls in r.links.items()
    }
    if "network" in out:  # how many of the node's NICs one GPU's rings drive at once
        out["network"]["nics_per_gpu"] = network_nics(s)
        out["network"]["nic_bandwidth"] = s.hardware.network.inter_node_bandwidth
    return out


def run_tiers_section(inv: Inventory, r: StepResult) -> dict[str, Any]:
    out = {}
    for name, ts in r.tiers.items():
        out[name] = {
            "capacity_bytes": whole(ts.capacity_bytes),
            # training state as `tiersim inventory` says, plus a checkpoint target's last version
            "resident_bytes": inv.tiers[name].resident_bytes + ts.checkpoint_bytes,
            "checkpoint_bytes": ts.checkpoint_bytes,
            "peak_bytes": ts.peak_bytes,
            "mean_bytes": ts.mean_bytes,
            "fits": ts.fits and inv.tiers[name].fits,
            "bytes_read_per_step": ts.bytes_read,
            "bytes_written_per_step": ts.bytes_written,
            "read_by_class": ts.read_by_class,
            "written_by_class": ts.written_by_class,
            "classes": inv.tiers[name].classes,
        }
    return out


def checkpoint_report(s: Scenario, r: StepResult) -> dict[str, Any] | None:
    """The durable-checkpoint section (none when neither an interval nor a failure rate is
    configured)."""
    run = r.checkpoint
    if run is None:
        return None
    cost = CheckpointCost(run.bytes, run.write_s, run.stall_s, run.read_back_s, run.restart_s)
    every = run.interval_steps if run.interval_steps is not None else None
    section = checkpoint_section(every_steps=every, step_s=r.time_s, cost=cost, mtbf_s=run.mtbf_s)
    return {
        "mode": s.checkpoint.mode,
        "target": s.checkpoint.target,
        **section,
        "interval_basis": run.interval_basis,
    }


def target_wear_at_optimum(
    ck: dict[str, Any], wear: dict[str, Any] | None
) -> dict[str, float | None] | None:
    """What the checkpoint target (a flash tier) would wear at Daly's optimum instead of the
    interval simulated: its checkpoint bytes per step scale by interval / optimum, the rest of
    what it holds is written as before."""
    best = ck.get("optimal_interval_steps")
    every = ck.get("interval_steps")
    if wear is None or not isinstance(best, dict) or not best.get("daly") or not every:
        return None
    written = wear["host_bytes_written_per_step_by_class"]
    checkpoint = written.get("checkpoint", 0.0) * every / best["daly"]
    per_day = wear["host_bytes_written_per_step"] - written.get("checkpoint", 0.0) + checkpoint
    per_day *= wear["steps_per_day"]
    cycles_per_day = per_day * wear["write_amplification"] / wear["physical_bytes"]
    rated = wear.get("rated_total_bytes_written")
    return {
        "interval_steps": best["daly"],
        "host_bytes_written_per_day": per_day,
        "drive_writes_per_day": per_day / wear["capacity_bytes"],
        "lifetime_days": wear["pe_cycles"] / cycles_per_day if cycles_per_day > 0 else None,
        "rated_lifetime_days": rated / per_day if rated is not None and per_day > 0 else None,
    }


def run_report(s: Scenario, inv: Inventory, r: StepResult) -> dict[str, Any]:
    report = inventory_report(s, inv)
    report["tiers"] = run_tiers_section(inv, r)
    report["step"] = step_section(r, s.placement.optimizer_compute)
    report["links"] = links_section(s, r)
    report["wear"] = wear_section(s, r)
    report["checkpoint"] = checkpoint_report(s, r)
    if report["checkpoint"] is not None:
        target_wear = report["wear"].get(s.checkpoint.target)
        report["checkpoint"]["target_wear_at_optimum"] = target_wear_at_optimum(
            report["checkpoint"], target_wear
        )
    report["sim"] = {
        "events": r.events,
        "wall_s": r.wall_s,
        "prefetch_depth": r.prefetch_depth,
        "steps_simulated": s.simulation.warmup_steps + 2,
    }
    return report


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"


def _step_rows(st: dict[str, Any]) -> list[list[str]]:
    """The step split into what the GPU did and what it waited on (the shares add up to 100 %);
    a CPU optimizer's time is shown beside them, its exposed part among them."""
    t = st["time_s"]
    on_cpu = st.get("optimizer_on") == "cpu"
    rows = [["step time", fmt_time(t), "100.0 %"]]
    for key, label in (
        ("compute_s", "GPU compute (fwd+bwd+recompute)"),
        ("recompute_s", "  of which recompute"),
        ("optimizer_s", "CPU optimizer (beside the GPU)" if on_cpu else "GPU optimizer"),
        ("pipeline_bubble_s", "pipeline bubble (other stages)"),
        ("exposed_transfer_s", "exposed transfer (GPU waits)"),
        ("exposed_cpu_s", "exposed CPU optimizer"),
    ):
        if key == "pipeline_bubble_s" and not st[key]:
            continue
        share = "-" if key == "optimizer_s" and on_cpu else _pct(st[key], t)
        rows.append([label, fmt_time(st[key]), share])
    return rows


def _step_head(report: dict[str, Any]) -> str:
    st = report["step"]
    overlap = "-" if st["overlap"] is None else f"{100 * st['overlap']:.1f} %"
    tokens = f"{st['tokens_per_s']:,.0f} tokens/s over all the job's GPUs"
    ck = report.get("checkpoint") or {}
    if ck.get("mtbf_s") is not None and ck.get("goodput") is not None:
        tokens += f" ({st['tokens_per_s'] * ck['goodput']:,.0f} after checkpoints and failures)"
    return (
        f"{report['scenario']}: {fmt_time(st['time_s'])} per step, {tokens}, transfer "
        f"overlapped with compute {overlap}"
    )


def step_tables(report: dict[str, Any]) -> str:
    st = report["step"]
    step = render(["", "time", "share"], _step_rows(st), _step_head(report))
    links = sorted(report["links"].items(), key=lambda kv: -kv[1]["busy_s"])
    link_rows = [
        [
            n,
            _bandwidth(v["bandwidth_per_direction"]),
            fmt_bytes(v["bytes"]),
            fmt_time(v["busy_s"]),
            f"{100 * v['utilization']:.1f} %",
        ]
        for n, v in links
    ]
    tier_rows = [
        [
            n,
            fmt_bytes(v["resident_bytes"]),
            fmt_bytes(v["peak_bytes"]),
            fmt_bytes(v["capacity_bytes"]),
            fmt_bytes(v["bytes_read_per_step"]),
            fmt_bytes(v["bytes_written_per_step"]),
            "yes" if v["fits"] else "NO",
        ]
        for n, v in report["tiers"].items()
    ]
    sim = report["sim"]
    # as `tiersim wear` orders them: budgets failed, then met, then tiers without a budget
    wear = sorted(
        report.get("wear", {}).values(),
        key=lambda v: (v["within_budget"] is None, v["within_budget"] is True),
    )
    extras = [v["verdict"] for v in wear]
    extras.append(
        f"Simulated {sim['steps_simulated']} steps (warm-up, measured, trailing): "
        f"{sim['events']:,} events in {fmt_time(sim['wall_s'])} of engine time."
    )
    if report.get("checkpoint"):
        extras.append(_checkpoint_line(report["checkpoint"], report["step"]["time_s"]))
    link_table = render(["link", "bandwidth/dir", "bytes/step", "busy", "utilization"], link_rows)
    tier_table = render(
        ["tier", "resident", "peak", "capacity", "read/step", "written/step", "fits"], tier_rows
    )
    network = report["links"].get("network")
    if network and network["nics_per_gpu"] > 1:
        link_table += "\n" + _network_note(network)
    return "\n\n".join([step, link_table, tier_table, *extras])


def _network_note(network: dict[str, Any]) -> str:
    nics, nic, bw = (
        network["nics_per_gpu"],
        network["nic_bandwidth"],
        network["bandwidth_per_direction"],
    )
    note = (
        f"network: a group with {nics} GPUs in each node drives {nics} NICs at once (one NCCL "
        f"ring each), so one GPU's ring bytes move at up to {nics} x {fmt_rate(nic)}"
    )
    if bw is not None and bw < nics * nic * (1 - 1e-9):
        note += f", capped at the NVLink's {fmt_rate(bw)}"
    return note


def _bandwidth(bw: float | None) -> str:
    return "unlimited" if bw is None else fmt_rate(bw)


def _checkpoint_line(ck: dict[str, Any], step_s: float) -> str:
    every = "not set" if ck["interval_steps"] is None else f"every {ck['interval_steps']} steps"
    basis = {
        "daly": "auto: Daly's optimum",
        "drain": "auto: the drain, longer than Daly's optimum",
        "wear budget": f"auto: {ck['target']}'s wear budget",
    }
    if ck.get("interval_basis") in basis:
        every += f", {basis[ck['interval_basis']]}"
    line = (
        f"Checkpoint ({ck['mode']} to {ck['target']}, {every}): {fmt_bytes(ck['bytes'])} per "
        f"GPU, written in {fmt_time(ck['write_s'])}, training stalls {fmt_time(ck['stall_s'])}; "
        f"recovery {fmt_time(ck['recovery_s'] or 0)}"
    )
    if ck.get("mtbf_s") is None:
        stalls = "" if ck.get("goodput") is None else f" {100 * ck['goodput']:.4g} %"
        return line + f"; no failure rate set (failures.mtbf): goodput{stalls} counts stalls only"
    goodput = "-" if ck["goodput"] is None else f"{100 * ck['goodput']:.2f} %"
    line += f", goodput {goodput} (job MTBF {fmt_time(ck['mtbf_s'])})"
    best, at_best = ck.get("optimal_interval_steps"), ck.get("goodput_at_optimum")
    if isinstance(best, dict) and best.get("daly") and at_best is not None:
        n = best["daly"]
        every = f"every {n} step{'s' * (n != 1)}"
        optimum_s = ck["optimal_interval_s"]["daly"]
        if optimum_s < (n - 1) * step_s:  # raised: no interval may be shorter than the drain
            line += f"; Daly's optimum, {fmt_time(optimum_s)}, is under the drain: {every}"
        else:
            line += f"; Daly's optimum {every}"
        line += f": {100 * at_best:.2f} %"
        at_opt = ck.get("target_wear_at_optimum")
        if at_opt is not None and n != ck["interval_steps"]:
            line += f" ({ck['target']} then {at_opt['drive_writes_per_day']:.3g} drive writes/day, "
            line += _wear_out(at_opt["lifetime_days"], at_opt["rated_lifetime_days"]) + ")"
    return line


def _wear_out(cycles_days: float | None, rated_days: float | None) -> str:
    if rated_days is not None and (cycles_days is None or rated_days < cycles_days):
        return f"past its rated bytes written in {_lifetime(rated_days)}"
    return f"worn out in {_lifetime(cycles_days)}"


def _lifetime(days: float | None) -> str:
    if days is None:
        return "never"
    years = days / 365.0
    return f"{years:.3g} years" if years >= 1 else f"{days:.3g} days"
