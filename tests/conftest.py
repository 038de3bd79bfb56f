"""Shared helpers: build scenarios from small mappings, run the CLI in-process.

Expected values in the tests are never produced by the code under test: they are published
figures (with the source in a comment) or arithmetic written out in the test itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings

from tiersim.cli import main
from tiersim.config.load import build, load_scenario
from tiersim.config.schema import Scenario
from tiersim.state.inventory import Inventory, build_inventory
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve

# No example is timed (tests time nothing): hypothesis's default 200 ms deadline and its
# too_slow health check failed tests on a machine loaded to 10-20 on 2 cores, where an
# example or its data generation waits for a core (docs/flaky-tests.md). Every test's own
# @settings starts from this profile. CI replays the same examples every run (a failure
# there is reproducible); local runs explore new ones each time.
settings.register_profile("untimed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("untimed"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "untimed")

# Under pytest-xdist each worker has a core of its own: PyTorch's OpenMP threads are kept to
# one a process (as many as the machine has cores otherwise: under `make test` on 2 cores,
# test_measure's threads spun waiting for the core the other worker held, 1.6 -> 8-13 s of
# CPU). Set before anything imports torch; the processes the tests start inherit it. The
# measurements that depend on threads set their own (groundtruth/step_timeline.py).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Files whose tests read the same session-scoped runs: under `pytest -n N` (make test) each
# group goes to one worker, so no run is made twice (shipped_run, every_step_drain_run below).
SHARED_RUNS = {
    "test_run_cli.py": "test_golden.py",
    "test_wear.py": "test_golden.py",  # hbf-optimizer-state's steps (shared_steps below)
    "test_cost.py": "test_golden.py",
    "test_reliability_round2.py": "test_doc_shipped_figures.py",
}

# The longest files, handed out first (longest first) so that no long file is left to run on
# one worker while the other has finished: pytest-xdist's own order is by test count, which
# put the long files with few tests (test_sweep_kill's 12, test_library_noise's 2) last.
# Seconds of CPU of their tests (setup, call, teardown, the processes they waited for;
# test_golden's with test_run_cli's, test_doc_shipped_figures's with test_reliability_round2's)
# in a `pytest -n 2 --dist loadfile` run of 0.21.0, 2026-12-07 14:49-15:08 UTC, load average
# 1 rising to 14 on 2 cores; test_fsdp2_step, test_steady, test_step_measure and test_layout
# scaled by the suite2 round's cuts, test_fsdp2_step by the suitecut round's too (-18 %),
# measured file by file (docs/suite-time.md): only their order matters. test_golden's unit
# holds test_wear's and test_cost's too since they share its steps (2026-12-08: their
# shipped HBF runs' engine work no longer counted). A file not listed follows them, in
# pytest-xdist's order.
LONGEST = {
    "test_fsdp2_step.py": 151,
    "test_golden.py": 32,
    "test_muon_sharded.py": 20,
    "test_sweep_kill.py": 19,
    "test_steady.py": 14,
    "test_step_measure.py": 10.7,
    "test_doc_shipped_figures.py": 10,
    "test_adversarial_round2.py": 9.7,
    "test_checkpoint_fork.py": 8.6,
    "test_sweep_dask_failures.py": 8.2,
    "test_library_noise.py": 7.8,
    "test_sweep_dask.py": 6.9,
    "test_checkpoint_apart.py": 6.6,
    "test_plan_screening.py": 6.2,
    "test_plan.py": 5.8,
    "test_review_2026_12_07_l.py": 5.7,  # 5.6 s of it PyTorch's import and a tiny training
    "test_sweep_early_signals.py": 5.5,
    "test_layout.py": 5.3,
    "test_sweep_run.py": 4.5,
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadfile` (make test): whole files to a worker, as pytest-xdist does, with
    SHARED_RUNS's files taken as the file they share runs with, and LONGEST's files first.
    Module-scoped fixtures (a measured run, a plan search) stay made once; another --dist is
    pytest-xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedRunsScheduling(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            folder, _, name = path.rpartition("/")
            return f"{folder}/{SHARED_RUNS[name]}" if name in SHARED_RUNS else path

        def _assign_work_unit(self, node) -> None:
            # the whole queue is known by the first assignment (schedule() fills it first);
            # a stable sort keeps pytest-xdist's order among the files not listed
            if not self.ordered:
                units = sorted(self.workqueue.items(), key=lambda u: -longest(u[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return SharedRunsScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session) -> None:
    """In pytest-xdist's second worker: import the test files to be collected last-first,
    before collecting them (in pytest's order, as every worker must).

    Every worker collects every test file. In a fresh checkout and virtualenv (CI's) nothing
    is compiled yet: the two workers start together and, collecting in the same order, both
    compile the same modules (pytest's assertion rewriting of each test file, tiersim's and
    the libraries' modules) at the same moment, each a full collection's worth.
    Taken from opposite ends, each compiles about half and then finds the other half
    written (docs/suite-time.md). The modules are the ones pytest would import, by the same
    name (`--import-mode prepend`: the file's stem, tests/ on sys.path), so its collection
    finds them imported; one that fails to import is left to the collection to report."""
    if os.environ.get("PYTEST_XDIST_WORKER") != "gw1":
        return
    for path in reversed(files_to_collect(session.config)):
        with contextlib.suppress(Exception, pytest.skip.Exception):
            importlib.import_module(path.stem)


def files_to_collect(config) -> list[Path]:
    """The test files of this folder named by the run's arguments (a folder: its test files;
    a file, or a test in it), in pytest's order."""
    here = Path(__file__).resolve().parent
    files: list[Path] = []
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        found = sorted(path.glob("test_*.py")) if path.is_dir() else [path]
        files += [f for f in found if f.parent == here and f.name.startswith("test_")]
    return files


def longest(scope: str) -> float:
    """LONGEST's seconds for a work unit (a test file's path), 0 for a file not listed."""
    return LONGEST.get(scope.rpartition("/")[2], 0)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """In a pytest-xdist worker whose tests are all done: ignore SIGINT from here on.

    Once every worker has finished, the controller tells them to exit, and execnet's worker
    (execnet/gateway_base.py, `_terminate_execution`) sends itself a SIGINT if its pytest has
    not returned within 5 s. Under load it often has not: after this hook pytest's own cleanup
    runs gc.collect() five times over a heap holding torch and every tiersim module, and the
    KeyboardInterrupt landed in hypothesis's gc callback ("Exception ignored in: ...
    gc_callback ... KeyboardInterrupt" at the end of a passing run). Every result has been
    sent by then; ignored, the signal cuts nothing short and prints nothing (execnet ends the
    worker with os._exit 10 s later if it is still busy). docs/flaky-tests.md."""
    if (
        os.environ.get("PYTEST_XDIST_WORKER")
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCENARIOS = ROOT / "scenarios"

GB = 10**9
GiB = 2**30


def scenario(raw: dict[str, Any], base_dir: Path = FIXTURES) -> Scenario:
    """Validate a scenario mapping the way the loader does (presets, defaults, checks)."""
    return build(raw, base_dir, "test.yaml").scenario


def published(name: str, *overrides: str):
    """A shipped published scenario (`scenarios/published/NAME`, `--set`-style overrides),
    loaded as a user's file is and resolved."""
    return resolve(load_scenario(SCENARIOS / "published" / name, list(overrides)).scenario)


def inventory(raw: dict[str, Any]) -> Inventory:
    return build_inventory(resolve(scenario(raw)))


def parameters(model: dict[str, Any]) -> int:
    """Parameter count of a `model:` section, resolved through presets / config.json."""
    return build_model(scenario({"name": "count", "model": model}).model).parameters


def generic(parameters: int, layers: int = 1, **model: Any) -> dict[str, Any]:
    """A generic model section: a parameter count and a layer count, nothing else."""
    return {"parameters": parameters, "layers": layers, **model}


@pytest.fixture
def write(tmp_path: Path):
    """write(mapping_or_text, name='s.yaml') -> path of a scenario file in a temp folder."""

    def _write(content: dict[str, Any] | str, name: str = "s.yaml") -> Path:
        path = tmp_path / name
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        path.write_text(text)
        return path

    return _write


@pytest.fixture(scope="session")
def shipped_run(tmp_path_factory):
    """shipped_run(case) -> (exit code, what it printed, its --out folder) of `tiersim run
    SCENARIO --format json --out FOLDER [--set ...]` (golden_cases.run_json) for a
    golden_cases.Case, run once a session: test_golden and test_run_cli read the same runs of
    the shipped scenarios. The folder is shared: read it, never change it."""
    from golden_cases import run_json

    runs: dict[Any, tuple[int, str, Path]] = {}

    def _run(case) -> tuple[int, str, Path]:
        if case not in runs:
            folder = tmp_path_factory.mktemp("run")
            with shared_steps():
                runs[case] = (*run_json(case, folder), folder)
        return runs[case]

    return _run


# Measured steps shared by value (shared_steps): a scenario and whether its trace is kept ->
# the engine's result, the first time a command simulated it under shared_steps.
_STEPS: dict[tuple[str, bool], Any] = {}


@contextlib.contextmanager
def shared_steps():
    """Within it, every tiersim.runner.Run's measured step (`Run.result`: the engine's
    simulation, a pure function of the scenario as given and of `record`) is the one simulated
    for the same scenario the first time in this process under `shared_steps`: the same
    object, so the same values. The commands around it (loading, checks, the wear remedies'
    search, the report, its text) run in full each time; only the engine's run is not made
    again. `tiersim run`, `wear` and `compare` of scenarios/hbf-optimizer-state.yaml simulate
    the same step and its HBF remedy's grad_accumulation (about 3 s of CPU each time) in
    test_golden, test_wear (text and JSON) and test_cost (SHARED_RUNS: one worker)."""
    from tiersim.runner import Run

    original = Run.__dict__["result"]
    if getattr(original, "shared", False):  # already within one
        yield
        return

    def result(self) -> Any:
        key = (self.given.model_dump_json(), self.record)
        if key not in _STEPS:
            _STEPS[key] = original.func(self)
        return _STEPS[key]

    shared = functools.cached_property(result)
    shared.__set_name__(Run, "result")
    shared.shared = True
    Run.result = shared
    try:
        yield
    finally:
        Run.result = original


# docs/science.md's drain outlasting the step (Llama 2 7B, NVMe writing 1 GB/s, one
# micro-batch, a checkpoint every step): about 40 s of CPU a run (by cProfile nearly all of it
# the five simulations of its HBF wear remedy's grad_accumulation), read by
# test_doc_shipped_figures and test_reliability_round2 (SHARED_RUNS: one worker), made once.
EVERY_STEP_DRAIN = (
    "hardware.tiers.nvme.write_bandwidth=1 GB/s",
    "training.grad_accumulation=1",
    "checkpoint.every_steps=1",
)


@pytest.fixture(scope="session")
def every_step_drain_run(tmp_path_factory) -> tuple[int, str, str, Path]:
    """(exit code, standard output, standard error, its --out folder) of `tiersim run
    scenarios/default.yaml --format json --out FOLDER --set ...` (EVERY_STEP_DRAIN) in this
    process, run once a session. The folder is shared: read it, never change it."""
    out = tmp_path_factory.mktemp("drain") / "out"
    argv = ["run", str(SCENARIOS / "default.yaml"), "--format", "json", "--out", str(out)]
    argv += [a for s in EVERY_STEP_DRAIN for a in ("--set", s)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return code, stdout.getvalue(), stderr.getvalue(), out


@pytest.fixture
def cli(capsys):
    """cli('inventory', path, '--format', 'json') -> (exit code, stdout, stderr), in-process."""

    def _cli(*args: object) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _cli


@pytest.fixture
def cli_json(cli):
    """The JSON report of `tiersim inventory FILE --format json [extra args]`."""

    def _run(path: Path, *extra: object) -> dict[str, Any]:
        code, out, err = cli("inventory", path, "--format", "json", *extra)
        assert code == 0, err
        return json.loads(out)

    return _run
