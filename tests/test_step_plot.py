"""`tiersim run --plot`: the picture of the measured step, its lanes, series and bars, and the
PNG written; and the trace's mark of the measured step."""

from __future__ import annotations

import dataclasses
import json
import struct

import plot_panels as panels
import pytest
from conftest import SCENARIOS

from tiersim.config.load import load_scenario
from tiersim.report.plot import step_figure, timeline_rows
from tiersim.runner import full_trace, report_with_result

P7B = 6_738_415_616


@pytest.fixture(scope="module")
def default_run():
    """The default scenario's report and the trace its picture is drawn from: its step is
    extrapolated from shorter runs, so the picture's trace is of a full run."""
    loaded = load_scenario(SCENARIOS / "default.yaml")
    report, result = report_with_result(loaded, record=True)
    assert result.steady_state == "extrapolated"
    return report, dataclasses.replace(result, trace=full_trace(loaded.scenario, result))


def test_trace_marks_the_measured_step(default_run):
    report, result = default_run
    other = result.trace["otherData"]
    assert other["measured_step"] == 1  # one warm-up step, then the measured one
    step_s = other["measured_end_s"] - other["measured_start_s"]
    assert abs(step_s - report["step"]["time_s"]) <= 1e-9 * step_s
    names = [e["name"] for e in result.trace["traceEvents"] if e.get("cat") == "step"]
    assert names == ["step 0", "step 1 (measured)", "step 2"]


def test_figure_has_the_lanes_series_and_bars(default_run):
    report, result = default_run
    fig = step_figure(report, result.trace)
    timeline, occupancy, bar = panels.timeline(fig), panels.occupancy(fig), panels.breakdown(fig)
    lanes = [t.get_text().split(",")[0] for t in timeline.get_yticklabels()]  # less the share
    # the GPU stream, both directions of the HBF link (state read in, written back), and the
    # ports that move it: HBF's write port is the bottleneck
    for lane in ("GPU compute", "link hbf: hbf->hbm", "link hbf: hbm->hbf", "port hbf write"):
        assert lane in lanes
    assert [a.get_title().split(":")[0] for a in occupancy] == ["hbm", "dram", "nvme", "hbf"]
    hbf = occupancy[3].get_lines()[0].get_ydata()
    assert max(hbf) == min(hbf) == pytest.approx(12 * P7B / 1e9)  # fp32 master + Adam, in GB
    hbm_lines = occupancy[0].get_lines()
    assert len(hbm_lines) == 2  # the occupancy curve and the capacity line
    # H200's 139.80 GiB: 143,155 MiB = 150,108,897,280 B
    assert hbm_lines[1].get_ydata()[0] == 150.108897280
    legend = occupancy[-1].get_legend()  # one for the row, beside its last panel
    assert [t.get_text() for t in legend.get_texts()] == ["occupancy", "capacity"]
    widths = [p.get_width() for p in bar.patches]
    assert sum(widths) == pytest.approx(report["step"]["time_s"], rel=1e-6)
    labels = [c.get_label() for c in bar.containers]
    assert any(label.startswith("exposed transfer") for label in labels)


def test_rows_are_clipped_to_the_measured_step(default_run):
    report, result = default_run
    step_s = report["step"]["time_s"]
    for _, events in timeline_rows(result.trace):
        for _, start, end, _ in events:
            assert 0 <= start < end <= step_s * (1 + 1e-12)


def test_run_plot_writes_a_png(cli, tmp_path):
    code, _, err = cli("run", SCENARIOS / "seed-1b-adam.yaml", "--plot", "--out", tmp_path)
    assert code == 0, err
    png = (tmp_path / "step.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert width == 1300 and 500 <= height <= 2400  # 13 inches wide at 100 dpi
    from matplotlib.image import imread

    pixels = imread(tmp_path / "step.png")[..., :3]
    drawn = (pixels.sum(axis=2) < 2.9).mean()  # not white
    assert drawn > 0.05
    assert json.loads((tmp_path / "report.json").read_text())["step"]["time_s"] > 0


def test_matplotlib_is_imported_only_to_plot():
    import subprocess
    import sys

    code = (
        "import sys, tiersim.cli, tiersim.runner, tiersim.plan.run, tiersim.sweep.run; "
        "from tiersim.cli import main; main(['presets', '--format', 'json']); "
        "sys.exit('matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
