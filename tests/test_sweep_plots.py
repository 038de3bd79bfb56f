"""Sweep plots people can read: the figure's axes, series and panels, checked on the figure
objects (the drawing is what is tested here: the rows are made up, nothing is simulated),
and a killed sweep's temporary files removed on resume."""

from __future__ import annotations

import io

from test_sweep_spec import TINY, write_sweep

from tiersim.sweep.axes import dims, layout, output_scale, quantity
from tiersim.sweep.plots import base_budgets, sweep_figure, varying_outputs
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
    line, ring = ax.get_lines()  # the points, and a red ring round the one over its budget
    assert line.get_linestyle() == "None" and line.get_marker() == "o"
    assert list(ring.get_xdata()) == [1] and ring.get_label() == "_over budget all points"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["no", "yes"]
    (ax,) = sweep_figure(spec, points, table, "wear.hbf.lifetime_days", budgets).axes
    # the legend says what the budget is: 5 x 365 = 1,825 days
    budget = [ln for ln in ax.get_lines() if ln.get_label() == "budget: 1,825 days (5 years)"]
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
    from tiersim.sweep.estimate import Work, estimate_s, layer_passes, work

    def passes(*overrides):
        return layer_passes(load_scenario(SCENARIOS / "default.yaml", list(overrides)).scenario)

    # default (its async checkpoint measured apart, tiersim.engine.checkpoint_apart): its 16
    # micro-batches are extrapolated from one run of the longest sample, 5 (samples 3, 4, 5:
    # one period each, no pipeline, the shortest 0 warm-up forwards + 3), 1 step (steps are
    # independent without the checkpoint) x (32 layers + 1), and the checkpoint from one
    # more run of that step: 2 x 1 x 5 x 33
    assert passes() == 2 * 1 * 5 * 33
    # so 1,024 costs the same two runs; simulated in full it costs all of them
    assert passes("training.grad_accumulation=1024") == 2 * 1 * 5 * 33
    assert passes("training.grad_accumulation=1024", "simulation.steady_state=full") == (
        3 * 1024 * 33
    )
    # 10 micro-batches: the runs (12 of them) would cost more than the 10: all simulated
    assert passes("training.grad_accumulation=10") == 3 * 10 * 33
    # the first took 2 s for 100 passes: 0.02 s a pass; 250 more on 2 workers is 2.5 s
    assert estimate_s(2.0, 100, [200, 50], 2) == 2.5
    # and the simulations each runs: the default's async checkpoint is measured apart
    # (tiersim.engine.checkpoint_apart): one plain run of the longest sample, 5 micro-batches
    # in 1 step (its steps are independent without the checkpoint), and one run of that step
    # with its checkpoint: 2 x 1 x 5 x 33 = 330 passes, 2 runs x 1 step x 33 units = 66 step
    # passes; 10 micro-batches' one (99)
    assert work(load_scenario(SCENARIOS / "default.yaml").scenario) == Work(2 * 1 * 5 * 33, 2, 66)
    ten = load_scenario(SCENARIOS / "default.yaml", ["training.grad_accumulation=10"])
    assert work(ten.scenario) == Work(3 * 10 * 33, 1, 99)


def test_point_plots_draw_each_points_step_beside_its_report(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    out = tmp_path / "out"
    options = SweepOptions(out, 1, plots=False, point_plots=True, progress=io.StringIO())
    outcome = run_sweep(load_sweep(path), options)
    for row in outcome.table.rows:
        png = (out / "points" / f"{row['key']}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        assert (out / "points" / f"{row['key']}.json").exists()


GA, MB = "training.grad_accumulation", "training.micro_batch_size"
TWO = {"grid": {GA: [1, 2, 4], MB: [1, 2, 3]}}  # x: accumulation (3), series: micro-batch (3)


def _legend_texts(fig):
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_points_that_do_not_fit_are_hollow_and_the_capacity_is_drawn(tmp_path):
    spec, points = _spec(tmp_path, TWO)

    def peak(p):  # made up: 50 GB x accumulation x micro-batch
        return 50e9 * p.values[GA] * p.values[MB]

    table = _table(
        points,
        {
            "tiers.hbm.peak_bytes": peak,
            "tiers.hbm.capacity_bytes": lambda p: 141e9,
            "fits": lambda p: peak(p) <= 141e9,
        },
    )
    (ax,) = sweep_figure(spec, points, table, "tiers.hbm.peak_bytes", {}).axes
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    # micro-batch 1: 50, 100, 200 GB: the last is over 141 GB; micro-batch 2: 100, 200, 400
    assert list(lines["1"].get_ydata()) == [50.0, 100.0, 200.0]
    assert lines["1"].get_markevery() == [0, 1]  # filled markers only where it fits
    assert list(lines["_unfit 1"].get_xdata()) == [4] and lines["_unfit 1"].get_ydata() == [200]
    assert list(lines["_unfit 2"].get_ydata()) == [200.0, 400.0]
    assert list(lines["_unfit 3"].get_xdata()) == [1, 2, 4]  # 150 GB at accumulation 1
    assert lines["_unfit 2"].get_markerfacecolor() == "white"
    assert lines["_unfit 2"].get_color() == lines["2"].get_color()
    assert list(lines["capacity 141 GB"].get_ydata()) == [141.0, 141.0]
    legend = _legend_texts(ax.figure)
    assert "hollow: does not fit a tier" in legend and "capacity 141 GB" in legend


def test_a_series_equal_to_another_is_dashed_and_says_so(tmp_path):
    spec, points = _spec(tmp_path, TWO)
    # micro-batches 1 and 2 give the same tokens/s everywhere, 3 five times as many
    table = _table(
        points,
        {"step.tokens_per_s": lambda p: 1000.0 * p.values[GA] * (5 if p.values[MB] == 3 else 1)},
    )
    fig = sweep_figure(spec, points, table, "step.tokens_per_s", {})
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"1", "2 (= 1)", "3"}
    assert lines["2 (= 1)"].get_linestyle() == "--" and lines["1"].get_linestyle() == "-"
    assert lines["1"].get_marker() != lines["2 (= 1)"].get_marker()
    assert _legend_texts(fig) == ["1", "2 (= 1)", "3"]  # everything fits: no hollow entry


def test_shares_are_drawn_in_percent(tmp_path):
    spec, points = _spec(tmp_path, {"grid": {GA: [1, 2, 4]}})
    for name in (
        "step.mfu",
        "step.bottleneck.bandwidth_utilization",
        "tiers.hbf.ports.write.bandwidth_utilization",
    ):
        table = _table(points, {name: lambda p: 0.1 * p.values[GA]})
        (ax,) = sweep_figure(spec, points, table, name, {}).axes
        assert ax.get_ylabel() == f"{name} (%)"
        assert [round(y, 9) for y in ax.get_lines()[0].get_ydata()] == [10.0, 20.0, 40.0]
    assert output_scale("model.parameters", [1]).factor == 1.0


def test_round_off_is_not_plotted_and_no_axis_has_an_offset(tmp_path):
    spec, points = _spec(tmp_path, {"grid": {GA: [1, 2, 4]}})
    table = _table(
        points,
        {
            # 1.3e-9 apart at most: the arithmetic's round-off (hbf-write-vs-accumulation's)
            "checkpoint.goodput": lambda p: 0.9999999987 + 1e-10 * p.values[GA],
            "checkpoint.stall_s": lambda p: 1.0 + 1e-13 * p.values[GA],
            # 99.998 %, 99.999 %, 100 %: a real difference, a hundred-thousandth
            "checkpoint.goodput_at_optimum": lambda p: 1 - 2e-5 / p.values[GA],
        },
    )
    assert varying_outputs(table) == ["checkpoint.goodput_at_optimum"]
    fig = sweep_figure(spec, points, table, "checkpoint.goodput_at_optimum", {})
    fig.draw_without_rendering()
    (ax,) = fig.axes
    assert ax.yaxis.get_major_formatter().get_offset() == ""
    labels = [float(t.get_text()) for t in ax.get_yticklabels()]
    assert all(99.99 <= v <= 100.01 for v in labels)  # the values, not offsets from them


def test_the_title_wraps_before_the_legend(tmp_path):
    sweep = {"name": "hbf-write-vs-accumulation", **TWO}
    spec, points = _spec(tmp_path, sweep)
    name = "tiers.hbf.ports.write.bandwidth_utilization"
    table = _table(points, {name: lambda p: 0.1 * p.values[GA] + 0.01 * p.values[MB]})
    fig = sweep_figure(spec, points, table, name, {})
    fig.draw_without_rendering()
    title = fig._suptitle.get_window_extent()
    assert "\n" in fig._suptitle.get_text()
    assert title.x1 <= fig.legends[0].get_window_extent().x0


def test_points_over_a_write_budget_are_ringed_in_red(tmp_path):
    spec, points = _spec(tmp_path, TWO)
    table = _table(
        points,
        {
            "step.tokens_per_s": lambda p: 1000.0 * p.values[GA] * p.values[MB],
            # made up: the budget holds while accumulation x micro-batch is at most 2
            "wear.hbf.within_budget": lambda p: p.values[GA] * p.values[MB] <= 2,
            "fits": lambda p: p.values[MB] < 3,  # micro-batch 3 does not fit
        },
    )
    fig = sweep_figure(spec, points, table, "step.tokens_per_s", {})
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    # micro-batch 1 at accumulation 1, 2, 4: products 1, 2, 4: only the last is over
    assert list(lines["_over budget 1"].get_xdata()) == [4]
    assert list(lines["_over budget 1"].get_ydata()) == [4000.0]
    # micro-batch 2: products 2, 4, 8: the last two are over
    assert list(lines["_over budget 2"].get_xdata()) == [2, 4]
    # micro-batch 3: products 3, 6, 12, all over, and none fits: hollow and ringed both
    assert list(lines["_over budget 3"].get_xdata()) == [1, 2, 4]
    assert list(lines["_unfit 3"].get_xdata()) == [1, 2, 4]
    ring = lines["_over budget 2"]
    assert ring.get_marker() == "o" and ring.get_markerfacecolor() == "none"
    assert ring.get_markeredgecolor() == "#C44E52"  # the budget line's red
    assert ring.get_markersize() > lines["2"].get_markersize()  # round the point, not over it
    # the series keep the colour cycle's first three colours: the rings take none of it
    from matplotlib.colors import to_hex

    cycle = ["#1f77b4", "#ff7f0e", "#2ca02c"]  # matplotlib's default tab10, first three
    assert [to_hex(lines[k].get_color()) for k in ("1", "2", "3")] == cycle
    legend = _legend_texts(fig)
    assert legend[-2:] == ["hollow: does not fit a tier", "red ring: over the write budget of hbf"]


def test_the_ring_s_legend_names_every_tier_whose_budget_the_points_break(tmp_path):
    # on a plot of one drive's figure the ring may mean another's budget: the legend says whose
    spec, points = _spec(tmp_path, TWO)
    table = _table(
        points,
        {
            "wear.nvme.margin": lambda p: 2.0,  # the drive plotted holds its budget everywhere
            "wear.nvme.within_budget": lambda p: True,
            "wear.hbf.within_budget": lambda p: p.values[GA] < 4,
            "wear.dram.within_budget": lambda p: None,  # no budget on that tier: no verdict
        },
    )
    fig = sweep_figure(spec, points, table, "wear.nvme.margin", {})
    assert _legend_texts(fig)[-1] == "red ring: over the write budget of hbf"
    table = _table(
        points,
        {
            "wear.nvme.margin": lambda p: 0.5,
            "wear.nvme.within_budget": lambda p: p.values[MB] > 1,
            "wear.hbf.within_budget": lambda p: p.values[GA] < 4,
        },
    )
    fig = sweep_figure(spec, points, table, "wear.nvme.margin", {})
    assert _legend_texts(fig)[-1] == "red ring: over the write budget of hbf and nvme"


def test_a_direction_only_the_markers_change_along_is_drawn_as_panels(tmp_path):
    spec, points = _spec(tmp_path, TWO)
    table = _table(
        points,
        {
            "step.time_s": lambda p: 2.0 * p.values[GA],  # micro-batch does not move it
            "wear.hbf.within_budget": lambda p: p.values[MB] == 1,  # but moves the budget
        },
    )
    fig = sweep_figure(spec, points, table, "step.time_s", {})
    # left out, micro-batch 1's filled markers would have stood for 2's and 3's over budget
    assert [ax.get_title() for ax in fig.axes] == [f"{MB}={m}" for m in (1, 2, 3)]
    assert "the same for every" not in fig._suptitle.get_text()
    for ax, over in zip(fig.axes, ([], [1, 2, 4], [1, 2, 4]), strict=True):
        (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "all points"]
        assert list(line.get_ydata()) == [2.0, 4.0, 8.0]  # the same curve in each
        rings = [ln for ln in ax.get_lines() if ln.get_label().startswith("_over budget")]
        assert [list(r.get_xdata()) for r in rings] == ([over] if over else [])
