"""CPU time of `tiersim plan`'s parts, which a loaded machine moves far less than wall time
(issue 36's planner targets; docs/plan-scale.md):

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_plan_cpu.py [--chunks 0 150000 ...]

- the 384-candidate space of bench_plan.py, planned on 2 workers: this process's CPU (the
  check, the sample, the ranking) and each worker's, call by call, split into steps simulated
  without their checkpoint (screens) and whole runs (the workers' own start is left out);
- the check of chunks of the default space (3,072 positions each, one process): CPU a
  position.

The workers' calls are timed by wrapping the search's task function in this module, which
the workers' fork server imports as `__main__` (tiersim.sweep.local_start) before any worker
starts; a run without a fork server (spawn) times the main process only.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_plan import DEFAULT, PLAN_384

import tiersim.plan.screening as screening
import tiersim.plan.simulating as simulating

FOLDER = "TIERSIM_BENCH_PLAN_CPU"  # where each worker writes its calls' times (set by main)
_plan_point = screening.plan_point


def timed_plan_point(job):
    """The search's task, its process time appended to this worker's file."""
    start = time.process_time()
    outcome = _plan_point(job)
    with open(Path(os.environ[FOLDER]) / str(os.getpid()), "a") as f:
        f.write(f"{time.process_time() - start} {'screen' if job[0] is not None else 'whole'}\n")
    return outcome


simulating.plan_point = timed_plan_point  # here and, through the preload, in every worker


def plan_384(folder: Path, calls: Path) -> str:
    from tiersim.plan.run import PlanOptions, plan

    space = folder / "default-384.yaml"
    space.write_text(DEFAULT.read_text() + PLAN_384)
    start = time.process_time()
    out = plan(space, PlanOptions(workers=2, progress=io.StringIO()))
    own = time.process_time() - start
    timed = [line.split() for f in calls.glob("*") for line in f.read_text().splitlines()]
    kinds = {k: [float(s) for s, kind in timed if kind == k] for k in ("screen", "whole")}
    total = own + sum(map(sum, kinds.values()))
    return (
        f"384-candidate plan: {own:.2f} s CPU here, {len(kinds['screen'])} screens "
        f"{sum(kinds['screen']):.2f} s, {len(kinds['whole'])} whole runs "
        f"{sum(kinds['whole']):.2f} s on the workers: {total:.2f} s CPU; "
        f"{len(out.sims)} simulated in full, pruned {dict(out.pruned_by_bound)}"
    )


def check_chunks(starts: list[int]) -> str:
    from tiersim.config.load import load_scenario
    from tiersim.config.yamlfile import read_yaml
    from tiersim.plan.prune import prune
    from tiersim.plan.space import candidates
    from tiersim.rulebook import check_plan_section

    raw = read_yaml(DEFAULT, str(DEFAULT))
    space = check_plan_section(load_scenario(DEFAULT, []), DEFAULT, raw, always=True)
    cpu, positions = 0.0, 0
    for first in starts:
        stop = min(first + 3_072, space.size)
        start = time.process_time()
        prune(raw, DEFAULT.parent, str(DEFAULT), candidates(space, first, stop))
        cpu += time.process_time() - start
        positions += stop - first
    return (
        f"default space's check: {cpu:.2f} s CPU for {positions:,} positions "
        f"({cpu / positions * 1e3:.3f} ms a position)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="*", default=[0, 60_000, 150_000, 291_840])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        calls = Path(tmp) / "calls"
        calls.mkdir()
        os.environ[FOLDER] = str(calls)  # before the fork server starts: its workers read it
        print(plan_384(Path(tmp), calls))
    print(check_chunks(args.chunks))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    sys.exit(main())
