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
    tree_all_reduce_s,
)
from tiersim.hardware.resources import NetChannel
from tiersim.hardware.resources import Network as Network_
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload.comms import capacities, embedding_sync, p2p_send_s
from tiersim.workload.work import build_workload

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
    assert {k: rank_strides(par)[k] for k in expected} == expected
    par = Parallel(tensor=2, data=8, pipeline=2, expert=4)
    expected = {"tensor": 1, "data": 2, "pipeline": 16, "expert": 2, "expert_data": 8}
    assert {k: rank_strides(par)[k] for k in expected} == expected


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


# --- one step's collectives: the workload's, which the engine runs -----------------------------


def _setup(model, parallel, training=None, hardware="dgx-a100"):
    raw = {"name": "t", "model": model, "parallel": parallel, "hardware": {"preset": hardware}}
    if training:
        raw["training"] = training
    return scenario(raw)


def _work(model, parallel, training=None, hardware="dgx-a100"):
    return build_workload(resolve(_setup(model, parallel, training, hardware)))


def _comms(unit):
    fields = ("tp_forward", "tp_backward", "dp_weights", "dp_gradients", "dp_parameters")
    return {f: getattr(unit, f) for f in (*fields, "embedding_sync") if getattr(unit, f)}


GPT = {"preset": "megatron-22b"}  # 48 layers, h = 6144, vocab 51,200, tied embeddings
SBH = 2048 * 4 * 6144 * 2  # s·b·h activations at bf16 for micro-batch 4
NVLINK = Network_(NetChannel.NVLINK)


def test_data_parallel_size_one_has_no_collective():
    wl = _work(GPT, {"data": 1}, {"seq_len": 2048})
    assert all(_comms(u) == {} for u in wl.units)


def test_plain_data_parallel_all_reduces_the_gradients_once_per_step():
    wl = _work(GPT, {"data": 2}, {"seq_len": 2048, "grad_accumulation": 4})
    assert not wl.gradients_every_microbatch  # reduced once, after the last micro-batch
    grads = [u.dp_gradients for u in wl.units]
    assert all(c.group == "data" and c.resource == NVLINK for c in grads)  # one node
    # ring all-reduce of bf16 gradients over 2 ranks: 2(n-1)/n = 1 x the buffer per GPU
    count = build_model(scenario({"name": "t", "model": GPT}).model).parameters
    assert sum(c.nbytes for c in grads) == count * 2
    assert all(_comms(u).keys() == {"dp_gradients"} for u in wl.units)


def test_megatron_tensor_parallel_all_reduces_per_layer():
    # Narayanan et al. 2021 §3.2: 2 all-reduces of s·b·h in forward and 2 in backward per layer
    # and micro-batch; ring all-reduce over 8 ranks sends 2 x 7/8 of the buffer each.
    tr = {"seq_len": 2048, "micro_batch_size": 4, "grad_accumulation": 2}
    layer, *_, rest = _work(GPT, {"tensor": 8}, tr).units
    for c in (layer.tp_forward, layer.tp_backward):
        assert (c.group, c.nbytes) == ("tensor", pytest.approx(2 * 2 * 7 / 8 * SBH))
    # p = 1: the embedding's all-reduce in forward and the head's in backward, one each
    assert rest.tp_forward.nbytes == rest.tp_backward.nbytes == pytest.approx(2 * 7 / 8 * SBH)
    full = _work(GPT, {"tensor": 8}, {**tr, "recompute": "full"}).units[0]
    assert full.tp_backward.nbytes == pytest.approx(2 * layer.tp_backward.nbytes)  # reruns


def test_sequence_parallelism_moves_the_same_bytes_as_all_reduces_and_gathers_again():
    # Korthikanti et al. 2022 §4.2.2: reduce-scatter + all-gather replace each all-reduce,
    # (n-1)/n + (n-1)/n of the buffer = 2(n-1)/n, with as many latency hops. Backward also
    # all-gathers each column-parallel linear's input again (not kept between the passes):
    # 2 all-reduces (4 halves) become 2 reduce-scatters + 4 all-gathers (6 halves), 1.5x.
    tr = {"seq_len": 2048, "micro_batch_size": 4}
    plain = _work(GPT, {"tensor": 8}, tr).units[0]
    sp = _work(GPT, {"tensor": 8, "sequence": True}, tr).units[0]
    assert sp.tp_forward.nbytes == pytest.approx(plain.tp_forward.nbytes)
    assert sp.tp_forward.latency_s == pytest.approx(plain.tp_forward.latency_s)
    assert sp.tp_backward.nbytes == pytest.approx(1.5 * plain.tp_backward.nbytes)
    assert sp.tp_backward.latency_s == pytest.approx(1.5 * plain.tp_backward.latency_s)


def _sent_per_step(wl) -> float:
    """Bytes one GPU sends per step: sharded weights gathered for forward and backward."""
    total = 0.0
    for u in wl.units:
        every = wl.micro_batches if wl.gradients_every_microbatch else 1
        total += 2 * wl.micro_batches * (u.dp_weights.nbytes if u.dp_weights else 0)
        total += every * u.dp_gradients.nbytes
        total += u.dp_parameters.nbytes if u.dp_parameters else 0
    return total


def test_zero_volumes_follow_the_zero_paper():
    # Rajbhandari et al. 2020 §7.2: with Ψ gradient bytes, plain DP and ZeRO-1/2 send 2Ψ·(n-1)/n
    # per GPU per step (reduce-scatter + all-gather == all-reduce), ZeRO-3 3Ψ·(n-1)/n (1.5x).
    count = build_model(scenario({"name": "t", "model": GPT}).model).parameters
    psi = 2 * count  # bf16
    tr = {"seq_len": 2048, "grad_accumulation": 1}
    sent = {z: _sent_per_step(_work(GPT, {"data": 16, "zero_stage": z}, tr)) for z in range(4)}
    assert sent[0] == pytest.approx(2 * psi * 15 / 16)
    assert sent[1] == pytest.approx(2 * psi * 15 / 16)
    assert sent[2] == pytest.approx(2 * psi * 15 / 16)
    assert sent[3] == pytest.approx(3 * psi * 15 / 16)


def test_zero3_gathers_each_unit_before_use_and_reduce_scatters_every_micro_batch():
    wl = _work(GPT, {"data": 4, "zero_stage": 3}, {"grad_accumulation": 3})
    assert wl.gradients_every_microbatch
    for u in wl.units:
        assert u.dp_weights.nbytes == pytest.approx(3 / 4 * u.weights_full)  # all-gather
        assert u.dp_gradients.nbytes == pytest.approx(3 / 4 * u.gradients_full)  # r-scatter
        assert u.dp_parameters is None  # weights stay sharded: nothing to gather after


def test_zero1_reduce_scatters_once_and_gathers_the_updated_weights():
    wl = _work(GPT, {"data": 4, "zero_stage": 1}, {"grad_accumulation": 3})
    assert not wl.gradients_every_microbatch
    for u in wl.units:
        assert u.dp_weights is None
        assert u.dp_gradients.nbytes == pytest.approx(3 / 4 * u.gradients_full)
        assert u.dp_parameters.nbytes == pytest.approx(3 / 4 * u.weights_full)


def test_a_pipeline_send_is_a_slice_of_the_activations_over_one_nic():
    # p = 4, t = 8: each stage fills a node, so neighbours send over the network, one NIC
    # (200 Gb/s = 25 GB/s, 14 us); 1/t of s·b·h each (Narayanan §4.1 scatter/gather), and the
    # receiver all-gathers the 8 pieces over NVLink: 7/8 of s·b·h at 300 GB/s, 7 hops of 3.4
    # us (this network gives no efficiency: NCCL reaching the links' full rate).
    model = {"preset": "megatron-22b", "layers": 48}
    par = {"tensor": 8, "pipeline": 4, "virtual_pipeline": 2}
    s = _setup(model, par, {"seq_len": 2048, "micro_batch_size": 4, "grad_accumulation": 8})
    s = s.model_copy(update={"hardware": s.hardware.model_copy(update={"network": DGX_A100})})
    gather = 7 / 8 * SBH / 300e9 + 7 * 3.4e-6
    assert p2p_send_s(resolve(s), 6144) == pytest.approx(SBH / 8 / 25e9 + 14e-6 + gather)


def test_tied_embeddings_sync_their_gradients_between_first_and_last_stage():
    s = _setup(GPT, {"tensor": 8, "pipeline": 4})
    model = build_model(s.model)
    res = resolve(s)
    sync = embedding_sync(res, model, 0)
    # ceil(51,200 / 8) x 6144 bf16 gradients, all-reduced by two ranks: 2(2-1)/2 = 1 x buffer
    assert sync.group == "embedding" and sync.nbytes == math.ceil(51200 / 8) * 6144 * 2
    assert embedding_sync(res, model, 3) is not None and embedding_sync(res, model, 1) is None


def test_more_network_bandwidth_never_slows_the_step_collectives():
    par = {"data": 4, "tensor": 8, "pipeline": 2, "zero_stage": 1}
    totals = []
    for nic in ("100 Gb/s", "200 Gb/s", "400 Gb/s", "800 Gb/s"):
        hw = {"preset": "dgx-a100", "network": {"inter_node_bandwidth": nic}}
        s = scenario({"name": "t", "model": GPT, "parallel": par, "hardware": hw})
        cap = capacities(resolve(s))
        comms = [c for u in build_workload(resolve(s)).units for c in _comms(u).values()]
        totals.append(sum(c.latency_s + c.nbytes / cap[c.resource] for c in comms))
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
