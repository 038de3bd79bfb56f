"""Review 2026-12-07 (m)'s "Found, not fixed" rows, fixed since zero1total
(docs/review-2026-12-07-m.md). Each test fails on the tree before its fix; expected values are
worked by hand in each. None simulates a step or imports PyTorch."""

from __future__ import annotations

import re

GB = 10**9

# DeepSpeed ZeRO-1 with the CPU optimizer (state/zero1_offload.py): 10^9 parameters over data 4
Z1_CPU = {
    "name": "z1",
    "model": {"parameters": GB, "layers": 4, "activation_bytes_per_layer": "100 MB"},
    "training": {"framework": "deepspeed", "workspace": "0 B", "precision": {"weights": "bf16",
                 "gradients": "bf16", "master": "fp32", "optimizer": "fp32"}},
    "parallel": {"data": 4, "zero_stage": 1},
    "placement": {"gradients": "dram", "master": "dram", "optimizer": "dram",
                  "optimizer_compute": "cpu"},
    "hardware": {"preset": "dgx-h100"},
}  # fmt: skip


def test_zero1_cpu_inventory_total_counts_the_whole_gradients_on_the_gpu(write, cli, cli_json):
    """`inventory ds1.yaml` gave `total 60.03 GB` a GPU where the tier table holds 61.71 +
    11.79 = 73.50 GB: the 13.48 GB of whole 16-bit gradients the GPU accumulates
    (stage_1_and_2.py, state/zero1_offload.py) were in hbm's resident and the GPU's timeline
    but in no row. By hand, 10^9 parameters over data 4:
    hbm: weights 2 B x 10^9 = 2e9, the whole bf16 gradients 2e9, activations 4 x 1e8 = 4e8
         -> 4.4e9 (workspace 0: training.workspace 0 B, a generic model has no tensor for
         ZeRO-Offload's gradient buffer, DeepSpeed's buckets counted in the timeline);
    host: the gradients' partition 2e9 / 4 = 5e8, master 4e9 / 4 = 1e9, Adam 8e9 / 4 = 2e9
         -> 3.5e9;
    per GPU 4.4e9 + 3.5e9 = 7.9e9 (the old total: 7.9e9 - 2e9 = 5.9e9)."""
    path = write(Z1_CPU)
    report = cli_json(path)
    per_gpu, tiers = report["inventory"]["per_gpu"], report["tiers"]
    hbm, host = 2 * GB + 2 * GB + 4 * 10**8, 5 * 10**8 + GB + 2 * GB
    assert (tiers["hbm"]["resident_bytes"], tiers["dram"]["resident_bytes"]) == (hbm, host)
    assert per_gpu["gradients"] == 5 * 10**8 and per_gpu["gradients_on_gpu"] == 2 * GB
    assert per_gpu["total"] == hbm + host == 79 * 10**8
    assert sum(v for k, v in per_gpu.items() if k != "total") == per_gpu["total"]
    # the GPU's timeline holds the same resident state at its peak, the host's the rest
    gpu = report["memory_timeline"]["peak_parts"]
    resident = ("resident weights", "resident gradients", "saved activations")
    assert sum(gpu[k] for k in resident) == hbm
    host_parts = report["host_memory_timeline"]["peak_parts"]
    resident = ("resident optimizer", "resident master", "resident gradients")
    assert sum(host_parts[k] for k in resident) == host
    code, out, err = cli("inventory", path)
    assert code == 0, err
    rows = {re.split(r"\s{2,}", x)[0]: re.split(r"\s{2,}", x)[1:] for x in out.splitlines()[3:11]}
    assert rows["gradients (GPU)"] == ["2.00 GB", "no", "hbm"]  # no whole-model figure
    assert rows["total"] == ["16.40 GB", "7.90 GB"]  # 2 + 2 + 4 + 8 + 0.4 GB whole
