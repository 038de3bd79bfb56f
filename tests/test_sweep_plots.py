"""Sweep plots people can read: the figure's axes, series and panels, checked on the figure
objects (the drawing is what is tested here: the rows are made up, nothing is simulated),
and a killed sweep's temporary files removed on resume."""

from __future__ import annotations

import io

from test_sweep_spec import TINY, write_sweep

from tiersim.sweep.axes import dims, layout, quantity
from tiersim.sweep.plots import base_budgets, sweep_figure
from tiersim.sweep.rows import Table
from tiersim.sweep.run import SweepOptions, run_sweep
from tiersim.sweep.spec import expand, load_sweep

THREE = {  # the shape of the shipped hbf-wear sweep: 4 x 4 x 5
    "grid": {
        "hardware.tiers.hbf.write_bandwidth": ["25 GB/s", "50 GB/s", "100 GB/s", "200 GB/s"],
        "hardware.tiers.hbf.endurance.pe_cycles": [1000, 3000, 10000, 100000],
        "training.grad_accumulation": [1, 8, 32, 128, 512],
    }
}
BUDGETED = {**TINY, "budget": {"hbf": {"lifetime": "5 years"}}}


def _table(points, outputs):
    """Rows with made-up outputs: each output is a function of the point."""
    rows = [
        {"point": p.index, **p.values, **{n: f(p) for n, f in outputs.items()}, "status": "ok"}
        for p in points
    ]
    swept = list(points[0].values)
    return Table(rows, ["point", *swept, *outputs, "status"], swept, list(outputs))


def _spec(tmp_path, sweep=THREE, base=BUDGETED):
    spec = load_sweep(write_sweep(tmp_path, sweep, base))
    return spec, expand(spec)


def test_three_axes_make_one_figure_of_small_multiples(tmp_path):
    spec, points = _spec(tmp_path)
    x, series, panels = layout(dims(spec))
    # x: the numeric direction with the most values; series the next; panels the rest
    assert x.label == "training.grad_accumulation"
    assert series.label == "hardware.tiers.hbf.write_bandwidth"
    assert [d.label for d in panels] == ["hardware.tiers.hbf.endurance.pe_cycles"]
    ga = "training.grad_accumulation"
    # a made-up output that depends on all three directions
    table = _table(points, {"step.time_s": lambda p: 1.0 + p.values[ga] + sum(p.coords[:2])})
    fig = sweep_figure(spec, points, table, "step.time_s", {})
    assert len(fig.axes) == 4  # one panel per P/E-cycle value
    first = fig.axes[0]
    assert first.get_title() == "hardware.tiers.hbf.endurance.pe_cycles=1000"
    assert [ln.get_label() for ln in first.get_lines()] == THREE["grid"][
        "hardware.tiers.hbf.write_bandwidth"
    ]
    assert list(first.get_lines()[0].get_xdata()) == [1, 8, 32, 128, 512]
    assert first.get_xscale() == "log"  # 1 to 512 spans decades
    assert [t.get_text() for t in first.get_xticklabels()] == ["1", "8", "32", "128", "512"]
    assert first.get_ylabel() == "step.time_s (s)"
    assert first.get_xlabel() == "training.grad_accumulation (log scale)"


def test_directions_the_output_does_not_depend_on_are_left_out(tmp_path):
    spec, points = _spec(tmp_path)
    ga = "training.grad_accumulation"
    table = _table(points, {"links.hbf.utilization": lambda p: 1 / p.values[ga]})
    fig = sweep_figure(spec, points, table, "links.hbf.utilization", {})
    (ax,) = fig.axes  # no panels, no series: only grad_accumulation moves it
    assert [len(ln.get_xdata()) for ln in ax.get_lines()] == [5]
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "the same for every hardware.tiers.hbf.write_bandwidth" in title
    assert ax.get_ylabel() == "links.hbf.utilization (%)"


def test_quantities_are_numeric_axes_ticked_as_written(tmp_path):
    grid = {"grid": {"hardware.tiers.hbf.write_bandwidth": ["10 GB/s", "25 GB/s", "100 GB/s"]}}
    spec, points = _spec(tmp_path, grid)
    table = _table(points, {"tiers.hbm.peak_bytes": lambda p: 2e9 * (1 + p.index)})
    fig = sweep_figure(spec, points, table, "tiers.hbm.peak_bytes", {})
    (ax,) = fig.axes
    assert list(ax.get_lines()[0].get_xdata()) == [10e9, 25e9, 100e9]  # spaced by value
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10 GB/s", "25 GB/s", "100 GB/s"]
    assert list(ax.get_lines()[0].get_ydata()) == [2.0, 4.0, 6.0]  # in GB
    assert ax.get_ylabel() == "tiers.hbm.peak_bytes (GB)"
    assert quantity(("10 GB/s", "1 TB/s"))[1] == [10e9, 1e12]


def test_booleans_are_markers_and_wear_has_its_budget(tmp_path):
    spec, points = _spec(tmp_path, {"grid": {"training.grad_accumulation": [1, 100, 10000]}})
    ga = "training.grad_accumulation"
    table = _table(
        points,
        {
            "wear.hbf.within_budget": lambda p: p.values[ga] > 50,
            "wear.hbf.lifetime_days": lambda p: 18.0 * p.values[ga],
        },
    )
    budgets = base_budgets(spec)
    assert budgets == {"hbf": {"lifetime_days": 5 * 365}}  # 5 years of 365 days
    (ax,) = sweep_figure(spec, points, table, "wear.hbf.within_budget", budgets).axes
    (line,) = ax.get_lines()
    assert line.get_linestyle() == "None" and line.get_marker() == "o"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["no", "yes"]
    (ax,) = sweep_figure(spec, points, table, "wear.hbf.lifetime_days", budgets).axes
    budget = [ln for ln in ax.get_lines() if ln.get_label() == "budget"]
    assert len(budget) == 1 and list(budget[0].get_ydata()) == [1825.0, 1825.0]
    assert ax.get_yscale() == "log"  # 18 to 180,000 days


def test_resume_removes_a_killed_sweeps_temporary_files(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    out = tmp_path / "out"
    options = SweepOptions(out, 1, plots=False, progress=io.StringIO())
    run_sweep(load_sweep(path), options)
    (out / "plots").mkdir()
    stale = [out / "plots" / ".step.time_s.png.4242.tmp", out / "points" / ".ab12.json.77.tmp"]
    for leftover in stale:
        leftover.write_bytes(b"")  # what a SIGKILL mid-write leaves
    resumed = SweepOptions(out, 1, resume=True, plots=False, progress=io.StringIO())
    run_sweep(load_sweep(path), resumed)
    assert not any(p.exists() for p in stale)


def test_estimate_scales_the_first_point_by_the_layer_passes_it_simulates():
    from conftest import SCENARIOS

    from tiersim.config.load import load_scenario
    from tiersim.sweep.estimate import estimate_s, layer_passes

    def passes(*overrides):
        return layer_passes(load_scenario(SCENARIOS / "default.yaml", list(overrides)).scenario)

    # default (its async checkpoint ties steps together): 1 warm-up + measured + trailing = 3
    # steps x (32 layers + 1); its 16 micro-batches are extrapolated from runs of 3, 4 and 5
    # (one period each, no pipeline: the shortest has 0 warm-up forwards + 3), 12 < 16
    assert passes() == 3 * (3 + 4 + 5) * 33
    # so 1,024 costs the same three runs; simulated in full it costs all of them
    assert passes("training.grad_accumulation=1024") == 3 * (3 + 4 + 5) * 33
    assert passes("training.grad_accumulation=1024", "simulation.steady_state=full") == (
        3 * 1024 * 33
    )
    # 10 micro-batches: the runs (12 of them) would cost more than the 10: all simulated
    assert passes("training.grad_accumulation=10") == 3 * 10 * 33
    # the first took 2 s for 100 passes: 0.02 s a pass; 250 more on 2 workers is 2.5 s
    assert estimate_s(2.0, 100, [200, 50], 2) == 2.5


def test_point_plots_draw_each_points_step_beside_its_report(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    out = tmp_path / "out"
    options = SweepOptions(out, 1, plots=False, point_plots=True, progress=io.StringIO())
    outcome = run_sweep(load_sweep(path), options)
    for row in outcome.table.rows:
        png = (out / "points" / f"{row['key']}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        assert (out / "points" / f"{row['key']}.json").exists()
