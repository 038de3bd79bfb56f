"""Simulation cost against micro-batches, engine cost per event, the 1T in-process time.

    .venv/bin/python benchmarks/bench_cost.py [--accumulation 8 256 1024 4096] [--quick]
        [--set KEY=VALUE ...] [--checkpoint-only] [--repeat N]
    .venv/bin/python benchmarks/bench_cost.py --one-t     # only the 1T in-process time
    .venv/bin/python benchmarks/bench_cost.py --engine    # only the engine's cost per event
    .venv/bin/python benchmarks/bench_cost.py --profile   # where the engine's time goes

Printed, all measured in this one run:
- scenarios/llama2-70b-zero3-nvme.yaml at each `training.grad_accumulation`, without a durable
  checkpoint (`checkpoint.every_steps` null) and with the scenario's own (every 500 steps,
  blocking): wall time of the in-process run phase (build + simulate + report) and its peak
  memory (the resident set's high-water mark over the run, above the resident set before it),
  each as a ratio to the 8 micro-batch case. Targets (issue 19): 1024 and 4096 within 2x the
  time and 1.5x the peak memory of 8. Each case runs in a fresh interpreter, so one case's
  memory never counts in another's; `--repeat N` runs each N times (fresh each time) and
  keeps the least CPU time (`time.process_time()`, printed beside the wall time) and the
  least peak. `--set` adds overrides to every case (say `checkpoint.mode=async`, or
  `checkpoint.every_steps=1`: the checkpoint variants), `--checkpoint-only` skips the rows
  without one.
- engine cost per event (CPU seconds of building and running the engine / the SimPy events
  it scheduled, on the 70B run with 32 micro-batches all simulated) against a bare SimPy
  timeout with a callback measured in the same process, in turn with it (best of 11 each;
  `--engine`: only this line). Target: within 3x. `--profile`: where the engine's time goes,
  by module and function (cProfile).
- the 1T Korthikanti et al. Table 5 configuration
  (scenarios/published/korthikanti2022-1t-selective-sp.yaml) evaluated in-process (load +
  simulate), best of 10, in wall time and in this process's CPU time, against Calculon
  evaluating the same configuration from its source in this process, in turn with it
  (calculon_peer; benchmarks/bench_peers.py: all eight Table 5 configurations). Target:
  within 2x. `--one-t` prints only this.
- start-up: `tiersim --help` and `tiersim run --help` as whole processes, best of 5, against
  a bare `python -c pass`, and whether the heavy libraries (pydantic, SimPy, NumPy) were
  imported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # calculon_peer beside this file

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "llama2-70b-zero3-nvme.yaml"
ONE_T = ROOT / "scenarios" / "published" / "korthikanti2022-1t-selective-sp.yaml"
SIMPY_EVENTS = 200_000
ENGINE_REPEATS = 11  # engine runs and bare chains, in turn: best of each (a shared VM)

# One case in a fresh interpreter: prints {"time_s", "peak_bytes", "events", "steps"}.
_CASE = r"""
import json, sys, time
from pathlib import Path
from tiersim.config.load import load_scenario
from tiersim.runner import report_with_result

def rss(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0

path, overrides = sys.argv[1], json.loads(sys.argv[2])
try:  # reset the high-water mark to the present resident set (Linux >= 4.0)
    Path("/proc/self/clear_refs").write_text("5")
except OSError:
    pass
before = rss("VmRSS")
started, cpu = time.perf_counter(), time.process_time()
loaded = load_scenario(Path(path), overrides)
report, result = report_with_result(loaded)
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({"time_s": elapsed, "cpu_s": cpu, "peak_bytes": rss("VmHWM") - before,
                  "events": result.events, "steps": report["sim"]["steps_simulated"],
                  "step_s": result.time_s}))
"""


def run_case(accumulation: int, checkpoint: bool, extra: list[str], repeat: int = 1) -> dict:
    """The case in `repeat` fresh interpreters: the least CPU time, wall time and peak."""
    overrides = [
        f"training.grad_accumulation={accumulation}",
        "simulation.max_layer_passes=100000000",
        *extra,
    ]
    if not checkpoint:
        overrides.append("checkpoint.every_steps=null")
    cases = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", _CASE, str(SCENARIO), json.dumps(overrides)],
            capture_output=True,
            text=True,
            check=True,
            cwd=tempfile.gettempdir(),  # not the repository: PYTHONPATH picks the tree measured
        )
        cases.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(cases, key=lambda c: c.get("cpu_s", c["time_s"]))
    least = {k: min(c[k] for c in cases) for k in ("time_s", "peak_bytes")}
    return {**best, **least}


def bare_simpy_s_per_event(n: int = SIMPY_EVENTS) -> float:
    """A chain of n SimPy timeouts, each scheduling the next from its callback: CPU
    seconds per timeout (`time.process_time`, as the engine's below)."""
    import simpy

    env = simpy.Environment()
    left = [n]

    def tick(_event: object) -> None:
        left[0] -= 1
        if left[0]:
            env.timeout(1e-6).callbacks.append(tick)

    env.timeout(1e-6).callbacks.append(tick)
    started = time.process_time()
    env.run()
    return (time.process_time() - started) / n


def one_t_s(repeats: int = 10) -> tuple[float, float, int, float]:
    """Load + simulate of the 1T configuration: the best wall time and, separately, the best
    CPU time of this process (`time.process_time`: what other work on a shared machine
    takes from the wall time does not count), of `repeats`; its engine events; and the best
    CPU time of Calculon's evaluation of the same configuration, each of its `repeats` runs
    in turn with one of tiersim's."""
    from calculon_peer import Calculon

    from tiersim.config.load import load_scenario
    from tiersim.runner import simulate

    peer = Calculon()
    wall = cpu = calculon = float("inf")
    events = 0
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = simulate(load_scenario(ONE_T, []).scenario)
        cpu = min(cpu, time.process_time() - started_cpu)
        wall = min(wall, time.perf_counter() - started)
        events = result.events
        started_cpu = time.process_time()
        peer.evaluate("megatron-1T", "seqsel")
        calculon = min(calculon, time.process_time() - started_cpu)
    return wall, cpu, events, calculon


def print_one_t() -> None:
    wall, cpu, events, calculon = one_t_s()
    bare = min(bare_simpy_s_per_event() for _ in range(5))
    print(
        f"1T Korthikanti Table 5 in-process (load + simulate, best of 10): {1e3 * wall:.1f} ms "
        f"wall, {1e3 * cpu:.1f} ms CPU ({events:,} engine events); Calculon in this process, "
        f"in turn: {1e3 * calculon:.2f} ms CPU: {cpu / calculon:.2f}x CPU (target: within 2x)"
    )
    print(
        f"  the VM now: a bare SimPy timeout {1e6 * bare:.3f} us of CPU (best of 5); the 1T run "
        f"costs {cpu / bare:,.0f} of them"
    )


def _engine_case():
    """The 70B run with 32 micro-batches all simulated (about 20,000 events)."""
    from tiersim.config.load import load_scenario

    overrides = [
        "checkpoint.every_steps=null",
        "training.grad_accumulation=32",
        "simulation.steady_state=full",
    ]
    try:
        return load_scenario(SCENARIO, overrides).scenario
    except Exception:  # a tree from before simulation.steady_state: every micro-batch anyway
        return load_scenario(SCENARIO, overrides[:2]).scenario


@contextlib.contextmanager
def _patched_engine_runs(wrap):
    """The two ways a simulation runs an engine (tiersim.engine.runs: from step 0, or going on
    from an earlier run at a step boundary), each wrapped by `wrap` while the block runs."""
    from tiersim.engine import runs

    saved = runs.run_engine, runs.go_on
    runs.run_engine, runs.go_on = wrap(runs.run_engine), wrap(runs.go_on)
    try:
        yield
    finally:
        runs.run_engine, runs.go_on = saved


def engine_s_per_event(repeats: int = ENGINE_REPEATS) -> tuple[float, float, int, int]:
    """CPU seconds per engine event on the engine case (the engine's own span, as
    `StepResult.wall_s` times it: building the engine and running it), and per bare SimPy
    timeout, each the best of `repeats`, measured in turn (one bare chain, one engine run,
    ...) so that both see the same load. Returns (engine s/event, bare s/event, events,
    ops of the schedule)."""
    from tiersim.runner import simulate

    scenario = _engine_case()
    spans: list[tuple[float, int]] = []  # (CPU seconds, ops of the schedule), each engine run

    def timed(run):
        def wrapper(res, topo, schedule, *args, **kwargs):
            started = time.process_time()
            out = run(res, topo, schedule, *args, **kwargs)
            spans.append((time.process_time() - started, len(schedule.ops)))
            return out

        return wrapper

    bare, best = math.inf, math.inf
    with _patched_engine_runs(timed):
        for _ in range(repeats):
            bare = min(bare, bare_simpy_s_per_event())
            spans.clear()
            result = simulate(scenario)  # the engine runs of one simulation (steady_state full)
            best = min(best, sum(s for s, _ in spans) / result.events)
    return best, bare, result.events, max(n for _, n in spans)


def engine_profile(top: int = 12) -> None:
    """Where the engine's time goes on the engine case, under cProfile (which inflates
    code that makes many small calls: read the shares, not the seconds): the time spent in
    each module's own code, and the functions that spend most."""
    import cProfile
    import pstats

    from tiersim.runner import simulate

    scenario = _engine_case()
    simulate(scenario)  # warm: caches, imports
    profile = cProfile.Profile()

    def profiled(run):
        def wrapper(*args, **kwargs):
            profile.enable()
            try:
                return run(*args, **kwargs)
            finally:
                profile.disable()

        return wrapper

    with _patched_engine_runs(profiled):
        simulate(scenario)
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (cc, calls, tottime, cumtime, _)
    total = sum(v[2] for v in stats.values())
    by_module: dict[str, float] = {}
    for (path, _, _), v in stats.items():
        module = "simpy" if "simpy" in path else Path(path).name if "/" in path else "builtins"
        by_module[module] = by_module.get(module, 0.0) + v[2]
    shares = ", ".join(
        f"{m} {100 * t / total:.0f} %" for m, t in sorted(by_module.items(), key=lambda x: -x[1])
    )
    print(f"engine profile (own time by module, {1e3 * total:.0f} ms profiled): {shares}")
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (path, line, name), v in ranked:
        where = f"{Path(path).name}:{line}({name})" if line else name
        print(f"  {100 * v[2] / total:5.1f} %  {v[1]:7d} calls  {where}")


def startup_s(args: list[str], repeats: int = 5) -> float:
    """Best wall time of a whole `python args...` process."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, *args], capture_output=True, check=True)
        best = min(best, time.perf_counter() - started)
    return best


_HEAVY_AT_HELP = r"""
import contextlib, io, sys
from tiersim.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:] + ["--help"])
    except SystemExit:
        pass
print(",".join(m for m in ("pydantic", "simpy", "numpy") if m in sys.modules) or "none")
"""


def startup() -> None:
    bare = startup_s(["-c", "pass"])
    for args in ([], ["run"]):
        t = startup_s(["-m", "tiersim.cli", *args, "--help"])
        heavy = subprocess.run(
            [sys.executable, "-c", _HEAVY_AT_HELP, *args], capture_output=True, text=True
        ).stdout.strip()
        print(
            f"start-up: tiersim {' '.join([*args, '--help'])}: {1e3 * t:.0f} ms, bare python "
            f"{1e3 * bare:.0f} ms ({t / bare:.1f}x); heavy libraries imported: {heavy}"
        )


def cost_table(
    accumulations: list[int], extra: list[str], checkpoint_only: bool, repeat: int
) -> None:
    print(f"{SCENARIO.name}: in-process run phase, ratios to grad_accumulation 8")
    if extra:
        print(f"with --set {' '.join(extra)}")
    head = f"{'m':>6} {'checkpoint':>10} {'time s':>8} {'x8':>6} {'cpu s':>7} {'x8':>6}"
    print(f"{head} {'peak MB':>8} {'x8':>6} {'events':>9} {'steps':>5}")
    for checkpoint in (True,) if checkpoint_only else (False, True):
        base = None
        for m in accumulations:
            case = run_case(m, checkpoint, extra, repeat)
            base = base or case
            cpu = case.get("cpu_s", case["time_s"])
            print(
                f"{m:6d} {'on' if checkpoint else 'off':>10} {case['time_s']:8.2f} "
                f"{case['time_s'] / base['time_s']:6.2f} {cpu:7.2f} "
                f"{cpu / base.get('cpu_s', base['time_s']):6.2f} "
                f"{case['peak_bytes'] / 1e6:8.0f} "
                f"{case['peak_bytes'] / max(base['peak_bytes'], 1):6.2f} "
                f"{case['events']:9d} {case['steps']:5d}",
                flush=True,
            )
    print("targets: 1024 and 4096 within 2x the time and 1.5x the peak memory of 8\n")


def cliff_table(data: list[int], accumulation: int = 512, repeat: int = 3) -> None:
    """The 70B scenario at `accumulation` micro-batches over data-parallel sizes: CPU time
    and its ratio to the first size (issue 36: within 2x at 2,048 and 16,384 GPUs of 512),
    and how the step was simulated."""
    print(f"{SCENARIO.name} at {accumulation} micro-batches, by parallel.data (least of {repeat})")
    base = None
    for d in data:
        case = run_case(accumulation, True, [f"parallel.data={d}"], repeat)
        base = base or case
        print(
            f"  data {d:6,}: {case['cpu_s']:6.2f} s CPU, {case['cpu_s'] / base['cpu_s']:5.2f}x "
            f"the first; {case['events']:,} events, peak {case['peak_bytes'] / 1e6:.0f} MB",
            flush=True,
        )


def checkpoint_ratio(repeat: int = 3) -> None:
    """A point with its durable checkpoint against the same point without (checkpoint.every_
    steps null): simulate's CPU time in this process, least of `repeat` each, in turn.
    Target (issue 36): within 1.5x."""
    from tiersim.config.load import load_scenario
    from tiersim.runner import simulate

    cases = [
        (SCENARIO, ["training.grad_accumulation=512"]),
        (ROOT / "scenarios" / "default.yaml", []),
    ]
    for path, extra in cases:
        best = {}
        scenarios = {
            "with": load_scenario(path, extra).scenario,
            "without": load_scenario(path, [*extra, "checkpoint.every_steps=null"]).scenario,
        }
        for _ in range(repeat):
            for name, scenario in scenarios.items():
                started = time.process_time()
                simulate(scenario)
                best[name] = min(best.get(name, math.inf), time.process_time() - started)
        s = scenarios["with"]
        print(
            f"{path.name} {' '.join(extra)} ({s.checkpoint.mode} checkpoint): with "
            f"{1e3 * best['with']:.1f} ms, without {1e3 * best['without']:.1f} ms CPU: "
            f"{best['with'] / best['without']:.2f}x (target within 1.5x)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accumulation", type=int, nargs="+", default=[8, 256, 1024, 4096])
    parser.add_argument("--quick", action="store_true", help="skip the micro-batch table")
    parser.add_argument("--one-t", action="store_true", help="only the 1T in-process time")
    parser.add_argument(
        "--profile", action="store_true", help="only: where the engine's time goes (cProfile)"
    )
    parser.add_argument("--engine", action="store_true", help="only the engine's cost per event")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an override, each case"
    )
    parser.add_argument("--checkpoint-only", action="store_true", help="the table's rows with one")
    parser.add_argument("--repeat", type=int, default=1, help="fresh runs per case, least kept")
    parser.add_argument("--table-only", action="store_true", help="only the micro-batch table")
    parser.add_argument(
        "--data", type=int, nargs="+", help="only: the 70B at 512 micro-batches by parallel.data"
    )
    parser.add_argument(
        "--checkpoint-ratio", action="store_true", help="only: a point with and without it"
    )
    args = parser.parse_args()
    if args.checkpoint_ratio:
        checkpoint_ratio(max(3, args.repeat))
        return
    if args.data:
        cliff_table(args.data, repeat=args.repeat)
        return
    if args.one_t:
        print_one_t()
        return
    if args.profile:
        engine_profile()
        return
    if not (args.quick or args.engine):
        cost_table(args.accumulation, args.set, args.checkpoint_only, args.repeat)
    if args.table_only:
        return
    per_event, bare, events, ops = engine_s_per_event()
    per_op = per_event * events / ops
    print(
        f"engine cost per event: {1e6 * per_event:.2f} us of CPU ({events:,} events, 70B, 32 "
        f"micro-batches); bare SimPy timeout {1e6 * bare:.3f} us (each the best of "
        f"{ENGINE_REPEATS}, in turn): {per_event / bare:.1f}x (target: within 3x); per op of "
        f"the schedule {1e6 * per_op:.2f} us ({ops:,} ops), {per_op / bare:.1f}x"
    )
    if args.engine:
        return
    startup()
    print_one_t()


if __name__ == "__main__":
    main()
