"""Delayed FP8 scaling's amax reduction (tiersim/workload/amax.py): expected values by hand
from the dgx-h100 preset's link latencies (NVLink hop 3.4 us, network hop 14 us)."""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario

from tiersim.state.resolved import resolve
from tiersim.workload import amax, work
from tiersim.workload.work import build_workload

BASE = {
    "name": "amax",
    "model": {
        "layers": 8,
        "hidden": 512,
        "heads": 8,
        "ffn_hidden": 2048,
        "vocab": 1000,
        "max_positions": 1024,
    },
    "training": {
        "framework": "megatron",
        "micro_batch_size": 1,
        "grad_accumulation": 4,
        "seq_len": 1024,
        "precision": {"weights": "bf16", "gradients": "bf16", "master": "fp32"},
        "fp8": {"recipe": "delayed"},
    },
    # 32 GPUs: the amax group is tensor 4 x data 4 = 16 consecutive ranks, 8 a node on 2 nodes
    "parallel": {"tensor": 4, "data": 4, "pipeline": 2, "virtual_pipeline": 2},
    "hardware": {"preset": "dgx-h100"},
}


def resolved(**over):
    return resolve(scenario(merge(BASE, over)))


def hbm_bw(r):
    tier = r.machine.tiers[r.machine.gpu.memory]
    return min(tier.read_bw, tier.write_bw) * r.machine.gpu.memory_efficiency


def test_one_reduction_is_the_trees_hops_and_the_update():
    r = resolved()
    net = r.machine.network
    # 24 amaxes (a chunk of 2 layers' forward: 3 x 4 GEMMs x 2), 96 B. Tree inside the node
    # over 8: 2 x 96 / NVLink + 2 x log2(8) = 6 hops x 3.4 us; across 2 nodes: 2 x 96 /
    # network + 2 x 1 hop x 14 us. Update: (2 x 4 B x 1024 history + 20 B) x 24 at HBM.
    inside = 2 * 96 / net.intra_node_bandwidth + 6 * 3.4e-6
    across = 2 * 96 / net.inter_node_bandwidth + 2 * 14e-6
    update = (8 * 1024 + 20) * 24 / hbm_bw(r)
    assert amax.reduction_s(r, 24) == pytest.approx(inside + across + update)
    # the latency terms dominate: 20.4 + 28 = 48.4 us
    assert amax.reduction_s(r, 24) == pytest.approx(48.4e-6, rel=0.05)


def test_each_layer_carries_its_share_of_its_chunks_reductions():
    r = resolved()
    # a stage holds 4 layers in 2 chunks of 2: per micro-batch 2 forward reductions of 24
    # amaxes and 2 backward of 16 (2 x 4 GEMMs x 2 layers), spread over the 4 layers
    fwd, bwd = amax.per_layer_s(r, 4)
    assert fwd == pytest.approx(2 * amax.reduction_s(r, 24) / 4)
    assert bwd == pytest.approx(2 * amax.reduction_s(r, 16) / 4)


def test_only_delayed_scaling_reduces():
    assert amax.per_layer_s(resolved(training={"fp8": {"recipe": "tensorwise"}}), 4) == (0, 0)
    assert amax.per_layer_s(resolved(training={"fp8": None}), 4) == (0, 0)


def test_the_layers_units_block_on_it(monkeypatch):
    r = resolved()
    with_it = {u.name: u for u in build_workload(r).units}
    monkeypatch.setattr(work, "amax_per_layer_s", lambda r, n: (0.0, 0.0))
    without = {u.name: u for u in build_workload(r).units}
    fwd, bwd = amax.per_layer_s(r, 4)
    assert with_it["L0"].forward_s - without["L0"].forward_s == pytest.approx(fwd)
    assert with_it["L0"].backward_s - without["L0"].backward_s == pytest.approx(bwd)
    assert with_it["rest"].forward_s == without["rest"].forward_s
