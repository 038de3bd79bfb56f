"""How often more bandwidth slows a step, per link-sharing mode and optimizer-step mode.

    .venv/bin/python benchmarks/bench_monotone.py [--cases 1800] [--seed 1]

Draws random small scenarios from the space the property tests use (tests/
test_engine_properties.py: 1-3 one-billion-parameter layers, 1-3 micro-batches, every home
tier for every class, GPU or CPU optimizer, three PCIe and NVMe bandwidths, every recompute
mode), raises one link (PCIe or NVMe) to 100 GB/s and compares the step times. Prints, per
mode, the share of cases where the faster link made the step slower and by how much at
worst. Work-conserving sharing (fair, issue order) does not guarantee monotonicity; `ordered`
does on these tree topologies (docs/science.md, "The timing model").
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from engine_helpers import merge, scenario
from test_engine_properties import TIERS, build_raw

from tiersim.report.table import render
from tiersim.runner import simulate

CHOICES = {
    "layers": [1, 2, 3],
    "mb": [1, 2, 3],
    "optimizer": ["adam", "sgd", "sgd_momentum"],
    "weights": TIERS,
    "gradients": TIERS,
    "master": TIERS,
    "opt_state": TIERS,
    "activations": TIERS,
    "compute": ["gpu", "cpu"],
    "pcie": ["2 GB/s", "10 GB/s", "50 GB/s"],
    "nvme": ["1 GB/s", "5 GB/s", "20 GB/s"],
    "recompute": ["none", "selective", "full"],
}
SHARING = ("fair", "issue_order", "ordered")
STEP_MODES = ("synchronous", "pipelined")


def draw(rng: random.Random) -> tuple[dict, str]:
    return {k: rng.choice(v) for k, v in CHOICES.items()}, rng.choice(["pcie", "nvme"])


def slowdown(p: dict, link: str, sharing: str, step_mode: str) -> float:
    """Faster step time / base step time - 1 (> 0: the faster link slowed the step)."""
    raw = merge(
        build_raw(p),
        {"simulation": {"link_sharing": sharing}, "training": {"optimizer_step": step_mode}},
    )
    base = simulate(scenario(raw)).time_s
    faster = merge(raw, {"hardware": {"links": {link: {"bandwidth": "100 GB/s"}}}})
    return simulate(scenario(faster)).time_s / base - 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1800, help="random scenarios (default 1800)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = [draw(rng) for _ in range(args.cases)]
    rows = []
    for step_mode in STEP_MODES:
        for sharing in SHARING:
            changes = [slowdown(p, link, sharing, step_mode) for p, link in cases]
            slower = [d for d in changes if d > 1e-9]
            rows.append(
                [
                    step_mode,
                    sharing,
                    f"{len(slower)} of {len(cases)}",
                    f"{100 * len(slower) / len(cases):.2f} %",
                    f"{100 * max(slower, default=0.0):.2f} %",
                ]
            )
    print(render(["optimizer_step", "link_sharing", "slower", "share", "worst"], rows))


if __name__ == "__main__":
    main()
