"""A results folder says one run: `tiersim run` without `--plot` (or `--trace`) does not leave
the picture (or trace) of an earlier run beside the new report, where a reader would take it
for this run's."""

from __future__ import annotations

from conftest import SCENARIOS

SEED = SCENARIOS / "seed-1b-adam.yaml"


def test_a_run_without_plot_removes_the_earlier_runs_picture_and_trace(cli, tmp_path):
    out = tmp_path / "results"
    code, _, err = cli("run", SEED, "--out", out, "--plot", "--trace")
    assert code == 0, err
    assert (out / "step.png").is_file() and (out / "trace.json").is_file()
    # the same folder, another configuration, no --plot and no --trace
    code, text, err = cli("run", SEED, "--out", out, "--set", "training.grad_accumulation=2")
    assert code == 0, err
    assert not (out / "step.png").exists()
    assert not (out / "trace.json").exists()
    assert "step.png" not in text and "trace.json" not in text


def test_a_trace_written_elsewhere_leaves_the_folders_picture_alone_only_when_plotting(
    cli, tmp_path
):
    out, elsewhere = tmp_path / "results", tmp_path / "mine.json"
    code, _, err = cli("run", SEED, "--out", out, "--plot", "--trace", elsewhere)
    assert code == 0, err
    code, _, err = cli("run", SEED, "--out", out, "--plot")
    assert code == 0, err
    assert (out / "step.png").is_file()  # drawn again, this run's
    assert elsewhere.is_file()  # a file outside the results folder is the user's: kept
