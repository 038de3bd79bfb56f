"""Every byte a step moves counts on the link it crosses (tiersim.workload.link_bytes,
tiersim.engine.link_totals): the pipeline's point-to-point sends, and the NVLink part of an
MoE all-to-all that the engine times on the network. Expected bytes are worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from engine_helpers import merge, scenario

from tiersim.config.load import build
from tiersim.engine.simulate import simulate
from tiersim.report.text import PRICED_NOTE, step_tables
from tiersim.runner import report_for
from tiersim.state.resolved import resolve
from tiersim.workload.link_bytes import pipeline_bytes
from tiersim.workload.work import build_workload

# 4 dense layers, h = 64; one micro-batch s = 16 x b = 2 tokens; m = 4 micro-batches; bf16.
# DGX H100: 8 GPUs a node.
DENSE = {
    "layers": 4,
    "hidden": 64,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 100,
    "gated_mlp": True,
    "norm": "rmsnorm",
    "position": "rope",
}
HIDDEN = 16 * 2 * 64 * 2  # s x b x h x 2 B: 4,096 B of hidden states a micro-batch
M = 4


def dense(**parallel):
    return scenario(dense_raw(**parallel))


def dense_raw(**parallel):
    return {
        "name": "pp",
        "model": DENSE,
        "training": {"micro_batch_size": 2, "seq_len": 16, "grad_accumulation": M},
        "hardware": {"preset": "dgx-h100"},
        "parallel": parallel,
    }


def test_a_first_stage_sends_its_activations_over_nvlink_inside_a_node():
    s = dense(pipeline=2)  # stages 1 GPU apart: both in node 0
    assert build_workload(resolve(s)).stage == 0
    links = simulate(s).links
    # stage 0 sends each micro-batch's activations onward and no gradient back (it is first)
    assert links["nvlink"].bytes_by_direction["pipeline"] == M * HIDDEN  # 16,384 B
    assert "network" not in links


def test_interleaved_sends_across_nodes_go_on_the_network():
    s = dense(pipeline=2, virtual_pipeline=2, data=8)  # stages 8 GPUs apart: another node
    assert build_workload(resolve(s)).stage == 0
    links = simulate(s).links
    # stage 0 holds chunks 0 and 2 of 4: forward, both chunks send onward (2 x m); backward,
    # chunk 2 sends its gradient back to stage 1's chunk 1, chunk 0 (the first) sends none
    assert links["network"].bytes_by_direction["pipeline"] == (2 * M + M) * HIDDEN  # 49,152 B
    assert "pipeline" not in links["nvlink"].bytes_by_direction


def test_sequence_parallel_sends_a_tensor_rank_its_share():
    s = dense(pipeline=4, tensor=2, sequence=True)
    assert build_workload(resolve(s)).stage == 0
    per = simulate(s).links["nvlink"].bytes_by_direction
    assert per["pipeline"] == M * HIDDEN // 2  # s x b x h x 2 B / t, m sends onward: 8,192 B


def test_each_boundary_on_the_link_it_crosses():
    # tensor 4: pipeline stride 4, so stages 0 and 1 share node 0, stages 2 and 3 node 1
    r = resolve(dense(pipeline=4, tensor=4, sequence=True))
    piece = HIDDEN // 4  # 1,024 B a send
    # stage 1: activations to stage 2 (node 1) on the network, gradients to stage 0 on NVLink
    assert pipeline_bytes(r, 1) == {
        "network": {"pipeline": M * piece},
        "nvlink": {"pipeline": M * piece},
    }
    # stage 3 (last): gradients to stage 2, same node; no activations onward
    assert pipeline_bytes(r, 3) == {"nvlink": {"pipeline": M * piece}}


def test_without_sequence_parallelism_the_receiver_gathers_the_pieces():
    r = resolve(dense(pipeline=4, tensor=2))
    # stage 1 sends m activations (to 2) and m gradients (to 0): pieces of 4,096 / 2 B; it
    # gathers each of the 2 m pieces it receives over its tensor pair: a ring all-gather of
    # 4,096 B puts (t - 1) / t of it, 2,048 B, on NVLink
    assert pipeline_bytes(r, 1) == {"nvlink": {"pipeline": 2 * M * 2_048, "tensor": 2 * M * 2_048}}


def test_no_pipeline_no_sends():
    assert pipeline_bytes(resolve(dense(data=2)), 0) == {}


# test_moe.py's MoE model: layers 1-3 MoE, 16 experts, 2 per token; T = 32 tokens a micro-batch
MOE = {**DENSE, "experts": 16, "experts_per_token": 2, "expert_ffn_hidden": 32}
MOE["first_dense_layers"] = 1


@pytest.mark.parametrize("overlap", [False, True])
def test_an_all_to_all_across_nodes_counts_its_nvlink_part(overlap):
    raw = {
        "name": "moe",
        "model": MOE,
        "training": {"micro_batch_size": 2, "seq_len": 16, "grad_accumulation": 2},
        "hardware": {"preset": "dgx-h100"},
        "parallel": {"data": 16, "expert": 16, "overlap_expert_comm": overlap},
    }
    per = {k: v.bytes_by_direction for k, v in simulate(scenario(merge(raw, {}))).links.items()}
    rows = 2 * 32 * 64 * 2  # 2 experts a token x 32 tokens x h x bf16: 8,192 B a call
    # 16 expert ranks over two nodes of 8: 8/16 of the rows go to the other node (network);
    # 7/16 to the node's other GPUs over NVLink, and DeepEP forwards 7/8 of what arrives by
    # network to the node's other GPUs over NVLink: 7/16 + 8/16 x 7/8 = 14/16 of the rows
    calls = 4 * 3 * 2  # dispatch + combine forward and backward; 3 MoE layers; 2 micro-batches
    assert per["network"]["expert"] == math.floor(rows * 8 / 16 * calls)  # 98,304 B
    assert per["nvlink"]["expert"] == math.floor(rows * 14 / 16 * calls)  # 172,032 B
    # with the all-to-alls overlapped, the engine's flows carry only what outlasts the
    # computation beside them; every call still moves all its bytes


@pytest.mark.parametrize(("parallel", "said"), [({"pipeline": 2}, True), ({"data": 2}, False)])
def test_the_link_table_says_which_bytes_no_flow_carries(parallel, said):
    report = report_for(build(dense_raw(**parallel), Path("."), "test.yaml"))
    assert (PRICED_NOTE in step_tables(report)) is said
