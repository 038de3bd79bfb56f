"""One run, built once (tiersim.runner.Run): `tiersim run --plot` resolves its scenario once,
simulates it once and works out the GPU's memory timeline once for the report and the picture;
whatever needs another simulation (the full step an extrapolated report's picture draws) is a
variant, simulated once however often it is asked for. Counted, not timed: every Resolved and
Timeline made, and every simulation set up (engine.simulate.prepare, once a simulation)."""

from __future__ import annotations

import collections
import json

import pytest
import yaml
from engine_helpers import merge, scenario, tiny

import tiersim.engine.simulate as engine_simulate
from tiersim import api
from tiersim.runner import Run
from tiersim.state.resolved import Resolved
from tiersim.state.timeline import Timeline

EXTRAPOLATED = {
    "training": {"grad_accumulation": 16},
    "simulation": {"steady_state": "extrapolate"},
}


@pytest.fixture
def made(monkeypatch):
    """made["resolved"], made["timeline"], made["simulated"]: counts since the test began."""
    counts: collections.Counter = collections.Counter()

    def counting(cls, name):
        init = cls.__init__

        def counted(self, *args, **kwargs):
            counts[name] += 1
            init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counted)

    counting(Resolved, "resolved")
    counting(Timeline, "timeline")
    prepare = engine_simulate.prepare

    def prepared(*args, **kwargs):
        counts["simulated"] += 1
        return prepare(*args, **kwargs)

    monkeypatch.setattr(engine_simulate, "prepare", prepared)
    return counts


def _run_plot(cli, tmp_path, raw) -> dict:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "out"
    code, text, err = cli("run", path, "--plot", "--out", out, "--format", "json")
    assert code == 0, err
    assert (out / "step.png").stat().st_size > 0
    return json.loads(text)


def test_run_plot_resolves_once_and_simulates_once(cli, tmp_path, made):
    report = _run_plot(cli, tmp_path, tiny())
    assert report["sim"]["steady_state"] == "full"  # its own trace is the picture's
    assert dict(made) == {"resolved": 1, "simulated": 1, "timeline": 1}


def test_an_extrapolated_step_s_picture_is_one_variant(cli, tmp_path, made):
    report = _run_plot(cli, tmp_path, merge(tiny(), EXTRAPOLATED))
    assert report["sim"]["steady_state"] == "extrapolated"
    # the run (resolved and simulated once), and the full step the picture draws: one more
    assert dict(made) == {"resolved": 2, "simulated": 2, "timeline": 1}


def test_a_run_s_stages_and_variants_are_worked_out_once(made):
    run = Run(scenario(merge(tiny(), EXTRAPOLATED)))
    for _ in range(2):  # asked twice, made once
        assert run.report["step"]["time_s"] == run.result.time_s
        assert run.full_trace["traceEvents"]
    assert run.simulated(run.given) is run.result  # its own scenario asked as a variant
    assert dict(made) == {"resolved": 2, "simulated": 2, "timeline": 1}


def test_the_api_s_run_draws_its_picture_from_the_same_run(made):
    loaded = api.build(merge(tiny(), EXTRAPOLATED))
    run = api.run(loaded)
    assert made["simulated"] == 1
    run.figure()
    run.figure()
    assert made["simulated"] == 2  # the full step, once
    assert made["resolved"] == 2
