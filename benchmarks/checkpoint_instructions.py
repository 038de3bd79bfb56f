"""Instructions a `simulate` call of a scenario counts with its checkpoint and without
(issue 36, docs/speed.md's twenty-eighth and thirty-first rounds): valgrind's callgrind,
collected only inside `itertools.starmap(simulate, ...)` over 2 calls after one outside it,
the cyclic collector off, PYTHONHASHSEED=0 (the same at any load; about a minute a count).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/checkpoint_instructions.py [scenario]

Prints each count (millions of instructions a call) and their ratio.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WITHOUT = "checkpoint.every_steps=null"


def _child(scenario: str, extra: list[str]) -> None:
    """The counted process: one call outside the collection, then two inside it."""
    import gc
    import itertools

    from tiersim.config.load import load_scenario
    from tiersim.runner import simulate

    loaded = load_scenario(Path(scenario), extra).scenario
    simulate(loaded)
    gc.disable()
    list(itertools.starmap(simulate, [(loaded,), (loaded,)]))


def count(scenario: str, extra: list[str]) -> float:
    """Millions of instructions a `simulate` call of `scenario` (with `extra` overrides)."""
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
    command += ["--toggle-collect=starmap_next", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, __file__, "--child", scenario, *extra]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1)) / 2 / 1e6


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3:])
        return
    scenario = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "scenarios" / "default.yaml")
    with_it, without = count(scenario, []), count(scenario, [WITHOUT])
    print(f"{scenario}: with the checkpoint {with_it:.2f} M, without {without:.2f} M")
    print(f"with / without: {with_it / without:.3f}x")


if __name__ == "__main__":
    main()
