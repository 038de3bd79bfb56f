"""Invariants of a report beyond tests/invariant_checks.py's (docs/invariants.md, h to l),
and knobs of any machine at any factor: shared by benchmarks/explore_wide.py and
tests/test_invariants_wide.py.

    h  the step's parts add up to it (compute, the GPU optimizer, the exposed waits, the
       bubble); measured: how far the model's prices and the GPU optimizer exceed it
    i  each tier's peak holds at least its resident bytes (but offloaded activations); a
       memory timeline's tier peaks at the larger of the timeline's most and the engine's
    j  more capacity on the GPU's tier never turns a run that fits into one that does not
    k  a checkpoint never makes a step faster, nor its interval shorter than its steps
    l  wear arithmetic: what a flash tier is written in the step is its host bytes, and the
       day's, the NAND's, the P/E cycles' and the lifetime's figures follow from them
"""

from __future__ import annotations

import math
from typing import Any

REL = 1e-9
DAY_S = 86_400.0


def _close(a: float, b: float, rel: float = REL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)


def parts_add_up(report: dict[str, Any]) -> list[str]:
    """(h) time = compute + GPU optimizer + exposed transfer, collective and CPU + bubble."""
    st = report["step"]
    gpu_opt = st["optimizer_s"] if st["optimizer_on"] == "gpu" else 0.0
    keys = ("compute_s", "exposed_transfer_s", "exposed_collective_s", "exposed_cpu_s")
    added = sum(st[k] for k in keys) + gpu_opt + st["pipeline_bubble_s"]
    if _close(added, st["time_s"]):
        return []
    return [f"step parts add up to {added:.9g} s, not {st['time_s']:.9g} s"]


def priced_share(report: dict[str, Any]) -> float:
    """(h, measured) the model's prices (step.breakdown) and the GPU optimizer over the
    step: above 1 where they price more than the step took (docs/invariants.md)."""
    st = report["step"]
    gpu_opt = st["optimizer_s"] if st["optimizer_on"] == "gpu" else 0.0
    return (sum((st.get("breakdown") or {}).values()) + gpu_opt) / st["time_s"]


def peaks_hold(report: dict[str, Any]) -> list[str]:
    """(i) peak >= resident on every tier; a timeline's tier at the larger of its most and the
    engine's peak (tiersim/report/memory.py, host_memory.py)."""
    out = []
    for n, t in report["tiers"].items():
        # offloaded activations are held as they are written out and fetched back, not
        # from the step's start (docs/invariants.md): the peak holds the rest
        held = t["resident_bytes"] - t.get("classes", {}).get("activations", 0)
        if t["peak_bytes"] < held:
            out.append(
                f"tiers.{n}.peak_bytes {t['peak_bytes']} < resident {held} (but activations)"
            )
    for key, most in (
        ("memory_timeline", "peak_total_bytes"),
        ("host_memory_timeline", "peak_bytes"),
    ):
        m = report.get(key)
        if m and m["tier"] in report["tiers"]:
            t = report["tiers"][m["tier"]]
            engine = t.get("engine_peak_bytes", t["peak_bytes"])
            if t["peak_bytes"] != max(m[most], engine):
                out.append(
                    f"tiers.{m['tier']}.peak_bytes {t['peak_bytes']}: not the larger of the "
                    f"engine's {engine} and {key}.{most} {m[most]}"
                )
    return out


def still_fits(small: dict[str, Any], big: dict[str, Any]) -> list[str]:
    """(j) `big`: the same run with more capacity on the GPU's tier."""
    gpu = small["memory_timeline"]["tier"]
    out = []
    if small["fits"] and not big["fits"]:
        out.append(f"fits with {small['tiers'][gpu]['capacity_bytes']} B of {gpu}, not with more")
    for name, t in small["tiers"].items():
        if t["fits"] and not big["tiers"][name]["fits"]:
            out.append(f"tiers.{name} fits, not with more {gpu}")
    return out


def checkpoint_slows(plain: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """(k) `saved`: the same run with a checkpoint; its step is no faster than `plain`'s, its
    interval (steps and stall) no shorter than as many plain steps."""
    a, b = plain["step"]["time_s"], saved["step"]["time_s"]
    out = [f"checkpoint makes the step faster: {a:.9g} s -> {b:.9g} s"] if b < a * (1 - REL) else []
    ck = saved.get("checkpoint")
    if ck:
        wall = ck["interval_steps"] * b + ck["stall_s"]
        if wall < ck["interval_steps"] * a * (1 - REL):
            out.append(f"checkpoint interval {wall:.9g} s < {ck['interval_steps']} plain steps")
    return out


def wear_adds_up(report: dict[str, Any]) -> list[str]:
    """(l) each flash tier's wear figures from the bytes the step wrote to it."""
    out = []
    for name, w in (report.get("wear") or {}).items():
        t = report["tiers"][name]
        written = {c: float(n) for c, n in t.get("written_by_class", {}).items() if n > 0}
        if w["host_bytes_written_per_step_by_class"] != written:
            out.append(f"wear.{name} by class {w['host_bytes_written_per_step_by_class']}")
        host, nand = w["host_bytes_written_per_step"], w["nand_bytes_written_per_step"]
        spd, phys = w["steps_per_day"], w["physical_bytes"]
        want = {
            "host_bytes_written_per_step": float(t["bytes_written_per_step"]),
            "nand_bytes_written_per_step": host * w["write_amplification"],
            "host_bytes_written_per_day": host * spd,
            "nand_bytes_written_per_day": nand * spd,
            "pe_cycles_per_step": nand / phys,
            "pe_cycles_per_day": nand * spd / phys,
            "drive_writes_per_day": host * spd / w["capacity_bytes"],
        }
        if host > 0:
            want["pe_lifetime_days"] = w["pe_cycles"] / (nand * spd / phys)
            lives = [want["pe_lifetime_days"], w["rated_lifetime_days"] or math.inf]
            want["lifetime_days"] = min(lives)
        ck = report.get("checkpoint") or {}
        stall = ck["stall_s"] / ck["interval_steps"] if ck else 0.0
        want["steps_per_day_possible"] = DAY_S / (report["step"]["time_s"] + stall)
        out += [
            f"wear.{name}.{k} {w[k]!r}, from the bytes {v!r}"
            for k, v in want.items()
            if w[k] is None or not _close(w[k], v)
        ]
    return out


def knobs(machine: Any, factor: float) -> dict[str, dict[str, Any]]:
    """One knob of `machine` (tiersim's resolved Hardware) each, at `factor` x its figure
    (math.inf: unlimited), as hardware overrides: every link, tier port, the network's two
    bandwidths, the GPU's peaks and the CPU's optimizer rates (those two at 1e6 x for inf)."""

    def bw(v: float) -> str:
        return "unlimited" if math.isinf(factor) else f"{v * factor!r} B/s"

    finite = 1e6 if math.isinf(factor) else factor
    out: dict[str, dict[str, Any]] = {
        f"{n} link": {"links": {n: {"bandwidth": bw(link.bandwidth)}}}
        for n, link in machine.links.items()
    }
    for n, t in machine.tiers.items():
        out[f"{n} tier"] = {
            "tiers": {n: {"read_bandwidth": bw(t.read_bw), "write_bandwidth": bw(t.write_bw)}}
        }
    net = machine.network
    out["nvlink"] = {"network": {"intra_node_bandwidth": bw(net.intra_node_bandwidth)}}
    out["network"] = {"network": {"inter_node_bandwidth": bw(net.inter_node_bandwidth)}}
    peaks = {k: f"{v * finite!r} FLOP/s" for k, v in machine.gpu.peak_flops.items()}
    out["gpu"] = {"gpu": {"peak_flops": peaks}}
    cpu = {"optimizer_rate": f"{machine.cpu.optimizer_rate * finite!r} param/s"}
    if machine.cpu.adam_kernel_rate is not None:
        cpu["adam_kernel_rate"] = f"{machine.cpu.adam_kernel_rate * finite!r} param/s"
    out["cpu"] = {"cpu": cpu}
    return out


def unlimited(machine: Any) -> dict[str, Any]:
    """Hardware overrides giving every link, tier port and the network of `machine` unlimited
    bandwidth and no latency (tests/invariant_checks.py UNLIMITED, for any preset)."""
    zero = {"latency": "0 s"}
    return {
        "links": {n: {"bandwidth": "unlimited", **zero} for n in machine.links},
        "tiers": {
            n: {"read_bandwidth": "unlimited", "write_bandwidth": "unlimited", **zero}
            for n in machine.tiers
        },
        "network": {
            f"{side}_node_{k}": v
            for side in ("intra", "inter")
            for k, v in (("bandwidth", "unlimited"), ("latency", "0 s"), ("efficiency", 1.0))
        },
    }
