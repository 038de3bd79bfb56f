"""`run --plot`'s memory-timeline panel: the labels where forward, backward and the optimizer
step begin never print on top of each other, even where two phases begin a few events apart
(nemo2407-gpt3-175b-512gpus: forward at event 110 of 284, backward at 122). Checked on the
labels' extents as matplotlib's Agg renderer lays them out."""

from __future__ import annotations

import itertools

import pytest
from conftest import SCENARIOS
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tiersim.config.load import load_scenario
from tiersim.report.plot_memory import draw_memory_timeline
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import gpu_timeline
from tiersim.state.timeline import PHASES


@pytest.fixture(scope="module")
def nemo_timeline():
    path = SCENARIOS / "published" / "nemo2407-gpt3-175b-512gpus.yaml"
    r = resolve(load_scenario(path).scenario)
    return gpu_timeline(r, build_inventory(r))


# the panel as `run --plot` lays it out: the figure's 13 in width alone, and its left half
# where the host's timeline stands beside it (report/plot.py, _memory_panels)
@pytest.mark.parametrize("columns", [1, 2])
def test_phase_labels_do_not_overlap(nemo_timeline, columns):
    starts = {e.phase: i for i, e in reversed(list(enumerate(nemo_timeline.events)))}
    assert starts["backward"] - starts["forward"] < 0.05 * len(nemo_timeline.events)
    fig = Figure(figsize=(13, 2.6), layout="constrained", dpi=100)
    ax = fig.add_subplot(fig.add_gridspec(1, columns)[0, 0])
    draw_memory_timeline(ax, nemo_timeline)
    FigureCanvasAgg(fig).draw()
    labels = [x for x in ax.texts if x.get_text().strip() in PHASES[1:]]
    assert sorted(x.get_text().strip() for x in labels) == sorted(PHASES[1:])
    for a, b in itertools.combinations(labels, 2):
        ea, eb = a.get_window_extent(), b.get_window_extent()
        assert not ea.overlaps(eb), (a.get_text(), b.get_text())
    for x in labels:  # each still inside its panel
        box, panel = x.get_window_extent(), ax.get_window_extent()
        assert panel.y0 <= box.y0 and box.y1 <= panel.y1
