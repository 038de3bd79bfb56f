"""tiersim.api called as a notebook user calls it, with arguments of the wrong kind or value
(review 2026-12-07-f): each a TypeError or an InputError naming the argument and what it
takes, not an AttributeError, KeyError or ZeroDivisionError from deep inside; and `api.run`
of a scenario file's path. One small simulation (GPT-2 on one GPU): about 1 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiersim import api
from tiersim.core.errors import InputError

SEED = Path(__file__).resolve().parent.parent / "scenarios" / "seed-1b-adam.yaml"
TOML = '[model]\nname = "llama3"\nflavor = "8B"\n'


@pytest.fixture(scope="module")
def seed():
    return api.load(SEED)


def test_run_takes_a_scenario_files_path(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("name: g\nmodel: {preset: gpt2}\nhardware: {preset: dgx-h100}\n")
    assert api.run(str(path)).report["scenario"] == "g"
    with pytest.raises(TypeError, match=r"api\.run: expected a scenario .* got NoneType"):
        api.run(None)


@pytest.mark.parametrize("overrides", [5, [1]])
def test_overrides_of_the_wrong_kind(seed, overrides):
    with pytest.raises(TypeError, match=r"overrides: expected a mapping of key path -> value"):
        api.override(seed, overrides)


def test_build_of_a_list():
    with pytest.raises(TypeError, match=r"api\.build: expected a mapping .* got list"):
        api.build(["name: x"])


@pytest.mark.parametrize("values", [2, "adam"])
def test_sweep_axis_not_a_list(seed, values):
    with pytest.raises(InputError) as caught:
        api.sweep(seed, {"training.micro_batch_size": values})
    (problem,) = caught.value.problems
    assert problem.code == "E-SWEEP"
    assert problem.message.endswith("expected a list of values, e.g. [1, 2, 4]")


@pytest.mark.parametrize("gpus", [0, "16", True])
def test_import_gpus_as_the_cli_takes_them(tmp_path, gpus):
    path = tmp_path / "tt.toml"
    path.write_text(TOML)
    with pytest.raises(InputError) as caught:
        api.import_configs(path, gpus=gpus)
    (problem,) = caught.value.problems
    assert (problem.path, problem.code) == ("gpus", "E-OPTION")


@pytest.mark.parametrize("kind", ["jax", "Megatron"])
def test_emit_of_an_unknown_kind(seed, kind):
    # "Megatron" was written as a torchtitan TOML, then KeyError; "jax" the same
    with pytest.raises(InputError, match="expected one of deepspeed, megatron, torchtitan"):
        api.emit(seed, kind)


@pytest.mark.parametrize(
    ("asked", "path"), [({"objective": "speed"}, "objective"), ({"top": 0}, "top")]
)
def test_plan_objective_and_top_checked_first(asked, path):
    # before any candidate is simulated ("speed" ran the whole search, then ranked by nothing)
    with pytest.raises(InputError) as caught:
        api.plan(SEED, **asked)
    assert [(p.path, p.code) for p in caught.value.problems] == [(path, "E-OPTION")]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((None, None), "a_report"),  # was AttributeError: 'NoneType' object has no attribute
        (({"step": {}}, {"steps": 1}), "b_report"),  # a mapping that is no run's report
    ],
)
def test_compare_checks_its_reports_first(seed, args, named):
    # review 2026-12-07-f: api.compare(s, s, None, None) raised AttributeError from deep inside
    with pytest.raises(TypeError, match=rf"api\.compare: {named}: expected a run's report"):
        api.compare(seed, seed, *args)


def test_compare_of_a_scenario_of_the_wrong_kind(seed):
    with pytest.raises(TypeError, match=r"api\.compare: b: expected a scenario .* got int"):
        api.compare(seed, 5, {"step": {}}, {"step": {}})
