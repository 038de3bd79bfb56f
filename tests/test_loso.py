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


def test_a_constant_fitted_on_the_source_outside_the_runs_compared_is_left_out_too():
    # source K's constant was fitted on its own Table 4 (no run here): its runs are counted
    # (none calibrates), and left out with the overrides its `fit` names
    refs = [
        Reference(Path("k1"), 10.0, "K, t5", False, unfitted=("y=1",), fit="y 0.7 (Table 4)"),
        ref("k2", "K, t5", 20.0),
    ]

    # with the fit: 1 % and 3 % slow; without it (y=1): 10 % and 5 % fast
    def predicted(r, overrides):
        if not overrides:
            return {"k1": 10.1, "k2": 20.6}[str(r.scenario)]
        return {"k1": 9.0, "k2": 19.0}[str(r.scenario)]

    (left,) = leave_one_source_out(refs, predicted)
    assert left.source == "K" and left.fitted == "y 0.7 (Table 4)"
    assert left.with_fit.mean_abs_error == pytest.approx(0.02)  # (1 + 3) / 2 %
    assert left.without_fit.mean_abs_error == pytest.approx(0.075)  # (10 + 5) / 2 %
    assert left.without_fit.max_abs_error == pytest.approx(0.10)
    assert not any(r.calibrates for r in refs)  # still compared: no calibration run


def test_the_a100s_fitted_efficiency_is_left_out_of_korthikanti():
    from tiersim.groundtruth.published import load_references

    refs = {r.name: r for r in load_references()}
    k = refs["korthikanti2022-22b-full-recompute"]
    assert k.fit.startswith("gpu.efficiency 0.736 of dgx-a100")
    assert k.unfitted == ("hardware.gpu.kernels=a100-sxm",) and not k.calibrates


def test_a_fit_without_its_overrides_is_refused(tmp_path):
    from tiersim.core.errors import InputError
    from tiersim.groundtruth.published import load_references

    (tmp_path / "a.yaml").write_text("name: a\n")
    (tmp_path / "references.yaml").write_text(
        "a.yaml: {iteration_time_s: 1.0, derived: false, source: S, fit: y 0.7}\n"
    )
    with pytest.raises(InputError, match=r"a.yaml.fit: expected the constant fitted"):
        load_references(tmp_path)
