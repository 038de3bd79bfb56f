"""Instructions a Korthikanti Table 5 point costs in process, or one part of it (issue 36,
docs/speed.md's thirty-sixth round): valgrind's callgrind, PYTHONHASHSEED=0, the cyclic
collector off, after 3 calls of `calculon_peer.tiersim_evaluate` outside the collection (the
same at any load; about a minute a count beside other work).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/table5_instructions.py SCENARIO [PART ...]

SCENARIO: a file of scenarios/published (korthikanti2022-530b-selective-sp.yaml). Without
PART: 5 points, collected inside `itertools.starmap` over them. Each PART
(`module:function` or `module:Class.method`, e.g. `tiersim.engine.chain:_walk`): 5 points,
collected only inside that part's calls, each made inside `itertools.dropwhile` (its
predicate calls the part), the wrapper put in place after the 3 calls outside (the first
call's imports are not counted) and in every module that imported the part by name.
Prints millions of instructions a point.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINTS = 5


def _wrap(part: str) -> None:
    """`part` called inside `dropwhile`'s predicate, where valgrind's toggle sees it."""
    import itertools

    module_name, attr = part.split(":")
    module = importlib.import_module(module_name)
    owner, name = module, attr
    if "." in attr:
        cls, name = attr.split(".")
        owner = getattr(module, cls)
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        box: list = []
        next(itertools.dropwhile(lambda _: box.append(original(*args, **kwargs)), [0]))
        return box[0]

    setattr(owner, name, wrapped)
    for other in list(sys.modules.values()):  # those that imported it by name
        if other is not module and getattr(other, name, None) is original:
            setattr(other, name, wrapped)


def _child(scenario: str, part: str) -> None:
    """The counted process."""
    import gc
    import itertools

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calculon_peer

    for _ in range(3):
        calculon_peer.tiersim_evaluate(scenario)
    if part:
        _wrap(part)
    gc.collect()
    gc.disable()
    if part:
        for _ in range(POINTS):
            calculon_peer.tiersim_evaluate(scenario)
    else:
        list(itertools.starmap(calculon_peer.tiersim_evaluate, [(scenario,)] * POINTS))


def count(scenario: str, part: str = "") -> float:
    """Millions of instructions a point of `scenario` (or of `part` within it)."""
    toggle = "dropwhile_next" if part else "starmap_next"
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
    command += [f"--toggle-collect={toggle}", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, __file__, "--child", scenario, part]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1)) / POINTS / 1e6


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2] if len(argv) > 2 else "")
        return
    if not argv:
        raise SystemExit(__doc__)
    scenario, parts = argv[0], argv[1:] or [""]
    for part in parts:
        print(f"{scenario} {part or 'the point'}: {count(scenario, part):.2f} M", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
