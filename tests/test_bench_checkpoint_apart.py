"""benchmarks/bench_checkpoint_apart.py still measures what it names (code-health 2026-12-08:
its hooks had gone stale once `measure_apart` worked the async copy out in closed form, and it
printed "no async checkpoint measured apart" for every scenario). Nothing here is timed: the
test checks that its hooks see the run they read, on default.yaml, whose async checkpoint to
NVMe every 1,000 steps is measured apart (docs/speed.md's eighteenth and twenty-second rounds)."""

from __future__ import annotations

import importlib.util

from conftest import ROOT, SCENARIOS

from tiersim.engine.closed_copy import ClosedRun

# the benchmark's module by its path (benchmarks/ is no package, and stays off sys.path)
_spec = importlib.util.spec_from_file_location(
    "bench", ROOT / "benchmarks" / "bench_checkpoint_apart.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_the_benchmark_keeps_the_run_measure_apart_reads_and_times_each_path():
    kept = bench.kept_runs(SCENARIOS / "default.yaml")
    assert kept["measured"] is True
    runs = bench.timed_runs(kept, 1)
    n, total = len(kept["run"].ops), len(runs["schedule"].ops)
    assert 0 < n < total  # the plain step's ops, then the copy's
    assert isinstance(runs["closed"], ClosedRun)  # the closed form taken, not a reason
    assert len(runs["full"].end) == len(runs["resumed"].end) == total
    # the resumed run is the run from time 0, op for op (tiersim.engine.resume's claim)
    assert runs["resumed"].end == runs["full"].end


def test_a_scenario_not_measured_apart_is_named_with_why(capsys):
    # 8 micro-batches: the step is simulated in full, its checkpoint with the steps after it
    bench.report(SCENARIOS / "hbf-optimizer-state.yaml", 1)
    out = capsys.readouterr().out
    assert out.startswith("hbf-optimizer-state.yaml: no checkpoint measured apart")
    assert "steady_state 'full'" in out
