"""A calibration turned into a hardware preset's YAML text: the measured figures as scenario
quantities, and what was not measured copied from a base preset, listed in the file's header."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from tiersim.config.hardware_schema import Network
from tiersim.groundtruth.calibrate import machine
from tiersim.groundtruth.calibrate_settings import Calibration
from tiersim.groundtruth.figure import Figure

DECIMAL = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))


def quantity(value: float, unit: str) -> str:
    """A figure as a scenario quantity string with 4 significant digits: '12.34 GB/s',
    '85.2 us', '812.3 TFLOP/s', '25.28 GB'."""
    if unit == "s":
        return f"{value * 1e6:.4g} us"
    if unit == "FLOP/s":
        return f"{value / 1e12:.4g} TFLOP/s"
    prefix, factor = next(((p, f) for p, f in DECIMAL if value >= f), DECIMAL[-1])
    return f"{value / factor:.4g} {prefix}{unit}"


def describe(f: Figure) -> str:
    """The header's figure: median (min .. max, runs), a time in the unit that reads it
    (`4.007 ms (152.5 us .. 12 ms, 64 runs)`, not `4007 us (... 1.2e+04 us ...)`)."""
    spread = f"{_said(f.low, f.unit)} .. {_said(f.high, f.unit)}"
    runs = len(f.samples)
    return f"{_said(f.median, f.unit)} ({spread}, {runs} run{'' if runs == 1 else 's'})"


def _said(value: float, unit: str) -> str:
    """As `quantity`, but a time in us, ms or s by its size (4 significant digits)."""
    if unit != "s":
        return quantity(value, unit)
    scale, name = next(((f, n) for f, n in ((1.0, "s"), (1e-3, "ms")) if value >= f), (1e-6, "us"))
    return f"{value / scale:.4g} {name}"


def _gpu_section(cal: Calibration, base: dict[str, Any], copied: list[str]) -> dict[str, Any]:
    flops = {k[7:]: v for k, v in cal.figures.items() if k.startswith("matmul ")}
    if cal.gpu_name is None or not flops:
        copied.append("gpu (no GPU measured)")
        return dict(base["gpu"])
    peak = {p: quantity(f.median, f.unit) for p, f in flops.items()}
    gpu: dict[str, Any] = {"name": cal.gpu_name, "memory": "hbm", "peak_flops": peak}
    if cal.gpu_sm_count:  # the device's own count: the base's may be another GPU's
        gpu["sm_count"] = cal.gpu_sm_count
    # every other step-model figure (efficiency, sm_count where the device gave none,
    # l2_bandwidth, memory_efficiency, collective_sm_share, ...) is the base's, said so: left
    # out, each would fall back to a default that changes the step time unsaid
    # The base's kernel table is left out: its rates are another device's measurements, and
    # they would time the GEMMs in place of the peaks measured here
    rest = {k: v for k, v in base["gpu"].items() if k not in gpu and k != "kernels"}
    copied += [f"gpu.{k}" for k in rest]
    return {**gpu, **rest}


def host_share(base: dict[str, Any]) -> int:
    """The GPUs that share the host's memory: the preset's network.gpus_per_node (the base's,
    which the file copies). A preset's tiers are one GPU's (h200-hbf: a node's 2 TB and
    921.6 GB/s of DRAM over its 8 GPUs), so the host measured whole is divided by them."""
    return int(base.get("network", {}).get("gpus_per_node", Network().gpus_per_node))


def _tiers(cal: Calibration, base: dict[str, Any], copied: list[str]) -> dict[str, Any]:
    f, tiers, share = cal.figures, base.get("tiers", {}), host_share(base)
    latency = {name: tiers.get(name, {}).get("latency", "0 us") for name in ("hbm", "dram")}
    copied.append("tier latencies of hbm and dram")
    if "hbm copy bandwidth" in f and cal.gpu_memory_bytes:
        hbm = {
            "kind": "hbm",
            "capacity": quantity(cal.gpu_memory_bytes, "B"),
            "latency": latency["hbm"],
            "bandwidth": quantity(f["hbm copy bandwidth"].median, "B/s"),
        }
    else:
        copied.append("tiers.hbm")
        hbm = dict(tiers["hbm"])
    dram_capacity = cal.host_memory_bytes
    if dram_capacity is None:
        copied.append("tiers.dram.capacity")
    dram = {
        "kind": "dram",
        "capacity": quantity(dram_capacity / share, "B")
        if dram_capacity
        else tiers["dram"]["capacity"],
        "bandwidth": quantity(f["dram copy bandwidth"].median / share, "B/s"),
        "latency": latency["dram"],
    }
    nvme = {
        "kind": "flash",
        "capacity": quantity(cal.storage_capacity_bytes, "B"),
        "read_bandwidth": quantity(f["storage read bandwidth"].median, "B/s"),
        "write_bandwidth": quantity(f["storage write bandwidth"].median, "B/s"),
        "latency": quantity(f["storage read latency"].median, "s"),
    }
    if "endurance" in tiers.get("nvme", {}):
        nvme["endurance"] = tiers["nvme"]["endurance"]
        copied.append("tiers.nvme.endurance")
    others = {k: v for k, v in tiers.items() if k not in ("hbm", "dram", "nvme")}
    copied += [f"tiers.{k}" for k in others]
    return {"hbm": hbm, "dram": dram, "nvme": nvme, **others}


PCIE_FIGURES = ("host to device bandwidth", "device to host bandwidth")


def _links(cal: Calibration, base: dict[str, Any], copied: list[str]) -> dict[str, Any]:
    f, links = cal.figures, dict(base.get("links", {}))
    pcie = dict(links.get("pcie", {"latency": "0 us"}), between=["hbm", "dram"])
    directions = [f[k].median for k in PCIE_FIGURES if k in f]
    if directions:  # a link has one bandwidth per direction: the slower direction's
        pcie["bandwidth"] = quantity(min(directions), "B/s")
    elif "bandwidth" in pcie:
        copied.append("links.pcie")
    else:
        pcie = {}
    storage = max(f["storage read bandwidth"].median, f["storage write bandwidth"].median)
    nvme = dict(links.get("nvme", {"latency": "0 us"}), between=["dram", "nvme"])
    nvme["bandwidth"] = quantity(storage, "B/s")
    copied.append("link latencies")
    others = {k: v for k, v in links.items() if k not in ("pcie", "nvme")}
    copied += [f"links.{k}" for k in others]
    return {**({"pcie": pcie} if pcie else {}), "nvme": nvme, **others}


# the cpu keys a calibration writes itself: every other one is the base preset's
MEASURED_CPU = ("name", "memory", "memory_bandwidth")
# the CPU optimizer's rates a scenario reads, none of which a calibration writes: the AdamW
# rates it measures are PyTorch's kernels, not the optimizer path a scenario runs
CPU_RATES = ("optimizer_rate", "adam_kernel_rate")


def _rate_notes(cal: Calibration, cpu: dict[str, Any]) -> list[str]:
    if not any(name.startswith("cpu adamw rate") for name in cal.figures):
        return []
    # without its own rate, adam_kernel_rate is optimizer_rate's: nothing more to say
    whose = {k: "the base preset's" for k in CPU_RATES if k in cpu}
    whose.setdefault("optimizer_rate", "tiersim's default")
    return [f"cpu.{k} is {w}, not a measured AdamW rate" for k, w in whose.items()]


def hardware_preset(cal: Calibration, base: dict[str, Any], base_name: str) -> str:
    """The hardware preset YAML text; what was not measured comes from `base`, and says so."""
    copied: list[str] = []
    cpu = {**base.get("cpu", {}), "name": machine(), "memory": "dram"}
    share = host_share(base)
    cpu["memory_bandwidth"] = quantity(cal.figures["dram copy bandwidth"].median / share, "B/s")
    hardware = {"gpu": _gpu_section(cal, base, copied), "cpu": cpu}
    copied += [f"cpu.{k}" for k in base.get("cpu", {}) if k not in MEASURED_CPU]
    notes = [*cal.notes, *_rate_notes(cal, cpu)]
    if "sm_count" in hardware["gpu"] and cal.gpu_sm_count:
        notes.append(f"gpu.sm_count {cal.gpu_sm_count}: the device's own multiprocessor count")
    hardware["tiers"] = _tiers(cal, base, copied)
    hardware["links"] = _links(cal, base, copied)
    if "network" in base:
        hardware["network"] = base["network"]
        copied.append("network")
    lines = [
        f"Hardware preset measured by `tiersim calibrate` on {machine()}.",
        "Figures: median of the runs (min .. max, runs), as measured on the whole machine.",
        f"Per GPU, as every preset's tiers are: host memory's capacity and bandwidth (tiers.dram, "
        f"cpu.memory_bandwidth) are the host's divided by the {share} GPU(s) that share it "
        f"(network.gpus_per_node, the base preset's: change both if this host has another "
        f"count); storage (tiers.nvme) is the one drive measured, as each GPU's own.",
        *(f"  {f.name}: {describe(f)} - {f.method}" for f in cal.figures.values()),
        *notes,
        f"NOT measured, copied from base preset '{base_name}': {', '.join(copied)}.",
    ]
    head = "\n".join(
        textwrap.fill(line, 98, initial_indent="# ", subsequent_indent="#     ") for line in lines
    )
    return head + "\n" + yaml.safe_dump(hardware, sort_keys=False)
