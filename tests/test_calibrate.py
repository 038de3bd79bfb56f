"""`tiersim calibrate`: real measurements at tiny sizes, and a preset that loads as hardware."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tiersim.calibrate import Settings, calibrate
from tiersim.cli import main
from tiersim.config import build, load_preset

TINY = ["--size", "256 KiB", "--memory-size", "1 MiB", "--repeat", "2", "--latency-ops", "4"]
TINY += ["--gpu-size", "1 MiB", "--matmul-size", "256"]
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


def test_unknown_base_preset_exit_2(tmp_path: Path, capsys):
    argv = ["calibrate", "--path", str(tmp_path), "--base", "h300", *TINY]
    assert main(argv) == 2
    assert "unknown hardware preset 'h300'" in capsys.readouterr().err
