"""tiersim beside its peers, each measured in this same run: ratios, never stored constants.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_peers.py [--repeat 7] [--points 300]
        [--only table5 engine dask]

Printed:
- table5: the eight Korthikanti et al. 2022 Table 5 configurations, tiersim (load the
  scenario file + simulate) and Calculon (read its model, execution and system files +
  compile + run; from its source, `calculon_peer`) in turn in this process, the least CPU
  time of each of `--repeat` rounds, and tiersim/Calculon. Targets (issue 36): the 1T
  configuration (selective + sequence parallel) within 2x, every configuration within 3x.
- engine: the engine's CPU time per SimPy event on the 70B ZeRO-3 NVMe run (32 micro-batches
  all simulated) beside a bare SimPy timeout with a callback, in turn (bench_cost).
- dask: a `--points`-point 7B sweep (bench_sweep's) on the local pool and on a Dask cluster
  (a scheduler and two worker processes on loopback, started before the timing, as a user's
  cluster is), two workers each, in turn, each into a fresh folder: points per second of each
  and Dask/local. Target (issue 36): Dask >= 0.9x the local pool.
The load average is printed with each part: the machine is shared.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # calculon_peer, bench_* beside

import calculon_peer


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def engine_line() -> None:
    from bench_cost import ENGINE_REPEATS, engine_s_per_event

    per_event, bare, events, _ = engine_s_per_event()
    print(
        f"engine: {1e6 * per_event:.2f} us of CPU per event ({events:,} events, 70B, 32 "
        f"micro-batches); a bare SimPy timeout {1e6 * bare:.3f} us (each the least of "
        f"{ENGINE_REPEATS}, in turn): {per_event / bare:.2f}x ({load()})",
        flush=True,
    )


def sweep_rate(
    path: Path, out: Path, executor: str, workers: int, scheduler: str | None = None
) -> float:
    """Points per second of the whole sweep (the local pool's start included; a Dask
    cluster's, started before, not)."""
    from tiersim.sweep.run import SweepOptions, run_sweep
    from tiersim.sweep.spec import load_sweep

    spec = load_sweep(path)
    options = SweepOptions(
        out, workers, executor=executor, scheduler=scheduler, plots=False, progress=io.StringIO()
    )
    started = time.perf_counter()
    outcome = run_sweep(spec, options)
    wall = time.perf_counter() - started
    assert {r["status"] for r in outcome.table.rows} == {"ok"}, "every point should run"
    return spec.size / wall


def dask_line(points: int, repeat: int, workers: int = 2) -> None:
    """The sweep on the local pool and on a Dask cluster (a scheduler and `workers`
    single-threaded worker processes on loopback, started before and left running, as a
    user's cluster is), in turn."""
    import distributed
    from bench_sweep import write_sweep

    best = {"local": 0.0, "dask": 0.0}
    cluster = distributed.LocalCluster(
        host="127.0.0.1",
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=40,
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_sweep(Path(tmp), points)
            for run in range(repeat):
                for executor in best:
                    address = cluster.scheduler_address if executor == "dask" else None
                    out = Path(tmp) / f"{executor}-{run}"
                    rate = sweep_rate(path, out, executor, workers, address)
                    best[executor] = max(best[executor], rate)
    finally:  # the workers' last heartbeats to a closing scheduler are not news
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
        cluster.close()
    print(
        f"sweep of {points} 7B points on {workers} workers (best of {repeat}, in turn): local "
        f"pool {best['local']:.1f} points/s, Dask cluster (started before) "
        f"{best['dask']:.1f} points/s: Dask {best['dask'] / best['local']:.2f}x the local pool "
        f"(target >= 0.9x; {load()})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds of each, least kept")
    parser.add_argument("--points", type=int, default=300, help="points of the Dask sweep")
    parser.add_argument(
        "--only", nargs="+", choices=["table5", "engine", "dask"], default=None, help="parts"
    )
    args = parser.parse_args()
    parts = args.only or ["table5", "engine", "dask"]
    if "table5" in parts:
        print(load())
        calculon_peer.print_table5(args.repeat)
    if "engine" in parts:
        engine_line()
    if "dask" in parts:
        dask_line(args.points, max(1, args.repeat // 3))


if __name__ == "__main__":
    main()
