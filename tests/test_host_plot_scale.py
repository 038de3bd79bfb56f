"""`run --plot`'s host memory timeline panel keeps its curve readable: a capacity more than
ten times the peak is said in a note, not drawn (it would flatten the curve to the axis), as
the tier occupancy panels do; a capacity near the peak is drawn as its dashed line."""

from __future__ import annotations

from matplotlib.figure import Figure

from tiersim.report.plot_host import draw_host_timeline
from tiersim.state.host_timeline import HostTimeline, evaluate_host
from tiersim.state.timeline import Event

GB = 10**9


def _panel(capacity: int, peak: int):
    # two allocations: 2 GB at the start, then the rest of the peak at the optimizer step
    events = [
        Event("start of the step", "start", "a", "resident optimizer", 2 * GB, True),
        Event("optimizer step", "optimizer", "b", "temporaries", peak - 2 * GB, True),
        Event("optimizer step", "optimizer", "b", "temporaries", peak - 2 * GB, False),
    ]
    h = HostTimeline(evaluate_host("dram", capacity, events), node_gpus=8, node_stages=1)
    ax = Figure().add_subplot()
    draw_host_timeline(ax, h)
    return ax


def _dashed(ax) -> list[float]:
    return [line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--"]


def test_far_capacity_is_a_note_and_the_curve_fills_the_panel():
    # peak 16 GB of 256 GB: 6.25 % of it, 256 > 10 x 16
    ax = _panel(256 * GB, 16 * GB)
    assert _dashed(ax) == []
    notes = [t.get_text() for t in ax.texts]
    assert "capacity 256.00 GB off scale\n(peak 6.2 % of it)" in notes
    low, high = ax.get_ylim()
    assert low == 0 and 16 < high < 32  # the peak at least half the axis's height


def test_near_capacity_is_drawn():
    # peak 60 GB of 96 GB: within 10 x, the dashed line at 96 GB and the axis above it
    ax = _panel(96 * GB, 60 * GB)
    assert _dashed(ax) == [96.0]
    assert ax.get_ylim()[1] >= 96
    assert not any("off scale" in t.get_text() for t in ax.texts)


def test_one_event_is_drawn_as_a_line_to_the_steps_end():
    # default.yaml's host timeline: the checkpoint's staged copy alone, 11.79 GB at the start
    events = [Event("start of the step", "start", "s", "staging", 11_792_227_328, True)]
    h = HostTimeline(evaluate_host("dram", 256 * GB, events), node_gpus=8, node_stages=1)
    ax = Figure().add_subplot()
    draw_host_timeline(ax, h)
    curve = ax.lines[0]
    assert list(curve.get_xdata()) == [0, 1]  # from the allocation to the step's end
    assert list(curve.get_ydata()) == [11.792227328, 11.792227328]


def test_a_different_engine_peak_is_said_in_the_panel():
    # zero-infinity-1t-dgx2's figures: the engine's dram occupancy 66.04 GB over the timeline's
    # 65.50 GB (the tier's panel above draws the engine's, titled with the larger)
    events = [Event("forward: L0", "forward", "a", "offloaded activations", 65_500_000_000, True)]
    h = HostTimeline(evaluate_host("dram", 96 * GB, events), node_gpus=16, node_stages=1)
    ax = Figure().add_subplot()
    draw_host_timeline(ax, h, engine_peak=66_040_000_000)
    notes = [t.get_text() for t in ax.texts]
    assert "the simulated step's occupancy peaks\nat 66.04 GB (the dram panel above)" in notes
    ax = Figure().add_subplot()
    draw_host_timeline(ax, h, engine_peak=65_500_000_000)  # equal: nothing to say
    assert not any("simulated" in t.get_text() for t in ax.texts)
