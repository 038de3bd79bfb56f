"""`tiersim run --plot`: the picture's title, with a long DOES NOT FIT line under it, stays
inside the picture (it was centred on one line and cut at both edges, its verdict lost)."""

from __future__ import annotations

from conftest import SCENARIOS

from tiersim.config.load import load_scenario
from tiersim.report.plot import step_figure
from tiersim.report.text import fit_warning
from tiersim.runner import full_trace, report_with_result


def test_a_long_does_not_fit_title_is_wrapped_inside_the_figure():
    # seed-1b-adam holds 16 GB of state before its activations: 10 GB of HBM does not fit it
    loaded = load_scenario(SCENARIOS / "seed-1b-adam.yaml", ["hardware.tiers.hbm.capacity=10 GB"])
    report, result = report_with_result(loaded, record=True)
    warning = fit_warning(report)
    assert warning.startswith("DOES NOT FIT") and len(warning) > 150  # wider than 13 inches
    fig = step_figure(report, full_trace(loaded.scenario, result))
    # laid out (constrained layout) as saving it does: a bare Figure's canvas.draw() is a no-op
    fig.draw_without_rendering()
    box = fig._suptitle.get_window_extent()
    width = fig.get_figwidth() * fig.dpi
    assert box.x0 >= 0 and box.x1 <= width, (box.x0, box.x1, width)
    text = fig._suptitle.get_text()
    assert " ".join(text.split()).endswith(" ".join(warning.split()))  # all of it, wrapped
