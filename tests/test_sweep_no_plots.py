"""A sweep drawn without plots (--no-plots) leaves no earlier sweep's PNGs in plots/: drawn
from other tables (an edited sweep file's, fewer points), they would pass for this one's, as
an earlier step.png would beside a `run` without --plot."""

from __future__ import annotations

from test_sweep_spec import write_sweep


def test_a_no_plots_resume_removes_the_plots_of_an_earlier_table(tmp_path, cli):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    out = tmp_path / "out"
    code, _, err = cli("sweep", path, "--out", out, "--no-plots", "--workers", "1")
    assert code == 0, err
    stale = out / "plots" / "step.time_s.png"  # as an earlier sweep with plots left it
    stale.parent.mkdir()
    stale.write_bytes(b"\x89PNG\r\n\x1a\n an earlier table's")
    mine = out / "plots" / "notes.txt"  # not a plot: left alone
    mine.write_text("kept")
    code, _, err = cli("sweep", path, "--out", out, "--no-plots", "--workers", "1", "--resume")
    assert code == 0, err
    assert not stale.exists()
    assert mine.read_text() == "kept"
