"""`tiersim run --plot` read as a reader reads it: a lightly used link is drawn light, not as
a solid bar, and says its share of the step; occupancy panels show their peaks whole, keep
legends and notes off the curve, flag a tier that does not fit and say a tier is unused; the
time axes use the unit the step is said in. Checked on the artists the figure holds."""

from __future__ import annotations

import itertools

import plot_panels as panels
import pytest
from conftest import SCENARIOS
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb

from tiersim.config.load import load_scenario
from tiersim.report.plot import step_figure
from tiersim.runner import full_trace, report_with_result

GB = 10**9
T0 = 10.0  # the measured step starts 10 s into the traced run, as after warm-up steps


def _trace(tracks: dict[tuple[int, str], list[tuple[float, float, str]]], step_s, memory=()):
    """A trace of one measured step [T0, T0 + step_s]: tracks (pid, thread name) with their
    (start, end, category) spans in seconds from the step's start; memory counters
    (tier, time from the step's start, bytes)."""
    events = []
    for tid, ((pid, name), spans) in enumerate(tracks.items()):
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        )
        for start, end, cat in spans:
            ts = (T0 + start) * 1e6
            events.append(
                {
                    "ph": "X",
                    "name": cat,
                    "cat": cat,
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": (T0 + end) * 1e6 - ts,
                    "args": {},
                }
            )
    for tier, at, nbytes in memory:
        events.append(
            {
                "ph": "C",
                "name": f"{tier} occupancy",
                "pid": 5,
                "ts": (T0 + at) * 1e6,
                "args": {"bytes": nbytes},
            }
        )
    other = {"measured_start_s": T0, "measured_end_s": T0 + step_s}
    return {"traceEvents": events, "otherData": other}


def _report(step_s: float, tiers: dict[str, tuple[float, float]]) -> dict:
    """A report of a step of step_s, all of it forward + backward; tiers: (capacity, peak)."""
    step = {
        "time_s": step_s,
        "tokens_per_s": 1000.0,
        "compute_s": step_s,
        "recompute_s": 0.0,
        "optimizer_on": "cpu",
        "optimizer_s": 0.0,
        "pipeline_bubble_s": 0.0,
        "exposed_transfer_s": 0.0,
        "exposed_cpu_s": 0.0,
    }
    table = {
        name: {
            "capacity_bytes": cap,
            "peak_bytes": peak,
            "resident_bytes": peak,
            "fits": peak <= cap,
        }
        for name, (cap, peak) in tiers.items()
    }
    return {"scenario": "synthetic", "step": step, "tiers": table}


# the timeline's colours of the work and state classes these tests draw
COLLECTIVE, FORWARD, WEIGHTS, GRADIENTS = "#64B5CD", "#4C72B0", "#DD8452", "#937860"


def _bars(ax, colour: str) -> list[tuple[float, float, float, float]]:
    """(x0, x1, y-centre, alpha) of every rectangle drawn in `colour`, however shaded."""
    rgb = to_rgb(colour)
    out = []
    for coll in ax.collections:
        colours = coll.get_facecolors()
        for k, path in enumerate(coll.get_paths()):
            face = colours[k % len(colours)]
            if tuple(face[:3]) != pytest.approx(rgb):
                continue
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            out.append((xs.min(), xs.max(), (ys.min() + ys.max()) / 2, face[3]))
    return out


def _labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


HBM = {"hbm": (141 * GB, 20 * GB)}


def test_a_lightly_used_link_is_shaded_by_its_busy_share():
    # 1 s step: the GPU computes 0-0.8 s; a collective of 1 ms every 8 ms in that time, 100 of
    # them: in flight 100 x 1 ms = 0.1 s, 10.0 % of the step; each falls in one 2 ms slice of
    # the 500 the row is drawn as, which it keeps busy half the time
    link = [(0.008 * k, 0.008 * k + 0.001, "tensor_comm") for k in range(100)]
    tracks = {(1, "compute"): [(0.0, 0.8, "forward")], (3, "nvlink tensor"): link}
    fig = step_figure(_report(1.0, HBM), _trace(tracks, 1.0, [("hbm", 0.0, 20 * GB)]))
    timeline = panels.timeline(fig)
    bars = _bars(timeline, COLLECTIVE)
    assert len(bars) == 100
    assert all(x1 - x0 == pytest.approx(0.002) for x0, x1, _, _ in bars)
    assert all(alpha == pytest.approx(0.5) for *_, alpha in bars)  # half busy: half shade
    assert sum((x1 - x0) * alpha for x0, x1, _, alpha in bars) == pytest.approx(0.1)
    assert max(x1 for _, x1, _, _ in bars) <= 0.8  # nothing drawn where nothing moves
    # the GPU's stream is drawn exact: one solid bar 0-0.8 s
    [(x0, x1, _, alpha)] = _bars(timeline, FORWARD)
    assert (x0, x1, alpha) == (0.0, pytest.approx(0.8), 1.0)
    assert _labels(timeline) == [
        "GPU compute, 80.0 % busy",
        "nvlink: tensor group, 10.0 % in flight",
    ]


def test_a_tiny_transfer_stays_visible_and_a_long_one_solid():
    # a 10 us read in a 1 s step: one 2 ms slice at the least shade, 0.001 % said '<0.1 %';
    # a 0.4 s write from 0.2 s: solid from 0.2 to 0.6 s, 40.0 %
    tracks = {
        (1, "compute"): [(0.0, 1.0, "forward")],
        (4, "hbm read"): [(0.5, 0.50001, "weights")],
        (4, "hbm write"): [(0.2, 0.6, "gradients")],
    }
    fig = step_figure(_report(1.0, HBM), _trace(tracks, 1.0, [("hbm", 0.0, 20 * GB)]))
    timeline = panels.timeline(fig)
    [(x0, x1, _, alpha)] = _bars(timeline, WEIGHTS)
    assert (x0, x1) == (pytest.approx(0.5), pytest.approx(0.502)) and alpha == 0.25
    [(x0, x1, _, alpha)] = _bars(timeline, GRADIENTS)
    assert (x0, x1, alpha) == (pytest.approx(0.2), pytest.approx(0.6), 1.0)
    assert _labels(timeline)[1:] == [
        "port hbm read, <0.1 % in flight",
        "port hbm write, 40.0 % in flight",
    ]


def _occupancy_panels(fig):
    return panels.occupancy(fig)


def test_an_overfull_tier_shows_its_peak_whole_and_says_it_does_not_fit():
    # HBM of 100 GB filled from 60 GB to 130 GB at 0.5 s, back to 60 GB at 0.9 s
    memory = [("hbm", 0.0, 60 * GB), ("hbm", 0.5, 130 * GB), ("hbm", 0.9, 60 * GB)]
    report = _report(1.0, {"hbm": (100 * GB, 130 * GB), "dram": (200 * GB, 50 * GB)})
    memory += [("dram", 0.0, 50 * GB)]
    fig = step_figure(report, _trace({(1, "compute"): [(0.0, 1.0, "forward")]}, 1.0, memory))
    FigureCanvasAgg(fig).draw()
    hbm, dram = _occupancy_panels(fig)
    assert hbm.get_ylim()[1] >= 130  # the peak, in GB, not clipped at 1.1 x capacity (110)
    curve, capacity = hbm.get_lines()
    assert max(curve.get_ydata()) == 130 and list(capacity.get_ydata()) == [100, 100]
    # one legend for the row, outside the last panel: inside, it covers a curve
    assert hbm.get_legend() is None
    legend = dram.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["occupancy", "capacity"]
    assert legend.get_window_extent().x0 >= dram.get_window_extent().x1
    assert "DOES NOT FIT: hbm 130.00 GB of 100.00 GB" in fig.get_suptitle()
    assert hbm.get_title() == "hbm: peak 130.00 GB of 100.00 GB\nDOES NOT FIT"
    assert "DOES NOT FIT" not in dram.get_title()


def test_notes_sit_under_the_panel_and_an_unused_tier_says_so():
    # NVMe of 8 TB holding 20 GB, with a 30 GB peak in another step: capacity off scale
    # (8 TB is over 10 x the 30 GB peak) and the peak outside the picture; HBF unused
    memory = [("hbm", 0.0, 20 * GB), ("nvme", 0.0, 20 * GB)]
    tiers = {"hbm": (141 * GB, 20 * GB), "nvme": (8000 * GB, 30 * GB), "hbf": (4000 * GB, 0)}
    fig = step_figure(
        _report(1.0, tiers), _trace({(1, "compute"): [(0.0, 1.0, "forward")]}, 1.0, memory)
    )
    FigureCanvasAgg(fig).draw()
    _, nvme, hbf = _occupancy_panels(fig)
    [note] = nvme.texts
    assert "capacity 8.00 TB off scale" in note.get_text()
    assert "(peak 0.38 % of it)" in note.get_text()  # 30 GB / 8 TB = 0.375 %
    assert "its peak is outside this picture" in note.get_text()
    # the note under the panel's axis label: clear of the curve, whatever the panel's height
    assert note.get_window_extent().y1 <= nvme.xaxis.label.get_window_extent().y0
    assert not hbf.lines and not hbf.axison
    assert hbf.get_title() == "hbf: not used in this run"
    assert [t.get_text() for t in hbf.texts] == ["capacity 4.00 TB"]


def test_an_overfull_peak_outside_the_picture_keeps_its_note_off_the_capacity_line():
    # the review's gpt3-175b on an 80 GB HBM: the drawn step holds 68 GB, its peak 82.04 GB
    # is in another moment (the memory timeline's), so the capacity line is on scale
    # (80 <= 10 x 82.04) and "its peak is outside this picture" is said (82.04 > 1.01 x 68)
    memory = [("hbm", 0.0, 28 * GB), ("hbm", 0.5, 68 * GB), ("hbm", 8.0, 28 * GB)]
    tiers = {"hbm": (80 * GB, 82.04 * GB), "dram": (256 * GB, 0), "nvme": (3840 * GB, 0)}
    fig = step_figure(
        _report(10.0, tiers), _trace({(1, "compute"): [(0.0, 10.0, "forward")]}, 10.0, memory)
    )
    FigureCanvasAgg(fig).draw()
    hbm = _occupancy_panels(fig)[0]
    _, capacity = hbm.get_lines()
    assert list(capacity.get_ydata()) == [80, 80]  # the dashed line, in GB
    [note] = hbm.texts
    assert "its peak is outside this picture" in note.get_text()
    line_y = hbm.transData.transform((0, 80))[1]  # the capacity line, in the figure's pixels
    box = note.get_window_extent()
    assert not box.y0 <= line_y <= box.y1  # the note's lines do not cross it
    assert box.y1 <= hbm.get_window_extent().y0  # nor the axes, where the line is drawn


def test_four_tier_panels_keep_their_titles_and_notes_apart():
    # the default's row: four narrow panels, hbm's peak 50 GB in another step (its note),
    # dram, nvme and hbf capacities over 10 x their peaks (their off-scale notes)
    memory = [(t, 0.0, 20 * GB) for t in ("hbm", "dram", "nvme", "hbf")]
    tiers = {
        "hbm": (150.11 * GB, 50.39 * GB),
        "dram": (256 * GB, 20 * GB),
        "nvme": (7680 * GB, 23.58 * GB),
        "hbf": (4000 * GB, 20 * GB),
    }
    fig = step_figure(
        _report(1.0, tiers), _trace({(1, "compute"): [(0.0, 1.0, "forward")]}, 1.0, memory)
    )
    FigureCanvasAgg(fig).draw()
    row = _occupancy_panels(fig)
    titles = [ax.title.get_window_extent() for ax in row]
    for left, right in itertools.pairwise(titles):
        assert left.x1 < right.x0  # no title runs into the next one
    for ax in row:
        box = ax.get_window_extent()
        for note in ax.texts:  # each note inside its own panel, clear of the legend
            extent = note.get_window_extent()
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1, note.get_text()


def test_a_step_of_minutes_has_its_axes_in_minutes():
    # a 3036 s step is said '50.6 min'; its axes run to 3036 / 60 = 50.6 min
    tracks = {(1, "compute"): [(0.0, 3036.0, "forward")]}
    fig = step_figure(_report(3036.0, HBM), _trace(tracks, 3036.0, [("hbm", 0.0, 20 * GB)]))
    timeline, bar = panels.timeline(fig), panels.breakdown(fig)
    # "simulated", not "measured": beside `tiersim measure`, which measures PyTorch (review d)
    assert timeline.get_xlabel() == "time in the simulated step (min)"
    assert fig.get_suptitle().startswith("synthetic: simulated step 50.6 min, ")
    assert timeline.get_xlim()[1] == pytest.approx(50.6)
    assert bar.get_xlabel() == "where the step's 50.6 min go (min)"
    assert sum(p.get_width() for p in bar.patches) == pytest.approx(50.6)
    assert _occupancy_panels(fig)[0].get_xlabel() == "time in step (min)"


@pytest.fixture(scope="module")
def gpt3():
    loaded = load_scenario(SCENARIOS / "gpt3-175b-tp-pp.yaml")
    report, result = report_with_result(loaded, record=True)
    return report, full_trace(loaded.scenario, result)


def test_gpt3s_tensor_parallel_link_is_not_a_solid_bar(gpt3):
    # the review's case: 1,600 tensor-parallel collectives of 0.18-1.08 ms in the 4.9 s of
    # compute were each widened to 7.3 ms and merged into one solid bar
    report, trace = gpt3
    other = trace["otherData"]
    lo, hi = other["measured_start_s"] * 1e6, other["measured_end_s"] * 1e6
    tids = {
        e["tid"]
        for e in trace["traceEvents"]
        if e["ph"] == "M"
        and e["name"] == "thread_name"
        and e["pid"] == 3
        and e["args"]["name"].startswith("nvlink tensor")
    }
    spans = [
        e
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["pid"] == 3 and e["tid"] in tids and lo <= e["ts"] < hi
    ]
    in_flight = sum(e["dur"] for e in spans) / (hi - lo)  # one lane: they never overlap
    fig = step_figure(report, trace)
    timeline = panels.timeline(fig)
    labels = _labels(timeline)
    [row] = [k for k, label in enumerate(labels) if label.startswith("nvlink: tensor group")]
    bars = [b for b in _bars(timeline, COLLECTIVE) if round(b[2]) == row]
    drawn = sum(x1 - x0 for x0, x1, _, _ in bars)
    solid = sum(x1 - x0 for x0, x1, _, alpha in bars if alpha > 0.9)
    assert solid < 0.05 * drawn
    assert labels[row] == f"nvlink: tensor group, {100 * in_flight:.1f} % in flight"


def test_the_title_names_the_busiest_resource_as_the_text_does():
    """'busiest: network (data group), 6.9 % of its bandwidth', as `run` prints it; the title
    said 'network (data group) (6.9 % of its bandwidth)', two brackets in a row."""
    report = _report(1.0, {"hbm": (100 * GB, 60 * GB)})
    report["step"]["bottleneck"] = {
        "resource": "network (data group)",
        "bandwidth_utilization": 0.069,
    }
    fig = step_figure(report, _trace({(1, "compute"): [(0.0, 1.0, "forward")]}, 1.0))
    assert "; busiest: network (data group), 6.9 % of its bandwidth" in fig.get_suptitle()
