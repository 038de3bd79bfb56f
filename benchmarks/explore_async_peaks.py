"""An async checkpoint's figures extrapolated from samples against the step simulated in full,
on benchmarks/explore_wide.py's draws (docs/invariants.md, seed 25 case 134).

    nice -n 19 .venv/bin/python benchmarks/explore_async_peaks.py [--seed 7] [--cases 40]

Draws as `explore_wide.widen` does and keeps the scenarios with an async checkpoint less
often than every step and 8 to 256 micro-batches that run. Prints, for each, the draw's
index, how the step was simulated (`sim.steady_state`) and why not extrapolated, and, where
it was, every peak figure that differs from the full simulation's (tests/test_steady.py
`differences`); then counts. Run on two trees, the lines compare draw by draw.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from explore_wide import widen
from test_steady import differences

from tiersim import api
from tiersim.core.errors import InfeasibleError, InputError


def _kept(raw: dict) -> bool:
    ck, m = raw.get("checkpoint") or {}, raw["training"].get("grad_accumulation", 1)
    return ck.get("mode") == "async" and ck.get("every_steps") != 1 and 8 <= m <= 256


def _compared(raw: dict) -> tuple[str, str, list[str]]:
    fast = api.run(api.build(raw)).report
    sim = fast["sim"]
    if sim["steady_state"] != "extrapolated":
        return sim["steady_state"], sim.get("steady_state_why", ""), []
    sim_keys = {**raw.get("simulation", {}), "steady_state": "full"}  # the draw's kept
    full = api.run(api.build({**raw, "simulation": sim_keys})).report
    peaks = [d for d in differences(full, fast, full["step"]["time_s"]) if "peak" in d]
    return sim["steady_state"], "", peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cases", type=int, default=40, help="scenarios kept that run")
    args = parser.parse_args()
    rng, counts = random.Random(args.seed), {"peaks differ": 0}
    for i in range(100_000):
        if sum(counts.values()) - counts["peaks differ"] >= args.cases:
            break
        raw = widen(rng)
        if not _kept(raw):
            continue
        try:
            how, why, peaks = _compared(raw)
        except (InputError, InfeasibleError):
            continue
        except Exception as e:  # reported, not a stop: the other draws still compare
            how, why, peaks = "crash", f"{type(e).__name__}: {e}", []
        counts[how] = counts.get(how, 0) + 1
        counts["peaks differ"] += bool(peaks)
        print(i, how, why[:120], peaks[:2], flush=True)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
