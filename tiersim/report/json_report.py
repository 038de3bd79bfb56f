"""Turning results into the JSON report (DESIGN.md §2) and terminal tables.

Reporting reads result objects only; it never reaches into the engine's internals.
"""

from __future__ import annotations

import math
from typing import Any

from tiersim import __version__
from tiersim.analysis.checkpoint import CheckpointCost, checkpoint_section
from tiersim.config.framework import resolved_prefetch_depth
from tiersim.config.schema import Scenario, Tier
from tiersim.core.units import DAY_S
from tiersim.engine.figures import laid_out, report_figures
from tiersim.engine.results import StepResult, TierStats
from tiersim.hardware.resources import NetChannel, Network
from tiersim.report.checkpoint_wear import unbudgeted_wear
from tiersim.report.host_memory import with_host_fit
from tiersim.report.json_layout import LINK_LAYOUT, STEP_LAYOUT, TIER_LAYOUT
from tiersim.report.json_text import json_text
from tiersim.report.memory import section_of, with_timeline_fit
from tiersim.report.offload import offload_section
from tiersim.report.run_view import RunView
from tiersim.report.sim_text import UNSETTLED, UNSETTLED_WORDS
from tiersim.report.target import target_section
from tiersim.report.utilization import utilization
from tiersim.report.wear import json_number, wear_section
from tiersim.state.activations import GROUPS, accounting_for
from tiersim.state.host_timeline import HostTimeline
from tiersim.state.inventory import Inventory, activation_items, model_summary
from tiersim.state.resolved import Resolved, resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.timeline import Timeline
from tiersim.workload.comms import capacities, network_nics


def inventory_section(inv: Inventory) -> dict[str, Any]:
    out = {
        "dense": inv.dense.as_dict(),
        "per_gpu": inv.per_gpu.as_dict(),
        "pipeline_stage": inv.stage,
        "stage_parameters_per_gpu": inv.stage_parameters,
        "inflight_microbatches": inv.inflight_microbatches,
        "sharded": inv.sharded,
    }
    if inv.experts_per_gpu is not None:  # a mixture-of-experts model: per_gpu in two parts
        experts = inv.experts_per_gpu.as_dict()
        out["per_gpu_routed_experts"] = experts
        out["per_gpu_other"] = {c: b - experts.get(c, 0) for c, b in inv.per_gpu.as_dict().items()}
    return out


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


def activations_section(s: Scenario, inv: Inventory) -> dict[str, Any]:
    """How activations are counted and one GPU's bytes by tensor group and tensor, largest
    first (`tiersim inventory --format json`)."""
    acc = accounting_for(s)
    items = activation_items(resolve(s), inv)
    groups = dict.fromkeys(GROUPS, 0.0)
    for i in items:
        groups[i.group] += i.per_gpu_bytes
    return {
        "accounting": {
            "implementation": acc.implementation,
            "attention_kernel": acc.kernel,
            "attention_dropout": acc.attention_dropout,
            "hidden_dropout": acc.hidden_dropout,
            "compute_bytes_per_value": acc.compute_bytes,
            "device": acc.device,
        },
        "per_gpu_bytes_by_group": {g: round(v) for g, v in groups.items()},
        "items": [
            {
                "group": i.group,
                "name": i.name,
                "per_gpu_bytes": round(i.per_gpu_bytes),
                "in_every_layer": i.per_layer,
            }
            for i in items
        ],
    }


def inventory_report(
    s: Scenario,
    inv: Inventory,
    res: Resolved | None = None,
    timeline: Timeline | None = None,
    host: HostTimeline | None = None,
) -> dict[str, Any]:
    """`res`, `timeline`: the scenario's resolved form and the GPU's memory timeline, where
    the caller has them (a run: tiersim.runner.Run); else worked out here. `host`: the host's
    memory timeline (engine/host_memory.py, built by the caller: a run, or `tiersim
    inventory`), its section and fit; None: no section (nothing in host memory)."""
    res = resolve(s) if res is None else res
    timeline = gpu_timeline(res, inv) if timeline is None else timeline
    report = {
        "scenario": s.name,
        "tiersim_version": __version__,
        "model": model_summary(res.model),
        "inventory": inventory_section(inv),
        "tiers": tiers_section(inv),
        "fits": all(use.fits for use in inv.tiers.values()),
        # the GPU's allocations and frees over the step: its peak decides whether it fits
        "memory_timeline": section_of(timeline),
    }
    with_timeline_fit(report)
    with_host_fit(report, host)  # the host's timeline, where the step uses host memory
    return report


def to_json(report: dict[str, Any]) -> str:
    """`json.dumps(report, indent=2, allow_nan=False)`'s text (json_text: the same, faster)."""
    return json_text(report)


def step_section(s: Scenario, r: StepResult) -> dict[str, Any]:
    derived = {
        # "cpu": optimizer_s runs beside the GPU, not in its time
        "optimizer_on": s.placement.optimizer_compute,
        "optimizer_step": s.training.optimizer_step,
        "tokens_per_s": r.tokens_per_s,
        **utilization(s, r),  # model FLOPs per token, per second per GPU, MFU
        "seq_len": s.seq_len,
        "seq_len_from": _seq_len_from(s),
    }
    # the step's figures as the figure map names them (engine.results.StepResult)
    return laid_out(STEP_LAYOUT, {**report_figures(r), **derived})


def _seq_len_from(s: Scenario) -> str:
    if s.training.seq_len is not None:
        return "training.seq_len"
    return "model.max_positions" if s.model.max_positions else "default"


def link_bandwidth(s: Scenario, res: Resolved, name: str) -> float:
    """Bytes per second per direction: a hardware link's, or for `nvlink` / `network` what one
    GPU's collectives get (a group with k members per node drives k NICs: k x a NIC's)."""
    link = s.hardware.links.get(name)
    return link.bandwidth if link is not None else capacities(res)[Network(NetChannel(name))]


def bandwidth_share(nbytes: float, bandwidth: float, step_s: float) -> float | None:
    """The share of a resource's bandwidth used over the step: bytes / (bandwidth x step time),
    the step with its share of a checkpoint's stall (StepResult.period_s: the checkpoint's
    bytes per step are averaged over the same interval); None for an unlimited resource or a
    step of no time."""
    if not math.isfinite(bandwidth) or step_s <= 0:
        return None
    return nbytes / (bandwidth * step_s)


def links_section(s: Scenario, res: Resolved, r: StepResult) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ls in r.links.items():
        bw = link_bandwidth(s, res, name)
        derived = {
            # JSON has no infinity: an unlimited link is null
            "bandwidth_per_direction": json_number(bw),
            # bytes / (bandwidth x step) per direction: `utilization` is the time it is busy
            "bandwidth_utilization_by_direction": {
                d: bandwidth_share(n, bw, r.period_s) for d, n in ls.bytes_by_direction.items()
            },
        }
        # the link's figures as the figure map names them (engine.results.LinkStats)
        out[name] = laid_out(LINK_LAYOUT, {**report_figures(ls), **derived})
    if "network" in out:  # how many of the node's NICs one GPU's rings drive at once
        out["network"]["nics_per_gpu"] = network_nics(res)
        # JSON has no infinity: an unlimited NIC is null, as an unlimited link's bandwidth
        out["network"]["nic_bandwidth"] = json_number(s.hardware.network.inter_node_bandwidth)
    return out


def run_tiers_section(s: Scenario, inv: Inventory, r: StepResult) -> dict[str, Any]:
    out = {}
    for name, ts in r.tiers.items():
        derived = {
            "capacity_bytes": whole(ts.capacity_bytes),
            # training state as `tiersim inventory` says, plus a checkpoint target's last version
            "resident_bytes": inv.tiers[name].resident_bytes + ts.checkpoint_bytes,
            "fits": ts.fits and inv.tiers[name].fits,
            "read_by_class": ts.read_by_source,  # the checkpoint's beside the classes'
            "written_by_class": ts.written_by_source,
            "classes": inv.tiers[name].classes,
            "ports": ports_section(s.hardware.tiers[name], ts, r.period_s),
        }
        # the tier's figures as the figure map names them (engine.results.TierStats)
        out[name] = laid_out(TIER_LAYOUT, {**report_figures(ts), **derived})
    return out


def ports_section(tier: Tier, ts: TierStats, step_s: float) -> dict[str, Any]:
    """A tier's read and write ports over the step: what crossed each (transfers only, not the
    GPU's kernels reading its own memory), the time that takes at the port's full bandwidth,
    and the share of its bandwidth used (a port is what binds a transfer slower than its link:
    HBF's write port under the HBF link)."""
    out = {}
    for port, bw, nbytes in (
        ("read", tier.read_bw, ts.bytes_read),
        ("write", tier.write_bw, ts.bytes_written),
    ):
        out[port] = {
            "bandwidth": json_number(bw),
            "bytes_per_step": nbytes,
            "full_rate_s": nbytes / bw if math.isfinite(bw) else 0.0,
            "bandwidth_utilization": bandwidth_share(nbytes, bw, step_s),
        }
    return out


COLLECTIVE_CHANNELS = ("nvlink", "network")


def bottleneck(report: dict[str, Any]) -> dict[str, Any] | None:
    """The tier port or link direction whose bandwidth the step uses most (None when nothing
    with a finite bandwidth moved anything)."""
    found: list[tuple[float, str, str]] = []
    for name, tier in report["tiers"].items():
        for port, figures in tier["ports"].items():
            if figures["bandwidth_utilization"]:
                found.append((figures["bandwidth_utilization"], f"{name} {port} port", "port"))
    for name, link in report["links"].items():
        for direction, share in link["bandwidth_utilization_by_direction"].items():
            if share:
                # a collective channel is shared by groups (tensor, data, ...), not directions
                what = (
                    f"{name} ({direction} group)"
                    if name in COLLECTIVE_CHANNELS
                    else (f"{name} link {direction}")
                )
                found.append((share, what, "link"))
    if not found:
        return None
    share, resource, kind = max(found)
    return {"resource": resource, "kind": kind, "bandwidth_utilization": share}


def checkpoint_report(s: Scenario, r: StepResult) -> dict[str, Any] | None:
    """The durable-checkpoint section (none when neither an interval nor a failure rate is
    configured)."""
    run = r.checkpoint
    if run is None:
        return None
    cost = CheckpointCost.of_run(run, s.checkpoint.mode)
    every = run.interval_steps if run.interval_steps is not None else None
    section = checkpoint_section(every_steps=every, step_s=r.time_s, cost=cost, mtbf_s=run.mtbf_s)
    return {
        "mode": s.checkpoint.mode,
        "target": s.checkpoint.target,
        **section,
        "interval_basis": run.interval_basis,
        # the tier whose wear budget set an auto interval, where one did
        **({"interval_budget_tier": run.interval_budget_tier} if run.interval_budget_tier else {}),
        # only where it did not settle: a settled run's section is as it was
        **({} if run.steady else {"steady": False}),
    }


def target_wear_at_optimum(
    ck: dict[str, Any], wear: dict[str, Any] | None, paced: bool = False
) -> dict[str, float | None] | None:
    """What the checkpoint target (a flash tier) would wear at Daly's optimum instead of the
    interval simulated: its checkpoint bytes per step scale by interval / optimum, the rest of
    what it holds is written as before. `paced`: the steps a day are those the step allows
    (no budget.steps_per_day), so they follow the stall's share of each step at the optimum
    (StepResult.period_s)."""
    best = ck.get("optimal_interval_steps")
    every = ck.get("interval_steps")
    if wear is None or not isinstance(best, dict) or not best.get("daly") or not every:
        return None
    written = wear["host_bytes_written_per_step_by_class"]
    checkpoint = written.get("checkpoint", 0.0) * every / best["daly"]
    per_day = wear["host_bytes_written_per_step"] - written.get("checkpoint", 0.0) + checkpoint
    steps = wear["steps_per_day"]
    if paced:
        step_s = ck["interval_s"] / every
        steps = DAY_S / (step_s + ck["stall_s"] / best["daly"])
    per_day *= steps
    cycles_per_day = per_day * wear["write_amplification"] / wear["physical_bytes"]
    rated = wear.get("rated_total_bytes_written")
    cycles = wear["pe_cycles"] / cycles_per_day if cycles_per_day > 0 else None
    rated_days = rated / per_day if rated is not None and per_day > 0 else None
    lives = [d for d in (cycles, rated_days) if d is not None]
    return {
        "interval_steps": best["daly"],
        "host_bytes_written_per_day": per_day,
        "drive_writes_per_day": per_day / wear["capacity_bytes"],
        "lifetime_days": min(lives) if lives else None,  # the lesser of the two below
        "pe_lifetime_days": cycles,
        "rated_lifetime_days": rated_days,
    }


def run_report(run: RunView) -> dict[str, Any]:
    """The report of one run, read off its result and facts (the wear remedies that change the
    step: the run's variants, report.wear.wear_section)."""
    s, inv, r = run.scenario, run.inventory, run.result
    report = inventory_report(s, inv, run.resolved, run.memory_timeline, run.host_timeline)
    report["tiers"] = run_tiers_section(s, inv, r)
    with_timeline_fit(report)
    with_host_fit(report, run.host_timeline)
    report["step"] = step_section(s, r)
    report["links"] = links_section(s, run.resolved, r)
    report["step"]["bottleneck"] = bottleneck(report)
    report["wear"] = wear_section(s, r, run.simulated)
    report["checkpoint"] = checkpoint_report(s, r)
    if report["checkpoint"] is not None:
        target_wear = report["wear"].get(s.checkpoint.target)
        report["checkpoint"]["target_wear_at_optimum"] = target_wear_at_optimum(
            report["checkpoint"], target_wear, paced=s.budget.steps_per_day is None
        )
        written = r.checkpoint.written_by_tier if r.checkpoint else {}
        unbudgeted = unbudgeted_wear(s, written, report["checkpoint"], report["wear"])
        if unbudgeted:
            report["checkpoint"]["unbudgeted_wear"] = unbudgeted
    offload = offload_section(s, run.resolved.execution.offload, r.offload, run.tiling_cost_s)
    if offload is not None:
        report["offload"] = offload
    target = target_section(s, report["step"], report["checkpoint"])
    if target is not None:  # training.tokens_per_day or total_tokens given
        report["target"] = target
    report["sim"] = {
        "events": r.events,
        "prefetch_depth": r.prefetch_depth,
        "steps_simulated": r.steps_simulated,
        "steady_state": r.steady_state,
        "micro_batches_simulated": list(r.micro_batches_simulated),
    }
    configured = resolved_prefetch_depth(s)
    if configured != r.prefetch_depth:  # cut to what fits ahead (engine/simulate.py)
        report["sim"]["prefetch_depth_configured"] = configured
    if r.steady_state_why is not None:  # a fallback to full simulation, and why
        report["sim"]["steady_state_why"] = r.steady_state_why
    if r.measured_steps_why is not None:  # steps that alternate (their mean) or settle late
        report["sim"]["measured_steps"] = r.measured_steps
        report["sim"]["measured_steps_why"] = r.measured_steps_why
    if r.steps_what is not None:  # a step compared with the measured one: which steps ran
        report["sim"]["steps_simulated_what"] = r.steps_what
    if not r.settled:  # the runs' bound reached, the steps still changing: said, not silent
        report["sim"]["settled"] = False
        report["sim"]["warnings"] = [{"code": UNSETTLED, "message": UNSETTLED_WORDS}]
    return report
