"""The step's waits split: on movement between tiers (`exposed_transfer_s`) and on
collectives (`exposed_collective_s`), in the JSON, the table and the step picture's bar."""

from __future__ import annotations

import math
from pathlib import Path

from engine_helpers import tiny

from tiersim.config.load import build
from tiersim.report.plot import time_parts
from tiersim.report.text import step_tables
from tiersim.runner import report_for


def test_a_gradient_all_reduce_is_exposed_collective_not_transfer():
    # tiny(): one 1e9-parameter fp32 layer, forward 1 s and backward 2 s; data-parallel over
    # 2 GPUs of a node (NVLink-class 100 GB/s, no latency); SGD momentum (4 GB) in DRAM
    # behind PCIe at 10 GB/s, updated on the GPU.
    #   0.00-3.00  forward and backward
    #   3.00-3.04  all-reduce of the 4 GB gradient: ring, 2 (n - 1) / n x 4 GB / 100 GB/s
    #              = 0.04 s (the update waits for it): exposed collective
    #   3.04-3.44  momentum in, 4 GB / 10 GB/s; the update (20 GB at 1000 TB/s, 2e-5 s);
    #   3.44-3.84  momentum back: 0.8 s of exposed transfer
    # step 3.84002 s; before the split the 0.04 s counted as transfer (0.84 s).
    raw = tiny(
        training={"optimizer": "sgd_momentum"},
        parallel={"data": 2},
        placement={"optimizer": "dram"},
        hardware={
            "network": {
                "gpus_per_node": 8,
                "intra_node_bandwidth": "100 GB/s",
                "intra_node_latency": "0 us",
            }
        },
    )
    report = report_for(build(raw, Path("."), "test.yaml"))
    step = report["step"]
    assert math.isclose(step["time_s"], 3.84002, rel_tol=1e-9)
    assert math.isclose(step["exposed_collective_s"], 0.04, rel_tol=1e-9)
    assert math.isclose(step["exposed_transfer_s"], 0.8, rel_tol=1e-9)
    # the table's rows and the picture's bar: 0.8 / 3.84002 = 20.8 %, 0.04 / 3.84002 = 1.0 %
    table = step_tables(report)
    assert "exposed transfer (GPU waits)" in table and "20.8 %" in table
    row = next(line for line in table.splitlines() if "exposed collectives (GPU waits)" in line)
    assert row.endswith("1.0 %")
    parts = dict(time_parts(step))
    assert math.isclose(parts["exposed collectives"], 0.04, rel_tol=1e-9)
    assert math.isclose(parts["exposed transfer"], 0.8, rel_tol=1e-9)
