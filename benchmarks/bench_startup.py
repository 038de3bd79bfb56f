"""What share of a default `tiersim run` is imports, in CPU time (a loaded machine's wall time
would say more of the load than of tiersim).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_startup.py [--repeat 7] [SCENARIO]

Three kinds of whole process, taking turns, `--repeat` rounds, the least user + system CPU
of each kept:
- run: `python -m tiersim run SCENARIO --out TMP` (default scenarios/default.yaml);
- imports: a process that imports exactly the modules the run had imported when it ended
  (its sys.modules, in the order they were first imported), and does nothing else;
- bare: `python -c pass`.
Printed: imports - bare (what importing costs beyond the interpreter) over run - bare, and
over run (the target's reading, issue 36: imports <= 40 % of a default run's CPU time); where
the imports go, from more processes taking the same turns, each importing a little more than
the one before (pydantic alone, its first model built, the scenario's models, the loader,
everything the run imports): each step's CPU beyond the one before; and the heaviest modules
by own import time (`-X importtime`'s self column, one run: a guide, not a measurement).
Compiled modules are written and reused (PYTHONDONTWRITEBYTECODE emptied), as an installed
tiersim's are.

`--instructions`: the same processes counted once each in instructions (valgrind's callgrind,
its "Collected" count, PYTHONHASHSEED=0), not CPU time: what a loaded machine's other work
does not move. Each count takes valgrind a minute or more.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the run once: the modules it imports, and the CPU its dataclasses' creation takes (each
# decorator timed as a module applies it: `from dataclasses import dataclass` reads it later;
# `@record` timed whole, its own `__init__` and closures included, the dataclass inside not
# counted twice)
_RUN_AND_LIST = r"""
import dataclasses, json, runpy, sys, time
made = {"classes": 0, "cpu_s": 0.0}
plain = dataclasses.dataclass
depth = [0]

def timing(make, cls):
    if depth[0]:
        return make(cls)
    depth[0] += 1
    start = time.process_time()
    try:
        done = make(cls)
    finally:
        depth[0] -= 1
    if cls.__module__.startswith("tiersim"):
        made["classes"] += 1
        made["cpu_s"] += time.process_time() - start
    return done

def timed(cls=None, /, **options):
    wrap = lambda cls: timing(plain(**options), cls)
    return wrap if cls is None else wrap(cls)

dataclasses.dataclass = timed
import tiersim.core.records as records
plain_record = records.record

def timed_record(cls=None, /, **options):
    wrap = lambda cls: timing(plain_record(**options), cls)
    return wrap if cls is None else wrap(cls)

records.record = timed_record
"""
# a child's `tiersim run SCENARIO --out OUT` in its own process (argv: SCENARIO OUT), `out` kept
RUN_IN_CHILD = r"""
out = sys.argv[2]
sys.argv = ["tiersim", "run", sys.argv[1], "--out", out]
try:
    runpy.run_module("tiersim", run_name="__main__")
except SystemExit:
    pass
"""
_RUN_AND_LIST += (
    RUN_IN_CHILD
    + r"""
json.dump({"modules": list(sys.modules), "dataclasses": made}, open(out + ".modules.json", "w"))
"""
)


_IMPORTER = """
import importlib
for name in {names!r}:
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""


# where the imports go: each stage imports what the one before did and more
_STAGES = (
    ("pydantic (from pydantic import BaseModel)", "from pydantic import BaseModel"),
    (
        "its first model built, its plugin loader (tiersim.config.fields)",
        "import tiersim.config.fields",
    ),
    ("the scenario's models (tiersim.config.schema)", "import tiersim.config.schema"),
    ("the loader (tiersim.config.load)", "import tiersim.config.load"),
)


def child_cpu_s(args: list[str], env: dict[str, str]) -> float:
    """User + system CPU seconds of one whole `python args...` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], env=env, capture_output=True, check=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def arguments(
    description: str, instructions: bool = False
) -> tuple[argparse.Namespace, dict[str, str]]:
    """The command line (a scenario, `--repeat`) and the children's environment: this tree on
    the path, compiled modules written and reused."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "default.yaml"))
    parser.add_argument("--repeat", type=int, default=7, help="rounds, least kept")
    if instructions:
        parser.add_argument(
            "--instructions", action="store_true", help="count instructions (valgrind), not CPU"
        )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "", "PYTHONPATH": str(ROOT)}
    # pydantic's plugin search off, as the `tiersim` program turns it off for itself where the
    # user has not set the switch (tiersim.cli): the importing children import as the run does
    env.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    return parser.parse_args(), env


def listed_run(scenario: str, out: str, env: dict[str, str]) -> tuple[list[str], dict]:
    """One run (compiling what it imports): the modules it imported, in order, and its
    dataclasses' creation (`classes`, `cpu_s`)."""
    child_cpu_s(["-c", _RUN_AND_LIST, scenario, out], env)
    listed = json.loads(Path(out + ".modules.json").read_text())
    return listed["modules"], listed["dataclasses"]


def importer(modules: list[str]) -> list[str]:
    """A child's arguments that import exactly `modules` and do nothing else."""
    return ["-c", _IMPORTER.format(names=[m for m in modules if not m.startswith("__")])]


def main() -> None:
    args, env = arguments(__doc__.splitlines()[0], instructions=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "run")
        modules, made = listed_run(args.scenario, out, env)
        run = ["-m", "tiersim", "run", args.scenario, "--out", out]
        kinds = {"run": run, "bare": ["-c", "pass"]}
        code = ""
        for label, statement in _STAGES:
            code += statement + "\n"
            kinds[label] = ["-c", code]
        kinds["imports"] = importer(modules)
        best = dict.fromkeys(kinds, float("inf"))
        for _ in range(1 if args.instructions else args.repeat):
            for name, argv in kinds.items():
                cost = child_instructions if args.instructions else child_cpu_s
                best[name] = min(best[name], cost(argv, env))
        timing = subprocess.run(
            [sys.executable, "-X", "importtime", *run], env=env, capture_output=True, text=True
        ).stderr
    imports = best["imports"] - best["bare"]
    unit = "M instructions" if args.instructions else "ms CPU"
    counted = "counted once" if args.instructions else f"least of {args.repeat}"
    print(
        f"tiersim run {Path(args.scenario).name}: {1e3 * best['run']:.0f} {unit}; its imports "
        f"{1e3 * imports:.0f} beyond a bare interpreter's {1e3 * best['bare']:.0f}: "
        f"{100 * imports / best['run']:.1f} % of the run (target <= 40 %), "
        f"{100 * imports / (best['run'] - best['bare']):.0f} % of it beyond the interpreter "
        f"({counted}; {len(modules)} modules; load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )
    print_stages(best, unit)
    print(
        f"within these, tiersim's {made['classes']} dataclasses' creation (the decorator's "
        f"work): {1e3 * made['cpu_s']:.1f} ms (one run)"
    )
    print_heaviest(timing)


_REST = "the rest the run imports (tiersim's engine and report, SimPy)"


def child_instructions(args: list[str], env: dict[str, str]) -> float:
    """Instructions of one whole `python args...` process, in thousands of millions (so that
    the printing that reads CPU seconds as milliseconds reads these as millions)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        env={**env, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1)) / 1e9


def print_stages(best: dict[str, float], unit: str = "ms CPU") -> None:
    """Each stage's cost beyond the stage before it (the first: beyond a bare interpreter)."""
    print(f"where the imports go (each beyond the one before, {unit}):")
    before = best["bare"]
    for label in (*(label for label, _ in _STAGES), _REST):
        now = best[label] if label in best else best["imports"]
        print(f"  {1e3 * (now - before):6.1f}  {label}")
        before = now


def print_heaviest(timing: str) -> None:
    rows = []
    for line in timing.splitlines():
        if line.startswith("import time:") and "self" not in line:
            own, _, name = line[len("import time:") :].split("|")
            rows.append((int(own), name.strip()))
    heavy = ", ".join(f"{name} {own / 1e3:.1f}" for own, name in sorted(rows)[::-1][:12])
    print(f"heaviest own import times, ms (-X importtime, one run): {heavy}")


if __name__ == "__main__":
    main()
