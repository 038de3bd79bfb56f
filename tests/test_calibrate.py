"""`tiersim calibrate`: real measurements at tiny sizes, and a preset that loads as hardware."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from problem_lines import said

from tiersim.cli import main
from tiersim.cli.commands.calibrate import check_preset
from tiersim.config.load import build
from tiersim.config.presets import load_preset
from tiersim.core.units import Kind, parse
from tiersim.groundtruth.calibrate import calibrate
from tiersim.groundtruth.calibrate_cpu import optimizer_figures
from tiersim.groundtruth.calibrate_gpu import (
    MAX_INNER,
    device_times,
    fp8_operands,
    fp32_matmul_mode,
    gpu_copy_figures,
    inner_count,
    matmul_figures,
    matmul_flop,
)
from tiersim.groundtruth.calibrate_settings import Calibration, Settings
from tiersim.groundtruth.calibrate_storage import StorageError, storage_figures
from tiersim.groundtruth.calibrated_preset import hardware_preset, quantity
from tiersim.groundtruth.figure import Figure

TINY = ["--size", "256 KiB", "--memory-size", "1 MiB", "--repeat", "2", "--latency-ops", "4"]
TINY += ["--gpu-size", "1 MiB", "--matmul-size", "256", "--optimizer-params", "65536"]
HOST_FIGURES = {
    "dram copy bandwidth",
    "storage write bandwidth",
    "storage read bandwidth",
    "storage read latency",
    "storage write latency",
}


def tiny_settings(path: Path) -> Settings:
    return Settings(
        path,
        256 * 1024,
        2**20,
        repeats=3,
        latency_ops=4,
        threads=2,
        gpu_bytes=2**20,
        matmul_size=256,
        optimizer_params=65536,
    )


def test_figures_are_positive_with_their_spread(tmp_path: Path):
    cal = calibrate(tiny_settings(tmp_path))
    assert HOST_FIGURES.issubset(cal.figures)
    for f in cal.figures.values():
        assert len(f.samples) >= 3, f.name
        assert 0 < f.low <= f.median <= f.high, f.name
    assert cal.storage_capacity_bytes > 0
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone


def test_buffered_fallback_says_so(tmp_path: Path, monkeypatch):
    monkeypatch.delattr(os, "O_DIRECT", raising=False)  # as on a platform without it
    cal = calibrate(tiny_settings(tmp_path))
    assert "no O_DIRECT" in cal.figures["storage read bandwidth"].method
    assert any("O_DIRECT refused" in note for note in cal.notes)


def test_preset_loads_as_a_scenarios_hardware(tmp_path: Path, capsys):
    out = tmp_path / "measured.yaml"
    argv = ["calibrate", "--path", str(tmp_path), "--out", str(out), "--format", "json", *TINY]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    raw = {"name": "calibrated", "model": {"preset": "gpt2"}, "hardware": {"preset": out.name}}
    hw = build(raw, tmp_path, "test").scenario.hardware
    dram, nvme = hw.tiers["dram"], hw.tiers["nvme"]
    assert dram.read_bw > 0 and hw.cpu.memory_bandwidth == dram.read_bw
    assert nvme.read_bw > 0 and nvme.write_bw > 0 and nvme.latency > 0
    # the file's figures are the medians, rounded to 4 significant digits
    measured = report["figures"]["storage read bandwidth"]["median"]
    assert nvme.read_bw == pytest.approx(measured, rel=1e-3)
    text = out.read_text()
    if report["gpu"]["name"] is None:  # CPU-only: the GPU is the base preset's, and says so
        assert "GPU not measured" in text
        assert yaml.safe_load(text)["gpu"] == load_preset("hardware", "h200-hbf")["gpu"]
    else:
        assert hw.gpu.peak_flops["bf16"] > 0 and hw.tiers["hbm"].read_bw > 0


@pytest.mark.parametrize(
    "args, option",
    [(["--path", "/no/such/dir"], "--path"), (["--size", "1 kB"], "--size")],
)
def test_bad_options_exit_2(tmp_path: Path, capsys, args, option):
    assert main(["calibrate", "--out", str(tmp_path / "x.yaml"), *args]) == 2
    assert option in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def _calibrate_fails(argv: list[str], capsys) -> str:
    """Run `tiersim calibrate`, expect exit 2, and return its one-line message."""
    assert main(["calibrate", "--format", "json", *TINY, *argv]) == 2  # argv's options win
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def test_a_folder_where_no_file_can_be_made_exits_2(tmp_path: Path, capsys, monkeypatch):
    # as root chmod does not stop writes: a read-only file system, as mkstemp reports it
    import tiersim.groundtruth.calibrate_storage as storage_module

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(storage_module, "tempfile", SimpleNamespace(mkstemp=read_only))
    out = tmp_path / "out" / "x.yaml"  # another folder, which can be written
    out.parent.mkdir()
    err = _calibrate_fails(["--path", str(tmp_path), "--out", str(out)], capsys)
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-OPTION", "--path")
    assert line.message.startswith(f"{tmp_path}: ") and "Read-only file system" in line.message
    assert list(tmp_path.iterdir()) == [out.parent] and list(out.parent.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_proc_is_no_place_for_a_test_file(tmp_path: Path, capsys):
    err = _calibrate_fails(["--path", "/proc", "--out", str(tmp_path / "x.yaml")], capsys)
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-OPTION", "--path") and line.message.startswith("/proc: ")
    assert not (tmp_path / "x.yaml").exists()


def test_a_size_over_the_free_space_exits_2_before_measuring(tmp_path: Path, capsys):
    argv = ["--path", str(tmp_path), "--out", str(tmp_path / "x.yaml")]
    err = _calibrate_fails([*argv, "--size", "1000 PB"], capsys)  # 1e18 B: said as 1.00 EB
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-OPTION", "--size")
    assert line.message.startswith(f"{tmp_path}: ") and "1.00 EB" in line.message
    assert list(tmp_path.iterdir()) == []


def test_a_disk_filling_up_during_the_test_exits_2_and_leaves_no_file(
    tmp_path: Path, capsys, monkeypatch
):
    import tiersim.groundtruth.calibrate_storage as storage_module

    def fill_up(probe):  # half the file written, then the disk is full
        os.pwrite(probe.fd, probe.buf, 0)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage_module.StorageProbe, "write_all", fill_up)
    err = _calibrate_fails(["--path", str(tmp_path), "--out", str(tmp_path / "x.yaml")], capsys)
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-OPTION", "--size")
    assert line.message.startswith(f"{tmp_path}: ") and "262,144 B" in line.message
    assert "No space left on device" in line.message
    assert list(tmp_path.iterdir()) == []  # neither the probe file nor a preset


def test_an_io_error_in_the_storage_test_names_the_folder(tmp_path: Path, monkeypatch):
    import tiersim.groundtruth.calibrate_storage as storage_module

    def broken(probe):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(storage_module.StorageProbe, "read_all", broken)
    with pytest.raises(StorageError) as err:
        storage_figures(tiny_settings(tmp_path))
    assert err.value.option == "--path"
    assert str(err.value) == (
        f"{tmp_path}: the storage test failed: Input/output error "
        "(expected a folder on a writable file system)"
    )
    assert list(tmp_path.iterdir()) == []


def test_unknown_base_preset_exit_2(tmp_path: Path, capsys):
    argv = ["calibrate", "--path", str(tmp_path), "--base", "h300", *TINY]
    assert main(argv) == 2
    line = said(capsys.readouterr().err.strip(), "tiersim calibrate")
    assert line.coded == ("E-PRESET", "--base") and "'h300'" in line.message


# --- the GPU code paths, run on the CPU --------------------------------------------------------
# `tiersim calibrate` runs them on "cuda" only; with device="cpu" the same code runs here (no
# pinned memory, perf_counter instead of CUDA events). Arithmetic is checked with a timer that
# still runs each operation once but reports set durations, so expected values are hand-computed.


def set_timer(*durations: float):
    """A timer that runs `fn` once (so the operation must work) and reports `durations`."""

    def timer(fn, repeats):
        fn()
        return list(durations)

    return timer


def test_matmul_flop_by_hand():
    # 8192^3 = 2^39 = 549,755,813,888 multiply-adds, 2 FLOP each
    assert matmul_flop(8192) == 1_099_511_627_776 == 2**40
    assert matmul_flop(3) == 54


def test_inner_count_makes_samples_last_long_enough():
    assert inner_count(0.001, 0.01) == 10  # 1 ms per call, 10 ms per sample
    assert inner_count(0.003, 0.01) == 4  # 3.33 rounded up
    assert inner_count(0.02, 0.01) == 1  # one call is already long enough
    assert inner_count(1e-9, 0.01) == MAX_INNER
    assert inner_count(0.0, 0.01) == MAX_INNER


def test_device_times_runs_the_operation_on_the_cpu():
    torch = pytest.importorskip("torch")
    calls = []
    times = device_times(torch, "cpu", lambda: calls.append(1), repeats=3)
    assert len(times) == 3 and all(t > 0 for t in times)
    assert len(calls) >= 1 + 1 + 3  # warm-up, the call that sizes a sample, 3 samples


class FakeCuda:
    """Stands in for `torch.cuda` in `device_times(..., "cuda", ...)`: every call of the timed
    operation takes 2 ms of "GPU time", and events report milliseconds, as CUDA events do."""

    def __init__(self):
        self.clock_ms = 0.0
        self.synchronized = 0
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "an event made without enable_timing cannot be timed"
                self.at, self.done = None, False

            def record(self):
                self.at = cuda.clock_ms

            def synchronize(self):
                self.done = True

            def elapsed_time(self, end):
                assert end.done, "end.synchronize() must come before elapsed_time"
                return end.at - self.at  # milliseconds

        self.Event = Event

    def synchronize(self):
        self.synchronized += 1

    def op(self):
        self.clock_ms += 2.0


def test_device_times_on_cuda_events_converts_ms_to_seconds_per_call():
    from types import SimpleNamespace

    cuda = FakeCuda()
    times = device_times(SimpleNamespace(cuda=cuda), "cuda", cuda.op, repeats=3)
    # One call lasts 2 ms = 0.002 s; a sample must last 10 ms, so it runs ceil(10 / 2) = 5 calls
    # (10 ms); 10 ms / 5 calls = 0.002 s per call.
    assert times == pytest.approx([0.002, 0.002, 0.002])
    # warm-up 1 + sizing 1 + 3 samples × 5 = 17 calls of 2 ms
    assert cuda.clock_ms == pytest.approx(34.0)
    assert cuda.synchronized == 1  # after the warm-up


def test_an_fp8_value_error_is_a_note_not_a_crash():
    # some of torch._scaled_mm's CUDA checks raise ValueError (TORCH_CHECK_VALUE)
    torch = pytest.importorskip("torch")

    def timer(fn, repeats):
        raise ValueError("Multiplication of two Float8_e5m2 matrices is not supported")

    notes: list[str] = []
    s = Settings(Path("."), matmul_size=16)
    assert matmul_figures(torch, s, notes, "cpu", timer) == []
    assert len(notes) == 5 and notes[-1].startswith("matmul fp8 not measured: Multiplication")


def test_gpu_copy_bytes_by_hand():
    torch = pytest.importorskip("torch")
    s = Settings(Path("."), gpu_bytes=2**20, repeats=2)
    notes: list[str] = []
    figures = {f.name: f for f in gpu_copy_figures(torch, s, notes, "cpu", set_timer(0.5, 0.25))}
    assert notes == []
    # device-to-device: 1,048,576 B read + 1,048,576 B written = 2,097,152 B per copy
    assert figures["hbm copy bandwidth"].samples == (4_194_304.0, 8_388_608.0)
    # host <-> device: 1,048,576 B moved once
    assert figures["host to device bandwidth"].samples == (2_097_152.0, 4_194_304.0)
    assert figures["device to host bandwidth"].samples == (2_097_152.0, 4_194_304.0)
    assert all(f.unit == "B/s" for f in figures.values())


def test_matmul_flops_by_hand_in_every_precision():
    torch = pytest.importorskip("torch")
    s = Settings(Path("."), matmul_size=32, repeats=2)
    notes: list[str] = []
    figures = {f.name: f for f in matmul_figures(torch, s, notes, "cpu", set_timer(0.5, 0.25))}
    # 2 · 32^3 = 65,536 FLOP per matmul
    for precision in ("fp32", "tf32", "bf16", "fp16"):
        assert figures[f"matmul {precision}"].samples == (131_072.0, 262_144.0), precision
        assert figures[f"matmul {precision}"].unit == "FLOP/s"
    if "matmul fp8" in figures:  # PyTorch 2.13's CPU build runs _scaled_mm
        assert figures["matmul fp8"].samples == (131_072.0, 262_144.0)
    else:
        assert any(n.startswith("matmul fp8 not measured") for n in notes)


def test_real_timing_of_gpu_paths_on_the_cpu():
    torch = pytest.importorskip("torch")
    s = Settings(Path("."), gpu_bytes=2**16, matmul_size=32, repeats=2)
    notes: list[str] = []
    figures = gpu_copy_figures(torch, s, notes, "cpu") + matmul_figures(torch, s, notes, "cpu")
    assert len(figures) >= 7
    for f in figures:
        assert len(f.samples) == 2 and f.low > 0, f.name


def test_fp8_operands_have_the_layout_cuda_needs():
    torch = pytest.importorskip("torch")
    n = 32  # a multiple of 16, as the CUDA kernel requires
    a, b, scale = fp8_operands(torch, n, "cpu")
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.stride() == (32, 1)  # row-major
    assert b.stride() == (1, 32)  # column-major
    assert scale.dtype == torch.float32 and scale.numel() == 1
    out = torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.shape == (n, n)
    expected = a.float() @ b.float()
    assert torch.allclose(out.float(), expected, rtol=2e-2, atol=0.5)


def tf32_state(torch):
    matmul = torch.backends.cuda.matmul
    return torch.get_float32_matmul_precision(), matmul.fp32_precision


def test_tf32_is_set_consistently_and_restored():
    torch = pytest.importorskip("torch")
    before = tf32_state(torch)
    with fp32_matmul_mode(torch, tf32=True):
        # legacy and new API agree, so an fp32 CUDA matmul would not raise on mixed APIs
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert tf32_state(torch) == ("high", "tf32")
    assert tf32_state(torch) == before
    with fp32_matmul_mode(torch, tf32=False):
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert tf32_state(torch) == ("highest", "ieee")
    assert tf32_state(torch) == before
    with pytest.raises(ValueError), fp32_matmul_mode(torch, tf32=True):
        raise ValueError("a failed measurement")
    assert tf32_state(torch) == before


@pytest.mark.parametrize(
    "error, note",
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore"), "CUDA out of"),
        (RuntimeError(), "RuntimeError"),  # no message: the note names the error
    ],
)
def test_failures_become_notes(error, note):
    torch = pytest.importorskip("torch")

    def failing(fn, repeats):
        raise error

    s = Settings(Path("."), gpu_bytes=1024, matmul_size=16)
    notes: list[str] = []
    assert matmul_figures(torch, s, notes, "cpu", failing) == []
    assert gpu_copy_figures(torch, s, notes, "cpu", failing) == []
    assert len(notes) == 5 + 3
    assert all(note in n and "\n" not in n for n in notes)
    assert notes[0].startswith("matmul fp32 not measured")


# --- the preset a GPU machine writes -----------------------------------------------------------


def gpu_calibration(**drop: bool) -> Calibration:
    figures = {
        "dram copy bandwidth": 2.0e11,
        "storage write bandwidth": 6.0e9,
        "storage read bandwidth": 1.2e10,
        "storage read latency": 8.52e-5,
        "storage write latency": 2.0e-5,
        "hbm copy bandwidth": 4.1e12,
        "host to device bandwidth": 5.3e10,
        "device to host bandwidth": 4.9e10,
        "matmul fp32": 5.1e13,
        "matmul tf32": 3.8e14,
        "matmul bf16": 7.5e14,
        "matmul fp16": 7.6e14,
        "matmul fp8": 1.2e15,
    }
    units = {"latency": "s", "matmul": "FLOP/s"}
    made = {
        name: Figure(
            name,
            next((u for k, u in units.items() if k in name), "B/s"),
            (value * 0.9, value, value * 1.1),
            "by hand",
        )
        for name, value in figures.items()
        if not drop.get(name.replace(" ", "_"))
    }
    return Calibration(
        figures=made,
        notes=[],
        host_memory_bytes=2_000_000_000_000,
        storage_capacity_bytes=7_680_000_000_000,
        gpu_name="NVIDIA H200",
        gpu_memory_bytes=150_754_820_096,
    )


def test_quantities_are_strings_the_units_parser_reads():
    assert quantity(4.8e12, "B/s") == "4.8 TB/s"
    assert quantity(8.52e-5, "s") == "85.2 us"
    assert quantity(1.979e15, "FLOP/s") == "1979 TFLOP/s"
    assert quantity(150_754_820_096, "B") == "150.8 GB"
    assert quantity(2.5e16, "FLOP/s") == "2.5e+04 TFLOP/s"
    assert parse("2.5e+04 TFLOP/s", Kind.FLOP_RATE) == 2.5e16


def test_gpu_preset_by_hand():
    text = hardware_preset(gpu_calibration(), load_preset("hardware", "h200-hbf"), "h200-hbf")
    check_preset(text)  # what `tiersim calibrate` checks before it writes the file
    data = yaml.safe_load(text)
    gpu = data["gpu"]
    assert gpu["name"] == "NVIDIA H200" and gpu["memory"] == "hbm"
    assert gpu["peak_flops"] == {
        "fp32": "51 TFLOP/s",
        "tf32": "380 TFLOP/s",
        "bf16": "750 TFLOP/s",
        "fp16": "760 TFLOP/s",
        "fp8": "1200 TFLOP/s",
    }
    assert (gpu["efficiency"], gpu["optimizer_efficiency"]) == (0.803, 0.8)  # from the base
    assert "kernels" not in gpu  # the base's kernel table measures another device
    hbm = data["tiers"]["hbm"]
    assert (hbm["capacity"], hbm["bandwidth"]) == ("150.8 GB", "4.1 TB/s")
    assert data["links"]["pcie"]["bandwidth"] == "49 GB/s"  # the slower direction
    raw = {"name": "gpu", "model": {"preset": "gpt2"}, "hardware": {"preset": "none", **data}}
    hw = build(raw, Path.cwd(), "test").scenario.hardware
    assert hw.gpu.peak_flops["bf16"] == pytest.approx(7.5e14)
    assert hw.gpu.peak_flops["fp8"] == pytest.approx(1.2e15)
    assert hw.tiers["hbm"].read_bw == pytest.approx(4.1e12)
    assert hw.tiers["hbm"].capacity == pytest.approx(150.8e9)


def test_host_memory_is_one_gpus_share_as_in_every_preset():
    """A preset's tiers are per GPU (h200-hbf: 2 TB and 921.6 GB/s of DRAM a node, 256 GB and
    115 GB/s a GPU); the calibrated one gave each GPU the whole host's memory and bandwidth,
    8x an 8-GPU node's share, so DRAM offload looked 8x roomier and faster than it is."""
    text = hardware_preset(gpu_calibration(), load_preset("hardware", "h200-hbf"), "h200-hbf")
    data = yaml.safe_load(text)
    assert data["network"]["gpus_per_node"] == 8  # the base's, copied
    # host 2,000,000,000,000 B / 8 GPUs = 250,000,000,000 B; copies 2.0e11 B/s / 8 = 2.5e10
    assert data["tiers"]["dram"]["capacity"] == "250 GB"
    assert data["tiers"]["dram"]["bandwidth"] == "25 GB/s"
    assert data["cpu"]["memory_bandwidth"] == "25 GB/s"
    assert "divided by the 8 GPU(s) that share it" in " ".join(text.split())
    # a GH200 superchip has its Grace memory to itself (gpus_per_node 1): nothing divided
    gh = yaml.safe_load(hardware_preset(gpu_calibration(), load_preset("hardware", "gh200"), "gh"))
    assert (gh["tiers"]["dram"]["capacity"], gh["tiers"]["dram"]["bandwidth"]) == (
        "2 TB",
        "200 GB/s",
    )


def test_gpu_preset_with_one_copy_direction_missing():
    cal = gpu_calibration(device_to_host_bandwidth=True, matmul_fp8=True)
    text = hardware_preset(cal, load_preset("hardware", "h200-hbf"), "h200-hbf")
    check_preset(text)
    data = yaml.safe_load(text)
    assert data["links"]["pcie"]["bandwidth"] == "53 GB/s"
    assert "fp8" not in data["gpu"]["peak_flops"]  # not the base H200's figure


def _gpu_a100_base(sm_count: int | None) -> tuple[dict, list[str], object]:
    """The preset calibrate writes for a GPU with `sm_count` SMs on dgx-a100's figures: its gpu
    section, the keys it lists as copied, and the hardware a scenario builds from it."""
    cal = dataclasses.replace(gpu_calibration(), gpu_sm_count=sm_count)
    text = hardware_preset(cal, load_preset("hardware", "dgx-a100"), "dgx-a100")
    check_preset(text)
    data = yaml.safe_load(text)
    copied = _header(text).split("NOT measured, copied from base preset 'dgx-a100': ")[1]
    raw = {"name": "gpu", "model": {"preset": "gpt2"}, "hardware": {"preset": "none", **data}}
    return (
        data["gpu"],
        copied.rstrip(".").split(", "),
        build(raw, Path.cwd(), "t").scenario.hardware,
    )


def test_a_calibrated_gpu_keeps_every_step_model_figure_of_the_base_and_lists_it():
    # dgx-a100.yaml's gpu section: efficiency 0.736, sm_count 108, l2_bandwidth 5.4 TB/s,
    # memory_efficiency 0.90, optimizer_efficiency 0.90, collective_sm_share 0.15. Dropped,
    # they became 0.5, none, none, 1.0, 0.8 and 0.0 (hardware_schema.Gpu's defaults) unsaid.
    gpu, copied, hw = _gpu_a100_base(sm_count=132)  # the device says 132 SMs (an H200)
    assert gpu["sm_count"] == 132 and hw.gpu.sm_count == 132  # measured, not the base's 108
    assert "gpu.sm_count" not in copied
    assert (gpu["l2_bandwidth"], gpu["memory_efficiency"], gpu["collective_sm_share"]) == (
        "5.4 TB/s",
        0.90,
        0.15,
    )
    assert (hw.gpu.l2_bandwidth, hw.gpu.memory_efficiency) == (5.4e12, 0.90)
    assert (hw.gpu.collective_sm_share, hw.gpu.efficiency) == (0.15, 0.736)
    for key in ("efficiency", "optimizer_efficiency", "l2_bandwidth", "memory_efficiency"):
        assert f"gpu.{key}" in copied, (key, copied)
    assert "gpu.collective_sm_share" in copied
    assert "gpu.name" not in copied and "gpu.peak_flops" not in copied  # measured


def test_a_gpu_that_reports_no_sm_count_keeps_the_base_s_and_says_so():
    gpu, copied, hw = _gpu_a100_base(sm_count=None)
    assert gpu["sm_count"] == 108 and hw.gpu.sm_count == 108 and "gpu.sm_count" in copied


def test_a_gpu_that_fails_to_start_is_a_note(tmp_path: Path, monkeypatch):
    torch = pytest.importorskip("torch")
    import tiersim.groundtruth.calibrate as cal_module

    def broken(*args):
        raise RuntimeError("CUDA driver initialization failed, you might not have a CUDA gpu.")

    monkeypatch.setattr(cal_module, "torch_with_cuda", lambda notes: torch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", broken)
    cal = calibrate(tiny_settings(tmp_path))
    gpu_figures = {n for n in cal.figures if n not in HOST_FIGURES and not n.startswith("cpu ")}
    assert not gpu_figures and cal.gpu_name is None
    assert "GPU not measured: CUDA driver initialization failed" in cal.notes[-1]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_on_the_gpu_every_figure_is_measured(tmp_path: Path):
    import torch

    before = tf32_state(torch)
    cal = calibrate(tiny_settings(tmp_path))
    assert tf32_state(torch) == before
    expected = {"hbm copy bandwidth", "host to device bandwidth", "device to host bandwidth"}
    expected |= {f"matmul {p}" for p in ("fp32", "tf32", "bf16", "fp16")}
    if torch.cuda.get_device_capability() >= (8, 9):  # fp8 matmuls: Ada and Hopper on
        expected.add("matmul fp8")
    assert expected <= set(cal.figures), cal.notes
    assert cal.gpu_name and cal.gpu_memory_bytes
    # the device's own SM count (an H200 has 132), which the preset writes as gpu.sm_count
    assert cal.gpu_sm_count == torch.cuda.get_device_properties(0).multi_processor_count
    assert "GPU not measured" not in " ".join(cal.notes)


# --- where the preset goes: checked before measuring, written atomically -----------------------


class FullDisk:
    """Stands in for `os` in tiersim.report.output: the data never reaches the disk (fsync fails
    as on a full one); everything else is the real module."""

    def __getattr__(self, name):
        return getattr(os, name)

    def fsync(self, fd):
        raise OSError(errno.ENOSPC, "No space left on device")


def _no_measuring(monkeypatch):
    # the command imports its measuring code when it runs: patched where it is defined
    import tiersim.groundtruth.calibrate as measuring

    def measured(*args):
        raise AssertionError("the machine was measured before the output path was checked")

    monkeypatch.setattr(measuring, "calibrate", measured)


@pytest.mark.parametrize(
    "out, why",
    [
        ("hw.preset", "hw.preset: a preset is loaded only from a .yaml or .yml file"),
        ("hw.YAML", "hw.YAML: a preset is loaded only from a .yaml or .yml file"),
        ("", ": is a folder (expected a file path)"),
        ("base.yaml", "base.yaml: is this command's own input"),
        # a file's folder is not made (a mistyped one would be, silently)
        ("no/hw.yaml", "no/hw.yaml: its folder {tmp}/no does not exist (expected a file path in"),
    ],
)
def test_an_unusable_out_exits_2_before_measuring(tmp_path: Path, capsys, monkeypatch, out, why):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(load_preset("hardware", "h200-hbf")))
    _no_measuring(monkeypatch)
    argv = ["--path", str(tmp_path), "--base", str(base), "--out", str(tmp_path / out)]
    err = _calibrate_fails(argv, capsys)
    # named as the command's other errors are: "tiersim calibrate: --out: ..."
    assert said(err.strip(), "tiersim calibrate").coded == ("E-RESULTS", "--out")
    assert err.startswith(f"tiersim calibrate: --out: {tmp_path / out}")
    assert why.format(tmp=tmp_path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.yaml"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_in_a_folder_that_cannot_be_written_exits_2_before_measuring(capsys, monkeypatch):
    _no_measuring(monkeypatch)
    err = _calibrate_fails(["--out", "/proc/hw.yaml"], capsys)
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-RESULTS", "--out") and line.message.startswith("/proc/hw.yaml: ")


def test_a_preset_that_cannot_be_written_leaves_the_old_one(tmp_path: Path, capsys, monkeypatch):
    import tiersim.report.output

    out = tmp_path / "hw.yaml"
    out.write_text("# the preset from last time\n")
    monkeypatch.setattr(tiersim.report.output, "os", FullDisk())
    err = _calibrate_fails(["--path", str(tmp_path), "--out", str(out)], capsys)
    line = said(err.strip(), "tiersim calibrate")
    assert line.coded == ("E-RESULTS", "--out")
    assert line.message.startswith(f"{out}: ") and "No space left on device" in line.message
    assert out.read_text() == "# the preset from last time\n"  # not emptied, not half-written
    assert [p.name for p in tmp_path.iterdir()] == ["hw.yaml"]  # no temporary file either


def test_cpu_adamw_rates_are_measured_where_pytorch_is(tmp_path: Path):
    pytest.importorskip("torch", reason="PyTorch (tiersim[measure]) measures the CPU AdamW rates")
    cal = calibrate(tiny_settings(tmp_path))
    for name in ("fused", "default"):
        f = cal.figures.get(f"cpu adamw rate ({name})")
        if f is None:  # a build without the fused CPU kernel says so
            assert any(f"cpu adamw rate ({name}) not measured" in n for n in cal.notes)
            continue
        assert f.unit == "param/s" and len(f.samples) == 3 and f.low > 0
        assert "65,536 fp32 parameters with 2 thread(s)" in f.method


def test_without_pytorch_the_cpu_optimizer_is_skipped_and_said(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("no torch here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    notes: list[str] = []
    assert optimizer_figures(1024, 2, 1, notes) == []
    assert notes == ["CPU optimizer not measured: PyTorch is not installed (tiersim[measure])"]


def test_the_preset_keeps_the_base_optimizer_rate_and_says_why(tmp_path: Path):
    fused = Figure("cpu adamw rate (fused)", "param/s", (1e9, 1.2e9, 1.1e9), "test")
    cal = calibrate(tiny_settings(tmp_path))
    cal = Calibration({**cal.figures, fused.name: fused}, cal.notes, 2**30, 10**12)
    base = load_preset("hardware", "h200-hbf")
    text = hardware_preset(cal, base, "h200-hbf")
    assert yaml.safe_load(text)["cpu"]["optimizer_rate"] == base["cpu"]["optimizer_rate"]
    assert "cpu.optimizer_rate is the base preset's, not a measured AdamW rate" in text
    assert "1.1 Gparam/s (1 Gparam/s .. 1.2 Gparam/s, 3 runs)" in text  # median, min .. max


def _header(text: str) -> str:
    """The preset's comment header as one line (textwrap breaks it at 98 characters)."""
    return " ".join(line.lstrip("#").strip() for line in text.splitlines() if line[:1] == "#")


def _with_adamw(cal: Calibration) -> Calibration:
    fused = Figure("cpu adamw rate (fused)", "param/s", (6.222e8,), "by hand")
    return Calibration({**cal.figures, fused.name: fused}, cal.notes, 2**30, 10**12)


def test_every_cpu_figure_copied_from_the_base_is_listed_as_not_measured():
    base = load_preset("hardware", "h200-hbf")
    cpu = {"optimizer_rate": "0.2 Gparam/s", "adam_kernel_rate": "0.8 Gparam/s"}
    base = {**base, "cpu": {**cpu, "path_overhead_per_tensor": "2 ms"}}
    text = hardware_preset(_with_adamw(gpu_calibration()), base, "mine")
    # copied as they are: none of them is a figure calibrate measures
    written = yaml.safe_load(text)["cpu"]
    assert (written["adam_kernel_rate"], written["path_overhead_per_tensor"]) == (
        "0.8 Gparam/s",
        "2 ms",
    )
    head = _header(text)
    copied = head.split("NOT measured, copied from base preset 'mine': ")[1]
    listed = copied.rstrip(".").split(", ")
    for key in ("cpu.optimizer_rate", "cpu.adam_kernel_rate", "cpu.path_overhead_per_tensor"):
        assert key in listed, (key, listed)
    assert "cpu.name" not in listed and "cpu.memory_bandwidth" not in listed  # measured here
    # the fused AdamW rate measured (622.2 Mparam/s) is written over neither rate
    assert "cpu.optimizer_rate is the base preset's, not a measured AdamW rate" in head
    assert "cpu.adam_kernel_rate is the base preset's, not a measured AdamW rate" in head
    assert "622.2 Mparam/s (622.2 Mparam/s .. 622.2 Mparam/s, 1 run)" in head  # not "1 runs"


def test_a_base_without_an_optimizer_rate_says_the_default_is_used():
    base = {**load_preset("hardware", "h200-hbf"), "cpu": {"adam_kernel_rate": "0.8 Gparam/s"}}
    head = _header(hardware_preset(_with_adamw(gpu_calibration()), base, "mine"))
    assert "cpu.adam_kernel_rate is the base preset's, not a measured AdamW rate" in head
    assert "cpu.optimizer_rate is tiersim's default, not a measured AdamW rate" in head
    assert "cpu.optimizer_rate," not in head.split("NOT measured")[1]  # nothing copied
