"""Collective costs, the links groups use, and the collectives a training step implies.

Expected values are hand arithmetic written out here, NCCL's documented bus-bandwidth relation
(nccl-tests doc/PERFORMANCE.md), or communication volumes from the ZeRO paper (Rajbhandari et
al. 2020, §7.2) and Megatron (Narayanan et al. 2021, §3.2; Korthikanti et al. 2022, §4.2.2).
"""

from __future__ import annotations

import math

import pytest
from conftest import scenario

from tiersim.config.schema import Network, Parallel
from tiersim.hardware.collectives import (
    bus_bandwidth,
    group_link,
    hierarchical_all_reduce_s,
    p2p_link,
    rank_strides,
    ring_all_gather_s,
    ring_all_reduce_s,
    ring_reduce_scatter_s,
    send_s,
    step_collectives,
    tree_all_reduce_s,
)
from tiersim.state.model import build_model

GB = 1e9
US = 1e-6
# A DGX A100-like network: NVLink 3 at 300 GB/s per direction, one 200 Gb/s NIC per GPU.
DGX_A100 = Network(
    gpus_per_node=8,
    intra_node_bandwidth="300 GB/s",
    inter_node_bandwidth="200 Gb/s",
    intra_node_latency="3.4 us",
    inter_node_latency="14 us",
)


# --- algorithms, by hand -----------------------------------------------------------------------


def test_ring_all_reduce_by_hand():
    # 1 GB over 8 GPUs at 300 GB/s, 3.4 us per hop:
    # 2·7/8 · 1e9 / 300e9 = 5.8333 ms, plus 2·7 hops · 3.4 us = 47.6 us -> 5.880933 ms
    assert ring_all_reduce_s(1 * GB, 8, 300 * GB, 3.4 * US) == pytest.approx(5.880933e-3)


def test_ring_all_gather_and_reduce_scatter_by_hand():
    # 1 GB gathered over 8 GPUs: 7/8 · 1e9 / 300e9 = 2.916667 ms, plus 7 · 3.4 us = 23.8 us
    assert ring_all_gather_s(1 * GB, 8, 300 * GB, 3.4 * US) == pytest.approx(2.940467e-3)
    assert ring_reduce_scatter_s(1 * GB, 8, 300 * GB, 3.4 * US) == pytest.approx(2.940467e-3)


def test_all_reduce_is_reduce_scatter_then_all_gather():
    # Korthikanti et al. 2022 §4.2.2: why sequence parallelism adds no communication.
    for n in (2, 3, 8, 64):
        rs_ag = ring_reduce_scatter_s(GB, n, 50 * GB, US) + ring_all_gather_s(GB, n, 50 * GB, US)
        assert ring_all_reduce_s(GB, n, 50 * GB, US) == pytest.approx(rs_ag)


def test_tree_all_reduce_by_hand():
    # 2 · 1e9 / 25e9 = 80 ms, plus 2 · ceil(log2 64) = 12 hops · 14 us = 0.168 ms
    assert tree_all_reduce_s(GB, 64, 25 * GB, 14 * US) == pytest.approx(80.168e-3)


def test_hierarchical_all_reduce_by_hand():
    # 32 GPUs, 8 per node on 4 nodes, 1.6 GB:
    # inside: 7/8 · 1.6e9 / 300e9 = 4.6667 ms + 7 · 3.4 us, twice (reduce-scatter, all-gather)
    # across: 2·3/4 · (1.6e9 / 8) / 25e9 = 12 ms + 2·3 · 14 us
    inside = 7 / 8 * 1.6e9 / 300e9 + 7 * 3.4e-6
    across = 2 * 3 / 4 * 0.2e9 / 25e9 + 6 * 14e-6
    assert hierarchical_all_reduce_s(1.6 * GB, 8, 4, DGX_A100) == pytest.approx(2 * inside + across)


def test_send_by_hand():
    assert send_s(50e6, 25 * GB, 14 * US) == pytest.approx(50e6 / 25e9 + 14e-6)


def test_a_group_of_one_costs_nothing():
    assert ring_all_reduce_s(GB, 1, GB) == 0.0
    assert ring_all_gather_s(GB, 1, GB) == 0.0
    assert tree_all_reduce_s(GB, 1, GB) == 0.0


@pytest.mark.parametrize("n", [2, 4, 8, 16, 128])
def test_bus_bandwidth_is_the_link_bandwidth(n):
    # nccl-tests doc/PERFORMANCE.md: algbw = S / t; busbw = algbw · 2(n-1)/n for all-reduce and
    # algbw · (n-1)/n for all-gather and reduce-scatter. A ring without latency achieves
    # busbw = link bandwidth, for every n.
    bw = 300 * GB
    assert bus_bandwidth("all_reduce", GB, n, ring_all_reduce_s(GB, n, bw)) == pytest.approx(bw)
    assert bus_bandwidth("all_gather", GB, n, ring_all_gather_s(GB, n, bw)) == pytest.approx(bw)
    rs = ring_reduce_scatter_s(GB, n, bw)
    assert bus_bandwidth("reduce_scatter", GB, n, rs) == pytest.approx(bw)


def test_invalid_arguments_name_the_value():
    with pytest.raises(ValueError, match=r"bandwidth\(=0\)"):
        ring_all_reduce_s(GB, 8, 0)
    with pytest.raises(ValueError, match=r"nbytes\(=-1\)"):
        ring_all_gather_s(-1, 8, GB)


# --- which link a group uses -------------------------------------------------------------------


def test_megatron_rank_order_puts_tensor_innermost():
    # Megatron-Core initialize_model_parallel(order="tp-cp-ep-dp-pp"): t consecutive ranks form
    # a tensor group, data groups are t apart, pipeline groups t·d apart.
    # Expert groups are consecutive data-parallel ranks (t apart); the ranks holding the
    # same experts are t·e apart.
    par = Parallel(tensor=8, data=4, pipeline=2)
    expected = {"tensor": 1, "data": 8, "pipeline": 32, "expert": 8, "expert_data": 8}
    assert rank_strides(par) == expected
    par = Parallel(tensor=2, data=8, pipeline=2, expert=4)
    expected = {"tensor": 1, "data": 2, "pipeline": 16, "expert": 2, "expert_data": 8}
    assert rank_strides(par) == expected


def test_tensor_group_inside_a_node_uses_nvlink():
    link = group_link(DGX_A100, 8, 1)
    assert (link.kind, link.bandwidth, link.nodes) == ("nvlink", 300 * GB, 1)
    assert link.latency == pytest.approx(3.4e-6)
    assert group_link(DGX_A100, 4, 2).kind == "nvlink"  # 2 groups of 4, t = 2 apart, in 8


def test_data_group_across_nodes_uses_one_nic_per_gpu():
    # t = 8 fills the node: the d = 6 data-parallel ranks are in 6 nodes, one GPU each.
    link = group_link(DGX_A100, 6, 8)
    assert (link.kind, link.bandwidth, link.per_node, link.nodes) == ("network", 25 * GB, 1, 6)


def test_a_ring_with_k_members_per_node_drives_k_nics():
    # t = 1, d = 32: 8 members per node on 4 nodes; 8 NICs x 25 GB/s = 200 GB/s < NVLink 300.
    link = group_link(DGX_A100, 32, 1)
    assert (link.kind, link.bandwidth, link.per_node, link.nodes) == ("network", 200 * GB, 8, 4)
    # t = 4, d = 4: 2 members per node -> 2 NICs
    assert group_link(DGX_A100, 4, 4).bandwidth == 50 * GB


def test_a_group_that_straddles_a_node_boundary_is_on_the_network():
    # groups of 3 consecutive ranks in 8-GPU nodes: ranks 6, 7, 8 span two nodes
    link = group_link(DGX_A100, 3, 1)
    assert (link.kind, link.per_node, link.nodes) == ("network", 1, 2)


def test_pipeline_neighbours_send_on_one_link():
    link = p2p_link(DGX_A100, Parallel(tensor=8, pipeline=4))
    assert (link.kind, link.bandwidth) == ("network", 25 * GB)
    assert p2p_link(DGX_A100, Parallel(tensor=2, pipeline=4)).kind == "nvlink"


def test_more_network_bandwidth_never_slows_a_collective():
    times = []
    for nic in (12.5, 25, 50, 100, 400):
        net = DGX_A100.model_copy(update={"inter_node_bandwidth": nic * GB})
        link = group_link(net, 16, 8)
        times.append(ring_all_reduce_s(GB, 16, link.bandwidth, link.latency))
    assert times == sorted(times, reverse=True)


# --- one step's collectives --------------------------------------------------------------------


def _step(model, parallel, training=None, hardware="dgx-a100", stage=None):
    raw = {"name": "t", "model": model, "parallel": parallel, "hardware": {"preset": hardware}}
    if training:
        raw["training"] = training
    return step_collectives(scenario(raw), stage)


def _by_name(collectives):
    return {c.name: c for c in collectives}


GPT = {"preset": "megatron-22b"}  # 48 layers, h = 6144, tied embeddings
SBH = 2048 * 4 * 6144 * 2  # s·b·h activations at bf16 for micro-batch 4


def test_data_parallel_size_one_has_no_gradient_collective():
    assert _step(GPT, {"data": 1}, {"seq_len": 2048}) == []


def test_plain_data_parallel_all_reduces_the_gradients_once_per_step():
    (grad,) = _step(GPT, {"data": 2}, {"seq_len": 2048, "grad_accumulation": 4})
    count = build_model(scenario({"name": "t", "model": GPT}).model).parameters
    assert (grad.name, grad.op, grad.count, grad.per) == ("dp.gradients", "all_reduce", 1, "step")
    assert grad.bytes == count * 2  # bf16 gradients of every parameter
    assert grad.link == "nvlink"  # two ranks in one node


def test_megatron_tensor_parallel_all_reduces_per_layer():
    # Narayanan et al. 2021 §3.2: 2 all-reduces of s·b·h in forward and 2 in backward per layer.
    tr = {"seq_len": 2048, "micro_batch_size": 4, "grad_accumulation": 2}
    got = _by_name(_step(GPT, {"tensor": 8}, tr))
    for name, phase in (("tp.forward", "forward"), ("tp.backward", "backward")):
        c = got[name]
        assert (c.op, c.bytes, c.count, c.phase, c.group_size) == (
            "all_reduce",
            SBH,
            2 * 48 * 2,  # 2 per layer, 48 layers, 2 micro-batches
            phase,
            8,
        )
    assert got["tp.embedding"].count == 2 and got["tp.head"].count == 2  # p = 1: both ends
    assert "tp.recompute" not in got
    full = _by_name(_step(GPT, {"tensor": 8}, {**tr, "recompute": "full"}))
    assert full["tp.recompute"].count == 2 * 48 * 2  # full recompute reruns the forward's


def test_sequence_parallelism_moves_the_same_bytes_as_all_reduces():
    # Korthikanti et al. 2022 §4.2.2: reduce-scatter + all-gather replace each all-reduce.
    tr = {"seq_len": 2048, "micro_batch_size": 4}
    plain = _step(GPT, {"tensor": 8}, tr)
    sp = _step(GPT, {"tensor": 8, "sequence": True}, tr)
    assert {c.op for c in sp} == {"reduce_scatter", "all_gather"}
    sent = sum(c.sent_bytes * c.count for c in plain)
    assert sum(c.sent_bytes * c.count for c in sp) == pytest.approx(sent)
    assert sum(c.total_time_s for c in sp) == pytest.approx(sum(c.total_time_s for c in plain))


def test_zero_volumes_follow_the_zero_paper():
    # Rajbhandari et al. 2020 §7.2: with Ψ gradient bytes, plain DP and ZeRO-1/2 send 2Ψ·(n-1)/n
    # per GPU per step (reduce-scatter + all-gather == all-reduce), ZeRO-3 3Ψ·(n-1)/n (1.5x).
    tr = {"seq_len": 2048, "grad_accumulation": 1}
    sent = {}
    for stage in (0, 1, 2, 3):
        steps = _step(GPT, {"data": 16, "zero_stage": stage}, tr)
        sent[stage] = sum(c.sent_bytes * c.count for c in steps)
    assert sent[1] == pytest.approx(sent[0])
    assert sent[2] == pytest.approx(sent[0])
    assert sent[3] == pytest.approx(1.5 * sent[0])


def test_zero3_gathers_each_layer_before_forward_and_backward_every_micro_batch():
    got = _by_name(_step(GPT, {"data": 4, "zero_stage": 3}, {"grad_accumulation": 3}))
    for name in ("dp.weights.layer.forward", "dp.weights.layer.backward", "dp.gradients.layer"):
        assert got[name].count == 48 * 3
    assert got["dp.weights.rest.forward"].count == 3
    assert "dp.parameters" not in got  # weights stay sharded: nothing to gather after the step


def test_zero1_reduce_scatters_once_and_gathers_the_updated_weights():
    got = _by_name(_step(GPT, {"data": 4, "zero_stage": 1}, {"grad_accumulation": 3}))
    assert (got["dp.gradients"].op, got["dp.gradients"].count) == ("reduce_scatter", 1)
    assert (got["dp.parameters"].op, got["dp.parameters"].phase) == ("all_gather", "optimizer")


def test_pipeline_sends_per_micro_batch_and_chunk():
    # p = 4, v = 2, m = 8, t = 8: the first stage sends v = 2 activations per micro-batch forward
    # and v - 1 = 1 gradient backward; 1/t of s·b·h each (Narayanan §4.1 scatter/gather), then
    # the receiver all-gathers the full tensor over NVLink.
    model = {"preset": "megatron-22b", "layers": 48}
    par = {"tensor": 8, "pipeline": 4, "virtual_pipeline": 2}
    tr = {"seq_len": 2048, "micro_batch_size": 4, "grad_accumulation": 8}
    got = _by_name(_step(model, par, tr, stage=0))
    assert got["pp.forward"].count == 2 * 8 and got["pp.backward"].count == 1 * 8
    assert got["pp.forward"].bytes == SBH / 8
    assert got["pp.forward"].link == "network"  # t = 8 fills a node: stages are nodes apart
    assert got["pp.backward.gather"].count == 2 * 8  # gradients arrive from both chunks
    assert "pp.forward.gather" in got and got["pp.forward.gather"].count == 1 * 8
    last = _by_name(_step(model, par, tr, stage=3))
    assert last["pp.forward"].count == 1 * 8 and last["pp.backward"].count == 2 * 8


def test_tied_embeddings_sync_their_gradients_between_first_and_last_stage():
    model = {"preset": "megatron-22b"}
    par = {"tensor": 8, "pipeline": 4}
    (sync,) = [c for c in _step(model, par, stage=0) if c.group == "embedding"]
    assert sync.bytes == math.ceil(51200 * 6144 / 8) * 2 and sync.group_size == 2
    assert not [c for c in _step(model, par, stage=1) if c.group == "embedding"]


def test_more_network_bandwidth_never_slows_the_step_collectives():
    par = {"data": 4, "tensor": 8, "pipeline": 2, "zero_stage": 1}
    totals = []
    for nic in ("100 Gb/s", "200 Gb/s", "400 Gb/s", "800 Gb/s"):
        raw = {
            "name": "t",
            "model": GPT,
            "parallel": par,
            "hardware": {"preset": "dgx-a100", "network": {"inter_node_bandwidth": nic}},
        }
        totals.append(sum(c.total_time_s for c in step_collectives(scenario(raw))))
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
