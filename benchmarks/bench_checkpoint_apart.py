"""What an async checkpoint's copy costs to work out, measured apart from the steps after it
(issue 36): the closed form today's path takes, against the simulations it replaced.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_checkpoint_apart.py [--repeat N] [FILE...]

For default.yaml, or each scenario given, one point is simulated and, where its async
checkpoint is measured apart (tiersim.engine.checkpoint_apart.measure_apart), what that
measurement reads is kept: the plain run of the longest sample (its ops, their starts and
ends, the schedule it ran) and the checkpoint run's schedule (the plain ops, then the
copy's). Then, each timed on its own (CPU time, least of N):
- `closed form`: the copy worked out beside the plain run (tiersim.engine.closed_copy, the
  path `measure_apart` takes where `copy_queues` allows), or the reason it is refused;
- `from time 0`: the checkpoint run simulated in full (its fallback where the closed form
  fails on the run's times), the reference every other row's op times are compared with;
- `resumed`: the checkpoint run resumed from the plain run watched for where it first differs
  (tiersim.engine.resume: the fallback where `may_close` refuses, and the path before the
  closed form; docs/speed.md's eighteenth round), with what the watch adds to the plain run;
- `copy alone` and `copy and what it moves`: the checkpoint's ops simulated alone (each plain
  op one of them waits for a timer ending at its plain end, no plain flow on the links), then
  with the plain ops the copy moves beside them, in the engine and in a lean fluid simulation
  (benchmarks/lean_part_run.py): the eighteenth round's bounds on simulating only the copy.
Printed first: which plain ops the copy moves (start or end not equal, to the bit, in the
full run and the plain one), by kind, and by how much. Each row gives the largest relative
difference of its ops' starts and ends from the full simulation's.

A scenario whose checkpoint is not measured apart (a blocking one, one simulated over the
steps after it: a step simulated in full, as hbf-optimizer-state.yaml's of 8 micro-batches,
or on each of three samples; or none) is named, with its step's `steady_state`, and nothing
is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def kept_runs(path: Path) -> dict:
    """Simulate the point once, keeping what `measure_apart` reads (res, setup, the plain run)
    and the plain run's schedule (as `may_close` is handed it); `measured`: whether the
    checkpoint was measured apart (None: `measure_apart` was not called)."""
    import tiersim.engine.simulate as simulate
    from tiersim.config.load import load_scenario

    scenario = load_scenario(path, []).scenario
    kept: dict = {"measured": None}
    original_measure, original_close = simulate.measure_apart, simulate.may_close

    def measure(res, setup, plain, run):
        out = original_measure(res, setup, plain, run)
        kept.update(res=res, setup=setup, run=run, measured=out is not None)
        return out

    def may_close(res, topo, plain, longer):
        kept["plain_schedule"] = plain
        return original_close(res, topo, plain, longer)

    simulate.measure_apart, simulate.may_close = measure, may_close
    try:
        result = simulate.simulate(scenario)
        kept.update(steady_state=result.steady_state, checkpoint=result.checkpoint is not None)
    finally:
        simulate.measure_apart, simulate.may_close = original_measure, original_close
    return kept


def least(repeat: int, call) -> tuple[float, object]:
    """The least CPU seconds of `repeat` calls of `call()`, and the last call's result."""
    best, out = math.inf, None
    for _ in range(repeat):
        started = time.process_time()
        out = call()
        best = min(best, time.process_time() - started)
    return best, out


def timed_runs(kept: dict, repeat: int) -> dict:
    """The closed form, the run from time 0 and the resumed run, each timed; their logs."""
    from tiersim.engine.checkpoint_apart import CHECKPOINT_RUN
    from tiersim.engine.closed_copy import closed_copy
    from tiersim.engine.core import run_engine
    from tiersim.engine.resume import Watch, go_on

    res, setup, run = kept["res"], kept["setup"], kept["run"]
    schedule = run.runs.planned(*CHECKPOINT_RUN)
    out: dict = {"schedule": schedule}
    args = (res, setup, schedule, run, run.runs.closed)
    out["closed_s"], out["closed"] = least(repeat, lambda: closed_copy(*args))
    engine_args = (res, setup.topo, schedule, setup.baseline)
    out["full_s"], (_, out["full"], _) = least(repeat, lambda: run_engine(*engine_args))
    plain = kept.get("plain_schedule")
    if plain is None or Watch.of(plain, schedule) is None:
        return out  # (no watch: a copy whose run cannot be resumed from the plain one)
    plain_args = (res, setup.topo, plain, setup.baseline)
    out["plain_s"], _ = least(repeat, lambda: run_engine(*plain_args))
    watched, resumed = math.inf, math.inf
    for _ in range(repeat):
        watch = Watch.of(plain, schedule)
        started = time.process_time()
        watch.run(res, setup.topo, setup.baseline)
        middle = time.process_time()
        if watch.resumed is None:
            return out  # the plain run's state could not be moved over (resume._transplant)
        _, log, _ = go_on(watch.resumed)
        ended = time.process_time()
        watched, resumed = min(watched, middle - started), min(resumed, ended - middle)
    out.update(watched_s=watched, resumed_s=resumed, resumed=log)
    return out


def reduced_run(kept: dict, runs: dict, simulated: list[int]) -> tuple[float, list, object]:
    """The checkpoint run's ops `simulated` (indices into its schedule) run alone in the
    engine, every other op one of them waits for a timer ending at its plain-run end: CPU
    seconds (the run's, not its schedule's), the simulated ops' indices in that run, and
    its log."""
    from tiersim.engine.core import run_engine

    reduced, at = reduced_schedule(kept, runs["schedule"], simulated)
    setup = kept["setup"]
    started = time.process_time()
    _, log, _ = run_engine(kept["res"], setup.topo, reduced, setup.baseline)
    return time.process_time() - started, at, log


def reduced_schedule(kept: dict, schedule, simulated: list[int]) -> tuple:
    """`reduced_run`'s schedule and where each simulated op is in it."""
    from tiersim.engine.ops import Op, OpKind, Role, Schedule

    plain_end = kept["run"].ends
    inside = set(simulated)
    waited = sorted({d for i in simulated for d in schedule.ops[i].deps if d not in inside})
    index = {d: k for k, d in enumerate(waited)}
    ops = [Op(OpKind.JOIN, Role.STATE, "plain op", 0, (), plain_end[d]) for d in waited]
    index.update({i: len(ops) + k for k, i in enumerate(simulated)})
    for i in simulated:
        op = schedule.ops[i]
        ops.append(dataclasses.replace(op, deps=tuple(index[d] for d in op.deps), step=0))
    reduced = Schedule(ops, 1, schedule.prefetch_depth, schedule.net_capacity)
    return reduced, [index[i] for i in simulated]


def lean_run(kept: dict, runs: dict, simulated: list[int]) -> tuple[float, list, object]:
    """`reduced_run` in the lean simulation (benchmarks/lean_part_run.py): CPU seconds (its
    move plans worked out first, untimed, as the engine has them from the plain run), the
    simulated ops' indices, a log of their starts and ends by index."""
    from lean_part_run import plans_of, run_part

    schedule, res, setup = runs["schedule"], kept["res"], kept["setup"]
    capacity = {**setup.topo.capacities, **schedule.net_capacity}
    plans = plans_of(schedule.ops, setup.topo, res.execution.simulation, capacity)
    started = time.process_time()
    log = run_part(schedule.ops, sorted(simulated), kept["run"].ends, plans, capacity)
    return time.process_time() - started, simulated, log


def largest_difference(full, simulated: list[int], at: list[int], log) -> float:
    """The largest relative difference of the simulated ops' starts and ends (in `log`, at
    `at`) from the full simulation's (`full`)."""
    worst = 0.0
    for i, k in zip(simulated, at, strict=True):
        for mine, theirs in ((log.start[k], full.start[i]), (log.end[k], full.end[i])):
            worst = max(worst, abs(mine - theirs) / max(abs(theirs), 1e-300))
    return worst


def report(path: Path, repeat: int) -> None:
    kept = kept_runs(path)
    if kept["measured"] is None:  # (a checkpoint measured with the steps after it, or none)
        how = "measured with the steps after it" if kept["checkpoint"] else "none"
        print(
            f"{path.name}: no checkpoint measured apart (measure_apart not called; the "
            f"checkpoint {how}, the step's steady_state {kept['steady_state']!r}): nothing timed"
        )
        return
    runs = timed_runs(kept, repeat)
    schedule, full, run = runs["schedule"], runs["full"], kept["run"]
    n, every = len(run.ops), list(range(len(runs["schedule"].ops)))
    moved = [i for i in range(n) if (full.start[i], full.end[i]) != (run.starts[i], run.ends[i])]
    ops = [schedule.ops[i] for i in moved]
    kinds = Counter(f"{op.kind.label} {op.src}->{op.dst}".strip(" ->") for op in ops)
    shift = max((abs(full.end[i] - run.ends[i]) for i in moved), default=0.0)
    apart = "measured apart" if kept["measured"] else "measure_apart refused it (None)"
    print(
        f"{path.name} ({apart}): {n} plain ops, {len(schedule.ops) - n} of the checkpoint; "
        f"the copy moves {len(moved)} plain ops ({dict(kinds)}), the most by {shift:.6g} s",
        flush=True,
    )
    ms = 1e3
    closed = runs["closed"]
    if isinstance(closed, str):
        print(f"  closed form: refused ({closed}), {ms * runs['closed_s']:.2f} ms CPU to say so")
    else:
        worst = largest_difference(full, every, every, closed.log)
        print(
            f"  closed form (today's path): {ms * runs['closed_s']:.2f} ms CPU; every op's "
            f"times from the full simulation's: largest relative difference {worst:.3g}"
        )
    print(
        f"  from time 0 (the full simulation, {len(every)} ops): {ms * runs['full_s']:.2f} ms CPU"
    )
    if "resumed" in runs:
        worst = largest_difference(full, every, every, runs["resumed"])
        print(
            f"  resumed from the watched plain run: {ms * runs['resumed_s']:.2f} ms CPU, the "
            f"watch {ms * (runs['watched_s'] - runs['plain_s']):+.2f} ms over the plain run's "
            f"{ms * runs['plain_s']:.2f}; its ops' times from the full simulation's: largest "
            f"relative difference {worst:.3g}"
        )
    else:
        print("  resumed: the plain run cannot be watched for this checkpoint run (resume.Watch)")
    copy = list(range(n, len(schedule.ops)))
    for name, simulated in (("copy alone", copy), ("copy and what it moves", moved + copy)):
        for how, part in (("engine", reduced_run), ("lean", lean_run)):
            cpu = math.inf
            for _ in range(repeat):
                took, at, log = part(kept, runs, simulated)
                cpu = min(cpu, took)
            worst = largest_difference(full, simulated, at, log)
            print(
                f"  {name} ({how}): {len(simulated)} ops simulated, {ms * cpu:.2f} ms CPU; "
                f"its ops' times from the full simulation's: largest relative difference "
                f"{worst:.3g}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of each (least CPU time)")
    parser.add_argument("scenarios", nargs="*", type=Path, help="scenario files (default.yaml)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    gc.disable()  # as tiersim.core.collector pauses it for a simulation
    for path in args.scenarios or [ROOT / "scenarios" / "default.yaml"]:
        report(path, max(1, args.repeat))


if __name__ == "__main__":
    main()
