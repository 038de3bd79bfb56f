"""An async checkpoint's figures extrapolated from samples against the step simulated in full,
on benchmarks/explore_wide.py's draws (docs/invariants.md, seed 25 case 134).

    nice -n 19 .venv/bin/python benchmarks/explore_async_peaks.py [--seed 7] [--cases 40]
    nice -n 19 .venv/bin/python benchmarks/explore_async_peaks.py --around-134 [--seed 1]

Draws as `explore_wide.widen` does and keeps the scenarios with an async checkpoint less
often than every step and 8 to 256 micro-batches that run; or (`--around-134`) draws case
134 itself with a few keys changed (`_around_134`: the micro-batches, layers, `context`,
`pipeline`, `seq_len`, the target, the homes, recompute). Prints, for each, the draw's
index, how the step was simulated (`sim.steady_state`) and why not extrapolated, and, where
it was, every peak figure that differs from the full simulation's (tests/test_steady.py
`differences`); then counts. Run on two trees, the lines compare draw by draw.
"""

from __future__ import annotations

import argparse
import copy
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

CASE_134 = {  # seed 25 case 134 of explore_wide.py, as it printed it
    "name": "explore",
    "model": {
        **{"layers": 4, "hidden": 256, "heads": 8, "ffn_hidden": 1024, "vocab": 1024},
        **{"max_positions": 1024, "norm": "rmsnorm", "position": "rope", "gated_mlp": True},
        **{"experts": 4, "experts_per_token": 2, "shared_experts": 0},
    },
    "training": {
        **{"seq_len": 512, "micro_batch_size": 1, "grad_accumulation": 16, "optimizer": "adamw"},
        **{"recompute": "selective", "implementation": "huggingface"},
        "optimizer_step": "synchronous",
    },
    "parallel": {
        **{"data": 1, "tensor": 1, "pipeline": 2, "context": 2, "zero_stage": 3},
        **{"context_comm": "all_to_all", "expert": 1, "expert_imbalance": 1},
        **{"overlap_expert_comm": False, "reshard_after_forward": False},
    },
    "placement": {
        **{"master": "dram", "optimizer_compute": "cpu", "weights": "hbf"},
        "experts": {"optimizer": "hbf", "master": "dram"},
    },
    "hardware": {"preset": "h200-hbf"},
    "checkpoint": {"every_steps": 100, "target": "nvme", "mode": "async"},
    "failures": {"mtbf": "3 h"},
}


def _around_134(rng: random.Random) -> dict:
    raw = copy.deepcopy(CASE_134)
    tr, par, place = raw["training"], raw["parallel"], raw["placement"]
    tr["grad_accumulation"] = rng.choice([8, 12, 14, 16, 20, 24, 32, 48, 64])
    raw["model"]["layers"] = rng.choice([2, 4])
    par["context"], par["pipeline"] = rng.choice([1, 2]), rng.choice([1, 2])
    tr["seq_len"] = rng.choice([256, 512])
    raw["checkpoint"]["target"] = rng.choice(["nvme", "hbf", "nvme"])
    if rng.random() < 0.5:
        place.pop("weights")
    if rng.random() < 0.3:
        place["experts"] = {"optimizer": rng.choice(["hbf", "dram", "nvme"])}
    if rng.random() < 0.3:
        tr["recompute"] = rng.choice(["none", "full"])
    return raw


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
    parser.add_argument("--around-134", action="store_true", help="case 134's neighbours")
    args = parser.parse_args()
    rng, counts = random.Random(args.seed), {"peaks differ": 0}
    draw = _around_134 if args.around_134 else widen
    for i in range(100_000):
        if sum(counts.values()) - counts["peaks differ"] >= args.cases:
            break
        raw = draw(rng)
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
