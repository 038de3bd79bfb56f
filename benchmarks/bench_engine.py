"""Engine speed: events, wall time per simulated step and events per second, for 7B, 70B,
175B and 1T scenarios, and how cost grows when layers and micro-batches double.

Run: make bench   (or .venv/bin/python benchmarks/bench_engine.py)
Target (issue 3): Llama-2-70B, 80 layers, 8 micro-batches, ZeRO-3, state offloaded to NVMe,
CPU optimizer: at most 0.5 s of engine time per simulated step on a 2-core machine; cost
linear in layers x micro-batches; peak process memory under 500 MB.
"""

from __future__ import annotations

import resource
from pathlib import Path

from tiersim.config.load import build
from tiersim.runner import simulate

NVME_OFFLOAD = {
    "weights": "nvme",
    "gradients": "dram",
    "master": "nvme",
    "optimizer": "nvme",
    "optimizer_compute": "cpu",
}

CASES = {
    "llama-2-7b, optimizer+master on HBF": {
        "model": {"preset": "llama-2-7b"},
        "training": {"grad_accumulation": 8, "seq_len": 4096, "recompute": "selective"},
        "placement": {"master": "hbf", "optimizer": "hbf"},
    },
    "llama-2-70b, ZeRO-3, NVMe offload, CPU optimizer": {
        "model": {"preset": "llama-2-70b"},
        "training": {"grad_accumulation": 8, "seq_len": 4096, "recompute": "full"},
        "parallel": {"data": 64, "zero_stage": 3},
        "placement": NVME_OFFLOAD,
    },
    "gpt3-175b, t=8 p=8": {
        "model": {"preset": "gpt3-175b"},
        "training": {"grad_accumulation": 16, "recompute": "selective"},
        "parallel": {"tensor": 8, "pipeline": 8, "data": 8, "zero_stage": 1, "sequence": True},
    },
    "megatron-1t, t=8 p=64 v=2": {
        "model": {"preset": "megatron-1t"},
        "training": {"grad_accumulation": 64, "recompute": "selective"},
        "parallel": {
            "tensor": 8,
            "pipeline": 64,
            "virtual_pipeline": 2,
            "data": 4,
            "zero_stage": 1,
            "sequence": True,
        },
    },
}


def run(raw: dict) -> tuple[float, int, int]:
    """Engine seconds, events and simulated steps, every micro-batch simulated (the cost of
    a step; `benchmarks/bench_cost.py` measures what steady-state extrapolation saves)."""
    raw = {**raw, "simulation": {"steady_state": "full"}}
    scenario = build({"name": "bench", **raw}, Path("."), "bench").scenario
    result = simulate(scenario)
    return result.wall_s, result.events, result.steps_simulated


def main() -> None:
    head = f"{'scenario':52} {'events':>8} {'steps':>5} {'engine s':>9} {'s/step':>8}"
    print(f"{head} {'events/s':>10}")
    for name, raw in CASES.items():
        wall, events, steps = run(raw)
        print(
            f"{name:52} {events:8d} {steps:5d} {wall:9.3f} {wall / steps:8.3f} "
            f"{events / wall:10.0f}"
        )
    print("\nscaling (llama-2-70b offload case): layers x micro-batches")
    base = CASES["llama-2-70b, ZeRO-3, NVMe offload, CPU optimizer"]
    print(f"{'layers':>6} {'micro-batches':>13} {'events':>8} {'s/step':>9} {'s per (L x m)':>14}")
    for layers, mbs in ((40, 4), (80, 4), (80, 8), (160, 8), (160, 16)):
        raw = {
            **base,
            "model": {"preset": "llama-2-70b", "layers": layers},
            "training": {**base["training"], "grad_accumulation": mbs},
        }
        wall, events, steps = run(raw)
        wall /= steps
        print(f"{layers:6d} {mbs:13d} {events:8d} {wall:9.3f} {wall / (layers * mbs):14.2e}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak process memory (max RSS): {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
