"""Where a durable checkpoint's simulation cost goes (issue 36): each engine run's CPU time,
the flows it sends through the shared network, and how many flows share it at a change.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_checkpoint_cost.py [--repeat N]

For each case of `bench_cost.py --checkpoint-ratio`, with the scenario's checkpoint and
without (`checkpoint.every_steps` null), least of N simulate calls in this process:
- simulate's CPU time (ms) and its ratio, with against without;
- each engine run of that call, its CPU time (ms) and op count: `runs` (a run from time 0),
  `watched` (the plain run watched for the checkpoint run, its state copied there),
  `resumed` (the checkpoint run resumed from that copy: tiersim.engine.resume) and `head`
  (a blocking copy and what of the next step runs beside it, gone on from the plain run's
  end, the rest of that step the plain one: tiersim.engine.step_after_copy); and `next
  step checked` (`NextStep.of`, the next step's ops held to the plain step's); `closed
  form` (an async copy's run worked out beside the plain run: tiersim.engine.closed_copy,
  counted in the floor as the run it replaces);
- FlowNetwork: flows started per call and the mean number of flows already in the network at
  a start and at a wake-up (a quadratic cost of sharing would show as a large mean here);
- each schedule built (`schedule`: Schedules.get; `schedule cut`: Schedules.cut, a blocking
  copy's run built only to the plain step's reach), its CPU time and op count;
- the floor: (without + every schedule built and engine run made after the plain ones) /
  without, the least the ratio can be while the checkpoint's schedule is built and its run
  simulated, everything else the checkpoint costs taken away.
The counts come from wrapping the engine's functions, so they are taken on a separate call
from the timed ones (the wrapping slows what it counts).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    (ROOT / "scenarios" / "llama2-70b-zero3-nvme.yaml", ["training.grad_accumulation=512"]),
    (ROOT / "scenarios" / "default.yaml", []),
]


def engine_runs(scenario, timed: bool) -> tuple[float, list, Counter]:
    """One simulate call: its CPU time (s), each engine run (caller, CPU s, ops) and, where
    not `timed`, the network counts (flows at each start and wake-up)."""
    import tiersim.engine.checkpoint_apart as apart
    import tiersim.engine.flows as flows
    import tiersim.engine.resume as resume
    import tiersim.engine.runs as runs
    import tiersim.engine.step_after_copy as after_copy
    from tiersim.engine.schedule_sharing import Schedules
    from tiersim.runner import simulate

    runs_seen: list = []
    counts: Counter = Counter()
    ops_of = {
        "runs": lambda args, out: args[2].ops,  # run_engine(res, topo, schedule, ...)
        "watched": lambda args, out: args[0].plain.ops,  # Watch.run(self, ...)
        "resumed": lambda args, out: args[0].schedule.ops,  # go_on(engine)
        "schedule": lambda args, out: out.ops,  # Schedules.get(self, steps, ...)
        # the checkpoint run's schedule cut at the plain step's reach (Schedules.cut)
        "schedule cut": lambda args, out: () if out is None else out.ops,
        "head": lambda args, out: args[2].ops,  # _head_run(res, setup, head, prior)
        "next step checked": lambda args, out: args[1].ops,  # NextStep.of(plain, longer)
        "closed form": lambda args, out: args[2].ops,  # closed_copy(res, setup, schedule, ...)
    }
    saved = [
        (runs, "run_engine", "runs"),
        (resume.Watch, "run", "watched"),
        (resume, "go_on", "resumed"),
        (Schedules, "get", "schedule"),
        (Schedules, "cut", "schedule cut"),
        (after_copy, "_head_run", "head"),
        (after_copy.NextStep, "of", "next step checked"),
        (apart, "closed_copy", "closed form"),
    ]
    originals = [getattr(owner, name) for owner, name, _ in saved]
    raw = [vars(owner)[name] for owner, name, _ in saved]  # a classmethod put back as one
    saved_methods = [(name, getattr(flows.FlowNetwork, name)) for name in ("start", "_wake")]
    for (owner, name, caller), original in zip(saved, originals, strict=True):
        setattr(owner, name, _timed_run(original, caller, ops_of[caller], runs_seen))
    if not timed:
        for name, original in saved_methods:
            setattr(flows.FlowNetwork, name, _counted(original, name, counts))
    try:
        started = time.process_time()
        simulate(scenario)
        cpu = time.process_time() - started
    finally:
        for (owner, name, _), original in zip(saved, raw, strict=True):
            setattr(owner, name, original)
        for name, original in saved_methods:
            setattr(flows.FlowNetwork, name, original)
    return cpu, runs_seen, counts


def _after_the_plain_ones(seen: list) -> list:
    """The schedules built and engine runs made after the first of each (the plain run's);
    not the checks of the next step (no schedule built, no run)."""
    seen = [entry for entry in seen if entry[0] != "next step checked"]
    first_schedule = next(i for i, (c, _, _) in enumerate(seen) if c == "schedule")
    first_run = next(i for i, (c, _, _) in enumerate(seen) if not c.startswith("schedule"))
    return [entry for i, entry in enumerate(seen) if i not in (first_schedule, first_run)]


def _timed_run(original, caller: str, ops_of, seen: list):
    def run(*args, **kwargs):
        started = time.process_time()
        out = original(*args, **kwargs)
        seen.append((caller, time.process_time() - started, len(ops_of(args, out))))
        return out

    return run


def _counted(original, name: str, counts: Counter):
    def method(self, *args, **kwargs):
        counts[name] += 1
        counts[name + " flows"] += len(self.flows)
        return original(self, *args, **kwargs)

    return method


def report(path: Path, extra: list[str], repeat: int) -> None:
    from tiersim.config.load import load_scenario

    cases = {
        "with": load_scenario(path, extra).scenario,
        "without": load_scenario(path, [*extra, "checkpoint.every_steps=null"]).scenario,
    }
    best: dict[str, tuple] = {}
    for _ in range(repeat):
        for name, scenario in cases.items():
            cpu, seen, _ = engine_runs(scenario, timed=True)
            if cpu < best.get(name, (math.inf,))[0]:
                best[name] = (cpu, seen)
    ratio = best["with"][0] / best["without"][0]
    own = sum(s for _, s, _ in _after_the_plain_ones(best["with"][1]))
    floor = (best["without"][0] + own) / best["without"][0]
    print(
        f"{path.name} {' '.join(extra)}: with/without {ratio:.2f}x (floor, the checkpoint's "
        f"schedule and engine run alone: {floor:.2f}x)",
        flush=True,
    )
    for name, scenario in cases.items():
        cpu, seen = best[name]
        _, _, counts = engine_runs(scenario, timed=False)
        runs = ", ".join(f"{c} {1e3 * s:.2f} ms ({n} ops)" for c, s, n in seen)
        starts, wakes = counts["start"], counts["_wake"]
        print(
            f"  {name:7s} simulate {1e3 * cpu:7.2f} ms CPU; schedules and engine runs: {runs}; "
            "network: "
            f"{starts} flows, mean {counts['start flows'] / max(starts, 1):.1f} present at a "
            f"start, {counts['_wake flows'] / max(wakes, 1):.1f} at each of {wakes} wake-ups",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="simulate calls per case (least)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    for path, extra in CASES:
        report(path, extra, max(1, args.repeat))


if __name__ == "__main__":
    main()
