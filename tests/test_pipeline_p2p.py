"""Megatron-Core's interleaved pipeline exchange (tiersim.workload.pipeline_p2p): which
neighbours sit on other nodes, one steady-state batched exchange's time, and its split over
the forward and backward ops of the all-stage evaluation. Expected values by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import published
from hypothesis import given, settings
from hypothesis import strategies as st

from tiersim.config.parallel_schema import Parallel
from tiersim.workload.pipeline_p2p import (
    interleaved_exchange_s,
    neighbours_off_node,
    off_node,
    op_costs,
)

# DGX H100 (tiersim/presets/hardware/dgx-h100.yaml): one 400 Gb/s NIC per GPU = 50e9 B/s,
# 14 us a hop, NCCL reaching 0.9 of it. Llama 2 13B's activation at 4096 tokens, micro-batch
# 1, hidden 5120, bf16: 4096 x 5120 x 2 = 41,943,040 B. One send over InfiniBand:
# 41,943,040 / 50e9 = 838.8608 us at the rate, / 0.9: + 93.2068 us, + 14 us = 946.0676 us.
IB_SEND_13B_S = 41_943_040 / 50e9 / 0.9 + 14e-6


@pytest.fixture(scope="module")
def llama2_13b():
    return published("nemo2407-llama2-13b-16gpus.yaml")


def test_ib_send_by_hand():
    assert math.isclose(IB_SEND_13B_S, 946.0676e-6, rel_tol=1e-7)


def test_two_stages_a_node_have_one_neighbour_on_the_other_node():
    # TP 1 x DP 4 per stage: stage k holds ranks 4k..4k+3, stages 0 and 1 on node 0, 2 and 3
    # on node 1. Interleaved neighbours: 0 <-> 3 (wrap) and 1 <-> 2 cross, 0 <-> 1 and
    # 2 <-> 3 do not: every stage has one of each.
    par = Parallel(data=4, tensor=1, pipeline=4, virtual_pipeline=10)
    assert neighbours_off_node(par, 8) == [1, 1, 1, 1]


def test_a_stage_per_node_or_more_has_both_neighbours_off_node():
    # TP 4 x DP 4 = 16 ranks a stage: two nodes each, every neighbour elsewhere
    par = Parallel(data=4, tensor=4, pipeline=4, virtual_pipeline=5)
    assert neighbours_off_node(par, 8) == [2, 2, 2, 2]


def test_a_pipeline_inside_one_node_crosses_none():
    # TP 2 x DP 2 = 4 ranks a stage, 2 stages: ranks 0..7, one node
    par = Parallel(data=2, tensor=2, pipeline=2, virtual_pipeline=2)
    assert neighbours_off_node(par, 8) == [0, 0]


def test_llama2_13b_exchange_is_one_send_over_infiniband(llama2_13b):
    # each stage sends one tensor over its NIC (the other over NVLink, 450 GB/s: ~0.1 ms),
    # the two at once: the exchange is the InfiniBand send, 946.0676 us
    assert math.isclose(interleaved_exchange_s(llama2_13b, 5120), IB_SEND_13B_S, rel_tol=1e-9)


def test_interleaved_ops_carry_half_an_exchange_each_and_delay_the_data_by_half(llama2_13b):
    busy, arrive = op_costs(llama2_13b, 5120)
    assert math.isclose(busy, IB_SEND_13B_S / 2, rel_tol=1e-9)
    assert math.isclose(arrive, IB_SEND_13B_S / 2, rel_tol=1e-9)
    # per step on one stage: m x v pairs x one exchange = 32 x 10 x 946.0676 us = 0.302742 s
    # (two sends per pair, 0.605483 s, before: Megatron batches the pair's two into one)
    assert math.isclose(2 * busy * 32 * 10, 0.30274163, rel_tol=1e-6)


def test_plain_1f1b_keeps_one_send_on_every_op(llama2_13b):
    par = llama2_13b.execution.parallel.model_copy(update={"virtual_pipeline": 1})
    execution = dataclasses.replace(llama2_13b.execution, parallel=par)
    plain = dataclasses.replace(llama2_13b, execution=execution)
    busy, arrive = op_costs(plain, 5120)
    assert math.isclose(busy, IB_SEND_13B_S, rel_tol=1e-9)
    assert arrive == 0.0


def test_both_neighbours_off_node_send_two_tensors_through_one_nic():
    # GPT-3 175B on 128 GPUs (TP 4, PP 8, DP 4, sequence parallel): a stage spans two nodes;
    # piece = 2048 x 12288 x 2 / 4 = 12,582,912 B; one send 12,582,912 / 50e9 / 0.9 + 14 us
    # = 279.6203 + 14 = 293.6203 us; two through the NIC: 587.2406 us
    r = published("nemo2407-gpt3-175b-128gpus.yaml")
    send = 12_582_912 / 50e9 / 0.9 + 14e-6
    assert math.isclose(interleaved_exchange_s(r, 12288), 2 * send, rel_tol=1e-9)
    assert math.isclose(2 * send, 587.2406e-6, rel_tol=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 16))
def test_each_stages_neighbours_off_node_rank_by_rank(p, stride, gpus_per_node):
    # stage k's rank j is k·stride + j, on node (k·stride + j) // gpus_per_node; its worst
    # rank counts how many of stages k - 1 and k + 1 (modulo p) have that rank elsewhere
    want = []
    for k in range(p):
        worst = 0
        for j in range(min(stride, gpus_per_node)):
            here = (k * stride + j) // gpus_per_node
            for_j = sum(
                ((q * stride + j) // gpus_per_node) != here for q in ((k - 1) % p, (k + 1) % p)
            )
            worst = max(worst, for_j)
        want.append(worst)
    assert off_node(p, stride, gpus_per_node) == want
