"""The timing model's invariants as checks on a report.json (docs/invariants.md), shared by
tests/test_invariants_newer.py and benchmarks/explore_invariants.py.

Scenarios here run on the `h200-hbf` preset (HBM, DRAM, NVMe and HBF tiers; PCIe, NVMe and
HBF links; NVLink and the network): FASTER names one knob each, raised fourfold.
"""

from __future__ import annotations

import copy
from typing import Any

# One knob of the h200-hbf preset each, at 4 x the preset's figure (the preset's in comments).
FASTER: dict[str, dict[str, Any]] = {
    "nvlink": {"network": {"intra_node_bandwidth": "1800 GB/s"}},  # 450 GB/s
    "network": {"network": {"inter_node_bandwidth": "1600 Gb/s"}},  # 400 Gb/s
    "pcie": {"links": {"pcie": {"bandwidth": "200 GB/s"}}},  # 50 GB/s
    "dram": {"tiers": {"dram": {"bandwidth": "460 GB/s"}}},  # 115 GB/s
    "nvme link": {"links": {"nvme": {"bandwidth": "56 GB/s"}}},  # 14 GB/s
    "nvme tier": {
        "tiers": {"nvme": {"read_bandwidth": "52 GB/s", "write_bandwidth": "26.4 GB/s"}}
    },  # 13 and 6.6 GB/s
    "hbf link": {"links": {"hbf": {"bandwidth": "6.4 TB/s"}}},  # 1.6 TB/s
    "hbf tier": {
        "tiers": {"hbf": {"read_bandwidth": "6.4 TB/s", "write_bandwidth": "200 GB/s"}}
    },  # 1.6 TB/s and 50 GB/s
    "hbm": {"tiers": {"hbm": {"bandwidth": "19.2 TB/s"}}},  # 4.8 TB/s
    "gpu": {
        "gpu": {
            "peak_flops": {
                "bf16": "3956 TFLOP/s",
                "fp16": "3956 TFLOP/s",
                "fp8": "7916 TFLOP/s",
                "tf32": "1976 TFLOP/s",
                "fp32": "268 TFLOP/s",
            }
        }
    },  # 989, 989, 1979, 494, 67 TFLOP/s
    "cpu": {"cpu": {"optimizer_rate": "0.7 Gparam/s", "adam_kernel_rate": "3.176 Gparam/s"}},
}

# the tiny dense model every exploration draws from (MoE keys added where drawn)
MODEL = {
    "layers": 4,
    "hidden": 256,
    "heads": 8,
    "ffn_hidden": 1024,
    "vocab": 1024,
    "max_positions": 1024,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
}
NO_LIMIT = {"bandwidth": "unlimited", "latency": "0 s"}
NO_PORT_LIMIT = {**NO_LIMIT, "read_bandwidth": "unlimited", "write_bandwidth": "unlimited"}
UNLIMITED = {
    "tiers": {t: NO_PORT_LIMIT for t in ("hbm", "dram", "nvme", "hbf")},
    "links": {link: NO_LIMIT for link in ("pcie", "nvme", "hbf")},
    "network": {
        "intra_node_bandwidth": "unlimited",
        "inter_node_bandwidth": "unlimited",
        "intra_node_latency": "0 s",
        "inter_node_latency": "0 s",
        "intra_node_efficiency": 1.0,
        "inter_node_efficiency": 1.0,
    },
}


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def faster_scenario(raw: dict[str, Any], knob: str) -> dict[str, Any]:
    return merge(raw, {"hardware": FASTER[knob]})


def unlimited_scenario(raw: dict[str, Any]) -> dict[str, Any]:
    return merge(raw, {"hardware": UNLIMITED})


TOL = 1e-9
# shares the report's own check (tiersim/report/invariants.py, on every report) leaves out:
# it bounds each `utilization`; these are shares of the step too
SHARES = ("overlap", "mfu", "share_of_step", "goodput")


def _numbers(x: Any, path: str = ""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(x, int | float) and not isinstance(x, bool):
        yield path, x


def _shares(report: dict[str, Any]) -> list[str]:
    return [
        f"share above 1: {path} = {v}"
        for path, v in _numbers(report)
        if path.rsplit(".", 1)[-1] in SHARES and v > 1 + TOL
    ]


def _classes_conserved(report: dict[str, Any]) -> list[str]:
    """Every byte of a class read out of a tier is written into another (the report's own
    check adds each tier's classes to its totals, not the tiers to one another)."""
    read: dict[str, int] = {}
    written: dict[str, int] = {}
    for t in report["tiers"].values():
        for cls, n in t.get("read_by_class", {}).items():
            read[cls] = read.get(cls, 0) + n
        for cls, n in t.get("written_by_class", {}).items():
            written[cls] = written.get(cls, 0) + n
    return [] if read == written else [f"classes read {read} != written {written}"]


def _fits_agree(report: dict[str, Any]) -> list[str]:
    out = []
    for name, t in report["tiers"].items():
        if t["fits"] != (t["peak_bytes"] <= t["capacity_bytes"]):
            out.append(
                f"tiers.{name}.fits {t['fits']} with peak {t['peak_bytes']} "
                f"of {t['capacity_bytes']}"
            )
    for key in ("memory_timeline", "host_memory_timeline"):
        m = report.get(key)
        total = "peak_total_bytes" if key == "memory_timeline" else "peak_bytes"
        if m and m["fits"] != (m[total] <= m["capacity_bytes"]):
            out.append(f"{key}.fits {m['fits']} with {total} {m[total]} of {m['capacity_bytes']}")
    if report["fits"] != all(t["fits"] for t in report["tiers"].values()):
        tiers = {name: t["fits"] for name, t in report["tiers"].items()}
        out.append(f"fits {report['fits']} but the tiers say {tiers}")
    return out


def check_report(report: dict[str, Any]) -> list[str]:
    """Every violation of (c), (d) and (e)'s `fits` in one report, beyond what
    tiersim/report/invariants.py checks on every report before it is returned."""
    return _shares(report) + _classes_conserved(report) + _fits_agree(report)


def peaks_fall(small: dict[str, Any], big: dict[str, Any], stages: int = 1) -> list[str]:
    """Where a report of a larger micro-batch (`big`) holds less than `small`'s: the GPU's
    allocated peak (one pipeline stage: `stages` 1), every tier's resident bytes. Left out
    (docs/invariants.md): the GPU tier's peak_bytes, what the caching allocator reserves
    (tiersim/state/allocator.py), which PyTorch's segment rules do not keep monotone; with
    several stages the allocated peak too, as the timeline shown is the stage that reserves
    most (tiersim/state/step_memory.py `gpu_timeline`), which a larger micro-batch can change;
    another tier's peak_bytes, whose transient part (staging buffers of multi-hop transfers)
    depends on how many transfers overlap."""
    out = []
    a, b = (r["memory_timeline"]["peak_allocated_bytes"] for r in (small, big))
    if b < a and stages == 1:
        out.append(f"memory_timeline.peak_allocated_bytes falls: {a} -> {b}")
    for name, t in small["tiers"].items():
        after = big["tiers"][name]["resident_bytes"]
        if after < t["resident_bytes"]:
            out.append(f"tiers.{name}.resident_bytes falls: {t['resident_bytes']} -> {after}")
    return out


def placement_moves(raw: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """(c) reads and writes consistent with placement: the optimizer state and master weights
    homed off the GPU are read out of their home and written back to it once a step each, the
    same bytes; none moves where the update runs beside them (the CPU's on host memory) or
    the class holds nothing (SGD's optimizer). The routed experts' own homes
    (placement.experts) are left out."""
    placement = raw.get("placement", {})
    if placement.get("experts"):
        return []
    gpu = report["memory_timeline"]["tier"]
    host = (report.get("host_memory_timeline") or {}).get("tier", "dram")
    cpu = placement.get("optimizer_compute") == "cpu"
    out = []
    for cls in ("optimizer", "master"):
        home = placement.get(cls, gpu)
        if home == gpu:
            continue
        t = report["tiers"][home]
        read = t.get("read_by_class", {}).get(cls, 0)
        written = t.get("written_by_class", {}).get(cls, 0)
        held = report["inventory"]["per_gpu"][cls] > 0
        moves = held and not (cpu and home == host)
        if read != written or (read > 0) != moves:
            out.append(f"{cls} on {home}: read {read} B, written {written} B a step")
    return out


def interval_slower(slow: dict[str, Any], fast: dict[str, Any]) -> list[str]:
    """(a) with a durable checkpoint: the wall time of a checkpoint interval (its steps and
    the stall) and the wall time per useful step (step time / goodput) of the faster machine
    (`fast`) never exceed the slower's. Goodput itself is a share of wall time, not a rate:
    a faster step can lower it (the checkpoint's cost weighs more against a shorter step).
    The interval's wall time only where both intervals are given (not `every_steps: auto`)."""
    a, b = slow.get("checkpoint"), fast.get("checkpoint")
    if not a or not b:
        return []
    out = []
    wall = [
        c["interval_steps"] * r["step"]["time_s"] + c["stall_s"] for c, r in ((a, slow), (b, fast))
    ]
    # an interval of `every_steps: auto` is chosen for the machine (Daly's optimum, a wear
    # budget): a faster step can be given more steps and a longer interval
    given = a.get("interval_basis", "given") == "given" == b.get("interval_basis", "given")
    if given and wall[1] > wall[0] * (1 + TOL):
        out.append(f"checkpoint interval {wall[0]:.6g} s -> {wall[1]:.6g} s")
    if a.get("goodput") and b.get("goodput"):
        useful = [r["step"]["time_s"] / c["goodput"] for c, r in ((a, slow), (b, fast))]
        if useful[1] > useful[0] * (1 + TOL):
            out.append(f"wall time per useful step {useful[0]:.6g} s -> {useful[1]:.6g} s")
    return out


def timeline_violations(t: Any, section: dict[str, Any] | None = None) -> list[str]:
    """(e) on a memory timeline (tiersim.state.timeline.Timeline), worked out again from its
    events: each free gives back what its allocation took (the earliest still live of its
    key); the running total after each event is `allocated`, never negative, its largest
    (first) the peak; the parts live at the peak are each positive and add up to it; the
    caching allocator reserves at least what is allocated; `fits` is no refused request;
    `section` (report.json's `memory_timeline` or `host_memory_timeline`): the same peak, the
    device's most its reserve and what lies outside the allocator, `fits` that within capacity."""
    out, live, total, most, at = [], {}, 0, 0, 0
    for i, e in enumerate(t.events):
        if e.alloc:
            live.setdefault(e.key, []).append(e.nbytes)
        elif not live.get(e.key) or live[e.key].pop(0) != e.nbytes:
            out.append(f"event {i} ({e.moment}) frees {e.key!r}: not what it allocated")
        total += e.nbytes if e.alloc else -e.nbytes
        if total != t.allocated[i] or total < 0:
            out.append(f"event {i}: running total {total}, allocated {t.allocated[i]}")
            break
        if t.reserved[i] < total:
            out.append(f"event {i}: reserved {t.reserved[i]} < allocated {total}")
        most, at = (total, i) if total > most else (most, at)
    if t.events and (most, at) != (t.peak_allocated_bytes, t.peak_index):
        out.append(f"peak {t.peak_allocated_bytes} at {t.peak_index}, running most {most} at {at}")
    parts = t.peak_parts
    if any(b <= 0 for b in parts.values()) or sum(parts.values()) != t.peak_allocated_bytes:
        out.append(f"peak parts {parts} do not add up to {t.peak_allocated_bytes}")
    if t.peak_reserved_bytes < max(t.reserved, default=0):
        out.append(f"peak reserved {t.peak_reserved_bytes} < {max(t.reserved)} after an event")
    if t.fits != (t.oom_index is None):
        out.append(f"fits {t.fits} with the request refused at {t.oom_index}")
    return out + (_section_agrees(t, section) if section else [])


def _section_agrees(t: Any, s: dict[str, Any]) -> list[str]:
    out = []
    if "peak_allocated_bytes" in s and s["peak_allocated_bytes"] != t.peak_allocated_bytes:
        out.append(f"report peak {s['peak_allocated_bytes']} != {t.peak_allocated_bytes}")
    outside = sum(o.nbytes for o in t.outside)
    total = s.get("peak_total_bytes", s.get("peak_bytes"))
    if total != t.peak_reserved_bytes + outside:
        out.append(f"report's most {total} != reserve {t.peak_reserved_bytes} + {outside}")
    if s["fits"] != (t.fits and total <= s["capacity_bytes"]):
        out.append(f"report fits {s['fits']} with {total} of {s['capacity_bytes']}")
    return out


def stage_peaks(lifecycle: Any) -> list[int]:
    """The allocated peak of each pipeline stage's GPU timeline (the report shows one:
    tiersim/state/step_memory.py `gpu_timeline`); `lifecycle`: tiersim.runner.Run."""
    from tiersim.state.step_memory import build_events, evaluate, outside_terms

    r, inv = lifecycle.resolved, lifecycle.inventory
    gpu, stages = r.machine.gpu.memory, r.execution.parallel.pipeline
    cap, outside = inv.tiers[gpu].capacity_bytes, outside_terms(r)
    return [
        evaluate(gpu, cap, build_events(r, inv, k), outside).peak_allocated_bytes
        for k in range(stages)
    ]
