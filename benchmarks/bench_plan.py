"""What a `tiersim plan` costs against one `tiersim run` of the same scenario, measured in one
run, the two taking turns (issue 36's planner targets):

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_plan.py [--repeat 3] [--workers 2]
        [--only 384|default]

- `384`: the default scenario with a 384-candidate plan: section (each of optimizer state and
  master weights on any of the four tiers, weights on HBM or DRAM, recompute, the micro-batch
  size; docs/speed.md's space): target <= 10x a run;
- `default`: `tiersim plan scenarios/default.yaml` as a user first types it (no plan: section:
  the default space, 294,912 candidates): target <= 300x a run on 2 cores.

Each is a whole process (`python -m tiersim ...`, imports included, as a user runs it), wall
time, `--repeat` rounds in turn (the run, then each plan), the least of each kept; the ratio
is plan / run. The plan's line of what it checked, pruned (by which bound) and simulated is
printed from its JSON report. A loaded machine moves the wall time of both: read the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "scenarios" / "default.yaml"
PLAN_384 = """
plan:
  placement.optimizer: [hbm, dram, nvme, hbf]
  placement.master: [hbm, dram, nvme, hbf]
  placement.weights: [hbm, dram]
  training.recompute: [none, selective, full]
  training.micro_batch_size: [1, 2, 4, 8]
"""


def wall_s(args: list[str], out: Path) -> tuple[float, str]:
    """Wall seconds of one whole `python -m tiersim args...` process, and its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tiersim", *args], env=env, capture_output=True, text=True, cwd=out
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"tiersim {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.stdout


def summary(report: dict) -> str:
    c = report["candidates"]
    pruned = ", ".join(f"{k} {v:,}" for k, v in c["pruned_by_bound"].items()) or "none"
    return (
        f"{report['space']['size']:,} candidates: {c['checked']:,} checked, "
        f"{c['invalid']:,} invalid, {c['do_not_fit_candidates']:,} do not fit, "
        f"{c['duplicates']:,} duplicates, {sum(c['pruned_by_bound'].values()):,} pruned by "
        f"bounds ({pruned}), {c['simulated']:,} simulated"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="rounds in turn, least kept (1)")
    ap.add_argument("--workers", type=int, default=2, help="the plan's workers (2)")
    ap.add_argument("--only", choices=["384", "default"], help="one plan only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        space = folder / "default-384.yaml"
        space.write_text(DEFAULT.read_text() + PLAN_384)
        plans = {"384": space, "default": DEFAULT}
        plans = {k: v for k, v in plans.items() if args.only in (None, k)}
        run = ["run", str(DEFAULT), "--out", str(folder / "results")]
        best: dict[str, float] = {}
        said: dict[str, str] = {}
        for _ in range(args.repeat):
            best["run"] = min(best.get("run", float("inf")), wall_s(run, folder)[0])
            for name, path in plans.items():
                cmd = ["plan", str(path), "--format", "json", "--workers", str(args.workers)]
                elapsed, out = wall_s(cmd, folder)
                best[name] = min(best.get(name, float("inf")), elapsed)
                said[name] = summary(json.loads(out))
    load = os.getloadavg()[0]
    print(f"tiersim run {DEFAULT.name}: {best['run']:.2f} s wall (least of {args.repeat})")
    for name in plans:
        ratio = best[name] / best["run"]
        print(
            f"tiersim plan ({name}): {best[name]:.2f} s wall on {args.workers} workers, "
            f"{ratio:.1f}x the run; {said[name]}"
        )
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
