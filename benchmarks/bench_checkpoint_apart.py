"""What an async checkpoint's run would cost if only what the copy touches were simulated
(issue 36): the measurements behind docs/speed.md's eighteenth round.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_checkpoint_apart.py [--repeat N] [FILE...]

For default.yaml, or each scenario given (an async checkpoint measured apart from a resumed
run: tiersim.engine.checkpoint_apart), one point is simulated and, from it, kept: the plain
run of the longest sample (its ops' starts and ends) and the checkpoint run resumed from it
(tiersim.engine.resume), the full simulation every figure is read from. Printed:
- which plain ops the copy moves (start or end not equal, to the bit, in the two runs), by
  kind, and by how much;
- the resumed checkpoint run's CPU time (least of N points);
- `copy alone`: the checkpoint's ops run alone in the engine, each plain op one of them waits
  for standing as a timer that ends at its end in the plain run, no plain flow on the links;
- `copy and what it moves`: the same, with the plain ops the copy moves simulated beside it
  (every other plain op such a timer);
- each of those two again in a lean fluid simulation (benchmarks/lean_part_run.py: the
  network's arithmetic without the engine's events and records);
each with its CPU time (least of N) and the largest relative difference of its simulated
ops' starts and ends from the full simulation's. None is a measurement the point makes:
they bound what such a path could cost, beside the run it would replace.
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


def kept_runs(path: Path, repeat: int) -> tuple:
    """Simulate the point `repeat` times: the last call's resolved scenario, setup, plain
    run (ops, log) and checkpoint run (schedule, log), and the least CPU time of the
    resumed checkpoint run."""
    import tiersim.engine.checkpoint_apart as apart
    import tiersim.engine.resume as resume
    import tiersim.engine.simulate as simulate
    from tiersim.config.load import load_scenario

    scenario = load_scenario(path, []).scenario
    kept: dict = {"resumed": math.inf}
    original_measure, original_starts = apart.measure_apart, simulate.steady.period_starts
    original_go_on = resume.go_on

    def measure(res, setup, plain, run):
        kept.update(res=res, setup=setup, plain_ops=run.ops)
        return original_measure(res, setup, plain, run)

    def period_starts(res, stage, schedule, log, measured):
        kept["plain_log"] = log
        return original_starts(res, stage, schedule, log, measured)

    def go_on(engine):
        started = time.process_time()
        out = original_go_on(engine)
        kept["resumed"] = min(kept["resumed"], time.process_time() - started)
        kept["checkpoint"] = (out[0].schedule, out[1])
        return out

    simulate.measure_apart, simulate.steady.period_starts = measure, period_starts
    resume.go_on = go_on
    try:
        for _ in range(repeat):
            simulate.simulate(scenario)
    finally:
        simulate.measure_apart, simulate.steady.period_starts = original_measure, original_starts
        resume.go_on = original_go_on
    return kept


def reduced_run(kept: dict, simulated: list[int]) -> tuple[float, list, object]:
    """The checkpoint run's ops `simulated` (indices into its schedule) run alone in the
    engine, every other op one of them waits for a timer ending at its plain-run end: CPU
    seconds (the run's, not its schedule's), the simulated ops' indices in that order, and
    the run's log."""
    from tiersim.engine.core import run_engine

    reduced, at = reduced_schedule(kept, simulated)
    res, setup = kept["res"], kept["setup"]
    started = time.process_time()
    _, log, _ = run_engine(res, setup.topo, reduced, setup.baseline)
    return time.process_time() - started, at, log


def reduced_schedule(kept: dict, simulated: list[int]) -> tuple:
    """`reduced_run`'s schedule and where each simulated op is in it."""
    from tiersim.engine.ops import Op, OpKind, Role, Schedule

    schedule, _ = kept["checkpoint"]
    plain_end = kept["plain_log"].end
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


def lean_run(kept: dict, simulated: list[int]) -> tuple[float, list, object]:
    """`reduced_run` in the lean simulation (benchmarks/lean_part_run.py): CPU seconds (its
    move plans worked out first, as the engine has them from the plain run), the simulated
    ops' indices, a log of their starts and ends by index."""
    from lean_part_run import plans_of, run_part

    schedule, _ = kept["checkpoint"]
    res, setup = kept["res"], kept["setup"]
    capacity = {**setup.topo.capacities, **schedule.net_capacity}
    plans = plans_of(schedule.ops, setup.topo, res.execution.simulation, capacity)
    started = time.process_time()
    log = run_part(schedule.ops, sorted(simulated), kept["plain_log"].end, plans, capacity)
    return time.process_time() - started, simulated, log


def largest_difference(kept: dict, simulated: list[int], at: list[int], log) -> float:
    """The largest relative difference of the simulated ops' starts and ends from the full
    checkpoint run's."""
    _, full = kept["checkpoint"]
    worst = 0.0
    for i, k in zip(simulated, at, strict=True):
        for mine, theirs in ((log.start[k], full.start[i]), (log.end[k], full.end[i])):
            worst = max(worst, abs(mine - theirs) / max(abs(theirs), 1e-300))
    return worst


def report(path: Path, repeat: int) -> None:
    kept = kept_runs(path, repeat)
    if "checkpoint" not in kept:
        print(f"{path.name}: no async checkpoint measured apart from a resumed run", flush=True)
        return
    schedule, full = kept["checkpoint"]
    plain, n = kept["plain_log"], len(kept["plain_ops"])
    moved = [i for i in range(n) if (full.start[i], full.end[i]) != (plain.start[i], plain.end[i])]
    ops = [schedule.ops[i] for i in moved]
    kinds = Counter(f"{op.kind.label} {op.src}->{op.dst}".strip(" ->") for op in ops)
    shift = max((abs(full.end[i] - plain.end[i]) for i in moved), default=0.0)
    print(
        f"{path.name}: {n} plain ops, {len(schedule.ops) - n} of the checkpoint; the copy moves "
        f"{len(moved)} plain ops ({dict(kinds)}), the most by {shift:.6g} s",
        flush=True,
    )
    print(f"  resumed checkpoint run (the full simulation): {1e3 * kept['resumed']:.2f} ms CPU")
    copy = list(range(n, len(schedule.ops)))
    for name, simulated in (("copy alone", copy), ("copy and what it moves", moved + copy)):
        for how, run in (("engine", reduced_run), ("lean", lean_run)):
            best = math.inf
            for _ in range(repeat):
                cpu, at, log = run(kept, simulated)
                best = min(best, cpu)
            worst = largest_difference(kept, simulated, at, log)
            print(
                f"  {name} ({how}): {len(simulated)} ops simulated, {1e3 * best:.2f} ms CPU; "
                "its ops' times from the full simulation's: largest relative difference "
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
