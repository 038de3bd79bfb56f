"""What engine/channel.py's fast path for collectives saves over the general flow network.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_channel.py [--repeat 5]

A collective crosses its GPU's network channel and nothing else, so under max-min sharing the
engine gives it to `channel.Channel` (flows as lists, one resource, rate capacity / n) instead
of `flows.FlowNetwork` (flow objects, max-min filling over every resource). Each case below is
simulated both ways: as shipped, and with the engine's channels switched off (`_channels =
None`, the branch the engine takes under another sharing policy), so that the same
collectives go through FlowNetwork. Printed per case: the engine's CPU milliseconds both ways (the
least of `--repeat` runs of `Engine.run`, in process time: a loaded machine's wall time would
say more of the load), their ratio, the SimPy events each way, and whether the two results
are the same to the bit (every field of the step result but the timing and the event count).
Every micro-batch is simulated (`steady_state: full`), as benchmarks/bench_engine.py does.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from tiersim.config.load import build
from tiersim.engine import core
from tiersim.runner import simulate

CASES = {
    "llama-2-7b, 8 micro-batches, d=8 ZeRO-1": {
        "model": {"preset": "llama-2-7b"},
        "training": {"grad_accumulation": 8, "seq_len": 4096, "recompute": "selective"},
        "parallel": {"data": 8, "zero_stage": 1},
    },
    "llama-2-70b, ZeRO-3 d=64, NVMe offload, CPU optimizer": {
        "model": {"preset": "llama-2-70b"},
        "training": {"grad_accumulation": 8, "seq_len": 4096, "recompute": "full"},
        "parallel": {"data": 64, "zero_stage": 3},
        "placement": {
            "weights": "nvme",
            "gradients": "dram",
            "master": "nvme",
            "optimizer": "nvme",
            "optimizer_compute": "cpu",
        },
    },
    "llama-2-70b, t=8 d=16 ZeRO-1, 32 micro-batches": {
        "model": {"preset": "llama-2-70b"},
        "training": {"grad_accumulation": 32, "seq_len": 4096, "recompute": "full"},
        "parallel": {"tensor": 8, "data": 16, "zero_stage": 1, "sequence": True},
    },
    "gpt3-175b, t=8 p=8 d=8": {
        "model": {"preset": "gpt3-175b"},
        "training": {"grad_accumulation": 16, "recompute": "selective"},
        "parallel": {"tensor": 8, "pipeline": 8, "data": 8, "zero_stage": 1, "sequence": True},
    },
}


class _Timed:
    """Engine.run wrapped to add its process time to `seconds`; `general` switches the
    channels off before each run."""

    def __init__(self, general: bool):
        self.general, self.seconds = general, 0.0

    def __enter__(self) -> _Timed:
        self.original = core.Engine.run
        timed = self

        def run(engine: core.Engine, *args, **kwargs):
            if timed.general:
                engine._channels = None  # collectives to FlowNetwork, as another policy's
            started = time.process_time()
            try:
                return timed.original(engine, *args, **kwargs)
            finally:
                timed.seconds += time.process_time() - started

        core.Engine.run = run
        return self

    def __exit__(self, *exc: object) -> None:
        core.Engine.run = self.original


def _once(raw: dict, general: bool) -> tuple[float, int, object]:
    """Engine CPU seconds, SimPy events, and the result less its timing and event count
    (the network schedules more wake-ups for the same flows: its events differ)."""
    raw = {**raw, "simulation": {"steady_state": "full"}}  # every micro-batch simulated
    scenario = build({"name": "bench", **raw}, Path("."), "bench").scenario
    with _Timed(general) as timed:
        result = simulate(scenario)
    return timed.seconds, result.events, dataclasses.replace(result, wall_s=0.0, events=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per way (least kept)")
    args = parser.parse_args()
    print(f"{'case':56} {'channel ms':>10} {'network ms':>10} {'ratio':>6} {'events':>15}  same")
    for name, raw in CASES.items():
        fast, general = [], []
        for _ in range(args.repeat):  # taking turns, so that a load falls on both
            seconds, fast_events, fast_result = _once(raw, general=False)
            fast.append(seconds)
            seconds, general_events, general_result = _once(raw, general=True)
            general.append(seconds)
        same = fast_result == general_result
        events = f"{fast_events}/{general_events}"
        print(
            f"{name:56} {1e3 * min(fast):10.1f} {1e3 * min(general):10.1f} "
            f"{min(general) / min(fast):6.2f} {events:>15}  {same}"
        )


if __name__ == "__main__":
    main()
