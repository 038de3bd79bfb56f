"""A GPU peak the step does not use is noted. With `hardware.gpu.kernels` naming a measured
table, GEMMs run at the table's rates: `--set hardware.gpu.peak_flops.bf16="100 TFLOP/s"` on
the default scenario (an H200 with the h200-sxm table) left its 9.221 s step as it was and
printed MFU 327.5 %, in silence: a user modelling a smaller or capped GPU read the H200's."""

from __future__ import annotations

from pathlib import Path

from problem_lines import said

from tiersim import api
from tiersim.runner import scenario_notes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "scenarios/default.yaml"


def peak_notes(**overrides: object) -> list:
    notes = api.notes(api.load(DEFAULT, overrides))
    return [n for n in notes if n.path.startswith("hardware.gpu.peak_flops")]


def test_a_peak_below_the_tables_measured_rate_is_noted():
    (note,) = peak_notes(**{"hardware.gpu.peak_flops.bf16": "100 TFLOP/s"})
    assert (note.path, note.code) == ("hardware.gpu.peak_flops.bf16", "W-NO-EFFECT")
    # h200-sxm's best BF16 GEMM, 794.5 TFLOP/s (tiersim/presets/kernels/h200-sxm.yaml)
    assert note.message.startswith("100 TFLOP/s is below the 794.5 TFLOP/s the kernel table")
    assert "hardware.gpu.kernels: null" in note.message


def test_a_peak_or_efficiency_the_table_disagrees_with_is_noted():
    # 2,000 x 0.803 = 1,606 TFLOP/s; 989 x 0.5 = 494.5 TFLOP/s; the table's best 794.5
    (raised,) = peak_notes(**{"hardware.gpu.peak_flops.bf16": "2000 TFLOP/s"})
    assert "2,000 TFLOP/s x gpu.efficiency 0.803 = 1,606 TFLOP/s is not" in raised.message
    (lowered,) = peak_notes(**{"hardware.gpu.efficiency": 0.5})
    assert "989 TFLOP/s x gpu.efficiency 0.5 = 494.5 TFLOP/s is not" in lowered.message


def test_fp8_gemms_are_checked_against_the_fp8_peak():
    # h200-sxm's best FP8 GEMM 1,453.4 TFLOP/s, above a 1,000 TFLOP/s FP8 peak
    overrides = {"training.fp8.recipe": "delayed", "hardware.gpu.peak_flops.fp8": "1000 TFLOP/s"}
    (note,) = peak_notes(**overrides)
    assert note.path == "hardware.gpu.peak_flops.fp8"
    assert note.message.startswith("1,000 TFLOP/s is below the 1,453 TFLOP/s")


def test_no_note_without_a_table_or_for_a_peak_the_step_does_not_use():
    no_table = {"hardware.gpu.peak_flops.bf16": "100 TFLOP/s", "hardware.gpu.kernels": None}
    assert peak_notes(**no_table) == []
    assert peak_notes(**{"hardware.gpu.peak_flops.fp32": "1 TFLOP/s"}) == []  # compute is bf16


def test_no_shipped_scenario_sets_a_rate_its_hardware_overrides():
    # the presets set efficiency = the table's best over the peak (794.5 / 989 = 0.803), and
    # no shipped deepspeed scenario changes cpu.optimizer_rate (tests/test_cpu_rate_notes.py)
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        if path.parent.name == "sweeps" or path.name == "references.yaml":
            continue
        notes = scenario_notes(api.load(path).scenario)
        assert not [n for n in notes if n.path.startswith("hardware.")], path


def test_the_cli_prints_it_beside_the_unchanged_step(cli, tmp_path):
    code, out, err = cli(
        "run", DEFAULT, "--set", "hardware.gpu.peak_flops.bf16=100 TFLOP/s", "--out", tmp_path
    )
    assert code == 0, err
    line = said(err.splitlines()[0].removeprefix("note: "), DEFAULT)
    assert line.coded == ("W-NO-EFFECT", "hardware.gpu.peak_flops.bf16")
    # the golden step, as without the peak (the headline names the machine it is for)
    assert out.startswith("default on h200-hbf (H200 SXM; 8 GPUs, 8 a node): 8.267 s per step")
