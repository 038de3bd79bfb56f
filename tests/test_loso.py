"""Leave one source out (tiersim/groundtruth/loso.py), on made-up runs worked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiersim.groundtruth.loso import leave_one_source_out
from tiersim.groundtruth.published import Reference


def ref(name: str, source: str, time_s: float, calibrates: str = "", unfitted=()) -> Reference:
    return Reference(Path(name), time_s, source, False, "", None, calibrates, "time_s", unfitted)


def test_each_fitted_source_is_predicted_without_its_fit():
    refs = [
        ref("a1", "A, t1", 10.0, "x 0.3", ("x=0",)),
        ref("a2", "A, t2", 20.0),
        ref("b1", "B, t1", 5.0),  # no fit: not left out
    ]

    # with the fit every run is 2 % slow; without it (x=0) a1 is 20 % fast, a2 10 % fast
    def predicted(r, overrides):
        if not overrides:
            return r.iteration_time_s * 1.02
        assert overrides == ("x=0",)
        return {"a1": 8.0, "a2": 18.0}[str(r.scenario)]

    (left,) = leave_one_source_out(refs, predicted)
    assert left.source == "A" and left.fitted == "x 0.3" and left.overrides == ("x=0",)
    assert left.with_fit.mean_abs_error == pytest.approx(0.02)
    # (20 % + 10 %) / 2 = 15 %, max 20 %
    assert left.without_fit.mean_abs_error == pytest.approx(0.15)
    assert left.without_fit.max_abs_error == pytest.approx(0.20)
