"""The MoE step beyond its GEMMs' FLOPs (tiersim/workload/moe_kernels.py, experts.py): the
router's, permutation's and re-sorting's bytes, the busiest rank's grouped GEMMs, the
dispatch/combine all-to-alls on NVLink and the network, and their overlap with an adjacent
micro-batch's computation; every expected figure worked out by hand here."""

from __future__ import annotations

import pytest
from engine_helpers import merge, scenario
from test_moe import small

from tiersim.engine.simulate import simulate
from tiersim.state.model import LayerView
from tiersim.state.resolved import resolve
from tiersim.workload.comms import alone_s
from tiersim.workload.experts import all_to_all_s
from tiersim.workload.moe_kernels import MoeShape, busiest_rank_slowdown, moe_bytes
from tiersim.workload.stage_times import grouped_slowdown
from tiersim.workload.work import build_workload

NVLINK = 450e9 * 153 / 160  # dgx-h100's NVLink per direction at DeepEP's intranode share
NIC = 50e9 * 43 / 50  # its 400 Gb/s NIC at DeepEP's internode (RDMA) share


def test_moe_block_bytes_by_hand():
    # 32 tokens, 16 experts over 8 ranks (2 a GPU: received tokens re-sorted), top-2, h 64,
    # the busiest rank receiving 1.5x the mean
    shape = MoeShape(32, 16, 2, 1.0, 64, 8, 1.5)
    routed = 2 * 32 * 64  # R = 4,096 routed elements; received 1.5 x R = 6,144
    scores, tokens = 32 * 16, 32 * 64
    # forward: router 512 x 23; permute + unpermute 6 R + 2 per token element; sort 8 x 6,144
    assert moe_bytes(shape, 0) == 512 * 23 + 6 * routed + 2 * tokens + 8 * 6_144 == 89_600
    # backward: router 512 x 22; 8 R + 2 per token element; sort 8 x 6,144
    assert moe_bytes(shape, 1) == scores * 22 + 8 * routed + 2 * tokens + 8 * 6_144 == 97_280
    # one expert a GPU (16 over 16 ranks): nothing to re-sort
    one = MoeShape(32, 16, 2, 1.0, 64, 16, 1.5)
    assert moe_bytes(one, 0) == 512 * 23 + 6 * routed + 2 * tokens == 40_448


def test_the_busiest_rank_sets_the_grouped_gemms_pace():
    # routed experts 40 % of the layer's FLOPs at 0.8 of the dense rate, 1.5x the mean rows:
    # 0.6 + 0.4 x 1.5 / 0.8 = 1.35
    assert busiest_rank_slowdown(0.4, 0.8, 1.5) == pytest.approx(1.35, rel=1e-15)
    assert busiest_rank_slowdown(0.4, 1.0, 1.0) == pytest.approx(1.0, rel=1e-15)


def _mixtral(**parallel):
    """Mixtral's first 2 layers, 1,024 tokens, 8 expert ranks in one DGX H100 node."""
    return {
        "name": "mixtral",
        "model": {"preset": "mixtral-8x7b", "layers": 2},
        "training": {"seq_len": 1024, "micro_batch_size": 1, "recompute": "none"},
        "parallel": {"data": 8, "expert": 8, **parallel},
        "hardware": {"preset": "dgx-h100"},
    }


def _two_nodes(**parallel):
    over = {"experts": 16}
    return small(model=over, parallel={"data": 16, "expert": 16, **parallel})


def test_an_all_to_all_over_two_nodes_by_hand():
    # 2 experts a token x 32 tokens x h 64 x bf16 = 8,192 B, x 1.5 on the busiest rank =
    # 12,288 B. 16 expert ranks, 8 a node: 8/16 of it crosses the network (6,144 B); 7/16
    # goes to the node's other GPUs (5,376 B) and the 7/8 of what arrives by RDMA that is
    # forwarded to them (5,376 B) over NVLink: 10,752 B. The network binds; 15 hops of 14 us.
    r = resolve(scenario(_two_nodes(expert_imbalance=1.5)))
    model = r.model
    want = max(10_752 / NVLINK, 6_144 / NIC) + 15 * 14e-6
    assert 6_144 / NIC > 10_752 / NVLINK
    assert all_to_all_s(r, model) == pytest.approx(want, rel=1e-12)
    # a layer's forward dispatches and combines: two of them alone, its flow on the network
    u = build_workload(r).units[1]
    assert u.ep_forward.resource.channel == "network"
    assert alone_s(r, u.ep_forward) == pytest.approx(2 * want, rel=1e-12)
    assert alone_s(r, u.ep_backward) == pytest.approx(2 * want, rel=1e-12)


def test_an_all_to_all_inside_one_node_by_hand():
    # 8 expert ranks in one node: 7/8 of 8,192 B over NVLink, 7 hops of 3.4 us
    r = resolve(scenario(small(parallel={"data": 8, "expert": 8})))
    want = 8_192 * 7 / 8 / NVLINK + 7 * 3.4e-6
    assert all_to_all_s(r, r.model) == pytest.approx(want, rel=1e-12)


def test_overlapped_all_to_alls_block_only_what_outlasts_the_other_pass():
    # Tiny layers compute for nanoseconds: the all-to-alls (hundreds of us) outlast them.
    # Each pass's pair beside the other pass's computation of the layer, waited for at that
    # computation's end (issue 39): after the forward, the backward pair's alone - the
    # forward's seconds, after the backward the forward pair's alone - the backward's; the
    # waits move no bytes, the flows beside carry both pairs whole. The computation slows
    # by gpu.collective_sm_share (0.15) x the time the communication runs beside it (all
    # of it: the computation is shorter)
    plain = build_workload(resolve(scenario(_two_nodes()))).units[1]
    r = resolve(scenario(_two_nodes(overlap_expert_comm=True)))
    u = build_workload(r).units[1]
    pair = 2 * all_to_all_s(r, r.model)
    assert alone_s(r, u.ep_forward) == pytest.approx(pair - plain.forward_s, rel=1e-9)
    assert alone_s(r, u.ep_backward) == pytest.approx(pair - plain.backward_s, rel=1e-9)
    assert u.ep_forward.nbytes == u.ep_backward.nbytes == 0
    # 8,192 B routed a call at imbalance 1, 8/16 of it over the network
    # (test_an_all_to_all_over_two_nodes_by_hand), two calls a pass
    assert u.ep_forward_hidden.nbytes == u.ep_backward_hidden.nbytes == 2 * 8_192 * 8 / 16
    assert u.forward_s == pytest.approx(plain.forward_s * 1.15, rel=1e-12)
    assert u.backward_s == pytest.approx(plain.backward_s * 1.15, rel=1e-12)


def test_overlapped_all_to_alls_hide_under_a_longer_pass():
    # Mixtral's 2 first layers, 1,024 tokens, 8 expert ranks in a node: a forward pair is
    # 2 x (2 x 1,024 x 4,096 x 2 B x 7/8 / NVLINK + 7 x 3.4 us) = 0.116 ms, a layer's
    # forward about 1 ms: nothing blocks; the computation pays 0.15 x the pair's time
    plain = build_workload(resolve(scenario(_mixtral()))).units[0]
    r = resolve(scenario(_mixtral(overlap_expert_comm=True)))
    u = build_workload(r).units[0]
    pair = 2 * (2 * 1024 * 4096 * 2 * 7 / 8 / NVLINK + 7 * 3.4e-6)
    assert pair == pytest.approx(1.16e-4, rel=0.01)
    assert u.ep_forward is None and u.ep_backward is None
    assert u.forward_s == pytest.approx(plain.forward_s + 0.15 * pair, rel=1e-9)
    assert u.backward_s == pytest.approx(plain.backward_s + 0.15 * pair, rel=1e-9)


@pytest.mark.parametrize("overlap", [False, True])
def test_more_network_bandwidth_never_slows_an_expert_parallel_step(overlap):
    def step(nic: str) -> float:
        raw = _two_nodes(overlap_expert_comm=overlap)
        raw = merge(raw, {"hardware": {"network": {"inter_node_bandwidth": nic}}})
        return simulate(scenario(merge(raw, {"simulation": {"link_sharing": "ordered"}}))).time_s

    assert step("800 Gb/s") <= step("400 Gb/s") * (1 + 1e-12)


def test_unlimited_bandwidth_and_no_hops_expose_nothing():
    # NVLink and the NIC at 1e18 B/s, no hop latency: 6,144 B / (1e18 x 0.86) = 7.1e-15 s
    fast = {
        "intra_node_bandwidth": "1000000 TB/s",
        "inter_node_bandwidth": "1000000 TB/s",
        "intra_node_latency": "0 us",
        "inter_node_latency": "0 us",
    }
    r = resolve(scenario(merge(_two_nodes(), {"hardware": {"network": fast}})))
    assert all_to_all_s(r, r.model) == pytest.approx(6_144 / (1e18 * 0.86), rel=1e-12)
    assert (
        simulate(
            scenario(merge(_two_nodes(), {"hardware": {"network": fast}}))
        ).exposed_collective_s
        < 1e-12
    )


def test_the_busiest_ranks_grouped_gemms_at_a_table_point():
    # Mixtral, 1,024 tokens, 8 experts over 8 ranks, the busiest rank receiving 2x the mean:
    # 2 experts a token x 1,024 tokens x 8 ranks / 8 experts x 2 = 4,096 rows a group, the
    # h100-sxm table's point 4,096 (DeepGEMM grouped over dense): the up / gate projections
    # (2/3 of the FLOPs) contract over Mixtral's hidden 4096, between the table's K 2048
    # (1.0) and 7168 (0.988) in log2: 1 + 0.553295 x (0.988 - 1) = 0.993360; the down
    # projection over 14,336, held at K 7168's 0.988: g = 1 / (2/3 / 0.993360 + 1/3 / 0.988)
    # = 0.991567. The routed experts' FLOPs 2 x 1,024 x 2 x 3 x 4,096 x 14,336 of the layer's
    # 824,700,829,696 (tests/test_moe_breakdown.py): its GEMMs take 1 - s + s x 2 / g as long
    r = resolve(scenario(_mixtral(expert_imbalance=2.0)))
    s = 2 * 1024 * 2 * 3 * 4096 * 14336 / 824_700_829_696
    assert grouped_slowdown(r, LayerView(r.model, 0)) == pytest.approx(
        1 - s + s * 2 / 0.991567, rel=1e-6
    )


def test_without_expert_parallelism_the_imbalance_slows_nothing_and_is_noted():
    # review 2026-12-07-g: with parallel.expert 1 every GPU runs all 8 experts over its own
    # 2 x 1,024 routed rows; no rank receives more than the mean, so 2x "imbalance" is 1x (the
    # memory side, layer_memory._busiest_extra, already kept no extra rows). Before, the
    # layer's GEMMs took 1 - s + s x 2 / g as long (Mixtral at 4,096 tokens: 5.80 -> 9.04 s).
    from tiersim.runner import scenario_notes

    balanced = resolve(scenario(_mixtral(expert=1)))
    skewed_raw = _mixtral(expert=1, expert_imbalance=2.0, overlap_expert_comm=True)
    skewed = resolve(scenario(skewed_raw))
    view = LayerView(skewed.model, 0)
    assert grouped_slowdown(skewed, view) == grouped_slowdown(
        balanced, LayerView(balanced.model, 0)
    )
    assert simulate(scenario(skewed_raw)).time_s == simulate(scenario(_mixtral(expert=1))).time_s
    notes = {(p.path, p.code) for p in scenario_notes(scenario(skewed_raw))}
    assert ("parallel.expert_imbalance", "W-NO-EFFECT") in notes
    assert ("parallel.overlap_expert_comm", "W-NO-EFFECT") in notes
    # with 8 expert ranks both act: no note
    ep = scenario(_mixtral(expert_imbalance=2.0, overlap_expert_comm=True))
    assert not [p for p in scenario_notes(ep) if p.path.startswith("parallel.")]
    # a dense model: the note names what is missing
    dense = _mixtral(expert_imbalance=1.5)
    dense["model"] = {"preset": "llama-3-8b", "layers": 2}
    dense["parallel"] = {"data": 8, "expert_imbalance": 1.5}
    (note,) = [p for p in scenario_notes(scenario(dense)) if p.path.startswith("parallel.")]
    assert note.code == "W-NO-EFFECT" and "dense" in note.message


def test_a_capacity_factor_caps_the_busiest_rank_so_the_imbalance_adds_nothing():
    # review 2026-12-07-g: with model.capacity_factor 1.25 every expert computes its capacity,
    # 1.25 x its mean rows (padded, Moe.padding), on every rank: no rank can receive more, so
    # imbalance 3 must price what imbalance 1 does (and is not refused: the cap is the bound).
    # Before, the busiest rank's GEMMs, all-to-alls and extra rows were 3x the padded figure
    # (Mixtral TP 2 x EP 8 at 4,096 tokens: 9.042 s a step against 4.024 s).
    from tiersim.runner import scenario_notes

    def raw(imbalance: float) -> dict:
        r = _mixtral(expert_imbalance=imbalance)
        r["model"]["capacity_factor"] = 1.25
        return r

    skewed, even = resolve(scenario(raw(3.0))), resolve(scenario(raw(1.0)))
    assert all_to_all_s(skewed, skewed.model) == all_to_all_s(even, even.model)
    assert grouped_slowdown(skewed, LayerView(skewed.model, 0)) == grouped_slowdown(
        even, LayerView(even.model, 0)
    )
    assert simulate(scenario(raw(3.0))).time_s == simulate(scenario(raw(1.0))).time_s
    (note,) = [p for p in scenario_notes(scenario(raw(3.0))) if p.path.startswith("parallel.")]
    assert note.code == "W-NO-EFFECT" and "capacity_factor 1.25" in note.message
