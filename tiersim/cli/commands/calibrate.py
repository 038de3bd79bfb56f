"""`tiersim calibrate`: measure this machine and write a hardware preset YAML.

The preset is a scenario's `hardware` section: `hardware: {preset: path/to/file.yaml}`. What
cannot be measured here (a GPU on a CPU-only machine, flash endurance, tier latencies of HBM
and DRAM, link latencies, the network) comes from a named base preset, and the file says so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tiersim.cli.commands.common import cannot_write, usable_preset_path
from tiersim.cli.commands.measure import positive_int
from tiersim.config.load import (
    DEFAULT_HARDWARE,
    build,
    is_preset_file,
    load_preset,
    preset_names,
    read_yaml,
)
from tiersim.core.errors import InputError, Problem
from tiersim.core.units import Kind, UnitError, fmt_bytes, parse
from tiersim.groundtruth.calibrate import (
    MIN_STORAGE_BYTES,
    Calibration,
    Figure,
    Settings,
    StorageError,
    available_memory,
    calibrate,
    machine,
    probe_file,
)
from tiersim.report.output import write_atomic
from tiersim.report.table import render

SOURCE = "tiersim calibrate"


# --- the hardware preset -----------------------------------------------------------------------


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
    spread = f"{quantity(f.low, f.unit)} .. {quantity(f.high, f.unit)}"
    return f"{quantity(f.median, f.unit)} ({spread}, {len(f.samples)} runs)"


def _gpu_section(cal: Calibration, base: dict[str, Any], copied: list[str]) -> dict[str, Any]:
    flops = {k[7:]: v for k, v in cal.figures.items() if k.startswith("matmul ")}
    if cal.gpu_name is None or not flops:
        copied.append("gpu (no GPU measured)")
        return dict(base["gpu"])
    copied.append("gpu.efficiency and gpu.optimizer_efficiency")
    gpu = {k: v for k, v in base["gpu"].items() if k in ("efficiency", "optimizer_efficiency")}
    peak = {p: quantity(f.median, f.unit) for p, f in flops.items()}
    return {"name": cal.gpu_name, "memory": "hbm", "peak_flops": peak, **gpu}


def _tiers(cal: Calibration, base: dict[str, Any], copied: list[str]) -> dict[str, Any]:
    f, tiers = cal.figures, base.get("tiers", {})
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
        "capacity": quantity(dram_capacity, "B") if dram_capacity else tiers["dram"]["capacity"],
        "bandwidth": quantity(f["dram copy bandwidth"].median, "B/s"),
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


def hardware_preset(cal: Calibration, base: dict[str, Any], base_name: str) -> str:
    """The hardware preset YAML text; what was not measured comes from `base`, and says so."""
    copied: list[str] = []
    cpu = {**base.get("cpu", {}), "name": machine(), "memory": "dram"}
    cpu["memory_bandwidth"] = quantity(cal.figures["dram copy bandwidth"].median, "B/s")
    hardware = {"gpu": _gpu_section(cal, base, copied), "cpu": cpu}
    if "optimizer_rate" in cpu:
        copied.append("cpu.optimizer_rate")
    notes = list(cal.notes)
    if any(name.startswith("cpu adamw rate") for name in cal.figures):
        whose = "the base preset's" if "optimizer_rate" in cpu else "tiersim's default"
        notes.append(f"cpu.optimizer_rate is {whose}, not a measured AdamW rate")
    hardware["tiers"] = _tiers(cal, base, copied)
    hardware["links"] = _links(cal, base, copied)
    if "network" in base:
        hardware["network"] = base["network"]
        copied.append("network")
    lines = [
        f"Hardware preset measured by `tiersim calibrate` on {machine()}.",
        "Figures: median of the runs (min .. max, runs); capacities are the whole machine's.",
        *(f"  {f.name}: {describe(f)} - {f.method}" for f in cal.figures.values()),
        *notes,
        f"NOT measured, copied from base preset '{base_name}': {', '.join(copied)}.",
    ]
    head = "\n".join(
        textwrap.fill(line, 98, initial_indent="# ", subsequent_indent="#     ") for line in lines
    )
    return head + "\n" + yaml.safe_dump(hardware, sort_keys=False)


# --- command line ------------------------------------------------------------------------------


def _size(text: str) -> int:
    try:
        return int(parse(text, Kind.SIZE))
    except UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# (option, type, default, metavar, help); sizes take units, e.g. '64 MiB'
OPTIONS = (
    ("--path", str, ".", "DIR", "directory whose storage is measured (default: .)"),
    ("--size", _size, 64 * 2**20, "SIZE", "storage test file size (default: 64 MiB)"),
    ("--memory-size", _size, 256 * 2**20, "SIZE", "bytes per array, host copy (default: 256 MiB)"),
    ("--gpu-size", _size, 512 * 2**20, "SIZE", "bytes per GPU copy (default: 512 MiB)"),
    ("--matmul-size", positive_int, 8192, "N", "N for the N x N x N matmuls (default: 8192)"),
    ("--repeat", positive_int, 5, "RUNS", "timed runs per figure, after a warm-up (default: 5)"),
    ("--latency-ops", positive_int, 64, "OPS", "4 KiB operations per latency (default: 64)"),
    (
        "--threads",
        positive_int,
        None,
        "N",
        "threads for the host copy and the CPU optimizer (default: all CPUs)",
    ),
    (
        "--optimizer-params",
        positive_int,
        16 * 2**20,
        "N",
        "fp32 parameters per CPU AdamW step (default: 16,777,216)",
    ),
    (
        "--base",
        str,
        DEFAULT_HARDWARE,
        "PRESET",
        f"hardware preset (name or YAML) for what is not measured (default: {DEFAULT_HARDWARE})",
    ),
    (
        "--out",
        str,
        "calibrated-hardware.yaml",
        "FILE",
        "hardware preset to write (default: calibrated-hardware.yaml)",
    ),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "calibrate",
        help="measure this machine and write a hardware preset YAML",
        description="Measure host memory bandwidth (numpy copies), CPU AdamW rates (PyTorch, "
        "fused and default), storage read/write bandwidth "
        "and latency on a directory (O_DIRECT where allowed, else buffered with fsync), and, "
        "where PyTorch sees a CUDA GPU, HBM bandwidth, pinned host<->device bandwidth each way "
        "and matmul throughput per precision. Each figure is the median of its runs with min "
        "and max. Writes a hardware preset usable as `hardware: {preset: FILE}`; what is not "
        "measured is copied from --base and listed in the file's header.",
    )
    for option, kind, default, metavar, text in OPTIONS:
        parser.add_argument(option, type=kind, default=default, metavar=metavar, help=text)
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="(default: table)"
    )
    parser.set_defaults(handler=run)


def _base(name: str) -> dict[str, Any]:
    if is_preset_file(name):
        data = read_yaml(Path(name), name)
    else:
        try:
            data = load_preset("hardware", name)
        except KeyError:
            names = ", ".join(preset_names("hardware"))
            raise InputError(
                SOURCE,
                [
                    Problem(
                        "--base",
                        f"unknown hardware preset {name!r} (available: {names}, or a YAML file)",
                    )
                ],
            ) from None
    tiers = data.get("tiers") if isinstance(data, dict) else None
    if not isinstance(tiers, dict) or "gpu" not in data or not {"hbm", "dram"} <= set(tiers):
        raise InputError(
            SOURCE,
            [
                Problem(
                    "--base",
                    f"{name} needs a 'gpu' section and "
                    "'hbm' and 'dram' tiers to fill in what is not measured",
                )
            ],
        )
    return data


def _storage_problems(path: Path, size: int) -> list[Problem]:
    """Why the storage test cannot run in `path` with a `size`-byte file, found before any
    measuring: not a folder, no test file can be created there, or too little free space."""
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        return [Problem("--path", f"{path} {what} (expected a writable folder)")]
    try:
        probe_file(path).unlink()
        free = shutil.disk_usage(path).free
    except StorageError as exc:
        return [Problem(exc.option, str(exc))]
    except OSError as exc:
        return [Problem("--path", f"{path}: cannot use it: {exc.strerror or exc}")]
    if size > free:
        why = f"the {fmt_bytes(size)} test file does not fit: {fmt_bytes(free)} free"
        return [Problem("--size", f"{path}: {why} (expected a smaller --size)")]
    return []


def _memory_problems(size: int, available: int | None = None) -> list[Problem]:
    """The host copy allocates two arrays of `size` bytes: refused before allocating when the
    host has less memory available than that (it would fail, or swap and measure the disk)."""
    available = available_memory() if available is None else available
    if available is None or 2 * size <= available:
        return []
    why = (
        f"the copy needs two arrays of {fmt_bytes(size)}, {fmt_bytes(2 * size)} in all: "
        f"{fmt_bytes(available)} is available (expected a smaller --memory-size)"
    )
    return [Problem("--memory-size", why)]


def settings(args: argparse.Namespace) -> Settings:
    path = Path(args.path)
    problems = _storage_problems(path, args.size)
    for option, value, least in (
        ("--size", args.size, MIN_STORAGE_BYTES),
        ("--memory-size", args.memory_size, 8),
        ("--gpu-size", args.gpu_size, 1),
    ):
        if value < least:
            problems.append(Problem(option, f"must be at least {least:,} B (got {value:,} B)"))
    problems += _memory_problems(args.memory_size)
    if problems:
        raise InputError(SOURCE, problems)
    extra = {"threads": args.threads} if args.threads else {}
    return Settings(
        path,
        args.size,
        args.memory_size,
        args.repeat,
        args.latency_ops,
        gpu_bytes=args.gpu_size,
        matmul_size=args.matmul_size,
        optimizer_params=args.optimizer_params,
        **extra,
    )


def check_preset(text: str) -> None:
    """The preset must validate as a scenario's hardware, or it is not written."""
    raw = {
        "name": "calibrate-check",
        "model": {"preset": "gpt2"},
        "hardware": {"preset": "none", **yaml.safe_load(text)},
    }
    build(raw, Path.cwd(), "calibrated hardware preset")


def table(cal: Calibration) -> str:
    rows = [
        [
            name,
            quantity(f.median, f.unit),
            quantity(f.low, f.unit),
            quantity(f.high, f.unit),
            len(f.samples),
        ]
        for name, f in cal.figures.items()
    ]
    head = f"{machine()}; host memory {fmt_bytes(cal.host_memory_bytes or float('nan'))}"
    if cal.gpu_name:
        head += f"; GPU {cal.gpu_name}, {quantity(cal.gpu_memory_bytes, 'B')}"
    out = render(["figure", "median", "min", "max", "runs"], rows, head)
    methods = [f"  - {f.name}: {f.method}" for f in cal.figures.values()]
    return "\n".join([out, "", "how:", *methods, *(f"note: {n}" for n in cal.notes)])


def as_json(cal: Calibration, out: str) -> str:
    figures = {
        f.name: {
            "unit": f.unit,
            "median": f.median,
            "min": f.low,
            "max": f.high,
            "samples": list(f.samples),
            "method": f.method,
        }
        for f in cal.figures.values()
    }
    return json.dumps(
        {
            "machine": machine(),
            "figures": figures,
            "notes": cal.notes,
            "host_memory_bytes": cal.host_memory_bytes,
            "storage_capacity_bytes": cal.storage_capacity_bytes,
            "gpu": {"name": cal.gpu_name, "memory_bytes": cal.gpu_memory_bytes},
            "preset_file": out,
        },
        indent=2,
    )


def run(args: argparse.Namespace) -> int:
    base = _base(args.base)
    out = Path(args.out)
    usable_preset_path("--out", out, [Path(args.base)] if is_preset_file(args.base) else [])
    try:
        cal = calibrate(settings(args))
    except StorageError as exc:  # the checks in settings() passed, then the I/O failed
        raise InputError(SOURCE, [Problem(exc.option, str(exc))]) from None
    text = hardware_preset(cal, base, args.base)
    check_preset(text)
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise cannot_write("--out", out, exc, "a file path in a writable folder") from None
    print(as_json(cal, args.out) if args.format == "json" else table(cal))
    print(
        f"wrote hardware preset {args.out}; use it as hardware: {{preset: {args.out}}} "
        "(a path relative to the scenario file)",
        file=sys.stderr,
    )
    return 0
