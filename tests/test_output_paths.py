"""Output paths a user names (`wear --plot`, `plan`/`compare --emit-out`) are checked before
any work: none replaces the command's own scenario, a folder is refused, and a mistyped
folder is not made. Each refusal exits 2 with the option, the path and what is expected, and
leaves the files as they were."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import SCENARIOS

SCENARIO = SCENARIOS / "llama2-7b-hbf-optimizer.yaml"


@pytest.fixture
def own(tmp_path):
    """A copy of a shipped scenario, and its bytes, to check it is left alone."""
    path = tmp_path / "mine.yaml"
    shutil.copy(SCENARIO, path)
    return path, path.read_bytes()


def _refused(code: int, err: str, option: str, path: object, expected: str) -> None:
    assert code == 2, err
    assert f"{option}: {path}: " in err and expected in err and "[E-RESULTS]" in err
    assert "Traceback" not in err


def test_wear_plot_never_replaces_the_scenario(cli, own):
    path, before = own
    code, _, err = cli("wear", path, "--break-even", "--plot", path)
    _refused(code, err, "--plot", path, "expected a file name ending .png")
    assert path.read_bytes() == before


def test_wear_plot_refuses_a_folder_and_a_missing_folder(cli, own, tmp_path):
    path, _ = own
    code, _, err = cli("wear", path, "--break-even", "--plot", tmp_path)
    _refused(code, err, "--plot", tmp_path, "is a folder (expected a file path)")
    typo = tmp_path / "plots" / "hbf.png"
    code, _, err = cli("wear", path, "--break-even", "--plot", typo)
    _refused(code, err, "--plot", typo, "does not exist (expected a file path")
    assert not typo.parent.exists()  # not made: a mistyped folder would be, silently


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_emit_out_never_replaces_the_scenario(cli, own, command):
    path, before = own
    more = ["--set", "training.grad_accumulation=8"] if command == "compare" else []
    args = [command, path, *more, "--emit", "deepspeed", "--emit-out", path]
    code, _, err = cli(*args)
    _refused(code, err, "--emit-out", path, "is this command's own input")
    assert path.read_bytes() == before


def test_emit_out_refuses_a_missing_folder_before_the_search(cli, own, tmp_path):
    path, _ = own
    typo = tmp_path / "emited" / "ds.json"
    code, out, err = cli("plan", path, "--emit", "deepspeed", "--emit-out", typo)
    _refused(code, err, "--emit-out", typo, "does not exist (expected a file path")
    assert not typo.parent.exists() and "candidates" not in err + out  # nothing searched


def test_emit_out_without_emit_is_refused(cli, own, tmp_path):
    path, _ = own
    out = tmp_path / "ds.json"
    code, _, err = cli("compare", path, "--set", "training.seq_len=2048", "--emit-out", out)
    assert code == 2 and f"--emit-out: {out}: " in err and "expected --emit" in err
    assert "[E-OPTION]" in err and not out.exists()


def test_a_shipped_preset_is_never_replaced(cli, tmp_path):
    """measure --calibrate and calibrate --out write a preset: never over a shipped one (a
    user's `--model gpt2 --calibrate .../presets/models/gpt2.yaml` replaced it, moving every
    scenario that names gpt2), refused before anything is measured."""
    import tiersim

    shipped = Path(tiersim.__file__).parent / "presets"
    model, hardware = shipped / "models" / "gpt2.yaml", shipped / "hardware" / "dgx2.yaml"
    before = model.read_bytes(), hardware.read_bytes()
    code, _, err = cli("measure", "--model", "gpt2", "--calibrate", model)
    _refused(code, err, "--calibrate", model, "one of tiersim's shipped presets")
    code, _, err = cli("calibrate", "--path", tmp_path, "--out", hardware)
    _refused(code, err, "--out", hardware, "one of tiersim's shipped presets")
    assert (model.read_bytes(), hardware.read_bytes()) == before


def test_import_and_emit_write_whole_files_by_rename(cli, own, tmp_path):
    """A file written in place (truncated, then filled) shows a half-written state to anyone
    reading it and, where the write fails, leaves one; written beside it and renamed over it
    (report.output.write_atomic) it never does. A second hard link to the old file tells the
    two apart: a rename leaves the link's content as it was, an in-place write changes it."""
    path, _ = own
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 8}')
    for option, args in (
        ("--out", ["import", ds, "--set", "model.preset=gpt2", "--gpus", "8"]),
        ("--emit-out", ["compare", path, "--set", "training.seq_len=2048", "--emit", "deepspeed"]),
    ):
        out, link = tmp_path / f"out{option}", tmp_path / f"link{option}"
        out.write_text("old")
        link.hardlink_to(out)
        code, _, err = cli(*args, option, out)
        assert code == 0, err
        assert link.read_text() == "old" and out.read_text() != "old"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("hw.yaml", "is the --out file too"),  # the table would replace the preset just written
        ("missing/k.yaml", "does not exist (expected a file path"),
    ],
)
def test_calibrate_kernels_out_is_checked_before_measuring(cli, tmp_path, name, expected):
    out, kernels = tmp_path / "hw.yaml", tmp_path / name
    code, _, err = cli(
        "calibrate", "--path", tmp_path, "--out", out, "--kernels-out", kernels,
        "--kernels-dry-run",
    )  # fmt: skip
    assert code == 2 and f"--kernels-out: {kernels}: " in err and expected in err, err
    assert not out.exists()  # refused before anything was measured or written
