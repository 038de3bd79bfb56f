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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tiersim.cli.commands.calibrate_cpu_checks import cpu_problems
from tiersim.cli.commands.common import (
    add_format_arg,
    cannot_write,
    file_arg,
    output_error,
    usable_preset_path,
)
from tiersim.cli.commands.measure import positive_int
from tiersim.config.presets import DEFAULT_HARDWARE, is_preset_file, load_preset, preset_names
from tiersim.core.errors import InputError, Problem
from tiersim.core.units import Kind, UnitError, fmt_bytes, fmt_time, parse

if TYPE_CHECKING:  # annotations only: the heavy modules load when a command runs
    from tiersim.groundtruth.calibrate_settings import Calibration, Settings

SOURCE = "tiersim calibrate"


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
        "threads for the host copy and the CPU optimizer, at most this host's CPUs (default: "
        "all of them)",
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
        file_arg,
        "calibrated-hardware.yaml",
        "FILE",
        "hardware preset to write (default: calibrated-hardware.yaml)",
    ),
    (
        "--kernels-out",
        file_arg,
        None,
        "FILE",
        "where PyTorch sees a CUDA GPU, also measure its kernel table (BF16 GEMMs on a grid "
        "of shapes, FP8 GEMM per scaling recipe, grouped GEMM by rows a group, the share of "
        "each GEMM kept over 30 s of back-to-back calls, FlashAttention-2 and cuDNN attention "
        "by sequence, causal and full, forward and backward) and write it to FILE.yaml, "
        "usable as hardware.gpu.kernels: FILE.yaml (docs/kernels.md; default: none)",
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
        "--kernels-dry-run",
        action="store_true",
        help="with --kernels-out: measure the kernel table on the CPU at tiny shapes instead "
        "(a check of the code path and the file it writes, e.g. before a GPU is lent; its "
        "rates are the CPU's, not a GPU's, and the file's header says so)",
    )
    add_format_arg(parser)
    parser.set_defaults(handler=run)


def _base(name: str) -> dict[str, Any]:
    from tiersim.config.yamlfile import read_yaml

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
                        "E-PRESET",
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
                    "E-PRESET",
                )
            ],
        )
    return data


def _storage_problems(path: Path, size: int) -> list[Problem]:
    """Why the storage test cannot run in `path` with a `size`-byte file, found before any
    measuring: not a folder, no test file can be created there, or too little free space."""
    from tiersim.groundtruth.calibrate_storage import StorageError, probe_file

    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        return [Problem("--path", f"{path} {what} (expected a writable folder)", "E-OPTION")]
    try:
        probe_file(path).unlink()
        free = shutil.disk_usage(path).free
    except StorageError as exc:
        return [Problem(exc.option, str(exc), "E-OPTION")]
    except OSError as exc:
        return [Problem("--path", f"{path}: cannot use it: {exc.strerror or exc}", "E-OPTION")]
    if size > free:
        why = f"the {fmt_bytes(size)} test file does not fit: {fmt_bytes(free)} free"
        return [Problem("--size", f"{path}: {why} (expected a smaller --size)", "E-OPTION")]
    return []


def memory_problems(size: int, available: int | None = None) -> list[Problem]:
    """The host copy allocates two arrays of `size` bytes: refused before allocating when the
    host has less memory available than that (it would fail, or swap and measure the disk)."""
    from tiersim.groundtruth.calibrate import available_memory

    available = available_memory() if available is None else available
    if available is None or 2 * size <= available:
        return []
    why = (
        f"the copy needs two arrays of {fmt_bytes(size)}, {fmt_bytes(2 * size)} in all: "
        f"{fmt_bytes(available)} is available (expected a smaller --memory-size)"
    )
    return [Problem("--memory-size", why, "E-OPTION")]


def settings(args: argparse.Namespace) -> Settings:
    from tiersim.groundtruth.calibrate_settings import MIN_STORAGE_BYTES, Settings

    path = Path(args.path)
    problems = _storage_problems(path, args.size)
    for option, value, least in (
        ("--size", args.size, MIN_STORAGE_BYTES),
        ("--memory-size", args.memory_size, 8),
        ("--gpu-size", args.gpu_size, 1),
    ):
        if value < least:
            problems.append(
                Problem(option, f"must be at least {least:,} B (got {value:,} B)", "E-OPTION")
            )
    problems += memory_problems(args.memory_size) + cpu_problems(args)
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
    from tiersim.config.load import build

    raw = {
        "name": "calibrate-check",
        "model": {"preset": "gpt2"},
        "hardware": {"preset": "none", **yaml.safe_load(text)},
    }
    build(raw, Path.cwd(), "calibrated hardware preset")


def table(cal: Calibration) -> str:
    from tiersim.groundtruth.calibrate import machine
    from tiersim.groundtruth.calibrated_preset import quantity
    from tiersim.report.table import render

    def shown(value: float, unit: str) -> str:
        # a time as every table says one (3.128 ms, 70.4 us); the preset keeps its exact "us"
        return fmt_time(value) if unit == "s" else quantity(value, unit)

    rows = [
        [name, shown(f.median, f.unit), shown(f.low, f.unit), shown(f.high, f.unit), len(f.samples)]
        for name, f in cal.figures.items()
    ]
    head = f"{machine()}; host memory {fmt_bytes(cal.host_memory_bytes or float('nan'))}"
    if cal.gpu_name:
        head += f"; GPU {cal.gpu_name}, {quantity(cal.gpu_memory_bytes, 'B')}"
    out = render(["figure", "median", "min", "max", "runs"], rows, head)
    methods = [f"  - {f.name}: {f.method}" for f in cal.figures.values()]
    return "\n".join([out, "", "how:", *methods, *(f"note: {n}" for n in cal.notes)])


def as_json(cal: Calibration, out: str) -> str:
    from tiersim.groundtruth.calibrate import machine

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
            "gpu": {
                "name": cal.gpu_name,
                "memory_bytes": cal.gpu_memory_bytes,
                "sm_count": cal.gpu_sm_count,
            },
            "preset_file": out,
        },
        indent=2,
    )


def run(args: argparse.Namespace) -> int:
    from tiersim.groundtruth.calibrate import calibrate
    from tiersim.groundtruth.calibrate_storage import StorageError
    from tiersim.groundtruth.calibrated_preset import hardware_preset
    from tiersim.report.output import write_atomic

    base = _base(args.base)
    if args.kernels_out and not args.kernels_out.endswith((".yaml", ".yml")):
        why = "expected a file name ending .yaml (gpu.kernels reads a table by its suffix)"
        raise InputError(
            SOURCE, [Problem("--kernels-out", f"{args.kernels_out!r}: {why}", "E-OPTION")]
        )
    if args.kernels_dry_run and not args.kernels_out:
        why = "measures a kernel table only where one is written: expected --kernels-out FILE.yaml"
        raise InputError(SOURCE, [Problem("--kernels-dry-run", why, "E-OPTION")])
    out = Path(args.out)
    inputs = [Path(args.base)] if is_preset_file(args.base) else []
    usable_preset_path("--out", out, inputs, SOURCE)
    if args.kernels_out:  # before the minutes of measuring, as --out is
        _usable_kernels_out(Path(args.kernels_out), out, inputs)
    from tiersim.cli.counting import Stages

    stages = Stages("calibrate")
    try:
        cal = calibrate(settings(args), stages)
    except StorageError as exc:  # the checks in settings() passed, then the I/O failed
        raise InputError(SOURCE, [Problem(exc.option, str(exc), "E-OPTION")]) from None
    finally:
        stages.close()
    text = hardware_preset(cal, base, args.base)
    check_preset(text)
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise cannot_write("--out", out, exc, "a file path in a writable folder", SOURCE) from None
    print(as_json(cal, args.out) if args.format == "json" else table(cal))
    print(
        f"wrote hardware preset {args.out}; use it as hardware: {{preset: {args.out}}} "
        "(a path relative to the scenario file)",
        file=sys.stderr,
    )
    if args.kernels_out:
        write_kernel_table(args)
    return 0


def _usable_kernels_out(path: Path, out: Path, inputs: list[Path]) -> None:
    """--kernels-out may be written: not the --out preset (the table would replace it), an
    input, a shipped preset or a folder, and its folder exists (usable_preset_path)."""
    if path.resolve() == out.resolve():
        why = "is the --out file too: the hardware preset and the kernel table are two files"
        raise output_error("--kernels-out", path, f"{why} (expected another file path)", SOURCE)
    usable_preset_path("--kernels-out", path, inputs, SOURCE)


def write_kernel_table(args: argparse.Namespace) -> None:
    """`--kernels-out`: the GPU's kernel table measured and written, or why not (stderr)."""
    from tiersim.groundtruth.calibrate_gpu import device_times, torch_with_cuda
    from tiersim.groundtruth.calibrate_kernels import DRY_RUN, kernel_table
    from tiersim.report.output import write_atomic

    out = Path(args.kernels_out)
    notes: list[str] = []
    if args.kernels_dry_run:
        torch, device, shapes = _cpu_torch(notes), "cpu", DRY_RUN
        name = "CPU dry run (not a GPU's rates)"
    else:
        torch, device, shapes = torch_with_cuda(notes), "cuda", {}
        name = torch.cuda.get_device_name() if torch is not None else ""
    if torch is None:
        print(f"kernel table not measured: {'; '.join(notes)}", file=sys.stderr)
        return
    timer = lambda fn, repeats: device_times(torch, device, fn, repeats)  # noqa: E731
    data = kernel_table(torch, device, timer, args.repeat, name, notes, **shapes)
    header = f"# {name}: kernel table measured by tiersim calibrate --kernels-out\n"
    header += "".join(f"# note: {n}\n" for n in notes)
    try:
        write_atomic(out, header + yaml.safe_dump(data, sort_keys=False))
    except OSError as exc:
        raise cannot_write("--kernels-out", out, exc, "a writable file path", SOURCE) from None
    print(f"wrote kernel table {out}; use it as hardware.gpu.kernels: {out}", file=sys.stderr)


def _cpu_torch(notes: list[str]) -> Any:
    """PyTorch for `--kernels-dry-run` (None, with a note, where it is not installed)."""
    try:
        import torch
    except ImportError:
        notes.append("PyTorch is not installed (pip install 'tiersim[measure]')")
        return None
    return torch
