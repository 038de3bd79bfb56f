"""tests/conftest.py's collection under pytest-xdist: the second worker imports the test files
last-first before collecting them (`pytest_collection`, docs/suite-time.md), by the names
pytest gives them, so that its collection finds them imported instead of importing them
again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from conftest import files_to_collect

HERE = Path(__file__).resolve().parent


def _config(*args: str, cwd: Path = HERE.parent) -> SimpleNamespace:
    """What files_to_collect reads of pytest's config: the run's arguments and where it ran."""
    return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=cwd))


def test_the_files_to_collect_are_the_arguments_test_files_in_pytests_order():
    every = files_to_collect(_config("tests"))
    assert every == sorted(HERE.glob("test_*.py")) and HERE / "test_suite_order.py" in every
    named = files_to_collect(
        _config("tests/test_layout.py::test_no_import_cycle", "tests/test_api.py")
    )
    assert named == [HERE / "test_layout.py", HERE / "test_api.py"]
    assert files_to_collect(_config("test_api.py", cwd=HERE)) == [HERE / "test_api.py"]
    assert files_to_collect(_config("benchmarks", "tests/conftest.py")) == []  # no test file here


def test_pytest_imports_a_test_file_by_its_stem():
    """The name the pre-pass imports each file by (`--import-mode prepend`, tests/ not a
    package): under another name its collection would import the file a second time."""
    assert __name__ == Path(__file__).stem


def test_shared_steps_hand_a_scenario_the_step_simulated_first_and_no_other():
    """conftest.shared_steps: within it a Run of a scenario simulated before under it is
    handed that very result (no second engine run), a Run of another scenario or with its
    trace kept is simulated; outside it Run.result is tiersim's own again."""
    from conftest import SCENARIOS, shared_steps

    from tiersim.config.load import load_scenario
    from tiersim.runner import Run

    own = Run.__dict__["result"]
    seed = load_scenario(SCENARIOS / "seed-1b-adam.yaml").scenario
    other = load_scenario(
        SCENARIOS / "seed-1b-adam.yaml", ["training.grad_accumulation=2"]
    ).scenario
    with shared_steps():
        first = Run(seed).result
        with shared_steps():  # nested: the same table
            assert Run(seed).result is first
        assert Run(load_scenario(SCENARIOS / "seed-1b-adam.yaml").scenario).result is first
        assert Run(other).result is not first
        assert Run(seed, record=True).result.trace is not None  # its own run, traced
    assert Run.__dict__["result"] is own
    alone = Run(seed).result  # simulated again outside it: not the same object, the same
    # step (but for `wall_s`, the engine's own wall-clock time, a measure of the simulator)
    assert alone is not first and replace(alone, wall_s=0.0) == replace(first, wall_s=0.0)
