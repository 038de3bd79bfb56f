"""Tiny scenarios for engine tests: two or three tiers with round numbers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tiersim.config.load import build

FAST = "1000 TB/s"  # tier ports this fast never bind in these tests


def tiny(**over: Any) -> dict[str, Any]:
    """One 1e9-parameter layer, fp32, SGD: forward 1 s, backward 2 s on a 1 TFLOP/s GPU."""
    raw = {
        "name": "tiny",
        "model": {
            "parameters": 1_000_000_000,
            "layers": 1,
            "forward_flops_per_token_per_layer": 1e9,
        },
        "training": {
            "micro_batch_size": 1,
            "grad_accumulation": 1,
            "seq_len": 1000,
            "optimizer": "sgd",
            "workspace": "0 B",
            "precision": {
                "weights": "fp32",
                "gradients": "fp32",
                "master": "none",
                "optimizer": "fp32",
            },
        },
        "placement": {
            "weights": "hbm",
            "gradients": "hbm",
            "master": "hbm",
            "optimizer": "hbm",
            "activations": "hbm",
        },
        "hardware": {
            "preset": "none",
            "gpu": {
                "peak_flops": {"fp32": "1 TFLOP/s", "bf16": "1 TFLOP/s"},
                "efficiency": 1.0,
                "optimizer_efficiency": 1.0,
            },
            "cpu": {"optimizer_rate": "1 Gparam/s", "memory_bandwidth": FAST},
            "tiers": {
                "hbm": {"kind": "hbm", "capacity": "1 TB", "bandwidth": FAST},
                "dram": {"kind": "dram", "capacity": "10 TB", "bandwidth": FAST},
                "nvme": {
                    "kind": "flash",
                    "capacity": "100 TB",
                    "bandwidth": FAST,
                    "endurance": {"pe_cycles": 3000},
                },
            },
            "links": {
                "pcie": {"between": ["hbm", "dram"], "bandwidth": "10 GB/s"},
                "nvme": {"between": ["dram", "nvme"], "bandwidth": "5 GB/s"},
            },
        },
    }
    return merge(raw, over)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def scenario(raw: dict[str, Any]):
    return build(raw, Path("."), "test.yaml").scenario


def assert_bytes_conserved(result) -> None:
    """Every byte of each source read out of a tier is written into another, and the run moved
    something."""
    tiers = result.tiers.values()
    classes = {c for t in tiers for c in [*t.read_by_source, *t.written_by_source]}
    assert classes
    for c in classes:
        read = sum(t.read_by_source.get(c, 0) for t in tiers)
        written = sum(t.written_by_source.get(c, 0) for t in tiers)
        assert read == written, c
